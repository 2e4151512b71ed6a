/* The schedule engine: what a work does, as data run by one executor.
 *
 * A schedule is an array of steps in rounds. A step starts once every step of an earlier round
 * is done and the (at most TC_STEP_MAX_DEPS) steps it names as dependencies are done; steps of
 * one round otherwise run in any order, so that transfers and local math overlap. Local steps
 * (a reduction, a copy, a scaling, a call) complete when they start; MPI steps complete when
 * their request does; device steps (copies queued on a stream, TC_STEP_DEV) when queued or
 * when their event completed (the staging pipeline, work/pipeline.h, is built of them).
 *
 * Where MPI steps go:
 *   TC_STEP_MPI   a request the builder posted itself at once, on the collective's own
 *                 communicator (the literal mapping: one MPI_I* call per collective);
 *   TC_STEP_COLL  an MPI_I* collective the engine posts when the step starts;
 *   TC_STEP_SEND, TC_STEP_RECV  point-to-point, posted when the step starts.
 * COLL, SEND and RECV steps run on the schedule communicator, a duplicate of the collective's
 * communicator made for them with it (tcoll_comm_t.sched), so they never match the user's
 * messages nor the literal calls. Point-to-point steps carry tags derived from
 * the collective's sequence number on the communicator, which keeps concurrent collectives
 * apart whatever the order in which ranks post and wait. Collective steps have no tags: every
 * rank posts them in the same order because a schedule posts its COLL steps in the order they
 * were added (whatever order their dependencies complete in), and only once every schedule
 * started before it on that communicator has posted all of its own (a FIFO per communicator),
 * as in MPI's own rule that collectives are called in the same order.
 *
 * Steps that start while the schedule is being started (tc_sched_start) are the same on every
 * rank by construction: starting never waits for a transfer, so only steps that depend on
 * nothing or on local steps start there. The rest are driven lazily: a schedule with steps
 * that communicate and have not started yet is "driven", and every wait, test or progress
 * thread pass advances all driven schedules (tc_sched_drive_all), not only its own, so that no
 * rank stalls behind another that waits for a different collective.
 *
 * The engine knows nothing of works or the registry. A schedule's steps live in an array kept
 * across uses (a pooled work keeps its schedule): steady state allocates nothing. */
#ifndef TC_SCHEDULE_H
#define TC_SCHEDULE_H

#include "../comm.h"
#include "../mpiglue/mpi_calls.h"

#include <limits.h>

#define TC_STEP_MAX_DEPS 3

typedef enum {
  TC_STEP_MPI,     /* request posted by the builder (tc_sched_posted) */
  TC_STEP_COLL,    /* MPI_I* collective posted by the engine */
  TC_STEP_SEND,    /* MPI_Isend */
  TC_STEP_RECV,    /* MPI_Irecv */
  TC_STEP_REDUCE,  /* acc = in (op) acc, element-wise on the host */
  TC_STEP_COPY,    /* memcpy on the host */
  TC_STEP_SCALE,   /* dst = src * mul / div on the host (premul_sum, AVG) */
  TC_STEP_CALL,    /* fn(arg): a completion step of the caller's (unpacking, interleaving...) */
  TC_STEP_POLL,    /* poll(arg): a wait on work run elsewhere (the inner collectives of a
                      composite work), polled until it says done */
  TC_STEP_DEV,     /* copies queued on a device stream (see tc_sched_dev) */
  TC_STEP_PUBLISH, /* *word = max(*word, value), a release store: what peers sharing memory
                      wait for */
  TC_STEP_AWAIT    /* done once *word >= value (an acquire load): a peer's or an earlier
                      schedule's PUBLISH */
} tc_step_kind_t;

typedef enum {
  TC_COLL_ALLGATHERV,
  TC_COLL_ALLTOALL,
  TC_COLL_ALLREDUCE,
  TC_COLL_ALLGATHER,
  TC_COLL_BCAST,
  TC_COLL_REDUCE, /* to root; sbuf may be MPI_IN_PLACE there */
  TC_COLL_REDUCE_SCATTER_BLOCK
} tc_coll_kind_t;

typedef struct tc_dev_step {
  int dev;
  void *stream, *wait_ev, *record_ev, *done_ev;
  int (*queue)(void *arg, int64_t k);
  void *arg;
  int64_t k;
} tc_dev_step_t;

typedef enum { TC_STEP_WAITING, TC_STEP_POSTED, TC_STEP_DONE } tc_step_state_t;

typedef struct tc_step {
  uint8_t kind, state, ndeps;
  /* posted as the _c form (ALLGATHERV: built for it, its arrays MPI_Count / MPI_Aint) */
  bool large;
  int round;
  int deps[TC_STEP_MAX_DEPS];
  MPI_Request req;
  union {
    struct {            /* MPI */
      const char *call; /* the call posted (a literal), for errors; NULL: unnamed */
    } mpi;
    struct { /* COLL */
      tc_coll_kind_t what;
      const void *sbuf;
      void *rbuf;
      int64_t count;               /* per rank (ALLTOALL, ALLGATHER, ALLREDUCE) */
      const void *counts, *displs; /* ALLGATHERV: per rank, in elements: int, or MPI_Count and
                                      MPI_Aint when large */
      MPI_Datatype dt;
      MPI_Op op;
      int root;    /* BCAST */
      int nth;     /* the schedule's COLL steps post in this order (0, 1, ...) on every rank */
      MPI_Comm on; /* MPI_COMM_NULL: the schedule's communicator; else this one (a subset of its
                      ranks: the node leaders of lib/node/hier.h), in the same order */
    } coll;
    struct { /* SEND, RECV */
      void *buf;
      int64_t count;
      MPI_Datatype dt;
      int peer, tag;
    } p2p;
    struct { /* REDUCE: runs runs of n elements; in's runs in_stride elements apart, acc's
                adjacent (runs == 1: one contiguous reduction) */
      const void *in;
      void *acc;
      int64_t n, runs, in_stride;
      tcoll_dtype_t dtype;
      MPI_Op op;
    } reduce;
    struct { /* COPY: runs runs of nbytes, src_stride apart in src, adjacent in dst */
      void *dst;
      const void *src;
      size_t nbytes, src_stride;
      int64_t runs;
    } copy;
    struct { /* SCALE */
      void *dst;
      const void *src;
      int64_t n;
      tcoll_dtype_t dtype;
      double mul, div;
    } scale;
    struct { /* CALL */
      int (*fn)(void *arg);
      void *arg;
    } call;
    struct { /* POLL: TCOLL_SUCCESS when done, TCOLL_IN_PROGRESS, or the error */
      int (*fn)(void *arg, bool block, double deadline);
      void *arg;
    } poll;
    struct tc_dev_step dev; /* DEV (see tc_sched_dev) */
    struct {                /* PUBLISH, AWAIT: a 64-bit word that only grows */
      uint64_t *word;
      uint64_t value;
      /* AWAIT of several words (words != NULL): done once all n reached value */
      uint64_t *const *words;
      int n;
    } flag;
  } u;
} tc_step_t;

typedef struct tc_sched_comm tc_sched_comm_t;

typedef struct tc_sched {
  tc_step_t *steps;
  int n, cap;
  int first;          /* every step before it is done */
  int nmpi;           /* MPI steps (requests the builder posted): when they are all the steps,
                         there is nothing to start and a wait is MPI's alone */
  int unstarted_comm; /* COLL, SEND and RECV steps not started yet */
  int unposted_coll;  /* COLL steps not started yet (the schedule waits in its FIFO meanwhile) */
  int ncoll;          /* COLL steps added, and started: they start in the order they were added */
  int coll_started;
  int status;      /* the first error, once one happened */
  bool starting;   /* inside tc_sched_start */
  bool coll_later; /* no COLL step posts while starting (tc_sched_coll_later) */
  bool driven;     /* in the list of driven schedules (the engine lock guards it) */
  bool in_fifo;
  tcoll_comm_t *comm;
  tc_sched_comm_t *sc; /* the schedule communicator, when a step needs it */
  int tag_base;
  char err[256];
  struct tc_sched *prev_driven, *next_driven, *next_fifo;
} tc_sched_t;

/* Whether every word of words[0, n) (NULL entries: none) reached value, with acquire ordering:
 * what their writers wrote before publishing is visible once it says so. Every word is loaded
 * before any is compared, so that the misses on several peers' lines overlap. */
static inline bool tc_words_reached(uint64_t *const *words, int n, uint64_t value) {
  uint64_t least = UINT64_MAX;
  for (int i = 0; i < n; i++) {
    uint64_t v = words[i] ? __atomic_load_n(words[i], __ATOMIC_RELAXED) : UINT64_MAX;
    least = v < least ? v : least;
  }
  if (least < value) return false;
  __atomic_thread_fence(__ATOMIC_ACQUIRE); /* orders the reads after: as n acquire loads */
  return true;
}

/* ---- building ---- */

/* Empties s for a new collective on comm (seq: its sequence number there, for tags). */
void tc_sched_reset(tc_sched_t *s, tcoll_comm_t *comm, uint64_t seq);
/* The collective's sequence number on its communicator, once known (its messages' tags). */
static inline void tc_sched_set_seq(tc_sched_t *s, uint64_t seq) {
  s->tag_base = (int)(seq & INT_MAX);
}
/* Whether anything was posted to MPI (a failed start may leave requests in flight). */
bool tc_sched_posted_any(const tc_sched_t *s);
/* Room for n more steps, so that building never fails half-way for lack of memory. */
int tc_sched_grow(tc_sched_t *s, int n);
static inline int tc_sched_reserve(tc_sched_t *s, int n) {
  return TC_LIKELY(s->n + n <= s->cap) ? TCOLL_SUCCESS
                                       : tc_sched_grow(s, n); /* the array is kept across uses */
}
/* Appends a step of kind in the current round (new_round: in a round after every step so far);
 * NULL (error set) without memory. The pointer is valid until the next append. */
tc_step_t *tc_sched_add(tc_sched_t *s, tc_step_kind_t kind, bool new_round);
/* COLL steps never post inside tc_sched_start: for schedules where whether one could start then
 * differs between ranks (a staging pipeline: the chunk's data comes from a device on one rank,
 * from MPI on another). */
static inline void tc_sched_coll_later(tc_sched_t *s) { s->coll_later = true; }
/* The index of the step last added (for dependencies). */
static inline int tc_sched_last(const tc_sched_t *s) { return s->n - 1; }
/* Step `step` (an index) starts only after step `dep` is done. */
int tc_sched_after(tc_sched_t *s, int step, int dep);
/* A request the caller posts at once into the returned slot (TC_STEP_MPI); NULL without memory.
 * The slot is valid until the next append: post into it right away. */
MPI_Request *tc_sched_posted(tc_sched_t *s);
/* Names the request last posted into tc_sched_posted's slot after its call (a literal). */
static inline void tc_sched_name_posted(tc_sched_t *s, const char *call) {
  if (s->n > 0 && s->steps[s->n - 1].kind == TC_STEP_MPI) s->steps[s->n - 1].u.mpi.call = call;
}
/* Point-to-point steps; tag_offset tells apart the messages of one collective between the same
 * two ranks (the same value on both sides). A count above the per-call limit is one
 * MPI_Isend_c / MPI_Irecv_c where MPI has large counts, else several steps. */
int tc_sched_send(tc_sched_t *s, const void *buf, int64_t n, tcoll_dtype_t d, int peer,
                  int tag_offset, bool new_round);
int tc_sched_recv(tc_sched_t *s, void *buf, int64_t n, tcoll_dtype_t d, int peer, int tag_offset,
                  bool new_round);
/* One MPI_Isend / MPI_Irecv of count elements of a derived datatype dt (a strided block; count
 * within the limit), which must stay valid until the step is posted. */
int tc_sched_send_typed(tc_sched_t *s, const void *buf, int64_t count, MPI_Datatype dt, int peer,
                        int tag_offset, bool new_round);
int tc_sched_recv_typed(tc_sched_t *s, void *buf, int64_t count, MPI_Datatype dt, int peer,
                        int tag_offset, bool new_round);
int tc_sched_reduce(tc_sched_t *s, const void *in, void *acc, int64_t n, tcoll_dtype_t d, MPI_Op op,
                    bool new_round);
int tc_sched_copy(tc_sched_t *s, void *dst, const void *src, size_t nbytes, bool new_round);
/* Strided forms (a block of a tensor split along a dim other than 0: runs runs, in's / src's a
 * stride apart, packed one after the other on the other side). */
int tc_sched_reduce_runs(tc_sched_t *s, const void *in, int64_t in_stride, void *acc, int64_t n,
                         int64_t runs, tcoll_dtype_t d, MPI_Op op, bool new_round);
/* The same copy done at once: runs runs of nbytes, src_stride apart in src, adjacent in dst. */
void tc_pack_runs(void *dst, const void *src, size_t src_stride, size_t nbytes, int64_t runs);
int tc_sched_pack_runs(tc_sched_t *s, void *dst, const void *src, size_t src_stride, size_t nbytes,
                       int64_t runs, bool new_round);
int tc_sched_scale(tc_sched_t *s, void *dst, const void *src, int64_t n, tcoll_dtype_t d,
                   double mul, double div, bool new_round);
int tc_sched_call(tc_sched_t *s, int (*fn)(void *), void *arg, bool new_round);
/* A wait on work that runs elsewhere: fn(arg, false, 0) is asked at every pass once the step
 * started, fn(arg, true, deadline) where the engine would block. fn must not wait for this
 * engine's lock: a schedule with a POLL step is never driven from inside another's pass (it has
 * no lazily started communication), so fn may wait for other works. */
int tc_sched_poll(tc_sched_t *s, int (*fn)(void *, bool, double), void *arg, bool new_round);
/* An MPI_I* collective on contiguous buffers, posted by the engine (count per rank: see
 * tc_step_t; root for BCAST). The schedule's COLL steps post in the order they are added. */
int tc_sched_coll(tc_sched_t *s, tc_coll_kind_t what, const void *sbuf, void *rbuf, int64_t count,
                  MPI_Datatype dt, MPI_Op op, int root, bool new_round);
/* Device work on stream of dev (the engine calls the device backend, never waits in it while
 * anything else can move): when the step starts, the stream waits for wait_ev, queue(arg, k)
 * queues copies on it and record_ev is recorded after them (each NULL: none). The step is done
 * once queued, or, with done_ev, once done_ev completed (a host-side wait: for record_ev, or
 * for an event recorded by an earlier step). On the host (dev TCOLL_HOST) queue copies
 * synchronously and there are no streams or events: the step is done when it starts. */
int tc_sched_dev(tc_sched_t *s, const tc_dev_step_t *d, bool new_round);

/* Memory words as steps, for protocols between processes that share memory (the node room's
 * algorithms): the engine knows nothing of segments, only words. A PUBLISH raises *word to value
 * (never lowers it: another thread's step may have raised it further meanwhile) with release order
 * once the steps before it are done: everything they wrote is visible to whoever sees the value. It
 * counts as communication: a schedule with a PUBLISH not run yet is driven, so that a peer (or a
 * later schedule of this rank) waiting for it never depends on this schedule's owner waiting for
 * it. An AWAIT is done once *word >= value (acquire: what the publisher wrote before is visible to
 * the steps after it); the words never decrease. Waits on words poll, spinning for tc_poll_pause's
 * spin budget before yielding the core. */
int tc_sched_publish(tc_sched_t *s, uint64_t *word, uint64_t value, bool new_round);
int tc_sched_await(tc_sched_t *s, const uint64_t *word, uint64_t value, bool new_round);
/* The same for n words at once (words[i] may be NULL: skipped). All n are loaded on every test
 * before any is compared, so that a reader of many peers' words pays about one cache miss's
 * latency, not n in a row. words must live until the step is done. */
int tc_sched_await_all(tc_sched_t *s, uint64_t *const *words, int n, uint64_t value,
                       bool new_round);

/* ---- running ---- */

/* Starts what can start now (the same steps on every rank: see above). A failure to post is
 * recorded in the schedule (its requests already posted still complete). */
void tc_sched_start(tc_sched_t *s);
/* Advances s; with block, until it is done or deadline passes (0: none). TCOLL_SUCCESS once
 * every step is done, TCOLL_IN_PROGRESS when not yet, or the first error (message set) once
 * every posted request completed. */
int tc_sched_progress(tc_sched_t *s, bool block, double deadline);
/* Whether s has nothing left to do. */
static inline bool tc_sched_done(const tc_sched_t *s) { return s->first == s->n; }
/* Advances every driven schedule (the progress thread, and whoever waits). */
void tc_sched_drive_all(void);
/* Whether any schedule is driven now (a cheap, unlocked read). */
bool tc_sched_any_driven(void);
/* Completes whatever a schedule still has posted and drops it from the engine's lists (a work
 * recycled before it completed). */
void tc_sched_abandon(tc_sched_t *s);
/* Frees the step array (the work that owns s is freed). */
void tc_sched_free(tc_sched_t *s);
/* At finalize: the engine's keyval (the schedule communicators go with their communicators). */
void tc_sched_cleanup(void);

#endif
