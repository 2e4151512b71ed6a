/* Composed algorithms built on one MPI collective each (see algorithms.h): an all-to-all
 * followed by a local reduction, and an all-gather of uneven blocks. Blocks above the per-call
 * limit take the collectives' _c forms where MPI has them. */
#include "algorithms.h"

#include "../base/dtype.h"

size_t tc_allgatherv_scratch(int p) { return (size_t)p * (sizeof(MPI_Count) + sizeof(MPI_Aint)); }

/* Whether MPI_Iallgatherv's int counts and displacements hold blocks of n elements. */
static bool allgatherv_ints(int64_t n, int p) { return tc_block_count(n, p, 0) <= tc_mpi_limit() && n <= INT_MAX; }

bool tc_allgatherv_fits(int64_t n, int p) { return allgatherv_ints(n, p) || tc_mpi_large_count(); }

/* The counts and displacements of the blocks, as the arrays of type C the call takes. */
#define FILL_BLOCKS(C, D)                                                                        \
  do {                                                                                           \
    C *counts = scratch;                                                                         \
    D *displs = (D *)(counts + p);                                                               \
    for (int b = 0; b < p; b++) {                                                                \
      counts[b] = (C)tc_block_count(n, p, b);                                                    \
      displs[b] = (D)tc_block_offset(n, p, b);                                                   \
    }                                                                                            \
    st->u.coll.counts = counts;                                                                  \
    st->u.coll.displs = displs;                                                                  \
  } while (0)

int tc_build_allgatherv(tc_sched_t *s, void *buf, int64_t n, tcoll_dtype_t d, void *scratch) {
  int p = s->comm->size;
  if (p == 1) return TCOLL_SUCCESS;
  int rc = tc_sched_coll(s, TC_COLL_ALLGATHERV, MPI_IN_PLACE, buf, 0, tc_mpi_dtype(d), MPI_OP_NULL, 0, true);
  if (rc) return rc;
  tc_step_t *st = &s->steps[tc_sched_last(s)];
  /* MPI reads the arrays until the call completes (scratch lives in the work). Above the int
   * counts, MPI_Iallgatherv_c (tc_allgatherv_fits let no other case through). */
  st->large = !allgatherv_ints(n, p);
  if (st->large) FILL_BLOCKS(MPI_Count, MPI_Aint);
  else FILL_BLOCKS(int, int);
  return TCOLL_SUCCESS;
}

size_t tc_alltoall_reduce_scatter_scratch(int64_t nper, int p, tcoll_dtype_t d) {
  return (size_t)p * (size_t)nper * tc_dtype_size(d);
}

bool tc_alltoall_fits(int64_t nper) { return tc_mpi_one_call(nper); }

int tc_build_alltoall_reduce_scatter(tc_sched_t *s, const void *in, void *out, int64_t nper, tcoll_dtype_t d,
                                     MPI_Op op, void *scratch) {
  int p = s->comm->size;
  size_t es = tc_dtype_size(d), block = (size_t)nper * es;
  int rc = tc_sched_coll(s, TC_COLL_ALLTOALL, in, scratch, nper, tc_mpi_dtype(d), MPI_OP_NULL, 0, true);
  char *blocks = scratch;
  if (!rc) rc = tc_sched_copy(s, out, blocks, block, true);
  for (int k = 1; k < p && !rc; k++) rc = tc_sched_reduce(s, blocks + (size_t)k * block, out, nper, d, op, true);
  return rc;
}
