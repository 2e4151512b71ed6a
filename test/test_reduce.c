/* reduce: the result lands on dst only, other ranks' outputs stay as they were. Every dtype x
 * op, every dst, in place, allocating, shapes, subcommunicators and mesh slices, refusals,
 * pending-ness and counts above the per-call limit. */
#include "reduce_common.h"

enum { V_PREALLOC, V_INPLACE, V_ALLOC, V_COUNT };
static const char *const vname[V_COUNT] = {"preallocated", "in place", "allocating"};

/* What a preallocated output holds before the call: values no reduction here produces. */
static double sentinel(int64_t i, void *p) {
  tcoll_dtype_t d = *(const tcoll_dtype_t *)p;
  return d == TCOLL_BOOL ? (double)((i + 1) % 2) : (double)(97 + i % 3);
}

static int local_rank(const rc_t *c) {
  for (int r = 0; r < c->G; r++)
    if (c->ids[r] == t_rank) return r;
  return -1;
}

/* One reduce to dst (a rank of comm) of c's data, checked on every rank. */
static void rd_case(rc_t c, tcoll_redop_t op, tcoll_comm_t *comm, int dst, int variant, int ndim,
                    const int64_t *shape) {
  char what[200], whatin[220];
  int me = local_rank(&c);
  snprintf(what, sizeof what, "reduce %s %s to %d %s G=%d (local rank %d)", kname(c.k),
           tcoll_dtype_name(c.d), dst, vname[variant], c.G, me);
  snprintf(whatin, sizeof whatin, "%s: input", what);
  tcoll_tensor_t in = t_alloc(c.d, ndim, shape);
  t_set_all(&in, rc_fill, &c);
  tcoll_tensor_t out = variant == V_PREALLOC  ? t_alloc(c.d, ndim, shape)
                       : variant == V_INPLACE ? in
                                              : t_empty();
  if (variant == V_PREALLOC) t_set_all(&out, sentinel, &c.d);
  if (!k_accepts(c.k, c.d)) {
    T_REFUSED(tcoll_reduce(&in, dst, op, comm, &out), c.k, c.d);
    T_EXPECT(tcoll_pending_count() == 0, "%s: refused call left %zu pending", what,
             tcoll_pending_count());
    if (variant == V_ALLOC)
      T_EXPECT(out.data == NULL, "%s: refused call allocated the output", what);
  } else {
    T_OK(tcoll_reduce(&in, dst, op, comm, &out));
    T_EXPECT(tcoll_pending_count() == 1, "%s: %zu pending (expected the output)", what,
             tcoll_pending_count());
    T_OK(tcoll_wait(out.data));
    T_EXPECT(tcoll_pending_count() == 0, "%s: %zu pending after the wait", what,
             tcoll_pending_count());
    if (variant == V_ALLOC) t_expect_desc(what, &out, c.d, ndim, shape, in.device);
    if (me == dst) {
      t_check_all(what, &out, rc_want, &c, 0);
    } else if (variant == V_PREALLOC) {
      char w2[240];
      snprintf(w2, sizeof w2, "%s: non-dst output (must be unchanged)", what);
      t_check_all(w2, &out, sentinel, &c.d, 0);
    }
  }
  if (variant != V_INPLACE || me != dst || !k_accepts(c.k, c.d))
    t_check_all(whatin, &in, rc_orig, &c, 0);
  if (variant != V_INPLACE) tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}

/* Every dtype x every op kind, one dst per variant. */
START_TEST(matrix) {
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  int64_t shape[2] = {4, 5};
  for (int di = 0; di < TCOLL_NUM_DTYPES; di++)
    for (int k = 0; k < K_NKINDS; k++)
      for (int v = 0; v < V_COUNT; v++)
        rd_case(rc_world(ALL_DTYPES[di], k, 0.5), kop(k, premul), NULL, (t_size - 1 + v) % t_size,
                v, 2, shape);
  T_OK(tcoll_redop_destroy(premul));
}
END_TEST

/* Every dst, with each variant. */
START_TEST(every_dst) {
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(2.0, &premul));
  const tcoll_dtype_t dts[] = {TCOLL_FLOAT32, TCOLL_INT32,   TCOLL_BFLOAT16,
                               TCOLL_BOOL,    TCOLL_FLOAT64, TCOLL_UINT8};
  const int ks[] = {K_SUM, K_AVG, K_MAX, K_PREMUL, K_PROD, K_BOR, K_MIN};
  int64_t shape[1] = {18};
  for (int dst = 0; dst < t_size; dst++)
    for (size_t d = 0; d < T_LEN(dts); d++)
      for (size_t k = 0; k < T_LEN(ks); k++)
        if (k_accepts(ks[k], dts[d]))
          rd_case(rc_world(dts[d], ks[k], 2.0), kop(ks[k], premul), NULL, dst,
                  (int)((d + k + (size_t)dst) % V_COUNT), 1, shape);
  T_OK(tcoll_redop_destroy(premul));
}
END_TEST

/* In place on every dst: dst's input becomes the result, the other inputs stay. */
START_TEST(in_place_every_dst) {
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.25, &premul));
  int64_t shape[3] = {2, 1, 7};
  const tcoll_dtype_t dts[] = {TCOLL_FLOAT64, TCOLL_INT16, TCOLL_FLOAT16};
  for (int dst = 0; dst < t_size; dst++)
    for (size_t d = 0; d < T_LEN(dts); d++)
      for (int k = 0; k < K_NKINDS; k++)
        if (k_accepts(k, dts[d]))
          rd_case(rc_world(dts[d], k, 0.25), kop(k, premul), NULL, dst, V_INPLACE, 3, shape);
  T_OK(tcoll_redop_destroy(premul));
}
END_TEST

/* 0-dim, 8-dim and zero-size tensors. */
START_TEST(shapes) {
  static const int64_t s8[8] = {1, 2, 1, 1, 3, 1, 2, 1}, z[2] = {4, 0};
  const struct {
    int ndim;
    const int64_t *shape;
  } cases[] = {{0, NULL}, {8, s8}, {2, z}};
  const tcoll_dtype_t dts[] = {TCOLL_INT64, TCOLL_FLOAT32, TCOLL_BOOL};
  const int ks[] = {K_SUM, K_AVG, K_MIN};
  for (size_t s = 0; s < T_LEN(cases); s++)
    for (size_t d = 0; d < T_LEN(dts); d++)
      for (size_t k = 0; k < T_LEN(ks); k++)
        if (k_accepts(ks[k], dts[d]))
          rd_case(rc_world(dts[d], ks[k], 1), ks[k], NULL, (int)(s + d + k) % t_size,
                  (int)(s + d + k) % V_COUNT, cases[s].ndim, cases[s].shape);
}
END_TEST

/* Even/odd subcommunicators and mesh slices, every dst of each group. */
START_TEST(groups) {
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  tcoll_comm_t *sub = NULL;
  T_OK(tcoll_comm_split(NULL, t_rank % 2, t_rank, &sub));
  int ids[T_MAX_G], G = t_parity_members(ids);
  int64_t shape[2] = {3, 3};
  int n = 0;
  for (int dst = 0; dst < G; dst++)
    for (int k = 0; k < K_NKINDS; k++) {
      tcoll_dtype_t d = k >= K_BAND && k <= K_BXOR ? TCOLL_INT8 : TCOLL_FLOAT32;
      rd_case(rc_group(d, k, 0.5, ids, G), kop(k, premul), sub, dst, n++ % V_COUNT, 2, shape);
    }
  /* dst is a rank of the group, not of world */
  char msg[64];
  snprintf(msg, sizeof msg, "dst is %d", G);
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 2, shape), out = t_empty();
  T_FAILS(tcoll_reduce(&in, G, TCOLL_SUM, sub, &out), TCOLL_ERR_INVALID_ARGUMENT, msg);
  tcoll_tensor_free(&in);
  T_OK(tcoll_comm_free(&sub));
  int dims[2];
  t_mesh_dims(dims);
  tcoll_mesh_t *mesh = NULL;
  T_OK(tcoll_mesh_create(NULL, 2, dims, &mesh));
  for (int md = 0; mesh && md < 2; md++) {
    G = t_mesh_members(dims, md, ids);
    for (int dst = 0; dst < G; dst++)
      for (int k = 0; k < K_NKINDS; k++) {
        tcoll_dtype_t d = k >= K_BAND && k <= K_BXOR ? TCOLL_INT64 : TCOLL_BFLOAT16;
        rd_case(rc_group(d, k, 0.5, ids, G), kop(k, premul), tcoll_mesh_comm(mesh, md), dst,
                n++ % V_COUNT, 2, shape);
      }
  }
  if (mesh) T_OK(tcoll_mesh_free(&mesh));
  T_OK(tcoll_redop_destroy(premul));
}
END_TEST

START_TEST(refusals) {
  int64_t shape[1] = {6}, other[1] = {5};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_empty();
  char msg[64];
  T_FAILS(tcoll_reduce(&in, -1, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "dst is -1");
  snprintf(msg, sizeof msg, "dst is %d", t_size);
  T_FAILS(tcoll_reduce(&in, t_size, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, msg);
  T_FAILS(tcoll_reduce(&in, 0, 1234, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "1234");
  T_FAILS(tcoll_reduce(&in, 0, TCOLL_BXOR, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "bxor");
  T_FAILS(tcoll_reduce(NULL, 0, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "in");
  tcoll_tensor_t wrong = t_alloc(TCOLL_FLOAT32, 1, other);
  T_FAILS(tcoll_reduce(&in, 0, TCOLL_SUM, NULL, &wrong), TCOLL_ERR_INVALID_ARGUMENT, "out->shape");
  tcoll_tensor_free(&wrong);
  wrong = t_alloc(TCOLL_INT32, 1, shape);
  T_FAILS(tcoll_reduce(&in, 0, TCOLL_SUM, NULL, &wrong), TCOLL_ERR_INVALID_ARGUMENT, "out->dtype");
  tcoll_tensor_free(&wrong);
  T_EXPECT(out.data == NULL, "a refused call allocated the output");
  T_EXPECT(tcoll_pending_count() == 0, "refused calls left %zu pending", tcoll_pending_count());
  tcoll_tensor_free(&in);
}
END_TEST

/* The output is pending on every rank (dst or not) until waited; a pending output is refused. */
START_TEST(pending) {
  int64_t shape[1] = {9};
  rc_t c = rc_world(TCOLL_INT32, K_SUM, 1);
  /* out: zero-filled by tcoll_tensor_alloc, left so on the ranks other than dst */
  tcoll_tensor_t in = t_alloc(TCOLL_INT32, 1, shape), out = t_alloc(TCOLL_INT32, 1, shape),
                 out2 = t_empty();
  t_set_all(&in, rc_fill, &c);
  T_OK(tcoll_reduce(&in, 0, TCOLL_SUM, NULL, &out));
  T_EXPECT(tcoll_pending_count() == 1, "%zu pending", tcoll_pending_count());
  T_FAILS(tcoll_reduce(&in, 0, TCOLL_MAX, NULL, &out), TCOLL_ERR_BUSY, "pending");
  /* the result used as an input is waited for first: reduce again to the last rank */
  T_OK(tcoll_reduce(&out, t_size - 1, TCOLL_MAX, NULL, &out2));
  T_EXPECT(tcoll_pending_count() == 1, "%zu pending (expected out2 only)", tcoll_pending_count());
  T_OK(tcoll_wait_tensor(&out2));
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending", tcoll_pending_count());
  if (t_rank == 0) t_check_all("reduce to 0", &out, rc_want, &c, 0);
  if (t_rank == t_size - 1) {
    /* max over ranks of out: rank 0 holds the sum, the others zeros */
    double got[9];
    t_read(&out2, got);
    for (int i = 0; i < 9; i++) {
      double s = rref(TCOLL_INT32, K_SUM, 1, i, c.ids, t_size), want = t_size == 1 ? s : fmax(s, 0);
      T_EXPECT(got[i] == want, "chained reduce: element %d is %g, expected %g", i, got[i], want);
    }
  }
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&out2);
  tcoll_tensor_free(&in);
}
END_TEST

/* Counts above the per-call limit: several MPI_Ireduce calls on consecutive pieces. */
START_TEST(large_counts) {
  int64_t old = t_set_max_count(1000);
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  const struct {
    tcoll_dtype_t d;
    int k;
    int64_t n;
    int variant;
  } cases[] = {
      {TCOLL_FLOAT32, K_SUM, 3001, V_PREALLOC},    {TCOLL_FLOAT16, K_AVG, 2999, V_INPLACE},
      {TCOLL_FLOAT64, K_PREMUL, 4001, V_ALLOC},    {TCOLL_INT8, K_BXOR, 1001, V_PREALLOC},
      {TCOLL_BOOL, K_BAND, 2000, V_INPLACE},       {TCOLL_INT32, K_PROD, 1000, V_ALLOC},
      {TCOLL_BFLOAT16, K_PREMUL, 2500, V_INPLACE},
  };
  for (size_t i = 0; i < T_LEN(cases); i++) {
    int64_t shape[1] = {cases[i].n};
    rd_case(rc_world(cases[i].d, cases[i].k, 0.5), kop(cases[i].k, premul), NULL, (int)i % t_size,
            cases[i].variant, 1, shape);
  }
  T_OK(tcoll_redop_destroy(premul));
  t_set_max_count(old);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("reduce");
  TCase *tc = t_tcase("reduce");
  tcase_add_test(tc, matrix);
  tcase_add_test(tc, every_dst);
  tcase_add_test(tc, in_place_every_dst);
  tcase_add_test(tc, shapes);
  tcase_add_test(tc, groups);
  tcase_add_test(tc, refusals);
  tcase_add_test(tc, pending);
  tcase_add_test(tc, large_counts);
  suite_add_tcase(s, tc);
  return s;
}
