/* Emulated devices (TCOLL_FAKE_DEVICES=N): host memory stands in for device memory, and every
 * stream is a queue drained by its own worker thread, so copies and kernels really run
 * asynchronously and a missing synchronization shows up as wrong data, as on a GPU.
 * TCOLL_FAKE_DELAY_US=n makes each queued operation take n more microseconds, widening races. */
#include "device.h"

#include "../base/dtype.h"
#include "../base/host_loops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { OP_COPY, OP_MEMSET, OP_ADD, OP_RECORD, OP_WAIT } op_kind_t;

typedef struct fake_event {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t recorded;  /* generation of the last record call */
  uint64_t completed; /* generation the stream reached */
} fake_event_t;

typedef struct op {
  op_kind_t kind;
  void *dst;
  const void *src;
  size_t n;
  int byte;
  tcoll_dtype_t dt;
  fake_event_t *ev;
  uint64_t gen;
  struct op *next;
} op_t;

typedef struct fake_stream {
  int dev;
  struct fake_stream *next_all; /* every live stream, for device-wide synchronization */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  op_t *head, *tail;
  uint64_t enqueued, completed;
  bool stop;
  pthread_t thread;
} fake_stream_t;

typedef struct alloc_rec {
  uintptr_t base, end;
  int dev;
} alloc_rec_t;

static int ndev;
static fake_stream_t **default_streams;
static long delay_us;
static pthread_mutex_t alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static alloc_rec_t *allocs;
static size_t nallocs, allocs_cap;
static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static fake_stream_t *all_streams;
static uint64_t used; /* bit d: something was allocated or queued on device d (atomic) */

static void touch(int dev) {
  if (dev >= 0 && dev < 64) __atomic_or_fetch(&used, (uint64_t)1 << dev, __ATOMIC_RELAXED);
}

static uint64_t fake_used_mask(void) { return __atomic_load_n(&used, __ATOMIC_RELAXED); }

/* ------------------------------------------------------------------ streams */

static void run_op(op_t *o) {
  if (delay_us > 0) {
    struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
  }
  switch (o->kind) {
  case OP_COPY: memmove(o->dst, o->src, o->n); break;
  case OP_MEMSET: memset(o->dst, o->byte, o->n); break;
  case OP_ADD: tc_host_add(o->dst, o->src, o->dt, (int64_t)o->n); break;
  case OP_RECORD:
    pthread_mutex_lock(&o->ev->mu);
    if (o->gen > o->ev->completed) o->ev->completed = o->gen;
    pthread_cond_broadcast(&o->ev->cv);
    pthread_mutex_unlock(&o->ev->mu);
    break;
  case OP_WAIT:
    pthread_mutex_lock(&o->ev->mu);
    while (o->ev->completed < o->gen) pthread_cond_wait(&o->ev->cv, &o->ev->mu);
    pthread_mutex_unlock(&o->ev->mu);
    break;
  }
}

static void *worker(void *arg) {
  fake_stream_t *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head) break;
    op_t *o = s->head;
    pthread_mutex_unlock(&s->mu);
    run_op(o);
    pthread_mutex_lock(&s->mu);
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    s->completed++;
    pthread_cond_broadcast(&s->cv);
    free(o);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static int stream_new(int dev, fake_stream_t **out) {
  fake_stream_t *s = calloc(1, sizeof *s);
  if (!s) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate a fake stream");
  s->dev = dev;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->thread, NULL, worker, s)) {
    free(s);
    return tc_error(TCOLL_ERR_CUDA, "cannot start a fake stream's worker thread");
  }
  pthread_mutex_lock(&streams_mu);
  s->next_all = all_streams;
  all_streams = s;
  pthread_mutex_unlock(&streams_mu);
  *out = s;
  return TCOLL_SUCCESS;
}

static void stream_delete(fake_stream_t *s) {
  pthread_mutex_lock(&streams_mu);
  for (fake_stream_t **p = &all_streams; *p; p = &(*p)->next_all) {
    if (*p == s) {
      *p = s->next_all;
      break;
    }
  }
  pthread_mutex_unlock(&streams_mu);
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

static fake_stream_t *stream_of(int dev, void *stream) {
  return stream ? stream : default_streams[dev];
}

static int enqueue(int dev, void *stream, op_t tmpl) {
  if (dev < 0 || dev >= ndev)
    return tc_error(TCOLL_ERR_CUDA, "fake device %d does not exist (%d devices)", dev, ndev);
  op_t *o = malloc(sizeof *o);
  if (!o) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot queue a fake device operation");
  *o = tmpl;
  o->next = NULL;
  touch(dev);
  fake_stream_t *s = stream_of(dev, stream);
  pthread_mutex_lock(&s->mu);
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  s->enqueued++;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return TCOLL_SUCCESS;
}

static void drain(fake_stream_t *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t target = s->enqueued;
  while (s->completed < target) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static int fake_stream_sync(int dev, void *stream) {
  if (dev < 0 || dev >= ndev) return tc_error(TCOLL_ERR_CUDA, "fake device %d does not exist", dev);
  drain(stream_of(dev, stream));
  return TCOLL_SUCCESS;
}

/* Like cudaDeviceSynchronize: every stream of the device, the library's own included. */
static int fake_device_sync(int dev) {
  if (dev < 0 || dev >= ndev) return tc_error(TCOLL_ERR_CUDA, "fake device %d does not exist", dev);
  pthread_mutex_lock(&streams_mu);
  for (fake_stream_t *s = all_streams; s; s = s->next_all)
    if (s->dev == dev) drain(s);
  pthread_mutex_unlock(&streams_mu);
  return TCOLL_SUCCESS;
}

static int fake_stream_create(int dev, void **stream) {
  touch(dev);
  fake_stream_t *s;
  int rc = stream_new(dev, &s);
  if (!rc) *stream = s;
  return rc;
}

static int fake_stream_destroy(int dev, void *stream) {
  TC_UNUSED(dev);
  if (stream) stream_delete(stream);
  return TCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ memory */

static size_t alloc_lower_bound(uintptr_t key) {
  size_t lo = 0, hi = nallocs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (allocs[mid].base < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static int fake_alloc(int dev, size_t n, void **p) {
  if (dev < 0 || dev >= ndev) return tc_error(TCOLL_ERR_CUDA, "fake device %d does not exist", dev);
  void *q = NULL;
  if (posix_memalign(&q, 256, n ? n : 1))
    return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %zu bytes on fake device %d", n, dev);
  touch(dev);
  pthread_mutex_lock(&alloc_mu);
  if (nallocs == allocs_cap) {
    size_t cap = allocs_cap ? 2 * allocs_cap : 64;
    alloc_rec_t *a = realloc(allocs, cap * sizeof *a);
    if (!a) {
      pthread_mutex_unlock(&alloc_mu);
      free(q);
      return tc_error(TCOLL_ERR_NO_MEMORY, "cannot record a fake device allocation");
    }
    allocs = a;
    allocs_cap = cap;
  }
  size_t i = alloc_lower_bound((uintptr_t)q);
  memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof *allocs);
  allocs[i] = (alloc_rec_t){(uintptr_t)q, (uintptr_t)q + (n ? n : 1), dev};
  nallocs++;
  pthread_mutex_unlock(&alloc_mu);
  *p = q;
  return TCOLL_SUCCESS;
}

static int fake_free(int dev, void *p) {
  if (!p) return TCOLL_SUCCESS;
  fake_device_sync(dev); /* like cudaFree: queued work on the device finishes first */
  pthread_mutex_lock(&alloc_mu);
  size_t i = alloc_lower_bound((uintptr_t)p);
  if (i < nallocs && allocs[i].base == (uintptr_t)p) {
    memmove(&allocs[i], &allocs[i + 1], (nallocs - i - 1) * sizeof *allocs);
    nallocs--;
  }
  pthread_mutex_unlock(&alloc_mu);
  free(p);
  return TCOLL_SUCCESS;
}

static int fake_pointer_device(const void *p, int near, int *dev) {
  TC_UNUSED(near);
  uintptr_t x = (uintptr_t)p;
  *dev = TCOLL_HOST;
  pthread_mutex_lock(&alloc_mu);
  size_t i = alloc_lower_bound(x + 1);
  if (i > 0 && x < allocs[i - 1].end) *dev = allocs[i - 1].dev;
  pthread_mutex_unlock(&alloc_mu);
  return TCOLL_SUCCESS;
}

static int fake_host_alloc(size_t n, void **p) {
  if (posix_memalign(p, 256, n ? n : 1))
    return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %zu pinned bytes", n);
  return TCOLL_SUCCESS;
}

static int fake_host_free(void *p) {
  free(p);
  return TCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ copies, kernels, events */

static int fake_copy_async(void *dst, const void *src, size_t n, int dev, void *stream) {
  if (n == 0) return TCOLL_SUCCESS;
  return enqueue(dev, stream, (op_t){.kind = OP_COPY, .dst = dst, .src = src, .n = n});
}

static int fake_memset_async(void *p, int byte, size_t n, int dev, void *stream) {
  if (n == 0) return TCOLL_SUCCESS;
  return enqueue(dev, stream, (op_t){.kind = OP_MEMSET, .dst = p, .byte = byte, .n = n});
}

static int fake_add(int dev, void *stream, void *dst, const void *src, tcoll_dtype_t dt,
                    int64_t n) {
  if (n == 0) return TCOLL_SUCCESS;
  return enqueue(dev, stream,
                 (op_t){.kind = OP_ADD, .dst = dst, .src = src, .n = (size_t)n, .dt = dt});
}

static int fake_event_create(int dev, void **event) {
  TC_UNUSED(dev);
  fake_event_t *e = calloc(1, sizeof *e);
  if (!e) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate a fake event");
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  *event = e;
  return TCOLL_SUCCESS;
}

static int fake_event_destroy(int dev, void *event) {
  TC_UNUSED(dev);
  fake_event_t *e = event;
  if (!e) return TCOLL_SUCCESS;
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
  return TCOLL_SUCCESS;
}

static int fake_event_record(int dev, void *event, void *stream) {
  fake_event_t *e = event;
  pthread_mutex_lock(&e->mu);
  uint64_t gen = ++e->recorded;
  pthread_mutex_unlock(&e->mu);
  return enqueue(dev, stream, (op_t){.kind = OP_RECORD, .ev = e, .gen = gen});
}

static int fake_event_sync(int dev, void *event) {
  TC_UNUSED(dev);
  fake_event_t *e = event;
  pthread_mutex_lock(&e->mu);
  uint64_t target = e->recorded;
  while (e->completed < target) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
  return TCOLL_SUCCESS;
}

static int fake_event_query(int dev, void *event) {
  TC_UNUSED(dev);
  fake_event_t *e = event;
  pthread_mutex_lock(&e->mu);
  bool done = e->completed >= e->recorded;
  pthread_mutex_unlock(&e->mu);
  return done ? TCOLL_SUCCESS : TCOLL_IN_PROGRESS;
}

static int fake_stream_wait_event(int dev, void *stream, void *event) {
  fake_event_t *e = event;
  pthread_mutex_lock(&e->mu);
  uint64_t gen = e->recorded;
  pthread_mutex_unlock(&e->mu);
  return enqueue(dev, stream, (op_t){.kind = OP_WAIT, .ev = e, .gen = gen});
}

/* ------------------------------------------------------------------ lifetime */

static int fake_count(void) { return ndev; }

static void fake_describe(char *buf, size_t len) {
  snprintf(buf, len, "emulated (host memory, one worker thread per stream%s)",
           delay_us ? ", delayed" : "");
}

static void fake_fini(void) {
  for (int d = 0; d < ndev; d++)
    if (default_streams && default_streams[d]) stream_delete(default_streams[d]);
  free(default_streams);
  default_streams = NULL;
  ndev = 0;
  __atomic_store_n(&used, 0, __ATOMIC_RELAXED);
  pthread_mutex_lock(&alloc_mu);
  free(allocs);
  allocs = NULL;
  nallocs = allocs_cap = 0;
  pthread_mutex_unlock(&alloc_mu);
}

static int fake_init(void) {
  const char *d = getenv("TCOLL_FAKE_DELAY_US");
  delay_us = 0;
  if (d && *d) {
    char *end = NULL;
    long v = strtol(d, &end, 10);
    if (end == d || *end != '\0' || v < 0 || v > 10 * 1000 * 1000)
      return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                      "environment variable TCOLL_FAKE_DELAY_US=\"%s\" is invalid (expected "
                      "microseconds in [0, "
                      "10000000])",
                      d);
    delay_us = v;
  }
  int n = tc_cfg.fake_devices;
  default_streams = calloc((size_t)n, sizeof *default_streams);
  if (!default_streams) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %d fake devices", n);
  ndev = n;
  for (int i = 0; i < n; i++) {
    int rc = stream_new(i, &default_streams[i]);
    if (rc) {
      fake_fini();
      return rc;
    }
  }
  return TCOLL_SUCCESS;
}

const tc_device_ops_t tc_fake_device_ops = {
    .name = "fake",
    .init = fake_init,
    .fini = fake_fini,
    .count = fake_count,
    .describe = fake_describe,
    .used_mask = fake_used_mask,
    .alloc = fake_alloc,
    .free = fake_free,
    .host_alloc = fake_host_alloc,
    .host_free = fake_host_free,
    .copy_async = fake_copy_async,
    .memset_async = fake_memset_async,
    .stream_create = fake_stream_create,
    .stream_destroy = fake_stream_destroy,
    .stream_sync = fake_stream_sync,
    .event_create = fake_event_create,
    .event_destroy = fake_event_destroy,
    .event_record = fake_event_record,
    .event_sync = fake_event_sync,
    .event_query = fake_event_query,
    .stream_wait_event = fake_stream_wait_event,
    .pointer_device = fake_pointer_device,
    .add = fake_add,
    .device_sync = fake_device_sync,
};
