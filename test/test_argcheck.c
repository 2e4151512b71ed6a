/* Bad arguments for every collective: each kind returns TCOLL_ERR_INVALID_ARGUMENT with a
 * message naming the argument and its value, starts no communication (no MPI call at all,
 * counted through the profiling interface), leaves nothing pending, allocates nothing (outputs
 * with data == NULL stay NULL; the heap in use is unchanged), and a valid call works right
 * after. Rank 0 prints how many bad-input cases ran. */
#include "harness.h"
#include "mpi_count.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define F32 TCOLL_FLOAT32
#define I32 TCOLL_INT32

static int ncases;


/* One refused call. heap: also check that the heap in use did not change (not for calls that
 * get as far as the registry, whose pooled works may keep grown tables). */
#define BAD_(heap, call, needle)                                                                                     \
  do {                                                                                                               \
    size_t t_p0_ = tcoll_pending_count();                                                                            \
    t_mpi_window_t t_w_;                                                                                             \
    t_mpi_window_open(&t_w_);                                                                                        \
    size_t t_h0_ = t_heap_in_use();                                                                                  \
    int t_rc_ = (call);                                                                                              \
    size_t t_h1_ = t_heap_in_use();                                                                                  \
    T_EXPECT(t_rc_ == TCOLL_ERR_INVALID_ARGUMENT, "%s returned %s (expected TCOLL_ERR_INVALID_ARGUMENT): %s", #call, \
             tcoll_status_string(t_rc_), tcoll_last_error());                                                        \
    T_EXPECT(t_contains(tcoll_last_error(), needle), "%s: message \"%s\" lacks \"%s\"", #call, tcoll_last_error(),    \
             needle);                                                                                                \
    T_EXPECT(tcoll_pending_count() == t_p0_, "%s left %zu buffer(s) pending", #call, tcoll_pending_count() - t_p0_); \
    T_EXPECT(t_mpi_window_calls(&t_w_) == 0, "%s made %ld MPI call(s)", #call, t_mpi_window_calls(&t_w_));           \
    if (heap && t_heap_measurable())                                                                                 \
      T_EXPECT(t_h1_ == t_h0_, "%s: the heap in use changed by %ld bytes", #call, (long)t_h1_ - (long)t_h0_);        \
    if (t_rc_ == TCOLL_SUCCESS) tcoll_wait_all();                                                                    \
    ncases++;                                                                                                        \
  } while (0)
#define BAD(call, needle) BAD_(1, call, needle)
#define BAD_NOHEAP(call, needle) BAD_(0, call, needle)
#define STILL_NULL(t) T_EXPECT((t).data == NULL, "a refused call allocated %s", #t)

/* ------------------------------------------------------------------ values */

/* Rank r holds (r + 1) * (i % 7 + 1); S = size(size+1)/2. */
static double rank_val(int64_t i, void *ctx) {
  (void)ctx;
  return (double)(t_rank + 1) * (double)(i % 7 + 1);
}
static double S(void) { return (double)(t_size * (t_size + 1) / 2); }
static double sum_val(int64_t i, void *ctx) {
  (void)ctx;
  return S() * (double)(i % 7 + 1);
}
/* Rank r's value at index i of a tensor of n elements, concatenated over ranks. */
static double gathered_val(int64_t i, void *ctx) {
  int64_t n = *(int64_t *)ctx;
  return (double)(i / n + 1) * (double)(i % n % 7 + 1);
}

/* ------------------------------------------------------------------ fixture */

typedef struct {
  int dev, ndev, other_dev;   /* other_dev: another valid device, or a nonexistent one */
  int64_t rows, n;            /* in is [rows, 3], rows = 2 * size; n = its numel */
  tcoll_tensor_t in, iin;     /* float32 and int32, rank_val */
  tcoll_tensor_t big;         /* float32 storage for overlapping views: in, then room */
  tcoll_tensor_t spare;       /* data for bad outputs (never written) */
  tcoll_comm_t *stale;        /* a freed communicator */
  int not_a_comm;
  tcoll_redop_t stale_premul, premul;
} fx_t;

static void fx_init(fx_t *f) {
  memset(f, 0, sizeof *f);
  f->dev = t_device();
  f->ndev = tcoll_device_count();
  f->other_dev = f->dev != TCOLL_HOST ? TCOLL_HOST : f->ndev > 0 ? 0 : f->ndev;
  f->rows = 2 * t_size;
  f->n = f->rows * 3;
  int64_t shape[2] = {f->rows, 3}, bshape[1] = {f->n * (t_size + 3)}, sshape[1] = {4096};
  f->in = t_alloc(F32, 2, shape);
  f->iin = t_alloc(I32, 2, shape);
  f->big = t_alloc(F32, 1, bshape);
  f->spare = t_alloc(TCOLL_FLOAT64, 1, sshape);
  t_set_all(&f->in, rank_val, NULL);
  t_set_all(&f->iin, rank_val, NULL);
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_split(NULL, 0, t_rank, &c));
  f->stale = c;
  T_OK(tcoll_comm_free(&c)); /* no communicator is created after this in a test */
  T_OK(tcoll_redop_create_premul_sum(3.0, &f->stale_premul));
  T_OK(tcoll_redop_destroy(f->stale_premul));
  T_OK(tcoll_redop_create_premul_sum(0.5, &f->premul));
}

static void fx_free(fx_t *f) {
  tcoll_tensor_free(&f->in);
  tcoll_tensor_free(&f->iin);
  tcoll_tensor_free(&f->big);
  tcoll_tensor_free(&f->spare);
  tcoll_redop_destroy(f->premul);
}

/* A view of big: numel elements starting at element off, shaped like `like` (same dtype). */
static tcoll_tensor_t big_view(const fx_t *f, int64_t off, int ndim, const int64_t *shape) {
  return tcoll_tensor_make((float *)f->big.data + off, F32, ndim, shape, f->dev);
}

typedef struct {
  tcoll_tensor_t t;
  char needle[128];
} variant_t;
#define MAX_VARIANTS 16

/* Every way to spoil a valid tensor (ndim 2, with data): as an input named `name`. */
static int spoil_in(const fx_t *f, const tcoll_tensor_t *good, const char *name, variant_t *v) {
  int n = 0;
#define V(change, ...)                                                                                               \
  do {                                                                                                               \
    v[n].t = *good;                                                                                                  \
    tcoll_tensor_t *t_ = &v[n].t;                                                                                    \
    change;                                                                                                          \
    snprintf(v[n].needle, sizeof v[n].needle, __VA_ARGS__);                                                          \
    n++;                                                                                                             \
  } while (0)
  V(t_->dtype = (tcoll_dtype_t)42, "%s->dtype is 42", name);
  V(t_->dtype = (tcoll_dtype_t)-1, "%s->dtype is -1", name);
  V(t_->ndim = TCOLL_MAX_DIMS + 1, "%s->ndim is %d", name, TCOLL_MAX_DIMS + 1);
  V(t_->ndim = -1, "%s->ndim is -1", name);
  V(t_->shape[1] = -3, "%s->shape[1] is -3", name);
  V(t_->shape[0] = -1, "%s->shape[0] is -1", name);
  V(t_->data = NULL, "%s->data is NULL with %lld elements", name, (long long)tcoll_tensor_numel(good));
  V(t_->device = f->ndev, "%s->device is %d", name, f->ndev);
  V(t_->device = -5, "%s->device is -5", name);
  V((t_->shape[0] = INT64_C(1) << 40, t_->shape[1] = INT64_C(1) << 40), "%s has more than 2^63 bytes", name);
  return n;
}

/* Every way to give a wrong output with data, when `want` (dtype, ndim, shape, device) is
 * expected: named `name`. Data points at spare storage large enough for any of them. */
static int spoil_out(const fx_t *f, const tcoll_tensor_t *want, const char *name, variant_t *v) {
  int n = 0;
  tcoll_tensor_t with_data = *want;
  with_data.data = f->spare.data;
  const tcoll_tensor_t *good = &with_data;
  tcoll_dtype_t other = want->dtype == TCOLL_FLOAT64 ? TCOLL_FLOAT32 : TCOLL_FLOAT64;
  V(t_->dtype = other, "%s->dtype is %s (expected %s)", name, tcoll_dtype_name(other), tcoll_dtype_name(want->dtype));
  V(t_->dtype = (tcoll_dtype_t)42, "%s->dtype is 42", name);
  V(t_->shape[0] += 1, "%s->shape is [", name);
  V((t_->shape[t_->ndim] = 1, t_->ndim += 1), "%s->shape is [", name); /* same numel, another shape */
  V(t_->ndim = want->ndim - 1, "%s->shape is [", name);
  V(t_->shape[0] = -1, "%s->shape[0] is -1", name);
  V(t_->device = f->other_dev, "%s->device is %d", name, f->other_dev);
  V(t_->ndim = TCOLL_MAX_DIMS + 1, "%s->ndim is %d", name, TCOLL_MAX_DIMS + 1);
#undef V
  return n;
}

static tcoll_tensor_t desc(tcoll_dtype_t dt, int ndim, const int64_t *shape, int device) {
  return tcoll_tensor_make(NULL, dt, ndim, shape, device);
}

/* A pointer that is not a communicator, and a freed communicator. */
#define BAD_COMMS(f, CALL_WITH_COMM)                                                                                 \
  do {                                                                                                               \
    tcoll_comm_t *t_fake_ = (tcoll_comm_t *)&(f)->not_a_comm;                                                        \
    char t_needle_[96];                                                                                              \
    snprintf(t_needle_, sizeof t_needle_, "comm %p is not a live tcoll communicator", (void *)t_fake_);              \
    BAD(CALL_WITH_COMM(t_fake_), t_needle_);                                                                         \
    snprintf(t_needle_, sizeof t_needle_, "comm %p is not a live tcoll communicator", (void *)(f)->stale);           \
    BAD(CALL_WITH_COMM((f)->stale), t_needle_);                                                                      \
  } while (0)

/* ------------------------------------------------------------------ all_reduce */

START_TEST(all_reduce) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  int nv = spoil_in(&f, &f.in, "in", v);
  tcoll_tensor_t o = t_empty();
  for (int k = 0; k < nv; k++) BAD(tcoll_all_reduce(&v[k].t, TCOLL_SUM, NULL, &o), v[k].needle);
  BAD(tcoll_all_reduce(NULL, TCOLL_SUM, NULL, &o), "in is NULL");
  /* Ops the dtype does not take, unknown and stale ops. */
  BAD(tcoll_all_reduce(&f.iin, TCOLL_AVG, NULL, &o), "op avg needs a floating dtype");
  BAD(tcoll_all_reduce(&f.iin, f.premul, NULL, &o), "op premul_sum needs a floating dtype");
  BAD(tcoll_all_reduce(&f.in, TCOLL_BAND, NULL, &o), "op band needs an integer or bool dtype, got float32");
  BAD(tcoll_all_reduce(&f.in, TCOLL_BOR, NULL, &o), "op bor needs an integer");
  BAD(tcoll_all_reduce(&f.in, TCOLL_BXOR, NULL, &o), "op bxor needs an integer");
  BAD(tcoll_all_reduce(&f.in, 99, NULL, &o), "op is 99");
  BAD(tcoll_all_reduce(&f.in, -1, NULL, &o), "op is -1");
  BAD(tcoll_all_reduce(&f.in, f.stale_premul, NULL, &o), "live premul_sum handle");
  /* Outputs. */
  tcoll_tensor_t want = desc(F32, 2, f.in.shape, f.dev);
  nv = spoil_out(&f, &want, "out", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_all_reduce(&f.in, TCOLL_SUM, NULL, &v[k].t), v[k].needle);
  BAD(tcoll_all_reduce(&f.in, TCOLL_SUM, NULL, NULL), "out is NULL");
  /* Overlapping input and output that are not the same buffer (in place is). */
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 1, 2, f.in.shape);
  BAD(tcoll_all_reduce(&ov_in, TCOLL_SUM, NULL, &ov_out), "overlaps");
  ov_out = big_view(&f, f.n - 1, 2, f.in.shape);
  BAD(tcoll_all_reduce(&ov_in, TCOLL_SUM, NULL, &ov_out), "out (");
#define CALL(c) tcoll_all_reduce(&f.in, TCOLL_SUM, c, &o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o);
  /* A valid call right after, out of place and in place. */
  T_OK(tcoll_all_reduce(&f.in, TCOLL_SUM, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("all_reduce after bad calls", &o, sum_val, NULL, 0);
  T_OK(tcoll_all_reduce(&ov_in, TCOLL_SUM, NULL, &ov_in));
  T_OK(tcoll_wait(ov_in.data));
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

START_TEST(all_reduce_coalesced) {
  fx_t f;
  fx_init(&f);
  tcoll_tensor_t in[2] = {f.in, f.in}, o[2] = {t_empty(), t_empty()};
  variant_t v[MAX_VARIANTS];
  int nv = spoil_in(&f, &f.in, "in[1]", v);
  for (int k = 0; k < nv; k++) {
    in[1] = v[k].t;
    BAD(tcoll_all_reduce_coalesced(in, 2, TCOLL_SUM, NULL, o), v[k].needle);
  }
  in[1] = f.in;
  BAD(tcoll_all_reduce_coalesced(in, -1, TCOLL_SUM, NULL, o), "n is -1");
  BAD(tcoll_all_reduce_coalesced(NULL, 2, TCOLL_SUM, NULL, o), "in is NULL");
  BAD(tcoll_all_reduce_coalesced(in, 2, TCOLL_SUM, NULL, NULL), "out is NULL");
  BAD(tcoll_all_reduce_coalesced(in, 0, 77, NULL, o), "op is 77");
  in[1] = f.iin;
  BAD(tcoll_all_reduce_coalesced(in, 2, TCOLL_AVG, NULL, o), "op avg needs a floating dtype (float16, bfloat16, float32, float64), got int32");
  BAD(tcoll_all_reduce_coalesced(in, 2, TCOLL_BAND, NULL, o), "op band needs an integer or bool dtype, got float32");
  BAD(tcoll_all_reduce_coalesced(in, 2, f.stale_premul, NULL, o), "live premul_sum handle");
  in[1] = f.in;
  in[1].device = f.other_dev;
  BAD(tcoll_all_reduce_coalesced(in, 2, TCOLL_SUM, NULL, o), "in[1]->device is");
  in[1] = f.in;
  tcoll_tensor_t want = desc(F32, 2, f.in.shape, f.dev);
  nv = spoil_out(&f, &want, "out[1]", v);
  for (int k = 0; k < nv; k++) {
    tcoll_tensor_t bo[2] = {t_empty(), v[k].t};
    BAD(tcoll_all_reduce_coalesced(in, 2, TCOLL_SUM, NULL, bo), v[k].needle);
    STILL_NULL(bo[0]);
  }
  /* An output overlapping another input; two outputs overlapping each other. */
  tcoll_tensor_t ov_in[2] = {big_view(&f, 0, 2, f.in.shape), f.in};
  tcoll_tensor_t ov_out[2] = {t_empty(), big_view(&f, 3, 2, f.in.shape)};
  BAD(tcoll_all_reduce_coalesced(ov_in, 2, TCOLL_SUM, NULL, ov_out), "out[1] (");
  BAD(tcoll_all_reduce_coalesced(ov_in, 2, TCOLL_SUM, NULL, ov_out), "overlaps in[0]");
  STILL_NULL(ov_out[0]);
  tcoll_tensor_t two[2] = {big_view(&f, f.n * 2, 2, f.in.shape), big_view(&f, f.n * 2 + 5, 2, f.in.shape)};
  tcoll_tensor_t three_in[3] = {f.in, f.in, f.in}, three_out[3] = {t_empty(), two[0], two[1]};
  BAD_NOHEAP(tcoll_all_reduce_coalesced(three_in, 3, TCOLL_SUM, NULL, three_out), "overlaps");
  STILL_NULL(three_out[0]);
#define CALL(c) tcoll_all_reduce_coalesced(in, 2, TCOLL_SUM, c, o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o[0]);
  STILL_NULL(o[1]);
  T_OK(tcoll_all_reduce_coalesced(in, 2, TCOLL_SUM, NULL, o));
  T_OK(tcoll_wait_all());
  t_check_all("all_reduce_coalesced after bad calls", &o[1], sum_val, NULL, 0);
  tcoll_tensor_free(&o[0]);
  tcoll_tensor_free(&o[1]);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ all_gather */

START_TEST(all_gather) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  tcoll_tensor_t o = t_empty();
  int nv = spoil_in(&f, &f.in, "in", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_all_gather(&v[k].t, 0, NULL, &o), v[k].needle);
  BAD(tcoll_all_gather(NULL, 0, NULL, &o), "in is NULL");
  BAD(tcoll_all_gather(&f.in, 2, NULL, &o), "gather_dim is 2");
  BAD(tcoll_all_gather(&f.in, -3, NULL, &o), "gather_dim is -3");
  tcoll_tensor_t scalar = tcoll_tensor_make(f.in.data, F32, 0, NULL, f.dev);
  BAD(tcoll_all_gather(&scalar, 0, NULL, &o), "gather_dim needs a tensor with at least 1 dim");
  int64_t gshape[2] = {f.rows * t_size, 3};
  tcoll_tensor_t want = desc(F32, 2, gshape, f.dev);
  nv = spoil_out(&f, &want, "out", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_all_gather(&f.in, 0, NULL, &v[k].t), v[k].needle);
  int64_t g1[2] = {f.rows, 3 * t_size};
  tcoll_tensor_t want1 = desc(F32, 2, g1, f.dev);
  nv = spoil_out(&f, &want1, "out", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_all_gather(&f.in, -1, NULL, &v[k].t), v[k].needle);
  BAD(tcoll_all_gather(&f.in, 0, NULL, NULL), "out is NULL");
  /* Overlap that is not the in-place form (my own slot of the output, dim 0). */
  tcoll_tensor_t ov_in = big_view(&f, 1, 2, f.in.shape), ov_out = big_view(&f, 0, 2, gshape);
  BAD(tcoll_all_gather(&ov_in, 0, NULL, &ov_out), "overlaps");
  tcoll_tensor_t slot_in = big_view(&f, f.n * t_rank, 2, f.in.shape), ov_out1 = big_view(&f, 0, 2, g1);
  BAD(tcoll_all_gather(&slot_in, 1, NULL, &ov_out1), "overlaps"); /* the slot form is for dim 0 only */
#define CALL(c) tcoll_all_gather(&f.in, 0, c, &o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o);
  T_OK(tcoll_all_gather(&f.in, 0, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("all_gather after bad calls", &o, gathered_val, &f.n, 0);
  /* The in-place form is accepted. */
  tcoll_tensor_t src = f.in;
  tcoll_tensor_t inplace_out = big_view(&f, 0, 2, gshape);
  T_OK(tcoll_tensor_copy(&slot_in, &src));
  T_OK(tcoll_all_gather(&slot_in, 0, NULL, &inplace_out));
  T_OK(tcoll_wait(inplace_out.data));
  t_check_all("in-place all_gather", &inplace_out, gathered_val, &f.n, 0);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

START_TEST(all_gather_coalesced) {
  fx_t f;
  fx_init(&f);
  tcoll_tensor_t in[2] = {f.in, f.in}, o[2] = {t_empty(), t_empty()};
  variant_t v[MAX_VARIANTS];
  int nv = spoil_in(&f, &f.in, "in[1]", v);
  for (int k = 0; k < nv; k++) {
    in[1] = v[k].t;
    BAD(tcoll_all_gather_coalesced(in, 2, NULL, o), v[k].needle);
  }
  in[1] = tcoll_tensor_make(f.in.data, F32, 0, NULL, f.dev);
  BAD(tcoll_all_gather_coalesced(in, 2, NULL, o), "in[1] needs a tensor with at least 1 dim");
  in[1] = f.in;
  in[1].device = f.other_dev;
  BAD(tcoll_all_gather_coalesced(in, 2, NULL, o), "in[1]->device is");
  in[1] = f.in;
  BAD(tcoll_all_gather_coalesced(in, -2, NULL, o), "n is -2");
  BAD(tcoll_all_gather_coalesced(NULL, 2, NULL, o), "in is NULL");
  BAD(tcoll_all_gather_coalesced(in, 2, NULL, NULL), "out is NULL");
  int64_t gshape[2] = {f.rows * t_size, 3};
  tcoll_tensor_t want = desc(F32, 2, gshape, f.dev);
  nv = spoil_out(&f, &want, "out[1]", v);
  for (int k = 0; k < nv; k++) {
    tcoll_tensor_t bo[2] = {t_empty(), v[k].t};
    BAD(tcoll_all_gather_coalesced(in, 2, NULL, bo), v[k].needle);
    STILL_NULL(bo[0]);
  }
  tcoll_tensor_t ov_in[2] = {f.in, big_view(&f, 0, 2, f.in.shape)}, ov_out[2] = {big_view(&f, 2, 2, gshape), t_empty()};
  BAD(tcoll_all_gather_coalesced(ov_in, 2, NULL, ov_out), "out[0] (");
  BAD(tcoll_all_gather_coalesced(ov_in, 2, NULL, ov_out), "overlaps in[1]");
  STILL_NULL(ov_out[1]);
#define CALL(c) tcoll_all_gather_coalesced(in, 2, c, o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o[0]);
  STILL_NULL(o[1]);
  T_OK(tcoll_all_gather_coalesced(in, 2, NULL, o));
  T_OK(tcoll_wait_all());
  t_check_all("all_gather_coalesced after bad calls", &o[0], gathered_val, &f.n, 0);
  t_check_all("all_gather_coalesced after bad calls", &o[1], gathered_val, &f.n, 0);
  tcoll_tensor_free(&o[0]);
  tcoll_tensor_free(&o[1]);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ reduce_scatter */

/* reduce_scatter SUM along dim 0 of rank_val over [rows, 3]: my 2 rows of the sum. */
static double rs_val(int64_t i, void *ctx) {
  (void)ctx;
  return S() * (double)((t_rank * 6 + i) % 7 + 1);
}

START_TEST(reduce_scatter) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  tcoll_tensor_t o = t_empty();
  int nv = spoil_in(&f, &f.in, "in", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_reduce_scatter(&v[k].t, TCOLL_SUM, 0, NULL, &o), v[k].needle);
  BAD(tcoll_reduce_scatter(NULL, TCOLL_SUM, 0, NULL, &o), "in is NULL");
  BAD(tcoll_reduce_scatter(&f.iin, TCOLL_AVG, 0, NULL, &o), "op avg needs a floating dtype");
  BAD(tcoll_reduce_scatter(&f.iin, f.premul, 0, NULL, &o), "op premul_sum needs a floating dtype");
  BAD(tcoll_reduce_scatter(&f.in, TCOLL_BXOR, 0, NULL, &o), "op bxor needs an integer");
  BAD(tcoll_reduce_scatter(&f.in, 8, 0, NULL, &o), "op is 8");
  BAD(tcoll_reduce_scatter(&f.in, f.stale_premul, 0, NULL, &o), "live premul_sum handle");
  BAD(tcoll_reduce_scatter(&f.in, TCOLL_SUM, 2, NULL, &o), "scatter_dim is 2");
  BAD(tcoll_reduce_scatter(&f.in, TCOLL_SUM, -3, NULL, &o), "scatter_dim is -3");
  tcoll_tensor_t scalar = tcoll_tensor_make(f.in.data, F32, 0, NULL, f.dev);
  BAD(tcoll_reduce_scatter(&scalar, TCOLL_SUM, 0, NULL, &o), "scatter_dim needs a tensor with at least 1 dim");
  if (t_size > 1) {
    /* [rows, 3] along dim 1 divides only at 3 ranks; [rows - 1, 3] along dim 0 never. */
    int64_t odd[2] = {f.rows - 1, 3};
    tcoll_tensor_t in_odd = tcoll_tensor_make(f.in.data, F32, 2, odd, f.dev);
    char needle[96];
    snprintf(needle, sizeof needle, "input dimension 0 (%lld) must be a multiple of group_size %d",
             (long long)odd[0], t_size);
    BAD(tcoll_reduce_scatter(&in_odd, TCOLL_SUM, 0, NULL, &o), needle);
    if (t_size != 3) {
      snprintf(needle, sizeof needle, "input dimension 1 (3) must be a multiple of group_size %d", t_size);
      BAD(tcoll_reduce_scatter(&f.in, TCOLL_SUM, -1, NULL, &o), needle);
    }
  }
  int64_t rshape[2] = {2, 3};
  tcoll_tensor_t want = desc(F32, 2, rshape, f.dev);
  nv = spoil_out(&f, &want, "out", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_reduce_scatter(&f.in, TCOLL_SUM, 0, NULL, &v[k].t), v[k].needle);
  BAD(tcoll_reduce_scatter(&f.in, TCOLL_SUM, 0, NULL, NULL), "out is NULL");
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 4, 2, rshape);
  BAD(tcoll_reduce_scatter(&ov_in, TCOLL_SUM, 0, NULL, &ov_out), "overlaps");
#define CALL(c) tcoll_reduce_scatter(&f.in, TCOLL_SUM, 0, c, &o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o);
  T_OK(tcoll_reduce_scatter(&f.in, TCOLL_SUM, 0, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("reduce_scatter after bad calls", &o, rs_val, NULL, 0);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

START_TEST(reduce_scatter_coalesced) {
  fx_t f;
  fx_init(&f);
  tcoll_tensor_t in[2] = {f.in, f.in}, o[2] = {t_empty(), t_empty()};
  int dims[2] = {0, 0};
  variant_t v[MAX_VARIANTS];
  int nv = spoil_in(&f, &f.in, "in[1]", v);
  for (int k = 0; k < nv; k++) {
    in[1] = v[k].t;
    BAD(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, dims, NULL, o), v[k].needle);
  }
  in[1] = f.in;
  BAD(tcoll_reduce_scatter_coalesced(in, -1, TCOLL_SUM, dims, NULL, o), "n is -1");
  BAD(tcoll_reduce_scatter_coalesced(NULL, 2, TCOLL_SUM, dims, NULL, o), "in is NULL");
  BAD(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, dims, NULL, NULL), "out is NULL");
  BAD(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, NULL, NULL, o), "scatter_dims is NULL");
  BAD(tcoll_reduce_scatter_coalesced(in, 2, 123, dims, NULL, o), "op is 123");
  BAD(tcoll_reduce_scatter_coalesced(in, 0, 123, dims, NULL, o), "op is 123");
  BAD(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_BOR, dims, NULL, o), "op bor needs an integer");
  in[1] = f.iin;
  BAD(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_AVG, dims, NULL, o), "op avg needs a floating dtype");
  in[1] = f.in;
  in[1].device = f.other_dev;
  BAD(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, dims, NULL, o), "in[1]->device is");
  in[1] = f.in;
  dims[1] = 2;
  BAD(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, dims, NULL, o), "scatter_dims[1] is 2");
  dims[1] = -3;
  BAD(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, dims, NULL, o), "scatter_dims[1] is -3");
  dims[1] = 0;
  if (t_size > 1) {
    int64_t odd[2] = {f.rows - 1, 3};
    in[1] = tcoll_tensor_make(f.in.data, F32, 2, odd, f.dev);
    BAD(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, dims, NULL, o), "for tensor at index 1");
    in[1] = f.in;
  }
  int64_t rshape[2] = {2, 3};
  tcoll_tensor_t want = desc(F32, 2, rshape, f.dev);
  nv = spoil_out(&f, &want, "out[1]", v);
  for (int k = 0; k < nv; k++) {
    tcoll_tensor_t bo[2] = {t_empty(), v[k].t};
    BAD(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, dims, NULL, bo), v[k].needle);
    STILL_NULL(bo[0]);
  }
  tcoll_tensor_t ov_in[2] = {f.in, big_view(&f, 0, 2, f.in.shape)}, ov_out[2] = {t_empty(), big_view(&f, 1, 2, rshape)};
  BAD(tcoll_reduce_scatter_coalesced(ov_in, 2, TCOLL_SUM, dims, NULL, ov_out), "out[1] (");
  BAD(tcoll_reduce_scatter_coalesced(ov_in, 2, TCOLL_SUM, dims, NULL, ov_out), "overlaps in[1]");
  STILL_NULL(ov_out[0]);
#define CALL(c) tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, dims, c, o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o[0]);
  STILL_NULL(o[1]);
  T_OK(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, dims, NULL, o));
  T_OK(tcoll_wait_all());
  t_check_all("reduce_scatter_coalesced after bad calls", &o[0], rs_val, NULL, 0);
  t_check_all("reduce_scatter_coalesced after bad calls", &o[1], rs_val, NULL, 0);
  tcoll_tensor_free(&o[0]);
  tcoll_tensor_free(&o[1]);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ all_to_all_single */

/* Even splits of [rows, 3]: from rank r I get its rows 2me, 2me+1, placed at rows 2r, 2r+1. */
static double a2a_val(int64_t i, void *ctx) {
  (void)ctx;
  int64_t r = i / 6, l = i % 6;
  return (double)(r + 1) * (double)((t_rank * 6 + l) % 7 + 1);
}

START_TEST(all_to_all_single) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  tcoll_tensor_t o = t_empty();
  int nv = spoil_in(&f, &f.in, "in", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_all_to_all_single(&v[k].t, NULL, NULL, NULL, &o), v[k].needle);
  BAD(tcoll_all_to_all_single(NULL, NULL, NULL, NULL, &o), "in is NULL");
  tcoll_tensor_t scalar = tcoll_tensor_make(f.in.data, F32, 0, NULL, f.dev);
  BAD(tcoll_all_to_all_single(&scalar, NULL, NULL, NULL, &o), "in is a 0-dim tensor");
  int64_t isplit[4], osplit[4];
  for (int r = 0; r < t_size; r++) isplit[r] = osplit[r] = 2;
  BAD(tcoll_all_to_all_single(&f.in, osplit, NULL, NULL, &o), "specified together");
  BAD(tcoll_all_to_all_single(&f.in, NULL, isplit, NULL, &o), "specified together");
  isplit[t_size - 1] = 3;
  char needle[96];
  snprintf(needle, sizeof needle, "input_split_sizes sum to %lld rows but input has %lld", (long long)f.rows + 1,
           (long long)f.rows);
  BAD(tcoll_all_to_all_single(&f.in, osplit, isplit, NULL, &o), needle);
  isplit[t_size - 1] = 2;
  isplit[0] = -1;
  BAD(tcoll_all_to_all_single(&f.in, osplit, isplit, NULL, &o), "input_split_sizes[0] is -1");
  isplit[0] = 2;
  osplit[t_size - 1] = -4;
  snprintf(needle, sizeof needle, "output_split_sizes[%d] is -4", t_size - 1);
  BAD(tcoll_all_to_all_single(&f.in, osplit, isplit, NULL, &o), needle);
  osplit[t_size - 1] = 2;
  if (t_size > 1) {
    int64_t odd[2] = {f.rows - 1, 3};
    tcoll_tensor_t in_odd = tcoll_tensor_make(f.in.data, F32, 2, odd, f.dev);
    snprintf(needle, sizeof needle, "in->shape[0] is %lld, not a multiple of the group size %d", (long long)odd[0],
             t_size);
    BAD(tcoll_all_to_all_single(&in_odd, NULL, NULL, NULL, &o), needle);
  }
  tcoll_tensor_t want = desc(F32, 2, f.in.shape, f.dev);
  nv = spoil_out(&f, &want, "out", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_all_to_all_single(&f.in, NULL, NULL, NULL, &v[k].t), v[k].needle);
  /* With splits, the output has sum(output_split_sizes) rows. */
  osplit[0] = 3;
  tcoll_tensor_t wrong_rows = tcoll_tensor_make(f.spare.data, F32, 2, f.in.shape, f.dev);
  BAD(tcoll_all_to_all_single(&f.in, osplit, isplit, NULL, &wrong_rows), "out->shape is");
  osplit[0] = 2;
  BAD(tcoll_all_to_all_single(&f.in, NULL, NULL, NULL, NULL), "out is NULL");
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 5, 2, f.in.shape);
  BAD(tcoll_all_to_all_single(&ov_in, NULL, NULL, NULL, &ov_out), "overlaps");
  BAD(tcoll_all_to_all_single(&ov_in, NULL, NULL, NULL, &ov_in), "overlaps"); /* no in-place form */
#define CALL(c) tcoll_all_to_all_single(&f.in, NULL, NULL, c, &o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o);
  T_OK(tcoll_all_to_all_single(&f.in, osplit, isplit, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("all_to_all_single after bad calls", &o, a2a_val, NULL, 0);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ broadcast, permute */

static double root0_val(int64_t i, void *ctx) {
  (void)ctx;
  return (double)(i % 7 + 1);
}

START_TEST(broadcast) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  tcoll_tensor_t o = t_empty();
  int nv = spoil_in(&f, &f.in, "in", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_broadcast(&v[k].t, 0, NULL, &o), v[k].needle);
  BAD(tcoll_broadcast(NULL, 0, NULL, &o), "in is NULL");
  char needle[64];
  snprintf(needle, sizeof needle, "src is %d", t_size);
  BAD(tcoll_broadcast(&f.in, t_size, NULL, &o), needle);
  BAD(tcoll_broadcast(&f.in, -1, NULL, &o), "src is -1");
  tcoll_tensor_t want = desc(F32, 2, f.in.shape, f.dev);
  nv = spoil_out(&f, &want, "out", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_broadcast(&f.in, 0, NULL, &v[k].t), v[k].needle);
  BAD(tcoll_broadcast(&f.in, 0, NULL, NULL), "out is NULL");
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 1, 2, f.in.shape);
  BAD(tcoll_broadcast(&ov_in, 0, NULL, &ov_out), "overlaps");
#define CALL(c) tcoll_broadcast(&f.in, 0, c, &o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o);
  T_OK(tcoll_broadcast(&f.in, 0, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("broadcast after bad calls", &o, root0_val, NULL, 0);
  T_OK(tcoll_broadcast(&f.in, 0, NULL, &f.in)); /* in place */
  T_OK(tcoll_wait(f.in.data));
  t_check_all("in-place broadcast", &f.in, root0_val, NULL, 0);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

static double from_left_val(int64_t i, void *ctx) {
  (void)ctx;
  int left = (t_rank + t_size - 1) % t_size;
  return (double)(left + 1) * (double)(i % 7 + 1);
}

START_TEST(permute) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  tcoll_tensor_t o = t_empty();
  int perm[4];
  for (int m = 0; m < t_size; m++) perm[m] = (m + 1) % t_size;
  int nv = spoil_in(&f, &f.in, "in", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_permute(&v[k].t, perm, NULL, &o), v[k].needle);
  BAD(tcoll_permute(NULL, perm, NULL, &o), "in is NULL");
  BAD(tcoll_permute(&f.in, NULL, NULL, &o), "src_dst is NULL");
  int bad[4];
  memcpy(bad, perm, sizeof bad);
  bad[t_size - 1] = t_size;
  char needle[64];
  snprintf(needle, sizeof needle, "src_dst[%d] is %d", t_size - 1, t_size);
  BAD(tcoll_permute(&f.in, bad, NULL, &o), needle);
  bad[t_size - 1] = -1;
  snprintf(needle, sizeof needle, "src_dst[%d] is -1", t_size - 1);
  BAD(tcoll_permute(&f.in, bad, NULL, &o), needle);
  if (t_size > 1) {
    for (int m = 0; m < t_size; m++) bad[m] = 0;
    BAD(tcoll_permute(&f.in, bad, NULL, &o), "src_dst is not a permutation");
  }
  tcoll_tensor_t want = desc(F32, 2, f.in.shape, f.dev);
  nv = spoil_out(&f, &want, "out", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_permute(&f.in, perm, NULL, &v[k].t), v[k].needle);
  BAD(tcoll_permute(&f.in, perm, NULL, NULL), "out is NULL");
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 2, 2, f.in.shape);
  BAD(tcoll_permute(&ov_in, perm, NULL, &ov_out), "overlaps");
  BAD(tcoll_permute(&ov_in, perm, NULL, &ov_in), "overlaps");
#define CALL(c) tcoll_permute(&f.in, perm, c, &o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o);
  T_OK(tcoll_permute(&f.in, perm, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("permute after bad calls", &o, from_left_val, NULL, 0);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

/* shard_dim_all_to_all(gather_dim 1, shard_dim 0) of [rows, 3] -> [2, 3 * size]: column block r
 * holds rank r's rows 2me, 2me+1. */
static double sd_val(int64_t i, void *ctx) {
  (void)ctx;
  int64_t row = i / (3 * t_size), col = i % (3 * t_size), r = col / 3, c = col % 3;
  return (double)(r + 1) * (double)(((2 * t_rank + row) * 3 + c) % 7 + 1);
}

START_TEST(shard_dim_all_to_all) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  tcoll_tensor_t o = t_empty();
  int nv = spoil_in(&f, &f.in, "in", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_shard_dim_all_to_all(&v[k].t, 1, 0, NULL, &o), v[k].needle);
  BAD(tcoll_shard_dim_all_to_all(NULL, 1, 0, NULL, &o), "in is NULL");
  BAD(tcoll_shard_dim_all_to_all(&f.in, 2, 0, NULL, &o), "gather_dim is 2");
  BAD(tcoll_shard_dim_all_to_all(&f.in, 1, -3, NULL, &o), "shard_dim is -3");
  BAD(tcoll_shard_dim_all_to_all(&f.in, -5, 0, NULL, &o), "gather_dim is -5");
  if (t_size > 1) {
    int64_t odd[2] = {f.rows - 1, 3};
    tcoll_tensor_t in_odd = tcoll_tensor_make(f.in.data, F32, 2, odd, f.dev);
    char needle[96];
    snprintf(needle, sizeof needle, "input dimension 0 (%lld) must be a multiple of group_size %d", (long long)odd[0],
             t_size);
    BAD(tcoll_shard_dim_all_to_all(&in_odd, 1, 0, NULL, &o), needle);
  }
  int64_t sshape[2] = {2, 3 * t_size};
  tcoll_tensor_t want = desc(F32, 2, sshape, f.dev);
  nv = spoil_out(&f, &want, "out", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_shard_dim_all_to_all(&f.in, 1, 0, NULL, &v[k].t), v[k].needle);
  BAD(tcoll_shard_dim_all_to_all(&f.in, 1, 0, NULL, NULL), "out is NULL");
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 3, 2, sshape);
  BAD(tcoll_shard_dim_all_to_all(&ov_in, 1, 0, NULL, &ov_out), "overlaps");
#define CALL(c) tcoll_shard_dim_all_to_all(&f.in, 1, 0, c, &o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o);
  T_OK(tcoll_shard_dim_all_to_all(&f.in, 1, 0, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("shard_dim_all_to_all after bad calls", &o, sd_val, NULL, 0);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ rooted forms */

START_TEST(reduce) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  tcoll_tensor_t o = t_empty();
  int nv = spoil_in(&f, &f.in, "in", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_reduce(&v[k].t, 0, TCOLL_SUM, NULL, &o), v[k].needle);
  BAD(tcoll_reduce(NULL, 0, TCOLL_SUM, NULL, &o), "in is NULL");
  char needle[64];
  snprintf(needle, sizeof needle, "dst is %d", t_size);
  BAD(tcoll_reduce(&f.in, t_size, TCOLL_SUM, NULL, &o), needle);
  BAD(tcoll_reduce(&f.in, -2, TCOLL_SUM, NULL, &o), "dst is -2");
  BAD(tcoll_reduce(&f.iin, 0, TCOLL_AVG, NULL, &o), "op avg needs a floating dtype");
  BAD(tcoll_reduce(&f.iin, 0, f.premul, NULL, &o), "op premul_sum needs a floating dtype");
  BAD(tcoll_reduce(&f.in, 0, TCOLL_BAND, NULL, &o), "op band needs an integer");
  BAD(tcoll_reduce(&f.in, 0, 1000000, NULL, &o), "op is 1000000");
  BAD(tcoll_reduce(&f.in, 0, f.stale_premul, NULL, &o), "live premul_sum handle");
  tcoll_tensor_t want = desc(F32, 2, f.in.shape, f.dev);
  nv = spoil_out(&f, &want, "out", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_reduce(&f.in, 0, TCOLL_SUM, NULL, &v[k].t), v[k].needle);
  BAD(tcoll_reduce(&f.in, 0, TCOLL_SUM, NULL, NULL), "out is NULL");
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 1, 2, f.in.shape);
  BAD(tcoll_reduce(&ov_in, 0, TCOLL_SUM, NULL, &ov_out), "overlaps");
#define CALL(c) tcoll_reduce(&f.in, 0, TCOLL_SUM, c, &o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o);
  T_OK(tcoll_reduce(&f.in, 0, TCOLL_SUM, NULL, &o));
  T_OK(tcoll_wait(o.data));
  if (t_rank == 0) t_check_all("reduce after bad calls", &o, sum_val, NULL, 0);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

START_TEST(gather) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  tcoll_tensor_t outs[4], none[4];
  for (int r = 0; r < 4; r++) outs[r] = none[r] = t_empty();
  int nv = spoil_in(&f, &f.in, "in", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_gather(&v[k].t, 0, NULL, t_rank == 0 ? outs : NULL), v[k].needle);
  BAD(tcoll_gather(NULL, 0, NULL, outs), "in is NULL");
  char needle[64];
  snprintf(needle, sizeof needle, "dst is %d", t_size);
  BAD(tcoll_gather(&f.in, t_size, NULL, outs), needle);
  BAD(tcoll_gather(&f.in, -1, NULL, outs), "dst is -1");
  /* The list is checked where it is used: each rank makes itself dst, so every rank refuses
   * (no rank is left waiting for a partner). */
  BAD(tcoll_gather(&f.in, t_rank, NULL, NULL), "outs is NULL on dst");
  int L = t_size - 1;
  tcoll_tensor_t want = desc(F32, 2, f.in.shape, f.dev);
  char name[32];
  snprintf(name, sizeof name, "outs[%d]", L);
  nv = spoil_out(&f, &want, name, v);
  for (int k = 0; k < nv; k++) {
    tcoll_tensor_t bo[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
    bo[L] = v[k].t;
    BAD(tcoll_gather(&f.in, t_rank, NULL, bo), v[k].needle);
    for (int r = 0; r < L; r++) STILL_NULL(bo[r]);
  }
  tcoll_tensor_t ov_outs[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape);
  ov_outs[L] = big_view(&f, 1, 2, f.in.shape);
  BAD(tcoll_gather(&ov_in, t_rank, NULL, ov_outs), "overlaps in");
  for (int r = 0; r < L; r++) STILL_NULL(ov_outs[r]);
  if (t_size > 1) { /* two entries of the list on one buffer: refused before anything starts */
    tcoll_tensor_t same[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
    same[0] = same[L] = big_view(&f, f.n * 2, 2, f.in.shape);
    BAD_NOHEAP(tcoll_gather(&f.in, t_rank, NULL, same), "overlaps");
  }
#define CALL(c) tcoll_gather(&f.in, 0, c, t_rank == 0 ? outs : NULL)
  BAD_COMMS(&f, CALL);
#undef CALL
  for (int r = 0; r < t_size; r++) STILL_NULL(outs[r]);
  T_OK(tcoll_gather(&f.in, 0, NULL, t_rank == 0 ? outs : NULL));
  T_OK(tcoll_wait_all());
  if (t_rank == 0) {
    for (int r = 0; r < t_size; r++) {
      double vals[64];
      t_read(&outs[r], vals);
      for (int i = 0; i < f.n; i++)
        T_EXPECT(vals[i] == (double)(r + 1) * (double)(i % 7 + 1), "gather outs[%d][%d] is %g", r, i, vals[i]);
    }
  }
  for (int r = 0; r < 4; r++) tcoll_tensor_free(&outs[r]);
  fx_free(&f);
}
END_TEST

START_TEST(scatter) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  tcoll_tensor_t ins[4];
  for (int r = 0; r < 4; r++) ins[r] = f.in;
  int L = t_size - 1;
  tcoll_tensor_t o = desc(F32, 2, f.in.shape, f.dev); /* describes the piece, data NULL */
  /* On every rank: src, and the description of the piece. */
  char needle[96];
  snprintf(needle, sizeof needle, "src is %d", t_size);
  BAD(tcoll_scatter(ins, t_size, NULL, &o), needle);
  BAD(tcoll_scatter(ins, -1, NULL, &o), "src is -1");
  BAD(tcoll_scatter(ins, 0, NULL, NULL), "out is NULL");
  tcoll_tensor_t od = o;
  od.dtype = (tcoll_dtype_t)42;
  BAD(tcoll_scatter(ins, 0, NULL, &od), "out->dtype is 42");
  od = o;
  od.shape[1] = -2;
  BAD(tcoll_scatter(ins, 0, NULL, &od), "out->shape[1] is -2");
  od = o;
  od.ndim = 10;
  BAD(tcoll_scatter(ins, 0, NULL, &od), "out->ndim is 10");
  od = o;
  od.device = f.ndev;
  snprintf(needle, sizeof needle, "out->device is %d", f.ndev);
  BAD(tcoll_scatter(ins, 0, NULL, &od), needle);
  STILL_NULL(o);
  /* The list, where it is read: each rank makes itself src. */
  BAD(tcoll_scatter(NULL, t_rank, NULL, &o), "ins is NULL on src");
  char name[32];
  snprintf(name, sizeof name, "ins[%d]", L);
  int nv = spoil_in(&f, &f.in, name, v);
  for (int k = 0; k < nv; k++) {
    ins[L] = v[k].t;
    BAD(tcoll_scatter(ins, t_rank, NULL, &o), v[k].needle);
  }
  ins[L] = f.in;
  if (t_size > 1) {
    ins[L] = f.iin;
    snprintf(needle, sizeof needle, "ins[%d] differs from ins[0]", L);
    BAD(tcoll_scatter(ins, t_rank, NULL, &o), needle);
    ins[L] = f.in;
    ins[L].device = f.other_dev;
    snprintf(needle, sizeof needle, "ins[%d]->device is", L);
    BAD(tcoll_scatter(ins, t_rank, NULL, &o), needle);
    ins[L] = f.in;
  }
  /* The piece must match the list on src. */
  tcoll_tensor_t want = desc(F32, 2, f.in.shape, f.dev);
  nv = spoil_out(&f, &want, "out", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_scatter(ins, t_rank, NULL, &v[k].t), v[k].needle);
  int64_t other_shape[2] = {f.rows, 2};
  tcoll_tensor_t piece = desc(F32, 2, other_shape, f.dev);
  BAD(tcoll_scatter(ins, t_rank, NULL, &piece), "out describes a different piece");
  STILL_NULL(piece);
  tcoll_tensor_t ov_ins[4];
  for (int r = 0; r < 4; r++) ov_ins[r] = f.in;
  ov_ins[L] = big_view(&f, 0, 2, f.in.shape);
  tcoll_tensor_t ov_out = big_view(&f, 1, 2, f.in.shape);
  snprintf(needle, sizeof needle, "overlaps ins[%d]", L);
  BAD(tcoll_scatter(ov_ins, t_rank, NULL, &ov_out), needle);
  T_EXPECT(t_contains(tcoll_last_error(), ": out ("), "the single output is not named \"out\": %s", tcoll_last_error());
#define CALL(c) tcoll_scatter(ins, 0, c, &o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o);
  /* Valid: src 0 sends ins[r] = (r + 1) * (i % 7 + 1), which is rank_val on rank r. */
  tcoll_tensor_t src_ins[4];
  for (int r = 0; r < t_size; r++) src_ins[r] = t_alloc(F32, 2, f.in.shape);
  if (t_rank == 0) {
    for (int r = 0; r < t_size; r++) {
      double vals[64];
      for (int i = 0; i < f.n; i++) vals[i] = (double)(r + 1) * (double)(i % 7 + 1);
      tcoll_tensor_t h = t_host(F32, 2, f.in.shape);
      for (int i = 0; i < f.n; i++) ((float *)h.data)[i] = (float)vals[i];
      T_OK(tcoll_tensor_copy(&src_ins[r], &h));
      tcoll_tensor_free(&h);
    }
  }
  T_OK(tcoll_scatter(t_rank == 0 ? src_ins : NULL, 0, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("scatter after bad calls", &o, rank_val, NULL, 0);
  for (int r = 0; r < t_size; r++) tcoll_tensor_free(&src_ins[r]);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ list forms */

START_TEST(all_gather_list) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  tcoll_tensor_t outs[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
  int L = t_size - 1;
  int nv = spoil_in(&f, &f.in, "in", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_all_gather_list(&v[k].t, NULL, outs), v[k].needle);
  BAD(tcoll_all_gather_list(NULL, NULL, outs), "in is NULL");
  BAD(tcoll_all_gather_list(&f.in, NULL, NULL), "outs is NULL");
  char name[32];
  snprintf(name, sizeof name, "outs[%d]", L);
  tcoll_tensor_t want = desc(F32, 2, f.in.shape, f.dev);
  nv = spoil_out(&f, &want, name, v);
  for (int k = 0; k < nv; k++) {
    tcoll_tensor_t bo[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
    bo[L] = v[k].t;
    BAD(tcoll_all_gather_list(&f.in, NULL, bo), v[k].needle);
    for (int r = 0; r < L; r++) STILL_NULL(bo[r]);
  }
  tcoll_tensor_t ov_outs[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape);
  ov_outs[L] = big_view(&f, f.n - 1, 2, f.in.shape);
  BAD(tcoll_all_gather_list(&ov_in, NULL, ov_outs), "overlaps in");
  if (t_size > 1) {
    tcoll_tensor_t same[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
    same[0] = big_view(&f, f.n * 2, 2, f.in.shape);
    same[L] = big_view(&f, f.n * 2 + 1, 2, f.in.shape);
    BAD_NOHEAP(tcoll_all_gather_list(&f.in, NULL, same), "overlaps");
    for (int r = 1; r < L; r++) STILL_NULL(same[r]);
  }
#define CALL(c) tcoll_all_gather_list(&f.in, c, outs)
  BAD_COMMS(&f, CALL);
#undef CALL
  for (int r = 0; r < t_size; r++) STILL_NULL(outs[r]);
  T_OK(tcoll_all_gather_list(&f.in, NULL, outs));
  T_OK(tcoll_wait_all());
  for (int r = 0; r < t_size; r++) {
    double vals[64];
    t_read(&outs[r], vals);
    for (int i = 0; i < f.n; i++)
      T_EXPECT(vals[i] == (double)(r + 1) * (double)(i % 7 + 1), "all_gather_list outs[%d][%d] is %g", r, i, vals[i]);
  }
  for (int r = 0; r < 4; r++) tcoll_tensor_free(&outs[r]);
  fx_free(&f);
}
END_TEST

START_TEST(reduce_scatter_list) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  tcoll_tensor_t ins[4], o = t_empty();
  for (int r = 0; r < 4; r++) ins[r] = f.in;
  int L = t_size - 1;
  char name[32], needle[96];
  snprintf(name, sizeof name, "ins[%d]", L);
  int nv = spoil_in(&f, &f.in, name, v);
  for (int k = 0; k < nv; k++) {
    ins[L] = v[k].t;
    BAD(tcoll_reduce_scatter_list(ins, TCOLL_SUM, NULL, &o), v[k].needle);
  }
  ins[L] = f.in;
  BAD(tcoll_reduce_scatter_list(NULL, TCOLL_SUM, NULL, &o), "ins is NULL");
  if (t_size > 1) {
    ins[L] = f.iin;
    snprintf(needle, sizeof needle, "ins[%d] differs from ins[0]", L);
    BAD(tcoll_reduce_scatter_list(ins, TCOLL_SUM, NULL, &o), needle);
    ins[L] = f.in;
    ins[L].device = f.other_dev;
    snprintf(needle, sizeof needle, "ins[%d]->device is", L);
    BAD(tcoll_reduce_scatter_list(ins, TCOLL_SUM, NULL, &o), needle);
    ins[L] = f.in;
  }
  tcoll_tensor_t iins[4];
  for (int r = 0; r < 4; r++) iins[r] = f.iin;
  BAD(tcoll_reduce_scatter_list(iins, TCOLL_AVG, NULL, &o), "op avg needs a floating dtype");
  BAD(tcoll_reduce_scatter_list(iins, f.premul, NULL, &o), "op premul_sum needs a floating dtype");
  BAD(tcoll_reduce_scatter_list(ins, TCOLL_BAND, NULL, &o), "op band needs an integer");
  BAD(tcoll_reduce_scatter_list(ins, 42, NULL, &o), "op is 42");
  BAD(tcoll_reduce_scatter_list(ins, f.stale_premul, NULL, &o), "live premul_sum handle");
  tcoll_tensor_t want = desc(F32, 2, f.in.shape, f.dev);
  nv = spoil_out(&f, &want, "out", v);
  for (int k = 0; k < nv; k++) BAD(tcoll_reduce_scatter_list(ins, TCOLL_SUM, NULL, &v[k].t), v[k].needle);
  BAD(tcoll_reduce_scatter_list(ins, TCOLL_SUM, NULL, NULL), "out is NULL");
  tcoll_tensor_t ov_ins[4];
  for (int r = 0; r < 4; r++) ov_ins[r] = f.in;
  ov_ins[L] = big_view(&f, 0, 2, f.in.shape);
  tcoll_tensor_t ov_out = big_view(&f, 3, 2, f.in.shape);
  snprintf(needle, sizeof needle, "overlaps ins[%d]", L);
  BAD(tcoll_reduce_scatter_list(ov_ins, TCOLL_SUM, NULL, &ov_out), needle);
  T_EXPECT(t_contains(tcoll_last_error(), ": out ("), "the single output is not named \"out\": %s", tcoll_last_error());
#define CALL(c) tcoll_reduce_scatter_list(ins, TCOLL_SUM, c, &o)
  BAD_COMMS(&f, CALL);
#undef CALL
  STILL_NULL(o);
  /* Valid: every entry is rank_val, so my piece is the sum S * (i % 7 + 1). */
  T_OK(tcoll_reduce_scatter_list(ins, TCOLL_SUM, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("reduce_scatter_list after bad calls", &o, sum_val, NULL, 0);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

START_TEST(all_to_all) {
  fx_t f;
  fx_init(&f);
  variant_t v[MAX_VARIANTS];
  int L = t_size - 1;
  tcoll_tensor_t ins[4], outs[4];
  for (int r = 0; r < 4; r++) {
    ins[r] = f.in;
    outs[r] = desc(F32, 2, f.in.shape, f.dev); /* what rank r sends me, data NULL */
  }
  char name[32], needle[96];
  snprintf(name, sizeof name, "ins[%d]", L);
  int nv = spoil_in(&f, &f.in, name, v);
  for (int k = 0; k < nv; k++) {
    ins[L] = v[k].t;
    BAD(tcoll_all_to_all(ins, NULL, outs), v[k].needle);
  }
  ins[L] = f.in;
  BAD(tcoll_all_to_all(NULL, NULL, outs), "ins is NULL");
  BAD(tcoll_all_to_all(ins, NULL, NULL), "outs is NULL");
  if (t_size > 1) {
    ins[L] = f.iin;
    snprintf(needle, sizeof needle, "ins[%d]->dtype is int32 (expected float32", L);
    BAD(tcoll_all_to_all(ins, NULL, outs), needle);
    ins[L] = f.in;
    ins[L].device = f.other_dev;
    snprintf(needle, sizeof needle, "ins[%d]->device is", L);
    BAD(tcoll_all_to_all(ins, NULL, outs), needle);
    ins[L] = f.in;
  }
  /* outs[i] describes what rank i sends (shapes may differ per peer), data or not. */
  snprintf(name, sizeof name, "outs[%d]", L);
  tcoll_tensor_t keep = outs[L];
  outs[L].shape[0] = -1;
  snprintf(needle, sizeof needle, "outs[%d]->shape[0] is -1", L);
  BAD(tcoll_all_to_all(ins, NULL, outs), needle);
  outs[L] = keep;
  outs[L].dtype = (tcoll_dtype_t)42;
  snprintf(needle, sizeof needle, "outs[%d]->dtype is 42", L);
  BAD(tcoll_all_to_all(ins, NULL, outs), needle);
  outs[L] = keep;
  outs[L].ndim = -2;
  snprintf(needle, sizeof needle, "outs[%d]->ndim is -2", L);
  BAD(tcoll_all_to_all(ins, NULL, outs), needle);
  outs[L] = keep;
  outs[L].device = f.ndev;
  snprintf(needle, sizeof needle, "outs[%d]->device is %d", L, f.ndev);
  BAD(tcoll_all_to_all(ins, NULL, outs), needle);
  outs[L] = keep;
  tcoll_tensor_t wrong = tcoll_tensor_make(f.spare.data, TCOLL_FLOAT64, 2, f.in.shape, f.dev);
  outs[L] = wrong;
  snprintf(needle, sizeof needle, "outs[%d]->dtype is float64 (expected float32)", L);
  BAD(tcoll_all_to_all(ins, NULL, outs), needle);
  outs[L] = tcoll_tensor_make(f.spare.data, F32, 2, f.in.shape, f.other_dev);
  snprintf(needle, sizeof needle, "outs[%d]->device is %d", L, f.other_dev);
  BAD(tcoll_all_to_all(ins, NULL, outs), needle);
  outs[L] = keep;
  for (int r = 0; r < t_size; r++) STILL_NULL(outs[r]);
  tcoll_tensor_t ov_ins[4], ov_outs[4];
  for (int r = 0; r < 4; r++) {
    ov_ins[r] = f.in;
    ov_outs[r] = keep;
  }
  ov_ins[0] = big_view(&f, 0, 2, f.in.shape);
  ov_outs[L] = big_view(&f, 2, 2, f.in.shape);
  snprintf(needle, sizeof needle, "outs[%d] (", L);
  BAD(tcoll_all_to_all(ov_ins, NULL, ov_outs), needle);
  BAD(tcoll_all_to_all(ov_ins, NULL, ov_outs), "overlaps ins[0]");
  for (int r = 0; r < L; r++) STILL_NULL(ov_outs[r]);
#define CALL(c) tcoll_all_to_all(ins, c, outs)
  BAD_COMMS(&f, CALL);
#undef CALL
  for (int r = 0; r < t_size; r++) STILL_NULL(outs[r]);
  /* Valid: ins[j] = rank_val for every j, so outs[r] = (r + 1) * (i % 7 + 1). */
  T_OK(tcoll_all_to_all(ins, NULL, outs));
  T_OK(tcoll_wait_all());
  for (int r = 0; r < t_size; r++) {
    double vals[64];
    t_read(&outs[r], vals);
    for (int i = 0; i < f.n; i++)
      T_EXPECT(vals[i] == (double)(r + 1) * (double)(i % 7 + 1), "all_to_all outs[%d][%d] is %g", r, i, vals[i]);
  }
  for (int r = 0; r < t_size; r++) tcoll_tensor_free(&outs[r]);
  fx_free(&f);
}
END_TEST

START_TEST(report) {
  /* The instruments themselves: the heap measure sees an allocation, the MPI counter a call. */
  t_heap_report("argcheck");
  long m0 = t_mpi_calls();
  tcoll_tensor_t in = t_alloc(F32, 1, (int64_t[]){4}), out = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait(out.data));
  T_EXPECT(t_mpi_calls() > m0, "t_mpi_calls() does not see libtcoll's MPI calls");
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  /* ... also a count above TCOLL_MAX_COUNT: one MPI_Iallreduce_c where MPI has the MPI-4
   * large-count calls, else 3 pieces of at most 1000 (the literal call, on the host). */
  tcoll_config_t cfg, old;
  T_OK(tcoll_get_config(&old));
  cfg = old;
  cfg.max_count = 1000;
  snprintf(cfg.algo, sizeof cfg.algo, "mpi");
  T_OK(tcoll_set_config(&cfg));
  in = t_host(F32, 1, (int64_t[]){2500});
  out = t_empty();
  t_mpi_window_t w;
  t_mpi_window_open(&w); /* nothing pending: the progress thread's calls count too */
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait(out.data));
  long want = MPI_VERSION >= 4 ? 1 : 3, made = t_mpi_window_calls(&w);
  long iallreduce = t_mpi_window_calls_of(&w, T_MPI_IALLREDUCE);
  T_EXPECT(made == want && iallreduce == want, "an all_reduce of 2500 with a limit of 1000 made %ld MPI "
           "calls, %ld of them MPI_Iallreduce (expected %ld)", made, iallreduce, want);
  T_OK(tcoll_set_config(&old));
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  int total = 0;
  MPI_Allreduce(&ncases, &total, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (t_rank == 0) printf("argcheck: %d bad-input cases per rank at %d rank(s)\n", ncases, t_size);
  T_EXPECT(ncases > 0 && total == ncases, "ranks ran different numbers of cases");
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("argcheck");
  TCase *tc = t_tcase("argcheck");
  tcase_add_test(tc, all_reduce);
  tcase_add_test(tc, all_reduce_coalesced);
  tcase_add_test(tc, all_gather);
  tcase_add_test(tc, all_gather_coalesced);
  tcase_add_test(tc, reduce_scatter);
  tcase_add_test(tc, reduce_scatter_coalesced);
  tcase_add_test(tc, all_to_all_single);
  tcase_add_test(tc, broadcast);
  tcase_add_test(tc, permute);
  tcase_add_test(tc, shard_dim_all_to_all);
  tcase_add_test(tc, reduce);
  tcase_add_test(tc, gather);
  tcase_add_test(tc, scatter);
  tcase_add_test(tc, all_gather_list);
  tcase_add_test(tc, reduce_scatter_list);
  tcase_add_test(tc, all_to_all);
  tcase_add_test(tc, report);
  suite_add_tcase(s, tc);
  return s;
}
