#include "harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int t_rank = -1, t_size = 0;
static int failures;
static int reported;

bool t_contains(const char *haystack, const char *needle) {
  return haystack && strstr(haystack, needle) != NULL;
}
int t_local_failures(void) { return failures; }

void t_fail_at(const char *file, int line, const char *fmt, ...) {
  __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED); /* tests may fail from several threads */
  if (__atomic_add_fetch(&reported, 1, __ATOMIC_RELAXED) > 25) return; /* enough to diagnose */
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[rank %d/%d] %s:%d: %s\n", t_rank, t_size, file, line, msg);
  fflush(stderr);
}

void t_setup(void) {
  failures = 0;
  reported = 0;
}

void t_teardown(void) {
  /* Nothing may stay pending from one test to the next. */
  size_t pending = tcoll_pending_count();
  T_EXPECT(pending == 0, "%zu buffers still pending at the end of the test", pending);
  tcoll_wait_all();
  int local = failures, global = 0, first_bad = -1, bad_rank = local ? t_rank : t_size;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&bad_rank, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  ck_assert_msg(global == 0,
                "%d failed expectation(s) over %d ranks (first on rank %d; see stderr)", global,
                t_size, first_bad);
}

TCase *t_tcase(const char *name) {
  TCase *tc = tcase_create(name);
  tcase_add_checked_fixture(tc, t_setup, t_teardown);
  tcase_set_timeout(tc, 0);
  return tc;
}

int t_device(void) {
  const char *d = getenv("T_DEVICE");
  return d && atoi(d) && tcoll_device_count() > 0 ? 0 : TCOLL_HOST;
}

tcoll_tensor_t t_empty(void) {
  tcoll_tensor_t t;
  memset(&t, 0, sizeof t);
  t.device = TCOLL_HOST;
  return t;
}

static tcoll_tensor_t alloc_on(tcoll_dtype_t dt, int ndim, const int64_t *shape, int device) {
  tcoll_tensor_t t = t_empty();
  int rc = tcoll_tensor_alloc(&t, dt, ndim, shape, device);
  T_EXPECT(rc == TCOLL_SUCCESS, "tcoll_tensor_alloc: %s", tcoll_last_error());
  return t;
}

tcoll_tensor_t t_host(tcoll_dtype_t dt, int ndim, const int64_t *shape) {
  return alloc_on(dt, ndim, shape, TCOLL_HOST);
}
tcoll_tensor_t t_alloc(tcoll_dtype_t dt, int ndim, const int64_t *shape) {
  return alloc_on(dt, ndim, shape, t_device());
}

/* Host mirror of t (t itself when on the host). */
static tcoll_tensor_t mirror(const tcoll_tensor_t *t) {
  if (t->device == TCOLL_HOST) return *t;
  tcoll_tensor_t h = alloc_on(t->dtype, t->ndim, t->shape, TCOLL_HOST);
  T_OK(tcoll_tensor_copy(&h, t));
  return h;
}

static void store(void *buf, tcoll_dtype_t d, int64_t i, double v);
static double load(const void *buf, tcoll_dtype_t d, int64_t i);

void t_set_all(tcoll_tensor_t *t, double (*f)(int64_t i, void *ctx), void *ctx) {
  tcoll_tensor_t h =
      t->device == TCOLL_HOST ? *t : alloc_on(t->dtype, t->ndim, t->shape, TCOLL_HOST);
  int64_t n = tcoll_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) store(h.data, t->dtype, i, f(i, ctx));
  if (t->device != TCOLL_HOST) {
    T_OK(tcoll_tensor_copy(t, &h));
    tcoll_tensor_free(&h);
  }
}

void t_read(const tcoll_tensor_t *t, double *vals) {
  tcoll_tensor_t h = mirror(t);
  int64_t n = tcoll_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) vals[i] = load(h.data, t->dtype, i);
  if (h.data != t->data) tcoll_tensor_free(&h);
}

double t_get(const tcoll_tensor_t *t, int64_t i) {
  tcoll_tensor_t h = mirror(t);
  double v = load(h.data, t->dtype, i);
  if (h.data != t->data) tcoll_tensor_free(&h);
  return v;
}

int t_check_all(const char *what, const tcoll_tensor_t *t, double (*f)(int64_t i, void *ctx),
                void *ctx, double tol) {
  tcoll_tensor_t h = mirror(t);
  int64_t n = tcoll_tensor_numel(t);
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double got = load(h.data, t->dtype, i), want = f(i, ctx);
    bool ok = tol > 0 ? fabs(got - want) <= tol * fmax(1.0, fabs(want)) : got == want;
    if (!ok && bad++ < 3)
      t_fail_at(__FILE__, __LINE__, "%s (%s): element %lld is %.17g, expected %.17g", what,
                tcoll_dtype_name(t->dtype), (long long)i, got, want);
  }
  if (bad > 3) t_fail_at(__FILE__, __LINE__, "%s: %d elements differ in all", what, bad);
  if (h.data != t->data) tcoll_tensor_free(&h);
  return bad;
}

/* Independent of the library's own conversions, so the tests check them too. */
static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
  return (float)((h & 0x8000) ? -v : v);
}

static uint16_t float_to_half_exact(double v) {
  /* Tests only store values exactly representable in float16, NaN and infinities. */
  if (isnan(v)) return 0x7e00;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  if (isinf(v)) return sign | 0x7c00;
  v = fabs(v);
  if (v == 0) return sign;
  int e;
  double m = frexp(v, &e); /* v = m * 2^e, m in [0.5, 1) */
  if (e - 1 < -14) return sign | (uint16_t)lround(ldexp(v, 24));
  return sign | (uint16_t)(((e - 1 + 15) << 10) | (lround(ldexp(m, 11)) - 1024));
}

static float bf16_to_float(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t float_to_bf16_exact(double v) {
  float f = (float)v;
  uint32_t x;
  memcpy(&x, &f, 4);
  return (uint16_t)(x >> 16);
}

static void store(void *buf, tcoll_dtype_t d, int64_t i, double v) {
  switch (d) {
  case TCOLL_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
  case TCOLL_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case TCOLL_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case TCOLL_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
  case TCOLL_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case TCOLL_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case TCOLL_FLOAT16: ((uint16_t *)buf)[i] = float_to_half_exact(v); break;
  case TCOLL_BFLOAT16: ((uint16_t *)buf)[i] = float_to_bf16_exact(v); break;
  case TCOLL_FLOAT32: ((float *)buf)[i] = (float)v; break;
  case TCOLL_FLOAT64: ((double *)buf)[i] = v; break;
  }
}

static double load(const void *buf, tcoll_dtype_t d, int64_t i) {
  switch (d) {
  case TCOLL_BOOL: return ((const uint8_t *)buf)[i];
  case TCOLL_INT8: return ((const int8_t *)buf)[i];
  case TCOLL_UINT8: return ((const uint8_t *)buf)[i];
  case TCOLL_INT16: return ((const int16_t *)buf)[i];
  case TCOLL_INT32: return ((const int32_t *)buf)[i];
  case TCOLL_INT64: return (double)((const int64_t *)buf)[i];
  case TCOLL_FLOAT16: return half_to_float(((const uint16_t *)buf)[i]);
  case TCOLL_BFLOAT16: return bf16_to_float(((const uint16_t *)buf)[i]);
  case TCOLL_FLOAT32: return ((const float *)buf)[i];
  case TCOLL_FLOAT64: return ((const double *)buf)[i];
  }
  return NAN;
}

void t_heap_report(const char *suite) {
  if (t_heap_measurable()) return;
  const char *checker = t_heap_checker();
  T_EXPECT(
      checker != NULL,
      "%s: the heap counter (test/heap_count.c) does not see this thread's allocations, so the "
      "heap checks could not fail",
      suite);
  if (checker && t_rank == 0) printf("%s: heap checks skipped: %s\n", suite, checker);
}

/* ---------------------------------------------------------------- a collective left pending */

void t_pending_ring(t_pending_t *pr, tcoll_comm_t *comm) {
  T_OK(tcoll_get_config(&pr->old));
  tcoll_config_t cfg = pr->old;
  snprintf(cfg.algo, sizeof cfg.algo, "reduce_scatter:ring");
  T_OK(tcoll_set_config(&cfg));
  int64_t shape[1] = {3000 * (int64_t)tcoll_comm_size(comm)};
  pr->x = t_host(TCOLL_FLOAT32, 1, shape);
  pr->y = t_empty();
  for (int64_t i = 0; i < shape[0]; i++) ((float *)pr->x.data)[i] = (float)(i % 7);
  T_OK(tcoll_reduce_scatter(&pr->x, TCOLL_SUM, 0, comm, &pr->y));
  if (t_rank != 0) T_OK(tcoll_wait(pr->y.data));
}

void t_pending_ring_done(t_pending_t *pr, const char *what) {
  if (t_rank == 0) T_OK(tcoll_wait(pr->y.data));
  int size = (int)(tcoll_tensor_numel(&pr->x) / 3000), rank = t_rank;
  for (int64_t i = 0; i < 3000 && pr->y.data; i++)
    T_EXPECT(((float *)pr->y.data)[i] == (float)(((int64_t)rank * 3000 + i) % 7 * size),
             "%s: the pending reduce_scatter's element %lld is %g", what, (long long)i,
             ((float *)pr->y.data)[i]);
  tcoll_tensor_free(&pr->x);
  tcoll_tensor_free(&pr->y);
  T_OK(tcoll_set_config(&pr->old));
}

/* ---------------------------------------------------------------- stderr */

t_capture_t t_capture_begin(void) {
  fflush(stderr);
  t_capture_t c = {dup(2), tmpfile()};
  T_EXPECT(c.saved >= 0 && c.file, "cannot redirect stderr");
  if (c.saved >= 0 && c.file) dup2(fileno(c.file), 2);
  return c;
}

void t_capture_end(t_capture_t *c, char *buf, size_t len) {
  fflush(stderr);
  if (c->saved >= 0) {
    dup2(c->saved, 2);
    close(c->saved);
  }
  buf[0] = '\0';
  if (!c->file) return;
  rewind(c->file);
  size_t n = fread(buf, 1, len - 1, c->file);
  buf[n] = '\0';
  fclose(c->file);
}

const char *t_capture_stderr(void (*fn)(void *), void *arg) {
  static char text[16384];
  t_capture_t c = t_capture_begin();
  fn(arg);
  t_capture_end(&c, text, sizeof text);
  fputs(text, stderr); /* keep it in the test log */
  return text;
}

/* ---------------------------------------------------------------- programs with their own main */

int t_verdict(const char *name) {
  int local = t_local_failures(), total = 0;
  MPI_Allreduce(&local, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (t_rank == 0) printf("%s at %d rank(s): %s\n", name, t_size, total ? "FAILED" : "passed");
  return total ? 1 : 0;
}
