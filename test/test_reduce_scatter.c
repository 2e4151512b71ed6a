/* reduce_scatter (along every dim, negative dims too), tcoll_reduce_scatter_shape,
 * reduce_scatter_coalesced and reduce_scatter_list: every dtype x op, refusals, zero-size
 * tensors, subcommunicators and mesh slices, pending-ness, counts above the per-call limit
 * (including per-rank blocks above it, which take the per-root MPI_Ireduce path). */
#include "reduce_common.h"

/* My position in the group. */
static int local_rank(const rc_t *c) {
  for (int r = 0; r < c->G; r++)
    if (c->ids[r] == t_rank) return r;
  return -1;
}

static double b_const(int64_t i, void *v) {
  (void)i;
  return *(double *)v;
}
static void mv_fill_b(tcoll_tensor_t *t, double v) { t_set_all(t, b_const, &v); }

/* One reduce_scatter of c's data (input shape `shape`) along dim, checked. */
static void rs_case(rc_t c, tcoll_redop_t op, tcoll_comm_t *comm, bool alloc, int ndim,
                    const int64_t *shape, int dim) {
  char what[200];
  snprintf(what, sizeof what, "reduce_scatter %s %s dim %d %s G=%d", kname(c.k),
           tcoll_dtype_name(c.d), dim, alloc ? "allocating" : "preallocated", c.G);
  int dn = dim < 0 ? dim + ndim : dim;
  int64_t oshape[TCOLL_MAX_DIMS];
  memcpy(oshape, shape, (size_t)ndim * sizeof *oshape);
  oshape[dn] /= c.G;
  tcoll_tensor_t in = t_alloc(c.d, ndim, shape);
  t_set_all(&in, rc_fill, &c);
  tcoll_tensor_t out = alloc ? t_empty() : t_alloc(c.d, ndim, oshape);
  if (!k_accepts(c.k, c.d)) {
    T_REFUSED(tcoll_reduce_scatter(&in, op, dim, comm, &out), c.k, c.d);
    T_EXPECT(tcoll_pending_count() == 0, "%s: refused call left %zu pending", what,
             tcoll_pending_count());
    if (alloc) T_EXPECT(out.data == NULL, "%s: refused call allocated the output", what);
  } else {
    T_OK(tcoll_reduce_scatter(&in, op, dim, comm, &out));
    T_EXPECT(tcoll_pending_count() == 1, "%s: %zu pending (expected 1)", what,
             tcoll_pending_count());
    T_OK(tcoll_wait(out.data));
    T_EXPECT(tcoll_pending_count() == 0, "%s: %zu pending after the wait", what,
             tcoll_pending_count());
    if (alloc) t_expect_desc(what, &out, c.d, ndim, oshape, in.device);
    rc_t want = c;
    rc_scatter(&want, shape, ndim, dn, local_rank(&c));
    t_check_all(what, &out, rc_want, &want, 0);
    char whatin[220];
    snprintf(whatin, sizeof whatin, "%s: input", what);
    t_check_all(whatin, &in, rc_orig, &c, 0);
  }
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}

/* Every dtype x every op kind along dim 0. */
START_TEST(matrix_dim0) {
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  int64_t s1[1] = {3 * t_size}, s2[2] = {2 * t_size, 3};
  for (int di = 0; di < TCOLL_NUM_DTYPES; di++)
    for (int k = 0; k < K_NKINDS; k++) {
      rc_t c = rc_world(ALL_DTYPES[di], k, 0.5);
      rs_case(c, kop(k, premul), NULL, false, 1, s1, 0);
      rs_case(c, kop(k, premul), NULL, true, 2, s2, 0);
    }
  T_OK(tcoll_redop_destroy(premul));
}
END_TEST

/* Every dim of a 3-D tensor, as a positive and as a negative dim; a small tensor (packed
 * rank-major along dims != 0) and one of at least 4 KiB (slabs through MPI_Ialltoallv). */
START_TEST(every_dim) {
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(2.0, &premul));
  const tcoll_dtype_t dts[] = {TCOLL_FLOAT32, TCOLL_BFLOAT16, TCOLL_INT8, TCOLL_BOOL,
                               TCOLL_FLOAT64};
  const int ks[] = {K_SUM, K_AVG, K_MIN, K_MAX, K_PREMUL, K_PROD, K_BXOR};
  int n = 0;
  const int64_t sizes[2][3] = {{2, 3, 2}, {4, 128, 8}};
  for (int z = 0; z < 2; z++) {
    for (int dim = -3; dim < 3; dim++) {
      int64_t shape[3] = {sizes[z][0], sizes[z][1], sizes[z][2]};
      shape[dim < 0 ? dim + 3 : dim] *= t_size;
      for (size_t d = 0; d < T_LEN(dts); d++)
        for (size_t k = 0; k < T_LEN(ks); k++)
          rs_case(rc_world(dts[d], ks[k], 2.0), kop(ks[k], premul), NULL, n++ % 2, 3, shape, dim);
    }
  }
  T_OK(tcoll_redop_destroy(premul));
}
END_TEST

/* Zero-size tensors: along an empty dim, and an empty tensor scattered along a non-empty dim. */
/* Inputs of 1 MiB and more along a dim other than 0: on host buffers the host pipeline (chunks
 * packed rank-major, each reduced with MPI_Ireduce_scatter_block straight into the output) or
 * the ring, on devices the staging pipeline or the slabs. Chunks end inside runs; runs longer than
 * a chunk; runs of a few elements. */
START_TEST(large_other_dims) {
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  int G = t_size;
  const struct {
    tcoll_dtype_t d;
    int k;
    int64_t shape[3];
    int dim;
  } cases[] = {
      {TCOLL_FLOAT32, K_SUM, {5, 401, 131}, 1},
      {TCOLL_BFLOAT16, K_AVG, {300, 20, 90}, -2},
      {TCOLL_INT32, K_MIN, {33, 7, 1200}, 2},
      {TCOLL_FLOAT64, K_PREMUL, {2, 70001, 1}, 1},
      {TCOLL_FLOAT16, K_MAX, {300, 3, 601}, -1},
      /* short runs: the ring packs its own runs a chunk at a time before reducing them */
      {TCOLL_FLOAT32, K_SUM, {9000, 3, 5}, 2},
      {TCOLL_FLOAT16, K_AVG, {40000, 3, 1}, 1},
      /* runs of 1 KiB and more, which the ring pushes into the next rank's buffer where
       * cross-memory attach works (above: 1202 B to 210 KiB); here 2000 of them, more than one
       * process_vm_writev takes */
      {TCOLL_FLOAT32, K_SUM, {2000, 260, 1}, 1},
  };
  for (size_t i = 0; i < T_LEN(cases); i++) {
    int64_t shape[3] = {cases[i].shape[0], cases[i].shape[1], cases[i].shape[2]};
    shape[cases[i].dim < 0 ? cases[i].dim + 3 : cases[i].dim] *= G;
    rs_case(rc_world(cases[i].d, cases[i].k, 0.5), kop(cases[i].k, premul), NULL, i % 2, 3, shape,
            cases[i].dim);
  }
  T_OK(tcoll_redop_destroy(premul));
}
END_TEST

/* Pipelined reduce_scatters with a broadcast between them on the same communicator, completed
 * in an order that differs between ranks: the chunks' MPI calls still match. */
START_TEST(large_pipelines_any_completion_order) {
  enum { N = 3 };
  int64_t shape[3] = {64, 130 * (int64_t)t_size, 33}, bs[1] = {5000};
  const int ks[N] = {K_SUM, K_MAX, K_SUM};
  const tcoll_dtype_t ds[N] = {TCOLL_FLOAT32, TCOLL_INT32, TCOLL_FLOAT64};
  rc_t c[N];
  tcoll_tensor_t in[N], out[N];
  for (int i = 0; i < N; i++) {
    c[i] = rc_world(ds[i], ks[i], 1.0);
    in[i] = t_alloc(ds[i], 3, shape);
    t_set_all(&in[i], rc_fill, &c[i]);
    out[i] = t_empty();
  }
  tcoll_tensor_t b = t_alloc(TCOLL_INT64, 1, bs);
  mv_fill_b(&b, t_rank == t_size - 1 ? 7.0 : -1.0);
  T_OK(tcoll_reduce_scatter(&in[0], (tcoll_redop_t)ks[0], 1, NULL, &out[0]));
  T_OK(tcoll_broadcast(&b, t_size - 1, NULL, &b));
  T_OK(tcoll_reduce_scatter(&in[1], (tcoll_redop_t)ks[1], -2, NULL, &out[1]));
  T_OK(tcoll_reduce_scatter(&in[2], (tcoll_redop_t)ks[2], 1, NULL, &out[2]));
  const void *order[2][N + 1] = {{out[2].data, b.data, out[1].data, out[0].data},
                                 {out[1].data, out[0].data, out[2].data, b.data}};
  for (int i = 0; i <= N; i++) T_OK(tcoll_wait(order[t_rank % 2][i]));
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending after every wait", tcoll_pending_count());
  double seven = 7.0;
  t_check_all("broadcast between pipelined reduce_scatters", &b, b_const, &seven, 0);
  for (int i = 0; i < N; i++) {
    char what[64];
    snprintf(what, sizeof what, "pipelined reduce_scatter %d of %d", i, N);
    rc_t want = c[i];
    rc_scatter(&want, shape, 3, 1, local_rank(&c[i]));
    t_check_all(what, &out[i], rc_want, &want, 0);
    tcoll_tensor_free(&in[i]);
    tcoll_tensor_free(&out[i]);
  }
  tcoll_tensor_free(&b);
}
END_TEST

START_TEST(zero_size) {
  int64_t a[2] = {0, 3}, b[2] = {2 * t_size, 0}, c3[3] = {t_size, 0, 2}, c4[3] = {1, 0, 2 * t_size};
  rs_case(rc_world(TCOLL_FLOAT32, K_SUM, 1), TCOLL_SUM, NULL, true, 2, a, 0);
  rs_case(rc_world(TCOLL_INT32, K_MAX, 1), TCOLL_MAX, NULL, false, 2, b, 0);
  rs_case(rc_world(TCOLL_FLOAT16, K_AVG, 1), TCOLL_AVG, NULL, true, 2, b, -1);
  rs_case(rc_world(TCOLL_BOOL, K_BOR, 1), TCOLL_BOR, NULL, true, 3, c3, 0);
  rs_case(rc_world(TCOLL_INT64, K_SUM, 1), TCOLL_SUM, NULL, false, 3, c4, 2);
}
END_TEST

/* Bad dims and non-divisible dims: refused with the seed's message, nothing started. */
START_TEST(refusals) {
  int G = t_size;
  int64_t shape[2] = {2, 3 * (int64_t)G + 1}, good[2] = {2, 3 * (int64_t)G};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 2, shape), out = t_empty();
  char msg[128];
  if (G > 1) {
    snprintf(msg, sizeof msg, "input dimension 1 (%d) must be a multiple of group_size %d",
             3 * G + 1, G);
    T_FAILS(tcoll_reduce_scatter(&in, TCOLL_SUM, 1, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, msg);
    /* a negative dim: the seed prints the dim as given, tcoll the normalized one; only the
     * size and the group size are pinned here */
    snprintf(msg, sizeof msg, "(%d) must be a multiple of group_size %d", 3 * G + 1, G);
    T_FAILS(tcoll_reduce_scatter(&in, TCOLL_SUM, -1, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, msg);
    snprintf(msg, sizeof msg, "input dimension 0 (2) must be a multiple of group_size %d", G);
    if (G != 2)
      T_FAILS(tcoll_reduce_scatter(&in, TCOLL_SUM, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, msg);
  }
  T_FAILS(tcoll_reduce_scatter(&in, TCOLL_SUM, 2, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "scatter_dim is 2");
  T_FAILS(tcoll_reduce_scatter(&in, TCOLL_SUM, -3, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "scatter_dim is -3");
  tcoll_tensor_t scalar = t_alloc(TCOLL_FLOAT32, 0, NULL);
  T_FAILS(tcoll_reduce_scatter(&scalar, TCOLL_SUM, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "0-dim");
  tcoll_tensor_free(&scalar);
  T_FAILS(tcoll_reduce_scatter(&in, TCOLL_BAND, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "band");
  /* a preallocated output of the input's shape (not the scattered one) */
  tcoll_tensor_t in2 = t_alloc(TCOLL_FLOAT32, 2, good), wrong = t_alloc(TCOLL_FLOAT32, 2, good);
  if (G > 1)
    T_FAILS(tcoll_reduce_scatter(&in2, TCOLL_SUM, 1, NULL, &wrong), TCOLL_ERR_INVALID_ARGUMENT,
            "out->shape");
  else
    T_FAILS(tcoll_reduce_scatter(&in2, TCOLL_SUM, 1, NULL, &in2), TCOLL_ERR_INVALID_ARGUMENT,
            "overlaps");
  T_EXPECT(out.data == NULL, "a refused call allocated the output");
  T_EXPECT(tcoll_pending_count() == 0, "refused calls left %zu pending", tcoll_pending_count());
  tcoll_tensor_free(&wrong);
  tcoll_tensor_free(&in2);
  tcoll_tensor_free(&in);
}
END_TEST

/* The shape rule without communicating. */
START_TEST(shape_rule) {
  int64_t s3[3] = {8, 6, 4}, got[TCOLL_MAX_DIMS];
  tcoll_tensor_t t = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 3, s3, TCOLL_HOST);
  const struct {
    int dim, G;
    int64_t want[3];
  } ok[] = {{0, 4, {2, 6, 4}},  {-3, 8, {1, 6, 4}}, {1, 3, {8, 2, 4}},
            {-2, 6, {8, 1, 4}}, {2, 2, {8, 6, 2}},  {-1, 1, {8, 6, 4}}};
  for (size_t i = 0; i < T_LEN(ok); i++) {
    memset(got, 0x55, sizeof got);
    T_OK(tcoll_reduce_scatter_shape(&t, ok[i].dim, ok[i].G, got));
    for (int d = 0; d < 3; d++)
      T_EXPECT(got[d] == ok[i].want[d], "shape(dim %d, G %d)[%d] = %lld, expected %lld", ok[i].dim,
               ok[i].G, d, (long long)got[d], (long long)ok[i].want[d]);
  }
  T_FAILS(tcoll_reduce_scatter_shape(&t, 1, 4, got), TCOLL_ERR_INVALID_ARGUMENT,
          "input dimension 1 (6) must be a multiple of group_size 4");
  T_FAILS(tcoll_reduce_scatter_shape(&t, 2, 3, got), TCOLL_ERR_INVALID_ARGUMENT,
          "input dimension 2 (4) must be a multiple of group_size 3");
  T_FAILS(tcoll_reduce_scatter_shape(&t, -1, 3, got), TCOLL_ERR_INVALID_ARGUMENT,
          "(4) must be a multiple of group_size 3");
  T_FAILS(tcoll_reduce_scatter_shape(&t, 3, 2, got), TCOLL_ERR_INVALID_ARGUMENT, "scatter_dim");
  T_FAILS(tcoll_reduce_scatter_shape(&t, 0, 0, got), TCOLL_ERR_INVALID_ARGUMENT, "group_size");
  T_FAILS(tcoll_reduce_scatter_shape(&t, 0, 2, NULL), TCOLL_ERR_INVALID_ARGUMENT, "shape");
  T_FAILS(tcoll_reduce_scatter_shape(NULL, 0, 2, got), TCOLL_ERR_INVALID_ARGUMENT, "in");
  tcoll_tensor_t s0 = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 0, NULL, TCOLL_HOST);
  T_FAILS(tcoll_reduce_scatter_shape(&s0, 0, 1, got), TCOLL_ERR_INVALID_ARGUMENT, "0-dim");
  int64_t z[2] = {0, 5};
  tcoll_tensor_t tz = tcoll_tensor_make(NULL, TCOLL_INT8, 2, z, TCOLL_HOST);
  T_OK(tcoll_reduce_scatter_shape(&tz, 0, 3, got));
  T_EXPECT(got[0] == 0 && got[1] == 5, "empty dim: got [%lld, %lld]", (long long)got[0],
           (long long)got[1]);
}
END_TEST

/* Even/odd subcommunicators and mesh slices. */
START_TEST(groups) {
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  tcoll_comm_t *sub = NULL;
  T_OK(tcoll_comm_split(NULL, t_rank % 2, t_rank, &sub));
  int ids[T_MAX_G], G = t_parity_members(ids);
  const tcoll_dtype_t dts[] = {TCOLL_UINT8, TCOLL_INT32, TCOLL_FLOAT16, TCOLL_FLOAT32, TCOLL_BOOL};
  int n = 0;
  for (size_t d = 0; d < T_LEN(dts); d++)
    for (int k = 0; k < K_NKINDS; k++) {
      int64_t shape[2] = {3, 2 * (int64_t)G};
      if (k_accepts(k, dts[d]))
        rs_case(rc_group(dts[d], k, 0.5, ids, G), kop(k, premul), sub, n % 2, 2, shape,
                (n % 2) ? 1 : -1);
      n++;
    }
  T_OK(tcoll_comm_free(&sub));
  int dims[2];
  t_mesh_dims(dims);
  tcoll_mesh_t *mesh = NULL;
  T_OK(tcoll_mesh_create(NULL, 2, dims, &mesh));
  for (int md = 0; mesh && md < 2; md++) {
    G = t_mesh_members(dims, md, ids);
    for (int k = 0; k < K_NKINDS; k++) {
      int64_t shape[2] = {2 * (int64_t)G, 5};
      tcoll_dtype_t d = k >= K_BAND && k <= K_BXOR ? TCOLL_INT16 : TCOLL_FLOAT64;
      rs_case(rc_group(d, k, 0.5, ids, G), kop(k, premul), tcoll_mesh_comm(mesh, md), k % 2, 2,
              shape, 0);
    }
  }
  if (mesh) T_OK(tcoll_mesh_free(&mesh));
  T_OK(tcoll_redop_destroy(premul));
}
END_TEST

/* ------------------------------------------------------------------ coalesced */

typedef struct co_spec {
  tcoll_dtype_t d;
  int ndim;
  int64_t shape[4]; /* shape[dim] is multiplied by G */
  int dim;
  bool alloc;
} co_spec_t;

/* The order in which the outputs of a coalesced call are waited. */
enum { FWD, REV, ODD_EVEN };
static int wait_index(int how, int n, int j) {
  if (how == REV) return n - 1 - j;
  if (how == ODD_EVEN) return j < n / 2 ? 2 * j + 1 : 2 * (j - n / 2);
  return j;
}

/* One reduce_scatter_coalesced of the specs (tensor t's values salted by 1000 * t), waited in
 * order `how`, checked. */
static void rsc_case(const co_spec_t *sp, int n, int k, tcoll_redop_t op, double s,
                     tcoll_comm_t *comm, const int *ids, int G, int how) {
  tcoll_tensor_t in[16], out[16];
  int dims[16];
  int64_t ishape[16][4], oshape[16][4];
  rc_t c[16];
  bool ok = true;
  for (int t = 0; t < n; t++) {
    int dn = sp[t].dim < 0 ? sp[t].dim + sp[t].ndim : sp[t].dim;
    memcpy(ishape[t], sp[t].shape, sizeof ishape[t]);
    ishape[t][dn] *= G;
    memcpy(oshape[t], sp[t].shape, sizeof oshape[t]);
    dims[t] = sp[t].dim;
    c[t] = rc_group(sp[t].d, k, s, ids, G);
    c[t].salt = 1000 * t;
    in[t] = t_alloc(sp[t].d, sp[t].ndim, ishape[t]);
    t_set_all(&in[t], rc_fill, &c[t]);
    out[t] = sp[t].alloc ? t_empty() : t_alloc(sp[t].d, sp[t].ndim, oshape[t]);
    ok = ok && k_accepts(k, sp[t].d);
  }
  if (!ok) {
    int bad = 0;
    while (k_accepts(k, sp[bad].d)) bad++;
    T_REFUSED(tcoll_reduce_scatter_coalesced(in, n, op, dims, comm, out), k, sp[bad].d);
    T_EXPECT(tcoll_pending_count() == 0, "refused coalesced call left %zu pending",
             tcoll_pending_count());
    for (int t = 0; t < n; t++)
      T_EXPECT(!sp[t].alloc || out[t].data == NULL, "refused coalesced call allocated out[%d]", t);
  } else {
    T_OK(tcoll_reduce_scatter_coalesced(in, n, op, dims, comm, out));
    T_EXPECT(tcoll_pending_count() == (size_t)n, "coalesced %s: %zu pending (expected %d)",
             kname(k), tcoll_pending_count(), n);
    for (int j = 0; j < n; j++) {
      int t = wait_index(how, n, j);
      T_OK(tcoll_wait(out[t].data));
      T_EXPECT(tcoll_pending_count() == (size_t)(n - j - 1),
               "coalesced: %zu pending after %d waits", tcoll_pending_count(), j + 1);
    }
    for (int t = 0; t < n; t++) {
      char what[160];
      snprintf(what, sizeof what, "reduce_scatter_coalesced %s out[%d] (%s, dim %d, G=%d)",
               kname(k), t, tcoll_dtype_name(sp[t].d), sp[t].dim, G);
      int dn = sp[t].dim < 0 ? sp[t].dim + sp[t].ndim : sp[t].dim;
      if (sp[t].alloc) t_expect_desc(what, &out[t], sp[t].d, sp[t].ndim, oshape[t], in[t].device);
      rc_t want = c[t];
      int q = 0;
      while (ids[q] != t_rank) q++;
      rc_scatter(&want, ishape[t], sp[t].ndim, dn, q);
      t_check_all(what, &out[t], rc_want, &want, 0);
    }
  }
  for (int t = 0; t < n; t++) {
    tcoll_tensor_free(&out[t]);
    tcoll_tensor_free(&in[t]);
  }
}

static const co_spec_t MIXED[] = {
    {TCOLL_FLOAT32, 2, {2, 3}, 0, false},     {TCOLL_INT32, 2, {3, 1}, -1, true},
    {TCOLL_FLOAT16, 3, {2, 2, 2}, 1, true},   {TCOLL_FLOAT32, 1, {1}, 0, true},
    {TCOLL_BFLOAT16, 2, {1, 1}, 0, false},    {TCOLL_INT32, 2, {0, 1}, 1, true},
    {TCOLL_FLOAT64, 3, {1, 2, 3}, -1, false}, {TCOLL_INT8, 1, {4}, 0, false},
    {TCOLL_BOOL, 2, {2, 2}, 1, true},
};
static const co_spec_t FLOATS[] = {
    {TCOLL_FLOAT32, 2, {2, 3}, 1, false},   {TCOLL_FLOAT16, 3, {2, 2, 2}, -3, true},
    {TCOLL_FLOAT64, 1, {5}, 0, true},       {TCOLL_BFLOAT16, 2, {3, 1}, -1, false},
    {TCOLL_FLOAT32, 3, {1, 0, 2}, 2, true}, {TCOLL_FLOAT32, 2, {4, 2}, 0, true},
};

START_TEST(coalesced) {
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  int ids[T_MAX_G], G = t_size;
  for (int r = 0; r < G; r++) ids[r] = r;
  int n = (int)T_LEN(MIXED), nf = (int)T_LEN(FLOATS);
  /* mixed dtypes: the ops that take every dtype */
  rsc_case(MIXED, n, K_SUM, TCOLL_SUM, 1, NULL, ids, G, FWD);
  rsc_case(MIXED, n, K_MAX, TCOLL_MAX, 1, NULL, ids, G, REV);
  rsc_case(MIXED, n, K_MIN, TCOLL_MIN, 1, NULL, ids, G, ODD_EVEN);
  rsc_case(MIXED, n, K_PROD, TCOLL_PRODUCT, 1, NULL, ids, G, REV);
  /* floats: AVG and premul_sum */
  rsc_case(FLOATS, nf, K_AVG, TCOLL_AVG, 1, NULL, ids, G, REV);
  rsc_case(FLOATS, nf, K_PREMUL, premul, 0.5, NULL, ids, G, FWD);
  /* integers and bool: bitwise */
  const co_spec_t ints[] = {{TCOLL_INT64, 1, {3}, 0, true},
                            {TCOLL_BOOL, 2, {4, 1}, 0, false},
                            {TCOLL_UINT8, 2, {2, 3}, -1, true},
                            {TCOLL_INT16, 1, {2}, 0, false}};
  for (int k = K_BAND; k <= K_BXOR; k++)
    rsc_case(ints, 4, k, k, 1, NULL, ids, G, k == K_BOR ? REV : FWD);
  /* refusals: AVG / premul_sum with an integer among the tensors, bitwise with a float */
  rsc_case(MIXED, n, K_AVG, TCOLL_AVG, 1, NULL, ids, G, FWD);
  rsc_case(MIXED, n, K_PREMUL, premul, 0.5, NULL, ids, G, FWD);
  rsc_case(MIXED, n, K_BXOR, TCOLL_BXOR, 1, NULL, ids, G, FWD);
  /* one tensor, and on a subcommunicator */
  rsc_case(FLOATS + 2, 1, K_SUM, TCOLL_SUM, 1, NULL, ids, G, FWD);
  tcoll_comm_t *sub = NULL;
  T_OK(tcoll_comm_split(NULL, t_rank % 2, t_rank, &sub));
  int sids[T_MAX_G], sG = t_parity_members(sids);
  rsc_case(MIXED, n, K_SUM, TCOLL_SUM, 1, sub, sids, sG, ODD_EVEN);
  rsc_case(FLOATS, nf, K_AVG, TCOLL_AVG, 1, sub, sids, sG, FWD);
  T_OK(tcoll_comm_free(&sub));
  T_OK(tcoll_redop_destroy(premul));
}
END_TEST

START_TEST(coalesced_refusals) {
  int G = t_size;
  int64_t a[2] = {2 * (int64_t)G, 3}, b[2] = {3, 2 * (int64_t)G + 1};
  tcoll_tensor_t in[2] = {t_alloc(TCOLL_FLOAT32, 2, a), t_alloc(TCOLL_FLOAT32, 2, b)},
                 out[2] = {t_empty(), t_empty()};
  int dims[2] = {0, 1};
  char msg[128];
  if (G > 1) {
    snprintf(msg, sizeof msg, "input dimension 1 (%d) must be a multiple of group_size %d",
             2 * G + 1, G);
    T_FAILS(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, dims, NULL, out),
            TCOLL_ERR_INVALID_ARGUMENT, msg);
    T_EXPECT(t_contains(tcoll_last_error(), "index 1"), "message does not name the tensor: %s",
             tcoll_last_error());
  }
  dims[1] = 2;
  T_FAILS(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, dims, NULL, out),
          TCOLL_ERR_INVALID_ARGUMENT, "scatter_dims[1]");
  T_FAILS(tcoll_reduce_scatter_coalesced(in, 2, TCOLL_SUM, NULL, NULL, out),
          TCOLL_ERR_INVALID_ARGUMENT, "scatter_dims");
  T_FAILS(tcoll_reduce_scatter_coalesced(in, -1, TCOLL_SUM, dims, NULL, out),
          TCOLL_ERR_INVALID_ARGUMENT, "n");
  T_EXPECT(out[0].data == NULL && out[1].data == NULL, "a refused call allocated outputs");
  T_EXPECT(tcoll_pending_count() == 0, "refused calls left %zu pending", tcoll_pending_count());
  T_OK(tcoll_reduce_scatter_coalesced(in, 0, TCOLL_SUM, dims, NULL, out)); /* nothing to do */
  T_EXPECT(tcoll_pending_count() == 0, "n == 0 left %zu pending", tcoll_pending_count());
  for (int i = 0; i < 2; i++) tcoll_tensor_free(&in[i]);
}
END_TEST

/* ------------------------------------------------------------------ list form */

/* ins[j] (shape, on every rank) is rank j's part: rank q gets the reduction of everyone's ins[q].
 */
static void rsl_case(tcoll_dtype_t d, int k, tcoll_redop_t op, double s, int ndim,
                     const int64_t *shape, bool alloc) {
  int G = t_size;
  char what[160];
  snprintf(what, sizeof what, "reduce_scatter_list %s %s %s", kname(k), tcoll_dtype_name(d),
           alloc ? "allocating" : "preallocated");
  rc_t c = rc_world(d, k, s);
  tcoll_tensor_t ins[T_MAX_G];
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) numel *= shape[i];
  for (int j = 0; j < G; j++) {
    ins[j] = t_alloc(d, ndim, shape);
    c.salt = j * numel;
    t_set_all(&ins[j], rc_fill, &c);
  }
  tcoll_tensor_t out = alloc ? t_empty() : t_alloc(d, ndim, shape);
  if (!k_accepts(k, d)) {
    T_REFUSED(tcoll_reduce_scatter_list(ins, op, NULL, &out), k, d);
  } else {
    T_OK(tcoll_reduce_scatter_list(ins, op, NULL, &out));
    T_EXPECT(tcoll_pending_count() == 1, "%s: %zu pending", what, tcoll_pending_count());
    T_OK(tcoll_wait(out.data));
    if (alloc) t_expect_desc(what, &out, d, ndim, shape, ins[0].device);
    c.salt = t_rank * numel;
    t_check_all(what, &out, rc_want, &c, 0);
  }
  T_EXPECT(tcoll_pending_count() == 0, "%s: %zu pending", what, tcoll_pending_count());
  tcoll_tensor_free(&out);
  for (int j = 0; j < G; j++) tcoll_tensor_free(&ins[j]);
}

START_TEST(list_form) {
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(2.0, &premul));
  int64_t shape[2] = {3, 2};
  int n = 0;
  for (int di = 0; di < TCOLL_NUM_DTYPES; di++)
    for (int k = 0; k < K_NKINDS; k++)
      rsl_case(ALL_DTYPES[di], k, kop(k, premul), 2.0, 2, shape, n++ % 2);
  rsl_case(TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, 0, NULL, true); /* 0-dim entries */
  int64_t z[1] = {0};
  rsl_case(TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, 1, z, true);
  T_OK(tcoll_redop_destroy(premul));
  if (t_size > 1) { /* entries of different shapes or dtypes are refused */
    tcoll_tensor_t ins[T_MAX_G], out = t_empty();
    int64_t other[2] = {2, 3};
    for (int j = 0; j < t_size; j++) ins[j] = t_alloc(TCOLL_FLOAT32, 2, j == 1 ? other : shape);
    T_FAILS(tcoll_reduce_scatter_list(ins, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
            "ins[1]");
    ins[1].shape[0] = 3;
    ins[1].shape[1] = 2;
    ins[1].dtype = TCOLL_INT32;
    T_FAILS(tcoll_reduce_scatter_list(ins, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
            "ins[1]");
    ins[1].dtype = TCOLL_FLOAT32;
    T_EXPECT(out.data == NULL && tcoll_pending_count() == 0,
             "a refused list call started something");
    for (int j = 0; j < t_size; j++) tcoll_tensor_free(&ins[j]);
  }
  tcoll_tensor_t out = t_empty();
  T_FAILS(tcoll_reduce_scatter_list(NULL, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "ins");
}
END_TEST

/* ------------------------------------------------------------------ large counts */

START_TEST(large_counts) {
  int64_t old = t_set_max_count(1000);
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  int G = t_size;
  /* per-rank blocks above the limit (per-root MPI_Ireduce), at and below it */
  int64_t s1[1] = {1503 * (int64_t)G}, s2[2] = {3, 601 * (int64_t)G}, s3[1] = {1001 * (int64_t)G},
          s4[2] = {2500 * (int64_t)G, 1}, s5[1] = {700 * (int64_t)G},
          s6[3] = {3, 2 * (int64_t)G, 677}, s7[1] = {1000 * (int64_t)G};
  rs_case(rc_world(TCOLL_FLOAT32, K_SUM, 1), TCOLL_SUM, NULL, false, 1, s1, 0);
  rs_case(rc_world(TCOLL_INT32, K_BXOR, 1), TCOLL_BXOR, NULL, true, 2, s2, 1);
  rs_case(rc_world(TCOLL_FLOAT16, K_AVG, 1), TCOLL_AVG, NULL, true, 1, s3, -1);
  rs_case(rc_world(TCOLL_BOOL, K_BAND, 1), TCOLL_BAND, NULL, false, 2, s4, 0);
  rs_case(rc_world(TCOLL_INT8, K_MAX, 1), TCOLL_MAX, NULL, false, 1, s5, 0);
  rs_case(rc_world(TCOLL_FLOAT64, K_PREMUL, 0.5), premul, NULL, true, 3, s6, -2);
  rs_case(rc_world(TCOLL_BFLOAT16, K_MIN, 1), TCOLL_MIN, NULL, false, 1, s7, 0);
  rs_case(rc_world(TCOLL_INT64, K_PROD, 1), TCOLL_PRODUCT, NULL, true, 2, s2, -1);
  /* coalesced: per-rank blocks of one dtype group above the limit */
  const co_spec_t big[] = {{TCOLL_FLOAT32, 1, {700}, 0, false},
                           {TCOLL_FLOAT32, 2, {5, 101}, 0, true},
                           {TCOLL_INT32, 2, {3, 401}, -1, true},
                           {TCOLL_FLOAT32, 2, {1, 3}, 1, false}};
  int ids[T_MAX_G];
  for (int r = 0; r < G; r++) ids[r] = r;
  rsc_case(big, 4, K_SUM, TCOLL_SUM, 1, NULL, ids, G, REV);
  rsc_case(big, 4, K_MAX, TCOLL_MAX, 1, NULL, ids, G, FWD);
  /* list: entries above the limit */
  int64_t s8[2] = {1201, 1}, s9[1] = {999};
  rsl_case(TCOLL_FLOAT32, K_AVG, TCOLL_AVG, 1, 2, s8, false);
  rsl_case(TCOLL_INT16, K_SUM, TCOLL_SUM, 1, 1, s9, true);
  T_OK(tcoll_redop_destroy(premul));
  t_set_max_count(old);
}
END_TEST

/* The smallest limits: one or two elements per MPI call (per-root MPI_Ireduce for every block
 * above them). */
START_TEST(tiny_limits) {
  int G = t_size, ids[T_MAX_G];
  for (int r = 0; r < G; r++) ids[r] = r;
  for (int64_t lim = 1; lim <= 2; lim++) {
    int64_t old = t_set_max_count(lim);
    int64_t s1[1] = {3 * (int64_t)G}, s2[2] = {2, 2 * (int64_t)G}, s3[1] = {(int64_t)G};
    rs_case(rc_world(TCOLL_INT32, K_SUM, 1), TCOLL_SUM, NULL, false, 1, s1, 0);
    rs_case(rc_world(TCOLL_FLOAT16, K_AVG, 1), TCOLL_AVG, NULL, true, 2, s2, 1);
    rs_case(rc_world(TCOLL_BOOL, K_MIN, 1), TCOLL_MIN, NULL, true, 1, s3, 0);
    const co_spec_t sp[] = {{TCOLL_FLOAT32, 1, {3}, 0, true},
                            {TCOLL_INT8, 2, {2, 1}, 1, false},
                            {TCOLL_FLOAT32, 2, {1, 2}, -1, false}};
    rsc_case(sp, 3, K_MAX, TCOLL_MAX, 1, NULL, ids, G, REV);
    int64_t s4[1] = {3};
    rsl_case(TCOLL_FLOAT64, K_SUM, TCOLL_SUM, 1, 1, s4, true);
    t_set_max_count(old);
  }
}
END_TEST

/* A dtype group whose tensors are all empty sits next to non-empty groups. */
START_TEST(coalesced_empty_group) {
  int G = t_size, ids[T_MAX_G];
  for (int r = 0; r < G; r++) ids[r] = r;
  const co_spec_t sp[] = {{TCOLL_INT16, 2, {0, 1}, 1, true},
                          {TCOLL_FLOAT32, 1, {2}, 0, false},
                          {TCOLL_INT16, 1, {0}, 0, false},
                          {TCOLL_FLOAT64, 2, {1, 0}, 0, true}};
  rsc_case(sp, 4, K_SUM, TCOLL_SUM, 1, NULL, ids, G, REV);
  const co_spec_t all_empty[] = {{TCOLL_FLOAT32, 1, {0}, 0, true},
                                 {TCOLL_INT32, 2, {2, 0}, 0, false}};
  rsc_case(all_empty, 2, K_MAX, TCOLL_MAX, 1, NULL, ids, G, FWD);
}
END_TEST

/* An output overlapping one of the list's inputs is refused. */
START_TEST(list_overlap) {
  int64_t shape[1] = {4};
  tcoll_tensor_t ins[T_MAX_G];
  for (int j = 0; j < t_size; j++) ins[j] = t_alloc(TCOLL_FLOAT32, 1, shape);
  tcoll_tensor_t out = ins[t_size - 1];
  char needle[32];
  snprintf(needle, sizeof needle, "ins[%d]", t_size - 1);
  T_FAILS(tcoll_reduce_scatter_list(ins, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "overlaps");
  T_EXPECT(t_contains(tcoll_last_error(), needle), "message does not name %s: %s", needle,
           tcoll_last_error());
  T_EXPECT(tcoll_pending_count() == 0, "refused call left %zu pending", tcoll_pending_count());
  for (int j = 0; j < t_size; j++) tcoll_tensor_free(&ins[j]);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("reduce_scatter");
  TCase *tc = t_tcase("reduce_scatter");
  tcase_add_test(tc, matrix_dim0);
  tcase_add_test(tc, every_dim);
  tcase_add_test(tc, large_other_dims);
  tcase_add_test(tc, large_pipelines_any_completion_order);
  tcase_add_test(tc, zero_size);
  tcase_add_test(tc, refusals);
  tcase_add_test(tc, shape_rule);
  tcase_add_test(tc, groups);
  tcase_add_test(tc, coalesced);
  tcase_add_test(tc, coalesced_refusals);
  tcase_add_test(tc, list_form);
  tcase_add_test(tc, large_counts);
  tcase_add_test(tc, tiny_limits);
  tcase_add_test(tc, coalesced_empty_group);
  tcase_add_test(tc, list_overlap);
  suite_add_tcase(s, tc);
  return s;
}
