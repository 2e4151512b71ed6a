/* all_reduce_coalesced: many tensors of mixed dtypes in one call, in place, allocating and
 * preallocated entries, AVG / premul_sum, each output waited on its own and in different orders,
 * refusals, subcommunicators and mesh slices, counts above the per-call limit. */
#include "reduce_common.h"

typedef struct spec {
  tcoll_dtype_t d;
  int ndim;
  int64_t shape[4];
  bool alloc; /* out-of-place calls: tcoll allocates this output */
} spec_t;

enum { FWD, REV, ODD_EVEN, MIDDLE_OUT, NORDERS };
static const char *const order_name[NORDERS] = {"forward", "reverse", "odd then even",
                                                "middle out"};
static int wait_index(int how, int n, int j) {
  switch (how) {
  case REV: return n - 1 - j;
  case ODD_EVEN: return j < n / 2 ? 2 * j + 1 : 2 * (j - n / 2);
  case MIDDLE_OUT: return j % 2 ? n / 2 - (j + 1) / 2 : n / 2 + j / 2; /* n/2, n/2-1, n/2+1, ... */
  default: return j;
  }
}

#define MAXN 80

/* One all_reduce_coalesced of the specs (tensor t salted by 1000 * t) over comm, checked. */
static void arc_case(const spec_t *sp, int n, int k, tcoll_redop_t op, double s, tcoll_comm_t *comm,
                     const int *ids, int G, bool inplace, int how) {
  static tcoll_tensor_t in[MAXN], out[MAXN];
  static rc_t c[MAXN];
  bool ok = true;
  for (int t = 0; t < n; t++) {
    c[t] = rc_group(sp[t].d, k, s, ids, G);
    c[t].salt = 1000 * t;
    in[t] = t_alloc(sp[t].d, sp[t].ndim, sp[t].shape);
    t_set_all(&in[t], rc_fill, &c[t]);
    out[t] = inplace ? in[t] : sp[t].alloc ? t_empty() : t_alloc(sp[t].d, sp[t].ndim, sp[t].shape);
    ok = ok && k_accepts(k, sp[t].d);
  }
  char what[200];
  if (!ok) {
    int bad = 0;
    while (k_accepts(k, sp[bad].d)) bad++;
    T_REFUSED(tcoll_all_reduce_coalesced(in, n, op, comm, out), k, sp[bad].d);
    T_EXPECT(tcoll_pending_count() == 0, "refused coalesced call left %zu pending",
             tcoll_pending_count());
    for (int t = 0; t < n; t++) {
      T_EXPECT(inplace || !sp[t].alloc || out[t].data == NULL,
               "refused coalesced call allocated out[%d]", t);
      snprintf(what, sizeof what, "refused all_reduce_coalesced %s: in[%d]", kname(k), t);
      t_check_all(what, &in[t], rc_orig, &c[t], 0);
    }
  } else {
    T_OK(tcoll_all_reduce_coalesced(in, n, op, comm, out));
    T_EXPECT(tcoll_pending_count() == (size_t)n,
             "all_reduce_coalesced %s: %zu pending (expected %d)", kname(k), tcoll_pending_count(),
             n);
    for (int j = 0; j < n; j++) {
      int t = wait_index(how, n, j);
      T_OK(tcoll_wait(out[t].data));
      T_EXPECT(tcoll_pending_count() == (size_t)(n - j - 1),
               "all_reduce_coalesced (%s waits): %zu pending after %d", order_name[how],
               tcoll_pending_count(), j + 1);
    }
    for (int t = 0; t < n; t++) {
      snprintf(what, sizeof what, "all_reduce_coalesced %s %s out[%d] (%s, G=%d)", kname(k),
               inplace       ? "in place"
               : sp[t].alloc ? "allocating"
                             : "preallocated",
               t, tcoll_dtype_name(sp[t].d), G);
      if (!inplace && sp[t].alloc)
        t_expect_desc(what, &out[t], sp[t].d, sp[t].ndim, sp[t].shape, in[t].device);
      t_check_all(what, &out[t], rc_want, &c[t], 0);
      if (!inplace) {
        snprintf(what, sizeof what, "all_reduce_coalesced %s: in[%d] (must be unchanged)", kname(k),
                 t);
        t_check_all(what, &in[t], rc_orig, &c[t], 0);
      }
    }
  }
  for (int t = 0; t < n; t++) {
    if (!inplace) tcoll_tensor_free(&out[t]);
    tcoll_tensor_free(&in[t]);
  }
}

/* Every dtype at least once, several twice, a 0-dim and a zero-size entry. */
static const spec_t MIXED[] = {
    {TCOLL_FLOAT32, 2, {2, 3}, false},  {TCOLL_INT32, 1, {5}, true},
    {TCOLL_BOOL, 2, {4, 4}, false},     {TCOLL_FLOAT16, 3, {1, 2, 3}, true},
    {TCOLL_INT8, 1, {7}, false},        {TCOLL_FLOAT32, 0, {0}, true},
    {TCOLL_BFLOAT16, 2, {3, 1}, false}, {TCOLL_UINT8, 1, {9}, true},
    {TCOLL_INT64, 2, {2, 2}, true},     {TCOLL_INT16, 1, {3}, false},
    {TCOLL_FLOAT64, 1, {6}, true},      {TCOLL_INT32, 2, {0, 3}, true},
    {TCOLL_FLOAT32, 1, {11}, true},     {TCOLL_BOOL, 1, {3}, true},
};
static const spec_t FLOATS[] = {
    {TCOLL_FLOAT32, 2, {2, 3}, false}, {TCOLL_FLOAT64, 1, {4}, true},
    {TCOLL_FLOAT16, 1, {5}, true},     {TCOLL_BFLOAT16, 2, {2, 2}, false},
    {TCOLL_FLOAT32, 0, {0}, true},     {TCOLL_FLOAT16, 3, {1, 1, 3}, false},
    {TCOLL_FLOAT32, 1, {0}, false},    {TCOLL_FLOAT64, 2, {3, 3}, true},
};
static const spec_t INTS[] = {
    {TCOLL_INT32, 1, {5}, true},   {TCOLL_BOOL, 2, {4, 4}, false}, {TCOLL_UINT8, 1, {6}, false},
    {TCOLL_INT8, 2, {2, 3}, true}, {TCOLL_INT64, 1, {4}, true},    {TCOLL_INT16, 0, {0}, false},
};

static void world_ids(int *ids) {
  for (int r = 0; r < t_size; r++) ids[r] = r;
}

/* Mixed dtypes in one call, with every op that takes them all; allocating and preallocated
 * outputs; waited in each order. */
START_TEST(mixed_dtypes) {
  int ids[T_MAX_G];
  world_ids(ids);
  int n = (int)T_LEN(MIXED);
  const int ks[] = {K_SUM, K_MAX, K_MIN, K_PROD};
  for (size_t k = 0; k < T_LEN(ks); k++)
    for (int how = 0; how < NORDERS; how++)
      arc_case(MIXED, n, ks[k], ks[k], 1, NULL, ids, t_size, false, how);
}
END_TEST

START_TEST(avg_premul_bitwise) {
  int ids[T_MAX_G];
  world_ids(ids);
  tcoll_redop_t half, twice;
  T_OK(tcoll_redop_create_premul_sum(0.5, &half));
  T_OK(tcoll_redop_create_premul_sum(2.0, &twice));
  int nf = (int)T_LEN(FLOATS), ni = (int)T_LEN(INTS);
  arc_case(FLOATS, nf, K_AVG, TCOLL_AVG, 1, NULL, ids, t_size, false, REV);
  arc_case(FLOATS, nf, K_PREMUL, half, 0.5, NULL, ids, t_size, false, MIDDLE_OUT);
  arc_case(FLOATS, nf, K_PREMUL, twice, 2.0, NULL, ids, t_size, false, FWD);
  for (int k = K_BAND; k <= K_BXOR; k++)
    arc_case(INTS, ni, k, k, 1, NULL, ids, t_size, false, k % NORDERS);
  /* the same on float / integer lists that also take every other op */
  arc_case(FLOATS, nf, K_PROD, TCOLL_PRODUCT, 1, NULL, ids, t_size, false, ODD_EVEN);
  arc_case(INTS, ni, K_SUM, TCOLL_SUM, 1, NULL, ids, t_size, false, REV);
  T_OK(tcoll_redop_destroy(half));
  T_OK(tcoll_redop_destroy(twice));
}
END_TEST

/* Every entry in place (out == in), each op kind. */
START_TEST(in_place) {
  int ids[T_MAX_G];
  world_ids(ids);
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.25, &premul));
  for (int k = 0; k < K_NKINDS; k++) {
    const spec_t *sp = k == K_AVG || k == K_PREMUL  ? FLOATS
                       : k >= K_BAND && k <= K_BXOR ? INTS
                                                    : MIXED;
    int n = sp == FLOATS ? (int)T_LEN(FLOATS) : sp == INTS ? (int)T_LEN(INTS) : (int)T_LEN(MIXED);
    arc_case(sp, n, k, kop(k, premul), 0.25, NULL, ids, t_size, true, k % NORDERS);
  }
  T_OK(tcoll_redop_destroy(premul));
}
END_TEST

/* 64 small tensors (the benchmark's shape), and one single tensor. */
START_TEST(many_tensors) {
  int ids[T_MAX_G];
  world_ids(ids);
  static spec_t many[64];
  for (int t = 0; t < 64; t++) {
    many[t].d = t % 5 == 4 ? TCOLL_INT32 : TCOLL_FLOAT32;
    many[t].ndim = 1;
    many[t].shape[0] = 1 + (t * 37) % 64;
    many[t].alloc = t % 3 == 0;
  }
  arc_case(many, 64, K_SUM, TCOLL_SUM, 1, NULL, ids, t_size, false, ODD_EVEN);
  arc_case(many, 64, K_MAX, TCOLL_MAX, 1, NULL, ids, t_size, true, MIDDLE_OUT);
  arc_case(MIXED + 12, 1, K_SUM, TCOLL_SUM, 1, NULL, ids, t_size, false, FWD);
  arc_case(MIXED + 12, 1, K_MIN, TCOLL_MIN, 1, NULL, ids, t_size, true, FWD);
}
END_TEST

/* Refused op / dtype combinations, bad entries, n == 0, BUSY: nothing started, nothing leaked. */
START_TEST(refusals) {
  int ids[T_MAX_G];
  world_ids(ids);
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  int n = (int)T_LEN(MIXED);
  arc_case(MIXED, n, K_AVG, TCOLL_AVG, 1, NULL, ids, t_size, false, FWD);
  arc_case(MIXED, n, K_PREMUL, premul, 0.5, NULL, ids, t_size, true, FWD);
  arc_case(MIXED, n, K_BAND, TCOLL_BAND, 1, NULL, ids, t_size, false, FWD);
  arc_case(FLOATS, (int)T_LEN(FLOATS), K_BXOR, TCOLL_BXOR, 1, NULL, ids, t_size, false, FWD);
  arc_case(INTS, (int)T_LEN(INTS), K_AVG, TCOLL_AVG, 1, NULL, ids, t_size, true, FWD);
  T_OK(tcoll_redop_destroy(premul));

  int64_t s4[1] = {4}, s3[1] = {3};
  tcoll_tensor_t in[3] = {t_alloc(TCOLL_FLOAT32, 1, s4), t_alloc(TCOLL_INT32, 1, s4),
                          t_alloc(TCOLL_FLOAT32, 1, s4)};
  tcoll_tensor_t out[3] = {t_empty(), t_alloc(TCOLL_INT32, 1, s3), t_empty()};
  T_FAILS(tcoll_all_reduce_coalesced(in, 3, TCOLL_SUM, NULL, out), TCOLL_ERR_INVALID_ARGUMENT,
          "out[1]->shape");
  tcoll_tensor_free(&out[1]);
  out[1] = t_alloc(TCOLL_INT32, 1, s4);
  tcoll_tensor_t keep = out[2];
  out[2] = in[0]; /* writes over another entry's input */
  T_FAILS(tcoll_all_reduce_coalesced(in, 3, TCOLL_SUM, NULL, out), TCOLL_ERR_INVALID_ARGUMENT,
          "overlaps");
  out[2] = keep;
  T_FAILS(tcoll_all_reduce_coalesced(in, -1, TCOLL_SUM, NULL, out), TCOLL_ERR_INVALID_ARGUMENT,
          "n is -1");
  T_FAILS(tcoll_all_reduce_coalesced(NULL, 2, TCOLL_SUM, NULL, out), TCOLL_ERR_INVALID_ARGUMENT,
          "in");
  T_FAILS(tcoll_all_reduce_coalesced(in, 2, 77, NULL, out), TCOLL_ERR_INVALID_ARGUMENT, "77");
  T_EXPECT(out[0].data == NULL && out[2].data == NULL, "refused calls allocated outputs");
  T_EXPECT(tcoll_pending_count() == 0, "refused calls left %zu pending", tcoll_pending_count());
  /* two entries writing the same output buffer */
  tcoll_tensor_t dup_out[2] = {t_alloc(TCOLL_FLOAT32, 1, s4), t_empty()};
  dup_out[1] = dup_out[0];
  tcoll_tensor_t dup_in[2] = {in[0], in[2]};
  int rc = tcoll_all_reduce_coalesced(dup_in, 2, TCOLL_SUM, NULL, dup_out);
  T_EXPECT(rc == TCOLL_ERR_INVALID_ARGUMENT && t_contains(tcoll_last_error(), "overlaps"),
           "two entries with one output buffer: %s: %s", tcoll_status_string(rc),
           tcoll_last_error());
  T_EXPECT(tcoll_pending_count() == 0, "refused call left %zu pending", tcoll_pending_count());
  tcoll_tensor_free(&dup_out[0]);
  /* n == 0 is a no-op */
  T_OK(tcoll_all_reduce_coalesced(NULL, 0, TCOLL_SUM, NULL, NULL));
  T_EXPECT(tcoll_pending_count() == 0, "n == 0 left %zu pending", tcoll_pending_count());
  /* BUSY: one output still pending from an earlier call; the refused call registers nothing
   * and frees what it allocated */
  T_OK(tcoll_all_reduce(&in[1], TCOLL_SUM, NULL, &out[1]));
  T_FAILS(tcoll_all_reduce_coalesced(in, 3, TCOLL_SUM, NULL, out), TCOLL_ERR_BUSY, "pending");
  T_EXPECT(tcoll_pending_count() == 1, "%zu pending after a BUSY refusal (expected 1)",
           tcoll_pending_count());
  T_EXPECT(out[0].data == NULL && out[2].data == NULL, "BUSY refusal left allocated outputs");
  T_OK(tcoll_wait(out[1].data));
  if (in[0].device != TCOLL_HOST) { /* entries on different devices */
    tcoll_tensor_t mixed[2] = {in[0], t_host(TCOLL_FLOAT32, 1, s4)}, mo[2] = {t_empty(), t_empty()};
    T_FAILS(tcoll_all_reduce_coalesced(mixed, 2, TCOLL_SUM, NULL, mo), TCOLL_ERR_INVALID_ARGUMENT,
            "in[1]->device");
    tcoll_tensor_free(&mixed[1]);
  }
  /* the library is still usable: the same call goes through now */
  T_OK(tcoll_all_reduce_coalesced(in, 3, TCOLL_SUM, NULL, out));
  T_OK(tcoll_wait_all());
  for (int i = 0; i < 3; i++) {
    tcoll_tensor_free(&out[i]);
    tcoll_tensor_free(&in[i]);
  }
}
END_TEST

/* Even/odd subcommunicators and mesh slices. */
START_TEST(groups) {
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(2.0, &premul));
  tcoll_comm_t *sub = NULL;
  T_OK(tcoll_comm_split(NULL, t_rank % 2, t_rank, &sub));
  int ids[T_MAX_G], G = t_parity_members(ids);
  arc_case(MIXED, (int)T_LEN(MIXED), K_SUM, TCOLL_SUM, 1, sub, ids, G, false, REV);
  arc_case(FLOATS, (int)T_LEN(FLOATS), K_AVG, TCOLL_AVG, 1, sub, ids, G, true, ODD_EVEN);
  arc_case(INTS, (int)T_LEN(INTS), K_BXOR, TCOLL_BXOR, 1, sub, ids, G, false, FWD);
  T_OK(tcoll_comm_free(&sub));
  int dims[2];
  t_mesh_dims(dims);
  tcoll_mesh_t *mesh = NULL;
  T_OK(tcoll_mesh_create(NULL, 2, dims, &mesh));
  for (int md = 0; mesh && md < 2; md++) {
    G = t_mesh_members(dims, md, ids);
    tcoll_comm_t *slice = tcoll_mesh_comm(mesh, md);
    arc_case(MIXED, (int)T_LEN(MIXED), K_MAX, TCOLL_MAX, 1, slice, ids, G, false, MIDDLE_OUT);
    arc_case(FLOATS, (int)T_LEN(FLOATS), K_PREMUL, premul, 2.0, slice, ids, G, false, REV);
  }
  if (mesh) T_OK(tcoll_mesh_free(&mesh));
  T_OK(tcoll_redop_destroy(premul));
}
END_TEST

/* Several thousand elements per dtype group with a per-call limit of 1000: chunked calls on
 * the packed buffer. */
START_TEST(large_counts) {
  int64_t old = t_set_max_count(1000);
  int ids[T_MAX_G];
  world_ids(ids);
  const spec_t big[] = {
      {TCOLL_FLOAT32, 1, {1201}, false},  {TCOLL_INT32, 2, {3, 777}, true},
      {TCOLL_FLOAT32, 2, {999, 2}, true}, {TCOLL_FLOAT16, 1, {2501}, false},
      {TCOLL_INT32, 1, {1}, false},       {TCOLL_FLOAT32, 1, {1000}, true},
      {TCOLL_BOOL, 1, {1003}, true},      {TCOLL_FLOAT64, 3, {7, 11, 13}, false},
  };
  const spec_t fbig[] = {{TCOLL_FLOAT32, 1, {3001}, true},
                         {TCOLL_BFLOAT16, 2, {2, 1001}, false},
                         {TCOLL_FLOAT16, 1, {999}, true},
                         {TCOLL_FLOAT32, 1, {5}, false}};
  int n = (int)T_LEN(big);
  arc_case(big, n, K_SUM, TCOLL_SUM, 1, NULL, ids, t_size, false, REV);
  arc_case(big, n, K_MIN, TCOLL_MIN, 1, NULL, ids, t_size, true, ODD_EVEN);
  arc_case(fbig, 4, K_AVG, TCOLL_AVG, 1, NULL, ids, t_size, false, MIDDLE_OUT);
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  arc_case(fbig, 4, K_PREMUL, premul, 0.5, NULL, ids, t_size, true, FWD);
  T_OK(tcoll_redop_destroy(premul));
  t_set_max_count(old);
}
END_TEST

/* Dtype groups that are empty, and the smallest per-call limits. */
START_TEST(empty_groups_tiny_limits) {
  int ids[T_MAX_G];
  world_ids(ids);
  const spec_t sp[] = {{TCOLL_FLOAT32, 1, {3}, true},
                       {TCOLL_INT16, 1, {0}, false},
                       {TCOLL_FLOAT32, 2, {2, 2}, false},
                       {TCOLL_INT16, 2, {0, 5}, true},
                       {TCOLL_BOOL, 1, {0}, true}};
  arc_case(sp, 5, K_SUM, TCOLL_SUM, 1, NULL, ids, t_size, false, MIDDLE_OUT);
  arc_case(sp + 1, 1, K_MAX, TCOLL_MAX, 1, NULL, ids, t_size, false, FWD);
  for (int64_t lim = 1; lim <= 2; lim++) {
    int64_t old = t_set_max_count(lim);
    arc_case(sp, 5, K_MIN, TCOLL_MIN, 1, NULL, ids, t_size, true, REV);
    arc_case(INTS, (int)T_LEN(INTS), K_BOR, TCOLL_BOR, 1, NULL, ids, t_size, false, ODD_EVEN);
    arc_case(FLOATS, (int)T_LEN(FLOATS), K_AVG, TCOLL_AVG, 1, NULL, ids, t_size, false, FWD);
    t_set_max_count(old);
  }
}
END_TEST

/* Outputs of one coalesced call used (pending) as inputs of the next: each is waited first. */
START_TEST(chained) {
  int G = t_size;
  int64_t s1[1] = {5}, s2[2] = {2, 3};
  rc_t c0 = rc_world(TCOLL_FLOAT32, K_SUM, 1), c1 = rc_world(TCOLL_INT64, K_SUM, 1);
  c1.salt = 1000;
  tcoll_tensor_t in[2] = {t_alloc(TCOLL_FLOAT32, 1, s1), t_alloc(TCOLL_INT64, 2, s2)};
  t_set_all(&in[0], rc_fill, &c0);
  t_set_all(&in[1], rc_fill, &c1);
  tcoll_tensor_t mid[2] = {t_empty(), t_empty()},
                 out[2] = {t_alloc(TCOLL_FLOAT32, 1, s1), t_empty()};
  T_OK(tcoll_all_reduce_coalesced(in, 2, TCOLL_SUM, NULL, mid));
  T_OK(tcoll_all_reduce_coalesced(mid, 2, TCOLL_SUM, NULL, out));
  T_EXPECT(tcoll_pending_count() == 2, "%zu pending (expected the two final outputs)",
           tcoll_pending_count());
  T_OK(tcoll_wait(out[1].data));
  T_OK(tcoll_wait(out[0].data));
  for (int t = 0; t < 2; t++) {
    rc_t *c = t ? &c1 : &c0;
    double got[6];
    t_read(&out[t], got);
    for (int64_t i = 0; i < tcoll_tensor_numel(&out[t]); i++) {
      double want = G * rref(c->d, K_SUM, 1, c->salt + i, c->ids, G);
      T_EXPECT(got[i] == want, "chained coalesced out[%d][%lld] = %g, expected %g", t, (long long)i,
               got[i], want);
    }
  }
  for (int t = 0; t < 2; t++) {
    tcoll_tensor_free(&in[t]);
    tcoll_tensor_free(&mid[t]);
    tcoll_tensor_free(&out[t]);
  }
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("coalesced_reduce");
  TCase *tc = t_tcase("coalesced_reduce");
  tcase_add_test(tc, mixed_dtypes);
  tcase_add_test(tc, avg_premul_bitwise);
  tcase_add_test(tc, in_place);
  tcase_add_test(tc, many_tensors);
  tcase_add_test(tc, refusals);
  tcase_add_test(tc, groups);
  tcase_add_test(tc, large_counts);
  tcase_add_test(tc, empty_groups_tiny_limits);
  tcase_add_test(tc, chained);
  suite_add_tcase(s, tc);
  return s;
}
