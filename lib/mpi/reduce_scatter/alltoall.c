/* The all-to-all reduce_scatter (TCOLL_ALGO reduce_scatter:alltoall), blocks one after the other
 * only: one MPI_Ialltoall of the p blocks, then this rank's result = block of rank p-1 (op) ...
 * (op) block of rank 0, reduced on the host in rank order. Blocks above the per-call limit take
 * MPI_Ialltoall_c where MPI has it; without it the ring runs instead (its fallback). */
#include "../algo.h"

#include "../../base/dtype.h"

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  int p = w->comm->size;
  const void *src;
  int rc = tc_algo_scaled_src(w, c, c->n * p, &src);
  if (rc) return rc;
  size_t block = (size_t)c->n * tc_dtype_size(c->dtype);
  char *blocks = tc_work_scratch(w, (size_t)p * block); /* every rank's block of this rank */
  if (!blocks) return TCOLL_ERR_NO_MEMORY;
  tc_sched_t *s = &w->sched;
  rc = tc_sched_coll(s, TC_COLL_ALLTOALL, src, blocks, c->n, tc_mpi_dtype(c->dtype), MPI_OP_NULL, 0,
                     true);
  if (!rc) rc = tc_sched_copy(s, c->dst, blocks, block, true);
  for (int k = 1; k < p && !rc; k++)
    rc = tc_sched_reduce(s, blocks + (size_t)k * block, c->dst, c->n, c->dtype, c->op, true);
  if (!rc && c->divisor != 1.0)
    rc = tc_sched_scale(s, c->dst, c->dst, c->n, c->dtype, 1.0, c->divisor, true);
  return rc;
}

/* One MPI_Ialltoall block per rank must fit the per-call limit or go in MPI_Ialltoall_c. */
static bool supported(const tc_algo_query_t *q) {
  return q->count > 0 && tc_mpi_one_call(q->count / q->comm->size);
}

const tc_algo_t tc_reduce_scatter_alltoall = {.name = "alltoall",
                                              .layouts = TC_LAYOUT_CONTIG,
                                              .supported = supported,
                                              .build = build,
                                              .fallback = "ring"};
