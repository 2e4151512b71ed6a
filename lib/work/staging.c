#include "staging.h"

#include "../device/device.h"
#include "../sched/placement.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ whole-buffer staging */

static int stage_buffer(tc_work_t *w, size_t n, void **buf);

bool tc_stage_needed(const tcoll_tensor_t *t) {
  return t->device != TCOLL_HOST && !tc_mpi_device_direct(TC_MPI_NONBLOCKING_COLL);
}

/* A device tensor of w is staged unless MPI takes it directly and w computes nothing on it on
 * the host (host code must never touch device memory). */
static bool staged(const tc_work_t *w, const tcoll_tensor_t *t) {
  return t->device != TCOLL_HOST && (w->host_math || tc_stage_needed(t));
}

/* A device tensor handed to MPI as it is: MPI may read or write it as soon as the call is
 * posted, so the caller's stream must be done with it. */
static int direct(const tcoll_tensor_t *t) {
  return t->device == TCOLL_HOST ? TCOLL_SUCCESS : tc_dev_sync_current(t->device);
}

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

/* Where the copy-backs of one device go: tcoll's h2d stream of that device. */
typedef struct cb_streams {
  /* NULL: none yet (the device has no copy-back, or its stream failed) */
  void *h2d[TC_MAX_DEVICES];
} cb_streams_t;

static int h2d_of(cb_streams_t *s, int dev, void **h2d) {
  if (!s->h2d[dev]) {
    void *d2h;
    int rc = tc_dev_copy_streams(dev, &d2h, &s->h2d[dev]);
    if (rc) return rc;
  }
  *h2d = s->h2d[dev];
  return TCOLL_SUCCESS;
}

/* Queues one copy-back on its device's h2d stream, once the posting thread's stream had done
 * what it queued before the call (dst may still be in use there). */
static int queue_copy_back(cb_streams_t *s, const tc_copyback_t *c) {
  if (c->device == TCOLL_HOST) {
    memcpy(c->dst, c->src, c->nbytes);
    return TCOLL_SUCCESS;
  }
  void *h2d;
  int rc = h2d_of(s, c->device, &h2d);
  if (!rc && c->posted_ev) rc = tc_dev()->stream_wait_event(c->device, h2d, c->posted_ev);
  if (!rc) rc = tc_dev()->copy_async(c->dst, c->src, c->nbytes, c->device, h2d);
  return rc;
}

/* Device semantics: every thread that pops an output waits for this event on its current
 * stream (tc_work_ready_wait); the host does not. After a failure the host waits for what was
 * queued instead, so that nothing runs on after the work is recycled. */
static int mark_ready(tc_work_t *w, int dev, void *h2d, bool failed) {
  if (failed) return tc_dev()->stream_sync(dev, h2d);
  void *ev = NULL;
  int rc = tc_dev_event_get(dev, &ev);
  if (!rc) rc = tc_dev()->event_record(dev, ev, h2d);
  if (!rc)
    rc = tc_work_ready(w, dev, ev, true);
  else if (ev)
    tc_dev_event_put(dev, ev);
  if (rc) tc_dev()->stream_sync(dev, h2d);
  return rc;
}

/* The work's pinned buffers (every copy-back's source is one) go back to the pool once the
 * copies queued on the h2d streams are done, not when the work is recycled (right after). */
static void return_pinned_after(tc_work_t *w, const cb_streams_t *s) {
  int devs[TC_MAX_DEVICES], n = 0;
  void *streams[TC_MAX_DEVICES];
  for (int d = 0; d < TC_MAX_DEVICES; d++) {
    if (!s->h2d[d]) continue;
    devs[n] = d;
    streams[n++] = s->h2d[d];
  }
  for (int i = 0; i < w->nheld && n > 0; i++) {
    if (w->held[i].kind != TC_HELD_PINNED || !w->held[i].p) continue;
    tc_pinned_put_after(w->held[i].p, n, devs, streams);
    w->held[i].p = NULL;
  }
}

int tc_stage_copy_backs(tc_work_t *w) {
  cb_streams_t s;
  memset(&s, 0, sizeof s);
  int rc = TCOLL_SUCCESS;
  for (int i = 0; i < w->ncb && !rc; i++) rc = queue_copy_back(&s, &w->cbs[i]);
  for (int d = 0; d < TC_MAX_DEVICES; d++) {
    if (!s.h2d[d]) continue;
    int r = mark_ready(w, d, s.h2d[d], rc != TCOLL_SUCCESS);
    if (!rc) rc = r;
  }
  for (int i = 0; i < w->ncb; i++) { /* queued waits on them hold them: back to the pool */
    if (w->cbs[i].owns_ev) tc_dev_event_put(w->cbs[i].device, w->cbs[i].posted_ev);
    w->cbs[i].posted_ev = NULL;
    w->cbs[i].owns_ev = false;
  }
  return_pinned_after(w, &s);
  return rc;
}

int tc_stage_scratch(tc_work_t *w, size_t nbytes, int device, void **p) {
  if (device != TCOLL_HOST) return stage_buffer(w, nbytes, p);
  if (!(*p = tc_work_scratch(w, nbytes))) return TCOLL_ERR_NO_MEMORY; /* the error is set */
  return TCOLL_SUCCESS;
}

static int stage_buffer(tc_work_t *w, size_t n, void **buf) {
  void *p;
  int rc = tc_pinned_get(n ? n : 1, &p);
  if (rc) return rc;
  rc = tc_work_hold(w, p, TC_HELD_PINNED);
  if (rc) {
    tc_pinned_put(p);
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
