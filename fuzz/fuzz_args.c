/* libFuzzer target for tcoll's argument checks and shape rules.
 *
 * LLVMFuzzerInitialize starts MPI as a singleton (no mpiexec) and tcoll with two emulated
 * devices. Each input is decoded into a short program of calls: shape functions, reduce-op
 * parsing and premul handles, tensor allocation, the functional collectives (plain, coalesced,
 * list and rooted forms), some differentiable forwards and their backward, rank-list
 * communicators, meshes, names and configuration changes, all on the size-1 world. Descriptors
 * take hostile values (invalid dtypes, ndim, negative and huge sizes, bad devices, dims, roots,
 * reduce ops, split sizes, rank lists, names).
 *
 * The harness computes independently whether each tensor descriptor is valid. Data buffers are
 * allocated only for valid descriptors of at most MAX_BYTES, with exactly the size the
 * descriptor says, so tcoll is never handed a buffer smaller than its descriptor. A valid but
 * larger descriptor gets data NULL (which must be refused); an invalid one gets a small dummy
 * buffer, which must be refused from the descriptor alone (reading it past its end would show
 * as a buffer overflow). After every call:
 *   - an invalid input must not be accepted, no call may return TCOLL_ERR_INTERNAL / MPI / CUDA;
 *   - a refused call leaves nothing pending and outputs given with data == NULL still NULL;
 *   - an accepted call completes with tcoll_wait_all() == TCOLL_SUCCESS.
 * Every input ends with nothing pending and everything it allocated freed, so leaks show. A
 * violated rule aborts (a crash libFuzzer reports with the input). */
#include "tcoll.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BYTES 4096
#define MAX_OPS 6

/* ------------------------------------------------------------------ input decoding */

typedef struct rd {
  const uint8_t *p;
  size_t n;
} rd_t;

static uint8_t u8(rd_t *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}

static uint64_t raw64(rd_t *r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | u8(r);
  return v;
}

static const int64_t interesting64[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16, -1, -2, -7, INT64_MAX, INT64_MIN,
                                        INT64_C(1) << 31, (INT64_C(1) << 31) - 1, INT64_C(1) << 32,
                                        INT64_C(1) << 40, INT64_C(1) << 61, (INT64_C(1) << 61) + 1,
                                        INT64_C(1) << 62, INT64_MAX / 2 + 1, INT_MAX, (int64_t)INT_MAX + 1};
#define N64 (sizeof interesting64 / sizeof interesting64[0])

/* Mostly small sizes, sometimes hostile ones. */
static int64_t size_val(rd_t *r) {
  uint8_t b = u8(r);
  if (b < 176) return b % 5;
  if (b < 250) return interesting64[b % N64];
  return (int64_t)raw64(r);
}

static int int_val(rd_t *r, int lo, int hi) { /* mostly in [lo, hi], sometimes anything */
  uint8_t b = u8(r);
  if (b < 200) return lo + b % (hi - lo + 1);
  static const int odd[] = {-1, -2, -9, 9, 100, INT_MAX, INT_MIN, INT_MAX - 1, 65536, 1000};
  if (b < 250) return odd[b % 10];
  return (int)(uint32_t)raw64(r);
}

static double double_val(rd_t *r) {
  uint8_t b = u8(r);
  static const double vals[] = {1.0, 0.5, -2.0, 0.0, -0.0, 1e308, -1e308, 1e-310};
  if (b < 200) return vals[b % 8];
  if (b < 220) return NAN;
  if (b < 240) return b % 2 ? INFINITY : -INFINITY;
  uint64_t bits = raw64(r);
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

/* A NUL-terminated string of up to max - 1 bytes. */
static void str_val(rd_t *r, char *buf, size_t max) {
  size_t len = u8(r) % max;
  for (size_t i = 0; i < len; i++) {
    buf[i] = (char)u8(r);
    if (!buf[i]) buf[i] = 'a';
  }
  buf[len] = '\0';
}

/* ------------------------------------------------------------------ oracle helpers */

#define REQUIRE(cond, ...)                                                                                           \
  do {                                                                                                               \
    if (!(cond)) {                                                                                                   \
      fprintf(stderr, "fuzz_args: %s:%d: rule broken: %s: ", __FILE__, __LINE__, #cond);                             \
      fprintf(stderr, __VA_ARGS__);                                                                                  \
      fprintf(stderr, "\nlast error: %s\n", tcoll_last_error());                                                     \
      abort();                                                                                                       \
    }                                                                                                                \
  } while (0)

static int ndev;
static bool verbose; /* FUZZ_ARGS_VERBOSE=1: print each call's tensors (to study a crashing input) */

static void show(const char *what, const tcoll_tensor_t *t) {
  if (!verbose) return;
  fprintf(stderr, "  %s: data %p dtype %d ndim %d device %d shape [", what, t->data, (int)t->dtype, t->ndim, t->device);
  for (int i = 0; i < t->ndim && i < TCOLL_MAX_DIMS; i++) fprintf(stderr, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  fprintf(stderr, "]\n");
}
static _Alignas(256) unsigned char dummy[MAX_BYTES]; /* data for invalid descriptors */

/* Whether t's descriptor is valid (the rules of tcoll.h, computed here independently), and its
 * size in bytes when it is. */
static bool desc_valid(const tcoll_tensor_t *t, size_t *nbytes) {
  static const size_t sizes[TCOLL_NUM_DTYPES] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
  *nbytes = 0;
  if ((int)t->dtype < 0 || (int)t->dtype >= TCOLL_NUM_DTYPES) return false;
  if (t->ndim < 0 || t->ndim > TCOLL_MAX_DIMS) return false;
  if (t->device != TCOLL_HOST && (t->device < 0 || t->device >= ndev)) return false;
  bool empty = false;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0) return false;
    if (t->shape[i] == 0) empty = true;
  }
  if (empty) return true;
  __int128 bytes = (__int128)sizes[t->dtype];
  for (int i = 0; i < t->ndim; i++) {
    bytes *= t->shape[i];
    if (bytes > (__int128)INT64_MAX) return false; /* more than 2^63 bytes */
  }
  *nbytes = bytes > (__int128)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
  return true;
}

/* Buffers this harness allocated for the current input, freed at its end (outputs tcoll
 * allocates are freed by the operation that asked for them). */
#define MAX_MADE 512
static tcoll_tensor_t made[MAX_MADE];
static int nmade;

/* A descriptor from the input: mostly valid and small. */
static tcoll_tensor_t gen_desc(rd_t *r) {
  tcoll_tensor_t t;
  memset(&t, 0, sizeof t);
  uint8_t b = u8(r);
  t.dtype = b < 240 ? (tcoll_dtype_t)(b % TCOLL_NUM_DTYPES) : (tcoll_dtype_t)int_val(r, -3, 12);
  b = u8(r);
  t.ndim = b < 230 ? b % 4 : int_val(r, -2, 10);
  for (int i = 0; i < TCOLL_MAX_DIMS; i++) t.shape[i] = i < t.ndim ? size_val(r) : 0;
  b = u8(r);
  t.device = b < 190 ? TCOLL_HOST : b < 230 ? (b % 2) : int_val(r, -3, 3);
  return t;
}

/* Gives t data: an exact buffer when valid and small (tcoll_tensor_alloc must accept it), NULL
 * when valid and large, the dummy when invalid. Returns whether t is valid and has data (or
 * needs none). */
static bool materialize(tcoll_tensor_t *t) {
  size_t nb;
  bool valid = desc_valid(t, &nb);
  t->data = NULL;
  if (!valid) {
    t->data = dummy;
    tcoll_tensor_t tmp = {0};
    int rc = tcoll_tensor_alloc(&tmp, t->dtype, t->ndim, t->shape, t->device);
    REQUIRE(rc == TCOLL_ERR_INVALID_ARGUMENT && tmp.data == NULL, "tcoll_tensor_alloc accepted an invalid descriptor (%s)",
            tcoll_status_string(rc));
    return false;
  }
  if (nb > MAX_BYTES) return false; /* data NULL with elements: must be refused */
  if (nmade >= MAX_MADE) abort();
  tcoll_tensor_t tmp = {0};
  int rc = tcoll_tensor_alloc(&tmp, t->dtype, t->ndim, t->shape, t->device);
  REQUIRE(rc == TCOLL_SUCCESS && tmp.data, "tcoll_tensor_alloc refused a valid %zu-byte descriptor (%s)", nb,
          tcoll_status_string(rc));
  REQUIRE(tcoll_tensor_nbytes(&tmp) == nb, "nbytes %zu, expected %zu", tcoll_tensor_nbytes(&tmp), nb);
  made[nmade++] = tmp;
  t->data = tmp.data;
  return true;
}

/* An input tensor: its descriptor from the input, then data as above. */
static tcoll_tensor_t gen_tensor(rd_t *r, bool *ok) {
  tcoll_tensor_t t = gen_desc(r);
  *ok = materialize(&t);
  return t;
}

typedef enum { OUT_ALLOC, OUT_SAME, OUT_RANDOM, OUT_LIKE } out_mode_t;

/* An output for an op whose output on the size-1 world is shaped like `like`: data NULL (tcoll
 * allocates it; only when like is valid: then it is small), `like` itself (in place), a
 * random descriptor (materialized), or a fresh buffer shaped like `like`. */
static tcoll_tensor_t gen_out(rd_t *r, const tcoll_tensor_t *like, bool like_ok, out_mode_t *mode) {
  *mode = (out_mode_t)(u8(r) % 4);
  tcoll_tensor_t o;
  switch (*mode) {
  case OUT_ALLOC:
    memset(&o, 0, sizeof o);
    o.device = TCOLL_HOST;
    return o;
  case OUT_SAME: return *like;
  case OUT_RANDOM: o = gen_desc(r); break;
  case OUT_LIKE: o = *like; break;
  }
  if (*mode == OUT_LIKE && !like_ok) {
    o.data = like->data;
    if (!o.data) *mode = OUT_ALLOC;
    return o;
  }
  materialize(&o);
  if (!o.data) *mode = OUT_ALLOC; /* valid but large: data NULL means "allocate it" to tcoll */
  return o;
}

/* ------------------------------------------------------------------ checking a call */

typedef struct call {
  int rc;
  bool must_fail;
  tcoll_tensor_t *alloc_outs[8]; /* outputs given with data NULL */
  int nalloc;
} call_t;

static void expect_alloc(call_t *c, tcoll_tensor_t *o, out_mode_t mode) {
  if (mode == OUT_ALLOC && c->nalloc < 8) c->alloc_outs[c->nalloc++] = o;
}

static void after(call_t *c, const char *what) {
  int rc = c->rc;
  if (verbose) fprintf(stderr, "%s -> %s (must fail: %d) %s\n", what, tcoll_status_string(rc), c->must_fail, tcoll_last_error());
  REQUIRE(rc == TCOLL_SUCCESS || rc == TCOLL_ERR_INVALID_ARGUMENT || rc == TCOLL_ERR_UNSUPPORTED ||
              rc == TCOLL_ERR_BUSY || rc == TCOLL_ERR_NO_MEMORY,
          "%s returned %s", what, tcoll_status_string(rc));
  if (c->must_fail) REQUIRE(rc != TCOLL_SUCCESS, "%s accepted an invalid argument", what);
  if (rc != TCOLL_SUCCESS) {
    REQUIRE(tcoll_pending_count() == 0, "%s refused, but left %zu buffer(s) pending", what, tcoll_pending_count());
    for (int i = 0; i < c->nalloc; i++)
      REQUIRE(c->alloc_outs[i]->data == NULL, "%s refused, but allocated output %d", what, i);
    REQUIRE(tcoll_last_error()[0] != '\0', "%s failed without a message", what);
    return;
  }
  int w = tcoll_wait_all();
  REQUIRE(w == TCOLL_SUCCESS, "%s was accepted but completed with %s", what, tcoll_status_string(w));
}

/* Frees the outputs tcoll allocated for an accepted call. */
static void free_allocated(call_t *c) {
  if (c->rc != TCOLL_SUCCESS) return;
  for (int i = 0; i < c->nalloc; i++) tcoll_tensor_free(c->alloc_outs[i]);
}

/* ------------------------------------------------------------------ the operations */

static tcoll_redop_t gen_op(rd_t *r, tcoll_redop_t premul) {
  uint8_t b = u8(r);
  if (b < 200) return b % TCOLL_NUM_BUILTIN_REDOPS;
  if (b < 230) return premul;
  return int_val(r, -2, 10);
}

/* Whether op is one that tcoll accepts for dtype (redop rules of tcoll.h). */
static bool op_valid(tcoll_redop_t op, tcoll_redop_t premul, bool have_premul, tcoll_dtype_t dt) {
  bool fl = dt == TCOLL_FLOAT16 || dt == TCOLL_BFLOAT16 || dt == TCOLL_FLOAT32 || dt == TCOLL_FLOAT64;
  if (op == TCOLL_AVG || (have_premul && op == premul)) return fl;
  if (op == TCOLL_BAND || op == TCOLL_BOR || op == TCOLL_BXOR) return !fl;
  return op >= 0 && op < TCOLL_NUM_BUILTIN_REDOPS;
}

static bool dim_ok(int dim, int ndim) { return ndim >= 1 && dim >= -ndim && dim < ndim; }

static void op_shapes(rd_t *r) {
  tcoll_tensor_t t = gen_desc(r);
  size_t nb;
  bool valid = desc_valid(&t, &nb);
  int dim = int_val(r, -3, 3), gs = int_val(r, -1, 4);
  int64_t shape[TCOLL_MAX_DIMS + 1];
  for (int i = 0; i <= TCOLL_MAX_DIMS; i++) shape[i] = -77;
  bool null_shape = u8(r) % 8 == 0;
  int rc = tcoll_all_gather_shape(u8(r) % 16 ? &t : NULL, dim, gs, null_shape ? NULL : shape);
  if (!valid || gs < 1 || null_shape || !dim_ok(dim, t.ndim)) REQUIRE(rc != TCOLL_SUCCESS, "all_gather_shape accepted");
  if (rc == TCOLL_SUCCESS) {
    int d = dim < 0 ? dim + t.ndim : dim;
    REQUIRE(shape[d] == t.shape[d] * gs, "all_gather_shape dim %d: %lld", d, (long long)shape[d]);
  } else {
    REQUIRE(shape[0] == -77, "all_gather_shape refused but wrote shape");
  }
  rc = tcoll_reduce_scatter_shape(&t, dim, gs, null_shape ? NULL : shape);
  if (!valid || gs < 1 || null_shape || !dim_ok(dim, t.ndim)) REQUIRE(rc != TCOLL_SUCCESS, "reduce_scatter_shape accepted");
  if (rc == TCOLL_SUCCESS) {
    int d = dim < 0 ? dim + t.ndim : dim;
    REQUIRE(t.shape[d] % gs == 0 && shape[d] == t.shape[d] / gs, "reduce_scatter_shape");
  }
  (void)tcoll_tensor_numel(&t);
  (void)tcoll_tensor_nbytes(&t);
  if (valid) REQUIRE(tcoll_tensor_nbytes(&t) == (nb == SIZE_MAX ? 0 : nb) || nb > (size_t)INT64_MAX, "nbytes");
}

static void op_redops(rd_t *r) {
  char name[48];
  str_val(r, name, sizeof name);
  tcoll_redop_t op = -99;
  int rc = tcoll_redop_from_string(name, &op);
  if (rc == TCOLL_SUCCESS) REQUIRE(op >= 0 && op < TCOLL_NUM_BUILTIN_REDOPS, "redop_from_string gave %d", op);
  else REQUIRE(op == -99 && strstr(tcoll_last_error(), "Unrecognized reduce_op: "), "redop_from_string refusal");
  (void)tcoll_redop_name(int_val(r, -2, 12));
  double s = double_val(r);
  tcoll_redop_t p = -99;
  rc = tcoll_redop_create_premul_sum(s, &p);
  REQUIRE((rc == TCOLL_SUCCESS) == (bool)isfinite(s), "premul_sum(%g) gave %s", s, tcoll_status_string(rc));
  if (rc == TCOLL_SUCCESS) {
    REQUIRE(!strcmp(tcoll_redop_name(p), "premul_sum"), "premul name");
    REQUIRE(tcoll_redop_destroy(p) == TCOLL_SUCCESS, "destroy");
    REQUIRE(tcoll_redop_destroy(p) == TCOLL_ERR_INVALID_ARGUMENT, "destroy twice");
  }
  rc = tcoll_redop_destroy(int_val(r, -2, 10));
  REQUIRE(rc == TCOLL_ERR_INVALID_ARGUMENT, "destroying a built-in or unknown op");
}

/* One functional collective on the world (size 1). */
static void op_collective(rd_t *r, tcoll_redop_t premul) {
  bool ok;
  tcoll_tensor_t in = gen_tensor(r, &ok);
  out_mode_t mode;
  tcoll_tensor_t out = gen_out(r, &in, ok, &mode);
  call_t c = {0};
  /* With data, an output must be exactly like the input (size-1 world), or the input itself
   * for ops that allow in place. */
  size_t nb;
  bool out_exact = out.data && desc_valid(&out, &nb) && out.dtype == in.dtype && out.ndim == in.ndim &&
                   out.device == in.device && !memcmp(out.shape, in.shape, sizeof(int64_t) * (size_t)(in.ndim > 0 ? in.ndim : 0));
  bool out_bad = mode != OUT_ALLOC && !out_exact;
  /* in as its own output, where the op is not in place: refused unless it has no bytes */
  bool same_overlaps = mode == OUT_SAME && ok && tcoll_tensor_nbytes(&in) > 0;
  if (mode == OUT_ALLOC && !ok) c.must_fail = true;
  c.must_fail = c.must_fail || !ok;
  expect_alloc(&c, &out, mode);
  uint8_t which = u8(r) % 9;
  const char *what = "?";
  show("in", &in);
  show("out", &out);
  if (verbose) fprintf(stderr, "  out mode %d, in ok %d, out exact %d\n", (int)mode, ok, out_exact);
  tcoll_comm_t *comm = u8(r) % 4 ? NULL : tcoll_comm_world();
  switch (which) {
  case 0: {
    tcoll_redop_t op = gen_op(r, premul);
    c.must_fail = c.must_fail || out_bad || !op_valid(op, premul, true, in.dtype);
    c.rc = tcoll_all_reduce(&in, op, comm, &out);
    what = "all_reduce";
    break;
  }
  case 1: {
    int dim = int_val(r, -3, 3);
    c.must_fail = c.must_fail || (mode != OUT_SAME && out_bad) || !dim_ok(dim, in.ndim);
    c.rc = tcoll_all_gather(&in, dim, comm, &out);
    what = "all_gather";
    break;
  }
  case 2: {
    tcoll_redop_t op = gen_op(r, premul);
    int dim = int_val(r, -3, 3);
    c.must_fail = c.must_fail || out_bad || same_overlaps || !dim_ok(dim, in.ndim) || !op_valid(op, premul, true, in.dtype);
    c.rc = tcoll_reduce_scatter(&in, op, dim, comm, &out);
    what = "reduce_scatter";
    break;
  }
  case 3: {
    int64_t isz[1] = {size_val(r)}, osz[1] = {isz[0]};
    uint8_t form = u8(r) % 4;
    if (form == 3 && u8(r) % 2) osz[0] = -1 - (int64_t)(u8(r) % 3); /* a negative output split */
    const int64_t *ip = form == 0 ? NULL : isz, *op = form == 0 ? NULL : form == 1 ? NULL : osz;
    bool splits_ok = form == 0 || (form >= 2 && isz[0] >= 0 && osz[0] == isz[0] && in.ndim >= 1 && isz[0] == in.shape[0]);
    if (form == 1) splits_ok = false; /* one NULL, one not */
    c.must_fail = c.must_fail || out_bad || same_overlaps || !splits_ok || in.ndim < 1;
    c.rc = tcoll_all_to_all_single(&in, op, ip, comm, &out);
    what = "all_to_all_single";
    break;
  }
  case 4: {
    int src = int_val(r, 0, 1);
    c.must_fail = c.must_fail || out_bad || src != 0;
    c.rc = tcoll_broadcast(&in, src, comm, &out);
    what = "broadcast";
    break;
  }
  case 5: {
    int dst = int_val(r, 0, 1);
    tcoll_redop_t op = gen_op(r, premul);
    c.must_fail = c.must_fail || out_bad || dst != 0 || !op_valid(op, premul, true, in.dtype);
    c.rc = tcoll_reduce(&in, dst, op, comm, &out);
    what = "reduce";
    break;
  }
  case 6: {
    int sd[2] = {int_val(r, 0, 1), 0};
    c.must_fail = c.must_fail || out_bad || same_overlaps || sd[0] != 0;
    c.rc = tcoll_permute(&in, u8(r) % 16 ? sd : NULL, comm, &out);
    what = "permute";
    break;
  }
  case 7: {
    int g = int_val(r, -3, 3), s = int_val(r, -3, 3);
    c.must_fail = c.must_fail || out_bad || same_overlaps || !dim_ok(g, in.ndim) || !dim_ok(s, in.ndim);
    c.rc = tcoll_shard_dim_all_to_all(&in, g, s, comm, &out);
    what = "shard_dim_all_to_all";
    break;
  }
  case 8: {
    /* list and rooted forms: one entry per rank */
    uint8_t f = u8(r) % 4;
    int root = int_val(r, 0, 1);
    if (f == 0) {
      c.must_fail = c.must_fail || (mode != OUT_ALLOC && out_bad) || same_overlaps || root != 0;
      c.rc = tcoll_gather(&in, root, comm, &out);
      what = "gather";
    } else if (f == 1) {
      /* out describes the piece: only with a shape like in's (tcoll may allocate it). */
      if (mode == OUT_ALLOC) out = in, out.data = NULL;
      c.must_fail = c.must_fail || (mode != OUT_ALLOC && out_bad) || same_overlaps || root != 0;
      c.rc = tcoll_scatter(&in, root, comm, &out);
      what = "scatter";
    } else if (f == 2) {
      c.must_fail = c.must_fail || (mode != OUT_ALLOC && out_bad) || same_overlaps;
      c.rc = tcoll_all_gather_list(&in, comm, &out);
      what = "all_gather_list";
    } else {
      tcoll_redop_t op = gen_op(r, premul);
      c.must_fail = c.must_fail || out_bad || same_overlaps || !op_valid(op, premul, true, in.dtype);
      c.rc = tcoll_reduce_scatter_list(&in, op, comm, &out);
      what = "reduce_scatter_list";
    }
    break;
  }
  }
  after(&c, what);
  free_allocated(&c);
}

/* Coalesced forms over n tensors. */
static void op_coalesced(rd_t *r, tcoll_redop_t premul) {
  int n = int_val(r, 0, 4);
  if (n > 4) n = u8(r) % 2 ? -1 : 4;
  tcoll_tensor_t in[4], out[4];
  int dims[4];
  bool all_ok = true;
  for (int i = 0; i < 4; i++) {
    bool ok;
    in[i] = i < n ? gen_tensor(r, &ok) : gen_desc(r);
    if (i < n) all_ok = all_ok && ok;
    memset(&out[i], 0, sizeof out[i]);
    out[i].device = TCOLL_HOST;
    dims[i] = int_val(r, -2, 2);
  }
  call_t c = {0};
  for (int i = 0; i < n && i < 4; i++) expect_alloc(&c, &out[i], OUT_ALLOC);
  c.must_fail = n < 0 || !all_ok;
  for (int i = 1; i < n; i++) c.must_fail = c.must_fail || in[i].device != in[0].device;
  uint8_t which = u8(r) % 3;
  if (which == 0) {
    tcoll_redop_t op = gen_op(r, premul);
    for (int i = 0; i < n; i++) c.must_fail = c.must_fail || !op_valid(op, premul, true, in[i].dtype);
    c.rc = tcoll_all_reduce_coalesced(in, n, op, NULL, out);
    after(&c, "all_reduce_coalesced");
  } else if (which == 1) {
    for (int i = 0; i < n; i++) c.must_fail = c.must_fail || in[i].ndim < 1;
    c.rc = tcoll_all_gather_coalesced(in, n, NULL, out);
    after(&c, "all_gather_coalesced");
  } else {
    tcoll_redop_t op = gen_op(r, premul);
    for (int i = 0; i < n; i++)
      c.must_fail = c.must_fail || !op_valid(op, premul, true, in[i].dtype) || !dim_ok(dims[i], in[i].ndim);
    c.rc = tcoll_reduce_scatter_coalesced(in, n, op, dims, NULL, out);
    after(&c, "reduce_scatter_coalesced");
  }
  free_allocated(&c);
}

/* A differentiable forward, then its backward with a grad shaped like the output. */
static void op_grad(rd_t *r, tcoll_redop_t premul) {
  bool ok;
  tcoll_tensor_t x = gen_tensor(r, &ok), y, gin;
  memset(&y, 0, sizeof y);
  memset(&gin, 0, sizeof gin);
  y.device = gin.device = TCOLL_HOST;
  tcoll_grad_node_t *node = (tcoll_grad_node_t *)&ok;
  call_t c = {0};
  c.must_fail = !ok;
  expect_alloc(&c, &y, OUT_ALLOC);
  uint8_t which = u8(r) % 4;
  const char *what;
  if (which == 0) {
    tcoll_redop_t op = gen_op(r, premul);
    c.must_fail = c.must_fail || !op_valid(op, premul, true, x.dtype);
    c.rc = tcoll_grad_all_reduce(&x, op, NULL, &y, &node);
    what = "grad_all_reduce";
  } else if (which == 1) {
    int dim = int_val(r, -3, 3);
    c.must_fail = c.must_fail || !dim_ok(dim, x.ndim);
    c.rc = tcoll_grad_all_gather_into_tensor(&x, dim, NULL, &y, &node);
    what = "grad_all_gather_into_tensor";
  } else if (which == 2) {
    tcoll_redop_t op = gen_op(r, premul);
    int dim = int_val(r, -3, 3);
    c.must_fail = c.must_fail || !dim_ok(dim, x.ndim) || !op_valid(op, premul, true, x.dtype);
    c.rc = tcoll_grad_reduce_scatter_tensor(&x, op, dim, NULL, &y, &node);
    what = "grad_reduce_scatter_tensor";
  } else {
    int src = int_val(r, 0, 1);
    c.must_fail = c.must_fail || src != 0;
    c.rc = tcoll_grad_broadcast(&x, src, NULL, &y, &node);
    what = "grad_broadcast";
  }
  after(&c, what);
  if (c.rc != TCOLL_SUCCESS) {
    REQUIRE(node == NULL, "%s refused but left *node set", what);
    REQUIRE(y.data == NULL, "%s refused but allocated y", what);
  } else {
    REQUIRE(node != NULL, "%s gave no node", what);
    int ng = u8(r) % 8 ? 1 : int_val(r, -1, 2), ngi = u8(r) % 8 ? 1 : int_val(r, -1, 2);
    call_t b = {0};
    b.must_fail = ng != 1 || ngi != 1;
    expect_alloc(&b, &gin, OUT_ALLOC);
    b.rc = tcoll_grad_backward(node, &y, ng, &gin, ngi); /* y doubles as the grad: same desc */
    after(&b, "grad_backward");
    free_allocated(&b);
    tcoll_grad_node_free(node);
    REQUIRE(tcoll_grad_backward(node, &y, 1, &gin, 1) == TCOLL_ERR_INVALID_ARGUMENT, "backward on a freed node");
    tcoll_tensor_free(&y);
  }
}

/* Rank lists, meshes and names on the world of size 1. */
static void op_comms(rd_t *r) {
  uint8_t which = u8(r) % 4;
  if (which == 0) {
    int n = int_val(r, 0, 3), ranks[3] = {int_val(r, 0, 1), int_val(r, 0, 1), int_val(r, 0, 1)};
    char tag[24];
    str_val(r, tag, sizeof tag);
    tcoll_comm_t *c = NULL;
    const int *rp = u8(r) % 16 ? ranks : NULL;
    if (n > 3) n = 3; /* ranks holds 3 entries */
    int rc = tcoll_comm_from_ranks(NULL, rp, n, u8(r) % 8 ? tag : NULL, &c);
    bool valid = rp && n == 1 && ranks[0] == 0;
    if (valid) REQUIRE(rc == TCOLL_SUCCESS && c, "from_ranks refused a valid list (%s)", tcoll_status_string(rc));
    else REQUIRE(rc == TCOLL_ERR_INVALID_ARGUMENT && c == NULL, "from_ranks accepted an invalid list");
    if (rc == TCOLL_SUCCESS) REQUIRE(tcoll_comm_free(&c) == TCOLL_SUCCESS && c == NULL, "comm_free");
  } else if (which == 1) {
    int ng = int_val(r, 0, 2), gsz = int_val(r, 0, 2), ranks[4] = {int_val(r, 0, 1), int_val(r, 0, 1), 0, 0};
    tcoll_comm_t *c = NULL;
    /* on a world of one rank only a 1 x 1 list is read at all */
    int rc = tcoll_comm_from_rank_groups(NULL, ranks, ng, gsz, "g", &c);
    bool valid = ng == 1 && gsz == 1 && ranks[0] == 0;
    if (!valid) REQUIRE(rc != TCOLL_SUCCESS && c == NULL, "from_rank_groups accepted an invalid list");
    if (rc == TCOLL_SUCCESS) REQUIRE(tcoll_comm_free(&c) == TCOLL_SUCCESS, "comm_free");
  } else if (which == 2) {
    int nd = int_val(r, 0, 3), dims[TCOLL_MAX_DIMS];
    for (int i = 0; i < TCOLL_MAX_DIMS; i++) dims[i] = u8(r) % 8 ? 1 : int_val(r, -1, 2);
    tcoll_mesh_t *m = NULL;
    int rc = tcoll_mesh_create(NULL, nd, dims, &m);
    bool valid = nd >= 1 && nd <= TCOLL_MAX_DIMS;
    for (int i = 0; valid && i < nd; i++) valid = dims[i] == 1;
    REQUIRE((rc == TCOLL_SUCCESS) == valid, "mesh_create(%d dims) gave %s", nd, tcoll_status_string(rc));
    if (rc == TCOLL_SUCCESS) {
      int d = int_val(r, -1, 8);
      tcoll_comm_t *s = tcoll_mesh_comm(m, d);
      REQUIRE((s != NULL) == (d >= 0 && d < nd), "mesh_comm(%d)", d);
      REQUIRE(tcoll_mesh_coord(m, d) == (d >= 0 && d < nd ? 0 : -1), "mesh_coord");
      tcoll_mesh_t *old = m;
      REQUIRE(tcoll_mesh_free(&m) == TCOLL_SUCCESS, "mesh_free");
      REQUIRE(tcoll_mesh_free(&old) == TCOLL_ERR_INVALID_ARGUMENT, "mesh_free twice");
    }
  } else {
    char name[80];
    str_val(r, name, sizeof name);
    int one[1] = {0};
    tcoll_comm_t *c = NULL;
    REQUIRE(tcoll_comm_from_ranks(NULL, one, 1, "names", &c) == TCOLL_SUCCESS, "from_ranks");
    int rc = tcoll_comm_set_name(c, name);
    bool valid = strlen(name) < 64 && strcmp(name, "world") != 0;
    REQUIRE((rc == TCOLL_SUCCESS) == valid, "set_name(\"%s\") gave %s", name, tcoll_status_string(rc));
    if (rc == TCOLL_SUCCESS && name[0]) REQUIRE(tcoll_comm_lookup(name) == c, "lookup");
    REQUIRE(tcoll_comm_free(&c) == TCOLL_SUCCESS, "comm_free");
    if (name[0] && valid) REQUIRE(tcoll_comm_lookup(name) == NULL, "lookup after free");
  }
}

/* Single-process multi-device ops: devices are TCOLL_HOST, 0, 1 (valid) or others. */
static int dev_val(rd_t *r) {
  uint8_t b = u8(r);
  if (b < 220) return (int)(b % 3) - 1;
  return int_val(r, -3, 3);
}
static bool dev_ok(int d) { return d == TCOLL_HOST || (d >= 0 && d < ndev); }

static void free_outs(tcoll_tensor_t *o, int n, int rc) {
  for (int i = 0; i < n; i++) {
    if (rc == TCOLL_SUCCESS) tcoll_tensor_free(&o[i]);
    else REQUIRE(o[i].data == NULL, "a refused local op allocated output %d", i);
  }
}

static void op_local(rd_t *r) {
  tcoll_tensor_t in[9], out[9];
  bool ok[9];
  int devs[3] = {dev_val(r), dev_val(r), dev_val(r)};
  for (int i = 0; i < 9; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].device = TCOLL_HOST;
  }
  int rc;
  uint8_t which = u8(r) % 4;
  if (which == 0) {
    int n = int_val(r, 0, 3), nd = int_val(r, 0, 3);
    if (n > 3 || nd > 3) n = -1; /* the arrays hold 3 */
    bool must_fail = n < 0 || nd < 0;
    for (int i = 0; i < 3; i++) {
      in[i] = gen_tensor(r, &ok[i]);
      if (i < n) must_fail = must_fail || !ok[i];
    }
    for (int d = 0; d < nd && d < 3; d++) must_fail = must_fail || !dev_ok(devs[d]);
    rc = tcoll_local_broadcast_coalesced(in, n, devs, nd, out);
    REQUIRE(!must_fail || rc != TCOLL_SUCCESS, "local_broadcast_coalesced accepted invalid input");
    free_outs(out, n > 0 && nd > 0 ? n * nd : 0, rc);
  } else if (which == 1) {
    int n = int_val(r, 0, 3), nd = int_val(r, 1, 3);
    if (n > 3 || nd > 3) n = -1;
    bool must_fail = n < 0 || nd < 1 || !dev_ok(devs[0]);
    tcoll_tensor_t base = gen_desc(r);
    for (int k = 0; k < 9; k++) { /* group d on one device, shaped like group 0 */
      in[k] = base;
      in[k].device = devs[(k / 3) % 3];
      if (u8(r) % 8 == 0) in[k] = gen_desc(r);
      ok[k] = materialize(&in[k]);
    }
    tcoll_tensor_t grouped[9];
    for (int d = 0; d < nd && d < 3 && n > 0; d++)
      for (int i = 0; i < n; i++) {
        grouped[d * n + i] = in[d * 3 + i];
        must_fail = must_fail || !ok[d * 3 + i];
      }
    rc = tcoll_local_reduce_add_coalesced(grouped, nd, n, devs[0], out);
    REQUIRE(!must_fail || rc != TCOLL_SUCCESS, "local_reduce_add_coalesced accepted invalid input");
    free_outs(out, n > 0 ? n : 0, rc);
  } else if (which == 2) {
    in[0] = gen_tensor(r, &ok[0]);
    int nd = int_val(r, 1, 3), dim = int_val(r, -3, 3);
    if (nd > 3) nd = 0;
    int64_t chunks[3] = {size_val(r), size_val(r), size_val(r)};
    bool given = u8(r) % 2;
    bool must_fail = !ok[0] || nd < 1 || !dim_ok(dim, in[0].ndim);
    for (int d = 0; d < nd; d++) must_fail = must_fail || !dev_ok(devs[d]) || (given && chunks[d] < 0);
    rc = tcoll_local_scatter(&in[0], devs, nd, given ? chunks : NULL, dim, out);
    REQUIRE(!must_fail || rc != TCOLL_SUCCESS, "local_scatter accepted invalid input");
    free_outs(out, nd > 0 ? nd : 0, rc);
  } else {
    int n = int_val(r, 1, 3), dim = int_val(r, -3, 3), target = dev_val(r);
    if (n > 3) n = 0;
    tcoll_tensor_t base = gen_desc(r);
    bool must_fail = n < 1 || !dev_ok(target);
    for (int i = 0; i < 3; i++) {
      in[i] = base;
      in[i].device = devs[i];
      if (u8(r) % 4 == 0) in[i].shape[dim >= 0 && dim < TCOLL_MAX_DIMS ? dim : 0] = size_val(r);
      ok[i] = materialize(&in[i]);
      if (i < n) must_fail = must_fail || !ok[i];
    }
    rc = tcoll_local_gather(in, n, dim, target, &out[0]);
    REQUIRE(!must_fail || rc != TCOLL_SUCCESS, "local_gather accepted invalid input");
    free_outs(out, 1, rc);
  }
  REQUIRE(rc == TCOLL_SUCCESS || rc == TCOLL_ERR_INVALID_ARGUMENT || rc == TCOLL_ERR_NO_MEMORY,
          "local op %d returned %s", which, tcoll_status_string(rc));
}

/* NCCL-shaped multi-buffer ops over up to 3 buffers (host, device 0, device 1). */
static void op_multi(rd_t *r, tcoll_redop_t premul) {
  int n = int_val(r, 1, 3);
  if (n > 3) n = 0;
  tcoll_tensor_t base = gen_desc(r), in[3], out[3];
  int order[3] = {TCOLL_HOST, 0, 1};
  bool must_fail = n < 1;
  for (int i = 0; i < 3; i++) {
    in[i] = base;
    in[i].device = u8(r) % 16 ? order[i] : dev_val(r);
    bool ok = materialize(&in[i]);
    if (i < n) must_fail = must_fail || !ok;
    memset(&out[i], 0, sizeof out[i]);
    out[i].device = TCOLL_HOST;
  }
  tcoll_comm_t *w = tcoll_comm_world(), *cl[3] = {w, w, w};
  tcoll_comm_t *const *comms = u8(r) % 2 ? cl : NULL;
  tcoll_redop_t op = gen_op(r, premul);
  int root = int_val(r, 0, 3);
  int rc;
  uint8_t which = u8(r) % 5;
  switch (which) {
  case 0: rc = tcoll_multi_all_reduce(in, out, n, op, NULL, comms); break;
  case 1: rc = tcoll_multi_reduce(in, n, u8(r) % 2 ? out : NULL, root, op, NULL, comms); break;
  case 2: rc = tcoll_multi_broadcast(in, n, root, NULL, comms); break;
  case 3: rc = tcoll_multi_all_gather(in, out, n, NULL, comms); break;
  default: rc = tcoll_multi_reduce_scatter(in, out, n, op, NULL, comms); break;
  }
  REQUIRE(!must_fail || rc != TCOLL_SUCCESS, "multi op %d accepted invalid input", which);
  REQUIRE(rc == TCOLL_SUCCESS || rc == TCOLL_ERR_INVALID_ARGUMENT || rc == TCOLL_ERR_NO_MEMORY,
          "multi op %d returned %s", which, tcoll_status_string(rc));
  for (int d = 0; d < ndev; d++) tcoll_device_synchronize(d); /* outputs complete in stream order */
  free_outs(out, n > 0 ? n : 0, rc);
}

static tcoll_config_t base_config;

static void op_config(rd_t *r) {
  tcoll_config_t c = base_config;
  static const int64_t counts[] = {1, 2, 3, 7, 1000, INT_MAX, 0, -1, (int64_t)INT_MAX + 1};
  static const size_t chunks[] = {256, 512, 4096, (size_t)4 << 20, 255, 0};
  c.max_count = counts[u8(r) % 9];
  c.staging_chunk = chunks[u8(r) % 6];
  int rc = tcoll_set_config(&c);
  bool valid = c.max_count >= 1 && c.max_count <= INT_MAX && c.staging_chunk >= 256;
  REQUIRE((rc == TCOLL_SUCCESS) == valid, "set_config(max_count %lld, chunk %zu) gave %s", (long long)c.max_count,
          c.staging_chunk, tcoll_status_string(rc));
}

/* ------------------------------------------------------------------ libFuzzer entry points */

static void finish(void) {
  tcoll_finalize();
  MPI_Finalize();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  verbose = getenv("FUZZ_ARGS_VERBOSE") != NULL;
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("TCOLL_FAKE_DEVICES", "2", 0);
  setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 0); /* symbolized leak reports */
  setenv("OMPI_MCA_opal_signal", "", 0); /* crashes go to libFuzzer, which saves the input */
  int provided;
  MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  if (tcoll_init(NULL, NULL) != TCOLL_SUCCESS) {
    fprintf(stderr, "fuzz_args: tcoll_init failed: %s\n", tcoll_last_error());
    abort();
  }
  ndev = tcoll_device_count();
  tcoll_get_config(&base_config);
  atexit(finish);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rd_t r = {data, size};
  nmade = 0;
  tcoll_redop_t premul = -1;
  bool have_premul = tcoll_redop_create_premul_sum(0.5, &premul) == TCOLL_SUCCESS;
  for (int k = 0; k < MAX_OPS && r.n > 0; k++) {
    switch (u8(&r) % 10) {
    case 0: op_shapes(&r); break;
    case 1: op_redops(&r); break;
    case 2:
    case 3: op_collective(&r, premul); break;
    case 4: op_coalesced(&r, premul); break;
    case 5: op_grad(&r, premul); break;
    case 6: op_comms(&r); break;
    case 7: op_config(&r); break;
    case 8: op_local(&r); break;
    case 9: op_multi(&r, premul); break;
    }
  }
  /* Nothing may stay pending or allocated past the input. */
  REQUIRE(tcoll_wait_all() == TCOLL_SUCCESS, "wait_all at the end");
  REQUIRE(tcoll_pending_count() == 0, "pending at the end");
  for (int i = 0; i < nmade; i++) tcoll_tensor_free(&made[i]);
  if (have_premul) tcoll_redop_destroy(premul);
  tcoll_set_config(&base_config);
  return 0;
}
