/* Internal tensor helpers. */
#ifndef TC_TENSOR_H
#define TC_TENSOR_H

#include "base/base.h"
#include "base/dtype.h"

/* Product of shape[from..to) (1 for an empty range). Validated shapes have fewer than 2^63 bytes,
 * except empty tensors, whose other sizes may be anything: a partial product that overflows
 * belongs to an empty tensor and is given as 0. */
static inline int64_t tc_shape_prod(const int64_t *shape, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++)
    if (__builtin_mul_overflow(p, shape[i], &p)) return 0;
  return p;
}

/* Elements of a tensor that passed the argument checks: tcoll_tensor_numel without its
 * validity checks (an empty tensor's product may overflow before its 0: 0 all the same). */
static inline int64_t tc_numel(const tcoll_tensor_t *t) {
  return tc_shape_prod(t->shape, 0, t->ndim);
}

/* Bytes of a tensor that passed the argument checks (no overflow or validity checks). */
static inline size_t tc_nbytes(const tcoll_tensor_t *t) {
  size_t n = tc_dtype_size(t->dtype);
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  return n;
}

/* A tensor viewed around one dim: outer x len x inner elements. An empty tensor is viewed as
 * 0 x len x 0, so that loops over its outer runs do nothing (its other sizes may be huge). */
typedef struct tc_dimview {
  int64_t outer, len, inner;
} tc_dimview_t;
static inline tc_dimview_t tc_dimview(const int64_t *shape, int ndim, int dim) {
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) return (tc_dimview_t){0, shape[dim], 0};
  tc_dimview_t v = {tc_shape_prod(shape, 0, dim), shape[dim], tc_shape_prod(shape, dim + 1, ndim)};
  return v;
}

static inline bool tc_same_shape(int ndim_a, const int64_t *a, int ndim_b, const int64_t *b) {
  if (ndim_a != ndim_b) return false;
  for (int i = 0; i < ndim_a; i++)
    if (a[i] != b[i]) return false;
  return true;
}

/* dtype, ndim, non-negative shape, byte size without overflow, an existing device: every
 * description a caller hands in passes here (argcheck.c builds its checks on it). */
int tc_check_tensor_desc(const tcoll_tensor_t *t, const char *name);

/* "[2, 3, 4]" into buf. */
const char *tc_shape_str(char *buf, size_t len, int ndim, const int64_t *shape);

/* Gives t (dtype, shape, device set) storage that tcoll owns, from the storage cache; never
 * NULL, also for zero elements, so that the registry can key it. zero: zero-filled, complete on
 * return (on a device too); otherwise its content is undefined, for a tensor the caller writes in
 * full. */
int tc_tensor_storage(tcoll_tensor_t *t, bool zero);

/* Returns storage tcoll owns (nothing pending on it) to the cache and NULLs t->data. */
void tc_tensor_release(tcoll_tensor_t *t);

#endif
