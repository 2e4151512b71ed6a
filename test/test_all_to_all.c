/* all_to_all_single (even and uneven splits, zeros, multi-dim rows, errors), permute,
 * shard_dim_all_to_all (every (gather_dim, shard_dim) pair on 2-D and 3-D tensors) and the list
 * form all_to_all (per-peer shapes), on the world and on sub-communicators.
 *
 * Rank i's input holds mv_val(dtype, i, index) (move_util.h); split sizes come from closed forms
 * that every rank evaluates for every pair, so that they agree across ranks. */
#include "move_util.h"

/* Rows rank i sends rank j: 0..3, zeros included. */
static int64_t split_rows(int i, int j) { return (i + 2 * j + 1) % 4; }

/* size x size split matrix of split_rows (scaled by mul). */
static int64_t *split_matrix(int size, int64_t mul) {
  int64_t *S = malloc((size_t)size * (size_t)size * sizeof *S);
  for (int i = 0; i < size; i++)
    for (int j = 0; j < size; j++) S[i * size + j] = split_rows(i, j) * mul;
  return S;
}

/* One all_to_all_single on comm with split matrix S (NULL: even splits of `even` rows per peer),
 * rows shaped rshape (rnd dims after dim 0). */
static void a2a_case(tcoll_dtype_t dt, tcoll_comm_t *comm, const int64_t *S, int64_t even, int rnd,
                     const int64_t *rshape, const int *tags, bool prealloc) {
  tcoll_comm_t *c = comm ? comm : tcoll_comm_world();
  int size = tcoll_comm_size(c), me = tcoll_comm_rank(c);
  int64_t *isplit = malloc((size_t)size * sizeof *isplit),
          *osplit = malloc((size_t)size * sizeof *osplit);
  int64_t in_rows = 0, out_rows = 0;
  for (int p = 0; p < size; p++) {
    isplit[p] = S ? S[me * size + p] : even;
    osplit[p] = S ? S[p * size + me] : even;
    in_rows += isplit[p];
    out_rows += osplit[p];
  }
  int64_t ishape[TCOLL_MAX_DIMS], oshape[TCOLL_MAX_DIMS], row = 1;
  ishape[0] = in_rows;
  oshape[0] = out_rows;
  for (int d = 0; d < rnd; d++) {
    ishape[d + 1] = oshape[d + 1] = rshape[d];
    row *= rshape[d];
  }
  tcoll_tensor_t in = t_alloc(dt, rnd + 1, ishape), out = t_empty();
  int my_tag = tags ? tags[me] : me;
  mv_fill(&in, my_tag, 0);
  if (prealloc) {
    out = t_alloc(dt, rnd + 1, oshape);
    mv_fill(&out, 900 + my_tag, 0);
  }
  char what[160], sh[64];
  snprintf(what, sizeof what, "all_to_all_single %s %s, %s splits (%s)", tcoll_dtype_name(dt),
           mv_shape_str(sh, sizeof sh, rnd + 1, ishape), S ? "uneven" : "even",
           prealloc ? "preallocated" : "allocating");
  int rc = S ? tcoll_all_to_all_single(&in, osplit, isplit, comm, &out)
             : tcoll_all_to_all_single(&in, NULL, NULL, comm, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, rnd + 1, oshape, what);
    int64_t *E = NULL;
    if (!S) { /* even: every pair moves `even` rows */
      E = malloc((size_t)size * (size_t)size * sizeof *E);
      for (int k = 0; k < size * size; k++) E[k] = even;
    }
    mv_a2a_ctx a = {dt, size, me, row, S ? S : E, tags};
    if (row > 0) t_check_all(what, &out, mv_a2a_expect, &a, 0);
    free(E);
  }
  mv_check_fill("all_to_all_single input afterwards", &in, my_tag, 0);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  free(isplit);
  free(osplit);
}

START_TEST(single_even) {
  int64_t r3[2] = {2, 3};
  for (int k = 0; k < MV_NUM_DTYPES; k++) {
    tcoll_dtype_t dt = mv_all_dtypes[k];
    a2a_case(dt, NULL, NULL, 3, 0, NULL, NULL, k % 2);  /* 1-D: 3 rows of one element per peer */
    a2a_case(dt, NULL, NULL, 2, 2, r3, NULL, !(k % 2)); /* [2 size, 2, 3] */
  }
  a2a_case(TCOLL_INT64, NULL, NULL, 1, 1, (int64_t[]){5}, NULL, false);
}
END_TEST

START_TEST(single_uneven) {
  int64_t *S = split_matrix(t_size, 1);
  int64_t r2[1] = {3}, r3[2] = {2, 2};
  for (int k = 0; k < MV_NUM_DTYPES; k++) {
    tcoll_dtype_t dt = mv_all_dtypes[k];
    a2a_case(dt, NULL, S, 0, 0, NULL, NULL, k % 2);
    a2a_case(dt, NULL, S, 0, 1, r2, NULL, !(k % 2));
    a2a_case(dt, NULL, S, 0, 2, r3, NULL, k % 2);
  }
  free(S);
  /* Everything to one rank (all other splits zero): rank j receives only if j == 0. */
  int64_t *Z = calloc((size_t)t_size * (size_t)t_size, sizeof *Z);
  for (int i = 0; i < t_size; i++) Z[i * t_size + 0] = 2 + i;
  a2a_case(TCOLL_FLOAT64, NULL, Z, 0, 1, r2, NULL, false);
  a2a_case(TCOLL_BFLOAT16, NULL, Z, 0, 1, r2, NULL, true);
  free(Z);
}
END_TEST

START_TEST(single_zero_size) {
  /* Every split zero: [0] in, [0] out. */
  int64_t *Z = calloc((size_t)t_size * (size_t)t_size, sizeof *Z);
  int64_t r2[1] = {4};
  a2a_case(TCOLL_FLOAT32, NULL, Z, 0, 0, NULL, NULL, false);
  a2a_case(TCOLL_INT8, NULL, Z, 0, 1, r2, NULL, true);
  free(Z);
  /* Rows of zero elements, even and uneven. */
  int64_t r0[1] = {0};
  a2a_case(TCOLL_FLOAT16, NULL, NULL, 2, 1, r0, NULL, false);
  int64_t *S = split_matrix(t_size, 1);
  a2a_case(TCOLL_FLOAT16, NULL, S, 0, 1, r0, NULL, true);
  a2a_case(TCOLL_BOOL, NULL, NULL, 0, 1, r2, NULL, false); /* even splits of zero rows */
  free(S);
}
END_TEST

START_TEST(single_bad_arguments) {
  int size = t_size;
  int64_t shape[2] = {6, 2};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 2, shape), out = t_empty();
  int64_t *is = malloc((size_t)size * sizeof *is), *os = malloc((size_t)size * sizeof *os);
  for (int p = 0; p < size; p++) is[p] = os[p] = 1;
  is[0] = 7 - (size - 1); /* sums to 7 */
  T_FAILS(tcoll_all_to_all_single(&in, os, is, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "input_split_sizes sum to 7 rows but input has 6");
  is[0] = 6 - (size - 1); /* sums to 6 again */
  T_FAILS(tcoll_all_to_all_single(&in, os, NULL, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "must either be specified together or both set to NULL");
  T_FAILS(tcoll_all_to_all_single(&in, NULL, is, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "must either be specified together or both set to NULL");
  /* Negative sizes, on either side. */
  int64_t keep = is[size - 1];
  is[size - 1] = -1;
  is[0] += keep + 1; /* the sum still matches: the sign alone is wrong */
  char needle[128];
  snprintf(needle, sizeof needle, "input_split_sizes[%d] is -1", size - 1);
  if (size > 1)
    T_FAILS(tcoll_all_to_all_single(&in, os, is, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, needle);
  is[0] -= keep + 1;
  is[size - 1] = keep;
  os[0] = -2;
  T_FAILS(tcoll_all_to_all_single(&in, os, is, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "output_split_sizes[0] is -2");
  os[0] = 1;
  /* Even splits need a multiple of the group size. */
  if (size > 1) {
    int64_t odd[2] = {size + 1, 2};
    tcoll_tensor_t bad = t_alloc(TCOLL_FLOAT32, 2, odd);
    snprintf(needle, sizeof needle, "in->shape[0] is %d, not a multiple of the group size %d",
             size + 1, size);
    T_FAILS(tcoll_all_to_all_single(&bad, NULL, NULL, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
            needle);
    tcoll_tensor_free(&bad);
  }
  /* Splits are rows of dim 0: a 0-dim input has none. */
  tcoll_tensor_t scalar = t_alloc(TCOLL_FLOAT32, 0, NULL);
  T_FAILS(tcoll_all_to_all_single(&scalar, NULL, NULL, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "0-dim");
  tcoll_tensor_free(&scalar);
  /* A preallocated output must have sum(output_split_sizes) rows. */
  int64_t wshape[2] = {size + 1, 2};
  tcoll_tensor_t wrong = t_alloc(TCOLL_FLOAT32, 2, wshape);
  T_FAILS(tcoll_all_to_all_single(&in, os, is, NULL, &wrong), TCOLL_ERR_INVALID_ARGUMENT,
          "out->shape");
  tcoll_tensor_free(&wrong);
  /* Output and input may not overlap (no in-place form). */
  if (size == 1 || 6 % size == 0)
    T_FAILS(tcoll_all_to_all_single(&in, NULL, NULL, NULL, &in), TCOLL_ERR_INVALID_ARGUMENT,
            "overlaps");
  /* Output splits whose sum or whose output size overflows are refused, not wrapped. */
  if (size > 1) { /* (at size 1, INT64_MAX / size + 1 itself overflows) */
    for (int p = 0; p < size; p++) os[p] = INT64_MAX / size + 1; /* sum above INT64_MAX */
    T_FAILS(tcoll_all_to_all_single(&in, os, is, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
            "output_split_sizes");
  }
  for (int p = 0; p < size; p++)
    os[p] = p == 0 ? (int64_t)1 << 62 : 0; /* [2^62, 2] float32: 2^65 bytes */
  T_FAILS(tcoll_all_to_all_single(&in, os, is, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "out");
  for (int p = 0; p < size; p++) os[p] = 1;
  T_EXPECT(out.data == NULL, "refused calls allocated an output");
  T_EXPECT(tcoll_pending_count() == 0, "refused calls left %zu pending", tcoll_pending_count());
  free(is);
  free(os);
  tcoll_tensor_free(&in);
  /* Still usable. */
  a2a_case(TCOLL_INT32, NULL, NULL, 1, 0, NULL, NULL, false);
}
END_TEST

/* ---- permute ---- */

static void permute_case(tcoll_dtype_t dt, tcoll_comm_t *comm, const int *src_dst, int ndim,
                         const int64_t *shape, const int *tags, bool prealloc, const char *kind) {
  tcoll_comm_t *c = comm ? comm : tcoll_comm_world();
  int size = tcoll_comm_size(c), me = tcoll_comm_rank(c);
  int from = -1;
  for (int m = 0; m < size; m++)
    if (src_dst[m] == me) from = m;
  tcoll_tensor_t in = t_alloc(dt, ndim, shape), out = t_empty();
  mv_fill(&in, tags ? tags[me] : me, 0);
  if (prealloc) {
    out = t_alloc(dt, ndim, shape);
    mv_fill(&out, 555, 0);
  }
  char what[128];
  snprintf(what, sizeof what, "permute (%s) %s %s", kind, tcoll_dtype_name(dt),
           prealloc ? "preallocated" : "allocating");
  int rc = tcoll_permute(&in, src_dst, comm, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, ndim, shape, what);
    mv_check_fill(what, &out, tags ? tags[from] : from, 0);
  }
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

START_TEST(permute_patterns) {
  int size = t_size;
  int *p = malloc((size_t)size * sizeof *p);
  int64_t s2[2] = {3, 5}, s1[1] = {4};
  for (int shift = 0; shift < size; shift++) { /* shift 0 is the identity */
    for (int m = 0; m < size; m++) p[m] = (m + shift) % size;
    for (int k = 0; k < MV_SOME_DTYPES; k++)
      permute_case(mv_some_dtypes[k], NULL, p, k % 2 ? 2 : 1, k % 2 ? s2 : s1, NULL,
                   (k + shift) % 2, "cyclic shift");
  }
  for (int m = 0; m < size; m++) p[m] = size - 1 - m; /* reversal */
  for (int k = 0; k < MV_NUM_DTYPES; k++)
    permute_case(mv_all_dtypes[k], NULL, p, 2, s2, NULL, k % 2, "reversal");
  /* Swap neighbouring pairs (the last rank of an odd count stays). */
  for (int m = 0; m < size; m++) p[m] = (m ^ 1) < size ? m ^ 1 : m;
  permute_case(TCOLL_INT8, NULL, p, 1, s1, NULL, false, "pair swap");
  /* Zero-size. */
  int64_t z[2] = {0, 3};
  for (int m = 0; m < size; m++) p[m] = (m + 1) % size;
  permute_case(TCOLL_FLOAT32, NULL, p, 2, z, NULL, false, "zero-size");
  permute_case(TCOLL_FLOAT32, NULL, p, 2, z, NULL, true, "zero-size");
  /* A 0-dim tensor is one element. */
  permute_case(TCOLL_FLOAT64, NULL, p, 0, NULL, NULL, false, "0-dim");
  free(p);
}
END_TEST

START_TEST(permute_bad_arguments) {
  int size = t_size;
  int64_t s1[1] = {4};
  tcoll_tensor_t in = t_alloc(TCOLL_INT32, 1, s1), out = t_empty();
  int *p = malloc((size_t)size * sizeof *p);
  for (int m = 0; m < size; m++) p[m] = 0; /* everybody to rank 0 */
  if (size > 1)
    T_FAILS(tcoll_permute(&in, p, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
            "src_dst is not a permutation: rank 0 is the destination of both 0 and 1");
  for (int m = 0; m < size; m++) p[m] = m;
  p[0] = size;
  char needle[128];
  snprintf(needle, sizeof needle, "src_dst[0] is %d", size);
  T_FAILS(tcoll_permute(&in, p, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, needle);
  p[0] = -1;
  T_FAILS(tcoll_permute(&in, p, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "src_dst[0] is -1");
  T_FAILS(tcoll_permute(&in, NULL, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "src_dst is NULL");
  p[0] = 0;
  int64_t w[1] = {5};
  tcoll_tensor_t wrong = t_alloc(TCOLL_INT32, 1, w);
  T_FAILS(tcoll_permute(&in, p, NULL, &wrong), TCOLL_ERR_INVALID_ARGUMENT,
          "out->shape is [5] (expected [4])");
  tcoll_tensor_free(&wrong);
  T_FAILS(tcoll_permute(&in, p, NULL, &in), TCOLL_ERR_INVALID_ARGUMENT, "overlaps");
  T_EXPECT(out.data == NULL && tcoll_pending_count() == 0,
           "refused permutes left an output or pending work");
  free(p);
  tcoll_tensor_free(&in);
}
END_TEST

/* ---- shard_dim_all_to_all ---- */

/* A serial reference for shard_dim_all_to_all, computed forwards (unlike mv_shard_expect, which
 * works back from each output element): materialize every rank's input, narrow chunk `me` of
 * each along sdim, and concatenate those chunks along gdim. Returns the expected output. */
static double *shard_reference(tcoll_dtype_t dt, int ndim, const int64_t *ishape, int g, int s,
                               int size, int me, const int *tags) {
  int64_t cs[TCOLL_MAX_DIMS], os[TCOLL_MAX_DIMS], idx[TCOLL_MAX_DIMS];
  memcpy(cs, ishape, (size_t)ndim * sizeof *cs);
  cs[s] /= size;
  memcpy(os, cs, (size_t)ndim * sizeof *os);
  os[g] *= size;
  int64_t n_in = mv_numel(ndim, ishape), n_chunk = mv_numel(ndim, cs);
  double *out = malloc((size_t)(n_chunk * size + 1) * sizeof *out),
         *input = malloc((size_t)(n_in + 1) * sizeof *input),
         *chunk = malloc((size_t)(n_chunk + 1) * sizeof *chunk);
  for (int i = 0; i < size; i++) {
    for (int64_t e = 0; e < n_in; e++)
      input[e] = mv_val(dt, tags ? tags[i] : i, e); /* rank i's input */
    for (int64_t e = 0; e < n_chunk; e++) {         /* narrow(sdim, me) */
      mv_unflatten(e, ndim, cs, idx);
      idx[s] += (int64_t)me * cs[s];
      chunk[e] = input[mv_flatten(ndim, ishape, idx)];
    }
    for (int64_t e = 0; e < n_chunk; e++) { /* cat along gdim: chunk i is the i-th slab */
      mv_unflatten(e, ndim, cs, idx);
      idx[g] += (int64_t)i * cs[g];
      out[mv_flatten(ndim, os, idx)] = chunk[e];
    }
  }
  free(input);
  free(chunk);
  return out;
}

static void shard_case(tcoll_dtype_t dt, tcoll_comm_t *comm, int ndim, const int64_t *ishape,
                       int gdim, int sdim, const int *tags, bool prealloc) {
  tcoll_comm_t *c = comm ? comm : tcoll_comm_world();
  int size = tcoll_comm_size(c), me = tcoll_comm_rank(c);
  int g = gdim < 0 ? gdim + ndim : gdim, s = sdim < 0 ? sdim + ndim : sdim;
  int64_t oshape[TCOLL_MAX_DIMS];
  memcpy(oshape, ishape, (size_t)ndim * sizeof *oshape);
  oshape[s] /= size;
  oshape[g] *= size;
  tcoll_tensor_t in = t_alloc(dt, ndim, ishape), out = t_empty();
  mv_fill(&in, tags ? tags[me] : me, 0);
  if (prealloc) {
    out = t_alloc(dt, ndim, oshape);
    mv_fill(&out, 444, 0);
  }
  char what[160], sh[64];
  snprintf(what, sizeof what, "shard_dim_all_to_all %s %s gather_dim %d shard_dim %d (%s)",
           tcoll_dtype_name(dt), mv_shape_str(sh, sizeof sh, ndim, ishape), gdim, sdim,
           prealloc ? "preallocated" : "allocating");
  int rc = tcoll_shard_dim_all_to_all(&in, gdim, sdim, comm, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, ndim, oshape, what);
    mv_shard_ctx a = {dt, ndim, g, s, size, me, ishape, tags};
    t_check_all(what, &out, mv_shard_expect, &a, 0);
    /* And against the serial reference. */
    int64_t n = tcoll_tensor_numel(&out);
    double *want = shard_reference(dt, ndim, ishape, g, s, size, me, tags),
           *got = malloc((size_t)(n + 1) * sizeof *got);
    t_read(&out, got);
    int64_t bad = 0, first = -1;
    for (int64_t e = 0; e < n; e++)
      if (got[e] != want[e] && bad++ == 0) first = e;
    T_EXPECT(bad == 0,
             "%s: %lld elements differ from the serial reference (first: %lld, %g instead of %g)",
             what, (long long)bad, (long long)first, first >= 0 ? got[first] : 0.0,
             first >= 0 ? want[first] : 0.0);
    free(want);
    free(got);
  }
  mv_check_fill("shard_dim_all_to_all input afterwards", &in, tags ? tags[me] : me, 0);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

START_TEST(shard_all_pairs) {
  int k = 0;
  for (int ndim = 2; ndim <= 3; ndim++) {
    const int64_t base[3] = {3, 2, ndim == 3 ? 2 : 1};
    for (int g = 0; g < ndim; g++) {
      for (int s = 0; s < ndim; s++) {
        int64_t shape[3];
        memcpy(shape, base, sizeof shape);
        shape[s] *= t_size;
        tcoll_dtype_t dt = mv_all_dtypes[k++ % MV_NUM_DTYPES];
        shard_case(dt, NULL, ndim, shape, g, s, NULL, false);
        shard_case(mv_all_dtypes[(k + 4) % MV_NUM_DTYPES], NULL, ndim, shape, g, s, NULL, true);
        shard_case(TCOLL_FLOAT16, NULL, ndim, shape, g - ndim, s - ndim, NULL,
                   (g + s) % 2); /* negative dims */
      }
    }
  }
  /* Shard dim with more than one row per chunk, and chunks of one element. */
  int64_t a[2] = {4 * (int64_t)t_size, 3};
  shard_case(TCOLL_INT64, NULL, 2, a, 1, 0, NULL, false);
  int64_t b[1] = {t_size};
  shard_case(TCOLL_INT16, NULL, 1, b, 0, 0, NULL, false);
  int64_t b3[1] = {3 * (int64_t)t_size};
  shard_case(TCOLL_BOOL, NULL, 1, b3, 0, 0, NULL, true);
}
END_TEST

START_TEST(shard_zero_size) {
  int64_t z1[2] = {2 * (int64_t)t_size, 0}, z2[3] = {0, (int64_t)t_size, 3};
  for (int g = 0; g < 2; g++) shard_case(TCOLL_FLOAT32, NULL, 2, z1, g, 0, NULL, g);
  for (int g = 0; g < 3; g++) shard_case(TCOLL_INT8, NULL, 3, z2, g, 1, NULL, !g);
  int64_t z3[2] = {0, 2};
  shard_case(TCOLL_FLOAT64, NULL, 2, z3, 1, 0, NULL, false); /* 0 rows split into empty chunks */
}
END_TEST

START_TEST(shard_bad_arguments) {
  int size = t_size;
  tcoll_tensor_t out = t_empty();
  char needle[96];
  if (size > 1) {
    int64_t odd[2] = {size + 1, 2};
    tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 2, odd);
    snprintf(needle, sizeof needle, "input dimension 0 (%d) must be a multiple of group_size %d",
             size + 1, size);
    T_FAILS(tcoll_shard_dim_all_to_all(&in, 1, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, needle);
    snprintf(needle, sizeof needle, "input dimension 1 (%d) must be a multiple of group_size %d", 2,
             size);
    if (2 % size)
      T_FAILS(tcoll_shard_dim_all_to_all(&in, 0, -1, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
              needle);
    tcoll_tensor_free(&in);
  }
  int64_t ok[2] = {2 * (int64_t)size, 2};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 2, ok);
  T_FAILS(tcoll_shard_dim_all_to_all(&in, 2, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "gather_dim is 2");
  T_FAILS(tcoll_shard_dim_all_to_all(&in, 0, -3, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "shard_dim is -3");
  tcoll_tensor_t scalar = t_alloc(TCOLL_FLOAT32, 0, NULL);
  T_FAILS(tcoll_shard_dim_all_to_all(&scalar, 0, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "0-dim");
  tcoll_tensor_free(&scalar);
  tcoll_tensor_t wrong = t_alloc(TCOLL_FLOAT32, 2, ok); /* [2 size, 2], expected [2, 2 size] */
  if (size > 1)
    T_FAILS(tcoll_shard_dim_all_to_all(&in, 1, 0, NULL, &wrong), TCOLL_ERR_INVALID_ARGUMENT,
            "out->shape");
  tcoll_tensor_free(&wrong);
  T_FAILS(tcoll_shard_dim_all_to_all(&in, 0, 0, NULL, &in), TCOLL_ERR_INVALID_ARGUMENT, "overlaps");
  /* A gathered dim that overflows is refused, not wrapped (an empty input can have such a dim). */
  if (size > 1) {
    int64_t huge[2] = {(int64_t)1 << 62, 0};
    tcoll_tensor_t empty = tcoll_tensor_make(NULL, TCOLL_INT8, 2, huge, t_device());
    T_FAILS(tcoll_shard_dim_all_to_all(&empty, 0, 1, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
            "overflows");
  }
  T_EXPECT(out.data == NULL && tcoll_pending_count() == 0,
           "refused calls left an output or pending work");
  tcoll_tensor_free(&in);
}
END_TEST

/* ---- all_to_all (list form) ---- */

/* What rank i sends rank j: shapes differ per pair (and some are empty). */
static int list_shape(int i, int j, int64_t *shape) {
  if (j % 2 == 0) {
    shape[0] = (i + j) % 3;
    shape[1] = j + 1;
    return 2;
  }
  shape[0] = (i + 2 * j) % 4 + 1;
  return 1;
}

static void list_case(tcoll_dtype_t dt, tcoll_comm_t *comm, const int *tags, bool prealloc) {
  tcoll_comm_t *c = comm ? comm : tcoll_comm_world();
  int size = tcoll_comm_size(c), me = tcoll_comm_rank(c);
  tcoll_tensor_t *ins = calloc((size_t)size, sizeof *ins),
                 *outs = calloc((size_t)size, sizeof *outs);
  int64_t shape[2];
  for (int p = 0; p < size; p++) {
    int nd = list_shape(me, p, shape);
    ins[p] = t_alloc(dt, nd, shape);
    mv_fill(&ins[p], 16 * (tags ? tags[me] : me) + (tags ? tags[p] : p), 0);
    nd = list_shape(p, me, shape); /* what p sends me */
    if (prealloc) {
      outs[p] = t_alloc(dt, nd, shape);
      mv_fill(&outs[p], 333, 0);
    } else {
      outs[p] = tcoll_tensor_make(NULL, dt, nd, shape, t_device());
    }
  }
  int rc = tcoll_all_to_all(ins, comm, outs);
  T_EXPECT(rc == TCOLL_SUCCESS, "all_to_all %s: %s: %s", tcoll_dtype_name(dt),
           tcoll_status_string(rc), tcoll_last_error());
  for (int p = 0; p < size && rc == TCOLL_SUCCESS; p++) {
    T_OK(tcoll_wait(outs[p].data));
    char what[96];
    snprintf(what, sizeof what, "all_to_all outs[%d] %s (%s)", p, tcoll_dtype_name(dt),
             prealloc ? "preallocated" : "allocating");
    int nd = list_shape(p, me, shape);
    MV_EXPECT_SHAPE(&outs[p], nd, shape, what);
    T_EXPECT(outs[p].device == t_device(), "%s: on device %d", what, outs[p].device);
    mv_check_fill(what, &outs[p], 16 * (tags ? tags[p] : p) + (tags ? tags[me] : me), 0);
  }
  for (int p = 0; p < size; p++) {
    tcoll_tensor_free(&ins[p]);
    if (outs[p].data) tcoll_tensor_free(&outs[p]);
  }
  free(ins);
  free(outs);
}

START_TEST(list_per_peer_shapes) {
  for (int k = 0; k < MV_NUM_DTYPES; k++) list_case(mv_all_dtypes[k], NULL, NULL, k % 2);
}
END_TEST

START_TEST(list_zero_size_and_errors) {
  int size = t_size;
  tcoll_tensor_t *ins = calloc((size_t)size, sizeof *ins),
                 *outs = calloc((size_t)size, sizeof *outs);
  int64_t z[1] = {0};
  for (int p = 0; p < size; p++) {
    ins[p] = t_alloc(TCOLL_FLOAT32, 1, z);
    outs[p] = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, z, t_device());
  }
  T_OK(tcoll_all_to_all(ins, NULL, outs));
  for (int p = 0; p < size; p++) {
    T_OK(tcoll_wait(outs[p].data));
    MV_EXPECT_SHAPE(&outs[p], 1, z, "zero-size all_to_all");
    tcoll_tensor_free(&outs[p]);
    outs[p] = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, z, t_device());
  }
  T_FAILS(tcoll_all_to_all(NULL, NULL, outs), TCOLL_ERR_INVALID_ARGUMENT, "ins is NULL");
  T_FAILS(tcoll_all_to_all(ins, NULL, NULL), TCOLL_ERR_INVALID_ARGUMENT, "outs is NULL");
  tcoll_tensor_free(&ins[size - 1]);
  ins[size - 1] = t_alloc(TCOLL_INT32, 1, z);
  char needle[128];
  snprintf(needle, sizeof needle, "ins[%d]->dtype is int32 (expected float32", size - 1);
  if (size > 1) T_FAILS(tcoll_all_to_all(ins, NULL, outs), TCOLL_ERR_INVALID_ARGUMENT, needle);
  tcoll_tensor_free(&ins[size - 1]);
  ins[size - 1] = t_alloc(TCOLL_FLOAT32, 1, z);
  outs[0].shape[0] = -1;
  T_FAILS(tcoll_all_to_all(ins, NULL, outs), TCOLL_ERR_INVALID_ARGUMENT, "outs[0]->shape[0] is -1");
  for (int p = 0; p < size; p++)
    T_EXPECT(outs[p].data == NULL, "refused all_to_all allocated outs[%d]", p);
  for (int p = 0; p < size; p++) tcoll_tensor_free(&ins[p]);
  free(ins);
  free(outs);
}
END_TEST

/* ---- sub-communicators ---- */

START_TEST(sub_communicators) {
  int parity = t_rank % 2;
  tcoll_comm_t *half = NULL;
  T_OK(tcoll_comm_split(tcoll_comm_world(), parity, t_rank, &half));
  if (half) {
    int n = tcoll_comm_size(half), tags[8];
    for (int g = 0; g < n; g++) tags[g] = 2 * g + parity;
    int64_t *S = split_matrix(n, 2);
    int64_t r[1] = {3};
    a2a_case(TCOLL_FLOAT16, half, S, 0, 1, r, tags, false);
    a2a_case(TCOLL_INT32, half, NULL, 2, 1, r, tags, true);
    free(S);
    int *p = malloc((size_t)n * sizeof *p);
    for (int m = 0; m < n; m++) p[m] = (m + n - 1) % n;
    int64_t s2[2] = {2, 3};
    permute_case(TCOLL_BFLOAT16, half, p, 2, s2, tags, false, "sub-communicator shift");
    free(p);
    int64_t sh[3] = {2, 3 * (int64_t)n, 2};
    shard_case(TCOLL_FLOAT64, half, 3, sh, 2, 1, tags, false);
    list_case(TCOLL_INT16, half, tags, false);
    T_OK(tcoll_comm_free(&half));
  }
  /* Slices of a 2-D mesh. */
  int dims[2] = {t_size % 2 == 0 ? 2 : 1, t_size % 2 == 0 ? t_size / 2 : t_size};
  tcoll_mesh_t *mesh = NULL;
  T_OK(tcoll_mesh_create(tcoll_comm_world(), 2, dims, &mesh));
  if (mesh) {
    int c0 = tcoll_mesh_coord(mesh, 0), c1 = tcoll_mesh_coord(mesh, 1);
    for (int md = 0; md < 2; md++) {
      tcoll_comm_t *slice = tcoll_mesh_comm(mesh, md);
      T_EXPECT(slice != NULL, "mesh slice %d: %s", md, tcoll_last_error());
      if (!slice) continue;
      int n = dims[md], tags[8], p[8];
      for (int k = 0; k < n; k++) tags[k] = md == 0 ? k * dims[1] + c1 : c0 * dims[1] + k;
      for (int k = 0; k < n; k++) p[k] = n - 1 - k;
      int64_t s1[1] = {5};
      permute_case(TCOLL_UINT8, slice, p, 1, s1, tags, true, "mesh slice reversal");
      int64_t *S = split_matrix(n, 1);
      a2a_case(TCOLL_FLOAT32, slice, S, 0, 0, NULL, tags, false);
      free(S);
      int64_t sh[2] = {(int64_t)n, 4};
      shard_case(TCOLL_INT8, slice, 2, sh, 1, 0, tags, true);
    }
    T_OK(tcoll_mesh_free(&mesh));
  }
}
END_TEST

/* A rank with nothing to send (empty input) still receives. */
START_TEST(single_empty_sender) {
  int64_t *S = malloc((size_t)t_size * (size_t)t_size * sizeof *S);
  for (int i = 0; i < t_size; i++)
    for (int j = 0; j < t_size; j++) S[i * t_size + j] = i == 0 ? 0 : j + 1;
  int64_t r[1] = {2};
  a2a_case(TCOLL_INT16, NULL, S, 0, 1, r, NULL, false);
  a2a_case(TCOLL_FLOAT64, NULL, S, 0, 0, NULL, NULL, true);
  free(S);
}
END_TEST

/* Zero-size inputs may come without a buffer (data NULL). */
START_TEST(zero_size_null_data) {
  int64_t z[2] = {0, 3};
  tcoll_tensor_t in = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 2, z, t_device()), out = t_empty();
  T_OK(tcoll_all_to_all_single(&in, NULL, NULL, NULL, &out));
  T_OK(tcoll_wait(out.data));
  MV_EXPECT_SHAPE(&out, 2, z, "all_to_all_single of a NULL zero-size input");
  tcoll_tensor_free(&out);
  int *p = malloc((size_t)t_size * sizeof *p);
  for (int m = 0; m < t_size; m++) p[m] = (m + 1) % t_size;
  T_OK(tcoll_permute(&in, p, NULL, &out));
  T_OK(tcoll_wait(out.data));
  MV_EXPECT_SHAPE(&out, 2, z, "permute of a NULL zero-size input");
  tcoll_tensor_free(&out);
  free(p);
  T_OK(tcoll_shard_dim_all_to_all(&in, 1, 0, NULL, &out));
  T_OK(tcoll_wait(out.data));
  int64_t zs[2] = {0, 3 * (int64_t)t_size};
  MV_EXPECT_SHAPE(&out, 2, zs, "shard_dim_all_to_all of a NULL zero-size input");
  tcoll_tensor_free(&out);
  tcoll_tensor_t *ins = calloc((size_t)t_size, sizeof *ins),
                 *outs = calloc((size_t)t_size, sizeof *outs);
  for (int q = 0; q < t_size; q++) {
    ins[q] = in;
    outs[q] = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 2, z, t_device());
  }
  T_OK(tcoll_all_to_all(ins, NULL, outs));
  for (int q = 0; q < t_size; q++) {
    T_OK(tcoll_wait(outs[q].data));
    tcoll_tensor_free(&outs[q]);
  }
  free(ins);
  free(outs);
}
END_TEST

/* Inputs that are pending outputs of earlier calls are waited for first. */
START_TEST(pending_inputs) {
  int64_t s[2] = {2 * (int64_t)t_size, 3};
  tcoll_tensor_t x = t_alloc(TCOLL_INT32, 2, s), y = t_empty(), z = t_empty();
  mv_fill(&x, t_rank, 0);
  /* even all_to_all_single twice is the identity */
  T_OK(tcoll_all_to_all_single(&x, NULL, NULL, NULL, &y));
  T_OK(tcoll_all_to_all_single(&y, NULL, NULL, NULL, &z));
  T_OK(tcoll_wait(z.data));
  T_OK(tcoll_wait(y.data));
  mv_check_fill("all_to_all_single of a pending all_to_all_single", &z, t_rank, 0);
  tcoll_tensor_free(&z);
  /* permute a pending permute: shift by one twice */
  int *p = malloc((size_t)t_size * sizeof *p);
  for (int m = 0; m < t_size; m++) p[m] = (m + 1) % t_size;
  tcoll_tensor_t y2 = t_empty();
  T_OK(tcoll_permute(&x, p, NULL, &y2));
  T_OK(tcoll_permute(&y2, p, NULL, &z));
  T_OK(tcoll_wait(z.data));
  mv_check_fill("permute of a pending permute", &z, ((t_rank - 2) % t_size + 2 * t_size) % t_size,
                0);
  tcoll_tensor_free(&z);
  tcoll_tensor_free(&y2);
  free(p);
  /* shard_dim_all_to_all (0 -> 1) of a pending shard_dim_all_to_all (1 -> 0) is the identity */
  tcoll_tensor_t u = t_empty();
  int64_t s3[2] = {2 * (int64_t)t_size, 3 * (int64_t)t_size};
  tcoll_tensor_t x3 = t_alloc(TCOLL_FLOAT64, 2, s3);
  mv_fill(&x3, t_rank, 0);
  T_OK(tcoll_shard_dim_all_to_all(&x3, 0, 1, NULL, &u));
  T_OK(tcoll_shard_dim_all_to_all(&u, 1, 0, NULL, &z));
  T_OK(tcoll_wait(z.data));
  MV_EXPECT_SHAPE(&z, 2, s3, "shard_dim_all_to_all there and back");
  mv_check_fill("shard_dim_all_to_all there and back", &z, t_rank, 0);
  tcoll_tensor_free(&z);
  tcoll_tensor_free(&u);
  tcoll_tensor_free(&x3);
  /* list all_to_all of pending inputs (the outputs of an earlier list all_to_all) */
  tcoll_tensor_t *ins = calloc((size_t)t_size, sizeof *ins),
                 *mid = calloc((size_t)t_size, sizeof *mid),
                 *outs = calloc((size_t)t_size, sizeof *outs);
  int64_t s1[1] = {3};
  for (int q = 0; q < t_size; q++) {
    ins[q] = t_alloc(TCOLL_INT8, 1, s1);
    mv_fill(&ins[q], 16 * t_rank + q, 0);
    mid[q] = tcoll_tensor_make(NULL, TCOLL_INT8, 1, s1, t_device());
    outs[q] = tcoll_tensor_make(NULL, TCOLL_INT8, 1, s1, t_device());
  }
  T_OK(tcoll_all_to_all(ins, NULL, mid));
  T_OK(tcoll_all_to_all(mid, NULL, outs)); /* back where it came from */
  for (int q = 0; q < t_size; q++) {
    T_OK(tcoll_wait(outs[q].data));
    mv_check_fill("all_to_all of pending inputs", &outs[q], 16 * t_rank + q, 0);
  }
  for (int q = 0; q < t_size; q++) {
    tcoll_tensor_free(&ins[q]);
    tcoll_tensor_free(&mid[q]);
    tcoll_tensor_free(&outs[q]);
  }
  free(ins);
  free(mid);
  free(outs);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
}
END_TEST

/* Pending outputs are refused with TCOLL_ERR_BUSY; outputs of one call may not overlap. */
START_TEST(busy_and_overlapping_outputs) {
  int64_t s[1] = {(int64_t)t_size};
  tcoll_tensor_t x = t_alloc(TCOLL_INT32, 1, s), y = t_empty();
  mv_fill(&x, t_rank, 0);
  T_OK(tcoll_all_to_all_single(&x, NULL, NULL, NULL, &y));
  T_FAILS(tcoll_all_to_all_single(&x, NULL, NULL, NULL, &y), TCOLL_ERR_BUSY, "pending");
  int *p = malloc((size_t)t_size * sizeof *p);
  for (int m = 0; m < t_size; m++) p[m] = m;
  T_FAILS(tcoll_permute(&x, p, NULL, &y), TCOLL_ERR_BUSY, "pending");
  T_FAILS(tcoll_shard_dim_all_to_all(&x, 0, 0, NULL, &y), TCOLL_ERR_BUSY, "pending");
  T_EXPECT(tcoll_pending_count() == 1, "%zu pending (expected 1)", tcoll_pending_count());
  T_OK(tcoll_wait(y.data));
  free(p);
  if (t_size > 1) {
    int64_t one[1] = {1};
    tcoll_tensor_t *ins = calloc((size_t)t_size, sizeof *ins),
                   *outs = calloc((size_t)t_size, sizeof *outs);
    for (int q = 0; q < t_size; q++) {
      ins[q] = tcoll_tensor_make((char *)x.data + 4 * (size_t)q, TCOLL_INT32, 1, one, x.device);
      outs[q] = q < 2 ? tcoll_tensor_make(y.data, TCOLL_INT32, 1, one, y.device)
                      : tcoll_tensor_make(NULL, TCOLL_INT32, 1, one, t_device());
    }
    T_FAILS(tcoll_all_to_all(ins, NULL, outs), TCOLL_ERR_INVALID_ARGUMENT,
            "overlaps another output");
    for (int q = 2; q < t_size; q++)
      T_EXPECT(outs[q].data == NULL, "refused all_to_all kept outs[%d]", q);
    free(ins);
    free(outs);
  }
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending after refused calls", tcoll_pending_count());
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("all_to_all");
  TCase *tc = t_tcase("all_to_all");
  tcase_add_test(tc, single_even);
  tcase_add_test(tc, single_uneven);
  tcase_add_test(tc, single_zero_size);
  tcase_add_test(tc, single_bad_arguments);
  tcase_add_test(tc, permute_patterns);
  tcase_add_test(tc, permute_bad_arguments);
  tcase_add_test(tc, shard_all_pairs);
  tcase_add_test(tc, shard_zero_size);
  tcase_add_test(tc, shard_bad_arguments);
  tcase_add_test(tc, list_per_peer_shapes);
  tcase_add_test(tc, list_zero_size_and_errors);
  tcase_add_test(tc, sub_communicators);
  tcase_add_test(tc, single_empty_sender);
  tcase_add_test(tc, zero_size_null_data);
  tcase_add_test(tc, pending_inputs);
  tcase_add_test(tc, busy_and_overlapping_outputs);
  suite_add_tcase(s, tc);
  return s;
}
