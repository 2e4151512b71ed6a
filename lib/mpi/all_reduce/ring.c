/* The ring all_reduce (TCOLL_ALGO all_reduce:ring): a ring reduce_scatter, each block divided
 * once where it was reduced (AVG), then a ring all-gather; and ring_allgather: the same
 * reduce_scatter, then one MPI_Iallgatherv of the blocks. Every rank gets the same bits: each
 * block is reduced once, on one rank, then copied to the others. */
#include "../ring.h"

#include "../../base/dtype.h"

/* Scratch bytes of the MPI_Iallgatherv all-gather (its counts and displacements; 8-byte aligned).
 */
static size_t allgatherv_scratch(int p) {
  return (size_t)p * (sizeof(MPI_Count) + sizeof(MPI_Aint));
}

/* Whether MPI_Iallgatherv's int counts and displacements hold blocks of n elements. */
static bool allgatherv_ints(int64_t n, int p) {
  return tc_block_count(n, p, 0) <= tc_mpi_limit() && n <= INT_MAX;
}

/* The counts and displacements of the blocks, as the arrays of type C the call takes. */
#define FILL_BLOCKS(C, D)                      \
  do {                                         \
    C *counts = scratch;                       \
    D *displs = (D *)(counts + p);             \
    for (int b = 0; b < p; b++) {              \
      counts[b] = (C)tc_block_count(n, p, b);  \
      displs[b] = (D)tc_block_offset(n, p, b); \
    }                                          \
    st->u.coll.counts = counts;                \
    st->u.coll.displs = displs;                \
  } while (0)

/* MPI_Iallgatherv in place over buf's p blocks of n elements, posted once the steps before it
 * are done. */
static int build_allgatherv(tc_sched_t *s, void *buf, int64_t n, tcoll_dtype_t d, void *scratch) {
  int p = s->comm->size;
  if (p == 1) return TCOLL_SUCCESS;
  int rc = tc_sched_coll(s, TC_COLL_ALLGATHERV, MPI_IN_PLACE, buf, 0, tc_mpi_dtype(d), MPI_OP_NULL,
                         0, true);
  if (rc) return rc;
  tc_step_t *st = &s->steps[tc_sched_last(s)];
  /* MPI reads the arrays until the call completes (scratch lives in the work). Above the int
   * counts, MPI_Iallgatherv_c (supported_gatherv let no other case through). */
  st->large = !allgatherv_ints(n, p);
  if (st->large)
    FILL_BLOCKS(MPI_Count, MPI_Aint);
  else
    FILL_BLOCKS(int, int);
  return TCOLL_SUCCESS;
}

/* The ring reduce_scatter into this rank's block of c->dst, then the all-gather. */
static int build(tc_work_t *w, const tc_algo_call_t *c, bool gatherv) {
  int p = w->comm->size, r = w->comm->rank, rc;
  tc_sched_t *s = &w->sched;
  const void *src = c->src;
  if (c->premul != 1.0) { /* each rank's contribution is scaled first, into the output */
    if ((rc = tc_sched_scale(s, c->dst, src, c->n, c->dtype, c->premul, 1.0, true))) return rc;
    src = c->dst;
  }
  size_t ring_bytes =
      (tc_ring_reduce_scatter_scratch(c->n, p, c->dtype) + 7) & ~(size_t)7; /* arrays after it */
  char *scratch = tc_work_scratch(w, ring_bytes + (gatherv ? allgatherv_scratch(p) : 0));
  if (!scratch) return TCOLL_ERR_NO_MEMORY;
  char *mine = (char *)c->dst + (size_t)tc_block_offset(c->n, p, r) * tc_dtype_size(c->dtype);
  rc = tc_build_ring_reduce_scatter(s, src, mine, c->n, c->dtype, c->op, scratch, 0, NULL);
  if (!rc && c->divisor != 1.0) /* each block is divided once, where it was reduced */
    rc = tc_sched_scale(s, mine, mine, tc_block_count(c->n, p, r), c->dtype, 1.0, c->divisor, true);
  if (rc) return rc;
  if (gatherv) return build_allgatherv(s, c->dst, c->n, c->dtype, scratch + ring_bytes);
  return tc_build_ring_all_gather(s, c->dst, c->n, c->dtype, p);
}

static int build_ring(tc_work_t *w, const tc_algo_call_t *c) { return build(w, c, false); }
static int build_ring_allgather(tc_work_t *w, const tc_algo_call_t *c) { return build(w, c, true); }

static bool supported(const tc_algo_query_t *q) { return q->count > 0; }

/* Without large counts MPI_Iallgatherv takes int counts and displacements: beyond them the ring
 * gathers too (its fallback). */
static bool supported_gatherv(const tc_algo_query_t *q) {
  return q->count > 0 && (allgatherv_ints(q->count, q->comm->size) || tc_mpi_large_count());
}

const tc_algo_t tc_all_reduce_ring = {
    .name = "ring", .layouts = TC_LAYOUT_CONTIG, .supported = supported, .build = build_ring};
const tc_algo_t tc_all_reduce_ring_allgather = {.name = "ring_allgather",
                                                .layouts = TC_LAYOUT_CONTIG,
                                                .supported = supported_gatherv,
                                                .build = build_ring_allgather,
                                                .fallback = "ring"};
