/* Core: status strings, the per-thread last error, version, dtypes, reduce ops and premul_sum
 * handles, tensors (make, numel, nbytes, alloc, copy), the shape rules and the configuration. */
#include "harness.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifndef T_MESON_VERSION
#error "T_MESON_VERSION must come from meson (the project version)"
#endif

START_TEST(status_strings) {
  static const struct {
    int status;
    const char *name;
  } known[] = {
      {TCOLL_SUCCESS, "TCOLL_SUCCESS"},
      {TCOLL_IN_PROGRESS, "TCOLL_IN_PROGRESS"},
      {TCOLL_ERR_INVALID_ARGUMENT, "TCOLL_ERR_INVALID_ARGUMENT"},
      {TCOLL_ERR_BUSY, "TCOLL_ERR_BUSY"},
      {TCOLL_ERR_NO_MEMORY, "TCOLL_ERR_NO_MEMORY"},
      {TCOLL_ERR_MPI, "TCOLL_ERR_MPI"},
      {TCOLL_ERR_CUDA, "TCOLL_ERR_CUDA"},
      {TCOLL_ERR_UNSUPPORTED, "TCOLL_ERR_UNSUPPORTED"},
      {TCOLL_ERR_MISMATCH, "TCOLL_ERR_MISMATCH"},
      {TCOLL_ERR_TIMEOUT, "TCOLL_ERR_TIMEOUT"},
      {TCOLL_ERR_STATE, "TCOLL_ERR_STATE"},
      {TCOLL_ERR_INTERNAL, "TCOLL_ERR_INTERNAL"},
  };
  /* The values are part of the contract. */
  T_EXPECT(TCOLL_SUCCESS == 0 && TCOLL_IN_PROGRESS == 1 && TCOLL_ERR_INVALID_ARGUMENT == -1 &&
               TCOLL_ERR_BUSY == -2 && TCOLL_ERR_NO_MEMORY == -3 && TCOLL_ERR_MPI == -4 &&
               TCOLL_ERR_CUDA == -5 && TCOLL_ERR_UNSUPPORTED == -6 && TCOLL_ERR_MISMATCH == -7 &&
               TCOLL_ERR_TIMEOUT == -8 && TCOLL_ERR_STATE == -9 && TCOLL_ERR_INTERNAL == -10,
           "status values differ from the contract");
  for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
    const char *s = tcoll_status_string(known[i].status);
    T_EXPECT(s && !strcmp(s, known[i].name), "tcoll_status_string(%d) is \"%s\", expected \"%s\"",
             known[i].status, s ? s : "(null)", known[i].name);
  }
  const int unknown[] = {2, 3, -11, -100, 42, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
    const char *s = tcoll_status_string(unknown[i]);
    T_EXPECT(s != NULL && s[0] != '\0', "tcoll_status_string(%d) is NULL or empty", unknown[i]);
    for (size_t k = 0; s && k < sizeof known / sizeof *known; k++)
      T_EXPECT(strcmp(s, known[k].name) != 0, "unknown status %d reads as %s", unknown[i], s);
  }
}
END_TEST

/* ---- the last error is per thread ---- */

typedef struct {
  char before[256];
  char after[256];
  int rc;
} thread_result_t;

static void *other_thread(void *arg) {
  thread_result_t *r = arg;
  snprintf(r->before, sizeof r->before, "%s", tcoll_last_error());
  tcoll_redop_t op;
  r->rc = tcoll_redop_from_string("bar", &op);
  snprintf(r->after, sizeof r->after, "%s", tcoll_last_error());
  return NULL;
}

START_TEST(last_error_per_thread) {
  tcoll_redop_t op;
  T_FAILS(tcoll_redop_from_string("foo", &op), TCOLL_ERR_INVALID_ARGUMENT,
          "Unrecognized reduce_op: foo");
  /* Messages say where they come from. */
  T_EXPECT(!strncmp(tcoll_last_error(), "tcoll_redop_from_string: ", 25),
           "last error \"%s\" does not name the function", tcoll_last_error());
  thread_result_t r;
  memset(&r, 0, sizeof r);
  pthread_t th;
  T_EXPECT(pthread_create(&th, NULL, other_thread, &r) == 0, "pthread_create");
  pthread_join(th, NULL);
  T_EXPECT(!strcmp(r.before, ""), "a new thread sees another thread's error: \"%s\"", r.before);
  T_EXPECT(r.rc == TCOLL_ERR_INVALID_ARGUMENT && t_contains(r.after, "Unrecognized reduce_op: bar"),
           "the thread's own error: %d \"%s\"", r.rc, r.after);
  T_EXPECT(t_contains(tcoll_last_error(), "Unrecognized reduce_op: foo") &&
               !t_contains(tcoll_last_error(), "bar"),
           "the thread's error replaced this thread's: \"%s\"", tcoll_last_error());
  /* A success leaves the last failure in place. */
  T_OK(tcoll_redop_from_string("sum", &op));
  T_EXPECT(t_contains(tcoll_last_error(), "foo"), "a successful call cleared the last error");
}
END_TEST

START_TEST(version) {
  int v = tcoll_version();
  T_EXPECT(v == TCOLL_VERSION_CODE(TCOLL_VERSION_MAJOR, TCOLL_VERSION_MINOR, TCOLL_VERSION_PATCH),
           "tcoll_version() is %d, the header says %d.%d.%d", v, TCOLL_VERSION_MAJOR,
           TCOLL_VERSION_MINOR, TCOLL_VERSION_PATCH);
  T_EXPECT(v == TCOLL_VERSION_MAJOR * 10000 + TCOLL_VERSION_MINOR * 100 + TCOLL_VERSION_PATCH,
           "version code formula");
  int ma = -1, mi = -1, pa = -1, used = 0;
  int got = sscanf(T_MESON_VERSION, "%d.%d.%d%n", &ma, &mi, &pa, &used);
  T_EXPECT(got == 3, "meson's project version \"%s\" is not MAJOR.MINOR.PATCH", T_MESON_VERSION);
  T_EXPECT(ma == TCOLL_VERSION_MAJOR && mi == TCOLL_VERSION_MINOR && pa == TCOLL_VERSION_PATCH,
           "meson's project version %s differs from the header's %d.%d.%d", T_MESON_VERSION,
           TCOLL_VERSION_MAJOR, TCOLL_VERSION_MINOR, TCOLL_VERSION_PATCH);
  T_EXPECT(v == TCOLL_VERSION_CODE(ma, mi, pa), "tcoll_version() %d differs from meson's %s", v,
           T_MESON_VERSION);
  const char *suffix = tcoll_version_suffix();
  T_EXPECT(suffix != NULL, "tcoll_version_suffix() is NULL");
  if (suffix) {
    T_EXPECT(suffix[0] == '\0' || suffix[0] == '-', "suffix \"%s\" is neither \"\" nor \"-...\"",
             suffix);
    /* Whatever meson's version has after MAJOR.MINOR.PATCH ("" for a release) is the suffix. */
    T_EXPECT(!strcmp(suffix, T_MESON_VERSION + used), "suffix \"%s\", meson's version \"%s\"",
             suffix, T_MESON_VERSION);
    T_EXPECT(tcoll_version_suffix() == suffix, "the suffix is not static storage");
  }
}
END_TEST

START_TEST(dtypes) {
  static const struct {
    tcoll_dtype_t d;
    size_t size;
    const char *name;
  } all[] = {
      {TCOLL_BOOL, 1, "bool"},       {TCOLL_INT8, 1, "int8"},         {TCOLL_UINT8, 1, "uint8"},
      {TCOLL_INT16, 2, "int16"},     {TCOLL_INT32, 4, "int32"},       {TCOLL_INT64, 8, "int64"},
      {TCOLL_FLOAT16, 2, "float16"}, {TCOLL_BFLOAT16, 2, "bfloat16"}, {TCOLL_FLOAT32, 4, "float32"},
      {TCOLL_FLOAT64, 8, "float64"},
  };
  T_EXPECT(sizeof all / sizeof *all == TCOLL_NUM_DTYPES, "TCOLL_NUM_DTYPES is %d",
           TCOLL_NUM_DTYPES);
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
    T_EXPECT((int)all[i].d == (int)i, "dtype %s has value %d", all[i].name, (int)all[i].d);
    T_EXPECT(tcoll_dtype_size(all[i].d) == all[i].size, "size of %s is %zu", all[i].name,
             tcoll_dtype_size(all[i].d));
    T_EXPECT(!strcmp(tcoll_dtype_name(all[i].d), all[i].name), "name of %d is %s", (int)all[i].d,
             tcoll_dtype_name(all[i].d));
  }
  const int bad[] = {-1, TCOLL_NUM_DTYPES, 11, 1000, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    T_EXPECT(tcoll_dtype_size((tcoll_dtype_t)bad[i]) == 0, "size of invalid dtype %d is %zu",
             bad[i], tcoll_dtype_size((tcoll_dtype_t)bad[i]));
    const char *n = tcoll_dtype_name((tcoll_dtype_t)bad[i]);
    T_EXPECT(n && !strcmp(n, "invalid"), "name of invalid dtype %d is %s", bad[i],
             n ? n : "(null)");
  }
}
END_TEST

START_TEST(redop_names) {
  static const char *names[TCOLL_NUM_BUILTIN_REDOPS] = {"sum", "avg",  "product", "min",
                                                        "max", "band", "bor",     "bxor"};
  static const int values[TCOLL_NUM_BUILTIN_REDOPS] = {
      TCOLL_SUM, TCOLL_AVG, TCOLL_PRODUCT, TCOLL_MIN, TCOLL_MAX, TCOLL_BAND, TCOLL_BOR, TCOLL_BXOR};
  for (int i = 0; i < TCOLL_NUM_BUILTIN_REDOPS; i++) {
    char upper[16], mixed[16];
    size_t n = strlen(names[i]);
    for (size_t k = 0; k <= n; k++) {
      upper[k] = (char)(names[i][k] >= 'a' && names[i][k] <= 'z' ? names[i][k] - 32 : names[i][k]);
      mixed[k] = k % 2 ? upper[k] : names[i][k];
    }
    const char *forms[3] = {names[i], upper, mixed};
    for (int f = 0; f < 3; f++) {
      tcoll_redop_t op = -12345;
      T_OK(tcoll_redop_from_string(forms[f], &op));
      T_EXPECT(op == values[i], "\"%s\" gave %d, expected %d", forms[f], op, values[i]);
    }
    T_EXPECT(values[i] == i, "built-in op %s has value %d", names[i], values[i]);
    T_EXPECT(!strcmp(tcoll_redop_name(values[i]), names[i]), "tcoll_redop_name(%d) is %s",
             values[i], tcoll_redop_name(values[i]));
  }
  tcoll_redop_t op = -12345;
  T_FAILS(tcoll_redop_from_string("foo", &op), TCOLL_ERR_INVALID_ARGUMENT,
          "Unrecognized reduce_op: foo");
  T_FAILS(tcoll_redop_from_string("", &op), TCOLL_ERR_INVALID_ARGUMENT, "Unrecognized reduce_op: ");
  T_FAILS(tcoll_redop_from_string("sum ", &op), TCOLL_ERR_INVALID_ARGUMENT,
          "Unrecognized reduce_op: sum ");
  T_FAILS(tcoll_redop_from_string("summ", &op), TCOLL_ERR_INVALID_ARGUMENT,
          "Unrecognized reduce_op: summ");
  T_FAILS(tcoll_redop_from_string("premul_sum", &op), TCOLL_ERR_INVALID_ARGUMENT,
          "Unrecognized reduce_op: premul_sum");
  T_FAILS(tcoll_redop_from_string("unused", &op), TCOLL_ERR_INVALID_ARGUMENT,
          "Unrecognized reduce_op: unused");
  T_EXPECT(op == -12345, "a refused name changed *op to %d", op);
  T_FAILS(tcoll_redop_from_string(NULL, &op), TCOLL_ERR_INVALID_ARGUMENT, "name is NULL");
  T_FAILS(tcoll_redop_from_string("sum", NULL), TCOLL_ERR_INVALID_ARGUMENT, "op is NULL");
  T_EXPECT(!strcmp(tcoll_redop_name(-1), "invalid") &&
               !strcmp(tcoll_redop_name(TCOLL_NUM_BUILTIN_REDOPS), "invalid"),
           "names of invalid ops");
}
END_TEST

static double ones_times_rank(int64_t i, void *ctx) {
  (void)ctx;
  return (double)(t_rank + 1) * (double)(i + 1);
}

START_TEST(premul_sum) {
  tcoll_redop_t a = -1, b = -1;
  T_OK(tcoll_redop_create_premul_sum(2.5, &a));
  T_OK(tcoll_redop_create_premul_sum(0.0, &b)); /* finite: allowed */
  T_EXPECT(a >= TCOLL_NUM_BUILTIN_REDOPS || a < 0, "premul handle %d collides with a built-in op",
           a);
  T_EXPECT(a != b, "two handles are equal (%d)", a);
  T_EXPECT(!strcmp(tcoll_redop_name(a), "premul_sum"), "tcoll_redop_name(premul) is %s",
           tcoll_redop_name(a));
  /* sum over ranks of 2.5 * (r + 1) * (i + 1) = 2.5 * size(size+1)/2 * (i + 1); exact in float32.
   */
  int64_t shape[1] = {6};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_empty();
  t_set_all(&in, ones_times_rank, NULL);
  T_OK(tcoll_all_reduce(&in, a, NULL, &out));
  /* Work already posted is not affected by destroying its handle. */
  T_OK(tcoll_redop_destroy(a));
  T_OK(tcoll_wait(out.data));
  double vals[6];
  t_read(&out, vals);
  for (int i = 0; i < 6; i++)
    T_EXPECT(vals[i] == 2.5 * t_size * (t_size + 1) / 2 * (i + 1), "premul_sum element %d is %g", i,
             vals[i]);
  /* A destroyed handle is stale: rejected everywhere. */
  T_EXPECT(!strcmp(tcoll_redop_name(a), "invalid"), "a destroyed handle is named %s",
           tcoll_redop_name(a));
  T_FAILS(tcoll_redop_destroy(a), TCOLL_ERR_INVALID_ARGUMENT, "live premul_sum handle");
  tcoll_tensor_t out2 = t_empty();
  T_FAILS(tcoll_all_reduce(&in, a, NULL, &out2), TCOLL_ERR_INVALID_ARGUMENT, "op is");
  T_EXPECT(out2.data == NULL, "a refused call allocated its output");
  /* A new handle never reuses a stale one. */
  tcoll_redop_t c = -1;
  T_OK(tcoll_redop_create_premul_sum(1.0, &c));
  T_EXPECT(c != a && c != b, "handle %d was reused", c);
  /* Built-ins cannot be destroyed; non-finite scalars are refused. */
  for (int op = 0; op < TCOLL_NUM_BUILTIN_REDOPS; op++)
    T_FAILS(tcoll_redop_destroy(op), TCOLL_ERR_INVALID_ARGUMENT, "built-in");
  T_FAILS(tcoll_redop_destroy(-7), TCOLL_ERR_INVALID_ARGUMENT, "op is -7");
  tcoll_redop_t d = -99;
  T_FAILS(tcoll_redop_create_premul_sum(NAN, &d), TCOLL_ERR_INVALID_ARGUMENT, "finite");
  T_FAILS(tcoll_redop_create_premul_sum(INFINITY, &d), TCOLL_ERR_INVALID_ARGUMENT, "finite");
  T_FAILS(tcoll_redop_create_premul_sum(-INFINITY, &d), TCOLL_ERR_INVALID_ARGUMENT, "finite");
  T_EXPECT(d == -99, "a refused create changed *op");
  T_FAILS(tcoll_redop_create_premul_sum(1.0, NULL), TCOLL_ERR_INVALID_ARGUMENT, "op is NULL");
  T_OK(tcoll_redop_destroy(b));
  T_OK(tcoll_redop_destroy(c));
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}
END_TEST

START_TEST(tensor_descriptors) {
  float buf[24];
  int64_t shape[3] = {2, 3, 4};
  tcoll_tensor_t t = tcoll_tensor_make(buf, TCOLL_FLOAT32, 3, shape, TCOLL_HOST);
  T_EXPECT(t.data == buf && t.dtype == TCOLL_FLOAT32 && t.ndim == 3 && t.device == TCOLL_HOST,
           "make: fields");
  T_EXPECT(t.shape[0] == 2 && t.shape[1] == 3 && t.shape[2] == 4, "make: shape");
  for (int i = 3; i < TCOLL_MAX_DIMS; i++)
    T_EXPECT(t.shape[i] == 0, "make: shape[%d] is %lld", i, (long long)t.shape[i]);
  T_EXPECT(tcoll_tensor_numel(&t) == 24 && tcoll_tensor_nbytes(&t) == 96, "numel %lld nbytes %zu",
           (long long)tcoll_tensor_numel(&t), tcoll_tensor_nbytes(&t));
  /* Scalars, empty tensors, every dtype's size. */
  tcoll_tensor_t s = tcoll_tensor_make(buf, TCOLL_FLOAT64, 0, NULL, TCOLL_HOST);
  T_EXPECT(tcoll_tensor_numel(&s) == 1 && tcoll_tensor_nbytes(&s) == 8,
           "scalar: numel %lld nbytes %zu", (long long)tcoll_tensor_numel(&s),
           tcoll_tensor_nbytes(&s));
  int64_t empty[2] = {5, 0};
  tcoll_tensor_t e = tcoll_tensor_make(NULL, TCOLL_INT32, 2, empty, TCOLL_HOST);
  T_EXPECT(tcoll_tensor_numel(&e) == 0 && tcoll_tensor_nbytes(&e) == 0, "empty: numel %lld",
           (long long)tcoll_tensor_numel(&e));
  for (int d = 0; d < TCOLL_NUM_DTYPES; d++) {
    tcoll_tensor_t x = tcoll_tensor_make(NULL, (tcoll_dtype_t)d, 3, shape, TCOLL_HOST);
    T_EXPECT(tcoll_tensor_nbytes(&x) == 24 * tcoll_dtype_size((tcoll_dtype_t)d), "nbytes of %s",
             tcoll_dtype_name((tcoll_dtype_t)d));
  }
  /* Invalid descriptors: 0, never a crash. */
  T_EXPECT(tcoll_tensor_numel(NULL) == 0 && tcoll_tensor_nbytes(NULL) == 0, "NULL tensor");
  tcoll_tensor_t bad = tcoll_tensor_make(NULL, (tcoll_dtype_t)99, 1, shape, TCOLL_HOST);
  T_EXPECT(tcoll_tensor_nbytes(&bad) == 0, "nbytes with an invalid dtype");
  /* make copies at most TCOLL_MAX_DIMS entries of shape. */
  int64_t long_shape[TCOLL_MAX_DIMS + 4];
  for (int i = 0; i < TCOLL_MAX_DIMS + 4; i++) long_shape[i] = 1;
  tcoll_tensor_t big =
      tcoll_tensor_make(NULL, TCOLL_INT8, TCOLL_MAX_DIMS + 4, long_shape, TCOLL_HOST);
  T_EXPECT(big.ndim == TCOLL_MAX_DIMS + 4, "make keeps ndim as given");
  T_EXPECT(tcoll_tensor_numel(&big) == 0, "numel of a tensor with too many dims is %lld",
           (long long)tcoll_tensor_numel(&big));
  int64_t neg[2] = {3, -2};
  tcoll_tensor_t n = tcoll_tensor_make(NULL, TCOLL_INT8, 2, neg, TCOLL_HOST);
  T_EXPECT(tcoll_tensor_numel(&n) == 0, "numel with a negative dim is %lld",
           (long long)tcoll_tensor_numel(&n));
  int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 4};
  tcoll_tensor_t h = tcoll_tensor_make(NULL, TCOLL_INT8, 3, huge, TCOLL_HOST);
  T_EXPECT(tcoll_tensor_numel(&h) == 0, "numel that overflows is %lld",
           (long long)tcoll_tensor_numel(&h));
}
END_TEST

START_TEST(tensor_alloc) {
  /* Zero-filled, also where the allocator hands back memory that held other data (meson sets
   * MALLOC_PERTURB_ too). */
  int64_t shape[2] = {64, 33};
  for (int round = 0; round < 3; round++) {
    tcoll_tensor_t t = t_empty();
    T_OK(tcoll_tensor_alloc(&t, TCOLL_FLOAT64, 2, shape, TCOLL_HOST));
    T_EXPECT(t.data && t.dtype == TCOLL_FLOAT64 && t.ndim == 2 && t.shape[0] == 64 &&
                 t.shape[1] == 33 && t.device == TCOLL_HOST,
             "alloc: descriptor");
    const unsigned char *b = t.data;
    size_t nonzero = 0;
    for (size_t i = 0; b && i < tcoll_tensor_nbytes(&t); i++) nonzero += b[i] != 0;
    T_EXPECT(nonzero == 0, "round %d: %zu bytes are not zero", round, nonzero);
    memset(t.data, 0xa5, tcoll_tensor_nbytes(&t));
    tcoll_tensor_free(&t);
    T_EXPECT(t.data == NULL, "free did not NULL data");
    tcoll_tensor_free(&t); /* data NULL: nothing to do */
  }
  tcoll_tensor_free(NULL);
  /* On a device (the emulated ones when the suite runs with them). */
  for (int dev = 0; dev < tcoll_device_count() && dev < 2; dev++) {
    tcoll_tensor_t t = t_empty(), h = t_host(TCOLL_INT16, 2, shape);
    T_OK(tcoll_tensor_alloc(&t, TCOLL_INT16, 2, shape, dev));
    T_EXPECT(t.device == dev, "alloc on device %d gave device %d", dev, t.device);
    memset(h.data, 0x5a, tcoll_tensor_nbytes(&h));
    T_OK(tcoll_tensor_copy(&h, &t));
    size_t nonzero = 0;
    for (size_t i = 0; i < tcoll_tensor_nbytes(&h); i++)
      nonzero += ((unsigned char *)h.data)[i] != 0;
    T_EXPECT(nonzero == 0, "device %d: %zu bytes are not zero", dev, nonzero);
    tcoll_tensor_free(&t);
    tcoll_tensor_free(&h);
  }
  /* Scalars and empty tensors get storage too. */
  tcoll_tensor_t s = t_empty(), e = t_empty();
  T_OK(tcoll_tensor_alloc(&s, TCOLL_INT64, 0, NULL, TCOLL_HOST));
  T_EXPECT(s.data && *(int64_t *)s.data == 0 && s.ndim == 0, "scalar alloc");
  int64_t zero[1] = {0};
  T_OK(tcoll_tensor_alloc(&e, TCOLL_INT64, 1, zero, TCOLL_HOST));
  tcoll_tensor_free(&s);
  tcoll_tensor_free(&e);
  /* Refusals leave *t alone. */
  tcoll_tensor_t t = t_empty();
  int64_t negs[2] = {4, -1};
  T_FAILS(tcoll_tensor_alloc(NULL, TCOLL_INT8, 1, shape, TCOLL_HOST), TCOLL_ERR_INVALID_ARGUMENT,
          "t is NULL");
  T_FAILS(tcoll_tensor_alloc(&t, (tcoll_dtype_t)10, 1, shape, TCOLL_HOST),
          TCOLL_ERR_INVALID_ARGUMENT, "dtype is 10");
  T_FAILS(tcoll_tensor_alloc(&t, (tcoll_dtype_t)-1, 1, shape, TCOLL_HOST),
          TCOLL_ERR_INVALID_ARGUMENT, "dtype is -1");
  T_FAILS(tcoll_tensor_alloc(&t, TCOLL_INT8, -1, shape, TCOLL_HOST), TCOLL_ERR_INVALID_ARGUMENT,
          "ndim is -1");
  T_FAILS(tcoll_tensor_alloc(&t, TCOLL_INT8, TCOLL_MAX_DIMS + 1, shape, TCOLL_HOST),
          TCOLL_ERR_INVALID_ARGUMENT, "ndim is 9");
  T_FAILS(tcoll_tensor_alloc(&t, TCOLL_INT8, 2, NULL, TCOLL_HOST), TCOLL_ERR_INVALID_ARGUMENT,
          "shape is NULL");
  T_FAILS(tcoll_tensor_alloc(&t, TCOLL_INT8, 2, negs, TCOLL_HOST), TCOLL_ERR_INVALID_ARGUMENT,
          "shape[1] is -1");
  int ndev = tcoll_device_count();
  char needle[64];
  snprintf(needle, sizeof needle, "device is %d", ndev);
  T_FAILS(tcoll_tensor_alloc(&t, TCOLL_INT8, 1, shape, ndev), TCOLL_ERR_INVALID_ARGUMENT, needle);
  T_FAILS(tcoll_tensor_alloc(&t, TCOLL_INT8, 1, shape, -2), TCOLL_ERR_INVALID_ARGUMENT,
          "device is -2");
  int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 1 << 20};
  T_FAILS(tcoll_tensor_alloc(&t, TCOLL_INT8, 3, huge, TCOLL_HOST), TCOLL_ERR_INVALID_ARGUMENT,
          "2^63");
  T_EXPECT(t.data == NULL && t.ndim == 0, "a refused alloc changed *t");
}
END_TEST

static double idx(int64_t i, void *ctx) {
  (void)ctx;
  return (double)(i * 3 - 7);
}

START_TEST(tensor_copy) {
  int64_t s23[2] = {2, 3}, s6[1] = {6}, s5[1] = {5};
  tcoll_tensor_t a = t_host(TCOLL_INT32, 2, s23), b = t_host(TCOLL_INT32, 1, s6);
  t_set_all(&a, idx, NULL);
  T_OK(tcoll_tensor_copy(&b, &a)); /* shapes may differ, numel may not */
  t_check_all("host to host copy", &b, idx, NULL, 0);
  T_OK(tcoll_tensor_copy(&a, &a)); /* onto itself */
  t_check_all("self copy", &a, idx, NULL, 0);
  tcoll_tensor_t f = t_host(TCOLL_FLOAT32, 1, s6), c5 = t_host(TCOLL_INT32, 1, s5);
  T_FAILS(tcoll_tensor_copy(&f, &a), TCOLL_ERR_INVALID_ARGUMENT,
          "dst->dtype is float32 but src->dtype is int32");
  T_FAILS(tcoll_tensor_copy(&c5, &a), TCOLL_ERR_INVALID_ARGUMENT,
          "dst has 5 elements but src has 6");
  T_FAILS(tcoll_tensor_copy(NULL, &a), TCOLL_ERR_INVALID_ARGUMENT, "dst is NULL");
  T_FAILS(tcoll_tensor_copy(&b, NULL), TCOLL_ERR_INVALID_ARGUMENT, "src is NULL");
  tcoll_tensor_t nodata = tcoll_tensor_make(NULL, TCOLL_INT32, 1, s6, TCOLL_HOST);
  T_FAILS(tcoll_tensor_copy(&nodata, &a), TCOLL_ERR_INVALID_ARGUMENT, "dst->data is NULL");
  T_FAILS(tcoll_tensor_copy(&b, &nodata), TCOLL_ERR_INVALID_ARGUMENT, "src->data is NULL");
  tcoll_tensor_t baddev = b;
  baddev.device = tcoll_device_count();
  T_FAILS(tcoll_tensor_copy(&baddev, &a), TCOLL_ERR_INVALID_ARGUMENT, "dst->device");
  t_check_all("dst after refused copies", &b, idx, NULL, 0);
  /* Zero elements, data NULL on both sides. */
  int64_t s0[1] = {0};
  tcoll_tensor_t z1 = tcoll_tensor_make(NULL, TCOLL_INT8, 1, s0, TCOLL_HOST), z2 = z1;
  T_OK(tcoll_tensor_copy(&z1, &z2));
  /* Through devices and back: host -> device 0 -> device 1 (or 0) -> host. */
  if (tcoll_device_count() > 0) {
    int last = tcoll_device_count() > 1 ? 1 : 0;
    tcoll_tensor_t d0 = t_empty(), d1 = t_empty(), back = t_host(TCOLL_INT32, 1, s6);
    T_OK(tcoll_tensor_alloc(&d0, TCOLL_INT32, 2, s23, 0));
    T_OK(tcoll_tensor_alloc(&d1, TCOLL_INT32, 1, s6, last));
    T_OK(tcoll_tensor_copy(&d0, &a));
    T_OK(tcoll_tensor_copy(&d1, &d0));
    T_OK(tcoll_tensor_copy(&back, &d1));
    t_check_all("host -> device -> device -> host", &back, idx, NULL, 0);
    tcoll_tensor_free(&d0);
    tcoll_tensor_free(&d1);
    tcoll_tensor_free(&back);
  }
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&b);
  tcoll_tensor_free(&f);
  tcoll_tensor_free(&c5);
}
END_TEST

START_TEST(shape_rules) {
  int64_t s[3] = {2, 3, 4}, out[TCOLL_MAX_DIMS];
  tcoll_tensor_t t = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 3, s, TCOLL_HOST); /* no data needed */
  T_OK(tcoll_all_gather_shape(&t, 1, 3, out));
  T_EXPECT(out[0] == 2 && out[1] == 9 && out[2] == 4,
           "all_gather_shape dim 1 x 3: [%lld, %lld, %lld]", (long long)out[0], (long long)out[1],
           (long long)out[2]);
  T_OK(tcoll_all_gather_shape(&t, -1, 5, out));
  T_EXPECT(out[0] == 2 && out[1] == 3 && out[2] == 20, "all_gather_shape dim -1 x 5");
  T_OK(tcoll_all_gather_shape(&t, 0, 1, out));
  T_EXPECT(out[0] == 2 && out[1] == 3 && out[2] == 4, "all_gather_shape x 1");
  T_OK(tcoll_reduce_scatter_shape(&t, 2, 4, out));
  T_EXPECT(out[0] == 2 && out[1] == 3 && out[2] == 1, "reduce_scatter_shape dim 2 / 4");
  T_OK(tcoll_reduce_scatter_shape(&t, -3, 2, out));
  T_EXPECT(out[0] == 1 && out[1] == 3 && out[2] == 4, "reduce_scatter_shape dim -3 / 2");
  T_FAILS(tcoll_reduce_scatter_shape(&t, 1, 2, out), TCOLL_ERR_INVALID_ARGUMENT,
          "input dimension 1 (3) must be a multiple of group_size 2");
  T_FAILS(tcoll_reduce_scatter_shape(&t, -2, 4, out), TCOLL_ERR_INVALID_ARGUMENT,
          "input dimension 1 (3) must be a multiple of group_size 4");
  T_FAILS(tcoll_all_gather_shape(&t, 3, 2, out), TCOLL_ERR_INVALID_ARGUMENT, "gather_dim is 3");
  T_FAILS(tcoll_all_gather_shape(&t, -4, 2, out), TCOLL_ERR_INVALID_ARGUMENT, "gather_dim is -4");
  T_FAILS(tcoll_reduce_scatter_shape(&t, 3, 2, out), TCOLL_ERR_INVALID_ARGUMENT,
          "scatter_dim is 3");
  T_FAILS(tcoll_all_gather_shape(&t, 0, 0, out), TCOLL_ERR_INVALID_ARGUMENT, "group_size is 0");
  T_FAILS(tcoll_reduce_scatter_shape(&t, 0, -2, out), TCOLL_ERR_INVALID_ARGUMENT,
          "group_size is -2");
  T_FAILS(tcoll_all_gather_shape(&t, 0, 2, NULL), TCOLL_ERR_INVALID_ARGUMENT, "shape is NULL");
  T_FAILS(tcoll_reduce_scatter_shape(NULL, 0, 2, out), TCOLL_ERR_INVALID_ARGUMENT, "in is NULL");
  tcoll_tensor_t scalar = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 0, NULL, TCOLL_HOST);
  T_FAILS(tcoll_all_gather_shape(&scalar, 0, 2, out), TCOLL_ERR_INVALID_ARGUMENT, "0-dim");
  tcoll_tensor_t bad = t;
  bad.dtype = (tcoll_dtype_t)77;
  T_FAILS(tcoll_all_gather_shape(&bad, 0, 2, out), TCOLL_ERR_INVALID_ARGUMENT, "in->dtype is 77");
  int64_t big[1] = {INT64_MAX / 2};
  tcoll_tensor_t huge = tcoll_tensor_make(NULL, TCOLL_INT8, 1, big, TCOLL_HOST);
  T_FAILS(tcoll_all_gather_shape(&huge, 0, 4, out), TCOLL_ERR_INVALID_ARGUMENT, "overflows");
  /* Agrees with what the collectives allocate. */
  int64_t s2[2] = {t_size * 2, 3};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 2, s2), g = t_empty(), r = t_empty();
  T_OK(tcoll_all_gather(&in, 1, NULL, &g));
  T_OK(tcoll_reduce_scatter(&in, TCOLL_SUM, 0, NULL, &r));
  T_OK(tcoll_wait_all());
  T_OK(tcoll_all_gather_shape(&in, 1, t_size, out));
  T_EXPECT(g.ndim == 2 && g.shape[0] == out[0] && g.shape[1] == out[1],
           "all_gather allocated another shape");
  T_OK(tcoll_reduce_scatter_shape(&in, 0, t_size, out));
  T_EXPECT(r.ndim == 2 && r.shape[0] == out[0] && r.shape[1] == out[1],
           "reduce_scatter allocated another shape");
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&g);
  tcoll_tensor_free(&r);
}
END_TEST

START_TEST(config) {
  tcoll_config_t c, saved;
  T_OK(tcoll_get_config(&saved));
  /* What the environment says (the suites run without TCOLL_* other than FAKE_DEVICES). */
  if (!getenv("TCOLL_MAX_COUNT"))
    T_EXPECT(saved.max_count == INT_MAX, "default max_count %lld", (long long)saved.max_count);
  if (!getenv("TCOLL_TIMEOUT")) T_EXPECT(saved.timeout == 0.0, "default timeout %g", saved.timeout);
  if (!getenv("TCOLL_DEBUG"))
    T_EXPECT(saved.debug == TCOLL_LOG_WARN, "default debug %d", (int)saved.debug);
  if (!getenv("TCOLL_ON_TIMEOUT"))
    T_EXPECT(saved.abort_on_timeout == 0, "default abort_on_timeout");
  if (!getenv("TCOLL_PROGRESS")) T_EXPECT(saved.progress_thread == 0, "default progress_thread");
  if (!getenv("TCOLL_TRACE")) T_EXPECT(saved.trace_path[0] == '\0', "default trace_path");
  if (!getenv("TCOLL_CUDA_AWARE"))
    T_EXPECT(saved.cuda_aware == -1, "default cuda_aware %d", saved.cuda_aware);
  const char *wait = getenv("TCOLL_WAIT");
  T_EXPECT(saved.wait_yield == (wait && !strcmp(wait, "yield")), "wait_yield %d with TCOLL_WAIT=%s",
           saved.wait_yield, wait ? wait : "(unset)");
  const char *fd = getenv("TCOLL_FAKE_DEVICES");
  T_EXPECT(saved.fake_devices == (fd ? atoi(fd) : 0), "fake_devices %d", saved.fake_devices);
  T_EXPECT(saved.staging_chunk >= 256, "staging_chunk %zu", saved.staging_chunk);
  /* The changeable fields. */
  c = saved;
  c.timeout = 12.5;
  c.max_count = 7;
  c.staging_chunk = 4096;
  c.abort_on_timeout = 0;
  c.debug = TCOLL_LOG_WARN;
  c.wait_yield = !saved.wait_yield; /* the other way of waiting for the all_reduce below */
  T_OK(tcoll_set_config(&c));
  tcoll_config_t got;
  T_OK(tcoll_get_config(&got));
  T_EXPECT(got.timeout == 12.5 && got.max_count == 7 && got.staging_chunk == 4096 &&
               got.wait_yield == c.wait_yield,
           "set_config did not take");
  /* max_count applies to work posted from now on: a 100-element all_reduce in calls of 7. */
  int64_t s[1] = {100};
  tcoll_tensor_t in = t_alloc(TCOLL_INT32, 1, s), out = t_empty();
  t_set_all(&in, idx, NULL);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait(out.data));
  double vals[100];
  t_read(&out, vals);
  int bad = 0;
  for (int i = 0; i < 100; i++) bad += vals[i] != (double)t_size * idx(i, NULL);
  T_EXPECT(bad == 0, "%d elements wrong with max_count 7", bad);
  /* Fixed fields are refused, and nothing changes. */
  c = saved;
  c.fake_devices = saved.fake_devices + 1;
  T_FAILS(tcoll_set_config(&c), TCOLL_ERR_INVALID_ARGUMENT, "fixed at tcoll_init");
  c = saved;
  c.cuda_aware = saved.cuda_aware == 1 ? 0 : 1;
  T_FAILS(tcoll_set_config(&c), TCOLL_ERR_INVALID_ARGUMENT, "fixed at tcoll_init");
  c = saved;
  c.progress_thread = !saved.progress_thread;
  T_FAILS(tcoll_set_config(&c), TCOLL_ERR_INVALID_ARGUMENT, "fixed at tcoll_init");
  c = saved;
  snprintf(c.trace_path, sizeof c.trace_path, "/tmp/somewhere.json");
  T_FAILS(tcoll_set_config(&c), TCOLL_ERR_INVALID_ARGUMENT, "fixed at tcoll_init");
  /* Invalid values name the field. */
  c = saved;
  c.debug = (tcoll_log_level_t)3;
  T_FAILS(tcoll_set_config(&c), TCOLL_ERR_INVALID_ARGUMENT, "debug is 3");
  c = saved;
  c.timeout = -1;
  T_FAILS(tcoll_set_config(&c), TCOLL_ERR_INVALID_ARGUMENT, "timeout is -1");
  c.timeout = NAN;
  T_FAILS(tcoll_set_config(&c), TCOLL_ERR_INVALID_ARGUMENT, "timeout is");
  c = saved;
  c.max_count = 0;
  T_FAILS(tcoll_set_config(&c), TCOLL_ERR_INVALID_ARGUMENT, "max_count is 0");
  c.max_count = (int64_t)INT_MAX + 1;
  T_FAILS(tcoll_set_config(&c), TCOLL_ERR_INVALID_ARGUMENT, "max_count is 2147483648");
  c = saved;
  c.staging_chunk = 10;
  T_FAILS(tcoll_set_config(&c), TCOLL_ERR_INVALID_ARGUMENT, "staging_chunk is 10");
  T_FAILS(tcoll_set_config(NULL), TCOLL_ERR_INVALID_ARGUMENT, "config is NULL");
  T_FAILS(tcoll_get_config(NULL), TCOLL_ERR_INVALID_ARGUMENT, "config is NULL");
  T_OK(tcoll_get_config(&got));
  T_EXPECT(got.timeout == 12.5 && got.max_count == 7, "a refused set_config changed something");
  T_OK(tcoll_set_config(&saved));
  T_OK(tcoll_get_config(&got));
  T_EXPECT(got.timeout == saved.timeout && got.max_count == saved.max_count &&
               got.staging_chunk == saved.staging_chunk && got.wait_yield == saved.wait_yield,
           "restoring the configuration");
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}
END_TEST

START_TEST(initialized) {
  T_EXPECT(tcoll_initialized() == 1, "tcoll_initialized() is %d inside the suite",
           tcoll_initialized());
  int provided = -1;
  MPI_Query_thread(&provided);
  T_EXPECT(tcoll_mpi_thread_level() == provided, "tcoll_mpi_thread_level() %d, MPI says %d",
           tcoll_mpi_thread_level(), provided);
  const char *b = tcoll_device_backend();
  T_EXPECT(b && (!strcmp(b, "none") || !strcmp(b, "fake") || !strcmp(b, "cuda")), "backend %s",
           b ? b : "(null)");
  if (getenv("TCOLL_FAKE_DEVICES"))
    T_EXPECT(!strcmp(b, "fake") && tcoll_device_count() == atoi(getenv("TCOLL_FAKE_DEVICES")),
             "fake devices: %s %d", b, tcoll_device_count());
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("core");
  TCase *tc = t_tcase("core");
  tcase_add_test(tc, status_strings);
  tcase_add_test(tc, last_error_per_thread);
  tcase_add_test(tc, version);
  tcase_add_test(tc, dtypes);
  tcase_add_test(tc, redop_names);
  tcase_add_test(tc, premul_sum);
  tcase_add_test(tc, tensor_descriptors);
  tcase_add_test(tc, tensor_alloc);
  tcase_add_test(tc, tensor_copy);
  tcase_add_test(tc, shape_rules);
  tcase_add_test(tc, config);
  tcase_add_test(tc, initialized);
  suite_add_tcase(s, tc);
  return s;
}
