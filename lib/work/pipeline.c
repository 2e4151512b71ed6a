/* The staging pipeline's builder (see pipeline.h): turns a tc_pipe_desc_t into steps of the
 * work's schedule, which the engine runs like any other. The pipeline objects (slots, events)
 * come from a pool per device; a mutex guards only the pools. */
#include "pipeline.h"

#include "../comm.h"
#include "../base/dtype.h"
#include "../base/stream_copy.h"
#include "../mpiglue/mpi_calls.h"
#include "../base/scratch.h"
#include "../device/device.h"
#include "staging.h"

#include <stdlib.h>
#include <string.h>

typedef struct slot {
  char *buf;      /* pinned (scratch on the host): [send | recv] */
  void *fill_ev;  /* recorded on d2h after a chunk's fill */
  void *drain_ev; /* recorded on h2d after a chunk's drain */
} slot_t;

typedef struct tc_pipe {
  tc_pipe_desc_t d;
  int dev, rank, size;
  size_t es;
  int64_t C, K; /* elements per chunk, chunks */
  size_t send_off, recv_off, slot_bytes;
  bool stream_out; /* a host all_gather's runs streamed into a large output (drain_chunk) */
  slot_t slots[TC_PIPE_SLOTS];
  void *d2h, *h2d;
  void *ev_in, *ev_done;
  struct tc_pipe *next_free;
} tc_pipe_t;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static tc_pipe_t *free_pipes[TC_MAX_DEVICES + 1]; /* the last: host pipelines */

/* ------------------------------------------------------------------ sizes */

static int64_t chunk_elems(tc_pipe_kind_t kind, size_t es, int size, size_t bytes) {
  /* all_gather / reduce_scatter slots hold size pieces of a chunk: keep a slot near one chunk */
  int64_t c = (int64_t)(bytes / es);
  if (kind == TC_PIPE_ALL_GATHER || kind == TC_PIPE_REDUCE_SCATTER) c /= size;
  if (c < 1) c = 1;
  if (!tc_mpi_one_call(c))
    c = tc_mpi_limit(); /* a chunk is one MPI call: _c, or within the limit */
  return c;
}

bool tc_pipe_wanted(const tcoll_tensor_t *t, tc_pipe_kind_t kind, int64_t n, int64_t run,
                    int size) {
  if (!tc_stage_needed(t) || n <= 0) return false;
  int64_t C = chunk_elems(kind, tc_dtype_size(t->dtype), size, tc_cfg.staging_chunk);
  if (n <= C) return false;
  return run >= n || run * 64 >= C; /* at most ~64 copies per rank per chunk */
}

/* ------------------------------------------------------------------ device or host */

/* A host pipeline (dev == TCOLL_HOST) copies with memcpy on the thread that runs the step and
 * has no streams or events: each step is complete when it returns. */
static bool on_host(const tc_pipe_t *p) { return p->dev == TCOLL_HOST; }
static int pool_of(int dev) { return dev == TCOLL_HOST ? TC_MAX_DEVICES : dev; }

static int copy(tc_pipe_t *p, void *dst, const void *src, size_t nb, void *stream) {
  if (!on_host(p)) return tc_dev()->copy_async(dst, src, nb, p->dev, stream);
  memcpy(dst, src, nb);
  return TCOLL_SUCCESS;
}

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

static int pipe_new(int dev, tc_pipe_t **out) {
  tc_pipe_t *p = calloc(1, sizeof *p);
  if (!p) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate a staging pipeline");
  p->dev = dev;
  int rc = TCOLL_SUCCESS;
  if (!on_host(p)) {
    const tc_device_ops_t *ops = tc_dev();
    rc = ops->event_create(dev, &p->ev_in);
    if (!rc) rc = ops->event_create(dev, &p->ev_done);
    for (int i = 0; i < TC_PIPE_SLOTS && !rc; i++) {
      rc = ops->event_create(dev, &p->slots[i].fill_ev);
      if (!rc) rc = ops->event_create(dev, &p->slots[i].drain_ev);
    }
  }
  if (rc) {
    pipe_destroy(p);
    return rc;
  }
  *out = p;
  return TCOLL_SUCCESS;
}

/* A pipeline object with its events, from the pool of dev. */
static int pipe_get(int dev, tc_pipe_t **out) {
  pthread_mutex_lock(&pool_mu);
  tc_pipe_t *p = free_pipes[pool_of(dev)];
  if (p) free_pipes[pool_of(dev)] = p->next_free;
  pthread_mutex_unlock(&pool_mu);
  if (p) {
    *out = p;
    return TCOLL_SUCCESS;
  }
  return pipe_new(dev, out);
}

static void release_slots(tc_pipe_t *p) {
  int devs[2] = {p->dev, p->dev};
  void *streams[2] = {p->d2h, p->h2d};
  for (int i = 0; i < TC_PIPE_SLOTS; i++) {
    if (!p->slots[i].buf) continue;
    if (on_host(p))
      tc_scratch_put(p->slots[i].buf);
    else
      tc_pinned_put_after(p->slots[i].buf, 2, devs, streams); /* after the queued copies */
    p->slots[i].buf = NULL;
  }
}

/* The work's steps are done (or were never started): nothing uses p any more but copies queued
 * on tcoll's streams, which the pinned pool waits for. */
void tc_pipe_release(void *pipe) {
  tc_pipe_t *p = pipe;
  release_slots(p);
  pthread_mutex_lock(&pool_mu);
  p->next_free = free_pipes[pool_of(p->dev)];
  free_pipes[pool_of(p->dev)] = p;
  pthread_mutex_unlock(&pool_mu);
}

/* ------------------------------------------------------------------ chunks */

static int64_t chunk_len(const tc_pipe_t *p, int64_t k) {
  int64_t k0 = k * p->C;
  return p->d.n - k0 < p->C ? p->d.n - k0 : p->C;
}

static bool fills(const tc_pipe_t *p) {
  return p->d.kind != TC_PIPE_BROADCAST || p->rank == p->d.root;
}

/* On the host MPI can read and write the caller's buffers directly: an all_gather sends
 * straight from its input, a reduce_scatter receives straight into its output (both contiguous
 * per chunk), and only the strided side goes through a slot. */
static bool sends_from_input(const tc_pipe_t *p) {
  return on_host(p) && p->d.kind == TC_PIPE_ALL_GATHER;
}
static bool receives_into_output(const tc_pipe_t *p) {
  return on_host(p) && p->d.kind == TC_PIPE_REDUCE_SCATTER;
}

static slot_t *slot_of(tc_pipe_t *p, int64_t k) { return &p->slots[k % TC_PIPE_SLOTS]; }

static char *chunk_send(tc_pipe_t *p, int64_t k) {
  if (sends_from_input(p)) return (char *)p->d.in + (size_t)(k * p->C) * p->es;
  return slot_of(p, k)->buf + p->send_off;
}

static char *chunk_recv(tc_pipe_t *p, int64_t k) {
  if (receives_into_output(p)) return (char *)p->d.out + (size_t)(k * p->C) * p->es;
  return slot_of(p, k)->buf + p->recv_off;
}

/* Rank r's strided piece, logical elements [k0, k0 + c): one copy per run, between it and the
 * contiguous host buffer `host`. */
static int copy_strided(tc_pipe_t *p, bool to_device, char *host, char *devbase, int r, int64_t k0,
                        int64_t c) {
  int64_t run = p->d.run, stride = p->d.stride, e = k0, end = k0 + c;
  while (e < end) {
    int64_t off = e % run, len = run - off < end - e ? run - off : end - e;
    char *dptr = devbase + (size_t)((e / run) * stride + (int64_t)r * run + off) * p->es;
    char *hptr = host + (size_t)(e - k0) * p->es;
    size_t nb = (size_t)len * p->es;
    int rc = TCOLL_SUCCESS;
    if (to_device && p->stream_out)
      tc_stream_copy(dptr, hptr, nb);
    else
      rc = to_device ? copy(p, dptr, hptr, nb, p->h2d) : copy(p, hptr, dptr, nb, p->d2h);
    if (rc) return rc;
    e += len;
  }
  return TCOLL_SUCCESS;
}

/* A fill step's copies: chunk k into its slot, on d2h. */
static int fill_chunk(void *arg, int64_t k) {
  tc_pipe_t *p = arg;
  int64_t k0 = k * p->C, c = chunk_len(p, k);
  char *send = chunk_send(p, k);
  const char *src = p->d.kind == TC_PIPE_ALL_REDUCE && p->d.inplace ? p->d.out : p->d.in;
  if (p->d.kind != TC_PIPE_REDUCE_SCATTER)
    return copy(p, send, src + (size_t)k0 * p->es, (size_t)c * p->es, p->d2h);
  int rc = TCOLL_SUCCESS;
  for (int r = 0; r < p->size && !rc; r++)
    rc = copy_strided(p, false, send + (size_t)r * (size_t)c * p->es, (char *)p->d.in, r, k0, c);
  return rc;
}

/* A drain step's copies: chunk k from its slot to the output, on h2d. */
static int drain_chunk(void *arg, int64_t k) {
  tc_pipe_t *p = arg;
  int64_t k0 = k * p->C, c = chunk_len(p, k);
  char *recv = chunk_recv(p, k), *out = p->d.out;
  if (p->d.kind != TC_PIPE_ALL_GATHER)
    return copy(p, out + (size_t)k0 * p->es, recv, (size_t)c * p->es, p->h2d);
  int rc = TCOLL_SUCCESS;
  for (int r = 0; r < p->size && !rc; r++) {
    if (r == p->rank && p->d.inplace) continue; /* already in place */
    rc = copy_strided(p, true, recv + (size_t)r * (size_t)c * p->es, out, r, k0, c);
  }
  if (p->stream_out) tc_stream_fence();
  return rc;
}

static bool drains(const tc_pipe_t *p) {
  if (receives_into_output(p)) return false;
  return p->d.kind != TC_PIPE_BROADCAST || !(p->rank == p->d.root && p->d.inplace);
}

/* ------------------------------------------------------------------ steps */

/* Appends a step's dependency on dep (none if dep < 0). */
static int after(tc_sched_t *s, int dep) {
  return dep < 0 ? TCOLL_SUCCESS : tc_sched_after(s, tc_sched_last(s), dep);
}

static tc_dev_step_t dev_step(tc_pipe_t *p, void *stream) {
  return (tc_dev_step_t){.dev = p->dev, .stream = stream, .arg = p};
}

/* What chunk k's MPI call waits for: its slot filled (a device fill is done once its event
 * completed; its copies wait on the device for the slot's last drain), or, where MPI fills
 * the slot, the slot's last drain finished (on the host: the event; in a host pipeline the
 * drain is done when its step is). prev: the slot's last drain step, or -1. */
static int add_fill(tc_sched_t *s, tc_pipe_t *p, int64_t k, int prev, int *last) {
  slot_t *sl = slot_of(p, k);
  int rc = TCOLL_SUCCESS;
  *last = prev;
  if (fills(p) && !sends_from_input(p)) {
    tc_dev_step_t d = dev_step(p, p->d2h);
    d.wait_ev = prev >= 0 ? sl->drain_ev : NULL;
    d.queue = fill_chunk;
    d.k = k;
    d.record_ev = d.done_ev = sl->fill_ev;
    rc = tc_sched_dev(s, &d, false);
  } else if (!on_host(p) && prev >= 0) {
    tc_dev_step_t d = dev_step(p, NULL);
    d.done_ev = sl->drain_ev;
    rc = tc_sched_dev(s, &d, false);
  } else {
    return TCOLL_SUCCESS;
  }
  if (!rc) rc = after(s, prev);
  *last = tc_sched_last(s);
  return rc;
}

static int add_coll(tc_sched_t *s, tc_pipe_t *p, int64_t k, int dep) {
  int64_t c = chunk_len(p, k);
  char *send = chunk_send(p, k), *recv = chunk_recv(p, k);
  const tc_pipe_desc_t *d = &p->d;
  int rc = TCOLL_ERR_INTERNAL;
  switch (d->kind) {
  case TC_PIPE_ALL_REDUCE:
    rc = tc_sched_coll(s, TC_COLL_ALLREDUCE, MPI_IN_PLACE, send, c, d->mpi_dtype, d->mpi_op, 0,
                       false);
    break;
  case TC_PIPE_BROADCAST:
    rc = tc_sched_coll(s, TC_COLL_BCAST, NULL, send, c, d->mpi_dtype, MPI_OP_NULL, d->root, false);
    break;
  case TC_PIPE_ALL_GATHER:
    rc = tc_sched_coll(s, TC_COLL_ALLGATHER, send, recv, c, d->mpi_dtype, MPI_OP_NULL, 0, false);
    break;
  case TC_PIPE_REDUCE_SCATTER:
    rc = tc_sched_coll(s, TC_COLL_REDUCE_SCATTER_BLOCK, send, recv, c, d->mpi_dtype, d->mpi_op, 0,
                       false);
    break;
  }
  return rc ? rc : after(s, dep);
}

/* Chunk k: fill, premul_sum scaling, the MPI call, AVG division, drain. *drain: in, the slot's
 * last drain step (-1: none); out, this chunk's. */
static int add_chunk(tc_sched_t *s, tc_pipe_t *p, int64_t k, int *drain) {
  int64_t c = chunk_len(p, k);
  int last = -1, rc = add_fill(s, p, k, *drain, &last);
  if (!rc && p->d.premul != 1.0) {
    char *send = chunk_send(p, k);
    int64_t count = p->d.kind == TC_PIPE_REDUCE_SCATTER ? c * p->size : c;
    rc = tc_sched_scale(s, send, send, count, p->d.dtype, p->d.premul, 1.0, false);
    if (!rc) rc = after(s, last);
    last = tc_sched_last(s);
  }
  if (!rc) rc = add_coll(s, p, k, last);
  last = tc_sched_last(s);
  if (!rc && p->d.divisor != 1.0) {
    char *recv = chunk_recv(p, k);
    rc = tc_sched_scale(s, recv, recv, c, p->d.dtype, 1.0, p->d.divisor, false);
    if (!rc) rc = after(s, last);
    last = tc_sched_last(s);
  }
  if (rc) return rc;
  /* The drain: done once queued; its event orders the slot's next fill after it. */
  tc_dev_step_t d = dev_step(p, p->h2d);
  d.queue = drains(p) ? drain_chunk : NULL;
  d.k = k;
  d.record_ev = slot_of(p, k)->drain_ev;
  rc = tc_sched_dev(s, &d, false);
  if (!rc) rc = after(s, last);
  *drain = tc_sched_last(s);
  return rc;
}

/* Every chunk's steps, then (in a round of its own, after every drain was queued) the record of
 * ev_done after them: the work is complete then, and its waiters' streams wait for ev_done. */
enum { STEPS_PER_CHUNK = 5 }; /* at most: fill, premul scaling, the MPI call, AVG division, drain */

static int add_steps(tc_sched_t *s, tc_pipe_t *p) {
  if (p->K > (INT_MAX - s->n - 1) / STEPS_PER_CHUNK)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "too many staging chunks (%lld)", (long long)p->K);
  int rc = tc_sched_reserve(s, (int)p->K * STEPS_PER_CHUNK + 1);
  if (!on_host(p)) tc_sched_coll_later(s); /* fills complete on the device: later everywhere */
  int drain[TC_PIPE_SLOTS];
  for (int i = 0; i < TC_PIPE_SLOTS; i++) drain[i] = -1;
  for (int64_t k = 0; k < p->K && !rc; k++) rc = add_chunk(s, p, k, &drain[k % TC_PIPE_SLOTS]);
  if (rc || on_host(p)) return rc;
  tc_dev_step_t d = dev_step(p, p->h2d);
  d.record_ev = p->ev_done;
  return tc_sched_dev(s, &d, true);
}

/* ------------------------------------------------------------------ starting */

static void layout(tc_pipe_t *p) {
  size_t cb = (size_t)p->C * p->es;
  switch (p->d.kind) {
  case TC_PIPE_ALL_REDUCE:
  case TC_PIPE_BROADCAST: p->send_off = p->recv_off = 0, p->slot_bytes = cb; break;
  case TC_PIPE_ALL_GATHER:
    p->send_off = 0, p->recv_off = cb, p->slot_bytes = cb * (size_t)(p->size + 1);
    break;
  case TC_PIPE_REDUCE_SCATTER:
    p->send_off = 0, p->recv_off = cb * (size_t)p->size, p->slot_bytes = cb * (size_t)(p->size + 1);
    break;
  }
  if (sends_from_input(p) || receives_into_output(p)) /* the slot holds only the strided side */
    p->send_off = p->recv_off = 0, p->slot_bytes = cb * (size_t)p->size;
}

static int get_slots(tc_pipe_t *p) {
  int rc = TCOLL_SUCCESS;
  for (int i = 0; i < TC_PIPE_SLOTS && !rc; i++) {
    if (!on_host(p))
      rc = tc_pinned_get(p->slot_bytes, (void **)&p->slots[i].buf);
    else if (!(p->slots[i].buf = tc_scratch_get(p->slot_bytes)))
      rc = tc_error(TCOLL_ERR_NO_MEMORY,
                    "cannot allocate %zu bytes of scratch memory for the pipeline", p->slot_bytes);
  }
  return rc;
}

/* Inputs are ready, and outputs free to write, once the caller's stream reaches this point: both
 * of tcoll's streams wait for it. The waiters' streams wait for ev_done (device semantics: the
 * host blocks only for MPI). */
static int order_streams(tc_work_t *w, tc_pipe_t *p) {
  if (on_host(p)) {
    p->d2h = p->h2d = NULL;
    return TCOLL_SUCCESS;
  }
  const tc_device_ops_t *ops = tc_dev();
  int rc = tc_dev_copy_streams(p->dev, &p->d2h, &p->h2d);
  if (!rc) rc = ops->event_record(p->dev, p->ev_in, tc_dev_current_stream(p->dev));
  if (!rc) rc = ops->stream_wait_event(p->dev, p->d2h, p->ev_in);
  if (!rc) rc = ops->stream_wait_event(p->dev, p->h2d, p->ev_in);
  if (!rc) rc = tc_work_ready(w, p->dev, p->ev_done, false);
  return rc;
}

int tc_pipe_start(tc_work_t *w, const tc_pipe_desc_t *d) {
  tc_pipe_t *p = NULL;
  int rc = pipe_get(d->device, &p);
  if (rc) return rc;
  p->d = *d;
  p->rank = w->comm->rank;
  p->size = w->comm->size;
  p->es = tc_dtype_size(d->dtype);
  p->C = chunk_elems(d->kind, p->es, p->size,
                     d->device == TCOLL_HOST ? TC_PIPE_HOST_CHUNK : tc_cfg.staging_chunk);
  p->K = (d->n + p->C - 1) / p->C;
  /* Runs interleaved into a host output larger than the cache are streamed (base/stream_copy.h:
   * ordinary stores read every line of it first); the same size as the cma all_gather's. */
  p->stream_out = d->device == TCOLL_HOST && d->kind == TC_PIPE_ALL_GATHER && d->run < d->n &&
                  (size_t)d->n * p->es * (size_t)p->size >= TC_STREAM_OUT_MIN_BYTES;
  layout(p);
  for (int i = 0; i < TC_PIPE_SLOTS; i++) p->slots[i].buf = NULL;
  p->d2h = p->h2d = NULL;
  rc = get_slots(p);
  if (!rc) rc = tc_work_hold(w, p, TC_HELD_PIPE);
  if (rc) {
    tc_pipe_release(p);
    return rc;
  }
  /* From here the work holds p. Nothing runs before tc_work_end starts the schedule. */
  rc = order_streams(w, p);
  return rc ? rc : add_steps(&w->sched, p);
}

void tc_pipe_cleanup(void) {
  /* Queued records of (and waits on) the pipelines' events finish before they are destroyed.
   * Only devices this process used have any; synchronizing another would create a CUDA context
   * on it. */
  for (int d = 0; d < tc_dev_count(); d++)
    if (tc_dev_used(d) && tc_dev()->device_sync(d)) tc_warn("%s", tc_last_message());
  pthread_mutex_lock(&pool_mu);
  for (int d = 0; d <= TC_MAX_DEVICES; d++) {
    while (free_pipes[d]) {
      tc_pipe_t *p = free_pipes[d];
      free_pipes[d] = p->next_free;
      pipe_destroy(p);
    }
  }
  pthread_mutex_unlock(&pool_mu);
}
