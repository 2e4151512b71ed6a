/* The schedule engine (see sched.h). One lock, eng_mu, guards the driven schedules, the FIFOs
 * and the schedule communicators; a schedule that is not driven belongs to its owner alone. */
#include "schedule.h"

#include "../drive.h"

#include "../base/dtype.h"
#include "../base/host_loops.h"
#include "../device/device.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Messages of one collective between two ranks carry tag_base + (offset % TAG_SPAN): offsets
 * only need to differ among the messages in flight at once. */
#define TAG_SPAN 256

struct tc_sched_comm {
  MPI_Comm mpi;
  int tag_works;                     /* collectives whose tags differ before they wrap */
  tc_sched_t *fifo_head, *fifo_tail; /* schedules with COLL steps still to post, oldest first */
};

static pthread_mutex_t eng_mu = PTHREAD_MUTEX_INITIALIZER;
static tc_sched_t *driven_head, *driven_tail;
static int ndriven; /* atomic reads outside eng_mu */
static int keyval = MPI_KEYVAL_INVALID;

/* ------------------------------------------------------------------ building */

void tc_sched_reset(tc_sched_t *s, tcoll_comm_t *comm, uint64_t seq) {
  s->n = s->first = s->nmpi = 0;
  s->unstarted_comm = s->unposted_coll = s->ncoll = s->coll_started = 0;
  s->status = TCOLL_SUCCESS;
  s->starting = s->driven = s->in_fifo = s->coll_later = false;
  s->comm = comm;
  s->sc = NULL;
  s->tag_base = (int)(seq & INT_MAX); /* folded into the tag range when a message needs it */
  s->err[0] = '\0';
}

int tc_sched_grow(tc_sched_t *s, int n) {
  if (s->n + n <= s->cap) return TCOLL_SUCCESS;
  int cap = s->cap ? s->cap : 8;
  while (cap < s->n + n) cap *= 2;
  tc_step_t *p = realloc(s->steps, (size_t)cap * sizeof *p);
  if (!p) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot grow a schedule to %d steps", cap);
  s->steps = p;
  s->cap = cap;
  return TCOLL_SUCCESS;
}

static bool communicates(int kind) {
  return kind == TC_STEP_COLL || kind == TC_STEP_SEND || kind == TC_STEP_RECV ||
         kind == TC_STEP_PUBLISH;
}

static int delete_sched_comm(MPI_Comm comm, int kv, void *attr, void *extra) {
  TC_UNUSED(comm);
  TC_UNUSED(kv);
  TC_UNUSED(extra);
  free(attr); /* the communicator itself goes with its tcoll_comm_t */
  return MPI_SUCCESS;
}

/* The engine's state for comm's schedule communicator (comm->sched, duplicated with the
 * communicator), made the first time (eng_mu held). Local: no communication. */
static int sched_comm_of(tcoll_comm_t *comm, tc_sched_comm_t **out) {
  int rc;
  if (keyval == MPI_KEYVAL_INVALID) {
    rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_sched_comm, &keyval, NULL);
    if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Comm_create_keyval");
  }
  void *val = NULL;
  int flag = 0;
  rc = PMPI_Comm_get_attr(comm->mpi, keyval, &val, &flag);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Comm_get_attr");
  if (flag) {
    *out = val;
    return TCOLL_SUCCESS;
  }
  tc_sched_comm_t *sc = calloc(1, sizeof *sc);
  if (!sc) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate a schedule communicator");
  int *ub = NULL;
  PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  sc->tag_works = (flag && ub ? *ub : 32767) / TAG_SPAN;
  sc->mpi = comm->sched;
  rc = PMPI_Comm_set_attr(comm->mpi, keyval, sc);
  if (rc != MPI_SUCCESS) {
    free(sc);
    return tc_mpi_error(rc, "MPI_Comm_set_attr");
  }
  *out = sc;
  return TCOLL_SUCCESS;
}

/* The schedule communicator for s (eng_mu held). */
static int attach_sched_comm(tc_sched_t *s) {
  if (s->sc) return TCOLL_SUCCESS;
  int rc = sched_comm_of(s->comm, &s->sc);
  if (!rc) s->tag_base = (int)((unsigned)s->tag_base % (unsigned)s->sc->tag_works) * TAG_SPAN;
  return rc;
}

/* A new step of kind at the end (room reserved), waiting. */
static inline tc_step_t *append(tc_sched_t *s, tc_step_kind_t kind, bool new_round) {
  tc_step_t *st = &s->steps[s->n];
  st->kind = (uint8_t)kind;
  st->state = TC_STEP_WAITING;
  st->ndeps = 0;
  st->round = s->n == 0 ? 0 : s->steps[s->n - 1].round + (new_round ? 1 : 0);
  st->req = MPI_REQUEST_NULL;
  st->large = false;
  s->n++;
  return st;
}

tc_step_t *tc_sched_add(tc_sched_t *s, tc_step_kind_t kind, bool new_round) {
  if (tc_sched_reserve(s, 1)) return NULL;
  if ((kind == TC_STEP_SEND || kind == TC_STEP_RECV) && !s->sc) {
    pthread_mutex_lock(&eng_mu);
    int rc = attach_sched_comm(s);
    pthread_mutex_unlock(&eng_mu);
    if (rc) return NULL;
  }
  tc_step_t *st = append(s, kind, new_round);
  if (communicates(kind)) s->unstarted_comm++;
  if (kind == TC_STEP_COLL) {
    s->unposted_coll++;
    st->u.coll.nth = s->ncoll++;
  }
  return st;
}

bool tc_sched_posted_any(const tc_sched_t *s) {
  for (int i = 0; i < s->n; i++)
    if (s->steps[i].kind == TC_STEP_MPI || s->steps[i].kind == TC_STEP_POLL ||
        ((communicates(s->steps[i].kind) || s->steps[i].kind == TC_STEP_DEV) &&
         s->steps[i].state != TC_STEP_WAITING))
      return true;
  return false;
}

int tc_sched_after(tc_sched_t *s, int step, int dep) {
  tc_step_t *st = &s->steps[step];
  if (dep < 0 || dep >= step)
    return tc_error(TCOLL_ERR_INTERNAL, "step %d cannot wait for step %d", step, dep);
  if (st->ndeps == TC_STEP_MAX_DEPS)
    return tc_error(TCOLL_ERR_INTERNAL, "step %d has too many dependencies", step);
  st->deps[st->ndeps++] = dep;
  return TCOLL_SUCCESS;
}

MPI_Request *tc_sched_posted(tc_sched_t *s) {
  if (tc_sched_reserve(s, 1)) return NULL;
  tc_step_t *st =
      append(s, TC_STEP_MPI, false); /* on the collective's communicator: tc_sched_add's cases */
  st->state = TC_STEP_POSTED;        /* for the schedule's own steps do not apply */
  st->u.mpi.call = NULL;
  s->nmpi++;
  return &st->req;
}

/* One point-to-point step: count elements of dt. */
static int add_p2p_step(tc_sched_t *s, tc_step_kind_t kind, void *buf, int64_t count,
                        MPI_Datatype dt, int peer, int64_t tag, bool new_round) {
  tc_step_t *st = tc_sched_add(s, kind, new_round);
  if (!st) return TCOLL_ERR_NO_MEMORY;
  st->u.p2p.buf = buf;
  st->u.p2p.count = count;
  st->u.p2p.dt = dt;
  st->u.p2p.peer = peer;
  st->u.p2p.tag = (int)(tag % TAG_SPAN);
  return TCOLL_SUCCESS;
}

static int add_p2p(tc_sched_t *s, tc_step_kind_t kind, void *buf, int64_t n, tcoll_dtype_t d,
                   int peer, int tag, bool new_round) {
  int64_t per = tc_mpi_per_call(n);
  size_t es = tc_dtype_size(d);
  int64_t pieces = n == 0 ? 1 : (n + per - 1) / per;
  int rc = tc_sched_reserve(s, (int)pieces);
  for (int64_t off = 0, k = 0; k < pieces && !rc;
       off += per, k++) /* pieces of one message stay in order */
    rc = add_p2p_step(s, kind, (char *)buf + (size_t)off * es, n - off < per ? n - off : per,
                      tc_mpi_dtype(d), peer, (int64_t)tag + k, new_round && k == 0);
  return rc;
}

int tc_sched_send(tc_sched_t *s, const void *buf, int64_t n, tcoll_dtype_t d, int peer,
                  int tag_offset, bool new_round) {
  return add_p2p(s, TC_STEP_SEND, (void *)buf, n, d, peer, tag_offset, new_round);
}

int tc_sched_recv(tc_sched_t *s, void *buf, int64_t n, tcoll_dtype_t d, int peer, int tag_offset,
                  bool new_round) {
  return add_p2p(s, TC_STEP_RECV, buf, n, d, peer, tag_offset, new_round);
}

int tc_sched_send_typed(tc_sched_t *s, const void *buf, int64_t count, MPI_Datatype dt, int peer,
                        int tag_offset, bool new_round) {
  return add_p2p_step(s, TC_STEP_SEND, (void *)buf, count, dt, peer, tag_offset, new_round);
}

int tc_sched_recv_typed(tc_sched_t *s, void *buf, int64_t count, MPI_Datatype dt, int peer,
                        int tag_offset, bool new_round) {
  return add_p2p_step(s, TC_STEP_RECV, buf, count, dt, peer, tag_offset, new_round);
}

int tc_sched_reduce_runs(tc_sched_t *s, const void *in, int64_t in_stride, void *acc, int64_t n,
                         int64_t runs, tcoll_dtype_t d, MPI_Op op, bool new_round) {
  tc_step_t *st = tc_sched_add(s, TC_STEP_REDUCE, new_round);
  if (!st) return TCOLL_ERR_NO_MEMORY;
  st->u.reduce.in = in;
  st->u.reduce.acc = acc;
  st->u.reduce.n = n;
  st->u.reduce.runs = runs;
  st->u.reduce.in_stride = in_stride;
  st->u.reduce.dtype = d;
  st->u.reduce.op = op;
  return TCOLL_SUCCESS;
}

int tc_sched_reduce(tc_sched_t *s, const void *in, void *acc, int64_t n, tcoll_dtype_t d, MPI_Op op,
                    bool new_round) {
  return tc_sched_reduce_runs(s, in, n, acc, n, 1, d, op, new_round);
}

int tc_sched_pack_runs(tc_sched_t *s, void *dst, const void *src, size_t src_stride, size_t nbytes,
                       int64_t runs, bool new_round) {
  tc_step_t *st = tc_sched_add(s, TC_STEP_COPY, new_round);
  if (!st) return TCOLL_ERR_NO_MEMORY;
  st->u.copy.dst = dst;
  st->u.copy.src = src;
  st->u.copy.nbytes = nbytes;
  st->u.copy.src_stride = src_stride;
  st->u.copy.runs = runs;
  return TCOLL_SUCCESS;
}

int tc_sched_copy(tc_sched_t *s, void *dst, const void *src, size_t nbytes, bool new_round) {
  return tc_sched_pack_runs(s, dst, src, nbytes, nbytes, 1, new_round);
}

int tc_sched_scale(tc_sched_t *s, void *dst, const void *src, int64_t n, tcoll_dtype_t d,
                   double mul, double div, bool new_round) {
  tc_step_t *st = tc_sched_add(s, TC_STEP_SCALE, new_round);
  if (!st) return TCOLL_ERR_NO_MEMORY;
  st->u.scale.dst = dst;
  st->u.scale.src = src;
  st->u.scale.n = n;
  st->u.scale.dtype = d;
  st->u.scale.mul = mul;
  st->u.scale.div = div;
  return TCOLL_SUCCESS;
}

int tc_sched_poll(tc_sched_t *s, int (*fn)(void *, bool, double), void *arg, bool new_round) {
  tc_step_t *st = tc_sched_add(s, TC_STEP_POLL, new_round);
  if (!st) return TCOLL_ERR_NO_MEMORY;
  st->u.poll.fn = fn;
  st->u.poll.arg = arg;
  return TCOLL_SUCCESS;
}

int tc_sched_coll(tc_sched_t *s, tc_coll_kind_t what, const void *sbuf, void *rbuf, int64_t count,
                  MPI_Datatype dt, MPI_Op op, int root, bool new_round) {
  tc_step_t *st = tc_sched_add(s, TC_STEP_COLL, new_round);
  if (!st) return TCOLL_ERR_NO_MEMORY;
  st->u.coll.what = what;
  st->u.coll.sbuf = sbuf;
  st->u.coll.rbuf = rbuf;
  st->u.coll.count = count;
  st->u.coll.counts = st->u.coll.displs = NULL;
  st->u.coll.dt = dt;
  st->u.coll.op = op;
  st->u.coll.root = root;
  st->u.coll.on = MPI_COMM_NULL;
  return TCOLL_SUCCESS;
}

int tc_sched_dev(tc_sched_t *s, const tc_dev_step_t *d, bool new_round) {
  tc_step_t *st = tc_sched_add(s, TC_STEP_DEV, new_round);
  if (!st) return TCOLL_ERR_NO_MEMORY;
  st->u.dev = *d;
  return TCOLL_SUCCESS;
}

static int add_flag(tc_sched_t *s, tc_step_kind_t kind, uint64_t *word, uint64_t value,
                    bool new_round) {
  tc_step_t *st = tc_sched_add(s, kind, new_round);
  if (!st) return TCOLL_ERR_NO_MEMORY;
  st->u.flag.word = word;
  st->u.flag.value = value;
  st->u.flag.words = NULL;
  return TCOLL_SUCCESS;
}

int tc_sched_publish(tc_sched_t *s, uint64_t *word, uint64_t value, bool new_round) {
  return add_flag(s, TC_STEP_PUBLISH, word, value, new_round);
}

int tc_sched_await(tc_sched_t *s, const uint64_t *word, uint64_t value, bool new_round) {
  return add_flag(s, TC_STEP_AWAIT, (uint64_t *)word, value, new_round);
}

int tc_sched_await_all(tc_sched_t *s, uint64_t *const *words, int n, uint64_t value,
                       bool new_round) {
  int rc = add_flag(s, TC_STEP_AWAIT, NULL, value, new_round);
  if (rc) return rc;
  tc_step_t *st = &s->steps[s->n - 1]; /* the step add_flag added */
  st->u.flag.words = words;
  st->u.flag.n = n;
  return TCOLL_SUCCESS;
}

int tc_sched_call(tc_sched_t *s, int (*fn)(void *), void *arg, bool new_round) {
  tc_step_t *st = tc_sched_add(s, TC_STEP_CALL, new_round);
  if (!st) return TCOLL_ERR_NO_MEMORY;
  st->u.call.fn = fn;
  st->u.call.arg = arg;
  return TCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ lists (eng_mu held) */

static void driven_add(tc_sched_t *s) {
  s->prev_driven = driven_tail;
  s->next_driven = NULL;
  if (driven_tail)
    driven_tail->next_driven = s;
  else
    driven_head = s;
  driven_tail = s;
  __atomic_store_n(&s->driven, true, __ATOMIC_RELEASE);
  __atomic_add_fetch(&ndriven, 1, __ATOMIC_RELAXED);
}

static void driven_remove(tc_sched_t *s) {
  if (!s->driven) return;
  if (s->prev_driven)
    s->prev_driven->next_driven = s->next_driven;
  else
    driven_head = s->next_driven;
  if (s->next_driven)
    s->next_driven->prev_driven = s->prev_driven;
  else
    driven_tail = s->prev_driven;
  __atomic_sub_fetch(&ndriven, 1, __ATOMIC_RELAXED);
  /* The owner reads it without the lock: everything before is visible once it reads false. */
  __atomic_store_n(&s->driven, false, __ATOMIC_RELEASE);
}

static void fifo_add(tc_sched_t *s) {
  tc_sched_comm_t *sc = s->sc;
  s->next_fifo = NULL;
  if (sc->fifo_tail)
    sc->fifo_tail->next_fifo = s;
  else
    sc->fifo_head = s;
  sc->fifo_tail = s;
  s->in_fifo = true;
}

static void fifo_remove(tc_sched_t *s) {
  if (!s->in_fifo) return;
  tc_sched_comm_t *sc = s->sc;
  tc_sched_t *prev = NULL;
  for (tc_sched_t *q = sc->fifo_head; q; prev = q, q = q->next_fifo) {
    if (q != s) continue;
    if (prev)
      prev->next_fifo = q->next_fifo;
    else
      sc->fifo_head = q->next_fifo;
    if (sc->fifo_tail == q) sc->fifo_tail = prev;
    break;
  }
  s->in_fifo = false;
}

/* ------------------------------------------------------------------ running steps */

static void fail(tc_sched_t *s, int status, const char *fmt, ...) TC_PRINTF(3, 4);
static void fail(tc_sched_t *s, int status, const char *fmt, ...) {
  if (s->status != TCOLL_SUCCESS) return;
  s->status = status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
}

static void fail_mpi(tc_sched_t *s, int mpi_rc, const char *call) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  PMPI_Error_string(mpi_rc, msg, &len);
  fail(s, TCOLL_ERR_MPI, "%s failed: %.200s", call, msg);
}

static const char *step_call_name(const tc_step_t *st) {
#define NAME(fn) (st->large ? fn "_c" : fn)
  switch (st->kind) {
  case TC_STEP_MPI:
    if (st->u.mpi.call) return st->u.mpi.call;
    break;
  case TC_STEP_SEND: return NAME("MPI_Isend");
  case TC_STEP_RECV: return NAME("MPI_Irecv");
  case TC_STEP_COLL:
    switch (st->u.coll.what) {
    case TC_COLL_ALLGATHERV: return NAME("MPI_Iallgatherv");
    case TC_COLL_ALLTOALL: return NAME("MPI_Ialltoall");
    case TC_COLL_ALLREDUCE: return NAME("MPI_Iallreduce");
    case TC_COLL_ALLGATHER: return NAME("MPI_Iallgather");
    case TC_COLL_BCAST: return NAME("MPI_Ibcast");
    case TC_COLL_REDUCE: return NAME("MPI_Ireduce");
    case TC_COLL_REDUCE_SCATTER_BLOCK: return NAME("MPI_Ireduce_scatter_block");
    }
    break;
  default: break;
  }
  return "an MPI request";
#undef NAME
}

static bool deps_done(const tc_sched_t *s, const tc_step_t *st) {
  for (int i = 0; i < st->ndeps; i++)
    if (s->steps[st->deps[i]].state != TC_STEP_DONE) return false;
  return true;
}

static int post_coll(tc_sched_t *s, tc_step_t *st, MPI_Comm comm) {
  const typeof(st->u.coll) *c = &st->u.coll;
  if (c->what != TC_COLL_ALLGATHERV) st->large = tc_mpi_use_c(c->count);
  switch (c->what) {
  case TC_COLL_ALLGATHERV:
    if (st->large)
      return tc_mpi_iallgatherv_c(c->sbuf, 0, c->dt, c->rbuf, c->counts, c->displs, comm, &st->req);
    return PMPI_Iallgatherv(c->sbuf, 0, c->dt, c->rbuf, c->counts, c->displs, c->dt, comm,
                            &st->req);
  case TC_COLL_ALLTOALL: return tc_mpi_ialltoall(c->sbuf, c->count, c->dt, c->rbuf, comm, &st->req);
  case TC_COLL_ALLREDUCE:
    return tc_mpi_iallreduce(c->sbuf, c->rbuf, c->count, c->dt, c->op, comm, &st->req);
  case TC_COLL_ALLGATHER:
    return tc_mpi_iallgather(c->sbuf, c->count, c->dt, c->rbuf, c->count, c->dt, comm, &st->req);
  case TC_COLL_BCAST: return tc_mpi_ibcast(c->rbuf, c->count, c->dt, c->root, comm, &st->req);
  case TC_COLL_REDUCE:
    return tc_mpi_ireduce(c->sbuf, c->rbuf, c->count, c->dt, c->op, c->root, comm, &st->req);
  case TC_COLL_REDUCE_SCATTER_BLOCK:
    return tc_mpi_ireduce_scatter_block(c->sbuf, c->rbuf, c->count, c->dt, c->op, comm, &st->req);
  }
  TC_UNUSED(s);
  return MPI_ERR_OTHER;
}

/* Starts a communication step if it may start now; whether it did. */
static bool start_comm(tc_sched_t *s, tc_step_t *st) {
  int rc;
  if (st->kind == TC_STEP_PUBLISH) { /* raised, never lowered: a later step may have passed it */
    uint64_t cur = __atomic_load_n(st->u.flag.word, __ATOMIC_RELAXED);
    while (cur < st->u.flag.value &&
           !__atomic_compare_exchange_n(st->u.flag.word, &cur, st->u.flag.value, true,
                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    }
    s->unstarted_comm--;
    st->state = TC_STEP_DONE;
    return true;
  }
  if (st->kind == TC_STEP_COLL) {
    /* In the order they were added, whatever order their dependencies complete in on each rank
     * (a staging pipeline's chunks). While starting, a collective goes on the communicator
     * itself, in program order like any other call; later ones go on the schedule
     * communicator, in FIFO order. */
    if (st->u.coll.nth != s->coll_started || (s->starting && s->coll_later)) return false;
    /* On another communicator (a subset's: hier's leaders) every collective waits for its turn
     * in the FIFO: whether one could post while starting differs between its ranks (a leader
     * alone on its node has nothing to wait for first), and one posted then would pass the
     * earlier calls' that wait there. */
    if (st->u.coll.on != MPI_COMM_NULL && s->starting) return false;
    MPI_Comm comm = s->comm->mpi;
    if (!s->starting) {
      if (s->sc->fifo_head != s) return false;
      comm = s->sc->mpi;
    }
    if (st->u.coll.on != MPI_COMM_NULL) comm = st->u.coll.on;
    rc = post_coll(s, st, comm);
    s->coll_started++;
    if (--s->unposted_coll == 0) fifo_remove(s);
  } else {
    const typeof(st->u.p2p) *p = &st->u.p2p;
    int tag = s->tag_base + p->tag;
    st->large = tc_mpi_use_c(p->count);
    if (st->kind == TC_STEP_SEND)
      rc = tc_mpi_isend(p->buf, p->count, p->dt, p->peer, tag, s->sc->mpi, &st->req);
    else
      rc = tc_mpi_irecv(p->buf, p->count, p->dt, p->peer, tag, s->sc->mpi, &st->req);
  }
  s->unstarted_comm--;
  if (rc != MPI_SUCCESS) {
    fail_mpi(s, rc, step_call_name(st));
    st->state = TC_STEP_DONE; /* nothing was posted */
    return true;
  }
  st->state = TC_STEP_POSTED;
  return true;
}

void tc_pack_runs(void *dst, const void *src, size_t src_stride, size_t nbytes, int64_t runs) {
  for (int64_t k = 0; k < runs; k++)
    memcpy((char *)dst + (size_t)k * nbytes, (const char *)src + (size_t)k * src_stride, nbytes);
}

/* Runs a local step to its end. */
static void run_local(tc_sched_t *s, tc_step_t *st) {
  switch (st->kind) {
  case TC_STEP_REDUCE: {
    const typeof(st->u.reduce) *r = &st->u.reduce;
    const char *call = "MPI_Reduce_local";
    size_t es = tc_dtype_size(r->dtype);
    int rc = MPI_SUCCESS;
    for (int64_t k = 0; k < r->runs && rc == MPI_SUCCESS; k++)
      rc = tc_mpi_reduce_local((const char *)r->in + (size_t)(k * r->in_stride) * es,
                               (char *)r->acc + (size_t)(k * r->n) * es, r->n, r->dtype, r->op,
                               &call);
    if (rc != MPI_SUCCESS) fail_mpi(s, rc, call);
    break;
  }
  case TC_STEP_COPY: {
    const typeof(st->u.copy) *c = &st->u.copy;
    if (c->nbytes && c->dst != c->src)
      tc_pack_runs(c->dst, c->src, c->src_stride, c->nbytes, c->runs);
    break;
  }
  case TC_STEP_SCALE: {
    const typeof(st->u.scale) *c = &st->u.scale;
    if (c->mul != 1.0 || c->dst != c->src)
      tc_host_scale_copy(c->dst, c->src, c->dtype, c->n, c->mul);
    if (c->div != 1.0) tc_host_divide(c->dst, c->dtype, c->n, c->div);
    break;
  }
  case TC_STEP_CALL: {
    int rc = st->u.call.fn(st->u.call.arg);
    if (rc) fail(s, rc, "%s", tc_last_message());
    break;
  }
  default: break;
  }
  st->state = TC_STEP_DONE;
}

/* Queues a DEV step's device work; done at once unless it waits for an event. */
static void start_dev(tc_sched_t *s, tc_step_t *st) {
  const tc_dev_step_t *d = &st->u.dev;
  const tc_device_ops_t *ops = tc_dev();
  bool dev = d->dev != TCOLL_HOST;
  int rc = TCOLL_SUCCESS;
  if (dev && d->wait_ev) rc = ops->stream_wait_event(d->dev, d->stream, d->wait_ev);
  if (!rc && d->queue) rc = d->queue(d->arg, d->k);
  if (!rc && dev && d->record_ev) rc = ops->event_record(d->dev, d->record_ev, d->stream);
  if (rc) fail(s, rc, "%s", tc_last_message());
  st->state = !rc && dev && d->done_ev ? TC_STEP_POSTED : TC_STEP_DONE;
}

/* Whether a posted DEV step's event completed; block: waits for it on the host. */
static bool dev_done(tc_sched_t *s, tc_step_t *st, bool block) {
  const tc_dev_step_t *d = &st->u.dev;
  int rc =
      block ? tc_dev()->event_sync(d->dev, d->done_ev) : tc_dev()->event_query(d->dev, d->done_ev);
  if (rc == TCOLL_IN_PROGRESS) return false;
  if (rc != TCOLL_SUCCESS) fail(s, rc, "%s", tc_last_message());
  st->state = TC_STEP_DONE;
  return true;
}

/* Asks a POLL step's work whether it is done; whether it is. */
static bool poll_step(tc_sched_t *s, tc_step_t *st, bool block, double deadline) {
  int rc = st->u.poll.fn(st->u.poll.arg, block, deadline);
  if (rc == TCOLL_IN_PROGRESS) return false;
  if (rc != TCOLL_SUCCESS) fail(s, rc, "%s", tc_last_message());
  st->state = TC_STEP_DONE;
  return true;
}

/* Whether an AWAIT step's word reached its value (then it is done). */
static inline bool await_done(tc_step_t *st) {
  if (st->u.flag.words) {
    if (!tc_words_reached(st->u.flag.words, st->u.flag.n, st->u.flag.value)) return false;
  } else if (__atomic_load_n(st->u.flag.word, __ATOMIC_ACQUIRE) < st->u.flag.value) {
    return false;
  }
  st->state = TC_STEP_DONE;
  return true;
}

/* Tests a posted step; whether it completed. */
static bool test_posted(tc_sched_t *s, tc_step_t *st) {
  if (st->kind == TC_STEP_AWAIT) return await_done(st);
  if (st->kind == TC_STEP_POLL) return poll_step(s, st, false, 0.0);
  if (st->kind == TC_STEP_DEV) return dev_done(s, st, false);
  int flag = 0, rc = tc_mpi_testall(1, &st->req, &flag);
  if (rc != MPI_SUCCESS) {
    fail_mpi(s, rc, step_call_name(st));
    flag = 1; /* a request that failed is complete */
  }
  if (flag) st->state = TC_STEP_DONE;
  return flag != 0;
}

static void after_comm_started(tc_sched_t *s) {
  if (s->unstarted_comm == 0 || s->status != TCOLL_SUCCESS) {
    fifo_remove(s);
    driven_remove(s);
  }
}

/* Starts or tests step st, whose turn it is; whether anything moved. */
static bool step_once(tc_sched_t *s, tc_step_t *st) {
  if (st->state == TC_STEP_POSTED) return !s->starting && test_posted(s, st);
  if (s->status != TCOLL_SUCCESS || !deps_done(s, st)) return false;
  if (communicates(st->kind)) return start_comm(s, st);
  switch (st->kind) {
  case TC_STEP_POLL:
    st->state = TC_STEP_POSTED; /* its work runs already: asked from the next pass on */
    return true;
  case TC_STEP_AWAIT:
    /* While starting, whether a peer published already differs between ranks, and collectives
     * must start alike everywhere (see tc_sched_start): with any, the word is read from the
     * next pass on. */
    st->state = TC_STEP_POSTED;
    return (!s->starting || s->ncoll == 0) && await_done(st);
  case TC_STEP_DEV: start_dev(s, st); return true;
  default: run_local(s, st); return true;
  }
}

/* One pass over the steps that may run (eng_mu held if s is driven), again while anything
 * moved; whether anything did. A pass goes on into the next round where every earlier step is
 * done, so that a chain of local steps runs in one pass. */
static bool advance(tc_sched_t *s) {
  bool moved = false, again = true;
  while (again) {
    again = false;
    int round = s->first < s->n ? s->steps[s->first].round : INT_MAX;
    bool earlier_done = true; /* every step before i */
    for (int i = s->first; i < s->n; i++) {
      tc_step_t *st = &s->steps[i];
      if (st->round > round) {
        if (!earlier_done) break;
        round = st->round;
      }
      if (st->state == TC_STEP_DONE) continue;
      if (step_once(s, st)) again = true;
      if (st->state != TC_STEP_DONE) earlier_done = false;
    }
    while (s->first < s->n && s->steps[s->first].state == TC_STEP_DONE) s->first++;
    moved |= again;
    if (s->first == s->n) break;
  }
  if (s->driven) after_comm_started(s);
  return moved;
}

/* Done: every step ran, or after an error every posted request completed. */
static bool finished(const tc_sched_t *s) {
  if (s->first == s->n) return true;
  if (s->status == TCOLL_SUCCESS) return false;
  for (int i = s->first; i < s->n; i++)
    if (s->steps[i].state == TC_STEP_POSTED) return false;
  return true;
}

void tc_sched_start(tc_sched_t *s) {
  if (s->nmpi == s->n) return; /* only requests already posted: nothing to start */
  s->starting = true;
  if (s->unstarted_comm == 0) {
    advance(s);
    s->starting = false;
    return;
  }
  pthread_mutex_lock(&eng_mu);
  advance(s);
  s->starting = false;
  /* Collectives left for later go on the schedule communicator: every rank gets here with the
   * same steps left, so its duplication (collective) happens in the same call everywhere. */
  if (s->status == TCOLL_SUCCESS && s->unposted_coll > 0) {
    int rc = attach_sched_comm(s);
    if (rc) fail(s, rc, "%s", tc_last_message());
  }
  if (s->status == TCOLL_SUCCESS && s->unstarted_comm > 0) {
    if (s->unposted_coll > 0) fifo_add(s);
    driven_add(s);
  }
  pthread_mutex_unlock(&eng_mu);
}

static void drive_all_locked(void) {
  for (tc_sched_t *s = driven_head, *next; s; s = next) {
    next = s->next_driven;
    advance(s);
  }
}

void tc_sched_drive_all(void) {
  if (!tc_sched_any_driven()) return;
  pthread_mutex_lock(&eng_mu);
  drive_all_locked();
  pthread_mutex_unlock(&eng_mu);
}

bool tc_sched_any_driven(void) { return __atomic_load_n(&ndriven, __ATOMIC_RELAXED) > 0; }

static bool is_driven(const tc_sched_t *s) { return __atomic_load_n(&s->driven, __ATOMIC_ACQUIRE); }

/* Blocks in MPI for the first posted step, running what becomes startable in order: for a
 * schedule nobody else needs driven (the common single-call case, no polling). */
static void run_blocking(tc_sched_t *s) {
  if (s->nmpi ==
      s->n) { /* only requests the builder posted: each waited for in turn, also after an error */
    for (; s->first < s->n; s->first++) {
      tc_step_t *st = &s->steps[s->first];
      if (st->state != TC_STEP_POSTED) continue; /* completed by an earlier test */
      int rc = tc_mpi_waitall(1, &st->req);
      if (rc != MPI_SUCCESS) fail_mpi(s, rc, step_call_name(st));
      st->state = TC_STEP_DONE;
    }
    return;
  }
  while (!finished(s)) {
    tc_step_t *st = &s->steps[s->first];
    if (st->state == TC_STEP_POSTED && st->kind == TC_STEP_AWAIT) {
      if (!await_done(st)) return; /* polled by the caller, which spins, then yields */
    } else if (st->state == TC_STEP_POSTED && st->kind == TC_STEP_POLL) {
      poll_step(s, st, true, 0.0);
    } else if (st->state == TC_STEP_POSTED && st->kind == TC_STEP_DEV) {
      dev_done(s, st, true);
    } else if (st->state == TC_STEP_POSTED) {
      int rc = tc_mpi_waitall(1, &st->req);
      if (rc != MPI_SUCCESS) fail_mpi(s, rc, step_call_name(st));
      st->state = TC_STEP_DONE;
    }
    if (!advance(s) && st->state != TC_STEP_DONE) return; /* cannot move alone: poll instead */
  }
}

int tc_sched_progress(tc_sched_t *s, bool block, double deadline) {
  int polls = 0;
  for (;;) {
    if (is_driven(s)) {
      pthread_mutex_lock(&eng_mu);
      drive_all_locked();
      pthread_mutex_unlock(&eng_mu);
    } else if (block && deadline <= 0 && !tc_sched_any_driven() && !tc_cfg.wait_yield) {
      /* TCOLL_WAIT=yield polls instead: MPICH's MPI_Wait spins without yielding, and with more
       * ranks than cores it starves the very ranks it waits for (a 4-rank demo on 2 cores). */
      run_blocking(s);
    } else {
      advance(s);
      tc_sched_drive_all(); /* others may wait for this rank's steps of their schedules */
    }
    if (finished(s)) break;
    if (!block || (deadline > 0 && tc_now() >= deadline)) return TCOLL_IN_PROGRESS;
    /* MPI advances transfers only inside MPI calls: test often, yielding the core between. */
    tc_poll_pause(&polls);
  }
  if (s->status != TCOLL_SUCCESS) return tc_error(s->status, "%s", s->err);
  return TCOLL_SUCCESS;
}

void tc_sched_abandon(tc_sched_t *s) {
  if (is_driven(s) || s->in_fifo) {
    pthread_mutex_lock(&eng_mu);
    fifo_remove(s);
    driven_remove(s);
    pthread_mutex_unlock(&eng_mu);
  }
  for (int i = s->first; i < s->n; i++) {
    tc_step_t *st = &s->steps[i];
    if (st->state == TC_STEP_POSTED && st->kind == TC_STEP_POLL)
      poll_step(s, st, true, 0.0);
    else if (st->state == TC_STEP_POSTED && st->kind == TC_STEP_DEV)
      dev_done(s, st, true);
    else if (st->state == TC_STEP_POSTED && st->kind != TC_STEP_AWAIT) /* a word: nothing held */
      tc_mpi_waitall(1, &st->req);
  }
  s->n = s->first = s->nmpi = 0;
}

void tc_sched_free(tc_sched_t *s) {
  free(s->steps);
  s->steps = NULL;
  s->n = s->cap = s->first = s->nmpi = 0;
}

void tc_sched_cleanup(void) {
  pthread_mutex_lock(&eng_mu);
  if (keyval != MPI_KEYVAL_INVALID) {
    int fin = 0;
    PMPI_Finalized(&fin);
    if (!fin) PMPI_Comm_free_keyval(&keyval);
    keyval = MPI_KEYVAL_INVALID;
  }
  pthread_mutex_unlock(&eng_mu);
}
