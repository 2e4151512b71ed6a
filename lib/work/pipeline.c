/* The staging pipeline engine (see pipeline.h). One mutex guards every pipeline; whoever
 * waits or tests advances all of them, so that no pipeline stalls behind another rank that is
 * waiting for a different work. */
#include "pipeline.h"

#include "../comm.h"
#include "../base/dtype.h"
#include "../sched/mpi_calls.h"
#include "../base/scratch.h"
#include "../device/device.h"
#include "staging.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_POSTED } slot_state_t;

typedef struct slot {
  slot_state_t state;
  int64_t chunk;
  char *buf;          /* pinned: [send | recv] */
  MPI_Request req;
  void *fill_ev;      /* recorded on d2h after the chunk's fill */
  void *drain_ev;     /* recorded on h2d after the slot's last drain */
  bool drained;       /* drain_ev was recorded and the slot was not refilled since */
} slot_t;

/* The communicator reserved for chunk traffic, cached as an attribute of comm->mpi. */
typedef struct pipe_comm {
  MPI_Comm mpi;
  MPI_Request dup_req; /* MPI_Comm_idup in flight */
  struct tc_pipe *head, *tail; /* pipelines that still have chunks to post, oldest first */
} pipe_comm_t;

typedef struct tc_pipe {
  tc_pipe_desc_t d;
  int dev, rank, size;
  size_t es;
  int64_t C, K;                 /* elements per chunk, chunks */
  size_t send_off, recv_off, slot_bytes;
  pipe_comm_t *pc;
  slot_t slots[TC_PIPE_SLOTS];
  int64_t next_fill, next_post, ndrained;
  void *d2h, *h2d;
  void *ev_in, *ev_done;
  bool h2d_after_in;            /* h2d already waits for ev_in */
  bool active, done;
  int status;
  char err[256];
  struct tc_pipe *next_fifo, *prev_active, *next_active, *next_free;
} tc_pipe_t;

typedef struct pipe_priv {
  tc_pipe_t *pipe;
} pipe_priv_t;
TC_PRIV_FITS(pipe_priv_t);

static pthread_mutex_t eng_mu = PTHREAD_MUTEX_INITIALIZER;
static tc_pipe_t *active_head, *active_tail;
static tc_pipe_t *free_pipes[TC_MAX_DEVICES + 1]; /* the last: host pipelines */
static int keyval = MPI_KEYVAL_INVALID;

/* ------------------------------------------------------------------ sizes */

static int64_t chunk_elems(tc_pipe_kind_t kind, size_t es, int size, size_t bytes) {
  /* all_gather / reduce_scatter slots hold size pieces of a chunk: keep a slot near one chunk */
  int64_t c = (int64_t)(bytes / es);
  if (kind == TC_PIPE_ALL_GATHER || kind == TC_PIPE_REDUCE_SCATTER) c /= size;
  if (c < 1) c = 1;
  if (!tc_mpi_one_call(c)) c = tc_mpi_limit(); /* a chunk is one MPI call: _c, or within the limit */
  return c;
}

bool tc_pipe_wanted(const tcoll_tensor_t *t, tc_pipe_kind_t kind, int64_t n, int64_t run, int size) {
  if (!tc_stage_needed(t) || n <= 0) return false;
  int64_t C = chunk_elems(kind, tc_dtype_size(t->dtype), size, tc_cfg.staging_chunk);
  if (n <= C) return false;
  return run >= n || run * 64 >= C; /* at most ~64 copies per rank per chunk */
}

/* ------------------------------------------------------------------ the chunk communicator */

static int delete_pipe_comm(MPI_Comm comm, int kv, void *attr, void *extra) {
  TC_UNUSED(comm);
  TC_UNUSED(kv);
  TC_UNUSED(extra);
  pipe_comm_t *pc = attr;
  if (pc->dup_req != MPI_REQUEST_NULL) MPI_Wait(&pc->dup_req, MPI_STATUS_IGNORE);
  if (pc->mpi != MPI_COMM_NULL) MPI_Comm_free(&pc->mpi);
  free(pc);
  return MPI_SUCCESS;
}

/* eng_mu held. */
static int pipe_comm_of(tcoll_comm_t *comm, pipe_comm_t **out) {
  int rc;
  if (keyval == MPI_KEYVAL_INVALID) {
    rc = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_pipe_comm, &keyval, NULL);
    if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Comm_create_keyval");
  }
  void *val = NULL;
  int flag = 0;
  rc = MPI_Comm_get_attr(comm->mpi, keyval, &val, &flag);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Comm_get_attr");
  if (flag) {
    *out = val;
    return TCOLL_SUCCESS;
  }
  pipe_comm_t *pc = calloc(1, sizeof *pc);
  if (!pc) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate a pipeline communicator");
  pc->mpi = MPI_COMM_NULL;
  /* Collective, posted in program order like the collective that needs it. */
  rc = MPI_Comm_idup(comm->mpi, &pc->mpi, &pc->dup_req);
  if (rc != MPI_SUCCESS) {
    free(pc);
    return tc_mpi_error(rc, "MPI_Comm_idup (the staging pipeline's communicator)");
  }
  rc = MPI_Comm_set_attr(comm->mpi, keyval, pc);
  if (rc != MPI_SUCCESS) {
    MPI_Wait(&pc->dup_req, MPI_STATUS_IGNORE);
    MPI_Comm_free(&pc->mpi);
    free(pc);
    return tc_mpi_error(rc, "MPI_Comm_set_attr");
  }
  *out = pc;
  return TCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ device or host */

/* A host pipeline (dev == TCOLL_HOST) copies with memcpy on the thread that advances it and has
 * no streams or events: each step is complete when it returns. */
static bool on_host(const tc_pipe_t *p) { return p->dev == TCOLL_HOST; }
static int pool_of(int dev) { return dev == TCOLL_HOST ? TC_MAX_DEVICES : dev; }

static int copy(tc_pipe_t *p, void *dst, const void *src, size_t nb, void *stream) {
  if (!on_host(p)) return tc_dev()->copy_async(dst, src, nb, p->dev, stream);
  memcpy(dst, src, nb);
  return TCOLL_SUCCESS;
}

static int record(tc_pipe_t *p, void *ev, void *stream) {
  return on_host(p) ? TCOLL_SUCCESS : tc_dev()->event_record(p->dev, ev, stream);
}

static int stream_wait(tc_pipe_t *p, void *stream, void *ev) {
  return on_host(p) ? TCOLL_SUCCESS : tc_dev()->stream_wait_event(p->dev, stream, ev);
}

static int query(tc_pipe_t *p, void *ev) { return on_host(p) ? TCOLL_SUCCESS : tc_dev()->event_query(p->dev, ev); }

/* ------------------------------------------------------------------ pipeline objects */

/* At cleanup nobody can be told of a failure: it is logged. */
static void event_destroy(tc_pipe_t *p, void *ev) {
  if (ev && tc_dev()->event_destroy(p->dev, ev)) tc_warn("%s", tc_last_message());
}

static void pipe_destroy(tc_pipe_t *p) {
  if (on_host(p)) {
    free(p);
    return;
  }
  for (int i = 0; i < TC_PIPE_SLOTS; i++) {
    event_destroy(p, p->slots[i].fill_ev);
    event_destroy(p, p->slots[i].drain_ev);
  }
  event_destroy(p, p->ev_in);
  event_destroy(p, p->ev_done);
  free(p);
}

/* A pipeline object with its events, from the pool of dev (eng_mu held). */
static int pipe_get(int dev, tc_pipe_t **out) {
  tc_pipe_t *p = free_pipes[pool_of(dev)];
  if (p) {
    free_pipes[pool_of(dev)] = p->next_free;
    *out = p;
    return TCOLL_SUCCESS;
  }
  p = calloc(1, sizeof *p);
  if (!p) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate a staging pipeline");
  p->dev = dev;
  if (on_host(p)) {
    *out = p;
    return TCOLL_SUCCESS;
  }
  const tc_device_ops_t *ops = tc_dev();
  int rc = ops->event_create(dev, &p->ev_in);
  if (!rc) rc = ops->event_create(dev, &p->ev_done);
  for (int i = 0; i < TC_PIPE_SLOTS && !rc; i++) {
    rc = ops->event_create(dev, &p->slots[i].fill_ev);
    if (!rc) rc = ops->event_create(dev, &p->slots[i].drain_ev);
  }
  if (rc) {
    pipe_destroy(p);
    return rc;
  }
  *out = p;
  return TCOLL_SUCCESS;
}

static void fail(tc_pipe_t *p, int status, const char *what) {
  if (p->status == TCOLL_SUCCESS) {
    p->status = status;
    snprintf(p->err, sizeof p->err, "%s", what);
  }
}

static void fail_mpi(tc_pipe_t *p, int mpi_rc, const char *call) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(mpi_rc, msg, &len);
  if (p->status != TCOLL_SUCCESS) return;
  p->status = TCOLL_ERR_MPI;
  snprintf(p->err, sizeof p->err, "%s (staging pipeline chunk) failed: %.200s", call, msg);
}

/* ------------------------------------------------------------------ lists (eng_mu held) */

static void active_add(tc_pipe_t *p) {
  p->prev_active = active_tail;
  p->next_active = NULL;
  if (active_tail) active_tail->next_active = p;
  else active_head = p;
  active_tail = p;
  p->active = true;
}

static void active_remove(tc_pipe_t *p) {
  if (!p->active) return;
  if (p->prev_active) p->prev_active->next_active = p->next_active;
  else active_head = p->next_active;
  if (p->next_active) p->next_active->prev_active = p->prev_active;
  else active_tail = p->prev_active;
  p->active = false;
}

static void fifo_add(tc_pipe_t *p) {
  pipe_comm_t *pc = p->pc;
  p->next_fifo = NULL;
  if (pc->tail) pc->tail->next_fifo = p;
  else pc->head = p;
  pc->tail = p;
}

static void fifo_remove(tc_pipe_t *p) {
  pipe_comm_t *pc = p->pc;
  tc_pipe_t *prev = NULL;
  for (tc_pipe_t *q = pc->head; q; prev = q, q = q->next_fifo) {
    if (q == p) {
      if (prev) prev->next_fifo = q->next_fifo;
      else pc->head = q->next_fifo;
      if (pc->tail == q) pc->tail = prev;
      return;
    }
  }
}

/* ------------------------------------------------------------------ copies */

/* Rank r's strided piece, logical elements [k0, k0 + c): one copy per run, between it and the
 * contiguous host buffer `host`. */
static int copy_strided(tc_pipe_t *p, bool to_device, char *host, char *devbase, int r, int64_t k0, int64_t c) {
  int64_t run = p->d.run, stride = p->d.stride, e = k0, end = k0 + c;
  while (e < end) {
    int64_t off = e % run, len = run - off < end - e ? run - off : end - e;
    char *dptr = devbase + (size_t)((e / run) * stride + (int64_t)r * run + off) * p->es;
    char *hptr = host + (size_t)(e - k0) * p->es;
    size_t nb = (size_t)len * p->es;
    int rc = to_device ? copy(p, dptr, hptr, nb, p->h2d) : copy(p, hptr, dptr, nb, p->d2h);
    if (rc) return rc;
    e += len;
  }
  return TCOLL_SUCCESS;
}

static int64_t chunk_len(const tc_pipe_t *p, int64_t k) {
  int64_t k0 = k * p->C;
  return p->d.n - k0 < p->C ? p->d.n - k0 : p->C;
}

static bool fills(const tc_pipe_t *p) { return p->d.kind != TC_PIPE_BROADCAST || p->rank == p->d.root; }

/* On the host MPI can read and write the caller's buffers directly: an all_gather sends
 * straight from its input, a reduce_scatter receives straight into its output (both contiguous
 * per chunk), and only the strided side goes through a slot. */
static bool sends_from_input(const tc_pipe_t *p) { return on_host(p) && p->d.kind == TC_PIPE_ALL_GATHER; }
static bool receives_into_output(const tc_pipe_t *p) { return on_host(p) && p->d.kind == TC_PIPE_REDUCE_SCATTER; }

static char *slot_recv(const tc_pipe_t *p, const slot_t *s) {
  if (receives_into_output(p)) return (char *)p->d.out + (size_t)(s->chunk * p->C) * p->es;
  return s->buf + p->recv_off;
}

/* Queues chunk k's device-to-host copies into slot s. */
static int start_fill(tc_pipe_t *p, slot_t *s, int64_t k) {
  int64_t k0 = k * p->C, c = chunk_len(p, k);
  s->chunk = k;
  s->state = SLOT_FILLING;
  if (!fills(p) || sends_from_input(p)) return TCOLL_SUCCESS; /* MPI fills it; SLOT_FILLING waits for the drain */
  int rc = TCOLL_SUCCESS;
  if (s->drained) rc = stream_wait(p, p->d2h, s->drain_ev); /* the slot's last drain read it */
  s->drained = false;
  char *send = s->buf + p->send_off;
  const char *src = p->d.kind == TC_PIPE_ALL_REDUCE && p->d.inplace ? p->d.out : p->d.in;
  switch (p->d.kind) {
  case TC_PIPE_ALL_REDUCE:
  case TC_PIPE_BROADCAST:
  case TC_PIPE_ALL_GATHER:
    if (!rc) rc = copy(p, send, src + (size_t)k0 * p->es, (size_t)c * p->es, p->d2h);
    break;
  case TC_PIPE_REDUCE_SCATTER:
    for (int r = 0; r < p->size && !rc; r++)
      rc = copy_strided(p, false, send + (size_t)r * (size_t)c * p->es, (char *)p->d.in, r, k0, c);
    break;
  }
  if (!rc) rc = record(p, s->fill_ev, p->d2h);
  return rc;
}

/* Slot s holds chunk s->chunk for MPI: checks the fill (or, without one, the last drain). */
static int check_ready(tc_pipe_t *p, slot_t *s) {
  int q = TCOLL_SUCCESS;
  if (fills(p)) q = query(p, s->fill_ev);
  else if (s->drained) q = query(p, s->drain_ev);
  if (q != TCOLL_SUCCESS) return q;
  if (!fills(p)) s->drained = false;
  if (p->d.premul != 1.0) {
    int64_t c = chunk_len(p, s->chunk);
    int64_t count = p->d.kind == TC_PIPE_REDUCE_SCATTER ? c * p->size : c;
    char *send = s->buf + p->send_off;
    tc_host_scale_copy(send, send, p->d.dtype, count, p->d.premul);
  }
  s->state = SLOT_READY;
  return TCOLL_SUCCESS;
}

static int post_chunk(tc_pipe_t *p, slot_t *s) {
  int64_t n = chunk_len(p, s->chunk);
  int rc = MPI_SUCCESS;
  char *send = s->buf + p->send_off, *recv = slot_recv(p, s);
  if (sends_from_input(p)) send = (char *)p->d.in + (size_t)(s->chunk * p->C) * p->es;
  MPI_Comm comm = p->pc->mpi;
  const char *call = "";
  switch (p->d.kind) {
  case TC_PIPE_ALL_REDUCE:
    call = TC_MPI_NAME("MPI_Iallreduce", n);
    rc = tc_mpi_iallreduce(MPI_IN_PLACE, send, n, p->d.mpi_dtype, p->d.mpi_op, comm, &s->req);
    break;
  case TC_PIPE_BROADCAST:
    call = TC_MPI_NAME("MPI_Ibcast", n);
    rc = tc_mpi_ibcast(send, n, p->d.mpi_dtype, p->d.root, comm, &s->req);
    break;
  case TC_PIPE_ALL_GATHER:
    call = TC_MPI_NAME("MPI_Iallgather", n);
    rc = tc_mpi_iallgather(send, n, p->d.mpi_dtype, recv, n, p->d.mpi_dtype, comm, &s->req);
    break;
  case TC_PIPE_REDUCE_SCATTER:
    call = TC_MPI_NAME("MPI_Ireduce_scatter_block", n);
    rc = tc_mpi_ireduce_scatter_block(send, recv, n, p->d.mpi_dtype, p->d.mpi_op, comm, &s->req);
    break;
  }
  if (rc != MPI_SUCCESS) {
    fail_mpi(p, rc, call);
    return TCOLL_ERR_MPI;
  }
  s->state = SLOT_POSTED;
  return TCOLL_SUCCESS;
}

/* MPI finished chunk s->chunk: divide, queue its host-to-device copies, free the slot. */
static int drain(tc_pipe_t *p, slot_t *s) {
  int64_t k0 = s->chunk * p->C, c = chunk_len(p, s->chunk);
  char *recv = slot_recv(p, s);
  int rc = TCOLL_SUCCESS;
  if (p->d.divisor != 1.0) tc_host_divide(recv, p->d.dtype, c, p->d.divisor);
  if (!p->h2d_after_in) { /* out is written after the caller's stream is done with it */
    rc = stream_wait(p, p->h2d, p->ev_in);
    p->h2d_after_in = true;
  }
  char *out = p->d.out;
  switch (p->d.kind) {
  case TC_PIPE_ALL_REDUCE:
  case TC_PIPE_REDUCE_SCATTER:
    if (!rc && !receives_into_output(p)) rc = copy(p, out + (size_t)k0 * p->es, recv, (size_t)c * p->es, p->h2d);
    break;
  case TC_PIPE_BROADCAST:
    if (!rc && !(p->rank == p->d.root && p->d.inplace))
      rc = copy(p, out + (size_t)k0 * p->es, recv, (size_t)c * p->es, p->h2d);
    break;
  case TC_PIPE_ALL_GATHER:
    for (int r = 0; r < p->size && !rc; r++) {
      if (r == p->rank && p->d.inplace) continue; /* already in place */
      rc = copy_strided(p, true, recv + (size_t)r * (size_t)c * p->es, out, r, k0, c);
    }
    break;
  }
  if (!rc) rc = record(p, s->drain_ev, p->h2d);
  s->drained = true;
  s->state = SLOT_FREE;
  p->ndrained++;
  return rc;
}

static void finish(tc_pipe_t *p) {
  if (p->status == TCOLL_SUCCESS) {
    int rc = record(p, p->ev_done, p->h2d);
    if (rc) fail(p, rc, tc_last_message());
  }
  p->done = true;
  fifo_remove(p);
  active_remove(p);
}

/* One step of p (eng_mu held). */
static void advance(tc_pipe_t *p) {
  if (p->done) return;
  int rc = TCOLL_SUCCESS;
  /* MPI completions: drain them. */
  for (int i = 0; i < TC_PIPE_SLOTS && !rc; i++) {
    slot_t *s = &p->slots[i];
    if (s->state != SLOT_POSTED) continue;
    int flag = 0;
    int mrc = tc_mpi_testall(1, &s->req, &flag); /* errors return, also on Open MPI 4.1 */
    if (mrc != MPI_SUCCESS) {
      fail_mpi(p, mrc, "MPI_Test");
      rc = TCOLL_ERR_MPI;
    } else if (flag && (rc = drain(p, s))) {
      fail(p, rc, tc_last_message());
    }
  }
  /* Fills into free slots, in chunk order. */
  while (!rc && p->next_fill < p->K) {
    slot_t *s = &p->slots[p->next_fill % TC_PIPE_SLOTS];
    if (s->state != SLOT_FREE) break;
    if ((rc = start_fill(p, s, p->next_fill))) fail(p, rc, tc_last_message());
    else p->next_fill++;
  }
  for (int i = 0; i < TC_PIPE_SLOTS && !rc; i++) {
    slot_t *s = &p->slots[i];
    if (s->state != SLOT_FILLING) continue;
    int q = check_ready(p, s);
    if (q != TCOLL_SUCCESS && q != TCOLL_IN_PROGRESS) fail(p, rc = q, tc_last_message());
  }
  /* MPI calls, in chunk order, once every earlier pipeline on the communicator posted all. */
  while (!rc && p->next_post < p->K && p->pc->head == p) {
    slot_t *s = &p->slots[p->next_post % TC_PIPE_SLOTS];
    if (s->state != SLOT_READY || s->chunk != p->next_post) break;
    if (p->pc->dup_req != MPI_REQUEST_NULL) {
      int flag = 0, mrc = MPI_Test(&p->pc->dup_req, &flag, MPI_STATUS_IGNORE);
      if (mrc != MPI_SUCCESS) {
        fail_mpi(p, mrc, "MPI_Comm_idup");
        rc = TCOLL_ERR_MPI;
        break;
      }
      if (!flag) break;
      MPI_Comm_set_errhandler(p->pc->mpi, MPI_ERRORS_RETURN);
    }
    if ((rc = post_chunk(p, s))) break;
    if (++p->next_post == p->K) fifo_remove(p);
  }
  if (p->status != TCOLL_SUCCESS || p->ndrained == p->K) finish(p);
}

static void advance_all_locked(void) {
  for (tc_pipe_t *p = active_head, *next; p; p = next) {
    next = p->next_active;
    advance(p);
  }
}

void tc_pipe_drive_all(void) {
  if (!tc_pipe_any_active()) return;
  pthread_mutex_lock(&eng_mu);
  advance_all_locked();
  pthread_mutex_unlock(&eng_mu);
}

bool tc_pipe_any_active(void) { return __atomic_load_n(&active_head, __ATOMIC_RELAXED) != NULL; }

/* ------------------------------------------------------------------ the work's hooks */

/* The work's POLL step (the schedule engine asks it; waits and the progress thread drive every
 * pipeline through the engine's peer hook as well, tc_pipe_drive_all). Between tests a blocking
 * poll yields the core but does not sleep, which would stall every round by a timer tick. */
static int pipe_poll(void *arg, bool block, double deadline) {
  tc_work_t *w = arg;
  tc_pipe_t *p = TC_WORK_PRIV(w, pipe_priv_t)->pipe;
  for (;;) {
    pthread_mutex_lock(&eng_mu);
    advance_all_locked();
    bool done = p->done;
    int status = p->status;
    pthread_mutex_unlock(&eng_mu);
    if (done) {
      if (status) return tc_error(status, "%s", p->err);
      if (on_host(p)) return TCOLL_SUCCESS;
      /* Device semantics: every thread that pops an output waits for the drains on its current
       * stream (tc_work_ready_wait); the host does not. The event lives as long as the work. */
      return tc_work_ready(w, p->dev, p->ev_done, false);
    }
    if (!block || (deadline > 0 && tc_now() >= deadline)) return TCOLL_IN_PROGRESS;
    sched_yield();
  }
}

static void release_slots(tc_pipe_t *p) {
  if (on_host(p)) {
    for (int i = 0; i < TC_PIPE_SLOTS; i++) {
      if (p->slots[i].buf) tc_scratch_put(p->slots[i].buf);
      p->slots[i].buf = NULL;
    }
    return;
  }
  int devs[2] = {p->dev, p->dev};
  void *streams[2] = {p->d2h, p->h2d};
  for (int i = 0; i < TC_PIPE_SLOTS; i++) {
    if (p->slots[i].buf) tc_pinned_put_after(p->slots[i].buf, 2, devs, streams);
    p->slots[i].buf = NULL;
  }
}

void tc_pipe_release(void *pipe) {
  tc_pipe_t *p = pipe;
  pthread_mutex_lock(&eng_mu);
  if (!p->done) { /* undone before completion (a failed call): nothing reached MPI */
    for (int i = 0; i < TC_PIPE_SLOTS; i++)
      if (p->slots[i].state == SLOT_POSTED) tc_mpi_waitall(1, &p->slots[i].req);
    p->done = true;
    fifo_remove(p);
    active_remove(p);
  }
  pthread_mutex_unlock(&eng_mu);
  release_slots(p);
  pthread_mutex_lock(&eng_mu);
  p->next_free = free_pipes[pool_of(p->dev)];
  free_pipes[pool_of(p->dev)] = p;
  pthread_mutex_unlock(&eng_mu);
}

int tc_pipe_start(tc_work_t *w, const tc_pipe_desc_t *d) {
  size_t es = tc_dtype_size(d->dtype);
  int size = w->comm->size;
  tc_pipe_t *p = NULL;
  pipe_comm_t *pc = NULL;
  pthread_mutex_lock(&eng_mu);
  int rc = pipe_comm_of(w->comm, &pc);
  if (!rc) rc = pipe_get(d->device, &p);
  pthread_mutex_unlock(&eng_mu);
  if (rc) return rc;
  p->d = *d;
  p->rank = w->comm->rank;
  p->size = size;
  p->es = es;
  p->pc = pc;
  p->C = chunk_elems(d->kind, es, size, d->device == TCOLL_HOST ? TC_PIPE_HOST_CHUNK : tc_cfg.staging_chunk);
  p->K = (d->n + p->C - 1) / p->C;
  size_t cb = (size_t)p->C * es;
  switch (d->kind) {
  case TC_PIPE_ALL_REDUCE:
  case TC_PIPE_BROADCAST: p->send_off = p->recv_off = 0, p->slot_bytes = cb; break;
  case TC_PIPE_ALL_GATHER: p->send_off = 0, p->recv_off = cb, p->slot_bytes = cb * (size_t)(size + 1); break;
  case TC_PIPE_REDUCE_SCATTER: p->send_off = 0, p->recv_off = cb * (size_t)size, p->slot_bytes = cb * (size_t)(size + 1); break;
  }
  if (sends_from_input(p) || receives_into_output(p)) /* the slot holds only the strided side */
    p->send_off = p->recv_off = 0, p->slot_bytes = cb * (size_t)size;
  p->next_fill = p->next_post = p->ndrained = 0;
  p->h2d_after_in = p->done = p->active = false;
  p->status = TCOLL_SUCCESS;
  p->err[0] = '\0';
  for (int i = 0; i < TC_PIPE_SLOTS; i++) {
    slot_t *s = &p->slots[i];
    s->state = SLOT_FREE;
    s->drained = false;
    s->req = MPI_REQUEST_NULL;
    s->buf = NULL;
  }
  for (int i = 0; i < TC_PIPE_SLOTS && !rc; i++) {
    if (!on_host(p)) {
      rc = tc_pinned_get(p->slot_bytes, (void **)&p->slots[i].buf);
    } else if (!(p->slots[i].buf = tc_scratch_get(p->slot_bytes))) {
      rc = tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %zu bytes of scratch memory for the pipeline",
                    p->slot_bytes);
    }
  }
  if (on_host(p)) p->d2h = p->h2d = NULL;
  else {
    const tc_device_ops_t *ops = tc_dev();
    if (!rc) rc = tc_dev_copy_streams(d->device, &p->d2h, &p->h2d);
    /* Inputs are ready, and outputs free to write, once the caller's stream reaches this point. */
    if (!rc) rc = ops->event_record(d->device, p->ev_in, tc_dev_current_stream(d->device));
    if (!rc) rc = ops->stream_wait_event(d->device, p->d2h, p->ev_in);
  }
  if (!rc) rc = tc_work_hold(w, p, TC_HELD_PIPE);
  if (rc) {
    p->done = true;
    tc_pipe_release(p);
    return rc;
  }
  TC_WORK_PRIV(w, pipe_priv_t)->pipe = p;
  if ((rc = tc_sched_poll(&w->sched, pipe_poll, w, true))) {
    p->done = true; /* never started; the work holds it and gives it back when recycled */
    return rc;
  }
  pthread_mutex_lock(&eng_mu);
  active_add(p);
  fifo_add(p);
  /* Start copying right away: the device-to-host copies overlap the caller's own work. */
  while (p->next_fill < p->K && p->next_fill < TC_PIPE_SLOTS && !rc) {
    if ((rc = start_fill(p, &p->slots[p->next_fill], p->next_fill))) fail(p, rc, tc_last_message());
    else p->next_fill++;
  }
  if (rc) finish(p);
  else if (on_host(p)) advance(p); /* the fills are done: post the first chunks now */
  pthread_mutex_unlock(&eng_mu);
  return TCOLL_SUCCESS; /* a failed fill is reported by the wait */
}

void tc_pipe_cleanup(void) {
  /* Queued records of (and waits on) the pipelines' events finish before they are destroyed.
   * Only devices this process used have any; synchronizing another would create a CUDA context
   * on it. */
  for (int d = 0; d < tc_dev_count(); d++)
    if (tc_dev_used(d) && tc_dev()->device_sync(d)) tc_warn("%s", tc_last_message());
  pthread_mutex_lock(&eng_mu);
  for (int d = 0; d <= TC_MAX_DEVICES; d++) {
    while (free_pipes[d]) {
      tc_pipe_t *p = free_pipes[d];
      free_pipes[d] = p->next_free;
      pipe_destroy(p);
    }
  }
  if (keyval != MPI_KEYVAL_INVALID) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free_keyval(&keyval);
    keyval = MPI_KEYVAL_INVALID;
  }
  pthread_mutex_unlock(&eng_mu);
}
