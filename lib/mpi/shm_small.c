/* The small shared-memory protocol (see shm_small.h). */
#include "shm_small.h"

#include "../base/dtype.h"
#include "../node/segment.h"

#include <string.h>

bool tc_shm_small_supported(const tc_algo_query_t *q) {
  if (q->count <= 0 || q->comm->size < 2) return false;
  tc_node_seg_t *g = tc_node_of(q->comm); /* made with the communicator, or none */
  return g && q->bytes <= g->slot_bytes;
}

/* What a call takes once every peer published it: a step of its own. */
typedef struct small_job {
  const tc_node_seg_t *g;
  tc_shm_kind_t kind;
  int slot;
  bool in_line; /* the inputs ride in the lines, after the words */
  int root;
  const void *src;
  void *dst;
  int64_t n;
  tcoll_dtype_t dtype;
  MPI_Op op;
  double divisor;
} small_job_t;

static const char *input_of(const small_job_t *j, int q) {
  return j->in_line ? tc_node_line(j->g, q, TC_NODE_LINE_SMALL0 + j->slot) + 8
                    : tc_node_slot(j->g, q, j->slot);
}

/* dst = input 0, then dst = input q (op) dst for q = 1, 2...: one after the other, since the
 * order is the result's bits; AVG divides once at the end. */
static int reduce_inputs(const small_job_t *j) {
  const char *call = "MPI_Reduce_local";
  memcpy(j->dst, input_of(j, 0), (size_t)j->n * tc_dtype_size(j->dtype));
  for (int q = 1; q < j->g->p; q++) {
    int rc = tc_mpi_reduce_local(input_of(j, q), j->dst, j->n, j->dtype, j->op, &call);
    if (rc != MPI_SUCCESS) return tc_mpi_error(rc, call);
  }
  if (j->divisor != 1.0) tc_host_divide(j->dst, j->dtype, j->n, j->divisor);
  return TCOLL_SUCCESS;
}

static int take(void *arg) {
  const small_job_t *j = arg;
  bool root = j->g->me == j->root;
  switch (j->kind) {
  case TC_SHM_ALL_REDUCE: return reduce_inputs(j);
  case TC_SHM_REDUCE: return root ? reduce_inputs(j) : TCOLL_SUCCESS;
  case TC_SHM_BROADCAST: {
    const void *from = root ? j->src : input_of(j, j->root);
    if (j->dst != from) memcpy(j->dst, from, (size_t)j->n * tc_dtype_size(j->dtype));
    return TCOLL_SUCCESS;
  }
  }
  return TCOLL_SUCCESS;
}

int tc_shm_small_build(tc_work_t *w, const tc_algo_call_t *c, tc_shm_kind_t kind) {
  tc_node_seg_t *g = w->comm->node;
  tc_sched_t *s = &w->sched;
  uint64_t k = ++g->small_calls;
  int slot = (int)(k & 1), line = TC_NODE_LINE_SMALL0 + slot;
  size_t nb = (size_t)c->n * tc_dtype_size(c->dtype);
  bool in_line = nb <= TC_NODE_LINE_PAYLOAD, gives = kind != TC_SHM_BROADCAST || g->me == c->root;
  char *mine = in_line ? tc_node_line(g, g->me, line) + 8 : tc_node_slot(g, g->me, slot);
  small_job_t *j = tc_work_small(w, sizeof *j);
  if (!j) return TCOLL_ERR_NO_MEMORY;
  *j = (small_job_t){g,
                     kind,
                     slot,
                     in_line,
                     c->root,
                     c->src,
                     c->dst,
                     c->n,
                     c->dtype,
                     c->op,
                     kind == TC_SHM_BROADCAST ? 1.0 : c->divisor};
  int rc = tc_sched_reserve(s, g->p + 5);
  if (rc) return rc;
  /* (already so, as in a post-wait loop: no step; the word only grows) */
  if (__atomic_load_n(&g->small_finished, __ATOMIC_ACQUIRE) < k - 1)
    rc = tc_sched_await(s, &g->small_finished, k - 1, false);
  if (!rc && gives && kind != TC_SHM_BROADCAST && c->premul != 1.0)
    rc = tc_sched_scale(s, mine, c->src, c->n, c->dtype, c->premul, 1.0, true);
  else if (!rc && gives)
    rc = tc_sched_copy(s, mine, c->src, nb, true);
  if (!rc) rc = tc_sched_publish(s, tc_node_word(g, g->me, line), k, true);
  for (int q = 0, first = 1; q < g->p && !rc; q++)
    if (q != g->me) {
      rc = tc_sched_await(s, tc_node_word(g, q, line), k, first);
      first = 0;
    }
  if (!rc) rc = tc_sched_call(s, take, j, true);
  if (!rc) rc = tc_sched_publish(s, &g->small_finished, k, true); /* the peers' inputs are read */
  return rc;
}
