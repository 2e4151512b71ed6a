/* The two-level algorithms' pieces (see hier.h). */
#include "hier.h"

#include "../base/dtype.h"

bool tc_hier_supported(const tc_algo_query_t *q) {
  tc_node_hier_t *h = tc_node_hier_of(q->comm);
  return q->count > 0 && h && q->bytes <= h->max_bytes; /* (max_bytes: the same everywhere) */
}

int tc_hier_node_phase(tc_work_t *w, const tc_node_hier_t *h, const tc_algo_call_t *c,
                       tc_shm_kind_t kind) {
  if (h->local) return tc_shm_small_build_on(w, h->local, c, kind);
  tc_sched_t *s = &w->sched;
  if (kind == TC_SHM_REDUCE && c->premul != 1.0)
    return tc_sched_scale(s, c->dst, c->src, c->n, c->dtype, c->premul, 1.0, true);
  if (!c->src || !c->dst || c->src == c->dst) return TCOLL_SUCCESS;
  return tc_sched_copy(s, c->dst, c->src, (size_t)c->n * tc_dtype_size(c->dtype), true);
}

int tc_hier_leaders_step(tc_sched_t *s, const tc_node_hier_t *h, tc_coll_kind_t what, void *buf,
                         const tc_algo_call_t *c, int root) {
  if (!h->leader) return TCOLL_SUCCESS;
  int me = h->leader_of[s->comm->rank]; /* (a leader: its own rank among the leaders) */
  /* (MPI_Ireduce: in place at its root only; the others send buf) */
  const void *send = what == TC_COLL_REDUCE && me != root ? buf : MPI_IN_PLACE;
  int rc = tc_sched_coll(s, what, send, buf, c->n, tc_mpi_dtype(c->dtype), c->op, root, true);
  if (!rc) s->steps[tc_sched_last(s)].u.coll.on = h->leaders;
  return rc;
}
