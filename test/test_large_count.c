/* Counts above the per-call element limit, for every data-movement op.
 *
 * The suite runs with TCOLL_MAX_COUNT=1000 (test/meson.build), so a few thousand elements stand
 * for counts above INT_MAX: all_gather along dim 0 and along other dims (blocks and block counts
 * above the limit), broadcast, all_to_all_single (per-peer counts above the limit: the
 * MPI_Ialltoallw path; rows above the limit: big unit types), permute, shard_dim_all_to_all,
 * gather / scatter, the list and coalesced forms, and odd sizes around the limit. A last test
 * lowers the limit to 7 at run time so that the derived datatypes nest several levels deep.
 * Values are exact (move_util.h closed forms). */
#include "move_util.h"

#define LIMIT 1000

static int64_t current_limit(void) {
  tcoll_config_t cfg;
  if (tcoll_get_config(&cfg) != TCOLL_SUCCESS) return -1;
  return cfg.max_count;
}

static void set_limit(int64_t n) {
  tcoll_config_t cfg;
  T_OK(tcoll_get_config(&cfg));
  cfg.max_count = n;
  T_OK(tcoll_set_config(&cfg));
}

/* ---- watching what reaches MPI ----
 *
 * The test program defines the MPI entry points tcoll posts with (and the datatype constructors
 * it builds with); the dynamic linker binds libtcoll's calls to them, and they forward to the
 * PMPI layer. Each one checks that no count it is given exceeds the limit in force, and counts
 * the calls so that tests can see which path an op took (e.g. MPI_Ialltoallw). */
static struct {
  int over; /* counts above the limit */
  int64_t max_count;
  int allgather, bcast, gather, scatter, alltoallv, alltoallw, type_ctors;
  char first_over[160];
} watch;

static void watch_begin(void) { memset(&watch, 0, sizeof watch); }

static void note(const char *fn, int64_t count) {
  if (count > watch.max_count) watch.max_count = count;
  int64_t L = current_limit();
  if (count > L && watch.over++ == 0)
    snprintf(watch.first_over, sizeof watch.first_over, "%s got a count of %lld (limit %lld)", fn, (long long)count,
             (long long)L);
}

static void note_array(const char *fn, const int *counts, MPI_Comm comm) {
  int n = 0;
  PMPI_Comm_size(comm, &n);
  for (int i = 0; i < n; i++) note(fn, counts[i]);
}

/* Every count within the limit; returns nothing, records failures. */
#define WATCH_END(what)                                                                          \
  T_EXPECT(watch.over == 0, "%s: %d counts above the limit, first: %s", (what), watch.over, watch.first_over)

int MPI_Iallgather(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt, MPI_Comm comm,
                   MPI_Request *req) {
  watch.allgather++;
  note("MPI_Iallgather", sc);
  note("MPI_Iallgather", rc);
  return PMPI_Iallgather(sb, sc, st, rb, rc, rt, comm, req);
}

int MPI_Ibcast(void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm, MPI_Request *req) {
  watch.bcast++;
  note("MPI_Ibcast", count);
  return PMPI_Ibcast(buf, count, dt, root, comm, req);
}

int MPI_Igather(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt, int root, MPI_Comm comm,
                MPI_Request *req) {
  watch.gather++;
  note("MPI_Igather", sc);
  note("MPI_Igather", rc);
  return PMPI_Igather(sb, sc, st, rb, rc, rt, root, comm, req);
}

int MPI_Iscatter(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt, int root, MPI_Comm comm,
                 MPI_Request *req) {
  watch.scatter++;
  note("MPI_Iscatter", sc);
  note("MPI_Iscatter", rc);
  return PMPI_Iscatter(sb, sc, st, rb, rc, rt, root, comm, req);
}

int MPI_Ialltoallv(const void *sb, const int sc[], const int sd[], MPI_Datatype st, void *rb, const int rc[],
                   const int rd[], MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  watch.alltoallv++;
  note_array("MPI_Ialltoallv", sc, comm);
  note_array("MPI_Ialltoallv", rc, comm);
  return PMPI_Ialltoallv(sb, sc, sd, st, rb, rc, rd, rt, comm, req);
}

int MPI_Ialltoallw(const void *sb, const int sc[], const int sd[], const MPI_Datatype st[], void *rb, const int rc[],
                   const int rd[], const MPI_Datatype rt[], MPI_Comm comm, MPI_Request *req) {
  watch.alltoallw++;
  note_array("MPI_Ialltoallw", sc, comm);
  note_array("MPI_Ialltoallw", rc, comm);
  return PMPI_Ialltoallw(sb, sc, sd, st, rb, rc, rd, rt, comm, req);
}

int MPI_Type_contiguous(int count, MPI_Datatype old, MPI_Datatype *t) {
  watch.type_ctors++;
  note("MPI_Type_contiguous", count);
  return PMPI_Type_contiguous(count, old, t);
}

int MPI_Type_create_hvector(int count, int blen, MPI_Aint stride, MPI_Datatype old, MPI_Datatype *t) {
  watch.type_ctors++;
  note("MPI_Type_create_hvector", count);
  note("MPI_Type_create_hvector (block length)", blen);
  return PMPI_Type_create_hvector(count, blen, stride, old, t);
}

int MPI_Type_create_hindexed(int count, const int blens[], const MPI_Aint displs[], MPI_Datatype old,
                             MPI_Datatype *t) {
  watch.type_ctors++;
  note("MPI_Type_create_hindexed", count);
  for (int i = 0; i < count; i++) note("MPI_Type_create_hindexed (block length)", blens[i]);
  return PMPI_Type_create_hindexed(count, blens, displs, old, t);
}

int MPI_Type_create_struct(int count, const int blens[], const MPI_Aint displs[], const MPI_Datatype types[],
                           MPI_Datatype *t) {
  watch.type_ctors++;
  note("MPI_Type_create_struct", count);
  for (int i = 0; i < count; i++) note("MPI_Type_create_struct (block length)", blens[i]);
  return PMPI_Type_create_struct(count, blens, displs, types, t);
}

START_TEST(limit_in_force) {
  int64_t L = current_limit();
  T_EXPECT(L == LIMIT, "max_count is %lld (expected %d from TCOLL_MAX_COUNT)", (long long)L, LIMIT);
  /* The watch sees tcoll's MPI calls (else every other check here would be vacuous). */
  watch_begin();
  int64_t n = 3;
  tcoll_tensor_t in = t_alloc(TCOLL_INT32, 1, &n), out = t_empty();
  T_OK(tcoll_all_gather(&in, 0, NULL, &out));
  T_OK(tcoll_wait(out.data));
  T_EXPECT(watch.allgather == 1 && watch.max_count == 3, "the MPI watch saw %d MPI_Iallgather calls, max count %lld",
           watch.allgather, (long long)watch.max_count);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}
END_TEST

/* ---- all_gather ---- */

static void ag_case(tcoll_dtype_t dt, int ndim, const int64_t *shape, int dim, bool prealloc) {
  int nd = dim < 0 ? dim + ndim : dim;
  int64_t oshape[TCOLL_MAX_DIMS];
  memcpy(oshape, shape, (size_t)ndim * sizeof *oshape);
  oshape[nd] *= t_size;
  tcoll_tensor_t in = t_alloc(dt, ndim, shape), out = prealloc ? t_alloc(dt, ndim, oshape) : t_empty();
  mv_fill(&in, t_rank, 0);
  if (prealloc) mv_fill(&out, 50 + t_rank, 0);
  char what[160], sh[64];
  snprintf(what, sizeof what, "large all_gather %s %s along %d", tcoll_dtype_name(dt), mv_shape_str(sh, sizeof sh, ndim, shape),
           dim);
  int rc = tcoll_all_gather(&in, dim, NULL, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, ndim, oshape, what);
    mv_ag_ctx c = {dt, ndim, nd, t_size, shape, NULL};
    t_check_all(what, &out, mv_ag_expect, &c, 0);
  }
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

START_TEST(all_gather_dim0) {
  watch_begin();
  static const int64_t sizes[] = {1001, 2500, 3001, 999};
  static const tcoll_dtype_t dts[] = {TCOLL_FLOAT32, TCOLL_INT8, TCOLL_FLOAT16, TCOLL_FLOAT64, TCOLL_BOOL};
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 5; k++) ag_case(dts[k], 1, &sizes[i], 0, (i + k) % 2);
  int64_t s2[2] = {1100, 3}; /* rows x 3 */
  ag_case(TCOLL_BFLOAT16, 2, s2, 0, false);
  ag_case(TCOLL_INT64, 2, s2, -2, true);
  WATCH_END("all_gather_dim0");
}
END_TEST

START_TEST(all_gather_other_dims) {
  watch_begin();
  struct {
    int ndim;
    int64_t shape[3];
    int dim;
  } cases[] = {
      {2, {3, 1500}, 1},     /* blocks above the limit */
      {2, {1200, 2}, 1},     /* more blocks than the limit */
      {2, {2100, 1}, -1},    /* block count above twice the limit, blocks of one element */
      {3, {2, 1100, 3}, 1},  /* blocks of 3300 */
      {3, {2, 3, 1001}, -1}, /* odd block size just above the limit */
      {2, {1, 2001}, 1},     /* leading 1: contiguous form above the limit */
      {3, {1003, 1, 1}, 2},  /* many one-element blocks */
  };
  static const tcoll_dtype_t dts[] = {TCOLL_FLOAT64, TCOLL_FLOAT16, TCOLL_INT8, TCOLL_BFLOAT16, TCOLL_INT32,
                                      TCOLL_BOOL,    TCOLL_UINT8};
  for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
    ag_case(dts[i], cases[i].ndim, cases[i].shape, cases[i].dim, false);
    ag_case(TCOLL_FLOAT32, cases[i].ndim, cases[i].shape, cases[i].dim, true);
  }
  WATCH_END("all_gather_other_dims");
}
END_TEST

START_TEST(all_gather_in_place) {
  watch_begin();
  static const int64_t sizes[] = {2003, 1000, 1001};
  for (int i = 0; i < 3; i++) {
    int64_t n = sizes[i], on = n * t_size;
    tcoll_dtype_t dt = i == 1 ? TCOLL_FLOAT16 : TCOLL_INT32;
    tcoll_tensor_t out = t_alloc(dt, 1, &on);
    mv_fill(&out, 70, 0);
    size_t es = tcoll_dtype_size(dt);
    tcoll_tensor_t in = tcoll_tensor_make((char *)out.data + (size_t)t_rank * (size_t)n * es, dt, 1, &n, out.device);
    mv_fill(&in, t_rank, 0);
    T_OK(tcoll_all_gather(&in, 0, NULL, &out));
    T_OK(tcoll_wait(out.data));
    mv_ag_ctx c = {dt, 1, 0, t_size, &n, NULL};
    t_check_all("large in-place all_gather", &out, mv_ag_expect, &c, 0);
    tcoll_tensor_free(&out);
  }
  WATCH_END("all_gather_in_place");
}
END_TEST

START_TEST(all_gather_list_and_coalesced) {
  watch_begin();
  /* list */
  int64_t n = 1500;
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, &n);
  mv_fill(&in, t_rank, 0);
  tcoll_tensor_t *outs = calloc((size_t)t_size, sizeof *outs);
  for (int r = 0; r < t_size; r++) outs[r] = t_empty();
  T_OK(tcoll_all_gather_list(&in, NULL, outs));
  for (int r = 0; r < t_size; r++) {
    T_OK(tcoll_wait(outs[r].data));
    mv_check_fill("large all_gather_list", &outs[r], r, 0);
    tcoll_tensor_free(&outs[r]);
  }
  free(outs);
  tcoll_tensor_free(&in);
  /* coalesced: 3401 packed bytes per rank */
  tcoll_tensor_t cin[3], cout[3];
  const tcoll_dtype_t dts[3] = {TCOLL_FLOAT64, TCOLL_INT8, TCOLL_FLOAT16};
  const int64_t lens[3] = {300, 501, 250};
  for (int i = 0; i < 3; i++) {
    cin[i] = t_alloc(dts[i], 1, &lens[i]);
    mv_fill(&cin[i], 8 * t_rank + i, 0);
    cout[i] = t_empty();
  }
  T_OK(tcoll_all_gather_coalesced(cin, 3, NULL, cout));
  for (int i = 0; i < 3; i++) {
    T_OK(tcoll_wait(cout[i].data));
    int tags[8];
    for (int r = 0; r < t_size; r++) tags[r] = 8 * r + i;
    mv_ag_ctx c = {dts[i], 1, 0, t_size, &lens[i], tags};
    t_check_all("large all_gather_coalesced", &cout[i], mv_ag_expect, &c, 0);
    tcoll_tensor_free(&cin[i]);
    tcoll_tensor_free(&cout[i]);
  }
  WATCH_END("all_gather_list_and_coalesced");
}
END_TEST

/* ---- broadcast ---- */

START_TEST(broadcast_large) {
  watch_begin();
  static const int64_t sizes[] = {3001, 1001, 2000};
  static const tcoll_dtype_t dts[] = {TCOLL_FLOAT64, TCOLL_BFLOAT16, TCOLL_UINT8};
  for (int src = 0; src < t_size; src++) {
    for (int i = 0; i < 3; i++) {
      for (int mode = 0; mode < 3; mode++) { /* out of place, allocating, in place */
        tcoll_tensor_t in = t_alloc(dts[i], 1, &sizes[i]), out = t_empty();
        mv_fill(&in, t_rank, 0);
        if (mode == 0) out = t_alloc(dts[i], 1, &sizes[i]);
        if (mode == 2) out = in;
        T_OK(tcoll_broadcast(&in, src, NULL, &out));
        T_OK(tcoll_wait(out.data));
        mv_check_fill("large broadcast", &out, src, 0);
        if (mode != 2) tcoll_tensor_free(&out);
        tcoll_tensor_free(&in);
      }
    }
  }
  WATCH_END("broadcast_large");
}
END_TEST

/* ---- all_to_all_single ---- */

/* S[i * size + j] rows from i to j, rows of `row` elements. S NULL: `even` rows per pair. */
static void a2a_case(tcoll_dtype_t dt, const int64_t *S, int64_t even, int64_t row, bool prealloc, const char *kind) {
  int size = t_size, me = t_rank;
  int64_t *E = NULL;
  if (!S) {
    E = malloc((size_t)size * (size_t)size * sizeof *E);
    for (int k = 0; k < size * size; k++) E[k] = even;
  }
  const int64_t *M = S ? S : E;
  int64_t *is = malloc((size_t)size * sizeof *is), *os = malloc((size_t)size * sizeof *os), irows = 0, orows = 0;
  for (int p = 0; p < size; p++) {
    is[p] = M[me * size + p];
    os[p] = M[p * size + me];
    irows += is[p];
    orows += os[p];
  }
  int64_t ishape[2] = {irows, row}, oshape[2] = {orows, row};
  int nd = row == 1 ? 1 : 2;
  tcoll_tensor_t in = t_alloc(dt, nd, ishape), out = prealloc ? t_alloc(dt, nd, oshape) : t_empty();
  mv_fill(&in, me, 0);
  if (prealloc) mv_fill(&out, 60 + me, 0);
  char what[128];
  snprintf(what, sizeof what, "large all_to_all_single %s (%s, rows of %lld)", tcoll_dtype_name(dt), kind, (long long)row);
  int rc = S ? tcoll_all_to_all_single(&in, os, is, NULL, &out) : tcoll_all_to_all_single(&in, NULL, NULL, NULL, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, nd, oshape, what);
    mv_a2a_ctx c = {dt, size, me, row, M, NULL};
    t_check_all(what, &out, mv_a2a_expect, &c, 0);
  }
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  free(is);
  free(os);
  free(E);
}

START_TEST(all_to_all_single_large) {
  watch_begin();
  int size = t_size;
  /* Even: 1500 one-element rows per peer (counts above the limit: MPI_Ialltoallw). */
  a2a_case(TCOLL_FLOAT32, NULL, 1500, 1, false, "even, 1500 per peer");
  T_EXPECT(watch.alltoallw == 1 && watch.alltoallv == 0,
           "1500 elements per peer: %d MPI_Ialltoallw and %d MPI_Ialltoallv calls (expected the MPI_Ialltoallw path)",
           watch.alltoallw, watch.alltoallv);
  a2a_case(TCOLL_INT8, NULL, 1001, 1, true, "even, 1001 per peer");
  /* Uneven: 0, 600, 1200 or 1800 rows per pair, above and below the limit and zero. */
  int64_t *S = malloc((size_t)size * (size_t)size * sizeof *S);
  for (int i = 0; i < size; i++)
    for (int j = 0; j < size; j++) S[i * size + j] = ((i + 2 * j + 1) % 4) * 600;
  a2a_case(TCOLL_FLOAT64, S, 0, 1, false, "uneven 0..1800");
  a2a_case(TCOLL_FLOAT16, S, 0, 1, true, "uneven 0..1800");
  /* Uneven rows of 3 elements: 0..1800 rows (up to 5400 elements) per pair. */
  a2a_case(TCOLL_INT16, S, 0, 3, false, "uneven rows of 3");
  /* Odd counts around the limit. */
  for (int i = 0; i < size; i++)
    for (int j = 0; j < size; j++) S[i * size + j] = (i + j) % 2 ? 1001 : 999;
  a2a_case(TCOLL_BOOL, S, 0, 1, false, "999 / 1001");
  a2a_case(TCOLL_INT32, S, 0, 1, true, "999 / 1001");
  free(S);
  /* Rows above the limit: one row of 1500 elements per peer (counts fit, the unit does not). */
  int w0 = watch.alltoallw, v0 = watch.alltoallv;
  a2a_case(TCOLL_BFLOAT16, NULL, 1, 1500, false, "one 1500-element row per peer");
  T_EXPECT(watch.alltoallw == w0 && watch.alltoallv == v0 + 1,
           "one row of 1500 per peer: expected one MPI_Ialltoallv of one row each (got %d / %d more calls)",
           watch.alltoallv - v0, watch.alltoallw - w0);
  /* Many rows of 7: 200 rows (1400 elements) per peer, counts in rows fit. */
  a2a_case(TCOLL_UINT8, NULL, 200, 7, true, "200 rows of 7 per peer");
  WATCH_END("all_to_all_single_large");
}
END_TEST

/* ---- permute ---- */

START_TEST(permute_large) {
  watch_begin();
  int64_t n = 2500;
  int *p = malloc((size_t)t_size * sizeof *p);
  for (int variant = 0; variant < 3; variant++) {
    for (int m = 0; m < t_size; m++)
      p[m] = variant == 0 ? (m + 1) % t_size : variant == 1 ? t_size - 1 - m : m; /* shift, reversal, identity */
    int from = -1;
    for (int m = 0; m < t_size; m++)
      if (p[m] == t_rank) from = m;
    tcoll_dtype_t dt = variant == 1 ? TCOLL_FLOAT16 : TCOLL_FLOAT64;
    tcoll_tensor_t in = t_alloc(dt, 1, &n), out = t_empty();
    mv_fill(&in, t_rank, 0);
    T_OK(tcoll_permute(&in, p, NULL, &out));
    T_OK(tcoll_wait(out.data));
    mv_check_fill("large permute", &out, from, 0);
    T_EXPECT(watch.alltoallw == variant + 1, "large permute %d: %d MPI_Ialltoallw calls", variant, watch.alltoallw);
    tcoll_tensor_free(&in);
    tcoll_tensor_free(&out);
  }
  free(p);
  WATCH_END("permute_large");
}
END_TEST

/* ---- shard_dim_all_to_all ---- */

static void shard_case(tcoll_dtype_t dt, int ndim, const int64_t *ishape, int g, int s, bool prealloc) {
  int64_t oshape[TCOLL_MAX_DIMS];
  memcpy(oshape, ishape, (size_t)ndim * sizeof *oshape);
  oshape[s] /= t_size;
  oshape[g] *= t_size;
  tcoll_tensor_t in = t_alloc(dt, ndim, ishape), out = prealloc ? t_alloc(dt, ndim, oshape) : t_empty();
  mv_fill(&in, t_rank, 0);
  char what[160], sh[64];
  snprintf(what, sizeof what, "large shard_dim_all_to_all %s %s gather %d shard %d", tcoll_dtype_name(dt),
           mv_shape_str(sh, sizeof sh, ndim, ishape), g, s);
  int rc = tcoll_shard_dim_all_to_all(&in, g, s, NULL, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, ndim, oshape, what);
    mv_shard_ctx c = {dt, ndim, g, s, t_size, t_rank, ishape, NULL};
    t_check_all(what, &out, mv_shard_expect, &c, 0);
  }
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

START_TEST(shard_large) {
  watch_begin();
  int64_t P = t_size;
  int64_t a[2] = {3, 1100 * P}; /* chunks of 3 x 1100 */
  shard_case(TCOLL_FLOAT32, 2, a, 0, 1, false);
  shard_case(TCOLL_INT8, 2, a, 1, 1, true);
  int64_t b[2] = {1200 * P, 2}; /* chunks of 1200 rows: 2400 contiguous elements */
  shard_case(TCOLL_FLOAT64, 2, b, 1, 0, false);
  shard_case(TCOLL_FLOAT16, 2, b, 0, 0, true);
  int64_t c[3] = {2, 2 * P, 1001}; /* blocks of 1001 */
  shard_case(TCOLL_BFLOAT16, 3, c, 2, 1, false);
  shard_case(TCOLL_INT32, 3, c, 0, 1, true);
  int64_t d[1] = {1500 * P};
  shard_case(TCOLL_UINT8, 1, d, 0, 0, false);
  int64_t e[2] = {1001, 2 * P}; /* 1001 blocks of 2 elements */
  shard_case(TCOLL_INT16, 2, e, 0, 1, false);
  WATCH_END("shard_large");
}
END_TEST

/* ---- gather / scatter ---- */

START_TEST(gather_scatter_large) {
  watch_begin();
  int64_t n = 2100;
  for (int root = 0; root < t_size; root++) {
    tcoll_dtype_t dt = root % 2 ? TCOLL_FLOAT16 : TCOLL_FLOAT64;
    /* gather */
    tcoll_tensor_t in = t_alloc(dt, 1, &n), *outs = NULL;
    mv_fill(&in, t_rank, 0);
    if (t_rank == root) {
      outs = calloc((size_t)t_size, sizeof *outs);
      for (int r = 0; r < t_size; r++) outs[r] = t_empty();
    }
    T_OK(tcoll_gather(&in, root, NULL, outs));
    if (outs) {
      for (int r = 0; r < t_size; r++) {
        T_OK(tcoll_wait(outs[r].data));
        mv_check_fill("large gather", &outs[r], r, 0);
        tcoll_tensor_free(&outs[r]);
      }
      free(outs);
    } else {
      T_OK(tcoll_wait(in.data));
    }
    tcoll_tensor_free(&in);
    /* scatter */
    tcoll_tensor_t *ins = NULL, out = tcoll_tensor_make(NULL, dt, 1, &n, t_device());
    if (t_rank == root) {
      ins = calloc((size_t)t_size, sizeof *ins);
      for (int r = 0; r < t_size; r++) {
        ins[r] = t_alloc(dt, 1, &n);
        mv_fill(&ins[r], 16 * root + r, 0);
      }
    }
    T_OK(tcoll_scatter(ins, root, NULL, &out));
    T_OK(tcoll_wait(out.data));
    mv_check_fill("large scatter", &out, 16 * root + t_rank, 0);
    tcoll_tensor_free(&out);
    if (ins) {
      for (int r = 0; r < t_size; r++) tcoll_tensor_free(&ins[r]);
      free(ins);
    }
  }
  WATCH_END("gather_scatter_large");
}
END_TEST

/* ---- all_to_all (list) ---- */

START_TEST(all_to_all_list_large) {
  watch_begin();
  int size = t_size, me = t_rank;
  tcoll_tensor_t *ins = calloc((size_t)size, sizeof *ins), *outs = calloc((size_t)size, sizeof *outs);
  for (int p = 0; p < size; p++) {
    int64_t ni = (me + p) % 2 ? 1200 : 17, no = (p + me) % 2 ? 1200 : 17;
    ins[p] = t_alloc(TCOLL_INT32, 1, &ni);
    mv_fill(&ins[p], 16 * me + p, 0);
    outs[p] = tcoll_tensor_make(NULL, TCOLL_INT32, 1, &no, t_device());
  }
  T_OK(tcoll_all_to_all(ins, NULL, outs));
  for (int p = 0; p < size; p++) {
    T_OK(tcoll_wait(outs[p].data));
    mv_check_fill("large all_to_all", &outs[p], 16 * p + me, 0);
    tcoll_tensor_free(&outs[p]);
    tcoll_tensor_free(&ins[p]);
  }
  free(ins);
  free(outs);
  WATCH_END("all_to_all_list_large");
}
END_TEST

/* ---- many pending at once ---- */

/* More distinct derived datatypes in flight than the datatype cache has slots (256), waited in
 * an order that differs between ranks: cache slots in use are never recycled under MPI. */
START_TEST(many_pending_distinct_types) {
  watch_begin();
  enum { N = 300 };
  tcoll_tensor_t *in = calloc(N, sizeof *in), *out = calloc(N, sizeof *out);
  int64_t (*shape)[2] = calloc(N, sizeof *shape);
  for (int k = 0; k < N; k++) {
    shape[k][0] = 2;
    shape[k][1] = 1001 + k; /* blocks above the limit, a new datatype each */
    in[k] = t_alloc(TCOLL_INT8, 2, shape[k]);
    mv_fill(&in[k], t_rank + k, 0);
    out[k] = t_empty();
    T_OK(tcoll_all_gather(&in[k], 1, NULL, &out[k]));
  }
  T_EXPECT(tcoll_pending_count() == N, "%zu pending (expected %d)", tcoll_pending_count(), N);
  int bad = 0;
  for (int i = 0; i < N; i++) {
    int k = t_rank % 2 ? N - 1 - i : (i * 7) % N; /* 7 and 300 are coprime: a permutation */
    T_OK(tcoll_wait(out[k].data));
    int tags[8];
    for (int r = 0; r < t_size; r++) tags[r] = r + k;
    mv_ag_ctx c = {TCOLL_INT8, 2, 1, t_size, shape[k], tags};
    if (bad < 3) bad += t_check_all("one of many pending all_gathers", &out[k], mv_ag_expect, &c, 0) > 0;
  }
  for (int k = 0; k < N; k++) {
    tcoll_tensor_free(&in[k]);
    tcoll_tensor_free(&out[k]);
  }
  free(in);
  free(out);
  free(shape);
  WATCH_END("many_pending_distinct_types");
}
END_TEST

/* Every data-movement op pending at the same time, above the limit, completed in an order that
 * differs between ranks. */
START_TEST(every_op_pending_at_once) {
  watch_begin();
  int size = t_size, me = t_rank;
  int64_t n = 1500;
  int64_t sh2[2] = {3, 1100}, shs[2] = {2, 1001 * (int64_t)size}, nsz = 1200 * (int64_t)size;
  tcoll_tensor_t x1 = t_alloc(TCOLL_FLOAT32, 1, &n), x2 = t_alloc(TCOLL_FLOAT16, 2, sh2),
                 xa = t_alloc(TCOLL_INT32, 1, &nsz), xs = t_alloc(TCOLL_FLOAT64, 2, shs);
  mv_fill(&x1, me, 0);
  mv_fill(&x2, me, 0);
  mv_fill(&xa, me, 0);
  mv_fill(&xs, me, 0);
  tcoll_tensor_t ag = t_empty(), bc = t_empty(), a2a = t_empty(), pm = t_empty(), sd = t_empty(), sc = t_empty();
  tcoll_tensor_t *gouts = NULL, *sins = NULL;
  int *p = malloc((size_t)size * sizeof *p);
  for (int m = 0; m < size; m++) p[m] = size - 1 - m;
  int root = size - 1;
  if (me == root) {
    gouts = calloc((size_t)size, sizeof *gouts);
    sins = calloc((size_t)size, sizeof *sins);
    for (int r = 0; r < size; r++) {
      gouts[r] = t_empty();
      sins[r] = t_alloc(TCOLL_FLOAT32, 1, &n);
      mv_fill(&sins[r], 16 * root + r, 0);
    }
  }
  sc = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, &n, t_device());
  T_OK(tcoll_all_gather(&x2, 1, NULL, &ag));
  T_OK(tcoll_broadcast(&x1, 0, NULL, &bc));
  T_OK(tcoll_all_to_all_single(&xa, NULL, NULL, NULL, &a2a));
  T_OK(tcoll_permute(&x1, p, NULL, &pm));
  T_OK(tcoll_shard_dim_all_to_all(&xs, 0, 1, NULL, &sd));
  T_OK(tcoll_gather(&x1, root, NULL, gouts));
  T_OK(tcoll_scatter(sins, root, NULL, &sc));
  /* Complete them in a rank-dependent order. */
  void *bufs[7] = {ag.data, bc.data, a2a.data, pm.data, sd.data, me == root ? gouts[0].data : x1.data, sc.data};
  /* 7 is prime and the step 1..6 is coprime to it: every buffer once, at any rank count */
  for (int i = 0; i < 7; i++) T_OK(tcoll_wait(bufs[(i * (me % 6 + 1) + me) % 7]));
  if (me == root)
    for (int r = 1; r < size; r++) T_OK(tcoll_wait(gouts[r].data));
  T_EXPECT(tcoll_pending_count() == 0, "%zu still pending", tcoll_pending_count());
  mv_ag_ctx c1 = {TCOLL_FLOAT16, 2, 1, size, sh2, NULL};
  t_check_all("concurrent all_gather", &ag, mv_ag_expect, &c1, 0);
  mv_check_fill("concurrent broadcast", &bc, 0, 0);
  int64_t *E = malloc((size_t)size * (size_t)size * sizeof *E);
  for (int k = 0; k < size * size; k++) E[k] = 1200;
  mv_a2a_ctx c2 = {TCOLL_INT32, size, me, 1, E, NULL};
  t_check_all("concurrent all_to_all_single", &a2a, mv_a2a_expect, &c2, 0);
  mv_check_fill("concurrent permute", &pm, size - 1 - me, 0);
  mv_shard_ctx c3 = {TCOLL_FLOAT64, 2, 0, 1, size, me, shs, NULL};
  t_check_all("concurrent shard_dim_all_to_all", &sd, mv_shard_expect, &c3, 0);
  mv_check_fill("concurrent scatter", &sc, 16 * root + me, 0);
  if (me == root)
    for (int r = 0; r < size; r++) {
      mv_check_fill("concurrent gather", &gouts[r], r, 0);
      tcoll_tensor_free(&gouts[r]);
      tcoll_tensor_free(&sins[r]);
    }
  free(gouts);
  free(sins);
  free(E);
  free(p);
  tcoll_tensor_t *all[] = {&x1, &x2, &xa, &xs, &ag, &bc, &a2a, &pm, &sd, &sc};
  for (int i = 0; i < 10; i++) tcoll_tensor_free(all[i]);
  WATCH_END("every_op_pending_at_once");
}
END_TEST

/* ---- a tiny limit: derived datatypes nested several levels ---- */

START_TEST(tiny_limit) {
  watch_begin();
  set_limit(7); /* counts above 7^2 and 7^3 nest the repeat types */
  int64_t s1[2] = {60, 9};
  ag_case(TCOLL_FLOAT32, 2, s1, 1, false); /* 60 blocks of 9 */
  ag_case(TCOLL_INT8, 2, s1, 0, true);     /* 540 contiguous */
  int64_t s2[3] = {5, 11, 13};
  ag_case(TCOLL_FLOAT16, 3, s2, 1, false);
  int64_t n = 500;
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT64, 1, &n), out = t_empty();
  mv_fill(&in, t_rank, 0);
  T_OK(tcoll_broadcast(&in, t_size - 1, NULL, &out));
  T_OK(tcoll_wait(out.data));
  mv_check_fill("tiny-limit broadcast", &out, t_size - 1, 0);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
  int64_t *S = malloc((size_t)t_size * (size_t)t_size * sizeof *S);
  for (int i = 0; i < t_size; i++)
    for (int j = 0; j < t_size; j++) S[i * t_size + j] = ((i + 2 * j + 1) % 4) * 20;
  a2a_case(TCOLL_BFLOAT16, S, 0, 1, false, "tiny limit, uneven");
  a2a_case(TCOLL_INT64, S, 0, 9, true, "tiny limit, rows of 9");
  a2a_case(TCOLL_FLOAT32, NULL, 2, 60, false, "tiny limit, rows of 60");
  free(S);
  int64_t sh[2] = {9, 10 * (int64_t)t_size};
  shard_case(TCOLL_INT32, 2, sh, 0, 1, false);
  set_limit(LIMIT);
  T_EXPECT(current_limit() == LIMIT, "limit not restored");
  WATCH_END("tiny_limit");
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("large_count");
  TCase *tc = t_tcase("large_count");
  tcase_add_test(tc, limit_in_force);
  tcase_add_test(tc, all_gather_dim0);
  tcase_add_test(tc, all_gather_other_dims);
  tcase_add_test(tc, all_gather_in_place);
  tcase_add_test(tc, all_gather_list_and_coalesced);
  tcase_add_test(tc, broadcast_large);
  tcase_add_test(tc, all_to_all_single_large);
  tcase_add_test(tc, permute_large);
  tcase_add_test(tc, shard_large);
  tcase_add_test(tc, gather_scatter_large);
  tcase_add_test(tc, all_to_all_list_large);
  tcase_add_test(tc, many_pending_distinct_types);
  tcase_add_test(tc, every_op_pending_at_once);
  tcase_add_test(tc, tiny_limit);
  suite_add_tcase(s, tc);
  return s;
}
