/* Single-process multi-device ops (torch.nn.parallel: Broadcast, ReduceAddCoalesced, Scatter,
 * Gather), stream-ordered as documented in tcoll.h: copies run on tcoll's background stream of
 * the destination device (of the source device for device-to-host copies), after the calling
 * thread's current streams of every device involved; afterwards those current streams wait for
 * the copies, and the host waits only when a host buffer is written or read. */
#include "../argcheck.h"
#include "../base/dtype.h"
#include "../base/host_loops.h"
#include "../work/registry.h"
#include "../tensor.h"
#include "../device/device.h"
#include "local.h"
#include "../work/staging.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID(...) tc_error(TCOLL_ERR_INVALID_ARGUMENT, __VA_ARGS__)

/* ------------------------------------------------------------------ a stream-ordered session */

typedef struct session {
  bool involved[TC_MAX_DEVICES]; /* devices whose current streams order the copies */
  bool started[TC_MAX_DEVICES];  /* bg stream already waits for the involved streams */
  void *bg[TC_MAX_DEVICES];
  bool host_touched; /* a host buffer is read or written: wait at the end */
} session_t;

static void involve(session_t *s, int dev) {
  if (dev == TCOLL_HOST)
    s->host_touched = true;
  else
    s->involved[dev] = true;
}

/* tcoll's background stream of dev, ordered after every involved current stream. */
static int bg_of(session_t *s, int dev, void **bg) {
  if (!s->started[dev]) {
    int rc = tc_dev_local_stream(dev, &s->bg[dev]);
    for (int x = 0; x < TC_MAX_DEVICES && !rc; x++)
      if (s->involved[x]) rc = tc_dev_stream_after(dev, s->bg[dev], x, tc_dev_current_stream(x));
    if (rc) return rc;
    s->started[dev] = true;
  }
  *bg = s->bg[dev];
  return TCOLL_SUCCESS;
}

static int scopy(session_t *s, void *dst, int dst_dev, const void *src, int src_dev, size_t n) {
  if (n == 0 || dst == src) return TCOLL_SUCCESS;
  if (dst_dev == TCOLL_HOST && src_dev == TCOLL_HOST) {
    memcpy(dst, src, n);
    return TCOLL_SUCCESS;
  }
  int dev = dst_dev != TCOLL_HOST ? dst_dev : src_dev;
  void *bg;
  int rc = bg_of(s, dev, &bg);
  if (!rc) rc = tc_dev()->copy_async(dst, src, n, dev, bg);
  return rc;
}

/* Waits on the host for the background streams used so far (host buffers involved). */
static int session_sync(session_t *s) {
  int rc = TCOLL_SUCCESS;
  for (int d = 0; d < TC_MAX_DEVICES; d++)
    if (s->started[d] && !rc) rc = tc_dev()->stream_sync(d, s->bg[d]);
  return rc;
}

/* The involved current streams wait for the background streams; the host too if needed. */
static int session_end(session_t *s, int rc) {
  for (int d = 0; d < TC_MAX_DEVICES; d++) {
    if (!s->started[d]) continue;
    for (int x = 0; x < TC_MAX_DEVICES; x++) {
      if (!s->involved[x]) continue;
      int r = tc_dev_stream_after(x, tc_dev_current_stream(x), d, s->bg[d]);
      if (!rc) rc = r;
    }
  }
  if (s->host_touched || rc) {
    int r = session_sync(s);
    if (!rc) rc = r;
  }
  return rc;
}

/* ------------------------------------------------------------------ outputs */

/* Outputs this call allocated, freed if it fails. */
typedef struct outs {
  tcoll_tensor_t **t;
  int n, cap;
} outs_t;

static int out_prepare(outs_t *o, tcoll_tensor_t *out, tcoll_dtype_t dt, int ndim,
                       const int64_t *shape, int dev) {
  if (out->data) return TCOLL_SUCCESS;
  if (o->n == o->cap) {
    int cap = o->cap ? 2 * o->cap : 8;
    tcoll_tensor_t **p = realloc(o->t, (size_t)cap * sizeof *p);
    if (!p) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %d entries", cap);
    o->t = p;
    o->cap = cap;
  }
  *out = tcoll_tensor_make(NULL, dt, ndim, shape, dev);
  int rc = tc_tensor_storage(out, false);
  if (!rc) o->t[o->n++] = out;
  return rc;
}

static int outs_done(outs_t *o, int rc) {
  if (rc)
    for (int i = 0; i < o->n; i++) tc_tensor_release(o->t[i]);
  free(o->t);
  return rc;
}

/* ------------------------------------------------------------------ checks */

/* An output must not be pending, nor be read by running work: these ops write outside the
 * registry, so nothing else would stop them. */
static int check_busy(const tcoll_tensor_t *t, const char *name) {
  return tc_registry_check_writable(t->data, tcoll_tensor_nbytes(t), name);
}

/* An output (data given) must not overlap any input but one it is identical to (allowed). */
static int check_out_vs_ins(const tcoll_tensor_t *out, const char *oname, const tcoll_tensor_t *in,
                            int nin, const char *iname, int allowed) {
  char nm[48];
  for (int j = 0; j < nin; j++) {
    snprintf(nm, sizeof nm, "%s[%d]", iname, j);
    int rc = tc_check_disjoint(out, oname, &in[j], nm, j == allowed);
    if (rc) return rc;
  }
  return TCOLL_SUCCESS;
}

/* A device argument (not a tensor's): TCOLL_HOST or an existing device. */
static int check_device_arg(int dev, const char *name) {
  if (dev == TCOLL_HOST) return TCOLL_SUCCESS;
  int nd = tc_dev_count();
  if (dev >= 0 && dev < nd) return TCOLL_SUCCESS;
  if (nd == 0)
    return INVALID(
        "%s is %d but no device exists (backend %s; expected TCOLL_HOST, or set "
        "TCOLL_FAKE_DEVICES)",
        name, dev, tcoll_device_backend());
  return INVALID(
      "%s is %d but device %d does not exist (expected TCOLL_HOST or a device in [0, %d), backend "
      "%s)",
      name, dev, dev, nd, tcoll_device_backend());
}

/* An output of a local op: its device is the one the op was told to use (`which` says which
 * argument), not the input's, so say so before the generic output check. */
static int check_out_on(const tcoll_tensor_t *out, const char *name, tcoll_dtype_t dt, int ndim,
                        const int64_t *shape, int device, const char *which) {
  if (out && out->data && out->device != device)
    return INVALID("%s->device is %d (expected %d, %s)", name, out->device, device, which);
  return tc_check_output(out, name, dt, ndim, shape, device);
}

/* Pending work that writes any byte of an input completes first. */
static int wait_inputs(const tcoll_tensor_t *in, int n) {
  for (int i = 0; i < n; i++) {
    int rc = in[i].data ? tc_wait_writers(in[i].data, tcoll_tensor_nbytes(&in[i])) : TCOLL_SUCCESS;
    if (rc) return rc;
  }
  return TCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ broadcast_coalesced */

int tcoll_local_broadcast_coalesced(const tcoll_tensor_t *in, int n, const int *devices,
                                    int n_devices, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_local_broadcast_coalesced");
  int rc = tc_require_init();
  if (rc) return rc;
  if (n < 0) return INVALID("n is %d (expected >= 0)", n);
  if (n_devices < 0) return INVALID("n_devices is %d (expected >= 0)", n_devices);
  if (n > 0 && !in) return INVALID("in is NULL (expected %d tensors)", n);
  if (n_devices > 0 && !devices) return INVALID("devices is NULL (expected %d devices)", n_devices);
  if (n > 0 && n_devices > 0 && !out)
    return INVALID("out is NULL (expected %lld tensors)", (long long)n * n_devices);
  char nm[48], on[48];
  for (int i = 0; i < n; i++) {
    snprintf(nm, sizeof nm, "in[%d]", i);
    if ((rc = tc_check_tensor(&in[i], nm))) return rc;
  }
  for (int d = 0; d < n_devices; d++) {
    snprintf(nm, sizeof nm, "devices[%d]", d);
    if ((rc = check_device_arg(devices[d], nm))) return rc;
  }
  for (int d = 0; d < n_devices; d++) {
    snprintf(nm, sizeof nm, "devices[%d]", d);
    for (int i = 0; i < n; i++) {
      tcoll_tensor_t *o = &out[d * n + i];
      snprintf(on, sizeof on, "out[%d]", d * n + i);
      if ((rc = check_out_on(o, on, in[i].dtype, in[i].ndim, in[i].shape, devices[d], nm)))
        return rc;
      if (!o->data) continue;
      if ((rc = check_out_vs_ins(o, on, in, n, "in", i))) return rc;
      if (o->data != in[i].data && (rc = check_busy(o, on)))
        return rc; /* in[i] itself is not written */
    }
  }
  if ((rc = wait_inputs(in, n))) return rc;
  outs_t al = {0};
  session_t s;
  memset(&s, 0, sizeof s);
  for (int i = 0; i < n; i++) involve(&s, in[i].device);
  for (int d = 0; d < n_devices; d++) involve(&s, devices[d]);
  for (int d = 0; d < n_devices && !rc; d++) {
    for (int i = 0; i < n && !rc; i++) {
      tcoll_tensor_t *o = &out[d * n + i];
      rc = out_prepare(&al, o, in[i].dtype, in[i].ndim, in[i].shape, devices[d]);
      if (!rc)
        rc = scopy(&s, o->data, devices[d], in[i].data, in[i].device, tcoll_tensor_nbytes(&in[i]));
    }
  }
  return outs_done(&al, session_end(&s, rc));
}

/* ------------------------------------------------------------------ reduce_add_coalesced */

/* Device scratch for inputs from other devices, used on the destination's background stream
 * only (so reusing it is ordered). When it grows, the old buffer is kept until cleanup: queued
 * work of another thread may still use it. */
typedef struct retired {
  struct retired *next;
  int dev;
  void *p;
} retired_t;
static pthread_mutex_t scratch_mu = PTHREAD_MUTEX_INITIALIZER;
static void *scratch[TC_MAX_DEVICES];
static size_t scratch_bytes[TC_MAX_DEVICES];
static retired_t *retired;

static int dev_scratch(int dev, size_t n, void **p) {
  int rc = TCOLL_SUCCESS;
  pthread_mutex_lock(&scratch_mu);
  if (scratch_bytes[dev] < n) {
    size_t want = scratch_bytes[dev] * 2 > n ? scratch_bytes[dev] * 2 : n;
    void *q = NULL;
    retired_t *r = scratch[dev] ? malloc(sizeof *r) : NULL;
    if (scratch[dev] && !r) rc = tc_error(TCOLL_ERR_NO_MEMORY, "cannot record a retired buffer");
    if (!rc) rc = tc_dev()->alloc(dev, want, &q);
    if (!rc) {
      if (r) {
        *r = (retired_t){retired, dev, scratch[dev]};
        retired = r;
      }
      scratch[dev] = q;
      scratch_bytes[dev] = want;
    } else {
      free(r);
    }
  }
  *p = scratch[dev];
  pthread_mutex_unlock(&scratch_mu);
  return rc;
}

void tc_local_cleanup(void) {
  pthread_mutex_lock(&scratch_mu);
  for (int d = 0; d < TC_MAX_DEVICES; d++) {
    if (scratch[d]) tc_dev_free(d, scratch[d]);
    scratch[d] = NULL;
    scratch_bytes[d] = 0;
  }
  while (retired) {
    retired_t *r = retired;
    retired = r->next;
    tc_dev_free(r->dev, r->p);
    free(r);
  }
  pthread_mutex_unlock(&scratch_mu);
}

static int reduce_one(session_t *s, const tcoll_tensor_t *in, int n_devices, int n, int i, int dst,
                      tcoll_tensor_t *o) {
  size_t nb = tcoll_tensor_nbytes(&in[i]);
  int64_t cnt = tcoll_tensor_numel(&in[i]);
  tcoll_dtype_t dt = in[i].dtype;
  /* Start from the input that is the output itself, or one already on the destination. */
  int first = 0;
  for (int d = 0; d < n_devices; d++)
    if (in[d * n + i].data == o->data) first = d;
  if (in[first * n + i].data != o->data)
    for (int d = n_devices; d-- > 0;)
      if (in[d * n + i].device == dst) first = d;
  int rc = scopy(s, o->data, dst, in[first * n + i].data, in[first * n + i].device, nb);
  if (rc || n_devices == 1 || cnt == 0) return rc;
  if (dst == TCOLL_HOST) {
    char *tmp;
    if ((rc = tc_pinned_get(nb * (size_t)(n_devices - 1), (void **)&tmp))) return rc;
    char *at = tmp;
    for (int d = 0; d < n_devices && !rc; d++) {
      if (d == first) continue;
      rc = scopy(s, at, TCOLL_HOST, in[d * n + i].data, in[d * n + i].device, nb);
      at += nb;
    }
    if (!rc) rc = session_sync(s);
    at = tmp;
    for (int d = 0; d < n_devices && !rc; d++) {
      if (d == first) continue;
      tc_host_add(o->data, at, dt, cnt);
      at += nb;
    }
    tc_pinned_put(tmp);
    return rc;
  }
  void *bg;
  if ((rc = bg_of(s, dst, &bg))) return rc;
  for (int d = 0; d < n_devices && !rc; d++) {
    if (d == first) continue;
    const tcoll_tensor_t *x = &in[d * n + i];
    const void *src = x->data;
    if (x->device != dst) {
      void *tmp;
      if ((rc = dev_scratch(dst, nb, &tmp))) break;
      rc = scopy(s, tmp, dst, x->data, x->device, nb);
      src = tmp;
    }
    if (!rc) rc = tc_dev()->add(dst, bg, o->data, src, dt, cnt);
  }
  return rc;
}

int tcoll_local_reduce_add_coalesced(const tcoll_tensor_t *in, int n_devices, int n,
                                     int destination, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_local_reduce_add_coalesced");
  int rc = tc_require_init();
  if (rc) return rc;
  if (n_devices < 1) return INVALID("n_devices is %d (expected >= 1)", n_devices);
  if (n < 0) return INVALID("n is %d (expected >= 0)", n);
  if ((rc = check_device_arg(destination, "destination"))) return rc;
  if (n == 0) return TCOLL_SUCCESS;
  if (!in) return INVALID("in is NULL (expected %lld tensors)", (long long)n_devices * n);
  if (!out) return INVALID("out is NULL (expected %d tensors)", n);
  char nm[48], rn[48];
  for (int d = 0; d < n_devices; d++) {
    for (int i = 0; i < n; i++) {
      const tcoll_tensor_t *x = &in[d * n + i];
      snprintf(nm, sizeof nm, "in[%d]", d * n + i);
      if ((rc = tc_check_tensor(x, nm))) return rc;
      if (x->device != in[d * n].device)
        return INVALID(
            "%s->device is %d but in[%d]->device is %d (expected group %d on one device)", nm,
            x->device, d * n, in[d * n].device, d);
      if (d == 0) continue;
      snprintf(rn, sizeof rn, "in[%d]", i);
      if (x->dtype != in[i].dtype)
        return INVALID("%s->dtype is %s but %s->dtype is %s (expected the same)", nm,
                       tcoll_dtype_name(x->dtype), rn, tcoll_dtype_name(in[i].dtype));
      if (!tc_same_shape(x->ndim, x->shape, in[i].ndim, in[i].shape)) {
        char a[96], b[96];
        return INVALID("%s->shape is %s but %s->shape is %s (expected the same)", nm,
                       tc_shape_str(a, sizeof a, x->ndim, x->shape), rn,
                       tc_shape_str(b, sizeof b, in[i].ndim, in[i].shape));
      }
    }
  }
  for (int i = 0; i < n; i++) {
    snprintf(nm, sizeof nm, "out[%d]", i);
    if ((rc = check_out_on(&out[i], nm, in[i].dtype, in[i].ndim, in[i].shape, destination,
                           "the destination")))
      return rc;
    if (!out[i].data) continue;
    int allowed = -1; /* the output may be one of its own inputs */
    for (int d = 0; d < n_devices; d++)
      if (in[d * n + i].data == out[i].data) allowed = d * n + i;
    if ((rc = check_out_vs_ins(&out[i], nm, in, n_devices * n, "in", allowed)) ||
        (rc = check_busy(&out[i], nm)))
      return rc;
  }
  if ((rc = wait_inputs(in, n_devices * n))) return rc;
  outs_t al = {0};
  session_t s;
  memset(&s, 0, sizeof s);
  for (int k = 0; k < n_devices * n; k++) involve(&s, in[k].device);
  involve(&s, destination);
  for (int i = 0; i < n && !rc; i++) {
    rc = out_prepare(&al, &out[i], in[i].dtype, in[i].ndim, in[i].shape, destination);
    if (!rc) rc = reduce_one(&s, in, n_devices, n, i, destination, &out[i]);
  }
  return outs_done(&al, session_end(&s, rc));
}

/* ------------------------------------------------------------------ scatter / gather */

/* Copies the slab [start, start + len) along dim of a tensor (outer x full x inner elements)
 * to or from a compact tensor (outer x len x inner). */
static int copy_slab(session_t *s, bool to_compact, void *compact, int cdev, void *big, int bdev,
                     int64_t outer, int64_t full, int64_t inner, int64_t start, int64_t len,
                     size_t es) {
  int rc = TCOLL_SUCCESS;
  size_t run = (size_t)(len * inner) * es;
  if (run == 0) return rc;
  for (int64_t o = 0; o < outer && !rc; o++) {
    char *b = (char *)big + (size_t)((o * full + start) * inner) * es;
    char *c = (char *)compact + (size_t)o * run;
    rc = to_compact ? scopy(s, c, cdev, b, bdev, run) : scopy(s, b, bdev, c, cdev, run);
  }
  return rc;
}

int tcoll_local_scatter(const tcoll_tensor_t *in, const int *devices, int n_devices,
                        const int64_t *chunk_sizes, int dim, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_local_scatter");
  int rc = tc_require_init();
  if (rc) return rc;
  if ((rc = tc_check_tensor(in, "in"))) return rc;
  if (n_devices < 1) return INVALID("n_devices is %d (expected >= 1)", n_devices);
  if (!devices) return INVALID("devices is NULL (expected %d devices)", n_devices);
  if (!out) return INVALID("out is NULL (expected %d tensors)", n_devices);
  int d0;
  if ((rc = tc_check_dim(dim, in->ndim, "dim", &d0))) return rc;
  int64_t len = in->shape[d0];
  int64_t *sizes = malloc((size_t)n_devices * 2 * sizeof *sizes);
  if (!sizes) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %d sizes", n_devices);
  int64_t *starts = sizes + n_devices, sum = 0;
  char nm[48];
  for (int i = 0; i < n_devices && !rc; i++) {
    if (chunk_sizes) {
      if (chunk_sizes[i] < 0)
        rc = INVALID("chunk_sizes[%d] is %lld (expected >= 0)", i, (long long)chunk_sizes[i]);
      sizes[i] = chunk_sizes[i];
    } else { /* torch.chunk: ceil(len / n) each, the tail smaller or empty */
      int64_t c = len / n_devices + (len % n_devices != 0),
              left = len - c * i; /* no len + n - 1 overflow */
      sizes[i] = left < 0 ? 0 : left < c ? left : c;
    }
    starts[i] = sum;
    if (!rc && __builtin_add_overflow(sum, sizes[i], &sum))
      rc = INVALID(
          "chunk_sizes sum to more than 2^63 (chunk_sizes[%d] is %lld; expected a sum of "
          "in->shape[%d], %lld)",
          i, (long long)sizes[i], d0, (long long)len);
  }
  if (!rc && sum != len)
    rc = INVALID("chunk_sizes sum to %lld but in->shape[%d] is %lld (expected equal)",
                 (long long)sum, d0, (long long)len);
  int64_t shape[TCOLL_MAX_DIMS];
  for (int i = 0; i < n_devices && !rc; i++) {
    snprintf(nm, sizeof nm, "devices[%d]", i);
    if ((rc = check_device_arg(devices[i], nm))) break;
    memcpy(shape, in->shape, sizeof shape);
    shape[d0] = sizes[i];
    char on[48];
    snprintf(on, sizeof on, "out[%d]", i);
    if ((rc = check_out_on(&out[i], on, in->dtype, in->ndim, shape, devices[i], nm))) break;
    if (out[i].data && !(rc = tc_check_disjoint(&out[i], on, in, "in", n_devices == 1)))
      rc = check_busy(&out[i], on);
  }
  if (!rc) rc = wait_inputs(in, 1);
  if (rc) {
    free(sizes);
    return rc;
  }
  tc_dimview_t v = tc_dimview(in->shape, in->ndim, d0);
  size_t es = tc_dtype_size(in->dtype);
  outs_t al = {0};
  session_t s;
  memset(&s, 0, sizeof s);
  involve(&s, in->device);
  for (int i = 0; i < n_devices; i++) involve(&s, devices[i]);
  for (int i = 0; i < n_devices && !rc; i++) {
    memcpy(shape, in->shape, sizeof shape);
    shape[d0] = sizes[i];
    rc = out_prepare(&al, &out[i], in->dtype, in->ndim, shape, devices[i]);
    if (!rc)
      rc = copy_slab(&s, true, out[i].data, devices[i], in->data, in->device, v.outer, len, v.inner,
                     starts[i], sizes[i], es);
  }
  free(sizes);
  return outs_done(&al, session_end(&s, rc));
}

int tcoll_local_gather(const tcoll_tensor_t *in, int n, int dim, int target_device,
                       tcoll_tensor_t *out) {
  TC_ENTER("tcoll_local_gather");
  int rc = tc_require_init();
  if (rc) return rc;
  if (n < 1) return INVALID("n is %d (expected >= 1)", n);
  if (!in) return INVALID("in is NULL (expected %d tensors)", n);
  if (!out)
    return INVALID("out is NULL (expected a tensor, with data == NULL to have tcoll allocate it)");
  if ((rc = check_device_arg(target_device, "target_device"))) return rc;
  char nm[48];
  bool scalars = true;
  for (int i = 0; i < n; i++) {
    snprintf(nm, sizeof nm, "in[%d]", i);
    if ((rc = tc_check_tensor(&in[i], nm))) return rc;
    if (in[i].ndim != 0) scalars = false;
  }
  /* Scalars along dim 0 become a vector, as torch.nn.parallel.Gather does. */
  bool unsqueeze = scalars && dim == 0;
  int ndim = unsqueeze ? 1 : in[0].ndim, d0 = 0;
  int64_t ref[TCOLL_MAX_DIMS], shape[TCOLL_MAX_DIMS];
  memcpy(ref, in[0].shape, sizeof ref);
  if (unsqueeze)
    ref[0] = 1;
  else if ((rc = tc_check_dim(dim, ndim, "dim", &d0)))
    return rc;
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    snprintf(nm, sizeof nm, "in[%d]", i);
    if (in[i].dtype != in[0].dtype)
      return INVALID("%s->dtype is %s but in[0]->dtype is %s (expected the same)", nm,
                     tcoll_dtype_name(in[i].dtype), tcoll_dtype_name(in[0].dtype));
    if (unsqueeze) {
      total += 1;
      continue;
    }
    if (in[i].ndim != ndim)
      return INVALID("%s->ndim is %d but in[0]->ndim is %d (expected the same)", nm, in[i].ndim,
                     ndim);
    for (int k = 0; k < ndim; k++)
      if (k != d0 && in[i].shape[k] != ref[k])
        return INVALID(
            "%s->shape[%d] is %lld but in[0]->shape[%d] is %lld (expected equal sizes except along "
            "dim %d)",
            nm, k, (long long)in[i].shape[k], k, (long long)ref[k], d0);
    if (__builtin_add_overflow(total, in[i].shape[d0], &total))
      return INVALID("the inputs' sizes along dim %d sum to more than 2^63 (at in[%d])", d0, i);
  }
  memcpy(shape, ref, sizeof shape);
  shape[d0] = total;
  if ((rc = check_out_on(out, "out", in[0].dtype, ndim, shape, target_device, "target_device")))
    return rc;
  if (out->data) {
    if ((rc = check_out_vs_ins(out, "out", in, n, "in", -1)) || (rc = check_busy(out, "out")))
      return rc;
  }
  if ((rc = wait_inputs(in, n))) return rc;
  if (unsqueeze)
    tc_warn(
        "Was asked to gather along dimension 0, but all input tensors were scalars; will instead "
        "unsqueeze and "
        "return a vector.");
  tc_dimview_t v = tc_dimview(shape, ndim, d0);
  size_t es = tc_dtype_size(in[0].dtype);
  outs_t al = {0};
  session_t s;
  memset(&s, 0, sizeof s);
  for (int i = 0; i < n; i++) involve(&s, in[i].device);
  involve(&s, target_device);
  rc = out_prepare(&al, out, in[0].dtype, ndim, shape, target_device);
  int64_t start = 0;
  for (int i = 0; i < n && !rc; i++) {
    int64_t len = unsqueeze ? 1 : in[i].shape[d0];
    rc = copy_slab(&s, false, in[i].data, in[i].device, out->data, target_device, v.outer, total,
                   v.inner, start, len, es);
    start += len;
  }
  return outs_done(&al, session_end(&s, rc));
}
