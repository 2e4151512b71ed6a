/* Backend selection, the device-agnostic helpers built on the ops table, the calling thread's
 * current streams, tcoll's own streams, pooled events, and CUDA-awareness of MPI. */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const tc_device_ops_t tc_fake_device_ops;

static int none_count(void) { return 0; }
static uint64_t none_used(void) { return 0; }
static const tc_device_ops_t none_ops = {
    .name = "none", .count = none_count, .used_mask = none_used};
/* Why the backend is "none" (set when a built backend found no device). */
static char none_reason[256];
/* The hardware backend tcoll_init offered (NULL: built without one). */
static const tc_device_ops_t *hardware;

static const tc_device_ops_t *active = &none_ops;
bool tc_dev_queries_pointers; /* active->pointer_device != NULL (device.h) */

static void set_active(const tc_device_ops_t *ops) {
  active = ops;
  tc_dev_queries_pointers = ops->pointer_device != NULL;
}

/* For what cannot be reported to a caller (frees, destroys, finalize): the backend set the
 * message, naming the call that failed. */
static void warn_failed(int rc) {
  if (rc) tc_warn("%s", tc_last_message());
}

/* tcoll's own streams and pooled events, per device. */
typedef struct dev_res {
  void *d2h, *h2d, *bg;
  void **events;
  int nevents, events_cap;
} dev_res_t;
static pthread_mutex_t res_mu = PTHREAD_MUTEX_INITIALIZER;
static dev_res_t res[TC_MAX_DEVICES];

/* The calling thread's current stream per device. The generation forgets streams set before
 * the backend was last started (they belong to a backend that is gone). */
static _Thread_local void *cur_stream[TC_MAX_DEVICES];
static _Thread_local unsigned cur_gen;
static unsigned backend_gen = 1;

int tc_dev_init(const tc_device_ops_t *hardware_ops) {
  hardware = hardware_ops;
  set_active(&none_ops);
  __atomic_add_fetch(&backend_gen, 1, __ATOMIC_RELAXED);
  if (tc_cfg.fake_devices > TC_MAX_DEVICES)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "TCOLL_FAKE_DEVICES=%d (expected at most %d)",
                    tc_cfg.fake_devices, TC_MAX_DEVICES);
  const tc_device_ops_t *candidate = tc_cfg.fake_devices > 0 ? &tc_fake_device_ops : hardware;
  if (!candidate) return TCOLL_SUCCESS;
  int rc = candidate->init();
  if (rc) return rc;
  if (candidate->count() == 0) { /* no device: keep its reason for the logs, serve none */
    candidate->describe(none_reason, sizeof none_reason);
    candidate->fini();
    return TCOLL_SUCCESS;
  }
  set_active(candidate);
  if (active->count() > TC_MAX_DEVICES)
    tc_warn("%d %s devices; tcoll uses the first %d", active->count(), active->name,
            TC_MAX_DEVICES);
  return TCOLL_SUCCESS;
}

/* Queued records of (and waits on) tcoll's events finish before they are destroyed; devices this
 * process never touched are left alone. Failures are logged: finalize goes on. */
void tc_dev_fini(void) {
  int n = tc_dev_count();
  pthread_mutex_lock(&res_mu);
  for (int d = 0; d < n; d++) {
    dev_res_t *r = &res[d];
    if (tc_dev_used(d)) warn_failed(active->device_sync(d));
    if (r->d2h) warn_failed(active->stream_destroy(d, r->d2h));
    if (r->h2d) warn_failed(active->stream_destroy(d, r->h2d));
    if (r->bg) warn_failed(active->stream_destroy(d, r->bg));
    for (int i = 0; i < r->nevents; i++) warn_failed(active->event_destroy(d, r->events[i]));
    free(r->events);
    memset(r, 0, sizeof *r);
  }
  pthread_mutex_unlock(&res_mu);
  if (active->fini) active->fini();
  set_active(&none_ops);
  none_reason[0] = '\0';
  __atomic_add_fetch(&backend_gen, 1, __ATOMIC_RELAXED);
}

const tc_device_ops_t *tc_dev(void) { return active; }
unsigned tc_dev_generation(void) { return __atomic_load_n(&backend_gen, __ATOMIC_RELAXED); }
int tc_dev_count(void) {
  int n = active->count();
  return n > TC_MAX_DEVICES ? TC_MAX_DEVICES : n;
}

bool tc_dev_used(int dev) {
  return dev >= 0 && dev < TC_MAX_DEVICES && (active->used_mask() >> dev & 1u);
}

const char *tc_dev_describe(char *buf, size_t len) {
  char what[256] = "";
  if (active->describe)
    active->describe(what, sizeof what);
  else if (none_reason[0])
    snprintf(what, sizeof what, "%s", none_reason);
  else if (!hardware)
    snprintf(what, sizeof what, "built without CUDA");
  snprintf(buf, len, "backend %s, %d device(s)%s%s", active->name, tc_dev_count(),
           what[0] ? ": " : "", what);
  return buf;
}

int tcoll_device_count(void) { return tc_dev_count(); }
const char *tcoll_device_backend(void) { return active->name; }

int tc_dev_check(int device, const char *argname) {
  if (device == TCOLL_HOST) return TCOLL_SUCCESS;
  int n = tc_dev_count();
  if (device < 0 || device >= n) {
    if (n == 0)
      return tc_error(
          TCOLL_ERR_INVALID_ARGUMENT,
          "%s->device is %d but no device exists (backend %s; expected TCOLL_HOST, or set "
          "TCOLL_FAKE_DEVICES)",
          argname, device, active->name);
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "%s->device is %d but device %d does not exist (expected TCOLL_HOST or a "
                    "device in [0, %d), "
                    "backend %s)",
                    argname, device, device, n, active->name);
  }
  return TCOLL_SUCCESS;
}

static const char *where(int dev, char *buf, size_t len) {
  if (dev == TCOLL_HOST) return "host memory";
  if (dev == TC_DEV_MANAGED) return "managed memory";
  snprintf(buf, len, "memory of device %d", dev);
  return buf;
}

int tc_dev_check_pointer_query(const void *p, int device, const char *argname) {
  if (!p || !active->pointer_device) return TCOLL_SUCCESS;
  uint64_t used = active->used_mask();
  if (device == TCOLL_HOST && !used) return TCOLL_SUCCESS;
  int near = device != TCOLL_HOST ? device : __builtin_ctzll(used);
  int actual, rc = active->pointer_device(p, near, &actual);
  if (rc) return rc;
  if (actual == device || actual == TC_DEV_MANAGED) return TCOLL_SUCCESS;
  char a[48], b[48];
  return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                  "%s->device is %d but %s->data (%p) is %s (expected %s)", argname, device,
                  argname, p, where(actual, a, sizeof a), where(device, b, sizeof b));
}

int tc_dev_locate(const void *p) {
  if (!p || !active->pointer_device || active->count() <= 0) return TCOLL_HOST;
  int near = active->context_device ? active->context_device() : 0;
  if (near < 0) return TCOLL_HOST;
  int dev = TCOLL_HOST;
  if (active->pointer_device(p, near, &dev) != TCOLL_SUCCESS) return TCOLL_HOST;
  return dev == TC_DEV_MANAGED ? TCOLL_HOST : dev; /* the host reads managed memory */
}

int tc_dev_alloc(int device, size_t nbytes, void **p) { return active->alloc(device, nbytes, p); }

void tc_dev_free(int device, void *p) { warn_failed(active->free(device, p)); }

/* ------------------------------------------------------------------ current streams */

void *tc_dev_current_stream(int dev) {
  if (cur_gen != __atomic_load_n(&backend_gen, __ATOMIC_RELAXED)) {
    memset(cur_stream, 0, sizeof cur_stream);
    cur_gen = __atomic_load_n(&backend_gen, __ATOMIC_RELAXED);
  }
  return dev >= 0 && dev < TC_MAX_DEVICES ? cur_stream[dev] : NULL;
}

void tc_dev_set_current_stream(int dev, void *stream) {
  tc_dev_current_stream(dev); /* refreshes the generation */
  cur_stream[dev] = stream;
}

int tc_dev_sync_current(int dev) {
  if (dev == TCOLL_HOST) return TCOLL_SUCCESS;
  return active->stream_sync(dev, tc_dev_current_stream(dev));
}

int tc_dev_copy_sync(void *dst, int dst_dev, const void *src, int src_dev, size_t n) {
  if (n == 0) return TCOLL_SUCCESS;
  /* Device-to-device across devices goes through the source device's stream (peer copy), once
   * the destination device's stream is done with dst. */
  int dev = src_dev != TCOLL_HOST ? src_dev : dst_dev;
  int rc = TCOLL_SUCCESS;
  if (dst_dev != TCOLL_HOST && dst_dev != dev) rc = tc_dev_sync_current(dst_dev);
  void *s = tc_dev_current_stream(dev);
  if (!rc) rc = active->copy_async(dst, src, n, dev, s);
  if (!rc) rc = active->stream_sync(dev, s);
  return rc;
}

/* ------------------------------------------------------------------ tcoll's streams, events */

static int own_stream(int dev, void **slot, void **out) {
  if (dev < 0 || dev >= tc_dev_count())
    return tc_error(TCOLL_ERR_INTERNAL, "device %d has no streams (%d devices)", dev,
                    tc_dev_count());
  int rc = TCOLL_SUCCESS;
  pthread_mutex_lock(&res_mu);
  if (!*slot) rc = active->stream_create(dev, slot);
  *out = *slot;
  pthread_mutex_unlock(&res_mu);
  return rc;
}

int tc_dev_copy_streams(int dev, void **d2h, void **h2d) {
  *d2h = *h2d = NULL;
  int rc = own_stream(dev, &res[dev < 0 ? 0 : dev].d2h, d2h);
  if (!rc) rc = own_stream(dev, &res[dev < 0 ? 0 : dev].h2d, h2d);
  return rc;
}

int tc_dev_local_stream(int dev, void **bg) {
  return own_stream(dev, &res[dev < 0 ? 0 : dev].bg, bg);
}

int tc_dev_event_get(int dev, void **ev) {
  dev_res_t *r = &res[dev];
  pthread_mutex_lock(&res_mu);
  /* Reuse an event whose last record completed: nothing can still be waiting on it. */
  for (int i = r->nevents; i-- > 0;) {
    int q = active->event_query(dev, r->events[i]);
    if (q == TCOLL_IN_PROGRESS) continue;
    void *found = r->events[i];
    r->events[i] = r->events[--r->nevents];
    pthread_mutex_unlock(&res_mu);
    if (q == TCOLL_SUCCESS) {
      *ev = found;
      return TCOLL_SUCCESS;
    }
    int why = q; /* a failed query: the event leaves the pool, the failure is the caller's */
    char saved[512];
    snprintf(saved, sizeof saved, "%s", tc_last_message());
    active->event_destroy(dev, found);
    return tc_error(why, "%s", saved);
  }
  pthread_mutex_unlock(&res_mu);
  return active->event_create(dev, ev);
}

void tc_dev_event_put(int dev, void *ev) {
  if (!ev) return;
  dev_res_t *r = &res[dev];
  pthread_mutex_lock(&res_mu);
  if (r->nevents == r->events_cap) {
    int cap = r->events_cap ? 2 * r->events_cap : 16;
    void **p = realloc(r->events, (size_t)cap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&res_mu);
      warn_failed(active->event_sync(dev, ev));
      warn_failed(active->event_destroy(dev, ev));
      return;
    }
    r->events = p;
    r->events_cap = cap;
  }
  r->events[r->nevents++] = ev;
  pthread_mutex_unlock(&res_mu);
}

int tc_dev_stream_after(int dev, void *stream, int dev2, void *after) {
  void *ev;
  int rc = tc_dev_event_get(dev2, &ev);
  if (rc) return rc;
  rc = active->event_record(dev2, ev, after);
  if (!rc) rc = active->stream_wait_event(dev, stream, ev);
  tc_dev_event_put(dev2, ev);
  return rc;
}
