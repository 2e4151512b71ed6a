/* Helpers shared by the data-movement suites (all_gather, all_to_all, broadcast, gather /
 * scatter, large counts).
 *
 * Every element a test sends is mv_val(dtype, tag, index): a closed form of a "tag" (normally
 * the source rank, sometimes mixed with a peer or a root) and the element's index in the
 * sender's tensor. The values are integers that every dtype holds exactly (wrapped into the
 * dtype's exact range), distinct for neighbouring indices and for different tags, so that a
 * misplaced block shows up. Expected outputs are computed from the same closed form by index
 * arithmetic in the test, never by the code under test. */
#ifndef T_MOVE_UTIL_H
#define T_MOVE_UTIL_H

#include "harness.h"

#include <stdlib.h>
#include <string.h>

static const tcoll_dtype_t mv_all_dtypes[] = {
    TCOLL_BOOL,  TCOLL_INT8,    TCOLL_UINT8,    TCOLL_INT16,   TCOLL_INT32,
    TCOLL_INT64, TCOLL_FLOAT16, TCOLL_BFLOAT16, TCOLL_FLOAT32, TCOLL_FLOAT64};
#define MV_NUM_DTYPES ((int)(sizeof mv_all_dtypes / sizeof mv_all_dtypes[0]))
/* A smaller set with one dtype of each element size and the 16-bit floats. */
static const tcoll_dtype_t mv_some_dtypes[] = {TCOLL_BOOL, TCOLL_FLOAT16, TCOLL_BFLOAT16,
                                               TCOLL_INT32, TCOLL_FLOAT64};
#define MV_SOME_DTYPES ((int)(sizeof mv_some_dtypes / sizeof mv_some_dtypes[0]))

/* Exact in every dtype: wrapped into [lo, lo + m). */
static inline double mv_val(tcoll_dtype_t dt, int64_t tag, int64_t idx) {
  int64_t h = tag * 7919 + idx * 31 + 5;
  int64_t m, lo;
  switch (dt) {
  case TCOLL_BOOL: m = 2, lo = 0; break;
  case TCOLL_UINT8: m = 256, lo = 0; break;
  case TCOLL_INT8: m = 256, lo = -128; break;
  case TCOLL_BFLOAT16: m = 256, lo = -128; break;  /* bfloat16 holds integers up to 256 */
  case TCOLL_FLOAT16: m = 2048, lo = -1024; break; /* float16 holds integers up to 2048 */
  case TCOLL_INT16: m = 65536, lo = -32768; break;
  case TCOLL_FLOAT64: m = (int64_t)1 << 40, lo = -((int64_t)1 << 39); break;
  default: m = (int64_t)1 << 24, lo = -((int64_t)1 << 23); break; /* float32 holds 2^24 */
  }
  return (double)(h % m + lo);
}

/* ---- filling ---- */

typedef struct mv_fill_ctx {
  tcoll_dtype_t dt;
  int64_t tag, off;
} mv_fill_ctx;

static inline double mv_fill_fn(int64_t i, void *c) {
  mv_fill_ctx *f = c;
  return mv_val(f->dt, f->tag, f->off + i);
}

/* t[i] = mv_val(t->dtype, tag, off + i). */
static inline void mv_fill(tcoll_tensor_t *t, int64_t tag, int64_t off) {
  mv_fill_ctx c = {t->dtype, tag, off};
  t_set_all(t, mv_fill_fn, &c);
}

/* t[i] = v for every element (to see that outputs get overwritten). */
static inline double mv_const_fn(int64_t i, void *c) {
  (void)i;
  return *(double *)c;
}
static inline void mv_fill_const(tcoll_tensor_t *t, double v) { t_set_all(t, mv_const_fn, &v); }

/* Checks t[i] == mv_val(t->dtype, tag, off + i). */
static inline int mv_check_fill(const char *what, const tcoll_tensor_t *t, int64_t tag,
                                int64_t off) {
  mv_fill_ctx c = {t->dtype, tag, off};
  return t_check_all(what, t, mv_fill_fn, &c, 0);
}

/* ---- shapes and indices ---- */

static inline int64_t mv_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

/* Flat row-major index -> multi-index. */
static inline void mv_unflatten(int64_t i, int ndim, const int64_t *shape, int64_t *idx) {
  for (int d = ndim - 1; d >= 0; d--) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
}

static inline int64_t mv_flatten(int ndim, const int64_t *shape, const int64_t *idx) {
  int64_t i = 0;
  for (int d = 0; d < ndim; d++) i = i * shape[d] + idx[d];
  return i;
}

static inline bool mv_same_shape(const tcoll_tensor_t *t, int ndim, const int64_t *shape) {
  if (t->ndim != ndim) return false;
  for (int d = 0; d < ndim; d++)
    if (t->shape[d] != shape[d]) return false;
  return true;
}

/* "[2, 3]" for messages. */
static inline const char *mv_shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
  size_t off = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < ndim && off < len; d++)
    off += (size_t)snprintf(buf + off, len - off, d ? ", %lld" : "%lld", (long long)shape[d]);
  if (off < len) snprintf(buf + off, len - off, "]");
  return buf;
}

#define MV_EXPECT_SHAPE(tt_, nd_, sh_, what_)                                           \
  do {                                                                                  \
    char mv_a_[96], mv_b_[96];                                                          \
    T_EXPECT(mv_same_shape((tt_), (nd_), (sh_)), "%s: shape %s (expected %s)", (what_), \
             mv_shape_str(mv_a_, sizeof mv_a_, (tt_)->ndim, (tt_)->shape),              \
             mv_shape_str(mv_b_, sizeof mv_b_, (nd_), (sh_)));                          \
  } while (0)

/* ---- the all_gather layout (also used by the large-count suite) ---- */

/* Output of all_gather of in (shape ishape, every rank r filled with mv_fill(tag(r), 0)) along
 * dim over a group of `size`: element i comes from rank j / ishape[dim] where j is its index
 * along dim. */
typedef struct mv_ag_ctx {
  tcoll_dtype_t dt;
  int ndim, dim, size;
  const int64_t *ishape;
  const int *tags; /* tag of each group rank; NULL: the rank itself */
} mv_ag_ctx;

static inline double mv_ag_expect(int64_t i, void *c) {
  mv_ag_ctx *a = c;
  int64_t oshape[TCOLL_MAX_DIMS], idx[TCOLL_MAX_DIMS];
  memcpy(oshape, a->ishape, (size_t)a->ndim * sizeof *oshape);
  oshape[a->dim] *= a->size;
  mv_unflatten(i, a->ndim, oshape, idx);
  int64_t src = idx[a->dim] / a->ishape[a->dim];
  idx[a->dim] %= a->ishape[a->dim];
  int64_t tag = a->tags ? a->tags[src] : src;
  return mv_val(a->dt, tag, mv_flatten(a->ndim, a->ishape, idx));
}

/* ---- all_to_all_single layout ---- */

/* S[i * size + j]: rows group rank i sends to group rank j. Every rank i fills its input with
 * mv_fill(tags[i], 0) (tags NULL: i). Output element e of rank me: row e / row, which comes from
 * the rank i whose block of rows holds it, at that rank's row (rows it sends to ranks < me) + k. */
typedef struct mv_a2a_ctx {
  tcoll_dtype_t dt;
  int size, me;
  int64_t row; /* elements per row */
  const int64_t *S;
  const int *tags;
} mv_a2a_ctx;

static inline double mv_a2a_expect(int64_t e, void *c) {
  mv_a2a_ctx *a = c;
  int64_t r = e / a->row, col = e % a->row, start = 0;
  int i = 0;
  while (i < a->size - 1 && r >= start + a->S[i * a->size + a->me])
    start += a->S[i++ * a->size + a->me];
  int64_t src_row = r - start;
  for (int j = 0; j < a->me; j++) src_row += a->S[i * a->size + j];
  return mv_val(a->dt, a->tags ? a->tags[i] : i, src_row * a->row + col);
}

/* ---- shard_dim_all_to_all layout ---- */

/* in: ishape on every group rank i, filled with mv_fill(tags[i], 0). Output of rank me: chunk me
 * (along sdim) of every rank, concatenated along gdim in rank order. */
typedef struct mv_shard_ctx {
  tcoll_dtype_t dt;
  int ndim, gdim, sdim, size, me;
  const int64_t *ishape;
  const int *tags;
} mv_shard_ctx;

static inline double mv_shard_expect(int64_t e, void *c) {
  mv_shard_ctx *a = c;
  int64_t chunk[TCOLL_MAX_DIMS], oshape[TCOLL_MAX_DIMS], idx[TCOLL_MAX_DIMS];
  memcpy(chunk, a->ishape, (size_t)a->ndim * sizeof *chunk);
  chunk[a->sdim] /= a->size; /* what one rank sends one peer */
  memcpy(oshape, chunk, (size_t)a->ndim * sizeof *oshape);
  oshape[a->gdim] *= a->size;
  mv_unflatten(e, a->ndim, oshape, idx);
  int src = (int)(idx[a->gdim] / chunk[a->gdim]);
  idx[a->gdim] %= chunk[a->gdim];                  /* index inside the chunk */
  idx[a->sdim] += (int64_t)a->me * chunk[a->sdim]; /* chunk me of the source's input */
  return mv_val(a->dt, a->tags ? a->tags[src] : src, mv_flatten(a->ndim, a->ishape, idx));
}

/* A communicator with only this rank (every rank its own group): for argument errors that only
 * some ranks of a real group would see (they would leave the others waiting). */
static inline tcoll_comm_t *mv_self_comm(void) {
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_split(tcoll_comm_world(), t_rank, 0, &c));
  return c;
}

#endif
