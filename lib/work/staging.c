#include "staging.h"

#include "../device/device.h"
#include "../sched/placement.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ whole-buffer staging */

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
