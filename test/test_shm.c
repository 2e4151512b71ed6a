/* The shared-memory all_reduce, reduce and broadcast ("shm"): ranks of one node move small payloads
 * through a segment made with each communicator, reducing in rank order ((x0 op x1) op x2 ...), so
 * that floating-point results are bitwise the same on every rank and equal a serial reference in
 * that order. Forced (tcoll_config_t.algo "all_reduce:shm") and chosen by the table; every dtype
 * and op; sizes across its limit; many calls in flight on two communicators; segments freed with
 * their communicator; the fallback to the literal MPI mapping (tcoll_last_algorithm "mpi") at 1
 * rank, with TCOLL_SHM=0 (the -noshm runs) and with a segment too small for it
 * (TCOLL_SHM_BYTES=4K: the -tiny runs), with the same results; device tensors; a tcoll_test that
 * finds the call in progress yields the core where ranks outnumber cores, and only there.
 *
 * Every test that sets the algorithm puts back the setting it found ("auto": the suite is not
 * among test/meson.build's algo_suites). */
#define _GNU_SOURCE /* sched_getaffinity, RTLD_NEXT */
#include "algo_util.h"
#include "reduce_common.h"

#include <dlfcn.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

/* Payloads up to this many bytes always take shm where a segment exists (default settings). */
#define SHM_SURE_BYTES 16384

/* Whether forced shm runs on a communicator of `size` ranks here: 2 ranks or more, segments on
 * (TCOLL_SHM not "0") and the default segment size (TCOLL_SHM_BYTES unset). */
static bool shm_expected(int size) {
  const char *on = getenv("TCOLL_SHM");
  if (on && !strcmp(on, "0")) return false;
  return size >= 2 && getenv("TCOLL_SHM_BYTES") == NULL;
}

/* The algorithm forced shm must report for `bytes` on `size` ranks: "shm" or "mpi", NULL where
 * either may (empty payloads; between 16 KiB and the limit). */
static const char *forced_want(int size, size_t bytes) {
  if (bytes == 0) return NULL;
  if (!shm_expected(size)) return "mpi";
  return bytes <= SHM_SURE_BYTES ? "shm" : NULL;
}

/* Checks what tcoll_last_algorithm() gave right after a post against want (NULL: anything). */
static void check_algo(const char *what, const char *got, const char *want) {
  T_EXPECT(got != NULL, "%s: tcoll_last_algorithm() is NULL", what);
  if (want && got)
    T_EXPECT(!strcmp(got, want), "%s: tcoll_last_algorithm() is \"%s\" (expected \"%s\")", what,
             got, want);
}

static bool is_shm(const char *got) { return got && !strcmp(got, "shm"); }

static int64_t clock_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------- rank order, bitwise */

/* Rank r's element i: magnitudes 1e-3 .. 1e3 by (r + i) % 7, alternating signs, so that the
 * association order shows in the last bits. */
static const double POW10[7] = {1e-3, 1e-2, 1e-1, 1, 10, 100, 1000};
static double ro_value(int r, int64_t i) {
  double v = (1 + r * 0.1 + (double)i * 1e-3) * POW10[(r + i) % 7];
  return (r + i) % 2 ? -v : v;
}
typedef struct ro_ctx {
  int rank;
  tcoll_dtype_t d;
} ro_ctx_t;
/* The value as the dtype holds it (the fill rounds, the check of the input compares this). */
static double ro_fill(int64_t i, void *p) {
  const ro_ctx_t *c = p;
  double v = ro_value(c->rank, i);
  return c->d == TCOLL_FLOAT32 ? (double)(float)v : v;
}

/* The serial reference in rank order, in float32 arithmetic: acc = x0 (premul: s * x0), then
 * acc = acc op x_r for r = 1 .. G-1; AVG divides by G once at the end. Also the sum of the
 * magnitudes of the terms (for the tolerance of an MPI reduction in another order). */
static double ro_ref_f32(int k, double s, int64_t i, int G, double *mag) {
  const float fs = (float)s;
  float acc = (float)ro_value(0, i);
  if (k == K_PREMUL) {
    volatile float sv = acc * fs; /* no contraction into a fused multiply-add */
    acc = sv;
  }
  *mag = fabs((double)acc);
  for (int r = 1; r < G; r++) {
    const float v = (float)ro_value(r, i);
    switch (k) {
    case K_SUM:
    case K_AVG: acc = acc + v; break;
    case K_PREMUL: {
      volatile float sv = v * fs;
      acc = acc + sv;
      *mag += fabs((double)sv);
      continue;
    }
    case K_PROD: acc = acc * v; break;
    case K_MIN: acc = v < acc ? v : acc; break;
    case K_MAX: acc = v > acc ? v : acc; break;
    }
    *mag += fabs((double)v);
  }
  if (k == K_AVG) {
    acc = acc / (float)G;
    *mag /= G;
  }
  return (double)acc;
}

/* The same in float64 arithmetic. */
static double ro_ref_f64(int k, double s, int64_t i, int G, double *mag) {
  double acc = ro_value(0, i);
  if (k == K_PREMUL) {
    volatile double sv = acc * s;
    acc = sv;
  }
  *mag = fabs(acc);
  for (int r = 1; r < G; r++) {
    const double v = ro_value(r, i);
    switch (k) {
    case K_SUM:
    case K_AVG: acc = acc + v; break;
    case K_PREMUL: {
      volatile double sv = v * s;
      acc = acc + sv;
      *mag += fabs(sv);
      continue;
    }
    case K_PROD: acc = acc * v; break;
    case K_MIN: acc = v < acc ? v : acc; break;
    case K_MAX: acc = v > acc ? v : acc; break;
    }
    *mag += fabs(v);
  }
  if (k == K_AVG) {
    acc = acc / G;
    *mag /= G;
  }
  return acc;
}

/* One all_reduce of ro_value over world, forced shm: where shm ran (and wherever the order
 * cannot differ: 2 ranks or fewer), each element must be bitwise the serial reference; where
 * the literal MPI call ran at 3 ranks or more, MPI may associate otherwise: within rounding.
 * Every rank's result bytes must be the same. */
static void ro_case(tcoll_dtype_t d, int k, tcoll_redop_t op, double s, int64_t n, bool inplace) {
  char what[200];
  snprintf(what, sizeof what, "rank order: all_reduce %s %s of %lld elements %s", kname(k),
           tcoll_dtype_name(d), (long long)n, inplace ? "in place" : "out of place");
  int64_t shape[1] = {n};
  ro_ctx_t me = {t_rank, d};
  tcoll_tensor_t in = t_alloc(d, 1, shape);
  t_set_all(&in, ro_fill, &me);
  tcoll_tensor_t out = inplace ? in : t_alloc(d, 1, shape);
  T_OK(tcoll_all_reduce(&in, op, NULL, &out));
  const char *got = tcoll_last_algorithm();
  T_OK(tcoll_wait(out.data));
  check_algo(what, got, forced_want(t_size, (size_t)n * tcoll_dtype_size(d)));
  bool exact = is_shm(got) || t_size <= 2 || k == K_MIN || k == K_MAX;
  const double eps = d == TCOLL_FLOAT32 ? 0x1p-24 : 0x1p-53;

  double *vals = malloc((size_t)n * sizeof *vals);
  double *all = malloc((size_t)n * (size_t)t_size * sizeof *all);
  t_read(&out, vals);
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double mag, want = d == TCOLL_FLOAT32 ? ro_ref_f32(k, s, i, t_size, &mag)
                                          : ro_ref_f64(k, s, i, t_size, &mag);
    bool ok;
    if (exact)
      ok = !memcmp(&vals[i], &want, sizeof want);
    else {
      double tol = 4.0 * t_size * eps * (k == K_PROD ? fabs(want) : mag);
      ok = fabs(vals[i] - want) <= tol;
    }
    if (!ok && bad++ < 3)
      T_EXPECT(false, "%s (%s): element %lld is %a (%.9g), expected %s %a (%.9g)", what,
               got ? got : "?", (long long)i, vals[i], vals[i], exact ? "bitwise" : "about", want,
               want);
  }
  if (bad > 3) T_EXPECT(false, "%s: %d elements differ in all", what, bad);

  /* every rank the same bits */
  MPI_Allgather(vals, (int)n, MPI_DOUBLE, all, (int)n, MPI_DOUBLE, MPI_COMM_WORLD);
  for (int q = 0; q < t_size; q++)
    T_EXPECT(!memcmp(all + (size_t)q * (size_t)n, vals, (size_t)n * sizeof *vals),
             "%s (%s): rank %d's result bits differ from rank %d's", what, got ? got : "?", q,
             t_rank);
  if (!inplace) {
    char w2[240];
    snprintf(w2, sizeof w2, "%s: input", what);
    t_check_all(w2, &in, ro_fill, &me, 0);
    tcoll_tensor_free(&out);
  }
  tcoll_tensor_free(&in);
  free(all);
  free(vals);
}

START_TEST(rank_order_bits) {
  t_save_algo();
  t_set_algo("all_reduce:shm");
  const double scalar = -1.25; /* exact in float32: one rounding per product either way */
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(scalar, &premul));
  const tcoll_dtype_t dts[] = {TCOLL_FLOAT32, TCOLL_FLOAT64};
  const int ks[] = {K_SUM, K_PROD, K_AVG, K_PREMUL, K_MIN, K_MAX};
  /* 11 and 1001: vectors and then a tail of single elements (11 float32 still ride in the line) */
  const int64_t sizes[] = {1, 3, 11, 64, 1000, 1001, 4096};
  for (size_t d = 0; d < T_LEN(dts); d++)
    for (size_t k = 0; k < T_LEN(ks); k++)
      for (size_t s = 0; s < T_LEN(sizes); s++)
        for (int inplace = 0; inplace < 2; inplace++)
          ro_case(dts[d], ks[k], kop(ks[k], premul), scalar, sizes[s], inplace);
  T_OK(tcoll_redop_destroy(premul));
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- integer dtypes */

/* x modulo 2^bits, as dtype d holds it. */
static double int_wrap(tcoll_dtype_t d, uint64_t x) {
  int bits = (int)tcoll_dtype_size(d) * 8;
  if (bits == 64) return (double)(int64_t)x;
  uint64_t m = x & ((UINT64_C(1) << bits) - 1);
  if (!dt_signed(d)) return (double)m;
  return (double)(m >= (UINT64_C(1) << (bits - 1)) ? (int64_t)m - ((int64_t)1 << bits)
                                                   : (int64_t)m);
}

typedef struct int_ctx {
  tcoll_dtype_t d;
  int k;
} int_ctx_t;

static double int_fill(int64_t i, void *p) {
  const int_ctx_t *c = p;
  return rv(c->d, c->k, i, t_rank, t_size);
}

/* The serial reference of rv over world ranks, wrapping as the dtype does (products of many
 * ranks leave int8). */
static double int_want(int64_t i, void *p) {
  const int_ctx_t *c = p;
  if (c->d == TCOLL_BOOL) {
    int ids[T_MAX_G];
    for (int r = 0; r < t_size; r++) ids[r] = r;
    return rref(c->d, c->k, 1, i, ids, t_size);
  }
  int64_t first = (int64_t)rv(c->d, c->k, i, 0, t_size), m = first;
  uint64_t acc = (uint64_t)first;
  for (int r = 1; r < t_size; r++) {
    int64_t v = (int64_t)rv(c->d, c->k, i, r, t_size);
    switch (c->k) {
    case K_SUM: acc += (uint64_t)v; break;
    case K_PROD: acc *= (uint64_t)v; break;
    case K_MIN: m = v < m ? v : m; break;
    case K_MAX: m = v > m ? v : m; break;
    case K_BAND: acc &= (uint64_t)v; break;
    case K_BOR: acc |= (uint64_t)v; break;
    case K_BXOR: acc ^= (uint64_t)v; break;
    }
  }
  if (c->k == K_MIN || c->k == K_MAX) return (double)m;
  return int_wrap(c->d, acc);
}

START_TEST(every_dtype_int) {
  t_save_algo();
  t_set_algo("all_reduce:shm");
  const tcoll_dtype_t dts[] = {TCOLL_BOOL,  TCOLL_INT8,  TCOLL_UINT8,
                               TCOLL_INT16, TCOLL_INT32, TCOLL_INT64};
  const int ks[] = {K_SUM, K_MIN, K_MAX, K_PROD, K_BAND, K_BOR, K_BXOR};
  const int64_t sizes[] = {0, 1, 17, 2000};
  int n = 0;
  for (size_t d = 0; d < T_LEN(dts); d++)
    for (size_t k = 0; k < T_LEN(ks); k++)
      for (size_t s = 0; s < T_LEN(sizes); s++) {
        bool inplace = n++ % 2;
        char what[200];
        snprintf(what, sizeof what, "all_reduce %s %s of %lld elements %s", kname(ks[k]),
                 tcoll_dtype_name(dts[d]), (long long)sizes[s],
                 inplace ? "in place" : "out of place");
        int_ctx_t c = {dts[d], ks[k]};
        int64_t shape[1] = {sizes[s]};
        tcoll_tensor_t in = t_alloc(dts[d], 1, shape);
        t_set_all(&in, int_fill, &c);
        tcoll_tensor_t out = inplace ? in : t_alloc(dts[d], 1, shape);
        T_OK(tcoll_all_reduce(&in, (tcoll_redop_t)ks[k], NULL, &out));
        const char *got = tcoll_last_algorithm();
        T_OK(tcoll_wait(out.data));
        check_algo(what, got, forced_want(t_size, (size_t)sizes[s] * tcoll_dtype_size(dts[d])));
        t_check_all(what, &out, int_want, &c, 0);
        if (!inplace) {
          char w2[240];
          snprintf(w2, sizeof w2, "%s: input", what);
          t_check_all(w2, &in, int_fill, &c, 0);
          tcoll_tensor_free(&out);
        }
        tcoll_tensor_free(&in);
      }
  /* a zero-size input with no storage (data NULL), into an allocated output */
  int64_t zshape[2] = {0, 4};
  tcoll_tensor_t zin = tcoll_tensor_make(NULL, TCOLL_INT32, 2, zshape, t_device());
  tcoll_tensor_t zout = t_empty();
  T_OK(tcoll_all_reduce(&zin, TCOLL_MAX, NULL, &zout));
  T_OK(tcoll_wait(zout.data));
  t_expect_desc("zero-size output", &zout, TCOLL_INT32, 2, zshape, zin.device);
  tcoll_tensor_free(&zout);
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- sizes across the limit */

/* Small integers: every float32 sum exact. */
static double sz_value(int r, int64_t i) { return (double)((i * 7 + r * 3) % 13 - 6); }
static double sz_fill(int64_t i, void *p) { return sz_value(*(const int *)p, i); }
static double sz_want(int64_t i, void *p) {
  const int *G = p;
  double acc = 0;
  for (int r = 0; r < *G; r++) acc += sz_value(r, i);
  return acc;
}

/* The default table ("auto"), float32 SUM from 8 bytes to 4 MiB: exact everywhere (so every
 * rank holds the same). Up to 4 KiB on host tensors the table takes shm where it runs; without
 * segments it never does. */
START_TEST(sizes_cross_limit) {
  t_save_algo();
  t_set_algo("auto");
  const size_t bytes[] = {8, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20};
  for (size_t b = 0; b < T_LEN(bytes); b++) {
    int64_t n = (int64_t)(bytes[b] / 4), shape[1] = {n};
    bool inplace = b % 2;
    char what[160];
    snprintf(what, sizeof what, "auto: all_reduce sum float32 of %zu bytes %s", bytes[b],
             inplace ? "in place" : "out of place");
    int me = t_rank, G = t_size;
    tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape);
    t_set_all(&in, sz_fill, &me);
    tcoll_tensor_t out = inplace ? in : t_alloc(TCOLL_FLOAT32, 1, shape);
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
    const char *got = tcoll_last_algorithm();
    T_OK(tcoll_wait(out.data));
    const char *want = NULL;
    if (t_size < 2)
      want = "mpi";
    else if (shm_expected(t_size) && bytes[b] <= (4 << 10) && in.device == TCOLL_HOST)
      want = "shm";
    check_algo(what, got, want);
    if (!shm_expected(t_size))
      T_EXPECT(!is_shm(got), "%s: shm ran where no segment can exist", what);
    t_check_all(what, &out, sz_want, &G, 0);
    if (!inplace) tcoll_tensor_free(&out);
    tcoll_tensor_free(&in);
  }
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- many in flight */

#define NFLIGHT 500

typedef struct fl_ctx {
  int j; /* the call's index */
  int id;
} fl_ctx_t;
static double fl_value(int j, int id, int64_t i) { return (double)((j * 3 + i * 5 + id * 7) % 17); }
static double fl_fill(int64_t i, void *p) {
  const fl_ctx_t *c = p;
  return fl_value(c->j, c->id, i);
}
/* Both communicators have world's members: the sum over world ranks. */
static double fl_want(int64_t i, void *p) {
  const fl_ctx_t *c = p;
  double acc = 0;
  for (int r = 0; r < t_size; r++) acc += fl_value(c->j, r, i);
  return acc;
}

/* Posts NFLIGHT small all_reduces alternating between world and `other` (rank 0 starts 20 ms
 * late, the last rank stops 5 ms half-way), then completes them: in reverse order, or
 * (test_half) the first half waited in order and the rest polled with tcoll_test. */
static void in_flight(tcoll_comm_t *other, bool test_half) {
  tcoll_tensor_t *in = calloc(NFLIGHT, sizeof *in), *out = calloc(NFLIGHT, sizeof *out);
  const char **algo = calloc(NFLIGHT, sizeof *algo);
  if (t_rank == 0) usleep(20000);
  for (int j = 0; j < NFLIGHT; j++) {
    if (j == NFLIGHT / 2 && t_rank == t_size - 1) usleep(5000);
    int64_t shape[1] = {1 + (j * 37) % 64};
    fl_ctx_t c = {j, t_rank};
    in[j] = t_alloc(TCOLL_FLOAT32, 1, shape);
    t_set_all(&in[j], fl_fill, &c);
    out[j] = t_alloc(TCOLL_FLOAT32, 1, shape);
    T_OK(tcoll_all_reduce(&in[j], TCOLL_SUM, j % 2 ? other : NULL, &out[j]));
    algo[j] = tcoll_last_algorithm();
  }
  if (!test_half) {
    for (int j = NFLIGHT - 1; j >= 0; j--) T_OK(tcoll_wait(out[j].data));
  } else {
    for (int j = 0; j < NFLIGHT / 2; j++) T_OK(tcoll_wait(out[j].data));
    bool *done = calloc(NFLIGHT, sizeof *done);
    int left = NFLIGHT - NFLIGHT / 2;
    int64_t deadline = clock_ms() + 120000;
    while (left > 0) {
      for (int j = NFLIGHT / 2; j < NFLIGHT; j++) {
        if (done[j]) continue;
        int rc = tcoll_test(out[j].data);
        if (rc == TCOLL_IN_PROGRESS) continue;
        T_EXPECT(rc == TCOLL_SUCCESS, "in flight: tcoll_test of call %d returned %s: %s", j,
                 tcoll_status_string(rc), tcoll_last_error());
        done[j] = true;
        left--;
      }
      if (left > 0 && clock_ms() > deadline) {
        T_EXPECT(false, "in flight: %d calls still in progress after 120 s of tcoll_test", left);
        for (int j = NFLIGHT / 2; j < NFLIGHT; j++)
          if (!done[j]) T_OK(tcoll_wait(out[j].data));
        break;
      }
    }
    free(done);
  }
  int wrong_algo = 0;
  for (int j = 0; j < NFLIGHT; j++) {
    char what[120];
    snprintf(what, sizeof what, "in flight (%s): call %d on %s",
             test_half ? "waited and tested" : "waited in reverse", j,
             j % 2 ? "the split" : "world");
    const char *want = forced_want(t_size, (size_t)tcoll_tensor_nbytes(&out[j]));
    if (want && (!algo[j] || strcmp(algo[j], want)) && wrong_algo++ == 0)
      check_algo(what, algo[j], want);
    fl_ctx_t c = {j, t_rank};
    t_check_all(what, &out[j], fl_want, &c, 0);
    tcoll_tensor_free(&out[j]);
    tcoll_tensor_free(&in[j]);
  }
  T_EXPECT(wrong_algo == 0, "in flight: %d of %d calls ran another algorithm than expected",
           wrong_algo, NFLIGHT);
  free(algo);
  free(out);
  free(in);
}

/* ---------------------------------------------------------------- reduce and broadcast */

/* Call i of the mixed sequence: its op (0 all_reduce, 1 reduce, 2 broadcast), root and length
 * (1 to 40 float64: in the flag line up to 7, in a slot beyond). */
static int mix_op(int i) { return i % 3; }
static int mix_root(int i) { return (i / 3) % t_size; }
static int64_t mix_len(int i) { return 1 + (i * 7) % 40; }
/* Rank r's element j of call i: small integers, so sums are exact in any order. */
static double mix_val(int i, int r, int64_t j) { return (double)((r + 1) * (i % 13 + 1) + j); }
/* What this rank's output holds after call i: the sum (all_reduce; reduce at the root), the
 * root's values (broadcast), or the -1 it started as (reduce off the root). */
static double mix_want(int i, int64_t j) {
  if (mix_op(i) == 2) return mix_val(i, mix_root(i), j);
  if (mix_op(i) == 1 && t_rank != mix_root(i)) return -1.0;
  double sum = 0;
  for (int r = 0; r < t_size; r++) sum += mix_val(i, r, j);
  return sum;
}

/* All three ops forced to shm and interleaved, 300 calls in flight at once (waited in reverse
 * order): one protocol serves them all, and each gets its exact result (reduce: on the root; off
 * it the output stays as it was; broadcast: the root's values everywhere). Then reduce in rank
 * order, bitwise, to each root. */
START_TEST(reduce_broadcast_mixed) {
  t_save_algo();
  t_set_algo("all_reduce:shm,reduce:shm,broadcast:shm");
  enum { N = 300 };
  tcoll_tensor_t *in = calloc(N, sizeof *in), *out = calloc(N, sizeof *out);
  bool want_shm = shm_expected(t_size);
  for (int i = 0; i < N; i++) {
    int64_t n = mix_len(i);
    in[i] = t_host(TCOLL_FLOAT64, 1, &n);
    out[i] = t_host(TCOLL_FLOAT64, 1, &n);
    double *x = in[i].data, *y = out[i].data;
    for (int64_t j = 0; j < n; j++) {
      x[j] = mix_val(i, t_rank, j);
      y[j] = -1.0;
    }
    int rc = mix_op(i) == 0   ? tcoll_all_reduce(&in[i], TCOLL_SUM, NULL, &out[i])
             : mix_op(i) == 1 ? tcoll_reduce(&in[i], mix_root(i), TCOLL_SUM, NULL, &out[i])
                              : tcoll_broadcast(&in[i], mix_root(i), NULL, &out[i]);
    T_EXPECT(rc == TCOLL_SUCCESS, "mixed call %d: %s", i, tcoll_last_error());
    const char *got = tcoll_last_algorithm();
    T_EXPECT(got && !strcmp(got, want_shm ? "shm" : "mpi"), "mixed call %d ran \"%s\"", i,
             got ? got : "?");
  }
  if (t_rank == 0) usleep(20000); /* the others wait in the protocol meanwhile */
  for (int i = N; i-- > 0;) T_OK(tcoll_wait(out[i].data));
  int bad = 0;
  for (int i = 0; i < N; i++) {
    const double *y = out[i].data;
    for (int64_t j = 0; j < mix_len(i); j++) {
      double want = mix_want(i, j);
      if (y[j] != want && bad++ < 5)
        T_EXPECT(false, "mixed call %d (op %d, root %d) element %lld: %g, expected %g", i,
                 mix_op(i), mix_root(i), (long long)j, y[j], want);
    }
    tcoll_tensor_free(&in[i]);
    tcoll_tensor_free(&out[i]);
  }
  free(in);
  free(out);
  /* reduce in rank order, bitwise, float64 SUM of 1000 (a slot) and 3 (the line) */
  for (int root = 0; root < t_size; root++)
    for (int64_t n = 3; n <= 1000; n += 997) {
      ro_ctx_t me = {t_rank, TCOLL_FLOAT64};
      tcoll_tensor_t x = t_host(TCOLL_FLOAT64, 1, &n), y = t_host(TCOLL_FLOAT64, 1, &n);
      t_set_all(&x, ro_fill, &me);
      T_OK(tcoll_reduce(&x, root, TCOLL_SUM, NULL, &y));
      bool shm = is_shm(tcoll_last_algorithm());
      T_OK(tcoll_wait(y.data));
      if (t_rank == root && (shm || t_size <= 2))
        for (int64_t i = 0; i < n; i++) {
          double mag, want = ro_ref_f64(K_SUM, 1.0, i, t_size, &mag), got = t_get(&y, i);
          if (memcmp(&got, &want, sizeof got) && bad++ < 5)
            T_EXPECT(false, "reduce to %d of %lld: element %lld is %a, expected bitwise %a", root,
                     (long long)n, (long long)i, got, want);
        }
      tcoll_tensor_free(&x);
      tcoll_tensor_free(&y);
    }
  t_restore_algo();
}
END_TEST

/* Waits a while on the processor (not in the scheduler: the peers keep their cores). */
static int64_t clock_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void spin_us(int us) {
  int64_t end = clock_us() + us;
  while (clock_us() < end) {
  }
}

/* The post-wait loop of a solver, one call at a time, with one rank (in turn) arriving 200 us
 * late: the ranks before it give, publish and wait in the schedule's steps; the late one runs the
 * whole call at its post (every peer published); reduce off its root and broadcast at it run
 * whole at the post wherever they are. Each call's result exact, on every rank. */
START_TEST(post_wait_late_ranks) {
  t_save_algo();
  t_set_algo("all_reduce:shm,reduce:shm,broadcast:shm");
  bool want_shm = shm_expected(t_size);
  int bad = 0, other = 0;
  for (int i = 0; i < 240; i++) {
    int64_t n = mix_len(i);
    tcoll_tensor_t x = t_host(TCOLL_FLOAT64, 1, &n), y = t_host(TCOLL_FLOAT64, 1, &n);
    double *xs = x.data, *ys = y.data;
    for (int64_t j = 0; j < n; j++) {
      xs[j] = mix_val(i, t_rank, j);
      ys[j] = -1.0;
    }
    if (t_rank == (i / 3) % t_size) spin_us(200);
    int rc = mix_op(i) == 0   ? tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y)
             : mix_op(i) == 1 ? tcoll_reduce(&x, mix_root(i), TCOLL_SUM, NULL, &y)
                              : tcoll_broadcast(&x, mix_root(i), NULL, &y);
    T_EXPECT(rc == TCOLL_SUCCESS, "late call %d: %s", i, tcoll_last_error());
    const char *got = tcoll_last_algorithm();
    if (!got || strcmp(got, want_shm ? "shm" : "mpi")) other++;
    T_OK(tcoll_wait(y.data));
    for (int64_t j = 0; j < n; j++) {
      double want = mix_want(i, j);
      if (ys[j] != want && bad++ < 5)
        T_EXPECT(false, "late call %d (op %d, root %d, rank %d late) element %lld: %g, expected %g",
                 i, mix_op(i), mix_root(i), (i / 3) % t_size, (long long)j, ys[j], want);
    }
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
  }
  T_EXPECT(other == 0, "%d late calls ran another algorithm than %s", other,
           want_shm ? "shm" : "mpi");
  T_EXPECT(bad == 0, "%d wrong elements in the late calls", bad);
  t_restore_algo();
}
END_TEST

/* Ranks that disagree on the size (an erroneous program: MPI reports truncation, or nothing):
 * the shm broadcast and all_reduce find it from the sizes published beside the words, refuse it
 * where they see it (TCOLL_ERR_MISMATCH naming both sizes) and stay usable. */
START_TEST(size_disagreement_found) {
  if (!shm_expected(t_size)) return;
  t_save_algo();
  t_set_algo("all_reduce:shm,broadcast:shm");
  for (int what = 0; what < 2; what++) {
    int64_t n = t_rank == 0 ? 64 : 16; /* a slot at the root, a slot elsewhere */
    tcoll_tensor_t x = t_host(TCOLL_FLOAT64, 1, &n), y = t_empty();
    /* found at the post where every peer published already, else at the wait */
    int rc = what ? tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y) : tcoll_broadcast(&x, 0, NULL, &y);
    if (rc == TCOLL_SUCCESS) rc = tcoll_wait(y.data);
    if (t_rank == 0 && what == 0)
      T_EXPECT(rc == TCOLL_SUCCESS, "the root's broadcast got %s", tcoll_status_string(rc));
    else
      T_EXPECT(rc == TCOLL_ERR_MISMATCH && t_contains(tcoll_last_error(), "bytes") &&
                   t_contains(tcoll_last_error(), "128") && t_contains(tcoll_last_error(), "512"),
               "%s of disagreeing sizes: %s: %s", what ? "all_reduce" : "broadcast",
               tcoll_status_string(rc), tcoll_last_error());
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
  }
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending after the refused calls",
           tcoll_pending_count());
  int64_t n = 5; /* the protocol goes on */
  tcoll_tensor_t x = t_host(TCOLL_FLOAT64, 1, &n), y = t_empty();
  double *xv = x.data;
  for (int i = 0; i < 5; i++) xv[i] = 1.0;
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_wait(y.data));
  T_EXPECT(t_get(&y, 4) == t_size, "all_reduce after them gave %g", t_get(&y, 4));
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  t_restore_algo();
}
END_TEST

START_TEST(many_in_flight_two_comms) {
  t_save_algo();
  t_set_algo("all_reduce:shm");
  tcoll_comm_t *other = NULL;
  /* world's ranks in reverse order */
  T_OK(tcoll_comm_split(NULL, 0, t_size - 1 - t_rank, &other));
  T_EXPECT(
      other && tcoll_comm_size(other) == t_size && tcoll_comm_rank(other) == t_size - 1 - t_rank,
      "split: size %d rank %d", tcoll_comm_size(other), tcoll_comm_rank(other));
  if (other) {
    in_flight(other, false);
    in_flight(other, true);
    T_OK(tcoll_comm_free(&other));
  }
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- segments freed */

/* Shared mappings of this process: lines of /proc/self/maps whose permissions end in 's'. */
static int shared_maps(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    const char *sp = strchr(line, ' ');
    if (sp && strlen(sp) > 4 && sp[4] == 's') n++;
    size_t len = strlen(line); /* the rest of an overlong line */
    while (len && line[len - 1] != '\n' && fgets(line, sizeof line, f)) len = strlen(line);
  }
  fclose(f);
  return n;
}

START_TEST(comm_churn_frees_segments) {
  t_save_algo();
  t_set_algo("all_reduce:shm");
  int before = shared_maps();
  T_EXPECT(before >= 0, "cannot read /proc/self/maps");
  int64_t shape[1] = {16};
  int me = t_rank, G = t_size;
  for (int it = 0; it < 40; it++) {
    tcoll_comm_t *c = NULL;
    T_OK(tcoll_comm_split(NULL, 0, t_rank, &c));
    if (!c) break;
    tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_alloc(TCOLL_FLOAT32, 1, shape);
    t_set_all(&in, sz_fill, &me);
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, c, &out));
    const char *got = tcoll_last_algorithm();
    T_OK(tcoll_wait(out.data));
    char what[80];
    snprintf(what, sizeof what, "comm churn %d", it);
    check_algo(what, got, forced_want(t_size, 64));
    t_check_all(what, &out, sz_want, &G, 0);
    tcoll_tensor_free(&out);
    tcoll_tensor_free(&in);
    T_OK(tcoll_comm_free(&c));
  }
  int after = shared_maps();
  T_EXPECT(after <= before + 2,
           "comm churn: %d shared mappings after 40 communicators, %d before (not freed with "
           "their communicator?)",
           after, before);
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- fallback */

/* Forced shm where it cannot run: the literal MPI call, same (exact) results, "mpi" at every
 * size. On world where segments are off or too small; on a communicator of one rank always. */
static void fallback_on(tcoll_comm_t *comm, const char *label) {
  int G = comm ? tcoll_comm_size(comm) : t_size;
  int ids[T_MAX_G];
  for (int q = 0; q < G; q++) ids[q] = comm ? t_rank : q; /* a singleton or world */
  const int64_t sizes[] = {1, 100, 4096, 65536};
  const tcoll_dtype_t dts[] = {TCOLL_FLOAT32, TCOLL_FLOAT64, TCOLL_INT32};
  for (size_t s = 0; s < T_LEN(sizes); s++)
    for (size_t d = 0; d < T_LEN(dts); d++) {
      int k = d == 2 ? K_MAX : K_SUM;
      rc_t c = rc_group(dts[d], k, 1, ids, G);
      int64_t shape[1] = {sizes[s]};
      char what[160];
      snprintf(what, sizeof what, "fallback (%s): all_reduce %s %s of %lld elements", label,
               kname(k), tcoll_dtype_name(dts[d]), (long long)sizes[s]);
      tcoll_tensor_t in = t_alloc(dts[d], 1, shape), out = t_empty();
      t_set_all(&in, rc_fill, &c);
      T_OK(tcoll_all_reduce(&in, (tcoll_redop_t)k, comm, &out));
      const char *got = tcoll_last_algorithm();
      T_OK(tcoll_wait(out.data));
      check_algo(what, got, "mpi");
      t_check_all(what, &out, rc_want, &c, 0);
      tcoll_tensor_free(&out);
      tcoll_tensor_free(&in);
    }
}

START_TEST(fallback_reports_mpi) {
  t_save_algo();
  t_set_algo("all_reduce:shm");
  if (!shm_expected(t_size)) fallback_on(NULL, "world");
  tcoll_comm_t *alone = NULL;
  T_OK(tcoll_comm_split(NULL, t_rank, 0, &alone));
  T_EXPECT(alone && tcoll_comm_size(alone) == 1, "a split by rank is not of one rank");
  if (alone) {
    fallback_on(alone, "one rank");
    T_OK(tcoll_comm_free(&alone));
  }
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- device tensors */

/* Forced shm on the suite's tensors: device tensors in the -dev runs, host ones otherwise. */
START_TEST(device_tensors) {
  t_save_algo();
  t_set_algo("all_reduce:shm");
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  const struct {
    tcoll_dtype_t d;
    int k;
    int64_t n;
  } cases[] = {{TCOLL_FLOAT32, K_SUM, 33},   {TCOLL_INT32, K_MAX, 7},
               {TCOLL_FLOAT64, K_AVG, 1000}, {TCOLL_FLOAT32, K_PREMUL, 129},
               {TCOLL_INT64, K_PROD, 3},     {TCOLL_BFLOAT16, K_SUM, 64},
               {TCOLL_FLOAT16, K_MIN, 300},  {TCOLL_UINT8, K_BXOR, 1}};
  for (size_t i = 0; i < T_LEN(cases); i++)
    for (int v = 0; v < 3; v++) { /* out of place, in place, allocating */
      rc_t c = rc_world(cases[i].d, cases[i].k, 0.5);
      int64_t shape[2] = {1, cases[i].n};
      char what[160];
      snprintf(what, sizeof what, "%s tensors: all_reduce %s %s of %lld elements (%s)",
               t_device() == TCOLL_HOST ? "host" : "device", kname(c.k), tcoll_dtype_name(c.d),
               (long long)cases[i].n,
               v == 0   ? "out of place"
               : v == 1 ? "in place"
                        : "allocating");
      tcoll_tensor_t in = t_alloc(c.d, 2, shape);
      T_EXPECT(in.device == t_device(), "%s: input on device %d", what, in.device);
      t_set_all(&in, rc_fill, &c);
      tcoll_tensor_t out = v == 0 ? t_alloc(c.d, 2, shape) : v == 1 ? in : t_empty();
      T_OK(tcoll_all_reduce(&in, kop(c.k, premul), NULL, &out));
      const char *got = tcoll_last_algorithm();
      T_OK(tcoll_wait(out.data));
      check_algo(what, got, forced_want(t_size, (size_t)cases[i].n * tcoll_dtype_size(c.d)));
      if (v == 2) t_expect_desc(what, &out, c.d, 2, shape, in.device);
      t_check_all(what, &out, rc_want, &c, 0);
      if (v != 1) tcoll_tensor_free(&out);
      tcoll_tensor_free(&in);
    }
  T_OK(tcoll_redop_destroy(premul));
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- tests that yield */

/* sched_yield, counted per thread (the library's calls resolve to this one): what a tcoll_test
 * loop gives up of the core. */
static __thread long yields;
int sched_yield(void) {
  static int (*real)(void);
  if (!real) real = (int (*)(void))dlsym(RTLD_NEXT, "sched_yield");
  yields++;
  return real ? real() : 0;
}

/* Whether this node's ranks outnumber its cores, as the library reads it (lib/base/cores.c), or
 * TCOLL_WAIT=yield asks every wait to give the core up. */
static bool node_crowded(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"};
  int local = t_size;
  for (size_t i = 0; i < T_LEN(vars); i++)
    if (getenv(vars[i]) && atoi(getenv(vars[i])) > local) local = atoi(getenv(vars[i]));
  cpu_set_t set;
  int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online > 0 && online < cores) cores = (int)online;
  if (cores == 1 && online > 1) cores = (int)online;
  const char *wait = getenv("TCOLL_WAIT");
  return local > cores || (wait && !strcmp(wait, "yield"));
}

/* A program that polls tcoll_test while rank 0 arrives 20 ms late: where ranks outnumber cores,
 * each test that finds the shm call in progress yields the core once (a loop of tests would
 * otherwise keep the late rank off it for a time slice per poll, as Open MPI's MPI_Test does not:
 * mpi_yield_when_idle); where every rank has a core, tests never yield (a system call per poll
 * for nothing). */
START_TEST(test_yields_when_crowded) {
  if (!shm_expected(t_size)) return;
  t_save_algo();
  t_set_algo("all_reduce:shm");
  bool crowded = node_crowded();
  for (int round = 0; round < 3; round++) {
    int64_t n = 4;
    tcoll_tensor_t x = t_host(TCOLL_FLOAT64, 1, &n), y = t_host(TCOLL_FLOAT64, 1, &n);
    for (int j = 0; j < n; j++) ((double *)x.data)[j] = t_rank + j;
    if (t_rank == 0) usleep(20000);
    T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
    T_EXPECT(is_shm(tcoll_last_algorithm()), "the call ran \"%s\"", tcoll_last_algorithm());
    long before = yields, in_progress = 0;
    int rc;
    while ((rc = tcoll_test(y.data)) == TCOLL_IN_PROGRESS) in_progress++;
    long yielded = yields - before;
    T_EXPECT(rc == TCOLL_SUCCESS, "tcoll_test: %s", tcoll_last_error());
    if (crowded)
      T_EXPECT(yielded >= in_progress,
               "round %d: %ld tests found the call in progress, %ld yields (a crowded node: one "
               "each expected)",
               round, in_progress, yielded);
    else
      T_EXPECT(yielded == 0,
               "round %d: %ld yields in %ld tests that found the call in progress (a core per "
               "rank: none expected)",
               round, yielded, in_progress);
    double want = t_size * (t_size - 1) / 2.0;
    T_EXPECT(((double *)y.data)[0] == want, "round %d: %g, expected %g", round,
             ((double *)y.data)[0], want);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
  }
  t_restore_algo();
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("shm");
  TCase *tc = t_tcase("shm");
  tcase_add_test(tc, rank_order_bits);
  tcase_add_test(tc, every_dtype_int);
  tcase_add_test(tc, sizes_cross_limit);
  tcase_add_test(tc, many_in_flight_two_comms);
  tcase_add_test(tc, comm_churn_frees_segments);
  tcase_add_test(tc, fallback_reports_mpi);
  tcase_add_test(tc, device_tensors);
  tcase_add_test(tc, reduce_broadcast_mixed);
  tcase_add_test(tc, post_wait_late_ranks);
  tcase_add_test(tc, size_disagreement_found);
  tcase_add_test(tc, test_yields_when_crowded);
  suite_add_tcase(s, tc);
  return s;
}
