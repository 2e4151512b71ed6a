/* The two-level algorithms' pieces (see hier.h). */
#include "hier.h"

#include "../base/dtype.h"

#include <limits.h>

/* Steps of one chunk at most: two calls of the small protocol, the leaders' step, a scaling. */
#define CHUNK_STEPS (2 * TC_SHM_CALL_STEPS + 2)

bool tc_hier_supported(const tc_algo_query_t *q) {
  tc_node_hier_t *h = tc_node_hier_of(q->comm);
  if (q->count <= 0 || !h || h->max_bytes < tc_dtype_size(q->dtype)) return false;
  /* (max_bytes: the same everywhere) */
  return q->bytes / h->max_bytes < (size_t)INT_MAX / (2 * CHUNK_STEPS);
}

int tc_hier_build_chunked(tc_work_t *w, const tc_algo_call_t *c, tc_hier_chunk_fn chunk,
                          void *arg) {
  size_t elem = tc_dtype_size(c->dtype);
  int64_t per = (int64_t)(w->comm->hier->max_bytes / elem);
  int64_t chunks = (c->n + per - 1) / per;
  int rc = chunks > 1 ? tc_sched_reserve(&w->sched, (int)chunks * CHUNK_STEPS) : TCOLL_SUCCESS;
  for (int64_t at = 0; !rc && at < c->n; at += per) {
    tc_algo_call_t part = *c;
    part.n = c->n - at < per ? c->n - at : per;
    part.src = c->src ? (const char *)c->src + (size_t)at * elem : NULL;
    part.dst = c->dst ? (char *)c->dst + (size_t)at * elem : NULL;
    rc = chunk(w, &part, at, arg);
  }
  return rc;
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
