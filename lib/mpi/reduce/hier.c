/* The two-level reduce (TCOLL_ALGO reduce:hier), for communicators spanning several nodes
 * (../hier.h): each node reduces its ranks' inputs to its leader through the small shared-memory
 * protocol, the leaders reduce their nodes' results with MPI_Ireduce to the root's node's leader,
 * which publishes the result to its node when the root is not the leader itself. AVG divides
 * once, at the root. A vector larger than a slot goes chunk by chunk (hier.h). */
#include "../hier.h"

#include "../../base/dtype.h"

/* Where this rank stands: on the root's node, and whether the root leads that node. */
typedef struct roles {
  bool root_node, root_leads;
} roles_t;

static roles_t roles_of(const tc_node_hier_t *h, int me, int root) {
  return (roles_t){.root_node = h->leader_of[me] == h->leader_of[root],
                   .root_leads = h->local_of[root] == 0};
}

/* One chunk; acc: the leader's node sum of the whole vector (NULL where this rank needs none). */
static int build_chunk(tc_work_t *w, const tc_algo_call_t *c, int64_t at, void *arg) {
  tc_node_hier_t *h = w->comm->hier;
  int me = w->comm->rank, root = c->root;
  roles_t r = roles_of(h, me, root);
  void *acc = me == root && r.root_leads ? c->dst
              : arg                      ? (char *)arg + (size_t)at * tc_dtype_size(c->dtype)
                                         : NULL;
  tc_algo_call_t up = *c, down = *c;
  up.dst = h->leader ? acc : NULL;
  up.root = down.root = 0;
  up.divisor = 1.0;
  down.src = acc;
  down.dst = me == root ? c->dst : acc;
  int rc = tc_hier_node_phase(w, h, &up, TC_SHM_REDUCE);
  if (!rc) rc = tc_hier_leaders_step(&w->sched, h, TC_COLL_REDUCE, acc, c, h->leader_of[root]);
  if (!rc && r.root_node && !r.root_leads) rc = tc_hier_node_phase(w, h, &down, TC_SHM_BROADCAST);
  if (!rc && me == root && c->divisor != 1.0)
    rc = tc_sched_scale(&w->sched, c->dst, c->dst, c->n, c->dtype, 1.0, c->divisor, true);
  return rc;
}

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  tc_node_hier_t *h = w->comm->hier;
  int me = w->comm->rank, root = c->root;
  roles_t r = roles_of(h, me, root);
  /* the leader's node sum: in the root's output where the root leads, else scratch */
  void *acc = NULL;
  if (!(me == root && r.root_leads) && (h->leader || (r.root_node && me != root)) &&
      !(acc = tc_work_scratch(w, (size_t)c->n * tc_dtype_size(c->dtype))))
    return TCOLL_ERR_NO_MEMORY;
  return tc_hier_build_chunked(w, c, build_chunk, acc);
}

const tc_algo_t tc_reduce_hier = {
    .name = "hier", .layouts = TC_LAYOUT_CONTIG, .supported = tc_hier_supported, .build = build};
