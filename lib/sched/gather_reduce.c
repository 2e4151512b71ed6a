/* Composed algorithms built on one MPI collective each (see algorithms.h): an all-to-all
 * followed by a local reduction, and an all-gather of uneven blocks. */
#include "algorithms.h"

#include "../base/dtype.h"

size_t tc_allgatherv_scratch(int p) { return 2 * (size_t)p * sizeof(int); }

bool tc_allgatherv_fits(int64_t n, int p) { return tc_block_count(n, p, 0) <= tc_mpi_limit() && n <= INT_MAX; }

int tc_build_allgatherv(tc_sched_t *s, void *buf, int64_t n, tcoll_dtype_t d, void *scratch) {
  int p = s->comm->size;
  if (p == 1) return TCOLL_SUCCESS;
  int *counts = scratch, *displs = counts + p; /* MPI reads them until the call completes */
  for (int b = 0; b < p; b++) {
    counts[b] = (int)tc_block_count(n, p, b);
    displs[b] = (int)tc_block_offset(n, p, b);
  }
  tc_step_t *st = tc_sched_add(s, TC_STEP_COLL, true);
  if (!st) return TCOLL_ERR_NO_MEMORY;
  st->u.coll.what = TC_COLL_ALLGATHERV;
  st->u.coll.sbuf = MPI_IN_PLACE;
  st->u.coll.rbuf = buf;
  st->u.coll.counts = counts;
  st->u.coll.displs = displs;
  st->u.coll.dt = tc_mpi_dtype(d);
  return TCOLL_SUCCESS;
}

size_t tc_alltoall_reduce_scatter_scratch(int64_t nper, int p, tcoll_dtype_t d) {
  return (size_t)p * (size_t)nper * tc_dtype_size(d);
}

bool tc_alltoall_fits(int64_t nper) { return nper <= tc_mpi_limit(); }

int tc_build_alltoall_reduce_scatter(tc_sched_t *s, const void *in, void *out, int64_t nper, tcoll_dtype_t d,
                                     MPI_Op op, void *scratch) {
  int p = s->comm->size;
  size_t es = tc_dtype_size(d), block = (size_t)nper * es;
  tc_step_t *st = tc_sched_add(s, TC_STEP_COLL, true);
  if (!st) return TCOLL_ERR_NO_MEMORY;
  st->u.coll.what = TC_COLL_ALLTOALL;
  st->u.coll.sbuf = in;
  st->u.coll.rbuf = scratch;
  st->u.coll.count = (int)nper;
  st->u.coll.dt = tc_mpi_dtype(d);
  char *blocks = scratch;
  int rc = tc_sched_copy(s, out, blocks, block, true);
  for (int k = 1; k < p && !rc; k++) rc = tc_sched_reduce(s, blocks + (size_t)k * block, out, nper, d, op, true);
  return rc;
}
