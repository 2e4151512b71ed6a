/* Tensor descriptors, their validity and tcoll-owned storage, from the storage cache (freeing and
 * copying, which wait for pending work, are in work/release.c). */
#include "tensor.h"
#include "base/dtype.h"

#include "device/cache.h"
#include "device/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID(...) tc_error(TCOLL_ERR_INVALID_ARGUMENT, __VA_ARGS__)

const char *tc_shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
  size_t off = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < ndim && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (off < len) snprintf(buf + off, len - off, "]");
  return buf;
}

tcoll_tensor_t tcoll_tensor_make(void *data, tcoll_dtype_t dtype, int ndim, const int64_t *shape,
                                 int device) {
  tcoll_tensor_t t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  t.device = device;
  for (int i = 0; shape && i < ndim && i < TCOLL_MAX_DIMS; i++) t.shape[i] = shape[i];
  return t;
}

int64_t tcoll_tensor_numel(const tcoll_tensor_t *t) {
  if (!t || t->ndim < 0 || t->ndim > TCOLL_MAX_DIMS) return 0;
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0 || tc_mul_overflows(n, t->shape[i], &n)) return 0;
  }
  return n;
}

size_t tcoll_tensor_nbytes(const tcoll_tensor_t *t) {
  if (!t) return 0;
  size_t n;
  /* 0, as numel gives for an invalid shape, rather than a byte count wrapped around */
  if (__builtin_mul_overflow((size_t)tcoll_tensor_numel(t), tc_dtype_size(t->dtype), &n)) return 0;
  return n;
}

/* Every description a caller hands in is checked here, so that one file knows what a valid
 * tensor is. */
int tc_check_tensor_desc(const tcoll_tensor_t *t, const char *name) {
  if (!t) return INVALID("%s is NULL (expected a tensor)", name);
  if (!tc_dtype_valid(t->dtype))
    return INVALID("%s->dtype is %d (expected a tcoll_dtype_t, 0..%d)", name, (int)t->dtype,
                   TCOLL_NUM_DTYPES - 1);
  if (t->ndim < 0 || t->ndim > TCOLL_MAX_DIMS)
    return INVALID("%s->ndim is %d (expected 0..%d)", name, t->ndim, TCOLL_MAX_DIMS);
  int64_t bytes = (int64_t)tc_dtype_size(t->dtype);
  bool empty = false;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0)
      return INVALID("%s->shape[%d] is %lld (expected >= 0)", name, i, (long long)t->shape[i]);
    empty = empty || t->shape[i] == 0;
  }
  for (int i = 0; i < t->ndim && !empty;
       i++) { /* an empty tensor has 0 bytes, whatever its other dims */
    if (tc_mul_overflows(bytes, t->shape[i], &bytes))
      return INVALID("%s has more than 2^63 bytes (shape too large)", name);
  }
  return tc_dev_check(t->device, name);
}

/* Storage for a tensor from the cache: never NULL, also for zero elements, so the registry can
 * key it. */
int tc_tensor_storage(tcoll_tensor_t *t, bool zero) {
  size_t n = tcoll_tensor_nbytes(t);
  void *p = NULL;
  int rc = tc_cache_alloc(t->device, n ? n : 1, zero, &p);
  if (rc) return rc;
  t->data = p;
  return TCOLL_SUCCESS;
}

int tcoll_tensor_alloc(tcoll_tensor_t *t, tcoll_dtype_t dtype, int ndim, const int64_t *shape,
                       int device) {
  TC_ENTER("tcoll_tensor_alloc");
  if (!t) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "t is NULL (expected a tensor to fill in)");
  if (ndim > 0 && !shape)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "shape is NULL with ndim %d (expected %d sizes)",
                    ndim, ndim);
  if (ndim < 0 ||
      ndim > TCOLL_MAX_DIMS) /* before reading shape: it need not have that many sizes */
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "ndim is %d (expected 0..%d)", ndim,
                    TCOLL_MAX_DIMS);
  tcoll_tensor_t tmp = tcoll_tensor_make(NULL, dtype, ndim, shape, device);
  int rc = tc_check_tensor_desc(&tmp, "t");
  if (rc) return rc;
  rc = tc_tensor_storage(&tmp, true); /* the public contract: zeros */
  if (rc) return rc;
  *t = tmp;
  return TCOLL_SUCCESS;
}

void tc_tensor_release(tcoll_tensor_t *t) {
  if (!tc_cache_free(t->data))
    tc_warn("tcoll_tensor_free: %p was not allocated by tcoll; not freed", t->data);
  t->data = NULL;
}
