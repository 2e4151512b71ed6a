/* Data type sizes, names and element-wise host helpers. */
#include "dtype.h"

#include <string.h>

static const char *const dtype_name[TCOLL_NUM_DTYPES] = {
    [TCOLL_BOOL] = "bool",       [TCOLL_INT8] = "int8",         [TCOLL_UINT8] = "uint8",
    [TCOLL_INT16] = "int16",     [TCOLL_INT32] = "int32",       [TCOLL_INT64] = "int64",
    [TCOLL_FLOAT16] = "float16", [TCOLL_BFLOAT16] = "bfloat16", [TCOLL_FLOAT32] = "float32",
    [TCOLL_FLOAT64] = "float64",
};

size_t tcoll_dtype_size(tcoll_dtype_t d) { return tc_dtype_size(d); }

const char *tcoll_dtype_name(tcoll_dtype_t d) {
  return tc_dtype_valid(d) ? dtype_name[d] : "invalid";
}

double tc_load_double(const void *buf, tcoll_dtype_t d, int64_t i) {
  switch (d) {
  case TCOLL_BOOL: return ((const uint8_t *)buf)[i] ? 1.0 : 0.0;
  case TCOLL_INT8: return ((const int8_t *)buf)[i];
  case TCOLL_UINT8: return ((const uint8_t *)buf)[i];
  case TCOLL_INT16: return ((const int16_t *)buf)[i];
  case TCOLL_INT32: return ((const int32_t *)buf)[i];
  case TCOLL_INT64: return (double)((const int64_t *)buf)[i];
  case TCOLL_FLOAT16: return tc_half_to_float(((const uint16_t *)buf)[i]);
  case TCOLL_BFLOAT16: return tc_bf16_to_float(((const uint16_t *)buf)[i]);
  case TCOLL_FLOAT32: return ((const float *)buf)[i];
  case TCOLL_FLOAT64: return ((const double *)buf)[i];
  }
  return 0.0;
}

void tc_store_double(void *buf, tcoll_dtype_t d, int64_t i, double v) {
  switch (d) {
  case TCOLL_BOOL: ((uint8_t *)buf)[i] = v != 0.0; break;
  case TCOLL_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case TCOLL_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case TCOLL_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
  case TCOLL_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case TCOLL_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case TCOLL_FLOAT16: ((uint16_t *)buf)[i] = tc_float_to_half((float)v); break;
  case TCOLL_BFLOAT16: ((uint16_t *)buf)[i] = tc_float_to_bf16((float)v); break;
  case TCOLL_FLOAT32: ((float *)buf)[i] = (float)v; break;
  case TCOLL_FLOAT64: ((double *)buf)[i] = v; break;
  }
}

/* One loop per floating dtype; EXPR combines the element v with the scalar s. */
#define TC_FLOAT_LOOP(dst, src, d, n, EXPR)                \
  switch (d) {                                             \
  case TCOLL_FLOAT32: {                                    \
    float *o_ = (dst);                                     \
    const float *x_ = (src);                               \
    for (int64_t i_ = 0; i_ < (n); i_++) {                 \
      float v = x_[i_];                                    \
      o_[i_] = (float)(EXPR);                              \
    }                                                      \
    break;                                                 \
  }                                                        \
  case TCOLL_FLOAT64: {                                    \
    double *o_ = (dst);                                    \
    const double *x_ = (src);                              \
    for (int64_t i_ = 0; i_ < (n); i_++) {                 \
      double v = x_[i_];                                   \
      o_[i_] = (EXPR);                                     \
    }                                                      \
    break;                                                 \
  }                                                        \
  case TCOLL_FLOAT16: {                                    \
    uint16_t *o_ = (dst);                                  \
    const uint16_t *x_ = (src);                            \
    for (int64_t i_ = 0; i_ < (n); i_++) {                 \
      float v = tc_half_to_float(x_[i_]);                  \
      o_[i_] = tc_float_to_half((float)(EXPR));            \
    }                                                      \
    break;                                                 \
  }                                                        \
  case TCOLL_BFLOAT16: {                                   \
    uint16_t *o_ = (dst);                                  \
    const uint16_t *x_ = (src);                            \
    for (int64_t i_ = 0; i_ < (n); i_++) {                 \
      float v = tc_bf16_to_float(x_[i_]);                  \
      o_[i_] = tc_float_to_bf16((float)(EXPR));            \
    }                                                      \
    break;                                                 \
  }                                                        \
  default: break; /* callers only scale floating dtypes */ \
  }

/* o[i] = x[i] * s or x[i] / s, float32 and float64, 16 bytes a step, each vector loaded and stored
 * through registers: -O2's cheap vectorizer leaves TC_FLOAT_LOOP scalar, one divss per element,
 * which made an AVG all_reduce of 16 MiB (2 ranks, shm_slices) 4.8x the time of its SUM. The same
 * single IEEE operation per element as the scalar loop, so the same bits. */
#define SCALE_LOOP(T, name)                                                                        \
  typedef T name##_vec __attribute__((vector_size(16)));                                           \
  static inline __attribute__((always_inline)) void name##_steps(T *o, const T *x, int64_t n, T s, \
                                                                 bool divide) {                    \
    enum { W = 16 / sizeof(T) };                                                                   \
    name##_vec sv;                                                                                 \
    for (int k = 0; k < W; k++) sv[k] = s;                                                         \
    int64_t i = 0;                                                                                 \
    for (name##_vec v; i + W <= n; i += W) {                                                       \
      memcpy(&v, x + i, 16);                                                                       \
      v = divide ? v / sv : v * sv;                                                                \
      memcpy(o + i, &v, 16);                                                                       \
    }                                                                                              \
    for (; i < n; i++) o[i] = divide ? x[i] / s : x[i] * s;                                        \
  }                                                                                                \
  static void name##_scale(T *o, const T *x, int64_t n, T s, bool divide) {                        \
    if (divide)                                                                                    \
      name##_steps(o, x, n, s, true);                                                              \
    else                                                                                           \
      name##_steps(o, x, n, s, false);                                                             \
  }
SCALE_LOOP(float, f32)
SCALE_LOOP(double, f64)

void tc_host_scale_copy(void *dst, const void *src, tcoll_dtype_t d, int64_t n, double s) {
  float fs = (float)s;
  if (d == TCOLL_FLOAT64)
    f64_scale(dst, src, n, s, false);
  else if (d == TCOLL_FLOAT32)
    f32_scale(dst, src, n, fs, false);
  else
    TC_FLOAT_LOOP(dst, src, d, n, v * fs)
}

/* (A multiply takes a fraction of a divide's time: at 2 ranks an AVG all_reduce's division was
 * 0.6 ms of 16 MiB's 1.5.) */
void tc_host_divide(void *buf, tcoll_dtype_t d, int64_t n, double divisor) {
  float fdiv = (float)divisor;
  bool by_reciprocal = tc_exact_reciprocal(divisor);
  if (d == TCOLL_FLOAT64)
    f64_scale(buf, buf, n, by_reciprocal ? 1.0 / divisor : divisor, !by_reciprocal);
  else if (d == TCOLL_FLOAT32)
    f32_scale(buf, buf, n, by_reciprocal ? 1.0f / fdiv : fdiv, !by_reciprocal);
  else
    TC_FLOAT_LOOP(buf, buf, d, n, v / fdiv)
}

/* Integers wrap like MPI's and CUDA's do: add in the unsigned type (no signed overflow). */
#define TC_ADD_LOOP(type, acc)                                                     \
  do {                                                                             \
    type *o_ = dst;                                                                \
    const type *x_ = src;                                                          \
    for (int64_t i_ = 0; i_ < n; i_++) o_[i_] = (type)((acc)o_[i_] + (acc)x_[i_]); \
  } while (0)

void tc_host_add(void *dst, const void *src, tcoll_dtype_t d, int64_t n) {
  switch (d) {
  case TCOLL_BOOL: {
    uint8_t *o = dst;
    const uint8_t *x = src;
    for (int64_t i = 0; i < n; i++) o[i] = (uint8_t)(o[i] || x[i]);
    break;
  }
  case TCOLL_INT8: TC_ADD_LOOP(int8_t, uint8_t); break;
  case TCOLL_UINT8: TC_ADD_LOOP(uint8_t, uint8_t); break;
  case TCOLL_INT16: TC_ADD_LOOP(int16_t, uint16_t); break;
  case TCOLL_INT32: TC_ADD_LOOP(int32_t, uint32_t); break;
  case TCOLL_INT64: TC_ADD_LOOP(int64_t, uint64_t); break;
  case TCOLL_FLOAT32: TC_ADD_LOOP(float, float); break;
  case TCOLL_FLOAT64: TC_ADD_LOOP(double, double); break;
  case TCOLL_FLOAT16: {
    uint16_t *o = dst;
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++)
      o[i] = tc_float_to_half(tc_half_to_float(o[i]) + tc_half_to_float(x[i]));
    break;
  }
  case TCOLL_BFLOAT16: {
    uint16_t *o = dst;
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++)
      o[i] = tc_float_to_bf16(tc_bf16_to_float(o[i]) + tc_bf16_to_float(x[i]));
    break;
  }
  }
}
