/* Tensor descriptors and tcoll-owned storage (freeing and copying, which wait for pending work,
 * are in work/release.c). */
#include "tensor.h"
#include "base/dtype.h"

#include "argcheck.h"
#include "device/device.h"
#include "base/ptrmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Storage tcoll allocated: address -> device + 2 (the host, -1, is stored as 1: never NULL). */
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static tc_ptrmap_t alloc_table;

static int alloc_record(void *p, int device) {
  pthread_mutex_lock(&alloc_lock);
  int rc = tc_ptrmap_put(&alloc_table, (uintptr_t)p, (void *)(intptr_t)(device + 2));
  pthread_mutex_unlock(&alloc_lock);
  return rc;
}

bool tc_alloc_owned(const void *p, int *device) {
  pthread_mutex_lock(&alloc_lock);
  intptr_t v = (intptr_t)tc_ptrmap_get(&alloc_table, (uintptr_t)p);
  pthread_mutex_unlock(&alloc_lock);
  if (v && device) *device = (int)v - 2;
  return v != 0;
}

static bool alloc_forget(void *p) {
  pthread_mutex_lock(&alloc_lock);
  void *v = tc_ptrmap_del(&alloc_table, (uintptr_t)p);
  pthread_mutex_unlock(&alloc_lock);
  return v != NULL;
}

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

/* Host memory, 64-byte aligned and zero-filled. */
static int host_alloc(size_t n, void **p) {
  if (posix_memalign(p, 64, n)) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %zu bytes of host memory", n);
  memset(*p, 0, n);
  return TCOLL_SUCCESS;
}

static void storage_free(int device, void *p) {
  if (device == TCOLL_HOST) free(p);
  else tc_dev_free(device, p);
}

/* Storage for a tensor: never NULL, also for zero elements, so the registry can key it. */
int tc_tensor_storage(tcoll_tensor_t *t) {
  size_t n = tcoll_tensor_nbytes(t);
  void *p = NULL;
  int rc = t->device == TCOLL_HOST ? host_alloc(n ? n : 1, &p) : tc_dev_alloc(t->device, n ? n : 1, &p);
  if (rc) return rc;
  rc = alloc_record(p, t->device);
  if (rc) {
    storage_free(t->device, p);
    return tc_error(rc, "cannot record a new allocation");
  }
  t->data = p;
  return TCOLL_SUCCESS;
}

int tcoll_tensor_alloc(tcoll_tensor_t *t, tcoll_dtype_t dtype, int ndim, const int64_t *shape,
                       int device) {
  TC_ENTER("tcoll_tensor_alloc");
  if (!t) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "t is NULL (expected a tensor to fill in)");
  if (ndim > 0 && !shape)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "shape is NULL with ndim %d (expected %d sizes)", ndim, ndim);
  if (ndim < 0 || ndim > TCOLL_MAX_DIMS) /* before reading shape: it need not have that many sizes */
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "ndim is %d (expected 0..%d)", ndim, TCOLL_MAX_DIMS);
  tcoll_tensor_t tmp = tcoll_tensor_make(NULL, dtype, ndim, shape, device);
  int rc = tc_check_tensor_desc(&tmp, "t");
  if (rc) return rc;
  rc = tc_tensor_storage(&tmp);
  if (rc) return rc;
  *t = tmp;
  return TCOLL_SUCCESS;
}

void tc_tensor_release(tcoll_tensor_t *t) {
  int device;
  if (tc_alloc_owned(t->data, &device)) {
    alloc_forget(t->data);
    storage_free(device, t->data);
  } else {
    tc_warn("tcoll_tensor_free: %p was not allocated by tcoll; not freed", t->data);
  }
  t->data = NULL;
}
