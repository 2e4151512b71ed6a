/* The two-level broadcast (TCOLL_ALGO broadcast:hier), for communicators spanning several nodes
 * (../hier.h): the root's node gets its input through the small shared-memory protocol (its
 * leader among them), the leaders broadcast it with MPI_Ibcast from the root's node's leader, and
 * each other node's leader publishes it to its node. A vector larger than a slot goes chunk by
 * chunk (hier.h). */
#include "../hier.h"

static int build_chunk(tc_work_t *w, const tc_algo_call_t *c, int64_t at, void *arg) {
  (void)at, (void)arg;
  tc_node_hier_t *h = w->comm->hier;
  int me = w->comm->rank, root = c->root;
  bool root_node = h->leader_of[me] == h->leader_of[root];
  tc_algo_call_t local = *c;
  local.root = root_node ? h->local_of[root] : 0;
  if (!root_node) local.src = c->dst; /* (read at the leader, once the leaders' step wrote it) */
  int rc = TCOLL_SUCCESS;
  if (root_node) rc = tc_hier_node_phase(w, h, &local, TC_SHM_BROADCAST);
  if (!rc) rc = tc_hier_leaders_step(&w->sched, h, TC_COLL_BCAST, c->dst, c, h->leader_of[root]);
  if (!rc && !root_node && h->local) rc = tc_hier_node_phase(w, h, &local, TC_SHM_BROADCAST);
  return rc;
}

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  return tc_hier_build_chunked(w, c, build_chunk, NULL);
}

const tc_algo_t tc_broadcast_hier = {
    .name = "hier", .layouts = TC_LAYOUT_CONTIG, .supported = tc_hier_supported, .build = build};
