/* all_reduce: every dtype x every reduce op (accepted or refused), out of place, in place and
 * allocating; shapes (0-dim, 8-dim, zero-size); subcommunicators and mesh slices; integer
 * wraparound; bad arguments; pending-ness; counts above the per-call limit. */
#include "reduce_common.h"

enum { V_PREALLOC, V_INPLACE, V_ALLOC, V_COUNT };
static const char *const vname[V_COUNT] = {"preallocated", "in place", "allocating"};

/* One all_reduce of c's data over comm (c describes the group), checked. */
static void ar_case(rc_t c, tcoll_redop_t op, tcoll_comm_t *comm, int variant, int ndim,
                    const int64_t *shape) {
  char what[200], whatin[220];
  snprintf(what, sizeof what, "all_reduce %s %s %s G=%d ndim=%d", kname(c.k), tcoll_dtype_name(c.d),
           vname[variant], c.G, ndim);
  snprintf(whatin, sizeof whatin, "%s: input", what);
  tcoll_tensor_t in = t_alloc(c.d, ndim, shape);
  t_set_all(&in, rc_fill, &c);
  tcoll_tensor_t out = variant == V_PREALLOC  ? t_alloc(c.d, ndim, shape)
                       : variant == V_INPLACE ? in
                                              : t_empty();
  size_t before = tcoll_pending_count();
  if (!k_accepts(c.k, c.d)) {
    T_REFUSED(tcoll_all_reduce(&in, op, comm, &out), c.k, c.d);
    T_EXPECT(tcoll_pending_count() == before, "%s: refused call left %zu pending", what,
             tcoll_pending_count());
    if (variant == V_ALLOC)
      T_EXPECT(out.data == NULL, "%s: refused call allocated an output", what);
    t_check_all(whatin, &in, rc_orig, &c, 0);
  } else {
    T_OK(tcoll_all_reduce(&in, op, comm, &out));
    T_EXPECT(tcoll_pending_count() == before + 1, "%s: %zu pending after the call (expected %zu)",
             what, tcoll_pending_count(), before + 1);
    T_OK(tcoll_wait(out.data));
    T_EXPECT(tcoll_pending_count() == before, "%s: %zu pending after the wait", what,
             tcoll_pending_count());
    if (variant == V_ALLOC) t_expect_desc(what, &out, c.d, ndim, shape, in.device);
    t_check_all(what, &out, rc_want, &c, 0);
    if (variant == V_PREALLOC) t_check_all(whatin, &in, rc_orig, &c, 0);
  }
  if (variant != V_INPLACE) tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}

/* Every dtype x every op kind on world, one variant. */
static void matrix(int variant, double scalar, int ndim, const int64_t *shape) {
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(scalar, &premul));
  for (int di = 0; di < TCOLL_NUM_DTYPES; di++)
    for (int k = 0; k < K_NKINDS; k++)
      ar_case(rc_world(ALL_DTYPES[di], k, scalar), kop(k, premul), NULL, variant, ndim, shape);
  T_OK(tcoll_redop_destroy(premul));
}

START_TEST(matrix_preallocated) {
  int64_t shape[2] = {3, 7};
  matrix(V_PREALLOC, 0.5, 2, shape);
}
END_TEST

START_TEST(matrix_in_place) {
  int64_t shape[1] = {17};
  matrix(V_INPLACE, 2.0, 1, shape);
}
END_TEST

START_TEST(matrix_allocating) {
  int64_t shape[3] = {2, 2, 5};
  matrix(V_ALLOC, 0.25, 3, shape);
}
END_TEST

/* 0-dim scalars, many dims, size-1 dims, zero-size tensors. */
START_TEST(shapes) {
  static const int64_t s8[8] = {1, 2, 1, 2, 1, 3, 1, 1}, s4[4] = {1, 1, 5, 1}, z1[1] = {0},
                       z3[3] = {3, 0, 2};
  const struct {
    int ndim;
    const int64_t *shape;
  } cases[] = {{0, NULL}, {8, s8}, {4, s4}, {1, z1}, {3, z3}};
  const tcoll_dtype_t dts[] = {TCOLL_BOOL, TCOLL_INT64, TCOLL_FLOAT16, TCOLL_FLOAT32};
  const int ks[] = {K_SUM, K_MAX, K_AVG, K_BXOR};
  for (size_t s = 0; s < T_LEN(cases); s++)
    for (size_t d = 0; d < T_LEN(dts); d++)
      for (size_t k = 0; k < T_LEN(ks); k++)
        if (k_accepts(ks[k], dts[d]))
          ar_case(rc_world(dts[d], ks[k], 1), ks[k], NULL, (int)((s + d + k) % V_COUNT),
                  cases[s].ndim, cases[s].shape);
}
END_TEST

/* A zero-size input with no storage at all (data NULL): allowed, the output is still allocated
 * and registered. */
START_TEST(zero_size_null_data) {
  int64_t shape[2] = {0, 4};
  tcoll_tensor_t in = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 2, shape, t_device()), out = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_EXPECT(tcoll_pending_count() == 1, "%zu pending (expected the allocated output)",
           tcoll_pending_count());
  T_OK(tcoll_wait(out.data));
  t_expect_desc("zero-size output", &out, TCOLL_FLOAT32, 2, shape, in.device);
  tcoll_tensor_free(&out);
  /* into a preallocated zero-size output */
  tcoll_tensor_t out2 = t_alloc(TCOLL_INT32, 2, shape);
  in.dtype = TCOLL_INT32;
  T_OK(tcoll_all_reduce(&in, TCOLL_MAX, NULL, &out2));
  T_OK(tcoll_wait(out2.data));
  tcoll_tensor_free(&out2);
}
END_TEST

/* Even and odd ranks of world, each its own communicator. */
START_TEST(split_even_odd) {
  tcoll_comm_t *sub = NULL;
  T_OK(tcoll_comm_split(NULL, t_rank % 2, t_rank, &sub));
  int ids[T_MAX_G], G = t_parity_members(ids);
  T_EXPECT(sub && tcoll_comm_size(sub) == G && tcoll_comm_rank(sub) == t_rank / 2,
           "split: size %d rank %d", tcoll_comm_size(sub), tcoll_comm_rank(sub));
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  int64_t shape[2] = {4, 5};
  int n = 0;
  for (int di = 0; di < TCOLL_NUM_DTYPES; di++)
    for (int k = 0; k < K_NKINDS; k++)
      if (k_accepts(k, ALL_DTYPES[di]))
        ar_case(rc_group(ALL_DTYPES[di], k, 0.5, ids, G), kop(k, premul), sub, n++ % V_COUNT, 2,
                shape);
  /* a refusal on a subcommunicator too */
  ar_case(rc_group(TCOLL_INT32, K_AVG, 1, ids, G), TCOLL_AVG, sub, V_PREALLOC, 2, shape);
  T_OK(tcoll_redop_destroy(premul));
  T_OK(tcoll_comm_free(&sub));
}
END_TEST

/* Both slices of a 2-D mesh over world. */
START_TEST(mesh_slices) {
  int dims[2];
  t_mesh_dims(dims);
  tcoll_mesh_t *mesh = NULL;
  T_OK(tcoll_mesh_create(NULL, 2, dims, &mesh));
  if (!mesh) return;
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(2.0, &premul));
  const tcoll_dtype_t dts[] = {TCOLL_UINT8, TCOLL_INT16, TCOLL_BFLOAT16, TCOLL_FLOAT64};
  int64_t shape[1] = {19};
  for (int dim = 0; dim < 2; dim++) {
    tcoll_comm_t *slice = tcoll_mesh_comm(mesh, dim);
    int ids[T_MAX_G], G = t_mesh_members(dims, dim, ids);
    T_EXPECT(slice && tcoll_comm_size(slice) == G &&
                 tcoll_comm_rank(slice) == tcoll_mesh_coord(mesh, dim),
             "mesh dim %d: slice size %d rank %d (expected %d, %d)", dim, tcoll_comm_size(slice),
             tcoll_comm_rank(slice), G, tcoll_mesh_coord(mesh, dim));
    if (!slice) continue;
    for (size_t d = 0; d < T_LEN(dts); d++)
      for (int k = 0; k < K_NKINDS; k++)
        if (k_accepts(k, dts[d]))
          ar_case(rc_group(dts[d], k, 2.0, ids, G), kop(k, premul), slice,
                  (int)(d + (size_t)k) % V_COUNT, 1, shape);
  }
  T_OK(tcoll_redop_destroy(premul));
  T_OK(tcoll_mesh_free(&mesh));
}
END_TEST

/* Integer sums and products wrap around (two's complement), as in MPI, CUDA and PyTorch; also on
 * vectors long enough for Open MPI 4.1's vectorized reductions, which saturate 8- and 16-bit
 * sums instead (tcoll replaces them: mpiglue/mpi_glue.c). */
static double wrap_fill(int64_t i, void *p) { return *(const double *)p + (double)(i % 3); }

START_TEST(integer_wraparound) {
  const struct {
    tcoll_dtype_t d;
    tcoll_redop_t op;
    double base;
  } cases[] = {{TCOLL_UINT8, TCOLL_SUM, 200},    {TCOLL_INT8, TCOLL_SUM, 100},
               {TCOLL_UINT8, TCOLL_PRODUCT, 16}, {TCOLL_INT8, TCOLL_PRODUCT, 12},
               {TCOLL_INT16, TCOLL_SUM, 30000},  {TCOLL_INT16, TCOLL_PRODUCT, 300}};
  const int64_t lengths[] = {6, 1000};
  for (size_t c = 0; c < T_LEN(cases) * T_LEN(lengths); c++) {
    int64_t n = lengths[c / T_LEN(cases)], shape[1] = {n};
    const typeof(cases[0]) *k = &cases[c % T_LEN(cases)];
    tcoll_tensor_t in = t_alloc(k->d, 1, shape), out = t_empty();
    double base = k->base + t_rank;
    t_set_all(&in, wrap_fill, &base);
    T_OK(tcoll_all_reduce(&in, k->op, NULL, &out));
    T_OK(tcoll_wait(out.data));
    double *got = malloc((size_t)n * sizeof *got);
    t_read(&out, got);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
      /* serial reference in 64-bit unsigned arithmetic, then reduced modulo 2^bits */
      uint64_t acc = k->op == TCOLL_SUM ? 0 : 1;
      for (int r = 0; r < t_size; r++) {
        uint64_t v = (uint64_t)(int64_t)(k->base + r + (double)(i % 3));
        acc = k->op == TCOLL_SUM ? acc + v : acc * v;
      }
      int bits = (int)tcoll_dtype_size(k->d) * 8;
      uint64_t m = acc & ((UINT64_C(1) << bits) - 1);
      double want = k->d == TCOLL_UINT8 ? (double)m
                                        : (double)(m >= (UINT64_C(1) << (bits - 1))
                                                       ? (int64_t)m - ((int64_t)1 << bits)
                                                       : (int64_t)m);
      if (got[i] != want && bad++ < 3)
        T_EXPECT(false, "%s %s wraparound over %lld elements: element %lld is %g, expected %g",
                 tcoll_dtype_name(k->d), tcoll_redop_name(k->op), (long long)n, (long long)i,
                 got[i], want);
    }
    free(got);
    tcoll_tensor_free(&in);
    tcoll_tensor_free(&out);
  }
}
END_TEST

/* Bad arguments: refused with a message, nothing started, nothing allocated. */
START_TEST(bad_arguments) {
  int64_t shape[1] = {8}, half[1] = {4}, other[1] = {7};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_empty();
  T_FAILS(tcoll_all_reduce(&in, 99, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "99");
  T_FAILS(tcoll_all_reduce(&in, -1, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "-1");
  tcoll_redop_t dead;
  T_OK(tcoll_redop_create_premul_sum(3.0, &dead));
  T_OK(tcoll_redop_destroy(dead));
  T_FAILS(tcoll_all_reduce(&in, dead, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "premul_sum");
  T_FAILS(tcoll_all_reduce(NULL, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "in");
  T_FAILS(tcoll_all_reduce(&in, TCOLL_SUM, NULL, NULL), TCOLL_ERR_INVALID_ARGUMENT, "out");
  T_EXPECT(out.data == NULL, "a refused call allocated the output");
  tcoll_tensor_t wrong = t_alloc(TCOLL_FLOAT64, 1, shape);
  T_FAILS(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &wrong), TCOLL_ERR_INVALID_ARGUMENT, "out->dtype");
  tcoll_tensor_free(&wrong);
  wrong = t_alloc(TCOLL_FLOAT32, 1, other);
  T_FAILS(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &wrong), TCOLL_ERR_INVALID_ARGUMENT, "out->shape");
  tcoll_tensor_free(&wrong);
  if (in.device != TCOLL_HOST) {
    wrong = t_host(TCOLL_FLOAT32, 1, shape);
    T_FAILS(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &wrong), TCOLL_ERR_INVALID_ARGUMENT,
            "out->device");
    tcoll_tensor_free(&wrong);
  }
  /* overlapping but not identical buffers */
  tcoll_tensor_t a = tcoll_tensor_make(in.data, TCOLL_FLOAT32, 1, half, in.device);
  tcoll_tensor_t b = tcoll_tensor_make((float *)in.data + 2, TCOLL_FLOAT32, 1, half, in.device);
  T_FAILS(tcoll_all_reduce(&a, TCOLL_SUM, NULL, &b), TCOLL_ERR_INVALID_ARGUMENT, "overlaps");
  tcoll_tensor_t nodata = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, shape, in.device);
  T_FAILS(tcoll_all_reduce(&nodata, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "in->data");
  tcoll_tensor_t baddt = in;
  baddt.dtype = (tcoll_dtype_t)42;
  T_FAILS(tcoll_all_reduce(&baddt, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "in->dtype");
  tcoll_tensor_t baddev = in;
  baddev.device = 17;
  T_FAILS(tcoll_all_reduce(&baddev, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "17");
  T_EXPECT(out.data == NULL, "a refused call allocated the output");
  T_EXPECT(tcoll_pending_count() == 0, "refused calls left %zu pending", tcoll_pending_count());
  /* the library is still usable */
  rc_t c = rc_world(TCOLL_FLOAT32, K_SUM, 1);
  t_set_all(&in, rc_fill, &c);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait(out.data));
  t_check_all("all_reduce after refusals", &out, rc_want, &c, 0);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}
END_TEST

/* Reduce-op names and premul_sum handles. */
START_TEST(redop_names) {
  static const char *const names[] = {"sum", "AVG", "Product", "min", "MAX", "band", "Bor", "bXoR"};
  for (int i = 0; i < 8; i++) {
    tcoll_redop_t op = -5;
    T_OK(tcoll_redop_from_string(names[i], &op));
    T_EXPECT(op == i, "\"%s\" gave %d (expected %d)", names[i], op, i);
    T_EXPECT(!strcmp(tcoll_redop_name(i), kname(i)), "tcoll_redop_name(%d) is %s", i,
             tcoll_redop_name(i));
  }
  tcoll_redop_t op;
  T_FAILS(tcoll_redop_from_string("mean", &op), TCOLL_ERR_INVALID_ARGUMENT,
          "Unrecognized reduce_op: mean");
  T_FAILS(tcoll_redop_create_premul_sum(NAN, &op), TCOLL_ERR_INVALID_ARGUMENT, "scalar");
  T_FAILS(tcoll_redop_create_premul_sum(INFINITY, &op), TCOLL_ERR_INVALID_ARGUMENT, "scalar");
  T_OK(tcoll_redop_create_premul_sum(0.5, &op));
  T_EXPECT(!strcmp(tcoll_redop_name(op), "premul_sum"), "premul handle named %s",
           tcoll_redop_name(op));
  T_OK(tcoll_redop_destroy(op));
  T_EXPECT(!strcmp(tcoll_redop_name(op), "invalid"), "destroyed handle named %s",
           tcoll_redop_name(op));
  T_FAILS(tcoll_redop_destroy(op), TCOLL_ERR_INVALID_ARGUMENT, "premul_sum");
  T_FAILS(tcoll_redop_destroy(TCOLL_SUM), TCOLL_ERR_INVALID_ARGUMENT, "sum");
}
END_TEST

/* Work posted with a premul_sum handle is not affected by destroying the handle; a scalar of
 * zero and a negative scalar work too. */
START_TEST(premul_destroyed_after_post) {
  int64_t shape[1] = {11};
  const double scalars[] = {0.5, -2.0, 0.0};
  for (size_t s = 0; s < T_LEN(scalars); s++) {
    tcoll_redop_t op;
    T_OK(tcoll_redop_create_premul_sum(scalars[s], &op));
    rc_t c = rc_world(TCOLL_FLOAT32, K_PREMUL, scalars[s]);
    tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_empty();
    t_set_all(&in, rc_fill, &c);
    T_OK(tcoll_all_reduce(&in, op, NULL, &out));
    T_OK(tcoll_redop_destroy(op));
    T_OK(tcoll_wait(out.data));
    t_check_all("premul_sum destroyed after posting", &out, rc_want, &c, 0);
    tcoll_tensor_free(&in);
    tcoll_tensor_free(&out);
  }
}
END_TEST

/* Outputs stay pending until waited; an input that is a pending output is waited for first; a
 * pending output is refused (BUSY) and the refused call starts nothing. */
START_TEST(pending) {
  int64_t shape[2] = {5, 3};
  rc_t c = rc_world(TCOLL_INT32, K_SUM, 1);
  tcoll_tensor_t in = t_alloc(TCOLL_INT32, 2, shape), o[3];
  t_set_all(&in, rc_fill, &c);
  for (int i = 0; i < 3; i++) o[i] = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &o[0]));
  T_OK(tcoll_all_reduce(&in, TCOLL_MAX, NULL, &o[1]));
  /* o[0] is pending: using it as input waits for it; o[2] = sum over ranks of o[0] = G * sum */
  T_OK(tcoll_all_reduce(&o[0], TCOLL_SUM, NULL, &o[2]));
  T_EXPECT(tcoll_pending_count() == 2, "%zu pending (expected o[1] and o[2])",
           tcoll_pending_count());
  /* o[1] is pending: refused as an output */
  T_FAILS(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &o[1]), TCOLL_ERR_BUSY, "pending");
  T_EXPECT(tcoll_pending_count() == 2, "%zu pending after a BUSY refusal", tcoll_pending_count());
  /* a pointer inside a pending buffer finds its work */
  T_OK(tcoll_wait((int32_t *)o[2].data + 4));
  T_EXPECT(tcoll_pending_count() == 1, "%zu pending", tcoll_pending_count());
  T_OK(tcoll_wait_tensor(&o[1]));
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending", tcoll_pending_count());
  T_OK(tcoll_wait(o[1].data)); /* nothing pending: success at once */
  t_check_all("sum", &o[0], rc_want, &c, 0);
  rc_t cmax = c;
  cmax.k = K_MAX;
  t_check_all("max (same input as sum)", &o[1], rc_want, &cmax, 0);
  double got = t_get(&o[2], 7), want = t_size * rref(TCOLL_INT32, K_SUM, 1, 7, c.ids, t_size);
  T_EXPECT(got == want, "chained all_reduce: %g, expected %g", got, want);
  /* in place leaves the input pending */
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &in));
  T_EXPECT(tcoll_pending_count() == 1, "in place: %zu pending", tcoll_pending_count());
  T_EXPECT(tcoll_test(in.data) >= 0, "tcoll_test failed: %s", tcoll_last_error());
  T_OK(tcoll_wait_all());
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending after wait_all", tcoll_pending_count());
  t_check_all("in place", &in, rc_want, &c, 0);
  for (int i = 0; i < 3; i++) tcoll_tensor_free(&o[i]);
  tcoll_tensor_free(&in);
}
END_TEST

/* Counts above the per-call limit: several MPI calls on consecutive pieces, still exact. */
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
      {TCOLL_FLOAT32, K_SUM, 4099, V_PREALLOC},   {TCOLL_INT32, K_BXOR, 3001, V_INPLACE},
      {TCOLL_FLOAT16, K_AVG, 2999, V_ALLOC},      {TCOLL_BOOL, K_BOR, 2001, V_PREALLOC},
      {TCOLL_INT8, K_MIN, 1000, V_INPLACE},       {TCOLL_BFLOAT16, K_MAX, 1001, V_ALLOC},
      {TCOLL_FLOAT64, K_PREMUL, 5003, V_INPLACE}, {TCOLL_INT64, K_PROD, 2000, V_PREALLOC},
      {TCOLL_UINT8, K_BAND, 3333, V_ALLOC},
  };
  for (size_t i = 0; i < T_LEN(cases); i++) {
    int64_t shape[1] = {cases[i].n};
    ar_case(rc_world(cases[i].d, cases[i].k, 0.5), kop(cases[i].k, premul), NULL, cases[i].variant,
            1, shape);
  }
  /* 2-D, on a subcommunicator */
  tcoll_comm_t *sub = NULL;
  T_OK(tcoll_comm_split(NULL, t_rank % 2, t_rank, &sub));
  int ids[T_MAX_G], G = t_parity_members(ids);
  int64_t shape2[2] = {7, 431};
  ar_case(rc_group(TCOLL_INT16, K_SUM, 1, ids, G), TCOLL_SUM, sub, V_PREALLOC, 2, shape2);
  T_OK(tcoll_comm_free(&sub));
  T_OK(tcoll_redop_destroy(premul));
  t_set_max_count(old);
}
END_TEST

/* The smallest limits: one or two elements per MPI call. */
START_TEST(tiny_limits) {
  for (int64_t lim = 1; lim <= 2; lim++) {
    int64_t old = t_set_max_count(lim);
    int64_t s1[1] = {7}, s2[2] = {3, 3};
    ar_case(rc_world(TCOLL_INT32, K_SUM, 1), TCOLL_SUM, NULL, V_PREALLOC, 1, s1);
    ar_case(rc_world(TCOLL_FLOAT16, K_AVG, 1), TCOLL_AVG, NULL, V_INPLACE, 2, s2);
    ar_case(rc_world(TCOLL_BOOL, K_BXOR, 1), TCOLL_BXOR, NULL, V_ALLOC, 1, s1);
    t_set_max_count(old);
  }
}
END_TEST

/* Several reductions of different kinds outstanding at once, waited in reverse order, and
 * inputs that are views into pending outputs. */
START_TEST(many_outstanding) {
  int G = t_size;
  int64_t s[1] = {6 * (int64_t)G};
  rc_t c = rc_world(TCOLL_FLOAT32, K_SUM, 1);
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, s), o[5];
  t_set_all(&in, rc_fill, &c);
  for (int i = 0; i < 5; i++) o[i] = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &o[0]));
  T_OK(tcoll_reduce_scatter(&in, TCOLL_SUM, 0, NULL, &o[1]));
  T_OK(tcoll_reduce(&in, G - 1, TCOLL_SUM, NULL, &o[2]));
  T_OK(tcoll_all_reduce_coalesced(&in, 1, TCOLL_MAX, NULL, &o[3]));
  /* a view of o[0] (its second half) as an input: o[0] is waited for first */
  int64_t h[1] = {3 * (int64_t)G};
  tcoll_tensor_t view =
      tcoll_tensor_make((float *)o[0].data + 3 * G, TCOLL_FLOAT32, 1, h, o[0].device);
  T_OK(tcoll_all_reduce(&view, TCOLL_MAX, NULL, &o[4]));
  T_EXPECT(tcoll_pending_count() == 4, "%zu pending (expected o[1..4])", tcoll_pending_count());
  /* in place on a pending buffer: refused as BUSY, like any pending output */
  T_FAILS(tcoll_all_reduce(&o[1], TCOLL_SUM, NULL, &o[1]), TCOLL_ERR_BUSY, "pending");
  for (int i = 4; i >= 1; i--) {
    int rc;
    while ((rc = tcoll_test(o[i].data)) == TCOLL_IN_PROGRESS) {
    }
    T_OK(rc);
  }
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending", tcoll_pending_count());
  t_check_all("outstanding all_reduce", &o[0], rc_want, &c, 0);
  rc_t rs = c;
  rc_scatter(&rs, s, 1, 0, t_rank);
  t_check_all("outstanding reduce_scatter", &o[1], rc_want, &rs, 0);
  if (t_rank == G - 1) t_check_all("outstanding reduce", &o[2], rc_want, &c, 0);
  rc_t mx = c; /* rv gives sum, min and max the same inputs */
  mx.k = K_MAX;
  t_check_all("outstanding coalesced max", &o[3], rc_want, &mx, 0);
  /* o[4] = max over ranks of the (identical) second half of o[0] */
  rc_t half = c;
  half.salt = 3 * G;
  t_check_all("all_reduce of a view of a pending output", &o[4], rc_want, &half, 0);
  for (int i = 0; i < 5; i++) tcoll_tensor_free(&o[i]);
  tcoll_tensor_free(&in);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("all_reduce");
  TCase *tc = t_tcase("all_reduce");
  tcase_add_test(tc, matrix_preallocated);
  tcase_add_test(tc, matrix_in_place);
  tcase_add_test(tc, matrix_allocating);
  tcase_add_test(tc, shapes);
  tcase_add_test(tc, zero_size_null_data);
  tcase_add_test(tc, split_even_odd);
  tcase_add_test(tc, mesh_slices);
  tcase_add_test(tc, integer_wraparound);
  tcase_add_test(tc, bad_arguments);
  tcase_add_test(tc, redop_names);
  tcase_add_test(tc, premul_destroyed_after_post);
  tcase_add_test(tc, pending);
  tcase_add_test(tc, large_counts);
  tcase_add_test(tc, tiny_limits);
  tcase_add_test(tc, many_outstanding);
  suite_add_tcase(s, tc);
  return s;
}
