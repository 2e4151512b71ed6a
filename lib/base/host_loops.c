/* Element-wise host loops (see host_loops.h).
 *
 * Why vectors by hand: -O2's cheap vectorizer leaves these loops scalar under LTO: one
 * movss/addss/movss per float took 2.5x the time of the vector loop on 8 MiB (perf on
 * bench/heap-bench), one divss per element made an AVG all_reduce of 16 MiB 4.8x the time of its
 * SUM. Why 16 bytes, two a step, each stored from its register: a 32-byte vector on plain x86-64
 * (SSE2, the build's target) went through the stack before every store, which made a 2-process
 * reduce-scatter of 16 MiB 0.88-0.91x a memcpy of the input where stores from registers take
 * 0.66-0.77x (the CI machine). Why the operation is decided outside the loop: tested per element it
 * cost instructions on every step. GCC's and Clang's vector extensions: SSE2 on x86-64, NEON
 * elsewhere. */
#include "host_loops.h"

#include "dtype.h"
#include "stream_copy.h"

#include <string.h>

/* What each element gets: x op y, then AVG's factor (times the exact reciprocal, or divided by the
 * divisor), or x alone times or divided by the factor s. */
enum { F_SUM, F_PROD, F_SUM_MUL, F_SUM_DIV, F_MUL, F_DIV };
#define BINARY(f) ((f) <= F_SUM_DIV)
#define ONE(a, b, f, s)                   \
  ((f) == F_SUM       ? (a) + (b)         \
   : (f) == F_PROD    ? (a) * (b)         \
   : (f) == F_SUM_MUL ? ((a) + (b)) * (s) \
   : (f) == F_SUM_DIV ? ((a) + (b)) / (s) \
   : (f) == F_MUL     ? (a) * (s)         \
                      : (a) / (s))

#if TC_CAN_STREAM
#define STORE16(p, v, stream)                                 \
  do {                                                        \
    if (stream)                                               \
      _mm_stream_si128((__m128i *)(void *)(p), (__m128i)(v)); \
    else                                                      \
      memcpy((p), &(v), 16);                                  \
  } while (0)
#else
#define STORE16(p, v, stream) memcpy((p), &(v), 16)
#endif

/* name_loop(x, y, z, n, f, stream, s): z[i] = ONE(x[i], y[i], f, s), y unread where f is unary.
 * Streamed: the elements before z's first 16-byte boundary are stored one by one. FLOATS: whether
 * the type has the forms past F_PROD (the integers' loops carry no division). */
#define HOST_LOOP(T, name, FLOATS)                                                            \
  typedef T name##_vec __attribute__((vector_size(16)));                                      \
  static inline __attribute__((always_inline)) void name##_steps(                             \
      const T *x, const T *y, T *z, int64_t n, int f, bool stream, T s) {                     \
    enum { W = 16 / sizeof(T) };                                                              \
    int64_t i = 0;                                                                            \
    for (; stream && i < n && ((uintptr_t)(z + i) & 15); i++)                                 \
      z[i] = ONE(x[i], BINARY(f) ? y[i] : (T)0, f, s);                                        \
    name##_vec sv;                                                                            \
    for (int k = 0; k < W; k++) sv[k] = s;                                                    \
    for (name##_vec a0, a1, b0 = sv, b1 = sv; i + 2 * W <= n; i += 2 * W) {                   \
      memcpy(&a0, x + i, 16);                                                                 \
      memcpy(&a1, x + i + W, 16);                                                             \
      if (BINARY(f)) {                                                                        \
        memcpy(&b0, y + i, 16);                                                               \
        memcpy(&b1, y + i + W, 16);                                                           \
      }                                                                                       \
      a0 = ONE(a0, b0, f, sv);                                                                \
      a1 = ONE(a1, b1, f, sv);                                                                \
      STORE16(z + i, a0, stream);                                                             \
      STORE16(z + i + W, a1, stream);                                                         \
    }                                                                                         \
    for (; i < n; i++) z[i] = ONE(x[i], BINARY(f) ? y[i] : (T)0, f, s);                       \
  }                                                                                           \
  static inline __attribute__((always_inline)) void name##_form(                              \
      const T *x, const T *y, T *z, int64_t n, int f, bool stream, T s) {                     \
    if (stream)                                                                               \
      name##_steps(x, y, z, n, f, true, s);                                                   \
    else                                                                                      \
      name##_steps(x, y, z, n, f, false, s);                                                  \
  }                                                                                           \
  static void name##_loop(const T *x, const T *y, T *z, int64_t n, int f, bool stream, T s) { \
    if (f == F_SUM)                                                                           \
      name##_form(x, y, z, n, F_SUM, stream, s);                                              \
    else if (f == F_PROD)                                                                     \
      name##_form(x, y, z, n, F_PROD, stream, s);                                             \
    else if (FLOATS && f == F_SUM_MUL)                                                        \
      name##_form(x, y, z, n, F_SUM_MUL, stream, s);                                          \
    else if (FLOATS && f == F_SUM_DIV)                                                        \
      name##_form(x, y, z, n, F_SUM_DIV, stream, s);                                          \
    else if (FLOATS && f == F_MUL)                                                            \
      name##_steps(x, y, z, n, F_MUL, false, s);                                              \
    else if (FLOATS)                                                                          \
      name##_steps(x, y, z, n, F_DIV, false, s);                                              \
  }
HOST_LOOP(float, f32, true)
HOST_LOOP(double, f64, true)
HOST_LOOP(uint32_t, u32, false) /* int32 and int64 in the unsigned type: they wrap, as MPI's do */
HOST_LOOP(uint64_t, u64, false)

bool tc_host_combine(const void *x, const void *y, void *z, int64_t n, tcoll_dtype_t d, bool prod,
                     bool stream) {
  int f = prod ? F_PROD : F_SUM;
  stream = stream && TC_CAN_STREAM;
  switch (d) {
  case TCOLL_FLOAT32: f32_loop(x, y, z, n, f, stream, 1); return true;
  case TCOLL_FLOAT64: f64_loop(x, y, z, n, f, stream, 1); return true;
  case TCOLL_INT32: u32_loop(x, y, z, n, f, stream, 1); return true;
  case TCOLL_INT64: u64_loop(x, y, z, n, f, stream, 1); return true;
  default: return false;
  }
}

/* Whether 1 / d is exact and normal in float and double (d a power of two): then x / d and
 * x * (1 / d) round the same real number, the same bits for every x. A few instructions: the
 * reductions ask it for every span they divide (a multiply takes a fraction of a divide's time:
 * at 2 ranks an AVG all_reduce's division was 0.6 ms of 16 MiB's 1.5). */
static bool exact_reciprocal(double d) {
  uint64_t b;
  memcpy(&b, &d, sizeof b);
  int e = (int)((b >> 52) & 0x7ff) - 1023; /* d = 2^e where the mantissa is 0 */
  return !(b >> 63) && !(b & ((UINT64_C(1) << 52) - 1)) && e > -120 && e < 120;
}

/* "Divided by divisor" as a form and its factor: times the exact reciprocal, or divided. */
static double divided_by(double divisor, bool *times) {
  *times = exact_reciprocal(divisor);
  return *times ? 1.0 / divisor : divisor;
}

void tc_host_sum_divided(const void *x, const void *y, void *z, int64_t n, tcoll_dtype_t d,
                         double divisor, bool stream) {
  bool times;
  double s = divided_by(divisor, &times);
  int f = times ? F_SUM_MUL : F_SUM_DIV;
  stream = stream && TC_CAN_STREAM;
  if (d == TCOLL_FLOAT64)
    f64_loop(x, y, z, n, f, stream, s);
  else if (d == TCOLL_FLOAT32)
    f32_loop(x, y, z, n, f, stream, (float)s);
}

/* name_all(bases, off, m, zs, nz, n, f, post, s, stream): tc_host_combine_all_to's loop, two
 * 16-byte vectors at a time with every input's added into them in order, stored into each of the
 * nz outputs, then the tail element by element. Inputs of a few bytes (the small protocol's in-line
 * payloads) cost one short loop over the ranks. Streamed: the elements before the outputs' first
 * 16-byte boundary (the same for all) are done one by one. */
#define ALL_LOOP(T, name, FLOATS)                                                               \
  static inline __attribute__((always_inline))                                                  \
  T name##_at(char *const *b, size_t off, int q, int64_t i) {                                   \
    T v;                                                                                        \
    memcpy(&v, b[q] + off + (size_t)i * sizeof(T), sizeof v);                                   \
    return v;                                                                                   \
  }                                                                                             \
  static inline __attribute__((always_inline))                                                  \
  T name##_one_all(char *const *b, size_t off, int m, int64_t i, int f, int post, T s) {        \
    T acc = name##_at(b, off, 0, i);                                                            \
    for (int q = 1; q < m; q++) acc = ONE(name##_at(b, off, q, i), acc, f, s);                  \
    return post == F_MUL ? acc * s : post == F_DIV ? acc / s : acc;                             \
  }                                                                                             \
  static inline __attribute__((always_inline)) void name##_all_form(                            \
      char *const *b, size_t off, int m, T *const *zs, int nz, int64_t n, int f, int post, T s, \
      bool stream) {                                                                            \
    enum { W = 16 / sizeof(T) };                                                                \
    name##_vec sv;                                                                              \
    for (int k = 0; k < W; k++) sv[k] = s;                                                      \
    int64_t i = 0;                                                                              \
    for (; stream && i < n && ((uintptr_t)(zs[0] + i) & 15); i++) {                             \
      T v = name##_one_all(b, off, m, i, f, post, s);                                           \
      for (int o = 0; o < nz; o++) zs[o][i] = v;                                                \
    }                                                                                           \
    for (name##_vec a0, a1, v0, v1; i + 2 * W <= n; i += 2 * W) {                               \
      memcpy(&a0, b[0] + off + (size_t)i * sizeof(T), 16);                                      \
      memcpy(&a1, b[0] + off + (size_t)(i + W) * sizeof(T), 16);                                \
      for (int q = 1; q < m; q++) {                                                             \
        memcpy(&v0, b[q] + off + (size_t)i * sizeof(T), 16);                                    \
        memcpy(&v1, b[q] + off + (size_t)(i + W) * sizeof(T), 16);                              \
        a0 = ONE(v0, a0, f, sv);                                                                \
        a1 = ONE(v1, a1, f, sv);                                                                \
      }                                                                                         \
      a0 = post == F_MUL ? a0 * sv : post == F_DIV ? a0 / sv : a0;                              \
      a1 = post == F_MUL ? a1 * sv : post == F_DIV ? a1 / sv : a1;                              \
      for (int o = 0; o < nz; o++) {                                                            \
        STORE16(zs[o] + i, a0, stream);                                                         \
        STORE16(zs[o] + i + W, a1, stream);                                                     \
      }                                                                                         \
    }                                                                                           \
    for (; i < n; i++) {                                                                        \
      T v = name##_one_all(b, off, m, i, f, post, s);                                           \
      for (int o = 0; o < nz; o++) zs[o][i] = v;                                                \
    }                                                                                           \
  }                                                                                             \
  /* FORM(f, post): the loop for those forms; the forms chosen outside the loop */              \
  static inline __attribute__((always_inline)) void name##_all_forms(                           \
      char *const *b, size_t off, int m, T *const *zs, int nz, int64_t n, int f, int post, T s, \
      bool stream) {                                                                            \
    if (f == F_PROD)                                                                            \
      name##_all_form(b, off, m, zs, nz, n, F_PROD, F_SUM, s, stream);                          \
    else if (!FLOATS || post == F_SUM)                                                          \
      name##_all_form(b, off, m, zs, nz, n, F_SUM, F_SUM, s, stream);                           \
    else if (post == F_MUL)                                                                     \
      name##_all_form(b, off, m, zs, nz, n, F_SUM, F_MUL, s, stream);                           \
    else                                                                                        \
      name##_all_form(b, off, m, zs, nz, n, F_SUM, F_DIV, s, stream);                           \
  }                                                                                             \
  /* (one output, not streamed: the small protocol's, every call; nz known here) */             \
  static void name##_all1(char *const *b, size_t off, int m, T *z, int64_t n, int f, int post,  \
                          T s) {                                                                \
    name##_all_forms(b, off, m, &z, 1, n, f, post, s, false);                                   \
  }                                                                                             \
  static void name##_all(char *const *b, size_t off, int m, T *const *zs, int nz, int64_t n,    \
                         int f, int post, T s, bool stream) {                                   \
    if (stream)                                                                                 \
      name##_all_forms(b, off, m, zs, nz, n, f, post, s, TC_CAN_STREAM);                        \
    else                                                                                        \
      name##_all_forms(b, off, m, zs, nz, n, f, post, s, false);                                \
  }
ALL_LOOP(float, f32, true)
ALL_LOOP(double, f64, true)
ALL_LOOP(uint32_t, u32, false)
ALL_LOOP(uint64_t, u64, false)

/* Streaming needs the outputs at one alignment: the loop aligns the first and streams into all. */
static bool same_alignment(void *const *zs, int nz) {
  for (int o = 1; o < nz; o++)
    if (((uintptr_t)zs[o] & 15) != ((uintptr_t)zs[0] & 15)) return false;
  return true;
}

/* The forms of a combine-all (f, post) and its factor s; false where it does not apply. */
static inline __attribute__((always_inline)) bool all_forms(tcoll_dtype_t d, bool prod,
                                                            double divisor, int *f, int *post,
                                                            double *s) {
  if (divisor != 1.0 && (prod || (d != TCOLL_FLOAT32 && d != TCOLL_FLOAT64))) return false;
  bool times = false;
  *s = divisor == 1.0 ? 1.0 : divided_by(divisor, &times);
  *f = prod ? F_PROD : F_SUM;
  *post = divisor == 1.0 ? F_SUM : times ? F_MUL : F_DIV;
  return true;
}

bool tc_host_combine_all_to(char *const *bases, size_t off, int m, void *const *zs, int nz,
                            int64_t n, tcoll_dtype_t d, bool prod, double divisor, bool stream) {
  int f, post;
  double s;
  if (!all_forms(d, prod, divisor, &f, &post, &s)) return false;
  stream = stream && same_alignment(zs, nz);
  switch (d) {
  case TCOLL_FLOAT32:
    f32_all(bases, off, m, (float *const *)zs, nz, n, f, post, (float)s, stream);
    return true;
  case TCOLL_FLOAT64:
    f64_all(bases, off, m, (double *const *)zs, nz, n, f, post, s, stream);
    return true;
  case TCOLL_INT32:
    u32_all(bases, off, m, (uint32_t *const *)zs, nz, n, f, F_SUM, 1, stream);
    return true;
  case TCOLL_INT64:
    u64_all(bases, off, m, (uint64_t *const *)zs, nz, n, f, F_SUM, 1, stream);
    return true;
  default: return false;
  }
}

bool tc_host_combine_all(char *const *bases, size_t off, int m, void *z, int64_t n, tcoll_dtype_t d,
                         bool prod, double divisor) {
  int f, post;
  double s;
  if (!all_forms(d, prod, divisor, &f, &post, &s)) return false;
  switch (d) {
  case TCOLL_FLOAT32: f32_all1(bases, off, m, z, n, f, post, (float)s); return true;
  case TCOLL_FLOAT64: f64_all1(bases, off, m, z, n, f, post, s); return true;
  case TCOLL_INT32: u32_all1(bases, off, m, z, n, f, F_SUM, 1); return true;
  case TCOLL_INT64: u64_all1(bases, off, m, z, n, f, F_SUM, 1); return true;
  default: return false;
  }
}

/* The half-precision dtypes, element by element in float: EXPR combines the element v with the
 * scalar. */
#define HALF_LOOP(dst, src, d, n, EXPR)                                      \
  do {                                                                       \
    uint16_t *o_ = (dst);                                                    \
    const uint16_t *x_ = (src);                                              \
    bool half_ = (d) == TCOLL_FLOAT16;                                       \
    for (int64_t i_ = 0; i_ < (n); i_++) {                                   \
      float v = half_ ? tc_half_to_float(x_[i_]) : tc_bf16_to_float(x_[i_]); \
      float r_ = (float)(EXPR);                                              \
      o_[i_] = half_ ? tc_float_to_half(r_) : tc_float_to_bf16(r_);          \
    }                                                                        \
  } while (0)

void tc_host_divide(void *buf, tcoll_dtype_t d, int64_t n, double divisor) {
  bool times;
  double s = divided_by(divisor, &times);
  int f = times ? F_MUL : F_DIV;
  if (d == TCOLL_FLOAT64)
    f64_loop(buf, NULL, buf, n, f, false, s);
  else if (d == TCOLL_FLOAT32)
    f32_loop(buf, NULL, buf, n, f, false, (float)s);
  else if (d == TCOLL_FLOAT16 || d == TCOLL_BFLOAT16)
    HALF_LOOP(buf, buf, d, n, v / (float)divisor);
}

void tc_host_scale_copy(void *dst, const void *src, tcoll_dtype_t d, int64_t n, double s) {
  if (d == TCOLL_FLOAT64)
    f64_loop(src, NULL, dst, n, F_MUL, false, s);
  else if (d == TCOLL_FLOAT32)
    f32_loop(src, NULL, dst, n, F_MUL, false, (float)s);
  else if (d == TCOLL_FLOAT16 || d == TCOLL_BFLOAT16)
    HALF_LOOP(dst, src, d, n, v * (float)s);
}

/* The small integers wrap like MPI's and CUDA's do: added in the unsigned type. */
#define ADD_LOOP(type, acc)                                                        \
  do {                                                                             \
    type *o_ = dst;                                                                \
    const type *x_ = src;                                                          \
    for (int64_t i_ = 0; i_ < n; i_++) o_[i_] = (type)((acc)o_[i_] + (acc)x_[i_]); \
  } while (0)

void tc_host_add(void *dst, const void *src, tcoll_dtype_t d, int64_t n) {
  if (tc_host_combine(dst, src, dst, n, d, false, false)) return;
  switch (d) {
  case TCOLL_BOOL: {
    uint8_t *o = dst;
    const uint8_t *x = src;
    for (int64_t i = 0; i < n; i++) o[i] = (uint8_t)(o[i] || x[i]);
    break;
  }
  case TCOLL_INT8: ADD_LOOP(int8_t, uint8_t); break;
  case TCOLL_UINT8: ADD_LOOP(uint8_t, uint8_t); break;
  case TCOLL_INT16: ADD_LOOP(int16_t, uint16_t); break;
  case TCOLL_FLOAT16:
  case TCOLL_BFLOAT16: {
    uint16_t *o = dst;
    const uint16_t *x = src;
    bool half = d == TCOLL_FLOAT16;
    for (int64_t i = 0; i < n; i++)
      o[i] = half ? tc_float_to_half(tc_half_to_float(o[i]) + tc_half_to_float(x[i]))
                  : tc_float_to_bf16(tc_bf16_to_float(o[i]) + tc_bf16_to_float(x[i]));
    break;
  }
  default: break; /* the others above */
  }
}
