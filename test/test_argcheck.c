/* Bad arguments for every collective: each kind returns TCOLL_ERR_INVALID_ARGUMENT with a
 * message naming the argument and its value, starts no communication (no MPI call at all,
 * counted through the profiling interface), leaves nothing pending, allocates nothing (outputs
 * with data == NULL stay NULL; the heap in use is unchanged), and a valid call works right
 * after. Rank 0 prints how many bad-input cases ran.
 *
 * The cases every collective shares are tables run by one loop (t_cases): each row spoils one
 * argument (or two) of a valid call and names the status and the message expected; the spoilt
 * inputs and outputs every collective refuses alike (IN_ROWS, OUT_ROWS) and the two bad
 * communicators run for each. What only one collective has (overlapping buffers, split sizes,
 * permutations) follows in its test. */
#include "harness.h"
#include "refused.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define F32 TCOLL_FLOAT32
#define I32 TCOLL_INT32
#define T_MAXR 4 /* the most ranks the suite runs at: lists have this many entries */

static int ncases;

/* One refused call of the valid forms below (a test's own cases). heap: also check that the heap
 * in use did not change (not for calls that get as far as the registry, whose pooled works may
 * keep grown tables). */
#define BAD_(heap, call, needle)                                                                   \
  do {                                                                                             \
    T_CALL_REFUSED(T_CK_MPI | ((heap) ? T_CK_HEAP : 0), TCOLL_ERR_INVALID_ARGUMENT, call, needle); \
    ncases++;                                                                                      \
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
  int dev, ndev, other_dev; /* other_dev: another valid device, or a nonexistent one */
  int64_t rows, n;          /* in is [rows, 3], rows = 2 * size; n = its numel */
  tcoll_tensor_t in, iin;   /* float32 and int32, rank_val */
  tcoll_tensor_t big;       /* float32 storage for overlapping views: in, then room */
  tcoll_tensor_t spare;     /* data for bad outputs (never written) */
  tcoll_comm_t *stale;      /* a freed communicator */
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

static tcoll_tensor_t desc(tcoll_dtype_t dt, int ndim, const int64_t *shape, int device) {
  return tcoll_tensor_make(NULL, dt, ndim, shape, device);
}

/* ------------------------------------------------------------------ the calls */

/* The arguments of any collective: inputs and outputs (one, two for the coalesced forms, one
 * per rank for the list forms), each passed or NULL. */
typedef struct args {
  tcoll_tensor_t in[T_MAXR], out[T_MAXR];
  bool in_null, out_null, aux_null; /* pass NULL for in, out, or the call's array argument */
  int n;                            /* coalesced: how many tensors */
  tcoll_redop_t op;
  int i0, i1;       /* dims, src or dst */
  int perm[T_MAXR]; /* permute: src_dst */
  tcoll_comm_t *comm;
} args_t;

#define IN(a) ((a)->in_null ? NULL : (a)->in)
#define OUT(a) ((a)->out_null ? NULL : (a)->out)
#define AUX(a, p) ((a)->aux_null ? NULL : (p))

static int c_all_reduce(args_t *a) { return tcoll_all_reduce(IN(a), a->op, a->comm, OUT(a)); }
static int c_all_reduce_coalesced(args_t *a) {
  return tcoll_all_reduce_coalesced(IN(a), a->n, a->op, a->comm, OUT(a));
}
static int c_all_gather(args_t *a) { return tcoll_all_gather(IN(a), a->i0, a->comm, OUT(a)); }
static int c_all_gather_coalesced(args_t *a) {
  return tcoll_all_gather_coalesced(IN(a), a->n, a->comm, OUT(a));
}
static int c_reduce_scatter(args_t *a) {
  return tcoll_reduce_scatter(IN(a), a->op, a->i0, a->comm, OUT(a));
}
static int c_reduce_scatter_coalesced(args_t *a) {
  int dims[2] = {a->i0, a->i1};
  return tcoll_reduce_scatter_coalesced(IN(a), a->n, a->op, AUX(a, dims), a->comm, OUT(a));
}
static int c_all_to_all_single(args_t *a) {
  return tcoll_all_to_all_single(IN(a), NULL, NULL, a->comm, OUT(a));
}
static int c_broadcast(args_t *a) { return tcoll_broadcast(IN(a), a->i0, a->comm, OUT(a)); }
static int c_permute(args_t *a) { return tcoll_permute(IN(a), AUX(a, a->perm), a->comm, OUT(a)); }
static int c_shard_dim_all_to_all(args_t *a) {
  return tcoll_shard_dim_all_to_all(IN(a), a->i0, a->i1, a->comm, OUT(a));
}
static int c_reduce(args_t *a) { return tcoll_reduce(IN(a), a->i0, a->op, a->comm, OUT(a)); }
static int c_gather(args_t *a) { return tcoll_gather(IN(a), a->i0, a->comm, OUT(a)); }
static int c_scatter(args_t *a) { return tcoll_scatter(IN(a), a->i0, a->comm, OUT(a)); }
static int c_all_gather_list(args_t *a) { return tcoll_all_gather_list(IN(a), a->comm, OUT(a)); }
static int c_reduce_scatter_list(args_t *a) {
  return tcoll_reduce_scatter_list(IN(a), a->op, a->comm, OUT(a));
}
static int c_all_to_all(args_t *a) { return tcoll_all_to_all(IN(a), a->comm, OUT(a)); }

/* ------------------------------------------------------------------ the tables */

/* What a row changes: a field of the input under test (IN_: in, in[1] of the coalesced forms,
 * ins[size - 1] of the lists), of every input (ALL_IN_), of the output under test (OUT_; OUTD_:
 * given data first), or another argument (A_). */
enum {
  IN_ = 1 << 8,
  ALL_IN_ = 2 << 8,
  OUT_ = 3 << 8,
  OUTD_ = 4 << 8,
  F_DTYPE = 1,
  F_NDIM,
  F_SHAPE0,
  F_SHAPE1,
  F_NO_DATA,
  F_DEVICE,
  F_HUGE,
  F_LONGER,
  F_MORE_DIMS,
  F_TENSOR, /* replaced by a fixture tensor (S_IIN, S_SCALAR, S_ODD) */
  A_IN_NULL = 5 << 8,
  A_OUT_NULL,
  A_AUX_NULL,
  A_OP,
  A_I0,
  A_I1,
  A_N,
};
/* Values known at run time. */
enum { S_SIZE = -1000000, S_RANK, S_NDEV, S_OTHER_DEV, S_IIN, S_SCALAR, S_ODD, S_PREMUL, S_STALE };
/* Rows that need more than one rank (W_MULTI), and not 3 either (W_NOT3). */
enum { W_ANY, W_MULTI, W_NOT3 };

/* One case: up to two changes, and the message fragment expected, where {in}, {out}, {size},
 * {last} (size - 1), {rows}, {rows-1}, {rows+1}, {numel}, {ndev} and {other_dev} stand for their
 * values. */
typedef struct row {
  int arg;
  long v;
  int arg2;
  long v2;
  const char *needle;
  int when;
} row_t;
#define R(arg, v, needle) \
  { arg, v, 0, 0, needle, W_ANY }
#define R2(arg, v, arg2, v2, needle) \
  { arg, v, arg2, v2, needle, W_ANY }
#define RW(when, arg, v, needle) \
  { arg, v, 0, 0, needle, when }
#define RW2(when, arg, v, arg2, v2, needle) \
  { arg, v, arg2, v2, needle, when }

/* Every way to spoil a valid input (ndim 2, with data). */
static const row_t IN_ROWS[] = {
    R(IN_ | F_DTYPE, 42, "{in}->dtype is 42"),
    R(IN_ | F_DTYPE, -1, "{in}->dtype is -1"),
    R(IN_ | F_NDIM, TCOLL_MAX_DIMS + 1, "{in}->ndim is {maxdims+1}"),
    R(IN_ | F_NDIM, -1, "{in}->ndim is -1"),
    R(IN_ | F_SHAPE1, -3, "{in}->shape[1] is -3"),
    R(IN_ | F_SHAPE0, -1, "{in}->shape[0] is -1"),
    R(IN_ | F_NO_DATA, 0, "{in}->data is NULL with {numel} elements"),
    R(IN_ | F_DEVICE, S_NDEV, "{in}->device is {ndev}"),
    R(IN_ | F_DEVICE, -5, "{in}->device is -5"),
    R(IN_ | F_HUGE, 0, "{in} has more than 2^63 bytes"),
};

/* Every way to give a wrong float32 output with data (the output under test starts as the one
 * expected, with data). */
static const row_t OUT_ROWS[] = {
    R(OUT_ | F_DTYPE, TCOLL_FLOAT64, "{out}->dtype is float64 (expected float32)"),
    R(OUT_ | F_DTYPE, 42, "{out}->dtype is 42"),
    R(OUT_ | F_LONGER, 0, "{out}->shape is ["),
    R(OUT_ | F_MORE_DIMS, 0, "{out}->shape is ["), /* same numel, another shape */
    R(OUT_ | F_NDIM, 1, "{out}->shape is ["),
    R(OUT_ | F_SHAPE0, -1, "{out}->shape[0] is -1"),
    R(OUT_ | F_DEVICE, S_OTHER_DEV, "{out}->device is {other_dev}"),
    R(OUT_ | F_NDIM, TCOLL_MAX_DIMS + 1, "{out}->ndim is {maxdims+1}"),
};

/* What every reducing collective with one input or a list of inputs refuses alike: ops its int32
 * inputs do not take, and a premul_sum handle destroyed before the call. */
static const row_t REDUCING_ROWS[] = {
    R2(ALL_IN_ | F_TENSOR, S_IIN, A_OP, TCOLL_AVG, "op avg needs a floating dtype"),
    R2(ALL_IN_ | F_TENSOR, S_IIN, A_OP, S_PREMUL, "op premul_sum needs a floating dtype"),
    R(A_OP, S_STALE, "live premul_sum handle"),
};

/* The outputs expected, as shapes of [rows, 3] inputs: the same, gathered along dim 0 or 1,
 * scattered along dim 0, sharded along dim 0 and gathered along dim 1. */
enum { SH_NONE, SH_SAME, SH_ROWS_X_P, SH_COLS_X_P, SH_ROWS_BY_P, SH_SHARD };
static void shape_of(const fx_t *f, int sh, int64_t shape[2]) {
  bool by_p = sh == SH_ROWS_BY_P || sh == SH_SHARD;
  shape[0] = sh == SH_ROWS_X_P ? f->rows * t_size : by_p ? f->rows / t_size : f->rows;
  shape[1] = sh == SH_COLS_X_P || sh == SH_SHARD ? 3 * t_size : 3;
}

/* A collective: its call, the forms of its inputs and outputs, the valid call the rows spoil,
 * and its own rows. */
enum { ONE = 1, COAL, LIST };
enum {
  SELF_IN = 1,   /* the spoilt inputs: every rank its own root (src) */
  SELF_OUT = 2,  /* the spoilt outputs: every rank its own root (dst or src) */
  ROOT_OUTS = 4, /* the spoilt inputs and bad communicators: outputs on rank 0 only */
  DESC_OUTS = 8, /* valid outputs are descriptions (data NULL, shape given), not t_empty() */
  REDUCES = 16,  /* REDUCING_ROWS apply */
};
typedef struct coll {
  const char *name;
  int (*call)(args_t *a);
  int ins, outs, flags;
  int i0, i1;
  int want[2], want_dim[2]; /* the outputs OUT_ROWS spoil, and the dim (i0) of each */
  const row_t *rows;
  size_t nrows;
} coll_t;
#define ROWS(t) t, T_LEN(t)
#define T_LEN(a) (sizeof(a) / sizeof((a)[0]))

static int slot(int form) { return form == COAL ? 1 : form == LIST ? t_size - 1 : 0; }

/* The valid call of c. */
static args_t valid_args(const coll_t *c, const fx_t *f) {
  args_t a;
  memset(&a, 0, sizeof a);
  int64_t shape[2];
  shape_of(f, SH_SAME, shape);
  for (int r = 0; r < T_MAXR; r++) {
    a.in[r] = f->in;
    a.out[r] = c->flags & DESC_OUTS ? desc(F32, 2, shape, f->dev) : t_empty();
    a.perm[r] = (r + 1) % t_size;
  }
  a.n = 2;
  a.op = TCOLL_SUM;
  a.i0 = c->i0;
  a.i1 = c->i1;
  return a;
}

static long value(const fx_t *f, long v) {
  switch (v) {
  case S_SIZE: return t_size;
  case S_RANK: return t_rank;
  case S_NDEV: return f->ndev;
  case S_OTHER_DEV: return f->other_dev;
  case S_PREMUL: return f->premul;
  case S_STALE: return f->stale_premul;
  default: return v;
  }
}

static void spoil(tcoll_tensor_t *t, int field, long v, const fx_t *f) {
  switch (field) {
  case F_DTYPE: t->dtype = (tcoll_dtype_t)v; break;
  case F_NDIM: t->ndim = (int)v; break;
  case F_SHAPE0: t->shape[0] = v; break;
  case F_SHAPE1: t->shape[1] = v; break;
  case F_NO_DATA: t->data = NULL; break;
  case F_DEVICE: t->device = (int)v; break;
  case F_HUGE: t->shape[0] = t->shape[1] = INT64_C(1) << 40; break;
  case F_LONGER: t->shape[0] += 1; break;
  case F_MORE_DIMS: t->shape[t->ndim++] = 1; break;
  case F_TENSOR: {
    int64_t odd[2] = {f->rows - 1, 3};
    *t = v == S_IIN   ? f->iin
         : v == S_ODD ? tcoll_tensor_make(f->in.data, F32, 2, odd, f->dev)
                      : tcoll_tensor_make(f->in.data, F32, 0, NULL, f->dev); /* S_SCALAR */
    break;
  }
  }
}

static void change(const coll_t *c, args_t *a, int arg, long v, const fx_t *f) {
  int target = arg & ~0xff, field = arg & 0xff;
  v = value(f, v);
  switch (target) {
  case IN_: spoil(&a->in[slot(c->ins)], field, v, f); return;
  case ALL_IN_:
    for (int r = 0; r < T_MAXR; r++) spoil(&a->in[r], field, v, f);
    return;
  case OUTD_: a->out[slot(c->outs)].data = f->spare.data; /* fall through */
  case OUT_: spoil(&a->out[slot(c->outs)], field, v, f); return;
  }
  switch (arg) {
  case A_IN_NULL: a->in_null = true; break;
  case A_OUT_NULL: a->out_null = true; break;
  case A_AUX_NULL: a->aux_null = true; break;
  case A_OP: a->op = (tcoll_redop_t)v; break;
  case A_I0: a->i0 = (int)v; break;
  case A_I1: a->i1 = (int)v; break;
  case A_N: a->n = (int)v; break;
  }
}

/* The needle with its {names} replaced. */
static void expand(char *buf, size_t len, const char *tmpl, const coll_t *c, const fx_t *f) {
  char in[16] = "in", out[16] = "out";
  if (c->ins != ONE) snprintf(in, sizeof in, "%s[%d]", c->ins == LIST ? "ins" : "in", slot(c->ins));
  if (c->outs != ONE)
    snprintf(out, sizeof out, "%s[%d]", c->outs == LIST ? "outs" : "out", slot(c->outs));
  const struct {
    const char *name;
    long v;
  } nums[] = {
      {"size", t_size},        {"last", t_size - 1},        {"rows", f->rows},
      {"rows-1", f->rows - 1}, {"rows+1", f->rows + 1},     {"numel", f->n},
      {"ndev", f->ndev},       {"other_dev", f->other_dev}, {"maxdims+1", TCOLL_MAX_DIMS + 1}};
  size_t o = 0;
  for (const char *p = tmpl; *p && o + 1 < len;) {
    const char *end = *p == '{' ? strchr(p, '}') : NULL;
    if (!end) {
      buf[o++] = *p++;
      continue;
    }
    char word[24] = "";
    size_t n = (size_t)(end - p - 1);
    memcpy(word, p + 1, n < sizeof word ? n : sizeof word - 1);
    if (!strcmp(word, "in") || !strcmp(word, "out")) {
      o += (size_t)snprintf(buf + o, len - o, "%s", word[0] == 'i' ? in : out);
    } else {
      for (size_t k = 0; k < T_LEN(nums); k++)
        if (!strcmp(word, nums[k].name)) o += (size_t)snprintf(buf + o, len - o, "%ld", nums[k].v);
    }
    if (o >= len) o = len - 1;
    p = end + 1;
  }
  buf[o] = '\0';
}

/* Runs one row on c's valid call a; outputs given without data must stay so. */
static void run_row(const coll_t *c, args_t a, const row_t *r, const fx_t *f) {
  if ((r->when == W_MULTI && t_size == 1) || (r->when == W_NOT3 && (t_size == 1 || t_size == 3)))
    return;
  change(c, &a, r->arg, r->v, f);
  if (r->arg2) change(c, &a, r->arg2, r->v2, f);
  char needle[160], what[240];
  expand(needle, sizeof needle, r->needle, c, f);
  snprintf(what, sizeof what, "tcoll_%s [%s]", c->name, needle);
  bool empty[T_MAXR];
  for (int k = 0; k < T_MAXR; k++) empty[k] = a.out[k].data == NULL;
  t_refusal_t chk;
  t_refusal_open(&chk, T_CK_MPI | T_CK_HEAP);
  int rc = c->call(&a);
  t_refusal_close(&chk, __FILE__, __LINE__, what, rc, TCOLL_ERR_INVALID_ARGUMENT, needle);
  ncases++;
  for (int k = 0; k < T_MAXR; k++)
    T_EXPECT(!empty[k] || a.out[k].data == NULL, "%s: a refused call allocated out[%d]", what, k);
}

/* Every shared case of c: its spoilt inputs, its own rows, its spoilt outputs and two bad
 * communicators (a pointer that is not one, a freed one). */
static void t_cases(const coll_t *c, fx_t *f) {
  args_t valid = valid_args(c, f), a = valid;
  if (c->flags & SELF_IN) a.i0 = t_rank;
  if (c->flags & ROOT_OUTS) a.out_null = t_rank != 0;
  for (size_t k = 0; k < T_LEN(IN_ROWS); k++) run_row(c, a, &IN_ROWS[k], f);
  for (size_t k = 0; k < c->nrows; k++) run_row(c, valid, &c->rows[k], f);
  for (size_t k = 0; c->flags & REDUCES && k < T_LEN(REDUCING_ROWS); k++)
    run_row(c, valid, &REDUCING_ROWS[k], f);
  for (int w = 0; w < 2 && c->want[w]; w++) {
    a = valid;
    if (c->flags & SELF_OUT) a.i0 = t_rank;
    if (c->want_dim[w]) a.i0 = c->want_dim[w];
    int64_t shape[2];
    shape_of(f, c->want[w], shape);
    a.out[slot(c->outs)] = tcoll_tensor_make(f->spare.data, F32, 2, shape, f->dev);
    for (size_t k = 0; k < T_LEN(OUT_ROWS); k++) run_row(c, a, &OUT_ROWS[k], f);
  }
  a = valid;
  if (c->flags & ROOT_OUTS) a.out_null = t_rank != 0;
  tcoll_comm_t *bad[2] = {(tcoll_comm_t *)&f->not_a_comm, f->stale};
  for (int k = 0; k < 2; k++) {
    char needle[96];
    snprintf(needle, sizeof needle, "comm %p is not a live tcoll communicator", (void *)bad[k]);
    a.comm = bad[k];
    row_t r = R(0, 0, needle);
    run_row(c, a, &r, f);
  }
}

/* ------------------------------------------------------------------ the collectives */

static const row_t ALL_REDUCE_ROWS[] = {
    R(A_IN_NULL, 0, "in is NULL"),
    /* Ops the dtype does not take, unknown ops (and REDUCING_ROWS). */
    R(A_OP, TCOLL_BAND, "op band needs an integer or bool dtype, got float32"),
    R(A_OP, TCOLL_BOR, "op bor needs an integer"),
    R(A_OP, TCOLL_BXOR, "op bxor needs an integer"),
    R(A_OP, 99, "op is 99"),
    R(A_OP, -1, "op is -1"),
    R(A_OUT_NULL, 0, "out is NULL"),
};
static const coll_t ALL_REDUCE = {
    "all_reduce", c_all_reduce, ONE, ONE, REDUCES, 0, 0, {SH_SAME}, {0}, ROWS(ALL_REDUCE_ROWS)};

START_TEST(all_reduce) {
  fx_t f;
  fx_init(&f);
  t_cases(&ALL_REDUCE, &f);
  /* Overlapping input and output that are not the same buffer (in place is). */
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 1, 2, f.in.shape);
  BAD(tcoll_all_reduce(&ov_in, TCOLL_SUM, NULL, &ov_out), "overlaps");
  ov_out = big_view(&f, f.n - 1, 2, f.in.shape);
  BAD(tcoll_all_reduce(&ov_in, TCOLL_SUM, NULL, &ov_out), "out (");
  /* A valid call right after, out of place and in place. */
  tcoll_tensor_t o = t_empty();
  T_OK(tcoll_all_reduce(&f.in, TCOLL_SUM, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("all_reduce after bad calls", &o, sum_val, NULL, 0);
  T_OK(tcoll_all_reduce(&ov_in, TCOLL_SUM, NULL, &ov_in));
  T_OK(tcoll_wait(ov_in.data));
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

static const row_t ALL_REDUCE_COALESCED_ROWS[] = {
    R(A_N, -1, "n is -1"),
    R(A_IN_NULL, 0, "in is NULL"),
    R(A_OUT_NULL, 0, "out is NULL"),
    R2(A_N, 0, A_OP, 77, "op is 77"),
    R2(IN_ | F_TENSOR, S_IIN, A_OP, TCOLL_AVG,
       "op avg needs a floating dtype (float16, bfloat16, float32, float64), got int32"),
    R2(IN_ | F_TENSOR, S_IIN, A_OP, TCOLL_BAND,
       "op band needs an integer or bool dtype, got float32"),
    R2(IN_ | F_TENSOR, S_IIN, A_OP, S_STALE, "live premul_sum handle"),
    R(IN_ | F_DEVICE, S_OTHER_DEV, "in[1]->device is"),
};
static const coll_t ALL_REDUCE_COALESCED = {
    "all_reduce_coalesced",         c_all_reduce_coalesced, COAL, COAL, 0, 0, 0, {SH_SAME}, {0},
    ROWS(ALL_REDUCE_COALESCED_ROWS)};

START_TEST(all_reduce_coalesced) {
  fx_t f;
  fx_init(&f);
  t_cases(&ALL_REDUCE_COALESCED, &f);
  /* An output overlapping another input; two outputs overlapping each other. */
  tcoll_tensor_t ov_in[2] = {big_view(&f, 0, 2, f.in.shape), f.in};
  tcoll_tensor_t ov_out[2] = {t_empty(), big_view(&f, 3, 2, f.in.shape)};
  BAD(tcoll_all_reduce_coalesced(ov_in, 2, TCOLL_SUM, NULL, ov_out), "out[1] (");
  BAD(tcoll_all_reduce_coalesced(ov_in, 2, TCOLL_SUM, NULL, ov_out), "overlaps in[0]");
  STILL_NULL(ov_out[0]);
  tcoll_tensor_t two[2] = {big_view(&f, f.n * 2, 2, f.in.shape),
                           big_view(&f, f.n * 2 + 5, 2, f.in.shape)};
  tcoll_tensor_t three_in[3] = {f.in, f.in, f.in}, three_out[3] = {t_empty(), two[0], two[1]};
  BAD_NOHEAP(tcoll_all_reduce_coalesced(three_in, 3, TCOLL_SUM, NULL, three_out), "overlaps");
  STILL_NULL(three_out[0]);
  tcoll_tensor_t in[2] = {f.in, f.in}, o[2] = {t_empty(), t_empty()};
  T_OK(tcoll_all_reduce_coalesced(in, 2, TCOLL_SUM, NULL, o));
  T_OK(tcoll_wait_all());
  t_check_all("all_reduce_coalesced after bad calls", &o[1], sum_val, NULL, 0);
  tcoll_tensor_free(&o[0]);
  tcoll_tensor_free(&o[1]);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ all_gather */

static const row_t ALL_GATHER_ROWS[] = {
    R(A_IN_NULL, 0, "in is NULL"),
    R(A_I0, 2, "gather_dim is 2"),
    R(A_I0, -3, "gather_dim is -3"),
    R(IN_ | F_TENSOR, S_SCALAR, "gather_dim needs a tensor with at least 1 dim"),
    R(A_OUT_NULL, 0, "out is NULL"),
};
static const coll_t ALL_GATHER = {
    "all_gather", c_all_gather,         ONE, ONE, 0, 0, 0, {SH_ROWS_X_P, SH_COLS_X_P},
    {0, -1},      ROWS(ALL_GATHER_ROWS)};

START_TEST(all_gather) {
  fx_t f;
  fx_init(&f);
  t_cases(&ALL_GATHER, &f);
  /* Overlap that is not the in-place form (my own slot of the output, dim 0). */
  int64_t gshape[2] = {f.rows * t_size, 3}, g1[2] = {f.rows, 3 * t_size};
  tcoll_tensor_t ov_in = big_view(&f, 1, 2, f.in.shape), ov_out = big_view(&f, 0, 2, gshape);
  BAD(tcoll_all_gather(&ov_in, 0, NULL, &ov_out), "overlaps");
  tcoll_tensor_t slot_in = big_view(&f, f.n * t_rank, 2, f.in.shape);
  tcoll_tensor_t ov_out1 = big_view(&f, 0, 2, g1);
  BAD(tcoll_all_gather(&slot_in, 1, NULL, &ov_out1), "overlaps"); /* the slot form: dim 0 only */
  tcoll_tensor_t o = t_empty();
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

static const row_t ALL_GATHER_COALESCED_ROWS[] = {
    R(IN_ | F_TENSOR, S_SCALAR, "in[1] needs a tensor with at least 1 dim"),
    R(IN_ | F_DEVICE, S_OTHER_DEV, "in[1]->device is"),
    R(A_N, -2, "n is -2"),
    R(A_IN_NULL, 0, "in is NULL"),
    R(A_OUT_NULL, 0, "out is NULL"),
};
static const coll_t ALL_GATHER_COALESCED = {
    "all_gather_coalesced",         c_all_gather_coalesced, COAL, COAL, 0, 0, 0, {SH_ROWS_X_P}, {0},
    ROWS(ALL_GATHER_COALESCED_ROWS)};

START_TEST(all_gather_coalesced) {
  fx_t f;
  fx_init(&f);
  t_cases(&ALL_GATHER_COALESCED, &f);
  int64_t gshape[2] = {f.rows * t_size, 3};
  tcoll_tensor_t ov_in[2] = {f.in, big_view(&f, 0, 2, f.in.shape)};
  tcoll_tensor_t ov_out[2] = {big_view(&f, 2, 2, gshape), t_empty()};
  BAD(tcoll_all_gather_coalesced(ov_in, 2, NULL, ov_out), "out[0] (");
  BAD(tcoll_all_gather_coalesced(ov_in, 2, NULL, ov_out), "overlaps in[1]");
  STILL_NULL(ov_out[1]);
  tcoll_tensor_t in[2] = {f.in, f.in}, o[2] = {t_empty(), t_empty()};
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

static const row_t REDUCE_SCATTER_ROWS[] = {
    R(A_IN_NULL, 0, "in is NULL"),
    R(A_OP, TCOLL_BXOR, "op bxor needs an integer"),
    R(A_OP, 8, "op is 8"),
    R(A_I0, 2, "scatter_dim is 2"),
    R(A_I0, -3, "scatter_dim is -3"),
    R(IN_ | F_TENSOR, S_SCALAR, "scatter_dim needs a tensor with at least 1 dim"),
    /* [rows, 3] along dim 1 divides only at 3 ranks; [rows - 1, 3] along dim 0 never. */
    RW(W_MULTI, IN_ | F_TENSOR, S_ODD,
       "input dimension 0 ({rows-1}) must be a multiple of group_size {size}"),
    RW(W_NOT3, A_I0, -1, "input dimension 1 (3) must be a multiple of group_size {size}"),
    R(A_OUT_NULL, 0, "out is NULL"),
};
static const coll_t REDUCE_SCATTER = {
    "reduce_scatter",         c_reduce_scatter, ONE, ONE, REDUCES, 0, 0, {SH_ROWS_BY_P}, {0},
    ROWS(REDUCE_SCATTER_ROWS)};

START_TEST(reduce_scatter) {
  fx_t f;
  fx_init(&f);
  t_cases(&REDUCE_SCATTER, &f);
  int64_t rshape[2] = {2, 3};
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 4, 2, rshape);
  BAD(tcoll_reduce_scatter(&ov_in, TCOLL_SUM, 0, NULL, &ov_out), "overlaps");
  tcoll_tensor_t o = t_empty();
  T_OK(tcoll_reduce_scatter(&f.in, TCOLL_SUM, 0, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("reduce_scatter after bad calls", &o, rs_val, NULL, 0);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

static const row_t REDUCE_SCATTER_COALESCED_ROWS[] = {
    R(A_N, -1, "n is -1"),
    R(A_IN_NULL, 0, "in is NULL"),
    R(A_OUT_NULL, 0, "out is NULL"),
    R(A_AUX_NULL, 0, "scatter_dims is NULL"),
    R(A_OP, 123, "op is 123"),
    R2(A_N, 0, A_OP, 123, "op is 123"),
    R(A_OP, TCOLL_BOR, "op bor needs an integer"),
    R2(IN_ | F_TENSOR, S_IIN, A_OP, TCOLL_AVG, "op avg needs a floating dtype"),
    R(IN_ | F_DEVICE, S_OTHER_DEV, "in[1]->device is"),
    R(A_I1, 2, "scatter_dims[1] is 2"),
    R(A_I1, -3, "scatter_dims[1] is -3"),
    RW(W_MULTI, IN_ | F_TENSOR, S_ODD, "for tensor at index 1"),
};
static const coll_t REDUCE_SCATTER_COALESCED = {"reduce_scatter_coalesced",
                                                c_reduce_scatter_coalesced,
                                                COAL,
                                                COAL,
                                                0,
                                                0,
                                                0,
                                                {SH_ROWS_BY_P},
                                                {0},
                                                ROWS(REDUCE_SCATTER_COALESCED_ROWS)};

START_TEST(reduce_scatter_coalesced) {
  fx_t f;
  fx_init(&f);
  t_cases(&REDUCE_SCATTER_COALESCED, &f);
  int dims[2] = {0, 0};
  int64_t rshape[2] = {2, 3};
  tcoll_tensor_t ov_in[2] = {f.in, big_view(&f, 0, 2, f.in.shape)};
  tcoll_tensor_t ov_out[2] = {t_empty(), big_view(&f, 1, 2, rshape)};
  BAD(tcoll_reduce_scatter_coalesced(ov_in, 2, TCOLL_SUM, dims, NULL, ov_out), "out[1] (");
  BAD(tcoll_reduce_scatter_coalesced(ov_in, 2, TCOLL_SUM, dims, NULL, ov_out), "overlaps in[1]");
  STILL_NULL(ov_out[0]);
  tcoll_tensor_t in[2] = {f.in, f.in}, o[2] = {t_empty(), t_empty()};
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

static const row_t ALL_TO_ALL_SINGLE_ROWS[] = {
    R(A_IN_NULL, 0, "in is NULL"),
    R(IN_ | F_TENSOR, S_SCALAR, "in is a 0-dim tensor"),
    RW(W_MULTI, IN_ | F_TENSOR, S_ODD,
       "in->shape[0] is {rows-1}, not a multiple of the group size {size}"),
    R(A_OUT_NULL, 0, "out is NULL"),
};
static const coll_t ALL_TO_ALL_SINGLE = {
    "all_to_all_single",         c_all_to_all_single, ONE, ONE, 0, 0, 0, {SH_SAME}, {0},
    ROWS(ALL_TO_ALL_SINGLE_ROWS)};

START_TEST(all_to_all_single) {
  fx_t f;
  fx_init(&f);
  t_cases(&ALL_TO_ALL_SINGLE, &f);
  /* Split sizes. */
  int64_t isplit[T_MAXR], osplit[T_MAXR];
  for (int r = 0; r < t_size; r++) isplit[r] = osplit[r] = 2;
  tcoll_tensor_t o = t_empty();
  BAD(tcoll_all_to_all_single(&f.in, osplit, NULL, NULL, &o), "specified together");
  BAD(tcoll_all_to_all_single(&f.in, NULL, isplit, NULL, &o), "specified together");
  isplit[t_size - 1] = 3;
  char needle[96];
  snprintf(needle, sizeof needle, "input_split_sizes sum to %lld rows but input has %lld",
           (long long)f.rows + 1, (long long)f.rows);
  BAD(tcoll_all_to_all_single(&f.in, osplit, isplit, NULL, &o), needle);
  isplit[t_size - 1] = 2;
  isplit[0] = -1;
  BAD(tcoll_all_to_all_single(&f.in, osplit, isplit, NULL, &o), "input_split_sizes[0] is -1");
  isplit[0] = 2;
  osplit[t_size - 1] = -4;
  snprintf(needle, sizeof needle, "output_split_sizes[%d] is -4", t_size - 1);
  BAD(tcoll_all_to_all_single(&f.in, osplit, isplit, NULL, &o), needle);
  osplit[t_size - 1] = 2;
  /* With splits, the output has sum(output_split_sizes) rows. */
  osplit[0] = 3;
  tcoll_tensor_t wrong_rows = tcoll_tensor_make(f.spare.data, F32, 2, f.in.shape, f.dev);
  BAD(tcoll_all_to_all_single(&f.in, osplit, isplit, NULL, &wrong_rows), "out->shape is");
  osplit[0] = 2;
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 5, 2, f.in.shape);
  BAD(tcoll_all_to_all_single(&ov_in, NULL, NULL, NULL, &ov_out), "overlaps");
  BAD(tcoll_all_to_all_single(&ov_in, NULL, NULL, NULL, &ov_in), "overlaps"); /* no in place */
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

static const row_t BROADCAST_ROWS[] = {
    R(A_IN_NULL, 0, "in is NULL"),
    R(A_I0, S_SIZE, "src is {size}"),
    R(A_I0, -1, "src is -1"),
    R(A_OUT_NULL, 0, "out is NULL"),
};
static const coll_t BROADCAST = {"broadcast", c_broadcast, ONE,       ONE, 0,
                                 0,           0,           {SH_SAME}, {0}, ROWS(BROADCAST_ROWS)};

START_TEST(broadcast) {
  fx_t f;
  fx_init(&f);
  t_cases(&BROADCAST, &f);
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 1, 2, f.in.shape);
  BAD(tcoll_broadcast(&ov_in, 0, NULL, &ov_out), "overlaps");
  tcoll_tensor_t o = t_empty();
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

static const row_t PERMUTE_ROWS[] = {
    R(A_IN_NULL, 0, "in is NULL"),
    R(A_AUX_NULL, 0, "src_dst is NULL"),
    R(A_OUT_NULL, 0, "out is NULL"),
};
static const coll_t PERMUTE = {"permute", c_permute, ONE,       ONE, 0,
                               0,         0,         {SH_SAME}, {0}, ROWS(PERMUTE_ROWS)};

START_TEST(permute) {
  fx_t f;
  fx_init(&f);
  t_cases(&PERMUTE, &f);
  tcoll_tensor_t o = t_empty();
  int perm[T_MAXR], bad[T_MAXR];
  for (int m = 0; m < t_size; m++) perm[m] = (m + 1) % t_size;
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
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 2, 2, f.in.shape);
  BAD(tcoll_permute(&ov_in, perm, NULL, &ov_out), "overlaps");
  BAD(tcoll_permute(&ov_in, perm, NULL, &ov_in), "overlaps");
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

static const row_t SHARD_DIM_ROWS[] = {
    R(A_IN_NULL, 0, "in is NULL"),
    R(A_I0, 2, "gather_dim is 2"),
    R(A_I1, -3, "shard_dim is -3"),
    R(A_I0, -5, "gather_dim is -5"),
    RW(W_MULTI, IN_ | F_TENSOR, S_ODD,
       "input dimension 0 ({rows-1}) must be a multiple of group_size {size}"),
    R(A_OUT_NULL, 0, "out is NULL"),
};
static const coll_t SHARD_DIM = {
    "shard_dim_all_to_all", c_shard_dim_all_to_all, ONE, ONE, 0, 1, 0, {SH_SHARD}, {0},
    ROWS(SHARD_DIM_ROWS)};

START_TEST(shard_dim_all_to_all) {
  fx_t f;
  fx_init(&f);
  t_cases(&SHARD_DIM, &f);
  int64_t sshape[2] = {2, 3 * t_size};
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 3, 2, sshape);
  BAD(tcoll_shard_dim_all_to_all(&ov_in, 1, 0, NULL, &ov_out), "overlaps");
  tcoll_tensor_t o = t_empty();
  T_OK(tcoll_shard_dim_all_to_all(&f.in, 1, 0, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("shard_dim_all_to_all after bad calls", &o, sd_val, NULL, 0);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

/* ------------------------------------------------------------------ rooted forms */

static const row_t REDUCE_ROWS[] = {
    R(A_IN_NULL, 0, "in is NULL"),     R(A_I0, S_SIZE, "dst is {size}"),
    R(A_I0, -2, "dst is -2"),          R(A_OP, TCOLL_BAND, "op band needs an integer"),
    R(A_OP, 1000000, "op is 1000000"), R(A_OUT_NULL, 0, "out is NULL"),
};
static const coll_t REDUCE = {"reduce", c_reduce, ONE,       ONE, REDUCES,
                              0,        0,        {SH_SAME}, {0}, ROWS(REDUCE_ROWS)};

START_TEST(reduce) {
  fx_t f;
  fx_init(&f);
  t_cases(&REDUCE, &f);
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape), ov_out = big_view(&f, 1, 2, f.in.shape);
  BAD(tcoll_reduce(&ov_in, 0, TCOLL_SUM, NULL, &ov_out), "overlaps");
  tcoll_tensor_t o = t_empty();
  T_OK(tcoll_reduce(&f.in, 0, TCOLL_SUM, NULL, &o));
  T_OK(tcoll_wait(o.data));
  if (t_rank == 0) t_check_all("reduce after bad calls", &o, sum_val, NULL, 0);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

/* The list outs[r] holds rank r's rank_val (gather, all_gather_list, all_to_all). */
static void check_rank_blocks(const char *what, const tcoll_tensor_t *outs, int64_t n) {
  for (int r = 0; r < t_size; r++) {
    double vals[64];
    t_read(&outs[r], vals);
    for (int i = 0; i < n; i++)
      T_EXPECT(vals[i] == (double)(r + 1) * (double)(i % 7 + 1), "%s outs[%d][%d] is %g", what, r,
               i, vals[i]);
  }
}

static const row_t GATHER_ROWS[] = {
    R(A_IN_NULL, 0, "in is NULL"),
    R(A_I0, S_SIZE, "dst is {size}"),
    R(A_I0, -1, "dst is -1"),
    /* The list is checked where it is used: each rank makes itself dst, so every rank refuses
     * (no rank is left waiting for a partner). */
    R2(A_I0, S_RANK, A_OUT_NULL, 0, "outs is NULL on dst"),
};
static const coll_t GATHER = {"gather", c_gather, ONE,       LIST, SELF_OUT | ROOT_OUTS,
                              0,        0,        {SH_SAME}, {0},  ROWS(GATHER_ROWS)};

START_TEST(gather) {
  fx_t f;
  fx_init(&f);
  t_cases(&GATHER, &f);
  int L = t_size - 1;
  tcoll_tensor_t ov_outs[T_MAXR] = {t_empty(), t_empty(), t_empty(), t_empty()};
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape);
  ov_outs[L] = big_view(&f, 1, 2, f.in.shape);
  BAD(tcoll_gather(&ov_in, t_rank, NULL, ov_outs), "overlaps in");
  for (int r = 0; r < L; r++) STILL_NULL(ov_outs[r]);
  if (t_size > 1) { /* two entries of the list on one buffer: refused before anything starts */
    tcoll_tensor_t same[T_MAXR] = {t_empty(), t_empty(), t_empty(), t_empty()};
    same[0] = same[L] = big_view(&f, f.n * 2, 2, f.in.shape);
    BAD_NOHEAP(tcoll_gather(&f.in, t_rank, NULL, same), "overlaps");
  }
  tcoll_tensor_t outs[T_MAXR] = {t_empty(), t_empty(), t_empty(), t_empty()};
  T_OK(tcoll_gather(&f.in, 0, NULL, t_rank == 0 ? outs : NULL));
  T_OK(tcoll_wait_all());
  if (t_rank == 0) check_rank_blocks("gather", outs, f.n);
  for (int r = 0; r < T_MAXR; r++) tcoll_tensor_free(&outs[r]);
  fx_free(&f);
}
END_TEST

static const row_t SCATTER_ROWS[] = {
    /* On every rank: src, and the description of the piece. */
    R(A_I0, S_SIZE, "src is {size}"),
    R(A_I0, -1, "src is -1"),
    R(A_OUT_NULL, 0, "out is NULL"),
    R(OUT_ | F_DTYPE, 42, "out->dtype is 42"),
    R(OUT_ | F_SHAPE1, -2, "out->shape[1] is -2"),
    R(OUT_ | F_NDIM, 10, "out->ndim is 10"),
    R(OUT_ | F_DEVICE, S_NDEV, "out->device is {ndev}"),
    /* The list, where it is read: each rank makes itself src. */
    R2(A_I0, S_RANK, A_IN_NULL, 0, "ins is NULL on src"),
    RW2(W_MULTI, A_I0, S_RANK, IN_ | F_TENSOR, S_IIN, "ins[{last}] differs from ins[0]"),
    RW2(W_MULTI, A_I0, S_RANK, IN_ | F_DEVICE, S_OTHER_DEV, "ins[{last}]->device is"),
};
static const coll_t SCATTER = {"scatter", c_scatter, LIST,      ONE, SELF_IN | SELF_OUT | DESC_OUTS,
                               0,         0,         {SH_SAME}, {0}, ROWS(SCATTER_ROWS)};

START_TEST(scatter) {
  fx_t f;
  fx_init(&f);
  t_cases(&SCATTER, &f);
  int L = t_size - 1;
  tcoll_tensor_t ins[T_MAXR];
  for (int r = 0; r < T_MAXR; r++) ins[r] = f.in;
  /* The piece must match the list on src. */
  int64_t other_shape[2] = {f.rows, 2};
  tcoll_tensor_t piece = desc(F32, 2, other_shape, f.dev);
  BAD(tcoll_scatter(ins, t_rank, NULL, &piece), "out describes a different piece");
  STILL_NULL(piece);
  tcoll_tensor_t ov_ins[T_MAXR];
  for (int r = 0; r < T_MAXR; r++) ov_ins[r] = f.in;
  ov_ins[L] = big_view(&f, 0, 2, f.in.shape);
  tcoll_tensor_t ov_out = big_view(&f, 1, 2, f.in.shape);
  char needle[96];
  snprintf(needle, sizeof needle, "overlaps ins[%d]", L);
  BAD(tcoll_scatter(ov_ins, t_rank, NULL, &ov_out), needle);
  T_EXPECT(t_contains(tcoll_last_error(), ": out ("), "the single output is not named \"out\": %s",
           tcoll_last_error());
  /* Valid: src 0 sends ins[r] = (r + 1) * (i % 7 + 1), which is rank_val on rank r. */
  tcoll_tensor_t o = desc(F32, 2, f.in.shape, f.dev), src_ins[T_MAXR];
  for (int r = 0; r < t_size; r++) src_ins[r] = t_alloc(F32, 2, f.in.shape);
  if (t_rank == 0) {
    for (int r = 0; r < t_size; r++) {
      tcoll_tensor_t h = t_host(F32, 2, f.in.shape);
      for (int i = 0; i < f.n; i++) ((float *)h.data)[i] = (float)((r + 1) * (i % 7 + 1));
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

static const row_t ALL_GATHER_LIST_ROWS[] = {
    R(A_IN_NULL, 0, "in is NULL"),
    R(A_OUT_NULL, 0, "outs is NULL"),
};
static const coll_t ALL_GATHER_LIST = {
    "all_gather_list",         c_all_gather_list, ONE, LIST, 0, 0, 0, {SH_SAME}, {0},
    ROWS(ALL_GATHER_LIST_ROWS)};

START_TEST(all_gather_list) {
  fx_t f;
  fx_init(&f);
  t_cases(&ALL_GATHER_LIST, &f);
  int L = t_size - 1;
  tcoll_tensor_t ov_outs[T_MAXR] = {t_empty(), t_empty(), t_empty(), t_empty()};
  tcoll_tensor_t ov_in = big_view(&f, 0, 2, f.in.shape);
  ov_outs[L] = big_view(&f, f.n - 1, 2, f.in.shape);
  BAD(tcoll_all_gather_list(&ov_in, NULL, ov_outs), "overlaps in");
  if (t_size > 1) {
    tcoll_tensor_t same[T_MAXR] = {t_empty(), t_empty(), t_empty(), t_empty()};
    same[0] = big_view(&f, f.n * 2, 2, f.in.shape);
    same[L] = big_view(&f, f.n * 2 + 1, 2, f.in.shape);
    BAD_NOHEAP(tcoll_all_gather_list(&f.in, NULL, same), "overlaps");
    for (int r = 1; r < L; r++) STILL_NULL(same[r]);
  }
  tcoll_tensor_t outs[T_MAXR] = {t_empty(), t_empty(), t_empty(), t_empty()};
  T_OK(tcoll_all_gather_list(&f.in, NULL, outs));
  T_OK(tcoll_wait_all());
  check_rank_blocks("all_gather_list", outs, f.n);
  for (int r = 0; r < T_MAXR; r++) tcoll_tensor_free(&outs[r]);
  fx_free(&f);
}
END_TEST

static const row_t REDUCE_SCATTER_LIST_ROWS[] = {
    R(A_IN_NULL, 0, "ins is NULL"),
    RW(W_MULTI, IN_ | F_TENSOR, S_IIN, "ins[{last}] differs from ins[0]"),
    RW(W_MULTI, IN_ | F_DEVICE, S_OTHER_DEV, "ins[{last}]->device is"),
    R(A_OP, TCOLL_BAND, "op band needs an integer"),
    R(A_OP, 42, "op is 42"),
    R(A_OUT_NULL, 0, "out is NULL"),
};
static const coll_t REDUCE_SCATTER_LIST = {
    "reduce_scatter_list",         c_reduce_scatter_list, LIST, ONE, REDUCES, 0, 0, {SH_SAME}, {0},
    ROWS(REDUCE_SCATTER_LIST_ROWS)};

START_TEST(reduce_scatter_list) {
  fx_t f;
  fx_init(&f);
  t_cases(&REDUCE_SCATTER_LIST, &f);
  int L = t_size - 1;
  tcoll_tensor_t ov_ins[T_MAXR];
  for (int r = 0; r < T_MAXR; r++) ov_ins[r] = f.in;
  ov_ins[L] = big_view(&f, 0, 2, f.in.shape);
  tcoll_tensor_t ov_out = big_view(&f, 3, 2, f.in.shape);
  char needle[96];
  snprintf(needle, sizeof needle, "overlaps ins[%d]", L);
  BAD(tcoll_reduce_scatter_list(ov_ins, TCOLL_SUM, NULL, &ov_out), needle);
  T_EXPECT(t_contains(tcoll_last_error(), ": out ("), "the single output is not named \"out\": %s",
           tcoll_last_error());
  /* Valid: every entry is rank_val, so my piece is the sum S * (i % 7 + 1). */
  tcoll_tensor_t ins[T_MAXR], o = t_empty();
  for (int r = 0; r < T_MAXR; r++) ins[r] = f.in;
  T_OK(tcoll_reduce_scatter_list(ins, TCOLL_SUM, NULL, &o));
  T_OK(tcoll_wait(o.data));
  t_check_all("reduce_scatter_list after bad calls", &o, sum_val, NULL, 0);
  tcoll_tensor_free(&o);
  fx_free(&f);
}
END_TEST

/* outs[i] describes what rank i sends (shapes may differ per peer), with data or not. */
static const row_t ALL_TO_ALL_ROWS[] = {
    R(A_IN_NULL, 0, "ins is NULL"),
    R(A_OUT_NULL, 0, "outs is NULL"),
    RW(W_MULTI, IN_ | F_TENSOR, S_IIN, "ins[{last}]->dtype is int32 (expected float32"),
    RW(W_MULTI, IN_ | F_DEVICE, S_OTHER_DEV, "ins[{last}]->device is"),
    R(OUT_ | F_SHAPE0, -1, "outs[{last}]->shape[0] is -1"),
    R(OUT_ | F_DTYPE, 42, "outs[{last}]->dtype is 42"),
    R(OUT_ | F_NDIM, -2, "outs[{last}]->ndim is -2"),
    R(OUT_ | F_DEVICE, S_NDEV, "outs[{last}]->device is {ndev}"),
    R(OUTD_ | F_DTYPE, TCOLL_FLOAT64, "outs[{last}]->dtype is float64 (expected float32)"),
    R(OUTD_ | F_DEVICE, S_OTHER_DEV, "outs[{last}]->device is {other_dev}"),
};
static const coll_t ALL_TO_ALL = {
    "all_to_all", c_all_to_all, LIST, LIST, DESC_OUTS, 0, 0, {SH_NONE}, {0}, ROWS(ALL_TO_ALL_ROWS)};

START_TEST(all_to_all) {
  fx_t f;
  fx_init(&f);
  t_cases(&ALL_TO_ALL, &f);
  int L = t_size - 1;
  tcoll_tensor_t ov_ins[T_MAXR], ov_outs[T_MAXR];
  for (int r = 0; r < T_MAXR; r++) {
    ov_ins[r] = f.in;
    ov_outs[r] = desc(F32, 2, f.in.shape, f.dev);
  }
  ov_ins[0] = big_view(&f, 0, 2, f.in.shape);
  ov_outs[L] = big_view(&f, 2, 2, f.in.shape);
  char needle[96];
  snprintf(needle, sizeof needle, "outs[%d] (", L);
  BAD(tcoll_all_to_all(ov_ins, NULL, ov_outs), needle);
  BAD(tcoll_all_to_all(ov_ins, NULL, ov_outs), "overlaps ins[0]");
  for (int r = 0; r < L; r++) STILL_NULL(ov_outs[r]);
  /* Valid: ins[j] = rank_val for every j, so outs[r] = (r + 1) * (i % 7 + 1). */
  tcoll_tensor_t ins[T_MAXR], outs[T_MAXR];
  for (int r = 0; r < T_MAXR; r++) {
    ins[r] = f.in;
    outs[r] = desc(F32, 2, f.in.shape, f.dev);
  }
  T_OK(tcoll_all_to_all(ins, NULL, outs));
  T_OK(tcoll_wait_all());
  check_rank_blocks("all_to_all", outs, f.n);
  for (int r = 0; r < t_size; r++) tcoll_tensor_free(&outs[r]);
  fx_free(&f);
}
END_TEST

START_TEST(report) {
  /* The instruments themselves: the heap measure sees an allocation, the MPI counter a call. */
  t_heap_report("argcheck");
  long m0 = t_mpi_calls();
  tcoll_config_t saved, literal; /* the literal call (a small one may take node-shared memory) */
  T_OK(tcoll_get_config(&saved));
  literal = saved;
  snprintf(literal.algo, sizeof literal.algo, "mpi");
  T_OK(tcoll_set_config(&literal));
  tcoll_tensor_t in = t_alloc(F32, 1, (int64_t[]){4}), out = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait(out.data));
  T_OK(tcoll_set_config(&saved));
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
  T_EXPECT(made == want && iallreduce == want,
           "an all_reduce of 2500 with a limit of 1000 made "
           "%ld MPI calls, %ld of them MPI_Iallreduce (expected %ld)",
           made, iallreduce, want);
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
