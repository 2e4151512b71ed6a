/* Shared helpers for the suites of the reducing collectives (all_reduce, reduce, reduce_scatter,
 * the coalesced and list forms).
 *
 * Every rank fills its inputs from a closed formula rv(dtype, op, index, id, G), where id is the
 * rank's WORLD rank (so that a reduction over the wrong members shows) and G the group size. The
 * expected result is a serial reference over the members' ids (rref), never the code under test.
 * The formulas keep every value and every partial result an exact small integer (or half
 * integer) in every dtype: |sums| <= 80, products <= 81 at any group size (bfloat16 is exact up
 * to 256), AVG inputs
 * are a(i) + G*id so that the sum divides exactly by G, premul scalars are powers of two. */
#ifndef T_REDUCE_COMMON_H
#define T_REDUCE_COMMON_H

#include "harness.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Op kinds: the built-in tcoll_redop_t values, plus premul_sum. */
enum {
  K_SUM = TCOLL_SUM,
  K_AVG = TCOLL_AVG,
  K_PROD = TCOLL_PRODUCT,
  K_MIN = TCOLL_MIN,
  K_MAX = TCOLL_MAX,
  K_BAND = TCOLL_BAND,
  K_BOR = TCOLL_BOR,
  K_BXOR = TCOLL_BXOR,
  K_PREMUL,
  K_NKINDS
};

static const tcoll_dtype_t ALL_DTYPES[TCOLL_NUM_DTYPES] = {
    TCOLL_BOOL,  TCOLL_INT8,    TCOLL_UINT8,    TCOLL_INT16,   TCOLL_INT32,
    TCOLL_INT64, TCOLL_FLOAT16, TCOLL_BFLOAT16, TCOLL_FLOAT32, TCOLL_FLOAT64};

#define T_MAX_G 64
#define T_LEN(a) (sizeof(a) / sizeof((a)[0]))

static inline const char *kname(int k) {
  static const char *const names[K_NKINDS] = {"sum",  "avg", "product", "min",       "max",
                                              "band", "bor", "bxor",    "premul_sum"};
  return k >= 0 && k < K_NKINDS ? names[k] : "?";
}

static inline bool dt_float(tcoll_dtype_t d) {
  return d == TCOLL_FLOAT16 || d == TCOLL_BFLOAT16 || d == TCOLL_FLOAT32 || d == TCOLL_FLOAT64;
}
static inline bool dt_signed(tcoll_dtype_t d) { return d != TCOLL_BOOL && d != TCOLL_UINT8; }

/* Whether tcoll must accept op kind k on dtype d (DESIGN.md section 6). */
static inline bool k_accepts(int k, tcoll_dtype_t d) {
  if (k == K_AVG || k == K_PREMUL) return dt_float(d);
  if (k == K_BAND || k == K_BOR || k == K_BXOR) return !dt_float(d);
  return true;
}

/* The tcoll_redop_t of kind k (premul: the given handle). */
static inline tcoll_redop_t kop(int k, tcoll_redop_t premul) {
  return k == K_PREMUL ? premul : (tcoll_redop_t)k;
}

/* Rank `id`'s element i for op kind k. */
static inline double rv(tcoll_dtype_t d, int k, int64_t i, int id, int G) {
  if (d == TCOLL_BOOL) return (double)((i >> (id % 8)) & 1); /* every 0/1 combination over i */
  switch (k) {
  case K_PROD: { /* (magnitudes above 1 from ids 0-3 only: products stay <= 81 at any G) */
    double m = id < 4 ? (double)((i + 2 * id) % 3 + 1) : 1.0;
    if (dt_signed(d) && (i + id) % 4 == 1) m = -m;
    if ((i * 7 + id) % 29 == 0) m = 0;
    return m;
  }
  case K_AVG:
  case K_PREMUL: return (double)(i % 9 - (dt_signed(d) ? 4 : 0) + (int64_t)G * id);
  case K_BAND:
  case K_BOR:
  case K_BXOR: return (double)((i * 7 + id * 13 + 5) % 128 - (dt_signed(d) ? 64 : 0));
  default: return (double)((i * 5 + id * 3) % 11 - (dt_signed(d) ? 5 : 0)); /* sum, min, max */
  }
}

/* The reduction of rv over the G ids (s: the premul scalar). */
static inline double rref(tcoll_dtype_t d, int k, double s, int64_t i, const int *ids, int G) {
  if (d == TCOLL_BOOL) {
    int any = 0, all = 1, par = 0;
    for (int r = 0; r < G; r++) {
      int v = rv(d, k, i, ids[r], G) != 0;
      any |= v;
      all &= v;
      par ^= v;
    }
    switch (k) {
    case K_SUM:
    case K_MAX:
    case K_BOR: return any;
    case K_PROD:
    case K_MIN:
    case K_BAND: return all;
    case K_BXOR: return par;
    default: return NAN; /* AVG and premul_sum are refused on bool */
    }
  }
  double acc = rv(d, k, i, ids[0], G);
  int64_t bits = (int64_t)acc;
  if (k == K_PREMUL) acc *= s;
  for (int r = 1; r < G; r++) {
    double v = rv(d, k, i, ids[r], G);
    switch (k) {
    case K_SUM:
    case K_AVG: acc += v; break;
    case K_PREMUL: acc += s * v; break;
    case K_PROD: acc *= v; break;
    case K_MIN: acc = fmin(acc, v); break;
    case K_MAX: acc = fmax(acc, v); break;
    case K_BAND: bits &= (int64_t)v; break;
    case K_BOR: bits |= (int64_t)v; break;
    case K_BXOR: bits ^= (int64_t)v; break;
    }
  }
  if (k == K_BAND || k == K_BOR || k == K_BXOR) return (double)bits;
  if (k == K_AVG) acc /= G;
  return acc == 0 ? 0.0 : acc; /* no -0 */
}

/* ---- fill / check contexts ---- */

typedef struct rc {
  tcoll_dtype_t d;
  int k;
  double s;         /* premul scalar */
  int G;            /* group size */
  int ids[T_MAX_G]; /* world ranks of the group, in the communicator's order */
  int id;           /* the filling rank's id */
  int64_t salt;     /* index offset (which tensor / which block) */
  /* reduce_scatter: output element j of local rank q is input element
   * ((o * len + q * (len / G) + l) * inner + n) for j = (o * (len / G) + l) * inner + n. */
  int64_t len, inner;
  int q;
  bool scatter;
} rc_t;

/* The world group. */
static inline rc_t rc_world(tcoll_dtype_t d, int k, double s) {
  rc_t c;
  memset(&c, 0, sizeof c);
  c.d = d;
  c.k = k;
  c.s = s;
  c.G = t_size;
  for (int r = 0; r < t_size; r++) c.ids[r] = r;
  c.id = t_rank;
  return c;
}

/* A group of G world ranks (in comm order). */
static inline rc_t rc_group(tcoll_dtype_t d, int k, double s, const int *ids, int G) {
  rc_t c = rc_world(d, k, s);
  c.G = G;
  for (int r = 0; r < G; r++) c.ids[r] = ids[r];
  return c;
}

static inline double rc_fill(int64_t i, void *p) {
  const rc_t *c = p;
  return rv(c->d, c->k, c->salt + i, c->id, c->G);
}

static inline int64_t rc_map(const rc_t *c, int64_t j) {
  if (!c->scatter) return j;
  int64_t lo = c->len / c->G, n = j % c->inner, l = (j / c->inner) % lo, o = j / (c->inner * lo);
  return (o * c->len + (int64_t)c->q * lo + l) * c->inner + n;
}

static inline double rc_want(int64_t j, void *p) {
  const rc_t *c = p;
  return rref(c->d, c->k, c->s, c->salt + rc_map(c, j), c->ids, c->G);
}

/* What rank id holds before the collective (for "unchanged" checks). */
static inline double rc_orig(int64_t j, void *p) {
  const rc_t *c = p;
  return rv(c->d, c->k, c->salt + j, c->id, c->G);
}

static inline double const_fill(int64_t i, void *p) {
  (void)i;
  return *(const double *)p;
}

/* Sets rc up for reduce_scatter of a tensor of shape[ndim] along dim (normalized) on local rank q.
 */
static inline void rc_scatter(rc_t *c, const int64_t *shape, int ndim, int dim, int q) {
  c->scatter = true;
  c->len = shape[dim];
  c->inner = 1;
  for (int i = dim + 1; i < ndim; i++) c->inner *= shape[i];
  c->q = q;
}

/* ---- misc ---- */

/* word occurs in s delimited by non-identifier characters ("int8" does not match "uint8"). */
static inline bool t_has_word(const char *s, const char *word) {
  size_t n = strlen(word);
  for (const char *p = s; p && (p = strstr(p, word)); p++) {
    bool left = p == s || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
    bool right = !(isalnum((unsigned char)p[n]) || p[n] == '_');
    if (left && right) return true;
  }
  return false;
}

/* An op / dtype refusal: INVALID_ARGUMENT naming both. */
#define T_REFUSED(call, k, d)                                                                  \
  do {                                                                                         \
    int t_rc2_ = (call);                                                                       \
    T_EXPECT(t_rc2_ == TCOLL_ERR_INVALID_ARGUMENT,                                             \
             "%s on %s: %s returned %s (expected refusal): %s", kname(k), tcoll_dtype_name(d), \
             #call, tcoll_status_string(t_rc2_), tcoll_last_error());                          \
    T_EXPECT(t_has_word(tcoll_last_error(), kname(k)) &&                                       \
                 t_has_word(tcoll_last_error(), tcoll_dtype_name(d)),                          \
             "refusal of %s on %s does not name both: \"%s\"", kname(k), tcoll_dtype_name(d),  \
             tcoll_last_error());                                                              \
  } while (0)

/* Checks that an allocated output has the expected descriptor. */
static inline void t_expect_desc(const char *what, const tcoll_tensor_t *t, tcoll_dtype_t d,
                                 int ndim, const int64_t *shape, int device) {
  T_EXPECT(t->data != NULL, "%s: data is NULL", what);
  T_EXPECT(t->dtype == d, "%s: dtype %s, expected %s", what, tcoll_dtype_name(t->dtype),
           tcoll_dtype_name(d));
  T_EXPECT(t->ndim == ndim, "%s: ndim %d, expected %d", what, t->ndim, ndim);
  for (int i = 0; i < ndim && i < t->ndim; i++)
    T_EXPECT(t->shape[i] == shape[i], "%s: shape[%d] %lld, expected %lld", what, i,
             (long long)t->shape[i], (long long)shape[i]);
  T_EXPECT(t->device == device, "%s: device %d, expected %d", what, t->device, device);
}

/* Sets the per-MPI-call element limit; returns the previous value. */
static inline int64_t t_set_max_count(int64_t n) {
  tcoll_config_t cfg;
  T_OK(tcoll_get_config(&cfg));
  int64_t old = cfg.max_count;
  cfg.max_count = n;
  T_OK(tcoll_set_config(&cfg));
  return old;
}

/* The members (world ranks) of the even/odd split of world that this rank is in. */
static inline int t_parity_members(int *ids) {
  int G = 0;
  for (int r = t_rank % 2; r < t_size; r += 2) ids[G++] = r;
  return G;
}

/* A 2-D mesh over world: {2, size/2} for even sizes, {1, size} otherwise. */
static inline void t_mesh_dims(int dims[2]) {
  dims[0] = t_size % 2 == 0 ? 2 : 1;
  dims[1] = t_size / dims[0];
}

/* The members of my slice along mesh dim `dim` (row-major layout over world ranks). */
static inline int t_mesh_members(const int dims[2], int dim, int *ids) {
  int a = t_rank / dims[1], b = t_rank % dims[1];
  if (dim == 0) {
    for (int x = 0; x < dims[0]; x++) ids[x] = x * dims[1] + b;
    return dims[0];
  }
  for (int y = 0; y < dims[1]; y++) ids[y] = a * dims[1] + y;
  return dims[1];
}

#endif
