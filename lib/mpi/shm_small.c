/* The small shared-memory protocol (see shm_small.h). */
#include "shm_small.h"

#include "../base/dtype.h"
#include "../base/host_loops.h"
#include "../node/segment.h"

#include <limits.h>
#include <string.h>

bool tc_shm_small_supported(const tc_algo_query_t *q) {
  if (q->count <= 0 || q->comm->size < 2) return false;
  tc_node_seg_t *g = tc_node_of(q->comm); /* made with the communicator, or none */
  return g && q->bytes <= g->slot_bytes;
}

/* What a call takes once every peer published it: a step of its own. */
typedef struct small_job {
  tc_node_seg_t *g;
  uint64_t k; /* the call's number (its parity: the line and slot it uses) */
  tc_shm_kind_t kind;
  bool in_line; /* the inputs ride in the lines, after the words */
  int root;
  const void *src;
  void *dst;
  int64_t n;
  tcoll_dtype_t dtype;
  MPI_Op op;
  double premul, divisor;
} small_job_t;

/* A line: the call's number, the bytes its owner published, then (when they fit) the bytes. */
typedef struct small_line {
  uint64_t k;
  uint64_t nbytes;
  char payload[TC_NODE_LINE - 16];
} small_line_t;
_Static_assert(sizeof(small_line_t) == TC_NODE_LINE, "a line of the small protocol");

static small_line_t *line_of(const tc_node_seg_t *g, int q, int slot) {
  return (small_line_t *)(void *)tc_node_line(g, q, TC_NODE_LINE_SMALL0 + slot);
}

static int slot_of(const small_job_t *j) { return (int)(j->k & 1); }

static const char *input_of(const small_job_t *j, int q) {
  return j->in_line ? line_of(j->g, q, slot_of(j))->payload : tc_node_slot(j->g, q, slot_of(j));
}

int tc_shm_check_bytes(const tc_node_seg_t *g, int q, uint64_t k, uint64_t mine) {
  uint64_t theirs = __atomic_load_n(&line_of(g, q, (int)(k & 1))->nbytes, __ATOMIC_RELAXED);
  if (theirs == mine) return TCOLL_SUCCESS;
  return tc_error(TCOLL_ERR_MISMATCH,
                  "ranks disagree on the size of this collective: rank %d has %llu bytes, this "
                  "rank (%d) %llu (every rank must pass the same count)",
                  q, (unsigned long long)theirs, g->me, (unsigned long long)mine);
}

void tc_shm_give_bytes(tc_node_seg_t *g, uint64_t k, uint64_t bytes) {
  line_of(g, g->me, (int)(k & 1))->nbytes = bytes; /* published with the word, after it */
}

static int check_size(const small_job_t *j, int q) {
  return tc_shm_check_bytes(j->g, q, j->k, (uint64_t)j->n * tc_dtype_size(j->dtype));
}

/* Whether every rank published this rank's size (their lines are in cache: their words were
 * just read); else the first that did not, named. */
static int check_sizes(const small_job_t *j) {
  uint64_t mine = (uint64_t)j->n * tc_dtype_size(j->dtype), differ = 0;
  for (int q = 0; q < j->g->p; q++)
    differ |= __atomic_load_n(&line_of(j->g, q, slot_of(j))->nbytes, __ATOMIC_RELAXED) ^ mine;
  for (int q = 0; differ && q < j->g->p; q++) {
    int rc = check_size(j, q);
    if (rc) return rc;
  }
  return TCOLL_SUCCESS;
}

/* dst = input 1 (op) input 0, then dst = input q (op) dst for q = 2, 3...: one after the other,
 * since the order is the result's bits (each step one IEEE operation per element, as
 * MPI_Reduce_local's); AVG divides once at the end. */
static int reduce_inputs(const small_job_t *j) {
  const char *call = "MPI_Reduce_local";
  int rc = check_sizes(j);
  if (rc) return rc;
  /* Sums and products of the common types: every input in one pass, rank by rank per vector
   * (every rank's input lies at the same offset of its area) */
  bool prod;
  size_t off = (size_t)(input_of(j, 0) - j->g->areas[0]);
  if (tc_mpi_op_host(j->op, &prod) &&
      tc_host_combine_all(j->g->areas, off, j->g->p, j->dst, j->n, j->dtype, prod, j->divisor))
    return TCOLL_SUCCESS;
  rc = tc_mpi_reduce_into(input_of(j, 1), input_of(j, 0), j->dst, j->n, j->dtype, j->op, &call);
  for (int q = 2; q < j->g->p && rc == MPI_SUCCESS; q++)
    rc = tc_mpi_reduce_local(input_of(j, q), j->dst, j->n, j->dtype, j->op, &call);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, call);
  if (j->divisor != 1.0) tc_host_divide(j->dst, j->dtype, j->n, j->divisor);
  return TCOLL_SUCCESS;
}

static int take_inputs(const small_job_t *j) {
  bool root = j->g->me == j->root;
  switch (j->kind) {
  case TC_SHM_ALL_REDUCE: return reduce_inputs(j);
  case TC_SHM_REDUCE: return root ? reduce_inputs(j) : TCOLL_SUCCESS;
  case TC_SHM_BROADCAST: {
    int rc = check_size(j, j->root);
    if (rc) return rc;
    const void *from = root ? j->src : input_of(j, j->root);
    if (j->dst != from) memcpy(j->dst, from, (size_t)j->n * tc_dtype_size(j->dtype));
    return TCOLL_SUCCESS;
  }
  }
  return TCOLL_SUCCESS;
}

/* Takes the call's result, then notes it finished whatever happened: a failed call must not stop
 * the communicator's next ones (the PUBLISH step after this one does it again, the anchor that
 * keeps the schedule driven until then). */
static int take(void *arg) {
  small_job_t *j = arg;
  int rc = take_inputs(j);
  tc_shm_finish(j->g, j->k);
  return rc;
}

/* This rank's input into its line or slot, and its size beside the word (once the peers read
 * the call two before: the step runs after this rank's previous call finished). */
static int give(void *arg) {
  const small_job_t *j = arg;
  small_line_t *own = line_of(j->g, j->g->me, slot_of(j));
  char *to = j->in_line ? own->payload : tc_node_slot(j->g, j->g->me, slot_of(j));
  if (j->premul != 1.0)
    tc_host_scale_copy(to, j->src, j->dtype, j->n, j->premul);
  else
    memcpy(to, j->src, (size_t)j->n * tc_dtype_size(j->dtype));
  tc_shm_give_bytes(j->g, j->k, (uint64_t)j->n * tc_dtype_size(j->dtype));
  return TCOLL_SUCCESS;
}

/* A step waiting until every peer's word of `line` reached k. */
static int await_peers(tc_sched_t *s, const tc_node_seg_t *g, int line, uint64_t k) {
  return tc_sched_await_all(s, tc_node_peer_words(g, line), g->p, k, true);
}

/* The steps of call k from its wait on: for what it sees (every peer's word of its line, one
 * rank's, or nothing), then the take, then the publish that notes it finished. */
static int add_wait_and_take(tc_sched_t *s, tc_node_seg_t *g, const tc_shm_call_t *call, int line,
                             uint64_t k) {
  int rc = TCOLL_SUCCESS;
  if (call->sees == TC_SHM_SEES_ALL) rc = await_peers(s, g, line, k);
  if (!rc && call->sees >= 0 && call->sees != g->me)
    rc = tc_sched_await(s, tc_node_word(g, call->sees, line), k, true);
  if (!rc) rc = tc_sched_call(s, call->take, call->arg, true);
  if (!rc) rc = tc_sched_publish(s, &g->small_finished, k, true); /* the peers' inputs are read */
  return rc;
}

int tc_shm_call_add(tc_sched_t *s, tc_node_seg_t *g, const tc_shm_call_t *call, uint64_t *kp) {
  uint64_t k = g->small_calls + 1;
  int line = TC_NODE_LINE_SMALL0 + (int)(k & 1);
  int rc = tc_sched_reserve(s, TC_SHM_CALL_STEPS);
  if (rc) return rc;
  g->small_calls = k; /* counted once nothing can fail: every rank counts alike */
  *kp = k;
  /* (already so, as in a post-wait loop: no step; the word only grows) */
  if (__atomic_load_n(&g->small_finished, __ATOMIC_ACQUIRE) < k - 1)
    rc = tc_sched_await(s, &g->small_finished, k - 1, false);
  /* Every peer done with call k - 2 (it published k - 1): implied where call k - 1 waited for
   * every peer; else waited for here, before this rank rewrites that call's parity. */
  if (!rc && k > 1 && !g->small_last_saw_all)
    rc = await_peers(s, g, TC_NODE_LINE_SMALL0 + (int)((k - 1) & 1), k - 1);
  if (!rc && call->give) rc = tc_sched_call(s, call->give, call->arg, true);
  if (!rc) rc = tc_sched_publish(s, tc_node_word(g, g->me, line), k, true);
  g->small_last_saw_all = call->sees == TC_SHM_SEES_ALL;
  return rc ? rc : add_wait_and_take(s, g, call, line, k);
}

/* Whether what call k sees is published: every peer's word of its line, one rank's, or none. */
static bool seen_now(const tc_node_seg_t *g, int sees, int line, uint64_t k) {
  if (sees == TC_SHM_SEES_NONE || sees == g->me) return true;
  if (sees >= 0) return __atomic_load_n(tc_node_word(g, sees, line), __ATOMIC_ACQUIRE) >= k;
  return tc_words_reached(tc_node_peer_words(g, line), g->p, k);
}

/* tc_shm_call_add for a work with no steps before the call, run as far as it can go at once
 * where nothing must be waited for before the give (this rank's call k - 1 finished, and every
 * peer published it: the usual post-wait loop): give and publish here, and the take too where
 * what it sees is published already (then no step at all), else the steps from the wait on. The
 * same protocol, without a schedule's steps for what needs no waiting: a small all_reduce's post
 * costs a third fewer instructions. */
static int call_now(tc_sched_t *s, tc_node_seg_t *g, const tc_shm_call_t *call, uint64_t *kp) {
  uint64_t k = g->small_calls + 1;
  int line = TC_NODE_LINE_SMALL0 + (int)(k & 1);
  int rc = tc_sched_reserve(s, 3); /* the wait, the take and its publish, if they are needed */
  if (rc) return rc;
  g->small_calls = k;
  *kp = k;
  g->small_last_saw_all = call->sees == TC_SHM_SEES_ALL;
  if (call->give && (rc = call->give(call->arg))) return rc;
  __atomic_store_n(tc_node_word(g, g->me, line), k, __ATOMIC_RELEASE); /* its only writer */
  if (seen_now(g, call->sees, line, k)) return call->take(call->arg);  /* it notes k finished */
  return add_wait_and_take(s, g, call, line, k);
}

/* Whether call_now may run the next call: nothing before it in the work, this rank's last call
 * finished, and every peer published it (implied where that call waited for every peer). */
static bool may_call_now(const tc_sched_t *s, const tc_node_seg_t *g) {
  uint64_t k = g->small_calls + 1;
  return s->n == 0 && __atomic_load_n(&g->small_finished, __ATOMIC_ACQUIRE) == k - 1 &&
         (k == 1 || g->small_last_saw_all);
}

/* A run's call publishes in its line's payload (unused by runs otherwise) where its shared
 * storage lies: two offsets. */
_Static_assert(TC_SHM_SHARED * sizeof(uint64_t) <= sizeof((small_line_t *)0)->payload,
               "the offsets fit a line");

const char *tc_shm_peer_shared(const tc_node_seg_t *g, int q, uint64_t k, int what) {
  uint64_t off;
  memcpy(&off, line_of(g, q, (int)(k & 1))->payload + (size_t)what * sizeof off, sizeof off);
  return off == TC_HEAP_NONE ? NULL : g->heap[q] + off;
}

static int run_give(void *arg) {
  tc_shm_run_t *r = arg;
  int64_t i = r->gave++;
  uint64_t k = r->k0 + (uint64_t)i;
  memcpy(line_of(r->g, r->g->me, (int)(k & 1))->payload, r->offset, sizeof r->offset);
  return r->give(r, i, k);
}

static int run_take(void *arg) {
  tc_shm_run_t *r = arg;
  int64_t i = r->took++;
  if (!r->rc) r->rc = r->take(r, i, r->k0 + (uint64_t)i);
  tc_shm_finish(r->g, r->k0 + (uint64_t)i);
  return TCOLL_SUCCESS;
}

static int run_report(void *arg) { return ((tc_shm_run_t *)arg)->rc; }

/* Where this rank's shared storage lies in its part of the heap (TC_HEAP_NONE: nowhere there,
 * or the communicator has no view of the heap). */
static void place_shared(tc_shm_run_t *r) {
  for (int w = 0; w < TC_SHM_SHARED; w++)
    r->offset[w] = r->g->heap && r->shared[w].p ? tc_heap_offset(r->shared[w].p, r->shared[w].bytes)
                                                : TC_HEAP_NONE;
}

/* After the run's last call (k): this rank's DONE word, and where it shared anything, the wait
 * for every peer's. */
static int add_done(tc_sched_t *s, tc_shm_run_t *r, uint64_t k) {
  tc_node_seg_t *g = r->g;
  int rc = tc_sched_publish(s, tc_node_word(g, g->me, TC_NODE_LINE_DONE), k, true);
  bool shared =
      r->offset[TC_SHM_SHARED_IN] != TC_HEAP_NONE || r->offset[TC_SHM_SHARED_OUT] != TC_HEAP_NONE;
  if (!rc && shared) rc = await_peers(s, g, TC_NODE_LINE_DONE, k);
  return rc;
}

int tc_shm_run_add(tc_sched_t *s, tc_shm_run_t *r, const int *sees, int period, int64_t n) {
  if (n > (INT_MAX - 3 - s->n) / TC_SHM_CALL_STEPS) /* the callers' supported() keep them fewer */
    return tc_error(TCOLL_ERR_INTERNAL, "%lld calls are too many for one schedule", (long long)n);
  place_shared(r);
  int rc = tc_sched_reserve(s, (int)n * TC_SHM_CALL_STEPS + 3);
  uint64_t k = 0;
  for (int64_t i = 0; i < n && !rc; i++) {
    tc_shm_call_t call = {.give = run_give, .take = run_take, .arg = r, .sees = sees[i % period]};
    rc = tc_shm_call_add(s, r->g, &call, &k);
    if (i == 0) r->k0 = k;
  }
  if (!rc && n > 0) rc = add_done(s, r, k);
  return rc ? rc : tc_sched_call(s, run_report, r, true);
}

static int build_on(tc_work_t *w, tc_node_seg_t *g, const tc_algo_call_t *c, tc_shm_kind_t kind,
                    bool now);

/* (At once where it may: the work's only other steps are local ones after it. hier's works
 * schedule theirs, since steps after their node phase post collectives.) */
int tc_shm_small_build(tc_work_t *w, const tc_algo_call_t *c, tc_shm_kind_t kind) {
  return build_on(w, w->comm->node, c, kind, true);
}

int tc_shm_small_build_on(tc_work_t *w, tc_node_seg_t *g, const tc_algo_call_t *c,
                          tc_shm_kind_t kind) {
  return build_on(w, g, c, kind, false);
}

static int build_on(tc_work_t *w, tc_node_seg_t *g, const tc_algo_call_t *c, tc_shm_kind_t kind,
                    bool now) {
  small_job_t *j = tc_work_small(w, sizeof *j);
  if (!j) return TCOLL_ERR_NO_MEMORY;
  *j = (small_job_t){
      .g = g,
      .kind = kind,
      .in_line = (size_t)c->n * tc_dtype_size(c->dtype) <= sizeof((small_line_t *)0)->payload,
      .root = c->root,
      .src = c->src,
      .dst = c->dst,
      .n = c->n,
      .dtype = c->dtype,
      .op = c->op,
      .premul = kind == TC_SHM_BROADCAST ? 1.0 : c->premul,
      .divisor = kind == TC_SHM_BROADCAST ? 1.0 : c->divisor};
  /* What it reads: every peer's input (all_reduce, reduce at the root), the root's (broadcast
   * off the root), or nothing (reduce off the root, broadcast at the root: done once published) */
  bool root = g->me == c->root;
  tc_shm_call_t call = {.give = kind != TC_SHM_BROADCAST || root ? give : NULL,
                        .take = take,
                        .arg = j,
                        .sees = kind == TC_SHM_ALL_REDUCE || (kind == TC_SHM_REDUCE && root)
                                    ? TC_SHM_SEES_ALL
                                : kind == TC_SHM_BROADCAST && !root ? c->root
                                                                    : TC_SHM_SEES_NONE};
  /* (j->k is set before any of its steps or callbacks runs) */
  if (now && may_call_now(&w->sched, g)) return call_now(&w->sched, g, &call, &j->k);
  return tc_shm_call_add(&w->sched, g, &call, &j->k);
}
