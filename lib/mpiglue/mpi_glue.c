#include "mpi_glue.h"

#include "../base/dtype.h"

#include <string.h>

/* ------------------------------------------------------------------ user ops */

/* tcoll's own ops get their length as an MPI_Count where MPI has large counts, so that a _c
 * reduction above INT_MAX elements reaches them whole (MPI_Op_create_c). */
#if TC_MPI_LARGE_COUNT
typedef MPI_Count op_len_t;
typedef MPI_User_function_c op_fn_t;
static int op_create(op_fn_t *fn, MPI_Op *op) { return PMPI_Op_create_c(fn, 1, op); }
#else
typedef int op_len_t;
typedef MPI_User_function op_fn_t;
static int op_create(op_fn_t *fn, MPI_Op *op) { return PMPI_Op_create(fn, 1, op); }
#endif

/* ------------------------------------------------------------------ float16 / bfloat16 */

static MPI_Datatype mpi_f16 = MPI_DATATYPE_NULL, mpi_bf16 = MPI_DATATYPE_NULL;
static MPI_Op op_half[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL,
                            MPI_OP_NULL}; /* sum, prod, min, max */
enum { HALF_SUM, HALF_PROD, HALF_MIN, HALF_MAX };

/* inout[i] = in[i] (op) inout[i], each pair in float, rounded back once. */
#define HALF_OP_BODY(COMBINE)                                       \
  const uint16_t *a = in;                                           \
  uint16_t *b = inout;                                              \
  op_len_t n = *len;                                                \
  if (*dt == mpi_bf16) {                                            \
    for (op_len_t i = 0; i < n; i++) {                              \
      float x = tc_bf16_to_float(a[i]), y = tc_bf16_to_float(b[i]); \
      b[i] = tc_float_to_bf16(COMBINE);                             \
    }                                                               \
  } else {                                                          \
    for (op_len_t i = 0; i < n; i++) {                              \
      float x = tc_half_to_float(a[i]), y = tc_half_to_float(b[i]); \
      b[i] = tc_float_to_half(COMBINE);                             \
    }                                                               \
  }

static void half_sum(void *in, void *inout, op_len_t *len, MPI_Datatype *dt) { HALF_OP_BODY(x + y) }
static void half_prod(void *in, void *inout, op_len_t *len, MPI_Datatype *dt) {
  HALF_OP_BODY(x * y)
}
static void half_min(void *in, void *inout, op_len_t *len, MPI_Datatype *dt) {
  HALF_OP_BODY(x < y ? x : y)
}
static void half_max(void *in, void *inout, op_len_t *len, MPI_Datatype *dt) {
  HALF_OP_BODY(x > y ? x : y)
}

/* ------------------------------------------------------------------ 8- and 16-bit integer sums */

/* Open MPI 4.1's vectorized reductions (its op/avx component) saturate sums and products of
 * 8- and 16-bit integers, where C, PyTorch and MPI itself on short vectors wrap around (64
 * int8 of 20 summed over 7 ranks: 127, not -116). Where MPI_Reduce_local shows it, these
 * wrapping ops stand in for MPI_SUM and MPI_PROD on those types. */
static MPI_Op op_wrap[2] = {MPI_OP_NULL, MPI_OP_NULL}; /* sum, prod */

#define WRAP_LOOP(T, U, EXPR)             \
  do {                                    \
    const T *a = in;                      \
    T *b = inout;                         \
    for (op_len_t i = 0; i < *len; i++) { \
      U x = (U)a[i], y = (U)b[i];         \
      b[i] = (T)(U)(EXPR);                \
    }                                     \
  } while (0)
/* Arithmetic in unsigned types: wraps by definition, also for the signed ones. */
#define WRAP_BODY(EXPR)                \
  if (*dt == MPI_INT8_T)               \
    WRAP_LOOP(int8_t, uint8_t, EXPR);  \
  else if (*dt == MPI_UINT8_T)         \
    WRAP_LOOP(uint8_t, uint8_t, EXPR); \
  else                                 \
    WRAP_LOOP(int16_t, uint16_t, EXPR);

static void wrap_sum(void *in, void *inout, op_len_t *len, MPI_Datatype *dt) {
  WRAP_BODY((unsigned)x + y)
}
static void wrap_prod(void *in, void *inout, op_len_t *len, MPI_Datatype *dt) {
  WRAP_BODY((unsigned)x * y)
}

static bool small_int(tcoll_dtype_t d) {
  return d == TCOLL_INT8 || d == TCOLL_UINT8 || d == TCOLL_INT16;
}

/* Whether MPI's op on 64 elements of type dt wraps like C (a, b: operands that overflow). */
static bool mpi_wraps(MPI_Op op, MPI_Datatype dt, size_t es, long a, long b, long want) {
  unsigned char x[64 * 2], y[64 * 2];
  for (int i = 0; i < 64; i++) {
    memcpy(x + i * es, es == 1 ? (void *)&(int8_t){(int8_t)a} : (void *)&(int16_t){(int16_t)a}, es);
    memcpy(y + i * es, es == 1 ? (void *)&(int8_t){(int8_t)b} : (void *)&(int16_t){(int16_t)b}, es);
  }
  if (PMPI_Reduce_local(x, y, 64, dt, op) != MPI_SUCCESS) return true; /* nothing to mend then */
  long got = es == 1 ? (long)*(int8_t *)y : (long)*(int16_t *)y;
  return got == want;
}

static int mend_small_int_ops(void) {
  bool wraps = mpi_wraps(MPI_SUM, MPI_INT8_T, 1, 100, 100, -56) &&
               mpi_wraps(MPI_SUM, MPI_UINT8_T, 1, 200, 200, -112) &&
               mpi_wraps(MPI_SUM, MPI_INT16_T, 2, 20000, 20000, -25536) &&
               mpi_wraps(MPI_PROD, MPI_INT8_T, 1, 100, 3, 44) &&
               mpi_wraps(MPI_PROD, MPI_INT16_T, 2, 300, 300, 24464);
  if (wraps) return TCOLL_SUCCESS;
  tc_info(
      "MPI saturates sums or products of 8- and 16-bit integers: tcoll's own wrapping ops replace "
      "them");
  int rc = op_create(wrap_sum, &op_wrap[0]);
  if (!rc) rc = op_create(wrap_prod, &op_wrap[1]);
  return rc;
}

/* ------------------------------------------------------------------ element types and ops */

MPI_Datatype tc_mpi_dtype(tcoll_dtype_t d) {
  switch (d) {
  case TCOLL_BOOL: return MPI_C_BOOL;
  case TCOLL_INT8: return MPI_INT8_T;
  case TCOLL_UINT8: return MPI_UINT8_T;
  case TCOLL_INT16: return MPI_INT16_T;
  case TCOLL_INT32: return MPI_INT32_T;
  case TCOLL_INT64: return MPI_INT64_T;
  case TCOLL_FLOAT16: return mpi_f16;
  case TCOLL_BFLOAT16: return mpi_bf16;
  case TCOLL_FLOAT32: return MPI_FLOAT;
  case TCOLL_FLOAT64: return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op tc_mpi_op(const tc_redop_t *op, tcoll_dtype_t d) {
  int k = op->kind;
  if (k == TCOLL_AVG || k == TC_REDOP_PREMUL_SUM) k = TCOLL_SUM;
  if (d == TCOLL_BOOL) { /* C_BOOL takes only the logical ops */
    switch (k) {
    case TCOLL_SUM:
    case TCOLL_MAX:
    case TCOLL_BOR: return MPI_LOR;
    case TCOLL_PRODUCT:
    case TCOLL_MIN:
    case TCOLL_BAND: return MPI_LAND;
    default: return MPI_LXOR;
    }
  }
  if (d == TCOLL_FLOAT16 || d == TCOLL_BFLOAT16) {
    switch (k) {
    case TCOLL_SUM: return op_half[HALF_SUM];
    case TCOLL_PRODUCT: return op_half[HALF_PROD];
    case TCOLL_MIN: return op_half[HALF_MIN];
    default: return op_half[HALF_MAX];
    }
  }
  if (small_int(d) && op_wrap[0] != MPI_OP_NULL && (k == TCOLL_SUM || k == TCOLL_PRODUCT))
    return op_wrap[k == TCOLL_SUM ? 0 : 1];
  switch (k) {
  case TCOLL_SUM: return MPI_SUM;
  case TCOLL_PRODUCT: return MPI_PROD;
  case TCOLL_MIN: return MPI_MIN;
  case TCOLL_MAX: return MPI_MAX;
  case TCOLL_BAND: return MPI_BAND;
  case TCOLL_BOR: return MPI_BOR;
  default: return MPI_BXOR;
  }
}

/* ------------------------------------------------------------------ derived datatypes */

/* count copies of unit, laid `step` bytes apart, with every count passed to MPI <= L. A type
 * cannot be built from counts of 1 alone: with TCOLL_MAX_COUNT=1 its constructors take 2 (the
 * calls still pass a count of 1), instead of recursing without end. */
static int repeat(MPI_Datatype unit, MPI_Aint step, int64_t count, int64_t L, MPI_Datatype *out) {
  if (L < 2) L = 2;
  if (count <= L) return PMPI_Type_create_hvector((int)count, 1, step, unit, out);
  MPI_Datatype big, many, rest = MPI_DATATYPE_NULL;
  int64_t q = count / L, r = count % L;
  int rc = PMPI_Type_create_hvector((int)L, 1, step, unit, &big);
  if (rc) return rc;
  rc = repeat(big, step * (MPI_Aint)L, q, L, &many);
  PMPI_Type_free(&big);
  if (rc) return rc;
  if (r == 0) {
    *out = many;
    return MPI_SUCCESS;
  }
  rc = PMPI_Type_create_hvector((int)r, 1, step, unit, &rest);
  if (!rc) {
    int lens[2] = {1, 1};
    MPI_Aint disp[2] = {0, step * (MPI_Aint)(q * L)};
    MPI_Datatype types[2] = {many, rest};
    rc = PMPI_Type_create_struct(2, lens, disp, types, out);
    PMPI_Type_free(&rest);
  }
  PMPI_Type_free(&many);
  return rc;
}

static int build_contig(tcoll_dtype_t d, int64_t n, int64_t L, MPI_Datatype *out) {
  MPI_Aint es = (MPI_Aint)tc_dtype_size(d);
  if (n <= L) return PMPI_Type_contiguous((int)n, tc_mpi_dtype(d), out);
  return repeat(tc_mpi_dtype(d), es, n, L, out);
}

static int build_vector(tcoll_dtype_t d, int64_t nblocks, int64_t block, int64_t stride,
                        int64_t extent, int64_t L, MPI_Datatype *out) {
  MPI_Aint es = (MPI_Aint)tc_dtype_size(d);
  MPI_Datatype blk, vec;
  int rc = build_contig(d, block, L, &blk);
  if (rc) return rc;
  rc = repeat(blk, stride * es, nblocks, L, &vec);
  PMPI_Type_free(&blk);
  if (rc) return rc;
  rc = PMPI_Type_create_resized(vec, 0, extent * es, out);
  PMPI_Type_free(&vec);
  return rc;
}

/* A direct-mapped cache. An entry in use (refs > 0) is never evicted: a request that maps to
 * a busy slot gets an uncached type instead. */
#define CACHE_SLOTS 256
typedef struct key {
  int kind;
  tcoll_dtype_t d;
  int64_t a, b, c, e, L;
} key_t;
typedef struct slot {
  key_t key;
  MPI_Datatype type;
  int refs;
  bool used;
} slot_t;
static slot_t cache[CACHE_SLOTS];
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;

static unsigned key_hash(const key_t *k) {
  uint64_t h = 1469598103934665603ULL;
  const int64_t v[7] = {k->kind, k->d, k->a, k->b, k->c, k->e, k->L};
  for (int i = 0; i < 7; i++) {
    h ^= (uint64_t)v[i];
    h *= 1099511628211ULL;
  }
  return (unsigned)(h ^ (h >> 32)) % CACHE_SLOTS;
}

static bool key_eq(const key_t *x, const key_t *y) {
  return x->kind == y->kind && x->d == y->d && x->a == y->a && x->b == y->b && x->c == y->c &&
         x->e == y->e && x->L == y->L;
}

static int build(const key_t *k, MPI_Datatype *t) {
  int rc = k->kind == 0 ? build_contig(k->d, k->a, k->L, t)
                        : build_vector(k->d, k->a, k->b, k->c, k->e, k->L, t);
  if (rc == MPI_SUCCESS) rc = PMPI_Type_commit(t);
  return rc == MPI_SUCCESS ? TCOLL_SUCCESS : tc_mpi_error(rc, "building a derived datatype");
}

static int type_get(const key_t *k, tc_mpi_type_t *t) {
  unsigned s = key_hash(k);
  pthread_mutex_lock(&cache_mu);
  slot_t *sl = &cache[s];
  if (sl->used && key_eq(&sl->key, k)) {
    sl->refs++;
    t->type = sl->type;
    t->slot = (int)s;
    pthread_mutex_unlock(&cache_mu);
    return TCOLL_SUCCESS;
  }
  bool can_cache = !sl->used || sl->refs == 0;
  if (can_cache && sl->used) { /* evict: freeing a type in use by posted calls is safe in MPI */
    PMPI_Type_free(&sl->type);
    sl->used = false;
  }
  int rc = build(k, &t->type);
  if (!rc && can_cache) {
    sl->key = *k;
    sl->type = t->type;
    sl->refs = 1;
    sl->used = true;
    t->slot = (int)s;
  } else {
    t->slot = -1;
  }
  pthread_mutex_unlock(&cache_mu);
  return rc;
}

int tc_mpi_contig(tcoll_dtype_t d, int64_t n, tc_mpi_type_t *t) {
  key_t k = {.kind = 0, .d = d, .a = n, .L = tc_mpi_limit()};
  return type_get(&k, t);
}

int tc_mpi_vector(tcoll_dtype_t d, int64_t nblocks, int64_t block, int64_t stride, int64_t extent,
                  tc_mpi_type_t *t) {
  key_t k = {
      .kind = 1, .d = d, .a = nblocks, .b = block, .c = stride, .e = extent, .L = tc_mpi_limit()};
  return type_get(&k, t);
}

void tc_mpi_type_put(tc_mpi_type_t *t) {
  if (t->type == MPI_DATATYPE_NULL) return;
  if (t->slot < 0) {
    PMPI_Type_free(&t->type);
  } else {
    pthread_mutex_lock(&cache_mu);
    cache[t->slot].refs--;
    pthread_mutex_unlock(&cache_mu);
  }
  t->type = MPI_DATATYPE_NULL;
}

int tc_mpi_span(tcoll_dtype_t d, int64_t n, tc_mpi_span_t *s) {
  if (tc_mpi_one_call(n)) {
    s->count = n;
    s->dt.type = tc_mpi_dtype(d);
    s->dt.slot = -2; /* a basic type: nothing to put */
    return TCOLL_SUCCESS;
  }
  s->count = 1;
  return tc_mpi_contig(d, n, &s->dt);
}

void tc_mpi_span_put(tc_mpi_span_t *s) {
  if (s->dt.slot != -2) tc_mpi_type_put(&s->dt);
}

/* ------------------------------------------------------------------ lifetime */

int tc_mpi_glue_init(void) {
  int rc = PMPI_Type_contiguous(2, MPI_BYTE, &mpi_f16);
  if (!rc) rc = PMPI_Type_commit(&mpi_f16);
  if (!rc) rc = PMPI_Type_contiguous(2, MPI_BYTE, &mpi_bf16);
  if (!rc) rc = PMPI_Type_commit(&mpi_bf16);
  op_fn_t *fns[4] = {half_sum, half_prod, half_min, half_max};
  for (int i = 0; i < 4 && !rc; i++) rc = op_create(fns[i], &op_half[i]);
  if (!rc) rc = mend_small_int_ops();
  if (rc) return tc_mpi_error(rc, "creating the float16/bfloat16 datatypes and the ops");
  return TCOLL_SUCCESS;
}

void tc_mpi_glue_fini(void) {
  pthread_mutex_lock(&cache_mu);
  for (int s = 0; s < CACHE_SLOTS; s++) {
    if (cache[s].used) PMPI_Type_free(&cache[s].type);
    cache[s].used = false;
    cache[s].refs = 0;
  }
  pthread_mutex_unlock(&cache_mu);
  for (int i = 0; i < 4; i++)
    if (op_half[i] != MPI_OP_NULL) PMPI_Op_free(&op_half[i]);
  for (int i = 0; i < 2; i++)
    if (op_wrap[i] != MPI_OP_NULL) PMPI_Op_free(&op_wrap[i]);
  if (mpi_f16 != MPI_DATATYPE_NULL) PMPI_Type_free(&mpi_f16);
  if (mpi_bf16 != MPI_DATATYPE_NULL) PMPI_Type_free(&mpi_bf16);
}
