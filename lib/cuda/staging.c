#include "staging.h"

#include "device.h"

#include <stdlib.h>
#include <string.h>

/* Pinned buffers, pooled by power-of-two size class (allocating page-locked memory is slow).
 * A buffer returned while asynchronous copies may still use it waits in `fenced` with one
 * event per stream involved, and joins the pool once those events completed. */
#define MIN_CLASS 12
#define MAX_CLASS 48
#define HEADER 256
#define KEEP 16
#define MAX_FENCES 8

typedef struct pinned {
  struct pinned *next;
  int cls;
  int nfence;
  int fence_dev[MAX_FENCES];
  void *fence_ev[MAX_FENCES];
} pinned_t;
_Static_assert(sizeof(pinned_t) <= HEADER, "pinned header fits");

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pinned_t *pool[MAX_CLASS + 1];
static int pool_n[MAX_CLASS + 1];
static pinned_t *fenced;

/* Page-locked memory from the backend; plain memory when there is no backend. */
static int host_alloc(size_t n, void **p) {
  if (tc_dev()->host_alloc) return tc_dev()->host_alloc(n, p);
  if (posix_memalign(p, HEADER, n)) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %zu bytes", n);
  return TCOLL_SUCCESS;
}

static void host_free(void *p) {
  if (tc_dev()->host_free) tc_dev()->host_free(p);
  else free(p);
}

static pinned_t *header_of(void *p) { return (pinned_t *)((char *)p - HEADER); }

static bool fences_done(pinned_t *b) {
  for (int i = 0; i < b->nfence; i++)
    if (tc_dev()->event_query(b->fence_dev[i], b->fence_ev[i]) == TCOLL_IN_PROGRESS) return false;
  return true;
}

static void fences_drop(pinned_t *b, bool wait) {
  for (int i = 0; i < b->nfence; i++) {
    if (wait) tc_dev()->event_sync(b->fence_dev[i], b->fence_ev[i]);
    tc_dev_event_put(b->fence_dev[i], b->fence_ev[i]);
  }
  b->nfence = 0;
}

/* Into the pool, or freed when the class has enough (pool_mu held). */
static pinned_t *pool_add_locked(pinned_t *b) {
  if (pool_n[b->cls] < KEEP) {
    b->next = pool[b->cls];
    pool[b->cls] = b;
    pool_n[b->cls]++;
    return NULL;
  }
  return b; /* caller frees it outside the lock */
}

/* Moves fenced buffers whose copies completed into the pool (pool_mu held). */
static void reclaim_locked(pinned_t **to_free) {
  for (pinned_t **pp = &fenced; *pp;) {
    pinned_t *b = *pp;
    if (fences_done(b)) {
      *pp = b->next;
      fences_drop(b, false);
      pinned_t *x = pool_add_locked(b);
      if (x) {
        x->next = *to_free;
        *to_free = x;
      }
    } else {
      pp = &b->next;
    }
  }
}

static void free_list(pinned_t *b) {
  while (b) {
    pinned_t *next = b->next;
    host_free(b);
    b = next;
  }
}

void *tc_pinned_get(size_t n) {
  int c = MIN_CLASS;
  while (c < MAX_CLASS && ((size_t)1 << c) < n) c++;
  pinned_t *to_free = NULL, *b = NULL, *wait_for = NULL;
  pthread_mutex_lock(&pool_mu);
  if (fenced) reclaim_locked(&to_free);
  b = pool[c];
  if (b) {
    pool[c] = b->next;
    pool_n[c]--;
  } else {
    /* A buffer of this class still in flight is soon free: better than allocating more. */
    for (pinned_t **pp = &fenced; *pp; pp = &(*pp)->next) {
      if ((*pp)->cls == c) {
        wait_for = *pp;
        *pp = wait_for->next;
        break;
      }
    }
  }
  pthread_mutex_unlock(&pool_mu);
  free_list(to_free);
  if (wait_for) {
    fences_drop(wait_for, true);
    b = wait_for;
  }
  if (!b) {
    void *p = NULL;
    if (host_alloc(HEADER + ((size_t)1 << c), &p)) return NULL;
    b = p;
    b->cls = c;
  }
  b->nfence = 0;
  b->next = NULL;
  return (char *)b + HEADER;
}

void tc_stage_release(void *p) {
  if (!p) return;
  pinned_t *b = header_of(p);
  pthread_mutex_lock(&pool_mu);
  b = pool_add_locked(b);
  pthread_mutex_unlock(&pool_mu);
  if (b) host_free(b);
}

void tc_pinned_put_after(void *p, int n, const int *devs, void *const *streams) {
  if (!p) return;
  pinned_t *b = header_of(p);
  b->nfence = 0;
  for (int i = 0; i < n; i++) {
    void *ev = NULL;
    bool ok = b->nfence < MAX_FENCES && tc_dev_event_get(devs[i], &ev) == TCOLL_SUCCESS;
    if (ok && tc_dev()->event_record(devs[i], ev, streams[i]) == TCOLL_SUCCESS) {
      b->fence_dev[b->nfence] = devs[i];
      b->fence_ev[b->nfence++] = ev;
    } else {
      if (ev) tc_dev_event_put(devs[i], ev);
      tc_dev()->stream_sync(devs[i], streams[i]); /* no event to spare: wait now */
    }
  }
  if (b->nfence == 0) {
    tc_stage_release(p);
    return;
  }
  pthread_mutex_lock(&pool_mu);
  b->next = fenced;
  fenced = b;
  pthread_mutex_unlock(&pool_mu);
}

void tc_stage_cleanup(void) {
  pthread_mutex_lock(&pool_mu);
  pinned_t *f = fenced;
  fenced = NULL;
  pinned_t *all = NULL;
  for (int c = 0; c <= MAX_CLASS; c++) {
    while (pool[c]) {
      pinned_t *b = pool[c];
      pool[c] = b->next;
      b->next = all;
      all = b;
    }
    pool_n[c] = 0;
  }
  pthread_mutex_unlock(&pool_mu);
  while (f) {
    pinned_t *next = f->next;
    fences_drop(f, true);
    f->next = all;
    all = f;
    f = next;
  }
  free_list(all);
}

/* ------------------------------------------------------------------ whole-buffer staging */

bool tc_stage_needed(const tcoll_tensor_t *t) {
  return t->device != TCOLL_HOST && !tc_dev_mpi_direct(TC_MPI_NONBLOCKING_COLL);
}

/* A device tensor of w is staged unless MPI takes it directly and w computes nothing on it on
 * the host (host code must never touch device memory). */
static bool staged(const tc_work_t *w, const tcoll_tensor_t *t) {
  return t->device != TCOLL_HOST && (w->host_math || tc_stage_needed(t));
}

/* A device tensor handed to MPI as it is: MPI may read or write it as soon as the call is
 * posted, so the caller's stream must be done with it. */
static int direct(const tcoll_tensor_t *t) { return t->device == TCOLL_HOST ? TCOLL_SUCCESS : tc_dev_sync_current(t->device); }

int tc_stage_read(void *dst, const void *src, int src_dev, size_t n) {
  if (n == 0) return TCOLL_SUCCESS;
  if (src_dev == TCOLL_HOST) {
    memcpy(dst, src, n);
    return TCOLL_SUCCESS;
  }
  const tc_device_ops_t *ops = tc_dev();
  void *d2h, *h2d, *ev = NULL;
  int rc = tc_dev_copy_streams(src_dev, &d2h, &h2d);
  if (!rc) rc = tc_dev_stream_after(src_dev, d2h, src_dev, tc_dev_current_stream(src_dev));
  if (!rc) rc = ops->copy_async(dst, src, n, src_dev, d2h);
  if (!rc) rc = tc_dev_event_get(src_dev, &ev);
  if (!rc) rc = ops->event_record(src_dev, ev, d2h);
  if (!rc) rc = ops->event_sync(src_dev, ev);
  if (ev) tc_dev_event_put(src_dev, ev);
  return rc;
}

int tc_stage_write(void *dst, int dst_dev, const void *src, size_t n) {
  if (n == 0) return TCOLL_SUCCESS;
  if (dst_dev == TCOLL_HOST) {
    memcpy(dst, src, n);
    return TCOLL_SUCCESS;
  }
  const tc_device_ops_t *ops = tc_dev();
  void *d2h, *h2d, *ev = NULL, *cur = tc_dev_current_stream(dst_dev);
  int rc = tc_dev_copy_streams(dst_dev, &d2h, &h2d);
  if (!rc) rc = tc_dev_stream_after(dst_dev, h2d, dst_dev, cur);
  if (!rc) rc = ops->copy_async(dst, src, n, dst_dev, h2d);
  if (!rc) rc = tc_dev_event_get(dst_dev, &ev);
  if (!rc) rc = ops->event_record(dst_dev, ev, h2d);
  if (!rc) rc = ops->stream_wait_event(dst_dev, cur, ev);
  if (!rc) rc = ops->event_sync(dst_dev, ev);
  if (ev) tc_dev_event_put(dst_dev, ev);
  return rc;
}

int tc_stage_copy_backs(tc_work_t *w) {
  const tc_device_ops_t *ops = tc_dev();
  bool used[TC_MAX_DEVICES] = {false};
  void *h2d[TC_MAX_DEVICES];
  int rc = TCOLL_SUCCESS;
  for (int i = 0; i < w->ncb && !rc; i++) {
    tc_copyback_t *c = &w->cbs[i];
    if (c->device == TCOLL_HOST) {
      memcpy(c->dst, c->src, c->nbytes);
      continue;
    }
    int d = c->device;
    if (!used[d]) {
      void *d2h;
      rc = tc_dev_copy_streams(d, &d2h, &h2d[d]);
      used[d] = true;
    }
    /* out is written once the posting thread's stream is done with it (not the stream of
     * whichever thread completes the work: the progress thread, say). */
    if (!rc && c->posted_ev) rc = ops->stream_wait_event(d, h2d[d], c->posted_ev);
    if (!rc) rc = ops->copy_async(c->dst, c->src, c->nbytes, d, h2d[d]);
  }
  for (int d = 0; d < TC_MAX_DEVICES; d++) {
    if (!used[d]) continue;
    /* Device semantics: every thread that pops an output waits for this event on its current
     * stream (tc_work_ready_wait); the host does not. */
    void *ev = NULL;
    int r = tc_dev_event_get(d, &ev);
    if (!r) r = ops->event_record(d, ev, h2d[d]);
    if (!r) r = tc_work_ready(w, d, ev, true);
    else if (ev) tc_dev_event_put(d, ev);
    if (!rc) rc = r;
    if (rc) ops->stream_sync(d, h2d[d]);
  }
  for (int i = 0; i < w->ncb; i++) { /* queued waits on them hold them: back to the pool */
    if (w->cbs[i].posted_ev) tc_dev_event_put(w->cbs[i].device, w->cbs[i].posted_ev);
    w->cbs[i].posted_ev = NULL;
  }
  /* The pinned sources go back to the pool once their copies are done, not when the work is
   * recycled (right after this). */
  for (int i = 0; i < w->nheld; i++) {
    if (w->held[i].kind != TC_HELD_PINNED || !w->held[i].p) continue;
    for (int j = 0; j < w->ncb; j++) {
      tc_copyback_t *c = &w->cbs[j];
      if (c->src == w->held[i].p && c->device != TCOLL_HOST) {
        tc_pinned_put_after(w->held[i].p, 1, &c->device, &h2d[c->device]);
        w->held[i].p = NULL;
        break;
      }
    }
  }
  return rc;
}

static int stage_buffer(tc_work_t *w, size_t n, void **buf) {
  void *p = tc_pinned_get(n ? n : 1);
  if (!p) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %zu bytes of pinned staging memory", n);
  int rc = tc_work_hold(w, p, TC_HELD_PINNED);
  if (rc) {
    tc_stage_release(p);
    return rc;
  }
  *buf = p;
  return TCOLL_SUCCESS;
}

int tc_stage_in(tc_work_t *w, const tcoll_tensor_t *t, const void **buf) {
  if (!staged(w, t)) {
    *buf = t->data;
    return direct(t);
  }
  size_t n = tcoll_tensor_nbytes(t);
  void *p;
  int rc = stage_buffer(w, n, &p);
  if (!rc) rc = tc_stage_read(p, t->data, t->device, n);
  if (!rc) *buf = p;
  return rc;
}

int tc_stage_out(tc_work_t *w, const tcoll_tensor_t *t, void **buf) {
  if (!staged(w, t)) {
    *buf = t->data;
    return direct(t);
  }
  size_t n = tcoll_tensor_nbytes(t);
  int rc = stage_buffer(w, n, buf);
  if (!rc) rc = tc_work_copyback(w, t->data, *buf, n, t->device);
  return rc;
}

int tc_stage_inout(tc_work_t *w, const tcoll_tensor_t *t, void **buf) {
  if (!staged(w, t)) {
    *buf = t->data;
    return direct(t);
  }
  int rc = tc_stage_out(w, t, buf);
  if (!rc) rc = tc_stage_read(*buf, t->data, t->device, tcoll_tensor_nbytes(t));
  return rc;
}
