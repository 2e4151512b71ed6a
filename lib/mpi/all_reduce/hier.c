/* The two-level all_reduce (TCOLL_ALGO all_reduce:hier), for communicators spanning several nodes
 * (../hier.h): each node reduces its ranks' inputs to its leader through the small shared-memory
 * protocol, the leaders all-reduce their nodes' results with MPI_Iallreduce, and each leader
 * publishes the result to its node. Every rank gets the leaders' bits: each node's sum in rank
 * order, then the MPI's sum of the nodes'. AVG divides once, at the leaders. A vector larger than
 * a slot goes chunk by chunk (hier.h). */
#include "../hier.h"

static int build_chunk(tc_work_t *w, const tc_algo_call_t *c, int64_t at, void *arg) {
  (void)at, (void)arg;
  tc_node_hier_t *h = w->comm->hier;
  tc_algo_call_t up = *c, down = *c;
  up.root = down.root = 0; /* the leader: its node's rank 0 */
  up.divisor = 1.0;
  down.src = c->dst;
  int rc = tc_hier_node_phase(w, h, &up, TC_SHM_REDUCE);
  if (!rc) rc = tc_hier_leaders_step(&w->sched, h, TC_COLL_ALLREDUCE, c->dst, c, 0);
  if (!rc && h->leader && c->divisor != 1.0)
    rc = tc_sched_scale(&w->sched, c->dst, c->dst, c->n, c->dtype, 1.0, c->divisor, true);
  if (!rc && h->local) rc = tc_hier_node_phase(w, h, &down, TC_SHM_BROADCAST);
  return rc;
}

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  return tc_hier_build_chunked(w, c, build_chunk, NULL);
}

const tc_algo_t tc_all_reduce_hier = {
    .name = "hier", .layouts = TC_LAYOUT_CONTIG, .supported = tc_hier_supported, .build = build};
