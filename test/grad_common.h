/* Helpers shared by the gradient suites: seeded random data per rank, inner products summed
 * over ranks in float64 with MPI (independently of tcoll), small tensor constructors. */
#ifndef T_GRAD_COMMON_H
#define T_GRAD_COMMON_H

#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: a seeded generator per (test, rank, tensor). */
typedef struct {
  uint64_t s;
} g_rng_t;
static inline uint64_t g_next(g_rng_t *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/* Uniform in [-1, 1). */
static inline double g_uniform(g_rng_t *r) { return (double)(g_next(r) >> 11) * 0x1.0p-52 - 1.0; }

static inline double g_rand_value(int64_t i, void *ctx) {
  (void)i;
  return g_uniform((g_rng_t *)ctx);
}
/* Fills t with uniform values from a generator seeded by (seed, world rank). */
static inline void g_fill_random(tcoll_tensor_t *t, uint64_t seed) {
  g_rng_t r = {seed * 1000003ull + (uint64_t)t_rank * 7919ull + 1};
  t_set_all(t, g_rand_value, &r);
}

static inline double g_const_value(int64_t i, void *ctx) {
  (void)i;
  return *(double *)ctx;
}
static inline void g_fill_const(tcoll_tensor_t *t, double v) { t_set_all(t, g_const_value, &v); }

/* Local <a, b> (same numel) in float64. */
static inline double g_dot(const tcoll_tensor_t *a, const tcoll_tensor_t *b) {
  int64_t n = tcoll_tensor_numel(a);
  T_EXPECT(n == tcoll_tensor_numel(b), "dot of %lld and %lld elements", (long long)n,
           (long long)tcoll_tensor_numel(b));
  if (n != tcoll_tensor_numel(b)) return NAN;
  double *va = malloc((size_t)(n ? n : 1) * sizeof *va),
         *vb = malloc((size_t)(n ? n : 1) * sizeof *vb);
  t_read(a, va);
  t_read(b, vb);
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += va[i] * vb[i];
  free(va);
  free(vb);
  return s;
}

/* Sum over the ranks of MPI_COMM_WORLD (the test's own MPI call). */
static inline double g_allsum(double v) {
  double s = 0;
  MPI_Allreduce(&v, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return s;
}

/* |a - b| <= tol * max(1, |a|, |b|). */
static inline bool g_close(double a, double b, double tol) {
  return fabs(a - b) <= tol * fmax(1.0, fmax(fabs(a), fabs(b)));
}

/* Checks the adjoint identity sum_r <A x, y> == sum_r <x, A^T y> from the local parts. */
#define G_EXPECT_ADJOINT(what, local_fwd, local_bwd, tol)                                        \
  do {                                                                                           \
    double g_l_ = g_allsum(local_fwd), g_r_ = g_allsum(local_bwd);                               \
    T_EXPECT(g_close(g_l_, g_r_, tol),                                                           \
             "%s: sum <Ax, y> = %.17g but sum <x, A^T y> = %.17g (diff %.3g)", what, g_l_, g_r_, \
             g_l_ - g_r_);                                                                       \
  } while (0)

static inline tcoll_tensor_t g_t1(tcoll_dtype_t dt, int64_t n0) { return t_alloc(dt, 1, &n0); }
static inline tcoll_tensor_t g_t2(tcoll_dtype_t dt, int64_t n0, int64_t n1) {
  int64_t s[2] = {n0, n1};
  return t_alloc(dt, 2, s);
}
static inline tcoll_tensor_t g_t3(tcoll_dtype_t dt, int64_t n0, int64_t n1, int64_t n2) {
  int64_t s[3] = {n0, n1, n2};
  return t_alloc(dt, 3, s);
}

/* A list of n tensors shaped like proto (allocated, or empty descriptors). */
static inline tcoll_tensor_t *g_list(int n, const tcoll_tensor_t *proto, bool alloc) {
  tcoll_tensor_t *l = calloc(n > 0 ? (size_t)n : 1, sizeof *l);
  for (int i = 0; i < n; i++)
    l[i] = alloc ? t_alloc(proto->dtype, proto->ndim, proto->shape) : t_empty();
  return l;
}
static inline void g_list_free(tcoll_tensor_t *l, int n) {
  if (!l) return;
  for (int i = 0; i < n; i++) tcoll_tensor_free(&l[i]);
  free(l);
}
static inline double g_list_dot(const tcoll_tensor_t *a, const tcoll_tensor_t *b, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += g_dot(&a[i], &b[i]);
  return s;
}
static inline void g_wait_list(const tcoll_tensor_t *l, int n) {
  for (int i = 0; i < n; i++) T_OK(tcoll_wait(l[i].data));
}

#endif
