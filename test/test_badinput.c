/* Bad input for every public function that test_argcheck.c (the functional collectives) does
 * not cover: tensors, dtypes and reduce ops, configuration, library lifetime, communicators and
 * meshes, the NCCL-shaped bootstrap, streams and devices, the single-process multi-device ops,
 * the multi-buffer ops, the differentiable collectives and their backward, the shape rules and
 * the wait / test / query calls.
 *
 * Each case checks the status (TCOLL_ERR_INVALID_ARGUMENT or the documented one), a message
 * naming the argument, its value and what was expected, that nothing is left pending, that no
 * MPI call was made (counted through the profiling interface; except where the API documents
 * communication: the multi ops' agreement over comms and the bootstrap's rendezvous, which
 * exist so that no rank hangs), that the heap in use did not change where that is measurable,
 * and that outputs given with data == NULL stay NULL. MPI calls are counted on every thread
 * where nothing was pending (a progress thread may post for the call), else on the calling
 * thread only; never the bootstrap service's (test/mpi_count.h).
 * A valid call follows each group. Rank 0 prints how many cases ran. */
#include "harness.h"
#include "refused.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define F32 TCOLL_FLOAT32
#define F64 TCOLL_FLOAT64
#define I32 TCOLL_INT32
#define INVALID TCOLL_ERR_INVALID_ARGUMENT

static int ncases;

/* One call that must return `status` with `needle` in the message, leaving nothing pending;
 * flags: also no MPI call (T_CK_MPI), the heap in use unchanged (T_CK_HEAP): test/refused.h. */
#define EXPECT_(flags, status, call, needle)     \
  do {                                           \
    T_CALL_REFUSED(flags, status, call, needle); \
    ncases++;                                    \
  } while (0)
#define BAD(call, needle) EXPECT_(T_CK_HEAP | T_CK_MPI, INVALID, call, needle)
#define BAD_ST(status, call, needle) EXPECT_(T_CK_HEAP | T_CK_MPI, status, call, needle)
/* Refused after the library's own allocations or pools may have grown (nothing of the call's). */
#define BAD_NOHEAP(call, needle) EXPECT_(T_CK_MPI, INVALID, call, needle)
/* Refused after communicating on purpose (agreement, rendezvous): no rank is left waiting. */
#define BAD_COMM(status, call, needle) EXPECT_(0, status, call, needle)
/* Tolerated input: documented to succeed and do nothing. */
#define HARMLESS(call) EXPECT_(T_CK_HEAP | T_CK_MPI, TCOLL_SUCCESS, call, "")

/* A value-returning function given bad input: `cond` on its result `v` must hold. */
#define BAD_VALUE(type, expr, cond, fmt)                                                 \
  do {                                                                                   \
    t_refusal_t t_r_;                                                                    \
    t_refusal_open(&t_r_, T_CK_HEAP | T_CK_MPI);                                         \
    type v = (expr);                                                                     \
    t_refusal_close(&t_r_, __FILE__, __LINE__, #expr, TCOLL_SUCCESS, TCOLL_SUCCESS, ""); \
    T_EXPECT(cond, "%s gave " fmt " (expected %s)", #expr, v, #cond);                    \
    ncases++;                                                                            \
  } while (0)
#define BAD_STR(expr, want) BAD_VALUE(const char *, expr, v && !strcmp(v, want), "\"%s\"")
/* NULL result, with the reason in tcoll_last_error(). */
#define BAD_NULL(expr, needle)                                                                 \
  do {                                                                                         \
    BAD_VALUE(void *, (void *)(expr), v == NULL, "%p");                                        \
    T_EXPECT(t_contains(tcoll_last_error(), needle), "%s: message \"%s\" lacks \"%s\"", #expr, \
             tcoll_last_error(), needle);                                                      \
  } while (0)

#define STILL_NULL(t) T_EXPECT((t).data == NULL, "a refused call allocated %s", #t)

/* ------------------------------------------------------------------ helpers */

static double pattern(int64_t i, void *ctx) {
  (void)ctx;
  return (double)(t_rank + 1) * (double)(i % 7 + 1);
}
static double summed(int64_t i, void *ctx) {
  (void)ctx;
  return (double)(t_size * (t_size + 1) / 2) * (double)(i % 7 + 1);
}
static double constant(int64_t i, void *ctx) {
  (void)i;
  return *(double *)ctx;
}

/* all_gather along dim 1 of [2, 3] pattern tensors: element (i, r * 3 + j) is rank r's (i, j). */
static double gathered_dim1(int64_t k, void *ctx) {
  (void)ctx;
  int64_t i = k / (3 * t_size), r = k % (3 * t_size) / 3, j = k % 3;
  return (double)(r + 1) * (double)((i * 3 + j) % 7 + 1);
}

static tcoll_tensor_t desc(tcoll_dtype_t dt, int ndim, const int64_t *shape, int device) {
  return tcoll_tensor_make(NULL, dt, ndim, shape, device);
}

typedef struct fx {
  int dev, ndev, other_dev; /* other_dev: another valid device, or a nonexistent one */
  int64_t shape[2];         /* [2 * size, 3] */
  tcoll_tensor_t x, ix;     /* float32 and int32, pattern */
  tcoll_tensor_t spare;     /* room for wrong outputs (never written) */
  tcoll_comm_t *live;  /* a communicator made before stale, so that stale's address stays free */
  tcoll_comm_t *stale; /* a freed communicator */
  tcoll_comm_t *fake;  /* not a communicator */
  int not_a_comm;
} fx_t;

static void fx_init(fx_t *f) {
  memset(f, 0, sizeof *f);
  f->dev = t_device();
  f->ndev = tcoll_device_count();
  f->other_dev = f->dev != TCOLL_HOST ? TCOLL_HOST : f->ndev > 0 ? 0 : f->ndev;
  f->shape[0] = 2 * t_size;
  f->shape[1] = 3;
  f->x = t_alloc(F32, 2, f->shape);
  f->ix = t_alloc(I32, 2, f->shape);
  int64_t sshape[1] = {4096};
  f->spare = t_alloc(F64, 1, sshape);
  t_set_all(&f->x, pattern, NULL);
  t_set_all(&f->ix, pattern, NULL);
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_split(NULL, 0, t_rank, &f->live));
  T_OK(tcoll_comm_split(NULL, 0, t_rank, &c));
  f->stale = c;
  T_OK(tcoll_comm_free(&c));
  f->fake = (tcoll_comm_t *)&f->not_a_comm;
}

static void fx_free(fx_t *f) {
  if (f->live) T_OK(tcoll_comm_free(&f->live));
  tcoll_tensor_free(&f->x);
  tcoll_tensor_free(&f->ix);
  tcoll_tensor_free(&f->spare);
}

/* "comm 0x... is not a live tcoll communicator" for p, named argname. */
static const char *not_live(char *buf, size_t len, const char *argname, const void *p) {
  snprintf(buf, len, "%s %p is not a live tcoll communicator", argname, p);
  return buf;
}

/* ------------------------------------------------------------------ tensors */

START_TEST(tensors) {
  fx_t f;
  fx_init(&f);
  char needle[160];
  /* Descriptors: make copies at most TCOLL_MAX_DIMS sizes and never reads a NULL shape; the size
   * queries give 0 for anything that is not a valid descriptor. */
  int64_t nine[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  tcoll_tensor_t t = tcoll_tensor_make(NULL, F32, 9, nine, TCOLL_HOST);
  BAD_VALUE(long long, tcoll_tensor_numel(&t), v == 0, "%lld");
  BAD_VALUE(size_t, tcoll_tensor_nbytes(&t), v == 0, "%zu");
  t = tcoll_tensor_make(NULL, F32, 2, NULL, TCOLL_HOST);
  BAD_VALUE(long long, t.shape[0] + t.shape[1], v == 0, "%lld");
  BAD_VALUE(long long, tcoll_tensor_numel(NULL), v == 0, "%lld");
  BAD_VALUE(size_t, tcoll_tensor_nbytes(NULL), v == 0, "%zu");
  t = tcoll_tensor_make(NULL, F32, -1, f.shape, TCOLL_HOST);
  BAD_VALUE(long long, tcoll_tensor_numel(&t), v == 0, "%lld");
  int64_t negs[2] = {4, -3}, huge2[2] = {INT64_C(1) << 40, INT64_C(1) << 40},
          wraps[1] = {(INT64_C(1) << 61) + 1};
  t = tcoll_tensor_make(NULL, F32, 2, negs, TCOLL_HOST);
  BAD_VALUE(long long, tcoll_tensor_numel(&t), v == 0, "%lld");
  BAD_VALUE(size_t, tcoll_tensor_nbytes(&t), v == 0, "%zu");
  t = tcoll_tensor_make(NULL, F32, 2, huge2, TCOLL_HOST);
  BAD_VALUE(long long, tcoll_tensor_numel(&t), v == 0, "%lld");
  /* 2^61 + 1 float64 elements are more bytes than a size_t holds: no wrapped-around size. */
  t = tcoll_tensor_make(NULL, F64, 1, wraps, TCOLL_HOST);
  BAD_VALUE(size_t, tcoll_tensor_nbytes(&t), v == 0, "%zu");
  t = tcoll_tensor_make(NULL, (tcoll_dtype_t)42, 2, f.shape, TCOLL_HOST);
  BAD_VALUE(size_t, tcoll_tensor_nbytes(&t), v == 0, "%zu");

  /* tcoll_tensor_alloc: the tensor is left untouched on failure. */
  tcoll_tensor_t a = t_empty();
  BAD(tcoll_tensor_alloc(NULL, F32, 2, f.shape, TCOLL_HOST), "t is NULL");
  BAD(tcoll_tensor_alloc(&a, (tcoll_dtype_t)42, 2, f.shape, TCOLL_HOST),
      "t->dtype is 42 (expected a tcoll_dtype_t");
  BAD(tcoll_tensor_alloc(&a, (tcoll_dtype_t)-1, 2, f.shape, TCOLL_HOST), "t->dtype is -1");
  BAD(tcoll_tensor_alloc(&a, F32, -1, f.shape, TCOLL_HOST), "ndim is -1 (expected 0..8)");
  BAD(tcoll_tensor_alloc(&a, F32, TCOLL_MAX_DIMS + 1, nine, TCOLL_HOST),
      "ndim is 9 (expected 0..8)");
  BAD(tcoll_tensor_alloc(&a, F32, 2, NULL, TCOLL_HOST),
      "shape is NULL with ndim 2 (expected 2 sizes)");
  BAD(tcoll_tensor_alloc(&a, F32, 2, negs, TCOLL_HOST), "t->shape[1] is -3 (expected >= 0)");
  BAD(tcoll_tensor_alloc(&a, F32, 2, huge2, TCOLL_HOST), "t has more than 2^63 bytes");
  snprintf(needle, sizeof needle, "t->device is %d but ", f.ndev);
  BAD(tcoll_tensor_alloc(&a, F32, 2, f.shape, f.ndev), needle);
  BAD(tcoll_tensor_alloc(&a, F32, 2, f.shape, -5), "t->device is -5");
  /* Representable but more than any machine has: out of memory, nothing kept. ASan refuses
   * such a request outright unless allocator_may_return_null=1 (scripts/run sanitize sets it). */
  bool asan = false;
#if defined(__SANITIZE_ADDRESS__)
  asan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  asan = true;
#endif
#endif
  const char *asan_opts = getenv("ASAN_OPTIONS");
  if (!asan || (asan_opts && strstr(asan_opts, "allocator_may_return_null=1"))) {
    int64_t big[1] = {INT64_C(1) << 59}; /* 2^62 bytes of float64 */
    /* not T_CK_HEAP: glibc may set up another arena when an allocation fails. On CUDA a device
     * allocation fails as the CUDA call it is (the guide, "Error handling"). */
    if (f.dev != TCOLL_HOST && strcmp(tcoll_device_backend(), "cuda") == 0)
      EXPECT_(T_CK_MPI, TCOLL_ERR_CUDA, tcoll_tensor_alloc(&a, F64, 1, big, f.dev),
              "cudaMalloc failed: out of memory");
    else
      EXPECT_(T_CK_MPI, TCOLL_ERR_NO_MEMORY, tcoll_tensor_alloc(&a, F64, 1, big, f.dev),
              "cannot allocate");
  }
  STILL_NULL(a);

  /* tcoll_tensor_free: NULL, no data, and memory tcoll did not allocate (not freed, a warning). */
  tcoll_tensor_free(NULL);
  ncases++;
  tcoll_tensor_free(&a);
  ncases++;
  float mine[4] = {1, 2, 3, 4};
  int64_t four[1] = {4};
  tcoll_tensor_t foreign = tcoll_tensor_make(mine, F32, 1, four, TCOLL_HOST);
  tcoll_tensor_free(&foreign);
  T_EXPECT(foreign.data == NULL && mine[3] == 4,
           "tcoll_tensor_free of memory tcoll did not allocate");
  ncases++;

  /* tcoll_tensor_copy and tcoll_tensor_copy_async. */
  tcoll_tensor_t h = t_host(F32, 2, f.shape), five = t_host(F32, 1, (int64_t[]){5});
  tcoll_tensor_t nodata = desc(F32, 2, f.shape, TCOLL_HOST), baddev = h, bad = h;
  baddev.device = f.ndev;
  bad.ndim = 9;
  BAD(tcoll_tensor_copy(NULL, &f.x), "dst is NULL");
  BAD(tcoll_tensor_copy(&h, NULL), "src is NULL");
  BAD(tcoll_tensor_copy(&h, &f.ix),
      "dst->dtype is float32 but src->dtype is int32 (expected the same)");
  BAD(tcoll_tensor_copy(&five, &f.x), "dst has 5 elements but src has");
  BAD(tcoll_tensor_copy(&h, &nodata), "src->data is NULL with");
  BAD(tcoll_tensor_copy(&nodata, &f.x), "dst->data is NULL with");
  snprintf(needle, sizeof needle, "dst->device is %d", f.ndev);
  BAD(tcoll_tensor_copy(&baddev, &f.x), needle);
  BAD(tcoll_tensor_copy(&bad, &f.x), "dst->ndim is 9");
  BAD(tcoll_tensor_copy_async(NULL, &f.x, NULL), "dst is NULL");
  BAD(tcoll_tensor_copy_async(&h, &f.ix, NULL), "dst->dtype is float32 but src->dtype is int32");
  BAD(tcoll_tensor_copy_async(&five, &f.x, NULL), "dst has 5 elements");
  BAD(tcoll_tensor_copy_async(&h, &bad, NULL), "src->ndim is 9");
  /* Valid right after. */
  T_OK(tcoll_tensor_copy(&h, &f.x));
  t_check_all("tensor_copy after bad calls", &h, pattern, NULL, 0);
  T_OK(tcoll_tensor_alloc(&a, F32, 2, f.shape, f.dev));
  T_OK(tcoll_tensor_copy_async(&a, &f.x, NULL));
  if (f.dev != TCOLL_HOST) T_OK(tcoll_stream_synchronize(f.dev, NULL));
  t_check_all("tensor_copy_async after bad calls", &a, pattern, NULL, 0);
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&h);
  tcoll_tensor_free(&five);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ dtypes, status, reduce ops */

START_TEST(dtypes_redops) {
  BAD_VALUE(size_t, tcoll_dtype_size((tcoll_dtype_t)-1), v == 0, "%zu");
  BAD_VALUE(size_t, tcoll_dtype_size((tcoll_dtype_t)TCOLL_NUM_DTYPES), v == 0, "%zu");
  BAD_STR(tcoll_dtype_name((tcoll_dtype_t)TCOLL_NUM_DTYPES), "invalid");
  BAD_STR(tcoll_dtype_name((tcoll_dtype_t)-7), "invalid");
  BAD_STR(tcoll_status_string(-99), "TCOLL_ERR_UNKNOWN_STATUS");
  BAD_STR(tcoll_status_string(2), "TCOLL_ERR_UNKNOWN_STATUS");

  tcoll_redop_t op = -77;
  BAD(tcoll_redop_from_string(NULL, &op), "name is NULL");
  BAD(tcoll_redop_from_string("sum", NULL), "op is NULL");
  BAD(tcoll_redop_from_string("", &op), "Unrecognized reduce_op: ");
  BAD(tcoll_redop_from_string("foo", &op), "Unrecognized reduce_op: foo");
  BAD(tcoll_redop_from_string("sum ", &op), "Unrecognized reduce_op: sum ");
  BAD(tcoll_redop_from_string("premul_sum", &op), "Unrecognized reduce_op: premul_sum");
  static char longname[3000];
  memset(longname, 'x', sizeof longname - 1);
  BAD(tcoll_redop_from_string(longname, &op), "Unrecognized reduce_op: xxxxxxxx");
  T_EXPECT(op == -77, "a refused tcoll_redop_from_string wrote op = %d", op);

  tcoll_redop_t stale;
  T_OK(tcoll_redop_create_premul_sum(2.0, &stale));
  T_OK(tcoll_redop_destroy(stale));
  BAD_STR(tcoll_redop_name(99), "invalid");
  BAD_STR(tcoll_redop_name(-1), "invalid");
  BAD_STR(tcoll_redop_name(stale), "invalid");
  BAD(tcoll_redop_create_premul_sum(NAN, &op), "(expected a finite number)");
  BAD(tcoll_redop_create_premul_sum(INFINITY, &op), "scalar is inf (expected a finite number)");
  BAD(tcoll_redop_create_premul_sum(-INFINITY, &op), "scalar is -inf");
  BAD(tcoll_redop_create_premul_sum(1.0, NULL), "op is NULL");
  T_EXPECT(op == -77, "a refused tcoll_redop_create_premul_sum wrote op = %d", op);
  BAD(tcoll_redop_destroy(TCOLL_SUM), "op 0 is the built-in sum");
  BAD(tcoll_redop_destroy(TCOLL_BXOR), "op 7 is the built-in bxor");
  BAD(tcoll_redop_destroy(-7), "op is -7 (expected a live premul_sum handle)");
  BAD(tcoll_redop_destroy(stale), "(expected a live premul_sum handle)");
  BAD(tcoll_redop_destroy(123456), "op is 123456");

  /* Valid right after. */
  T_OK(tcoll_redop_from_string("MaX", &op));
  T_EXPECT(op == TCOLL_MAX, "\"MaX\" gave op %d", op);
  tcoll_redop_t p;
  T_OK(tcoll_redop_create_premul_sum(0.5, &p));
  T_EXPECT(!strcmp(tcoll_redop_name(p), "premul_sum"), "a new handle is named %s",
           tcoll_redop_name(p));
  T_OK(tcoll_redop_destroy(p));
}
END_TEST

/* ------------------------------------------------------------------ configuration */

static bool same_config(const tcoll_config_t *a, const tcoll_config_t *b) {
  return a->debug == b->debug && a->timeout == b->timeout &&
         a->abort_on_timeout == b->abort_on_timeout && a->max_count == b->max_count &&
         a->staging_chunk == b->staging_chunk && a->cuda_aware == b->cuda_aware &&
         a->fake_devices == b->fake_devices && a->progress_thread == b->progress_thread &&
         !strcmp(a->trace_path, b->trace_path);
}

START_TEST(config) {
  tcoll_config_t orig, c, now;
  T_OK(tcoll_get_config(&orig));
  BAD(tcoll_get_config(NULL), "config is NULL");
  BAD(tcoll_set_config(NULL), "config is NULL");
#define SET_BAD(change, needle)                                                                 \
  do {                                                                                          \
    c = orig;                                                                                   \
    change;                                                                                     \
    BAD(tcoll_set_config(&c), needle);                                                          \
    T_OK(tcoll_get_config(&now));                                                               \
    T_EXPECT(same_config(&now, &orig), "a refused tcoll_set_config changed the configuration"); \
  } while (0)
  SET_BAD(c.debug = (tcoll_log_level_t)3, "config->debug is 3 (expected 0..2)");
  SET_BAD(c.debug = (tcoll_log_level_t)-1, "config->debug is -1");
  SET_BAD(c.timeout = NAN, "(expected seconds >= 0)");
  SET_BAD(c.timeout = -1, "config->timeout is -1 (expected seconds >= 0)");
  SET_BAD(c.timeout = INFINITY, "config->timeout is inf");
  SET_BAD(c.max_count = 0, "config->max_count is 0 (expected 1..2147483647)");
  SET_BAD(c.max_count = (int64_t)INT_MAX + 1, "config->max_count is 2147483648");
  SET_BAD(c.max_count = -5, "config->max_count is -5");
  SET_BAD(c.staging_chunk = 255, "config->staging_chunk is 255 (expected >= 256 bytes)");
  SET_BAD(c.cuda_aware = orig.cuda_aware == 1 ? 0 : 1, "fixed at tcoll_init");
  SET_BAD(c.fake_devices = orig.fake_devices + 1, "fixed at tcoll_init");
  SET_BAD(c.progress_thread = !orig.progress_thread, "fixed at tcoll_init");
  SET_BAD(snprintf(c.trace_path, sizeof c.trace_path, "/tmp/elsewhere.json"),
          "fixed at tcoll_init");
#undef SET_BAD
  /* Valid right after: a change that applies, then the original back. */
  c = orig;
  c.max_count = 1000;
  T_OK(tcoll_set_config(&c));
  T_OK(tcoll_get_config(&now));
  T_EXPECT(now.max_count == 1000, "max_count is %lld after a valid tcoll_set_config",
           (long long)now.max_count);
  /* The smallest max_count still builds derived datatypes (it recursed without end). */
  c.max_count = 1;
  T_OK(tcoll_set_config(&c));
  int64_t shape[2] = {2, 3};
  tcoll_tensor_t x = t_alloc(F32, 2, shape), y = t_empty();
  t_set_all(&x, pattern, NULL);
  T_OK(tcoll_all_gather(&x, 1, NULL, &y));
  T_OK(tcoll_wait(y.data));
  t_check_all("all_gather along dim 1 with max_count 1", &y, gathered_dim1, NULL, 0);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  T_OK(tcoll_set_config(&orig));
}
END_TEST

/* ------------------------------------------------------------------ communicators */

START_TEST(communicators) {
  fx_t f;
  fx_init(&f);
  char needle[200];
  tcoll_comm_t *out = NULL;
  /* Queries on NULL: the world, as in every collective. */
  BAD_VALUE(int, tcoll_comm_rank(NULL), v == t_rank, "%d");
  BAD_VALUE(int, tcoll_comm_size(NULL), v == t_size, "%d");
  BAD_STR(tcoll_comm_name(NULL), "world");
  BAD_VALUE(int, tcoll_comm_mpi(NULL) == tcoll_comm_mpi(tcoll_comm_world()), v, "%d");
  BAD_VALUE(void *, (void *)tcoll_comm_lookup(NULL), v == NULL, "%p");
  BAD_VALUE(void *, (void *)tcoll_comm_lookup(""), v == NULL, "%p");
  BAD_VALUE(void *, (void *)tcoll_comm_lookup("no such communicator"), v == NULL, "%p");

  /* from_mpi */
  BAD(tcoll_comm_from_mpi(MPI_COMM_WORLD, NULL), "out is NULL");
  BAD(tcoll_comm_from_mpi(MPI_COMM_NULL, &out),
      "comm is MPI_COMM_NULL (expected a valid communicator)");
  if (t_size >= 2) {
    MPI_Comm half, inter;
    MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, t_rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, t_rank % 2 ? 0 : 1, 77, &inter);
    BAD(tcoll_comm_from_mpi(inter, &out),
        "comm is an intercommunicator (expected an intracommunicator)");
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
  }
  T_EXPECT(out == NULL, "a refused call set *out");

  /* split */
  BAD(tcoll_comm_split(NULL, 0, 0, NULL), "out is NULL");
  BAD(tcoll_comm_split(f.fake, 0, 0, &out), not_live(needle, sizeof needle, "parent", f.fake));
  BAD(tcoll_comm_split(f.stale, 0, 0, &out), not_live(needle, sizeof needle, "parent", f.stale));

  /* from_ranks: every rank passes the same bad list, so no member is left waiting. */
  int all[4] = {0, 1, 2, 3}, dup[4] = {0, 0, 1, 2}, out_of[2] = {0, 0};
  BAD(tcoll_comm_from_ranks(NULL, all, t_size, "", NULL), "out is NULL");
  BAD(tcoll_comm_from_ranks(f.stale, all, t_size, "", &out),
      not_live(needle, sizeof needle, "parent", f.stale));
  BAD(tcoll_comm_from_ranks(NULL, all, 0, "", &out), "n is 0 (expected 1..");
  BAD(tcoll_comm_from_ranks(NULL, all, -1, "", &out), "n is -1");
  snprintf(needle, sizeof needle, "n is %d (expected 1..%d, the parent's size)", t_size + 1,
           t_size);
  BAD(tcoll_comm_from_ranks(NULL, all, t_size + 1, "", &out), needle);
  BAD(tcoll_comm_from_ranks(NULL, NULL, 1, "", &out), "ranks is NULL (expected 1 ranks)");
  out_of[1] = t_size;
  snprintf(needle, sizeof needle, "ranks[1] is %d (expected a rank of parent in [0, %d))", t_size,
           t_size);
  if (t_size >= 2) BAD(tcoll_comm_from_ranks(NULL, out_of, 2, "", &out), needle);
  out_of[0] = -1;
  BAD(tcoll_comm_from_ranks(NULL, out_of, 1, "", &out), "ranks[0] is -1");
  if (t_size >= 2) {
    BAD(tcoll_comm_from_ranks(NULL, dup, 2, "", &out),
        "ranks lists rank 0 twice (entries 0 and 1; expected distinct");
    int others[1] = {(t_rank + 1) % t_size};
    snprintf(needle, sizeof needle, "this process (rank %d of parent) is not in ranks", t_rank);
    BAD(tcoll_comm_from_ranks(NULL, others, 1, "", &out), needle);
  }
  T_EXPECT(out == NULL, "a refused call set *out");

  /* from_rank_groups / from_rank_lists */
  BAD(tcoll_comm_from_rank_groups(NULL, NULL, 1, 1, "", &out), "ranks is NULL");
  BAD(tcoll_comm_from_rank_groups(NULL, all, 0, 1, "", &out), "ngroups is 0");
  BAD(tcoll_comm_from_rank_groups(NULL, all, -3, 1, "", &out), "ngroups is -3");
  BAD(tcoll_comm_from_rank_groups(NULL, all, 70000, 1, "", &out), "ngroups is 70000");
  BAD(tcoll_comm_from_rank_groups(NULL, all, 1, 0, "", &out), "group_size is 0 (expected >= 1)");
  BAD(tcoll_comm_from_rank_groups(NULL, all, 1, -2, "", &out), "group_size is -2");
  BAD(tcoll_comm_from_rank_groups(NULL, all, 1, t_size, "", NULL), "out is NULL");
  BAD(tcoll_comm_from_rank_groups(f.stale, all, 1, t_size, "", &out),
      not_live(needle, sizeof needle, "parent", f.stale));
  snprintf(needle, sizeof needle, "1 rows of %d ranks list more ranks than the parent's %d",
           t_size + 1, t_size);
  BAD(tcoll_comm_from_rank_groups(NULL, all, 1, t_size + 1, "", &out), needle);
  if (t_size >= 2) {
    BAD(tcoll_comm_from_rank_groups(NULL, out_of + 0, 2, 1, "", &out), "rows[0][0] is -1");
    int twice[2] = {0, 0};
    BAD(tcoll_comm_from_rank_groups(NULL, twice, 2, 1, "", &out),
        "ranks lists rank 0 twice (row 0 entry 0 and row 1");
    int notme[1] = {(t_rank + 1) % t_size};
    snprintf(needle, sizeof needle, "this process (rank %d of parent) is in no row", t_rank);
    BAD(tcoll_comm_from_rank_groups(NULL, notme, 1, 1, "", &out), needle);
  }
  const int *rows[2] = {all, all + 1};
  int sizes[2] = {1, 2};
  BAD(tcoll_comm_from_rank_lists(NULL, NULL, sizes, 1, "", &out), "rows is NULL (expected 1 rows)");
  BAD(tcoll_comm_from_rank_lists(NULL, rows, NULL, 1, "", &out), "row_sizes is NULL");
  BAD(tcoll_comm_from_rank_lists(NULL, rows, sizes, 0, "", &out), "nrows is 0");
  snprintf(needle, sizeof needle, "nrows is %d (expected 1..%d)", t_size + 1, t_size);
  BAD(tcoll_comm_from_rank_lists(NULL, rows, sizes, t_size + 1, "", &out), needle);
  if (t_size >= 2)
    BAD(tcoll_comm_from_rank_lists(NULL, rows, sizes, 2, "", &out),
        "group sizes must be identical found 1 and 2");
  int zero_sizes[1] = {0};
  BAD(tcoll_comm_from_rank_lists(NULL, rows, zero_sizes, 1, "", &out),
      "row_sizes[0] is 0 (expected >= 1)");
  const int *holes[2] = {all, NULL};
  int ones[2] = {1, 1};
  if (t_size >= 2)
    BAD(tcoll_comm_from_rank_lists(NULL, holes, ones, 2, "", &out), "rows[1] is NULL");
  T_EXPECT(out == NULL, "a refused call set *out");

  /* names */
  BAD(tcoll_comm_set_name(f.fake, "x"), not_live(needle, sizeof needle, "comm", f.fake));
  BAD(tcoll_comm_set_name(NULL, NULL), "name is NULL");
  char long_name[80];
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  BAD(tcoll_comm_set_name(NULL, long_name), "is 79 bytes long (expected at most 63)");
  tcoll_comm_t *mine = f.live; /* made before f.stale was freed: a new one could take its address */
  f.live = NULL;
  BAD(tcoll_comm_set_name(mine, "world"), "name \"world\" is already used by another communicator");
  T_EXPECT(!strcmp(tcoll_comm_name(tcoll_comm_world()), "world"), "the world lost its name");

  /* free */
  tcoll_comm_t *w = tcoll_comm_world(), *fake = f.fake, *stale = f.stale, *none = NULL;
  BAD(tcoll_comm_free(NULL), "comm is NULL (expected the address of a communicator)");
  BAD(tcoll_comm_free(&w), "*comm is the world communicator");
  BAD(tcoll_comm_free(&fake), not_live(needle, sizeof needle, "*comm", f.fake));
  BAD(tcoll_comm_free(&stale), not_live(needle, sizeof needle, "*comm", f.stale));
  T_EXPECT(w == tcoll_comm_world() && fake == f.fake && stale == f.stale,
           "a refused free changed *comm");
  HARMLESS(tcoll_comm_free(&none));

  /* Valid right after: name, look up, use and free. */
  T_OK(tcoll_comm_set_name(mine, "badinput-mine"));
  T_EXPECT(tcoll_comm_lookup("badinput-mine") == mine, "lookup of a named communicator");
  tcoll_tensor_t y = t_empty();
  T_OK(tcoll_all_reduce(&f.x, TCOLL_SUM, mine, &y));
  T_OK(tcoll_wait(y.data));
  t_check_all("all_reduce on a communicator after bad calls", &y, summed, NULL, 0);
  tcoll_tensor_free(&y);
  T_OK(tcoll_comm_free(&mine));
  T_OK(tcoll_comm_from_ranks(NULL, all, t_size, "badinput", &out));
  T_EXPECT(tcoll_comm_size(out) == t_size, "from_ranks after bad calls: size %d",
           tcoll_comm_size(out));
  T_OK(tcoll_comm_free(&out));
  fx_free(&f);
}
END_TEST

START_TEST(meshes) {
  fx_t f;
  fx_init(&f);
  char needle[200];
  tcoll_mesh_t *m = NULL;
  int d1[1] = {t_size}, more[2] = {t_size, 2}, zero[2] = {0, t_size}, neg[2] = {t_size, -1};
  int overflow[3] = {65536, 65536, 65536};
  BAD(tcoll_mesh_create(NULL, 1, d1, NULL), "out is NULL");
  BAD(tcoll_mesh_create(f.stale, 1, d1, &m), not_live(needle, sizeof needle, "parent", f.stale));
  BAD(tcoll_mesh_create(NULL, 0, d1, &m), "ndim is 0 (expected 1..8)");
  BAD(tcoll_mesh_create(NULL, -1, d1, &m), "ndim is -1");
  BAD(tcoll_mesh_create(NULL, TCOLL_MAX_DIMS + 1, d1, &m), "ndim is 9");
  BAD(tcoll_mesh_create(NULL, 1, NULL, &m), "dims is NULL (expected 1 sizes)");
  BAD(tcoll_mesh_create(NULL, 2, zero, &m), "dims[0] is 0 (expected >= 1)");
  BAD(tcoll_mesh_create(NULL, 2, neg, &m), "dims[1] is -1");
  snprintf(needle, sizeof needle, "mesh dims multiply to %d but the parent has %d ranks",
           2 * t_size, t_size);
  BAD(tcoll_mesh_create(NULL, 2, more, &m), needle);
  BAD(tcoll_mesh_create(NULL, 3, overflow, &m), "but the parent has");
  T_EXPECT(m == NULL, "a refused tcoll_mesh_create set *out");
  /* Queries and free on NULL. */
  BAD_NULL(tcoll_mesh_comm(NULL, 0), "mesh is NULL");
  BAD_VALUE(int, tcoll_mesh_coord(NULL, 0), v == -1, "%d");
  BAD_VALUE(int, tcoll_mesh_ndim(NULL), v == 0, "%d");
  BAD(tcoll_mesh_free(NULL), "mesh is NULL (expected the address of a mesh)");
  HARMLESS(tcoll_mesh_free(&m));
  /* A real mesh: bad dims, then valid use; then the freed mesh is refused. */
  int dims[2] = {1, t_size};
  T_OK(tcoll_mesh_create(NULL, 2, dims, &m));
  BAD_NULL(tcoll_mesh_comm(m, 2), "dim is 2 (expected 0..1)");
  BAD_NULL(tcoll_mesh_comm(m, -1), "dim is -1");
  BAD_VALUE(int, tcoll_mesh_coord(m, 2), v == -1, "%d");
  BAD_VALUE(int, tcoll_mesh_coord(m, -1), v == -1, "%d");
  tcoll_comm_t *slice = tcoll_mesh_comm(m, 1);
  BAD(tcoll_comm_free(&slice), "*comm is a mesh slice (free the mesh with tcoll_mesh_free)");
  T_EXPECT(tcoll_comm_size(slice) == t_size && tcoll_mesh_coord(m, 1) == t_rank,
           "mesh slice of dim 1");
  tcoll_tensor_t y = t_empty();
  T_OK(tcoll_all_reduce(&f.x, TCOLL_SUM, slice, &y));
  T_OK(tcoll_wait(y.data));
  t_check_all("all_reduce on a mesh slice after bad calls", &y, summed, NULL, 0);
  tcoll_tensor_free(&y);
  tcoll_mesh_t *freed = m;
  T_OK(tcoll_mesh_free(&m));
  T_EXPECT(m == NULL, "tcoll_mesh_free did not clear the pointer");
  snprintf(needle, sizeof needle, "mesh %p is not a live tcoll mesh", (void *)freed);
  BAD_NULL(tcoll_mesh_comm(freed, 0), needle);
  BAD_VALUE(int, tcoll_mesh_coord(freed, 0), v == -1, "%d");
  BAD_VALUE(int, tcoll_mesh_ndim(freed), v == 0, "%d");
  BAD(tcoll_mesh_free(&freed), needle);
  /* The slice went with its mesh. */
  BAD(tcoll_all_reduce(&f.x, TCOLL_SUM, slice, &y), "is not a live tcoll communicator");
  STILL_NULL(y);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ the NCCL-shaped bootstrap */

static tcoll_unique_id_t shared_id(int creator) {
  tcoll_unique_id_t id;
  memset(&id, 0, sizeof id);
  if (t_rank == creator) T_OK(tcoll_get_unique_id(&id));
  MPI_Bcast(id.bytes, TCOLL_UNIQUE_ID_BYTES, MPI_BYTE, creator, MPI_COMM_WORLD);
  return id;
}

START_TEST(bootstrap) {
  tcoll_comm_t *c = NULL;
  char needle[200];
  BAD(tcoll_get_unique_id(NULL), "id is NULL (expected where to store the unique id)");
  /* Refused at once, without contacting anyone. */
  tcoll_unique_id_t id = shared_id(0);
  const int B = TCOLL_UNIQUE_ID_BYTES;
  BAD(tcoll_comm_init_rank(&c, t_size, id.bytes, 127, t_rank),
      "invalid unique_id (expected 128 bytes, got 127)");
  BAD(tcoll_comm_init_rank(&c, t_size, id.bytes, 0, t_rank),
      "invalid unique_id (expected 128 bytes, got 0)");
  BAD(tcoll_comm_init_rank(&c, t_size, id.bytes, 129, t_rank),
      "invalid unique_id (expected 128 bytes, got 129)");
  BAD(tcoll_comm_init_rank(&c, t_size, id.bytes, SIZE_MAX, t_rank),
      "invalid unique_id (expected 128 bytes, got 18446744073709551615)");
  BAD(tcoll_comm_init_rank(&c, t_size, NULL, B, t_rank), "id is NULL");
  char zeros[TCOLL_UNIQUE_ID_BYTES] = {0}, noise[TCOLL_UNIQUE_ID_BYTES];
  for (int i = 0; i < B; i++) noise[i] = (char)(i * 37 + 11);
  const char *not_made = "invalid unique_id (these 128 bytes were not made by tcoll_get_unique_id)";
  BAD(tcoll_comm_init_rank(&c, t_size, zeros, B, t_rank), not_made);
  BAD(tcoll_comm_init_rank(&c, t_size, noise, B, t_rank), not_made);
  tcoll_unique_id_t bad = id;
  bad.bytes[30] ^= 0x5a; /* the nonce, under the checksum */
  BAD(tcoll_comm_init_rank(&c, t_size, bad.bytes, B, t_rank), not_made);
  bad = id;
  bad.bytes[B - 1] = 1; /* the unused tail */
  BAD(tcoll_comm_init_rank(&c, t_size, bad.bytes, B, t_rank), not_made);
  T_EXPECT(c == NULL, "a refused tcoll_comm_init_rank set *comm");

  /* Decided by the root and reported to every member: nobody hangs. These communicate (the
   * rendezvous), and the root keeps the failed id to answer late members. */
  int last = t_rank == t_size - 1;
  id = shared_id(0);
  snprintf(needle, sizeof needle, "rank is -1 (expected a rank in [0, %d))", t_size);
  BAD_COMM(INVALID, tcoll_comm_init_rank(&c, t_size, id.bytes, B, -1), needle);
  /* Members arriving after the rendezvous failed get its error. */
  BAD_COMM(INVALID, tcoll_comm_init_rank(&c, t_size, id.bytes, B, t_rank),
           "with rank -1 for nranks");
  id = shared_id(t_size - 1);
  snprintf(needle, sizeof needle, "nranks is 0 (expected 1..%d, the world size)", t_size);
  BAD_COMM(INVALID, tcoll_comm_init_rank(&c, 0, id.bytes, B, 0), needle);
  id = shared_id(0);
  snprintf(needle, sizeof needle, "nranks is %d (expected 1..%d", t_size + 1, t_size);
  BAD_COMM(INVALID, tcoll_comm_init_rank(&c, t_size + 1, id.bytes, B, t_rank), needle);
  /* One member's bad argument fails the others. */
  id = shared_id(0);
  BAD_COMM(INVALID, tcoll_comm_init_rank(last ? NULL : &c, t_size, id.bytes, B, t_rank),
           last ? "comm is NULL (expected where to store the communicator)" : "with comm NULL");
  id = shared_id(0);
  snprintf(needle, sizeof needle,
           last ? "rank is %d (expected a rank in [0, %d))" : "with rank %d for nranks %d", t_size,
           t_size);
  BAD_COMM(INVALID, tcoll_comm_init_rank(&c, t_size, id.bytes, B, last ? t_size : t_rank), needle);
  if (t_size >= 2) {
    id = shared_id(t_size - 1);
    BAD_COMM(INVALID, tcoll_comm_init_rank(&c, t_size, id.bytes, B, last ? 0 : t_rank),
             "duplicate rank 0");
  }
  if (t_size >= 3) {
    id = shared_id(1);
    BAD_COMM(INVALID,
             tcoll_comm_init_rank(&c, last ? t_size - 1 : t_size, id.bytes, B,
                                  last ? t_size - 2 : t_rank),
             "members disagree on nranks");
  }
  T_EXPECT(c == NULL, "a refused tcoll_comm_init_rank set *comm");
  /* Valid right after. */
  id = shared_id(t_size - 1);
  T_OK(tcoll_comm_init_rank(&c, t_size, id.bytes, B, t_size - 1 - t_rank));
  T_EXPECT(tcoll_comm_rank(c) == t_size - 1 - t_rank, "init_rank after bad calls: rank %d",
           tcoll_comm_rank(c));
  /* The counter tells the bootstrap service's calls apart (see mpi_count.c): the creator has one.
   */
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (t_rank == t_size - 1 && level == MPI_THREAD_MULTIPLE)
    T_EXPECT(t_mpi_service_calls() > 0, "the MPI counter saw no call of the bootstrap service");
  fx_t f;
  fx_init(&f);
  tcoll_tensor_t y = t_empty();
  T_OK(tcoll_all_reduce(&f.x, TCOLL_SUM, c, &y));
  T_OK(tcoll_wait(y.data));
  t_check_all("all_reduce on an init_rank communicator after bad calls", &y, summed, NULL, 0);
  tcoll_tensor_free(&y);
  T_OK(tcoll_comm_free(&c));
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ streams and devices */

START_TEST(streams) {
  int ndev = tcoll_device_count();
  char needle[200];
  void *s = (void *)&ndev; /* a sentinel: refused calls leave it */
  BAD(tcoll_set_stream(TCOLL_HOST, NULL),
      "device is TCOLL_HOST (expected a device ordinal: the host has no streams)");
  BAD(tcoll_set_stream(-5, NULL), "device is -5");
  if (ndev == 0)
    snprintf(needle, sizeof needle, "device is %d but no device exists", ndev);
  else
    snprintf(needle, sizeof needle,
             "device is %d but device %d does not exist (expected a device in [0, %d))", ndev, ndev,
             ndev);
  BAD(tcoll_set_stream(ndev, NULL), needle);
  BAD_VALUE(void *, tcoll_get_stream(-5), v == NULL, "%p");
  BAD_VALUE(void *, tcoll_get_stream(TCOLL_HOST), v == NULL, "%p");
  BAD_VALUE(void *, tcoll_get_stream(ndev), v == NULL, "%p");
  BAD(tcoll_stream_create(ndev, &s), needle);
  BAD(tcoll_stream_create(TCOLL_HOST, &s), "device is TCOLL_HOST");
  if (ndev > 0)
    BAD(tcoll_stream_create(0, NULL), "stream is NULL (expected where to store the stream)");
  T_EXPECT(s == (void *)&ndev, "a refused tcoll_stream_create wrote the stream");
  BAD(tcoll_stream_destroy(ndev, NULL), needle);
  BAD(tcoll_stream_destroy(-3, NULL), "device is -3");
  BAD(tcoll_stream_synchronize(ndev, NULL), needle);
  BAD(tcoll_stream_synchronize(TCOLL_HOST, NULL), "device is TCOLL_HOST");
  BAD(tcoll_device_synchronize(ndev), needle);
  BAD(tcoll_device_synchronize(-2), "device is -2");
  BAD_VALUE(int, tcoll_mpi_device_direct(12345), v == 0 || v == 1, "%d");
  /* Valid right after. */
  if (ndev > 0) {
    void *mine = NULL;
    T_OK(tcoll_stream_create(0, &mine));
    HARMLESS(tcoll_stream_destroy(0, NULL)); /* the default stream is not destroyed */
    T_OK(tcoll_set_stream(0, mine));
    T_EXPECT(tcoll_get_stream(0) == mine, "tcoll_get_stream after tcoll_set_stream");
    T_OK(tcoll_stream_synchronize(0, mine));
    T_OK(tcoll_device_synchronize(0));
    T_OK(tcoll_stream_destroy(0, mine));
    T_EXPECT(tcoll_get_stream(0) == NULL, "a destroyed current stream is still current");
  }
}
END_TEST

/* ------------------------------------------------------------------ single-process multi-device */

START_TEST(local_ops) {
  fx_t f;
  fx_init(&f);
  char needle[200];
  int devs[2] = {TCOLL_HOST, f.dev}, baddevs[2] = {TCOLL_HOST, f.ndev};
  tcoll_tensor_t in[2] = {f.x, f.x}, o[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
  tcoll_tensor_t spoiled = f.x;
  spoiled.dtype = (tcoll_dtype_t)42;

  /* broadcast_coalesced */
  BAD(tcoll_local_broadcast_coalesced(in, -1, devs, 2, o), "n is -1 (expected >= 0)");
  BAD(tcoll_local_broadcast_coalesced(in, 1, devs, -2, o), "n_devices is -2 (expected >= 0)");
  BAD(tcoll_local_broadcast_coalesced(NULL, 1, devs, 2, o), "in is NULL (expected 1 tensors)");
  BAD(tcoll_local_broadcast_coalesced(in, 1, NULL, 2, o), "devices is NULL (expected 2 devices)");
  BAD(tcoll_local_broadcast_coalesced(in, 2, devs, 2, NULL), "out is NULL (expected 4 tensors)");
  BAD(tcoll_local_broadcast_coalesced(in, 1 << 20, devs, 1 << 14, NULL),
      "out is NULL (expected 17179869184 tensors)");
  snprintf(needle, sizeof needle, "devices[1] is %d but ", f.ndev);
  BAD(tcoll_local_broadcast_coalesced(in, 1, baddevs, 2, o), needle);
  BAD(tcoll_local_broadcast_coalesced(&spoiled, 1, devs, 2, o), "in[0]->dtype is 42");
  tcoll_tensor_t wrong[2] = {t_empty(), tcoll_tensor_make(f.spare.data, F64, 2, f.shape, f.dev)};
  BAD(tcoll_local_broadcast_coalesced(in, 1, devs, 2, wrong),
      "out[1]->dtype is float64 (expected float32)");
  wrong[1] = tcoll_tensor_make(f.spare.data, F32, 1, f.shape, f.dev);
  BAD(tcoll_local_broadcast_coalesced(in, 1, devs, 2, wrong), "out[1]->shape is [");
  wrong[1] = tcoll_tensor_make(f.x.data, F32, 2, f.shape, f.dev);
  wrong[1].data = (float *)f.x.data + 1;
  tcoll_tensor_t dev_only[1] = {wrong[1]};
  int on_dev[1] = {f.dev};
  BAD(tcoll_local_broadcast_coalesced(in, 1, on_dev, 1, dev_only), "out[0] (");
  for (int k = 0; k < 4; k++) STILL_NULL(o[k]);
  STILL_NULL(wrong[0]);

  /* reduce_add_coalesced (in[d * n + i]) */
  tcoll_tensor_t ri[2] = {f.x, f.x};
  BAD(tcoll_local_reduce_add_coalesced(ri, 0, 1, f.dev, o), "n_devices is 0 (expected >= 1)");
  BAD(tcoll_local_reduce_add_coalesced(ri, 2, -1, f.dev, o), "n is -1 (expected >= 0)");
  BAD(tcoll_local_reduce_add_coalesced(NULL, 2, 1, f.dev, o), "in is NULL (expected 2 tensors)");
  BAD(tcoll_local_reduce_add_coalesced(NULL, 1 << 20, 1 << 14, f.dev, o),
      "in is NULL (expected 17179869184 tensors)");
  BAD(tcoll_local_reduce_add_coalesced(ri, 2, 1, f.dev, NULL), "out is NULL (expected 1 tensors)");
  snprintf(needle, sizeof needle, "destination is %d but ", f.ndev);
  BAD(tcoll_local_reduce_add_coalesced(ri, 2, 1, f.ndev, o), needle);
  BAD(tcoll_local_reduce_add_coalesced(ri, 2, 0, f.ndev, o),
      needle); /* also with nothing to reduce */
  ri[1] = f.ix;
  BAD(tcoll_local_reduce_add_coalesced(ri, 2, 1, f.dev, o),
      "in[1]->dtype is int32 but in[0]->dtype is float32");
  ri[1] = tcoll_tensor_make(f.spare.data, F32, 1, f.shape, f.dev);
  BAD(tcoll_local_reduce_add_coalesced(ri, 2, 1, f.dev, o), "in[1]->shape is [");
  ri[1] = spoiled;
  BAD(tcoll_local_reduce_add_coalesced(ri, 2, 1, f.dev, o), "in[1]->dtype is 42");
  if (f.dev != TCOLL_HOST) { /* one group of two tensors on two devices */
    tcoll_tensor_t two[2] = {f.x, t_host(F32, 2, f.shape)};
    snprintf(needle, sizeof needle,
             "in[1]->device is -1 but in[0]->device is %d (expected group 0 on one device)", f.dev);
    BAD(tcoll_local_reduce_add_coalesced(two, 1, 2, f.dev, o), needle);
    tcoll_tensor_free(&two[1]);
  }
  ri[1] = f.x;
  tcoll_tensor_t rwrong = tcoll_tensor_make(f.spare.data, F32, 2, f.shape, f.other_dev);
  snprintf(needle, sizeof needle, "out[0]->device is %d (expected %d, the destination)",
           f.other_dev, f.dev);
  BAD(tcoll_local_reduce_add_coalesced(ri, 2, 1, f.dev, &rwrong), needle);
  for (int k = 0; k < 4; k++) STILL_NULL(o[k]);

  /* scatter */
  int64_t sizes_ok[2] = {f.shape[0] - 1, 1}, sizes_neg[2] = {-1, f.shape[0] + 1},
          sizes_short[2] = {0, 1};
  int64_t sizes_huge[2] = {INT64_MAX, INT64_MAX};
  BAD(tcoll_local_scatter(&spoiled, devs, 2, NULL, 0, o), "in->dtype is 42");
  BAD(tcoll_local_scatter(NULL, devs, 2, NULL, 0, o), "in is NULL");
  BAD(tcoll_local_scatter(&f.x, devs, 0, NULL, 0, o), "n_devices is 0 (expected >= 1)");
  BAD(tcoll_local_scatter(&f.x, NULL, 2, NULL, 0, o), "devices is NULL (expected 2 devices)");
  BAD(tcoll_local_scatter(&f.x, devs, 2, NULL, 0, NULL), "out is NULL (expected 2 tensors)");
  BAD(tcoll_local_scatter(&f.x, devs, 2, NULL, 2, o), "dim is 2 (expected -2..1)");
  BAD(tcoll_local_scatter(&f.x, devs, 2, NULL, -3, o), "dim is -3");
  BAD(tcoll_local_scatter(&f.x, devs, 2, sizes_neg, 0, o), "chunk_sizes[0] is -1 (expected >= 0)");
  snprintf(needle, sizeof needle, "chunk_sizes sum to 1 but in->shape[0] is %lld (expected equal)",
           (long long)f.shape[0]);
  BAD(tcoll_local_scatter(&f.x, devs, 2, sizes_short, 0, o), needle);
  BAD(tcoll_local_scatter(&f.x, devs, 2, sizes_huge, 0, o), "chunk_sizes sum to more than 2^63");
  snprintf(needle, sizeof needle, "devices[1] is %d but ", f.ndev);
  BAD(tcoll_local_scatter(&f.x, baddevs, 2, sizes_ok, 0, o), needle);
  tcoll_tensor_t swrong[2] = {t_empty(), tcoll_tensor_make(f.spare.data, F32, 2, f.shape, f.dev)};
  BAD(tcoll_local_scatter(&f.x, devs, 2, sizes_ok, 0, swrong), "out[1]->shape is [");
  STILL_NULL(swrong[0]);
  for (int k = 0; k < 4; k++) STILL_NULL(o[k]);

  /* gather */
  tcoll_tensor_t gi[2] = {f.x, f.x};
  BAD(tcoll_local_gather(gi, 0, 0, f.dev, o), "n is 0 (expected >= 1)");
  BAD(tcoll_local_gather(NULL, 2, 0, f.dev, o), "in is NULL (expected 2 tensors)");
  BAD(tcoll_local_gather(gi, 2, 0, f.dev, NULL), "out is NULL");
  snprintf(needle, sizeof needle, "target_device is %d but ", f.ndev);
  BAD(tcoll_local_gather(gi, 2, 0, f.ndev, o), needle);
  BAD(tcoll_local_gather(gi, 2, 2, f.dev, o), "dim is 2 (expected -2..1)");
  gi[1] = f.ix;
  BAD(tcoll_local_gather(gi, 2, 0, f.dev, o), "in[1]->dtype is int32 but in[0]->dtype is float32");
  gi[1] = tcoll_tensor_make(f.spare.data, F32, 1, f.shape, f.dev);
  BAD(tcoll_local_gather(gi, 2, 0, f.dev, o), "in[1]->ndim is 1 but in[0]->ndim is 2");
  int64_t other[2] = {f.shape[0], 4};
  gi[1] = tcoll_tensor_make(f.spare.data, F32, 2, other, f.dev);
  BAD(tcoll_local_gather(gi, 2, 0, f.dev, o), "in[1]->shape[1] is 4 but in[0]->shape[1] is 3");
  gi[1] = spoiled;
  BAD(tcoll_local_gather(gi, 2, 0, f.dev, o), "in[1]->dtype is 42");
  /* Empty inputs whose sizes along dim add up past 2^63. */
  int64_t empty_huge[2] = {INT64_C(1) << 62, 0};
  tcoll_tensor_t eh[3];
  for (int k = 0; k < 3; k++) eh[k] = desc(F32, 2, empty_huge, f.dev);
  BAD(tcoll_local_gather(eh, 3, 0, f.dev, o), "sizes along dim 0 sum to more than 2^63");
  gi[1] = f.x;
  tcoll_tensor_t gwrong = tcoll_tensor_make(f.spare.data, F32, 2, f.shape, f.dev);
  BAD(tcoll_local_gather(gi, 2, 0, f.dev, &gwrong), "out->shape is [");
  for (int k = 0; k < 4; k++) STILL_NULL(o[k]);

  /* A pending output is refused (BUSY) and stays pending. */
  tcoll_tensor_t pend = t_empty();
  T_OK(tcoll_all_reduce(&f.x, TCOLL_SUM, NULL, &pend));
  BAD_ST(TCOLL_ERR_BUSY, tcoll_local_gather(&f.x, 1, 0, f.dev, &pend),
         "is the output of pending work: all_reduce");
  T_EXPECT(tcoll_pending_count() == 1, "the pending output is no longer pending");
  T_OK(tcoll_wait(pend.data));

  /* Valid right after: scatter then gather back. */
  T_OK(tcoll_local_scatter(&f.x, devs, 2, sizes_ok, 0, o));
  T_OK(tcoll_local_gather(o, 2, 0, f.dev, &o[2]));
  if (f.dev != TCOLL_HOST) T_OK(tcoll_stream_synchronize(f.dev, NULL));
  t_check_all("local scatter + gather after bad calls", &o[2], pattern, NULL, 0);
  tcoll_tensor_t bc[2] = {t_empty(), t_empty()};
  T_OK(tcoll_local_broadcast_coalesced(&f.x, 1, devs, 2, bc));
  T_OK(tcoll_local_reduce_add_coalesced(bc, 2, 1, TCOLL_HOST, &o[3]));
  double two = 2.0;
  (void)two;
  for (int k = 0; k < 2; k++) tcoll_tensor_free(&bc[k]);
  for (int k = 0; k < 4; k++) tcoll_tensor_free(&o[k]);
  tcoll_tensor_free(&pend);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ NCCL-shaped multi-buffer ops
 */

START_TEST(multi_ops) {
  fx_t f;
  fx_init(&f);
  char needle[200];
  /* One buffer per device: the host only, or devices 0, 1 and the host. */
  int n = f.ndev >= 2 && f.dev != TCOLL_HOST ? 3 : 1, devs[3] = {TCOLL_HOST, 0, 0};
  if (n == 3) devs[0] = 0, devs[1] = 1, devs[2] = TCOLL_HOST;
  int64_t len = 12 * t_size, shape[1] = {len};
  tcoll_tensor_t in[3], out[3], bo[3];
  for (int i = 0; i < n; i++) {
    in[i] = t_empty();
    T_OK(tcoll_tensor_alloc(&in[i], F32, 1, shape, devs[i]));
    double one = 1.0;
    t_set_all(&in[i], constant, &one);
    out[i] = t_empty();
  }
  tcoll_comm_t *w = tcoll_comm_world();
  tcoll_comm_t *comms[3] = {w, w, w};
  void *strs[4] = {NULL, NULL, NULL, NULL};

  BAD(tcoll_multi_all_reduce(in, out, 0, TCOLL_SUM, NULL, NULL),
      "n is 0 (expected at least one buffer)");
  BAD(tcoll_multi_all_reduce(NULL, out, n, TCOLL_SUM, NULL, NULL), "in is NULL");
  BAD(tcoll_multi_all_reduce(in, NULL, n, TCOLL_SUM, NULL, NULL), "out is NULL");
  snprintf(needle, sizeof needle,
           "number of outputs is not equal to number of inputs (%d outputs, %d inputs)", n + 1, n);
  BAD(tcoll_multi_all_reduce_v(in, n, out, n + 1, TCOLL_SUM, NULL, 0, NULL, 0), needle);
  BAD(tcoll_multi_all_gather_v(in, n, out, 0, NULL, 0, NULL, 0),
      "number of outputs is not equal to number of inputs");
  BAD(tcoll_multi_all_reduce_v(in, n, out, n, TCOLL_SUM, strs, n + 1, NULL, 0),
      "number of streams is not equal to number of inputs");
  BAD(tcoll_multi_reduce_v(in, n, NULL, 0, TCOLL_SUM, strs, 0, NULL, 0),
      "number of streams is not equal to number of inputs");
  BAD(tcoll_multi_broadcast_v(in, n, 0, strs, n + 1, NULL, 0),
      "number of streams is not equal to number of inputs");
  BAD(tcoll_multi_reduce_scatter_v(in, n, out, n, TCOLL_SUM, NULL, 0, comms, 0),
      "number of communicators is not equal to number of inputs (0 communicators");
  tcoll_comm_t *holes[3] = {NULL, NULL, NULL};
  BAD(tcoll_multi_all_reduce(in, out, n, TCOLL_SUM, NULL, holes),
      "number of communicators is not equal to number of inputs");
  BAD(tcoll_multi_all_reduce_v(in, n, out, n, TCOLL_SUM, NULL, 0, holes, n), "comms[0] is NULL");
  BAD(tcoll_multi_reduce(in, n, NULL, -1, TCOLL_SUM, NULL, NULL), "invalid root");
  snprintf(needle, sizeof needle, "invalid root (root is %d, expected a buffer in [0, %d)", n, n);
  BAD(tcoll_multi_reduce(in, n, NULL, n, TCOLL_SUM, NULL, NULL), needle);
  BAD(tcoll_multi_broadcast(in, n, n, NULL, NULL), needle);
  BAD(tcoll_multi_all_reduce(in, out, n, TCOLL_BAND, NULL, NULL),
      "op band needs an integer or bool dtype, got float32");
  BAD(tcoll_multi_reduce_scatter(in, out, n, 99, NULL, NULL), "op is 99");
  tcoll_tensor_t one_in[1] = {in[0]};
  one_in[0].ndim = 0;
  BAD(tcoll_multi_all_gather(one_in, out, 1, NULL, NULL), "in[0] is a 0-dim tensor");
  /* reduce_scatter needs dim 0 to split into n * size blocks. */
  int64_t odd[1] = {len + 1};
  tcoll_tensor_t oddt[3];
  for (int i = 0; i < n; i++) {
    oddt[i] = t_empty();
    T_OK(tcoll_tensor_alloc(&oddt[i], F32, 1, odd, devs[i]));
  }
  snprintf(needle, sizeof needle,
           "input dimension 0 (%lld) must be a multiple of the number of buffers %d",
           (long long)len + 1, n * (n > 1 ? 1 : t_size));
  if (n > 1)
    BAD(tcoll_multi_reduce_scatter(oddt, out, n, TCOLL_SUM, NULL, NULL), needle);
  else if (t_size > 1)
    BAD_COMM(INVALID, tcoll_multi_reduce_scatter(oddt, out, n, TCOLL_SUM, NULL, comms), needle);
  for (int i = 0; i < n; i++) tcoll_tensor_free(&oddt[i]);
  tcoll_tensor_t twice[2] = {in[0], in[0]};
  snprintf(needle, sizeof needle,
           "in[1]->device is %d, as in[0]->device (expected one buffer per device)", devs[0]);
  BAD(tcoll_multi_all_reduce(twice, out, 2, TCOLL_SUM, NULL, NULL), needle);
  tcoll_tensor_t sp[1] = {in[0]};
  sp[0].shape[0] = -4;
  BAD(tcoll_multi_all_reduce(sp, out, 1, TCOLL_SUM, NULL, NULL), "in[0]->shape[0] is -4");
  if (n == 3) {
    tcoll_tensor_t hx = t_host(TCOLL_INT32, f.ix.ndim, f.ix.shape);
    tcoll_tensor_t mixed[3] = {in[0], in[1], hx};
    BAD(tcoll_multi_all_reduce(mixed, out, 3, TCOLL_SUM, NULL, NULL),
        "in[2]->dtype is int32 but in[0]->dtype is float32");
    tcoll_tensor_free(&hx);
  }
  bo[0] = tcoll_tensor_make(f.spare.data, F32, 1, odd, devs[0]);
  for (int i = 1; i < n; i++) bo[i] = t_empty();
  BAD(tcoll_multi_all_reduce(in, bo, n, TCOLL_SUM, NULL, NULL), "out[0]->shape is [");
  BAD(tcoll_multi_all_gather(in, bo, n, NULL, NULL), "out[0]->shape is [");
  /* Empty buffers whose gathered size would pass 2^63. */
  int64_t empty_huge[2] = {INT64_C(1) << 62, 0};
  tcoll_tensor_t eh[3];
  for (int i = 0; i < n; i++) eh[i] = desc(F32, 2, empty_huge, devs[i]);
  if (n > 1)
    BAD(tcoll_multi_all_gather(eh, out, n, NULL, NULL),
        "gathered dim 0 (4611686018427387904 x 3 buffers) overflows");
  else if (t_size > 1)
    BAD_COMM(INVALID, tcoll_multi_all_gather(eh, out, n, NULL, comms),
             "gathered dim 0 (4611686018427387904 x");
  for (int i = 0; i < n; i++) STILL_NULL(out[i]);
  for (int i = 1; i < n; i++) STILL_NULL(bo[i]);

  /* With communicators every process joins an agreement first (so that a bad argument on one
   * process fails them all): these communicate, on purpose. */
  snprintf(needle, sizeof needle, "invalid root (root is %d, expected a buffer in [0, %d)",
           n * t_size, n * t_size);
  BAD_COMM(INVALID, tcoll_multi_reduce(in, n, NULL, n * t_size, TCOLL_SUM, NULL, comms), needle);
  BAD_COMM(INVALID, tcoll_multi_broadcast(in, n, -1, NULL, comms), "invalid root");
  BAD_COMM(INVALID, tcoll_multi_all_reduce_v(in, n, out, n, TCOLL_SUM, NULL, 0, comms, n + 1),
           "number of communicators is not equal to number of inputs");
  tcoll_comm_t *stale_comms[3] = {f.stale, f.stale, f.stale};
  BAD(tcoll_multi_all_reduce(in, out, n, TCOLL_SUM, NULL, stale_comms),
      not_live(needle, sizeof needle, "comms[0]", f.stale));
  if (n == 3) {
    tcoll_comm_t *last_stale[3] = {w, w, f.stale};
    BAD_COMM(INVALID, tcoll_multi_all_reduce(in, out, n, TCOLL_SUM, NULL, last_stale),
             not_live(needle, sizeof needle, "comms[2]", f.stale));
  }
  for (int i = 0; i < n; i++) STILL_NULL(out[i]);

  /* A pending output is refused. */
  tcoll_tensor_t pend = t_empty();
  T_OK(tcoll_all_reduce(&in[0], TCOLL_SUM, NULL, &pend));
  tcoll_tensor_t po[3] = {pend, t_empty(), t_empty()};
  BAD_ST(TCOLL_ERR_BUSY, tcoll_multi_all_reduce(in, po, n, TCOLL_SUM, NULL, NULL), "out[0] (0x");
  T_OK(tcoll_wait(pend.data));
  tcoll_tensor_free(&pend);

  /* Valid right after: local, then with communicators. */
  T_OK(tcoll_multi_all_reduce(in, out, n, TCOLL_SUM, NULL, NULL));
  for (int i = 0; i < n; i++)
    if (devs[i] != TCOLL_HOST) T_OK(tcoll_stream_synchronize(devs[i], NULL));
  double want = n;
  for (int i = 0; i < n; i++)
    t_check_all("multi_all_reduce (local) after bad calls", &out[i], constant, &want, 0);
  T_OK(tcoll_multi_all_reduce(in, out, n, TCOLL_SUM, NULL, comms));
  for (int i = 0; i < n; i++)
    if (devs[i] != TCOLL_HOST) T_OK(tcoll_stream_synchronize(devs[i], NULL));
  want = n * t_size;
  for (int i = 0; i < n; i++)
    t_check_all("multi_all_reduce (comms) after bad calls", &out[i], constant, &want, 0);
  for (int i = 0; i < n; i++) {
    tcoll_tensor_free(&in[i]);
    tcoll_tensor_free(&out[i]);
  }
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ differentiable collectives */

/* A forward that must be refused: *node is NULL afterwards, y stays unallocated. */
#define BAD_FWD(status, call_with_node, needle)                                \
  do {                                                                         \
    tcoll_grad_node_t *node = (tcoll_grad_node_t *)&sentinel;                  \
    BAD_ST(status, call_with_node, needle);                                    \
    T_EXPECT(node == NULL, "a refused forward left *node = %p", (void *)node); \
  } while (0)

START_TEST(grad_forwards) {
  fx_t f;
  fx_init(&f);
  int sentinel = 0;
  char needle[200];
  int L = t_size - 1;
  tcoll_tensor_t y = t_empty(), ys[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
  tcoll_tensor_t xs[4] = {f.x, f.x, f.x, f.x}, spoiled = f.x;
  spoiled.dtype = (tcoll_dtype_t)42;
  tcoll_tensor_t wrong_y = tcoll_tensor_make(f.spare.data, F64, 2, f.shape, f.dev);
  int64_t gshape[2] = {f.shape[0] * t_size, 3};

  /* Every forward: node NULL, a spoiled input, a stale communicator. */
  BAD(tcoll_grad_broadcast(&f.x, 0, NULL, &y, NULL),
      "node is NULL (expected where to store the new grad node)");
  BAD(tcoll_grad_reduce(&f.x, 0, TCOLL_SUM, NULL, &y, NULL), "node is NULL");
  BAD(tcoll_grad_gather(&f.x, 0, NULL, ys, NULL), "node is NULL");
  BAD(tcoll_grad_scatter(xs, 0, NULL, &y, NULL), "node is NULL");
  BAD(tcoll_grad_all_gather(&f.x, NULL, ys, NULL), "node is NULL");
  BAD(tcoll_grad_all_gather_into_tensor(&f.x, 0, NULL, &y, NULL), "node is NULL");
  BAD(tcoll_grad_reduce_scatter(xs, TCOLL_SUM, NULL, &y, NULL), "node is NULL");
  BAD(tcoll_grad_reduce_scatter_tensor(&f.x, TCOLL_SUM, 0, NULL, &y, NULL), "node is NULL");
  BAD(tcoll_grad_all_to_all(xs, NULL, ys, NULL), "node is NULL");
  BAD(tcoll_grad_all_to_all_single(&f.x, NULL, NULL, NULL, &y, NULL), "node is NULL");
  BAD(tcoll_grad_all_reduce(&f.x, TCOLL_SUM, NULL, &y, NULL), "node is NULL");

  BAD_FWD(INVALID, tcoll_grad_broadcast(&spoiled, 0, NULL, &y, &node), "x->dtype is 42");
  snprintf(needle, sizeof needle, "src is %d (expected a rank in [0, %d))", t_size, t_size);
  BAD_FWD(INVALID, tcoll_grad_broadcast(&f.x, t_size, NULL, &y, &node), needle);
  BAD_FWD(INVALID, tcoll_grad_broadcast(&f.x, 0, f.stale, &y, &node),
          not_live(needle, sizeof needle, "comm", f.stale));
  BAD_FWD(INVALID, tcoll_grad_broadcast(&f.x, 0, NULL, &wrong_y, &node),
          "y->dtype is float64 (expected float32)");

  BAD_FWD(INVALID, tcoll_grad_reduce(NULL, 0, TCOLL_SUM, NULL, &y, &node), "x is NULL");
  BAD_FWD(INVALID, tcoll_grad_reduce(&f.x, -1, TCOLL_SUM, NULL, &y, &node), "dst is -1");
  BAD_FWD(INVALID, tcoll_grad_reduce(&f.x, 0, 99, NULL, &y, &node), "op is 99");
  BAD_FWD(INVALID, tcoll_grad_reduce(&f.ix, 0, TCOLL_AVG, NULL, &y, &node),
          "op avg needs a floating dtype");
  BAD_FWD(INVALID, tcoll_grad_reduce(&f.x, 0, TCOLL_MAX, NULL, &wrong_y, &node),
          "y->dtype is float64");

  BAD_FWD(INVALID, tcoll_grad_gather(&f.x, t_rank, NULL, NULL, &node), "ys is NULL on dst");
  snprintf(needle, sizeof needle, "dst is %d", t_size);
  BAD_FWD(INVALID, tcoll_grad_gather(&f.x, t_size, NULL, ys, &node), needle);
  BAD_FWD(INVALID, tcoll_grad_gather(&spoiled, 0, NULL, ys, &node), "x->dtype is 42");
  if (t_size >= 2) { /* off dst ys is checked too (zeros there) */
    tcoll_tensor_t bys[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
    int dst = t_rank == 0 ? 1 : 0;
    bys[L] = wrong_y;
    snprintf(needle, sizeof needle, "ys[%d]->dtype is float64 (expected float32)", L);
    BAD_FWD(INVALID, tcoll_grad_gather(&f.x, dst, NULL, bys, &node), needle);
    for (int r = 0; r < L; r++) STILL_NULL(bys[r]);
  }

  BAD_FWD(INVALID, tcoll_grad_scatter(NULL, t_rank, NULL, &y, &node), "xs is NULL on src");
  BAD_FWD(INVALID, tcoll_grad_scatter(xs, -1, NULL, &y, &node), "src is -1");
  tcoll_tensor_t ydesc = desc(F32, 2, f.shape, f.dev);
  ydesc.ndim = 12;
  BAD_FWD(INVALID, tcoll_grad_scatter(xs, 0, NULL, &ydesc, &node), "y->ndim is 12");
  xs[L] = spoiled;
  snprintf(needle, sizeof needle, "xs[%d]->dtype is 42", L);
  BAD_FWD(INVALID, tcoll_grad_scatter(xs, t_rank, NULL, &y, &node), needle);
  xs[L] = f.x;

  BAD_FWD(INVALID, tcoll_grad_all_gather(&f.x, NULL, NULL, &node), "ys is NULL (expected");
  BAD_FWD(INVALID, tcoll_grad_all_gather(NULL, NULL, ys, &node), "x is NULL");
  BAD_FWD(INVALID, tcoll_grad_all_gather(&f.x, f.fake, ys, &node),
          not_live(needle, sizeof needle, "comm", f.fake));

  BAD_FWD(INVALID, tcoll_grad_all_gather_into_tensor(&f.x, 2, NULL, &y, &node),
          "gather_dim is 2 (expected -2..1)");
  BAD_FWD(INVALID, tcoll_grad_all_gather_into_tensor(&f.x, -3, NULL, &y, &node),
          "gather_dim is -3");
  BAD_FWD(INVALID, tcoll_grad_all_gather_into_tensor(&f.x, 0, NULL, &wrong_y, &node),
          "y->dtype is float64");

  BAD_FWD(INVALID, tcoll_grad_reduce_scatter(NULL, TCOLL_SUM, NULL, &y, &node), "xs is NULL");
  BAD_FWD(INVALID, tcoll_grad_reduce_scatter(xs, TCOLL_BAND, NULL, &y, &node),
          "op band needs an integer");
  xs[L] = f.ix;
  if (t_size >= 2) {
    snprintf(needle, sizeof needle, "xs[%d] differs from xs[0] in dtype or shape", L);
    BAD_FWD(INVALID, tcoll_grad_reduce_scatter(xs, TCOLL_SUM, NULL, &y, &node), needle);
  }
  xs[L] = f.x;

  BAD_FWD(TCOLL_ERR_UNSUPPORTED,
          tcoll_grad_reduce_scatter_tensor(&f.x, TCOLL_AVG, 0, NULL, &y, &node),
          "Only sum reduce op is supported");
  BAD_FWD(TCOLL_ERR_UNSUPPORTED,
          tcoll_grad_reduce_scatter_tensor(&f.x, TCOLL_MAX, 0, NULL, &y, &node),
          "Only sum reduce op is supported");
  BAD_FWD(INVALID, tcoll_grad_reduce_scatter_tensor(&f.x, TCOLL_SUM, 5, NULL, &y, &node),
          "scatter_dim is 5");
  if (t_size >= 2) {
    snprintf(needle, sizeof needle, "input dimension 1 (3) must be a multiple of group_size %d",
             t_size);
    if (3 % t_size)
      BAD_FWD(INVALID, tcoll_grad_reduce_scatter_tensor(&f.x, TCOLL_SUM, 1, NULL, &y, &node),
              needle);
  }

  BAD_FWD(INVALID, tcoll_grad_all_to_all(NULL, NULL, ys, &node), "xs is NULL");
  BAD_FWD(INVALID, tcoll_grad_all_to_all(xs, NULL, NULL, &node), "ys is NULL");
  tcoll_tensor_t ods[4];
  for (int r = 0; r < 4; r++) ods[r] = desc(F32, 2, f.shape, f.dev);
  ods[L].shape[0] = -1;
  snprintf(needle, sizeof needle, "ys[%d]->shape[0] is -1", L);
  BAD_FWD(INVALID, tcoll_grad_all_to_all(xs, NULL, ods, &node), needle);
  ods[L].shape[0] = f.shape[0];

  int64_t osz[4], isz[4], neg[4];
  for (int r = 0; r < 4; r++) osz[r] = isz[r] = 2, neg[r] = 2;
  isz[0] = 3;
  neg[L] = -2;
  BAD_FWD(INVALID, tcoll_grad_all_to_all_single(&f.x, osz, NULL, NULL, &y, &node),
          "output_split_sizes and input_split_sizes must either be specified together");
  snprintf(needle, sizeof needle, "input_split_sizes sum to %d rows but input has %lld",
           2 * t_size + 1, (long long)f.shape[0]);
  BAD_FWD(INVALID, tcoll_grad_all_to_all_single(&f.x, osz, isz, NULL, &y, &node), needle);
  snprintf(needle, sizeof needle, "output_split_sizes[%d] is -2 (expected >= 0)", L);
  isz[0] = 2;
  BAD_FWD(INVALID, tcoll_grad_all_to_all_single(&f.x, neg, isz, NULL, &y, &node), needle);

  tcoll_redop_t stale_op;
  T_OK(tcoll_redop_create_premul_sum(2.0, &stale_op));
  T_OK(tcoll_redop_destroy(stale_op));
  BAD_FWD(INVALID, tcoll_grad_all_reduce(&f.x, 99, NULL, &y, &node), "op is 99");
  BAD_FWD(INVALID, tcoll_grad_all_reduce(&f.x, stale_op, NULL, &y, &node),
          "live premul_sum handle");
  BAD_FWD(INVALID, tcoll_grad_all_reduce(&f.x, TCOLL_BXOR, NULL, &y, &node),
          "op bxor needs an integer");
  BAD_FWD(INVALID, tcoll_grad_all_reduce(&f.x, TCOLL_MIN, NULL, &wrong_y, &node),
          "y->dtype is float64");
  tcoll_tensor_t ov = f.spare;
  ov.dtype = F32;
  ov.ndim = 2;
  ov.shape[0] = f.shape[0];
  ov.shape[1] = f.shape[1];
  tcoll_tensor_t ov2 = ov;
  ov2.data = (float *)ov.data + 1;
  BAD_FWD(INVALID, tcoll_grad_all_reduce(&ov, TCOLL_MAX, NULL, &ov2, &node), "y (");
  STILL_NULL(y);
  for (int r = 0; r < 4; r++) STILL_NULL(ys[r]);

  /* Valid right after: every forward once, waited, nodes freed. */
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_all_reduce(&f.x, TCOLL_SUM, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  t_check_all("grad_all_reduce forward after bad calls", &y, summed, NULL, 0);
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&y);
  T_OK(tcoll_grad_all_gather_into_tensor(&f.x, 0, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  T_EXPECT(y.shape[0] == gshape[0], "grad_all_gather_into_tensor forward shape");
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&y);
  fx_free(&f);
}
END_TEST

/* A backward that must be refused; grad inputs given with data == NULL stay NULL. */
START_TEST(grad_backward) {
  fx_t f;
  fx_init(&f);
  char needle[200];
  tcoll_tensor_t y = t_empty(), gin = t_empty();
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_all_reduce(&f.x, TCOLL_SUM, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  tcoll_tensor_t g = t_alloc(F32, 2, f.shape);
  double one = 1.0;
  t_set_all(&g, constant, &one);

  BAD(tcoll_grad_backward(NULL, &g, 1, &gin, 1),
      "node is NULL (expected a node from a tcoll_grad_* forward)");
  BAD(tcoll_grad_backward(node, &g, -1, &gin, 1),
      "n_grad_outputs is -1 and n_grad_inputs is 1 (expected >= 0)");
  BAD(tcoll_grad_backward(node, &g, 1, &gin, -1), "n_grad_inputs is -1");
  BAD(tcoll_grad_backward(node, &g, 2, &gin, 1), "n_grad_outputs is 2 (expected 1 for all_reduce)");
  BAD(tcoll_grad_backward(node, &g, 0, &gin, 1), "n_grad_outputs is 0 (expected 1 for all_reduce)");
  BAD(tcoll_grad_backward(node, &g, 1, &gin, 0), "n_grad_inputs is 0 (expected 1 for all_reduce)");
  BAD(tcoll_grad_backward(node, NULL, 1, &gin, 1), "grad_outputs is NULL (expected 1 tensors)");
  BAD(tcoll_grad_backward(node, &g, 1, NULL, 1), "grad_inputs is NULL (expected 1 tensors)");
  tcoll_tensor_t gb = g;
  gb.shape[0] += 1;
  snprintf(needle, sizeof needle,
           "grad_outputs[0]->shape is [%lld, 3] (expected [%lld, 3], as in the forward)",
           (long long)f.shape[0] + 1, (long long)f.shape[0]);
  BAD(tcoll_grad_backward(node, &gb, 1, &gin, 1), needle);
  gb = g;
  gb.dtype = F64;
  BAD(tcoll_grad_backward(node, &gb, 1, &gin, 1),
      "grad_outputs[0]->dtype is float64 (expected float32, as in the forward)");
  gb = g;
  gb.device = f.other_dev;
  snprintf(needle, sizeof needle, "grad_outputs[0]->device is %d", f.other_dev);
  BAD(tcoll_grad_backward(node, &gb, 1, &gin, 1), needle);
  gb = g;
  gb.data = NULL;
  BAD(tcoll_grad_backward(node, &gb, 1, &gin, 1), "grad_outputs[0]->data is NULL");
  gb = g;
  gb.ndim = 9;
  BAD(tcoll_grad_backward(node, &gb, 1, &gin, 1), "grad_outputs[0]->ndim is 9");
  tcoll_tensor_t gi_wrong = tcoll_tensor_make(f.spare.data, F32, 1, f.shape, f.dev);
  BAD(tcoll_grad_backward(node, &g, 1, &gi_wrong, 1), "grad_inputs[0]->shape is [");
  gi_wrong = g;
  gi_wrong.data = (float *)g.data + 1;
  BAD(tcoll_grad_backward(node, &g, 1, &gi_wrong, 1), "overlaps grad_outputs[0]");
  STILL_NULL(gin);

  /* List forms: one tensor per rank. */
  tcoll_grad_node_t *ln = NULL;
  tcoll_tensor_t ys[4] = {t_empty(), t_empty(), t_empty(), t_empty()}, gs[4];
  T_OK(tcoll_grad_all_gather(&f.x, NULL, ys, &ln));
  T_OK(tcoll_wait_all());
  for (int r = 0; r < 4; r++) gs[r] = g;
  snprintf(needle, sizeof needle, "n_grad_outputs is %d (expected %d for all_gather)", t_size + 1,
           t_size);
  BAD(tcoll_grad_backward(ln, gs, t_size + 1, &gin, 1), needle);
  if (t_size >= 2) {
    gs[t_size - 1].dtype = F64;
    snprintf(needle, sizeof needle, "grad_outputs[%d]->dtype is float64", t_size - 1);
    BAD(tcoll_grad_backward(ln, gs, t_size, &gin, 1), needle);
    gs[t_size - 1] = g;
  }
  tcoll_grad_node_free(ln);
  for (int r = 0; r < t_size; r++) tcoll_tensor_free(&ys[r]);
  /* scatter on src needs size grad_inputs. */
  tcoll_tensor_t xs[4] = {f.x, f.x, f.x, f.x},
                 sy = desc(F32, 2, f.shape, f.dev); /* the piece, on every rank */
  T_OK(tcoll_grad_scatter(xs, 0, NULL, &sy, &ln));
  T_OK(tcoll_wait(sy.data));
  if (t_size >= 2) { /* on src and off it (where 0 is allowed too) */
    snprintf(needle, sizeof needle, "n_grad_inputs is 1 (expected %d for scatter)", t_size);
    BAD(tcoll_grad_backward(ln, &g, 1, &gin, 1), needle);
  }
  tcoll_grad_node_free(ln);
  tcoll_tensor_free(&sy);

  /* Ops without a gradient: TCOLL_ERR_UNSUPPORTED at backward. */
  tcoll_tensor_t iy = t_empty(), ig = t_alloc(I32, 2, f.shape);
  T_OK(tcoll_grad_all_reduce(&f.ix, TCOLL_BAND, NULL, &iy, &ln));
  T_OK(tcoll_wait(iy.data));
  BAD_ST(TCOLL_ERR_UNSUPPORTED, tcoll_grad_backward(ln, &ig, 1, &gin, 1),
         "all_reduce with op band has no gradient (bitwise ops are not differentiable)");
  tcoll_grad_node_free(ln);
  tcoll_tensor_free(&iy);
  T_OK(tcoll_grad_all_reduce(&f.ix, TCOLL_MAX, NULL, &iy, &ln));
  T_OK(tcoll_wait(iy.data));
  BAD_ST(TCOLL_ERR_UNSUPPORTED, tcoll_grad_backward(ln, &ig, 1, &gin, 1),
         "the gradient of all_reduce with op max needs a floating dtype");
  tcoll_grad_node_free(ln);
  tcoll_tensor_free(&iy);
  for (int r = 0; r < 4; r++) xs[r] = f.x;
  T_OK(tcoll_grad_reduce_scatter(xs, TCOLL_MAX, NULL, &sy, &ln));
  T_OK(tcoll_wait(sy.data));
  tcoll_tensor_t rs_gin[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
  BAD_ST(TCOLL_ERR_UNSUPPORTED, tcoll_grad_backward(ln, &g, 1, rs_gin, t_size),
         "the gradient of reduce_scatter is defined for sum, avg and premul_sum, not max");
  for (int r = 0; r < 4; r++) STILL_NULL(rs_gin[r]);
  tcoll_grad_node_free(ln);
  tcoll_tensor_free(&sy);
  tcoll_tensor_free(&ig);

  /* A node whose communicator was freed, and a freed node. */
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_split(NULL, 0, t_rank, &c));
  T_OK(tcoll_grad_all_reduce(&f.x, TCOLL_SUM, c, &sy, &ln));
  T_OK(tcoll_wait(sy.data));
  tcoll_comm_t *gone = c;
  T_OK(tcoll_comm_free(&c));
  BAD(tcoll_grad_backward(ln, &g, 1, &gin, 1),
      not_live(needle, sizeof needle, "the node's communicator", gone));
  tcoll_grad_node_free(ln);
  tcoll_tensor_free(&sy);
  T_OK(tcoll_grad_all_reduce(&f.x, TCOLL_SUM, NULL, &sy, &ln));
  T_OK(tcoll_wait(sy.data));
  tcoll_grad_node_free(ln);
  snprintf(needle, sizeof needle, "node %p is not a live grad node", (void *)ln);
  BAD(tcoll_grad_backward(ln, &g, 1, &gin, 1), needle);
  tcoll_grad_node_free(ln); /* ignored, with a warning */
  ncases++;
  tcoll_grad_node_free(NULL);
  ncases++;
  tcoll_tensor_free(&sy);
  STILL_NULL(gin);

  /* Valid right after: the backward of all_reduce SUM is an all_reduce SUM of the grads. */
  T_OK(tcoll_grad_backward(node, &g, 1, &gin, 1));
  T_OK(tcoll_wait(gin.data));
  double want = t_size;
  t_check_all("grad_backward after bad calls", &gin, constant, &want, 0);
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&gin);
  tcoll_tensor_free(&g);
  tcoll_tensor_free(&y);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ shapes, wait / test / query */

START_TEST(shapes) {
  int64_t s23[2] = {6, 3}, out[TCOLL_MAX_DIMS];
  tcoll_tensor_t t = desc(F32, 2, s23, TCOLL_HOST), bad = t,
                 scalar = desc(F32, 0, NULL, TCOLL_HOST);
  bad.dtype = (tcoll_dtype_t)42;
  for (int i = 0; i < TCOLL_MAX_DIMS; i++) out[i] = -77;
  BAD(tcoll_all_gather_shape(NULL, 0, 2, out), "in is NULL");
  BAD(tcoll_all_gather_shape(&bad, 0, 2, out), "in->dtype is 42");
  BAD(tcoll_all_gather_shape(&t, 0, 0, out), "group_size is 0 (expected >= 1)");
  BAD(tcoll_all_gather_shape(&t, 0, -4, out), "group_size is -4");
  BAD(tcoll_all_gather_shape(&t, 0, 2, NULL), "shape is NULL (expected room for 2 sizes)");
  BAD(tcoll_all_gather_shape(&t, 2, 2, out), "gather_dim is 2 (expected -2..1)");
  BAD(tcoll_all_gather_shape(&scalar, 0, 2, out), "gather_dim needs a tensor with at least 1 dim");
  int64_t big[2] = {INT64_C(1) << 62, 0};
  tcoll_tensor_t bt = desc(F32, 2, big, TCOLL_HOST);
  BAD(tcoll_all_gather_shape(&bt, 0, 4, out), "gathered dim 0 (4611686018427387904 x 4) overflows");
  BAD(tcoll_reduce_scatter_shape(NULL, 0, 2, out), "in is NULL");
  BAD(tcoll_reduce_scatter_shape(&t, 0, 0, out), "group_size is 0 (expected >= 1)");
  BAD(tcoll_reduce_scatter_shape(&t, 0, 2, NULL), "shape is NULL");
  BAD(tcoll_reduce_scatter_shape(&t, -3, 2, out), "scatter_dim is -3 (expected -2..1)");
  BAD(tcoll_reduce_scatter_shape(&t, 1, 2, out),
      "input dimension 1 (3) must be a multiple of group_size 2");
  BAD(tcoll_reduce_scatter_shape(&scalar, 0, 1, out),
      "scatter_dim needs a tensor with at least 1 dim");
  for (int i = 0; i < TCOLL_MAX_DIMS; i++)
    T_EXPECT(out[i] == -77, "a refused shape function wrote shape[%d]", i);
  /* Valid right after. */
  T_OK(tcoll_all_gather_shape(&t, -1, 3, out));
  T_EXPECT(out[0] == 6 && out[1] == 9, "all_gather_shape gives [%lld, %lld]", (long long)out[0],
           (long long)out[1]);
  T_OK(tcoll_reduce_scatter_shape(&t, 0, 3, out));
  T_EXPECT(out[0] == 2 && out[1] == 3, "reduce_scatter_shape gives [%lld, %lld]", (long long)out[0],
           (long long)out[1]);
}
END_TEST

/* Not bad input, but its edge: empty tensors whose other sizes are huge are valid, and every
 * op on them completes at once (no overflow, no loop over their empty outer runs). */
START_TEST(empty_huge) {
  fx_t f;
  fx_init(&f);
  int64_t big = INT64_C(1) << 40, s1[3] = {big, 0, 3},
          s2[3] = {INT64_C(1) << 62, INT64_C(1) << 62, 0},
          s3[3] = {0, INT64_C(1) << 62, INT64_C(1) << 62};
  tcoll_tensor_t e1 = desc(F32, 3, s1, f.dev), e2 = desc(F64, 3, s2, f.dev),
                 e3 = desc(I32, 3, s3, f.dev);
  tcoll_tensor_t o[8];
  for (int k = 0; k < 8; k++) o[k] = t_empty();
  T_OK(tcoll_reduce_scatter(&e1, TCOLL_SUM, 1, NULL, &o[0]));
  T_OK(tcoll_reduce_scatter(&e2, f.dev == TCOLL_HOST ? TCOLL_AVG : TCOLL_SUM, 2, NULL, &o[1]));
  T_OK(tcoll_all_gather(&e1, 1, NULL, &o[2]));
  T_OK(tcoll_all_to_all_single(&e3, NULL, NULL, NULL, &o[3]));
  int64_t s4[3] = {0, INT64_C(3) << 61, 1}; /* rows of more than 2^63 bytes: no rank can hold one */
  tcoll_tensor_t e4 = desc(F32, 3, s4, f.dev);
  T_OK(tcoll_all_to_all_single(&e4, NULL, NULL, NULL, &o[6]));
  T_OK(tcoll_wait_timeout(o[6].data, 60.0));
  T_OK(tcoll_shard_dim_all_to_all(&e1, 0, 1, NULL, &o[4]));
  tcoll_tensor_t mix[2] = {f.x, e1}, mo[2] = {t_empty(), t_empty()};
  int dims[2] = {0, 1};
  T_OK(tcoll_reduce_scatter_coalesced(mix, 2, TCOLL_SUM, dims, NULL, mo));
  for (int k = 0; k < 5; k++) T_OK(tcoll_wait_timeout(o[k].data, 60.0));
  for (int k = 0; k < 2; k++) T_OK(tcoll_wait_timeout(mo[k].data, 60.0));
  T_EXPECT(o[2].shape[0] == big && o[2].shape[1] == 0 && tcoll_tensor_nbytes(&o[2]) == 0,
           "all_gather of an empty tensor");
  int devs[2] = {TCOLL_HOST, f.dev};
  tcoll_tensor_t lo[2] = {t_empty(), t_empty()};
  int64_t smax[2] = {INT64_MAX, 0}; /* torch.chunk's split of INT64_MAX rows */
  tcoll_tensor_t emax = desc(F32, 2, smax, f.dev), mo2[2] = {t_empty(), t_empty()};
  T_OK(tcoll_local_scatter(&emax, devs, 2, NULL, 0, mo2));
  T_EXPECT(mo2[0].shape[0] == INT64_C(1) << 62 && mo2[1].shape[0] == (INT64_C(1) << 62) - 1,
           "chunks of INT64_MAX rows");
  for (int k = 0; k < 2; k++) tcoll_tensor_free(&mo2[k]);
  T_OK(tcoll_local_scatter(&e1, devs, 2, NULL, 2, lo));
  T_OK(tcoll_local_gather(lo, 2, 2, f.dev, &o[5]));
  T_EXPECT(o[5].shape[2] == 3 && tcoll_tensor_numel(&o[5]) == 0,
           "local scatter + gather of an empty tensor");
  for (int k = 0; k < 8; k++) tcoll_tensor_free(&o[k]);
  for (int k = 0; k < 2; k++) tcoll_tensor_free(&mo[k]), tcoll_tensor_free(&lo[k]);
  fx_free(&f);
}
END_TEST

START_TEST(waits) {
  fx_t f;
  fx_init(&f);
  int unrelated = 0;
  tcoll_tensor_t none = t_empty();
  HARMLESS(tcoll_wait(NULL));
  HARMLESS(tcoll_wait(&unrelated));
  HARMLESS(tcoll_wait_tensor(&none));
  HARMLESS(tcoll_wait_timeout(NULL, -1.0));
  HARMLESS(tcoll_wait_timeout(&unrelated, INFINITY));
  HARMLESS(tcoll_test(NULL));
  HARMLESS(tcoll_test(&unrelated));
  HARMLESS(tcoll_query(NULL));
  HARMLESS(tcoll_query(&unrelated));
  HARMLESS(tcoll_wait_all());
  BAD(tcoll_wait_tensor(NULL), "t is NULL (expected a tensor)");
  BAD(tcoll_wait_timeout(&unrelated, NAN), "seconds is NaN (expected a number)");
  /* On a pending buffer: a refused wait leaves it pending; a valid one completes it. */
  tcoll_tensor_t y = t_empty();
  T_OK(tcoll_all_reduce(&f.x, TCOLL_SUM, NULL, &y));
  BAD(tcoll_wait_timeout(y.data, NAN), "seconds is NaN");
  T_EXPECT(tcoll_pending_count() == 1, "a refused wait completed the work");
  T_OK(tcoll_wait_timeout((char *)y.data + 4, 60.0)); /* a pointer into the pending buffer */
  t_check_all("wait after bad calls", &y, summed, NULL, 0);
  BAD_VALUE(size_t, tcoll_pending_count(), v == 0, "%zu");
  tcoll_tensor_free(&y);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ lifetime misuse */

/* Finalizes tcoll (the harness keeps MPI), checks that every kind of call is refused with
 * TCOLL_ERR_STATE, then initializes it again. Runs last but one. */
START_TEST(lifetime) {
  T_EXPECT(tcoll_initialized() == 1, "tcoll is not initialized at the start");
  T_OK(tcoll_init(NULL, NULL)); /* counted: the matching finalize keeps tcoll up */
  T_OK(tcoll_finalize());
  T_EXPECT(tcoll_initialized() == 1, "init + finalize did not leave tcoll initialized");
  MPI_Barrier(MPI_COMM_WORLD);
  T_OK(tcoll_finalize());
  T_EXPECT(tcoll_initialized() == 0, "tcoll still initialized after the last tcoll_finalize");
  BAD_VALUE(void *, (void *)tcoll_comm_world(), v == NULL, "%p");
  const char *ni = "tcoll is not initialized";
  BAD_ST(TCOLL_ERR_STATE, tcoll_finalize(),
         "tcoll is not initialized (tcoll_finalize without tcoll_init)");
  float buf[6] = {0};
  int64_t six[1] = {6};
  tcoll_tensor_t x = tcoll_tensor_make(buf, F32, 1, six, TCOLL_HOST), y = t_empty();
  tcoll_comm_t *c = NULL;
  tcoll_mesh_t *m = NULL;
  tcoll_unique_id_t id;
  tcoll_grad_node_t *node = NULL;
  int d1[1] = {t_size};
  memset(&id, 0, sizeof id);
  BAD_ST(TCOLL_ERR_STATE, tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y), ni);
  BAD_ST(TCOLL_ERR_STATE, tcoll_broadcast(&x, 0, NULL, &x), ni);
  BAD_ST(TCOLL_ERR_STATE, tcoll_comm_split(NULL, 0, 0, &c), ni);
  BAD_ST(TCOLL_ERR_STATE, tcoll_comm_from_mpi(MPI_COMM_WORLD, &c), ni);
  BAD_ST(TCOLL_ERR_STATE, tcoll_mesh_create(NULL, 1, d1, &m), ni);
  BAD_ST(TCOLL_ERR_STATE, tcoll_get_unique_id(&id), ni);
  BAD_ST(TCOLL_ERR_STATE, tcoll_comm_init_rank(&c, t_size, id.bytes, sizeof id.bytes, t_rank), ni);
  BAD_ST(TCOLL_ERR_STATE, tcoll_set_stream(0, NULL), ni);
  BAD_ST(TCOLL_ERR_STATE, tcoll_tensor_copy_async(&x, &x, NULL), ni);
  BAD_ST(TCOLL_ERR_STATE, tcoll_local_gather(&x, 1, 0, TCOLL_HOST, &y), ni);
  BAD_ST(TCOLL_ERR_STATE, tcoll_multi_all_reduce(&x, &y, 1, TCOLL_SUM, NULL, NULL), ni);
  BAD_ST(TCOLL_ERR_STATE, tcoll_grad_all_reduce(&x, TCOLL_SUM, NULL, &y, &node), ni);
  BAD_ST(TCOLL_ERR_STATE, tcoll_grad_backward((tcoll_grad_node_t *)&id, &x, 1, &y, 1), ni);
  STILL_NULL(y);
  T_EXPECT(c == NULL && m == NULL && node == NULL, "a refused call wrote an output");
  /* Valid right after: initialize again, use, and stay initialized for the harness. */
  T_OK(tcoll_init(NULL, NULL));
  T_EXPECT(tcoll_initialized() == 1 && tcoll_comm_world() != NULL,
           "tcoll_init after tcoll_finalize");
  for (int i = 0; i < 6; i++) buf[i] = (float)(t_rank + 1) * (float)(i % 7 + 1);
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_wait(y.data));
  t_check_all("all_reduce after re-initialization", &y, summed, NULL, 0);
  tcoll_tensor_free(&y);
}
END_TEST

START_TEST(report) {
  t_heap_report("badinput");
  int lo = 0, hi = 0;
  MPI_Allreduce(&ncases, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&ncases, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (t_rank == 0) printf("badinput: %d bad-input cases per rank at %d rank(s)\n", ncases, t_size);
  T_EXPECT(ncases > 0 && lo == hi, "ranks ran different numbers of cases (%d..%d)", lo, hi);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("badinput");
  TCase *tc = t_tcase("badinput");
  tcase_add_test(tc, tensors);
  tcase_add_test(tc, dtypes_redops);
  tcase_add_test(tc, config);
  tcase_add_test(tc, communicators);
  tcase_add_test(tc, meshes);
  tcase_add_test(tc, bootstrap);
  tcase_add_test(tc, streams);
  tcase_add_test(tc, local_ops);
  tcase_add_test(tc, multi_ops);
  tcase_add_test(tc, grad_forwards);
  tcase_add_test(tc, grad_backward);
  tcase_add_test(tc, shapes);
  tcase_add_test(tc, empty_huge);
  tcase_add_test(tc, waits);
  tcase_add_test(tc, lifetime);
  tcase_add_test(tc, report);
  suite_add_tcase(s, tc);
  return s;
}
