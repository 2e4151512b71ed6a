/* The two-level all_reduce (TCOLL_ALGO all_reduce:hier), for communicators spanning several nodes
 * (../../node/hier.h): each node reduces its ranks' inputs to its leader through the small
 * shared-memory protocol, the leaders all-reduce their nodes' results with MPI_Iallreduce, and
 * each leader publishes the result to its node's ranks. Every rank gets the leaders' bits: each
 * node's sum in rank order, then the MPI's sum of the nodes'. AVG divides once, at the leaders. */
#include "../shm_small.h"

#include "../../base/dtype.h"
#include "../../node/hier.h"

static bool supported(const tc_algo_query_t *q) {
  tc_node_hier_t *h = tc_node_hier_of(q->comm);
  return q->count > 0 && h && q->bytes <= h->max_bytes; /* (max_bytes: the same everywhere) */
}

/* The node's ranks to the leader's output, unscaled; or, alone on the node, the input there. */
static int build_gather(tc_work_t *w, const tc_node_hier_t *h, const tc_algo_call_t *c) {
  tc_algo_call_t local = *c;
  local.root = 0;
  local.divisor = 1.0;
  if (h->local) return tc_shm_small_build_on(w, h->local, &local, TC_SHM_REDUCE);
  tc_sched_t *s = &w->sched;
  if (c->premul != 1.0)
    return tc_sched_scale(s, c->dst, c->src, c->n, c->dtype, c->premul, 1, true);
  if (c->src == c->dst) return TCOLL_SUCCESS;
  return tc_sched_copy(s, c->dst, c->src, (size_t)c->n * tc_dtype_size(c->dtype), true);
}

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  tc_node_hier_t *h = w->comm->hier;
  tc_sched_t *s = &w->sched;
  int rc = build_gather(w, h, c);
  if (!rc && h->leader && h->nodes > 1) {
    rc = tc_sched_coll(s, TC_COLL_ALLREDUCE, MPI_IN_PLACE, c->dst, c->n, tc_mpi_dtype(c->dtype),
                       c->op, 0, true);
    if (!rc) s->steps[tc_sched_last(s)].u.coll.on = h->leaders;
  }
  if (!rc && h->leader && c->divisor != 1.0)
    rc = tc_sched_scale(s, c->dst, c->dst, c->n, c->dtype, 1.0, c->divisor, true);
  if (rc || !h->local) return rc;
  tc_algo_call_t release = *c;
  release.src = c->dst;
  release.root = 0;
  return tc_shm_small_build_on(w, h->local, &release, TC_SHM_BROADCAST);
}

const tc_algo_t tc_all_reduce_hier = {
    .name = "hier", .layouts = TC_LAYOUT_CONTIG, .supported = supported, .build = build};
