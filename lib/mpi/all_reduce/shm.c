/* The small shared-memory all_reduce (TCOLL_ALGO all_reduce:shm), for communicators whose ranks
 * share one node (lib/node/segment.h). Each rank copies its input into its own area and publishes
 * the call's number; once every peer published it, each rank reduces all p inputs in rank order
 * ((x0 op x1) op x2 ...) into its output: the same bits on every rank, no message.
 *
 * Call k uses parity k % 2: the number goes into the owner's line of that parity, the input into
 * the rest of that line when it fits (56 bytes: one cache line carries both, one miss per peer),
 * else into the slot of that parity. A rank publishes call k only once its call k - 1 has read
 * its peers' inputs (its small_finished word). A peer therefore rewrites the line and slot of
 * call k (at call k + 2) only after it saw this rank publish call k + 1, i.e. after this rank
 * read call k: nothing is written while a peer may still read it, with no flag beyond the one per
 * call (doc/guide.md, "Shared memory", has the whole argument). */
#include "../../node/segment.h"
#include "../../base/dtype.h"
#include "../algo.h"

#include <string.h>

static bool supported(const tc_algo_query_t *q) {
  if (q->count <= 0 || q->comm->size < 2) return false;
  tc_node_seg_t *g = tc_node_of(q->comm); /* made with the communicator, or none */
  return g && q->bytes <= g->slot_bytes;
}

/* The reduction of one call, once every peer published it: a step of its own. */
typedef struct reduce_job {
  const tc_node_seg_t *g;
  int slot;
  bool in_line; /* the inputs ride in the lines, after the words */
  void *dst;
  int64_t n;
  tcoll_dtype_t dtype;
  MPI_Op op;
  double divisor;
} reduce_job_t;

TC_PRIV_FITS(reduce_job_t);

/* dst = slot 0, then dst = slot q (op) dst for q = 1, 2...: one after the other, since the order
 * is the result's bits; AVG divides once at the end. */
static const char *input_of(const reduce_job_t *j, int q) {
  return j->in_line ? tc_node_line(j->g, q, TC_NODE_LINE_SMALL0 + j->slot) + 8
                    : tc_node_slot(j->g, q, j->slot);
}

static int reduce_slots(void *arg) {
  const reduce_job_t *j = arg;
  const char *call = "MPI_Reduce_local";
  memcpy(j->dst, input_of(j, 0), (size_t)j->n * tc_dtype_size(j->dtype));
  for (int q = 1; q < j->g->p; q++) {
    int rc = tc_mpi_reduce_local(input_of(j, q), j->dst, j->n, j->dtype, j->op, &call);
    if (rc != MPI_SUCCESS) return tc_mpi_error(rc, call);
  }
  if (j->divisor != 1.0) tc_host_divide(j->dst, j->dtype, j->n, j->divisor);
  return TCOLL_SUCCESS;
}

/* Steps: this rank's previous call read its peers' slots; the input into this rank's slot;
 * published; every peer published; the reduction; the previous call's successor may go. */
static int build(tc_work_t *w, const tc_algo_call_t *c) {
  tc_node_seg_t *g = w->comm->node;
  tc_sched_t *s = &w->sched;
  uint64_t k = ++g->small_calls;
  int slot = (int)(k & 1), line = TC_NODE_LINE_SMALL0 + slot;
  size_t nb = (size_t)c->n * tc_dtype_size(c->dtype);
  bool in_line = nb <= TC_NODE_LINE_PAYLOAD;
  char *mine = in_line ? tc_node_line(g, g->me, line) + 8 : tc_node_slot(g, g->me, slot);
  reduce_job_t *j = TC_WORK_PRIV(w, reduce_job_t); /* all_reduce's works keep nothing else there */
  *j = (reduce_job_t){g, slot, in_line, c->dst, c->n, c->dtype, c->op, c->divisor};
  int rc = tc_sched_reserve(s, g->p + 5);
  if (rc) return rc;
  /* (already so, as in a post-wait loop: no step; the word only grows) */
  if (__atomic_load_n(&g->small_finished, __ATOMIC_ACQUIRE) < k - 1)
    rc = tc_sched_await(s, &g->small_finished, k - 1, false);
  if (!rc && c->premul != 1.0)
    rc = tc_sched_scale(s, mine, c->src, c->n, c->dtype, c->premul, 1.0, true);
  else if (!rc)
    rc = tc_sched_copy(s, mine, c->src, nb, true);
  if (!rc) rc = tc_sched_publish(s, tc_node_word(g, g->me, line), k, true);
  for (int q = 0, first = 1; q < g->p && !rc; q++)
    if (q != g->me) {
      rc = tc_sched_await(s, tc_node_word(g, q, line), k, first);
      first = 0;
    }
  if (!rc) rc = tc_sched_call(s, reduce_slots, j, true);
  if (!rc) rc = tc_sched_publish(s, &g->small_finished, k, true); /* the peers' slots are free */
  return rc;
}

const tc_algo_t tc_all_reduce_shm = {
    .name = "shm", .layouts = TC_LAYOUT_CONTIG, .supported = supported, .build = build};
