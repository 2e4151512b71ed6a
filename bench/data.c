/* tcoll-bench: the inputs' pattern, in the element type of --dtype, and the comparison of
 * results (tensors may live on a device). */
#include "bench.h"

#include <string.h>

/* Small integers: exact in every --dtype, and so are their sums over the ranks in any order. */
double pattern(int rank, int64_t i) { return (double)((rank + 1) + (int)(i % 13)); }

void store(void *x, int64_t i, double v) {
  switch (g_dt.tc) {
  case TCOLL_FLOAT64: ((double *)x)[i] = v; break;
  case TCOLL_INT32: ((int32_t *)x)[i] = (int32_t)v; break;
  case TCOLL_INT64: ((int64_t *)x)[i] = (int64_t)v; break;
  default: ((float *)x)[i] = (float)v; break;
  }
}

double load(const void *x, int64_t i) {
  switch (g_dt.tc) {
  case TCOLL_FLOAT64: return ((const double *)x)[i];
  case TCOLL_INT32: return ((const int32_t *)x)[i];
  case TCOLL_INT64: return (double)((const int64_t *)x)[i];
  default: return ((const float *)x)[i];
  }
}

tcoll_tensor_t tensor_on(int device, int ndim, int64_t a, int64_t b) {
  int64_t shape[2] = {a, b};
  tcoll_tensor_t t;
  memset(&t, 0, sizeof t);
  TC(tcoll_tensor_alloc(&t, g_dt.tc, ndim, shape, device));
  return t;
}

void fill_host(void *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) store(x, i, pattern(g_rank, i));
}

void fill_tensor(tcoll_tensor_t *t) {
  int64_t n = tcoll_tensor_numel(t);
  if (t->device == TCOLL_HOST) {
    fill_host(t->data, n);
    return;
  }
  tcoll_tensor_t h = tensor_on(TCOLL_HOST, 1, n, 0);
  fill_host(h.data, n);
  TC(tcoll_tensor_copy(t, &h));
  tcoll_tensor_free(&h);
}

/* Elements of t that differ from ref (t may live on a device). */
long diff_tensor(const tcoll_tensor_t *t, const void *ref) {
  int64_t n = tcoll_tensor_numel(t);
  tcoll_tensor_t h = *t;
  if (t->device != TCOLL_HOST) {
    h = tensor_on(TCOLL_HOST, t->ndim, t->shape[0], t->ndim > 1 ? t->shape[1] : 0);
    TC(tcoll_tensor_copy(&h, t));
  }
  long bad = 0;
  const char *x = h.data, *r = ref;
  for (int64_t i = 0; i < n; i++)
    bad += memcmp(x + i * g_dt.size, r + i * g_dt.size, g_dt.size) != 0;
  if (t->device != TCOLL_HOST) tcoll_tensor_free(&h);
  return bad;
}
