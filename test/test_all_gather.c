/* all_gather (every dim, in place, allocating / preallocated, zero-size, sub-communicators),
 * the all_gather shape rule, all_gather_coalesced and all_gather_list.
 *
 * Rank r fills its input with mv_val(dtype, r, i) (move_util.h); the expected output is built
 * from that closed form by index arithmetic. */
#include "move_util.h"

typedef struct shape_case {
  int ndim;
  int64_t shape[4];
} shape_case;

static const shape_case ag_shapes[] = {
    {1, {5}},
    {2, {3, 4}},
    {3, {2, 3, 2}},
    {4, {2, 1, 3, 2}},
};
#define N_AG_SHAPES ((int)(sizeof ag_shapes / sizeof ag_shapes[0]))

/* Gathers a [shape] tensor of dt along dim over comm (NULL = world) and checks the result.
 * tags: the tag each group rank filled with (NULL: its rank). prealloc: out given with
 * garbage in it. */
static void gather_and_check(tcoll_dtype_t dt, int ndim, const int64_t *shape, int dim,
                             tcoll_comm_t *comm, const int *tags, int my_tag, bool prealloc) {
  int size = tcoll_comm_size(comm ? comm : tcoll_comm_world());
  int nd = dim < 0 ? dim + ndim : dim;
  int64_t oshape[TCOLL_MAX_DIMS];
  memcpy(oshape, shape, (size_t)ndim * sizeof *oshape);
  oshape[nd] *= size;
  tcoll_tensor_t in = t_alloc(dt, ndim, shape), out = t_empty();
  mv_fill(&in, my_tag, 0);
  if (prealloc) {
    out = t_alloc(dt, ndim, oshape);
    mv_fill(&out, 1000 + my_tag, 0); /* must all be overwritten */
  }
  void *prealloc_data = out.data;
  char what[160], sh[64];
  snprintf(what, sizeof what, "all_gather %s of %s along %d (%s)", tcoll_dtype_name(dt),
           mv_shape_str(sh, sizeof sh, ndim, shape), dim, prealloc ? "preallocated" : "allocating");
  int rc = tcoll_all_gather(&in, dim, comm, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, ndim, oshape, what);
    T_EXPECT(out.dtype == dt && out.device == in.device, "%s: dtype %d device %d", what,
             (int)out.dtype, out.device);
    if (prealloc) T_EXPECT(out.data == prealloc_data, "%s: preallocated output replaced", what);
    mv_ag_ctx c = {dt, ndim, nd, size, shape, tags};
    t_check_all(what, &out, mv_ag_expect, &c, 0);
  }
  /* The input is left alone. */
  mv_check_fill("all_gather input afterwards", &in, my_tag, 0);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

START_TEST(every_dim_allocating) {
  for (int k = 0; k < MV_NUM_DTYPES; k++) {
    tcoll_dtype_t dt = mv_all_dtypes[k];
    for (int s = 0; s < N_AG_SHAPES; s++) {
      const shape_case *sc = &ag_shapes[s];
      /* Every dim, counted from the front and from the back. */
      for (int dim = -sc->ndim; dim < sc->ndim; dim++) {
        if (sc->ndim == 4 && k % 3 != 0 && dim < 0) continue; /* keep the suite lean */
        gather_and_check(dt, sc->ndim, sc->shape, dim, NULL, NULL, t_rank, false);
      }
    }
  }
}
END_TEST

START_TEST(every_dim_preallocated) {
  for (int k = 0; k < MV_NUM_DTYPES; k++) {
    tcoll_dtype_t dt = mv_all_dtypes[k];
    for (int s = 0; s < N_AG_SHAPES; s++) {
      const shape_case *sc = &ag_shapes[s];
      for (int dim = 0; dim < sc->ndim; dim++)
        gather_and_check(dt, sc->ndim, sc->shape, dim, NULL, NULL, t_rank, true);
    }
  }
}
END_TEST

/* Dims of size 1 before the gather dim (blocks contiguous), and odd sizes. */
START_TEST(leading_ones_and_odd_sizes) {
  static const shape_case cases[] = {{3, {1, 3, 4}}, {3, {1, 1, 5}}, {2, {1, 7}},
                                     {3, {3, 1, 1}}, {2, {7, 1}},    {3, {5, 3, 7}}};
  for (int s = 0; s < (int)(sizeof cases / sizeof cases[0]); s++)
    for (int dim = 0; dim < cases[s].ndim; dim++)
      for (int k = 0; k < MV_SOME_DTYPES; k++)
        gather_and_check(mv_some_dtypes[k], cases[s].ndim, cases[s].shape, dim, NULL, NULL, t_rank,
                         k % 2 == 0);
}
END_TEST

/* NCCL's in-place form: the input is this rank's own slice of the output along dim 0. */
START_TEST(in_place) {
  static const shape_case cases[] = {{1, {4}}, {2, {3, 2}}, {3, {2, 1, 3}}};
  for (int k = 0; k < MV_NUM_DTYPES; k++) {
    tcoll_dtype_t dt = mv_all_dtypes[k];
    for (int s = 0; s < 3; s++) {
      const shape_case *sc = &cases[s];
      for (int neg = 0; neg < 2; neg++) {
        int64_t oshape[4];
        memcpy(oshape, sc->shape, sizeof oshape);
        oshape[0] *= t_size;
        tcoll_tensor_t out = t_alloc(dt, sc->ndim, oshape);
        mv_fill(&out, 500 + t_rank, 0); /* the other ranks' slices must be overwritten */
        size_t nb = (size_t)mv_numel(sc->ndim, sc->shape) * tcoll_dtype_size(dt);
        tcoll_tensor_t in = tcoll_tensor_make((char *)out.data + (size_t)t_rank * nb, dt, sc->ndim,
                                              sc->shape, out.device);
        mv_fill(&in, t_rank, 0);
        int dim = neg ? -sc->ndim : 0; /* dim 0 counted from the back is the same form */
        T_OK(tcoll_all_gather(&in, dim, NULL, &out));
        T_EXPECT(tcoll_pending_count() == 1, "in-place all_gather: %zu pending (expected 1)",
                 tcoll_pending_count());
        T_OK(tcoll_wait(out.data));
        mv_ag_ctx c = {dt, sc->ndim, 0, t_size, sc->shape, NULL};
        t_check_all("in-place all_gather", &out, mv_ag_expect, &c, 0);
        tcoll_tensor_free(&out);
      }
    }
  }
}
END_TEST

/* Waiting on the input view (a pointer inside the pending output) completes the work too. */
START_TEST(in_place_wait_on_view) {
  int64_t shape[1] = {6}, oshape[1] = {6 * (int64_t)t_size};
  tcoll_tensor_t out = t_alloc(TCOLL_INT32, 1, oshape);
  tcoll_tensor_t in = tcoll_tensor_make((char *)out.data + (size_t)t_rank * 6 * 4, TCOLL_INT32, 1,
                                        shape, out.device);
  mv_fill(&in, t_rank, 0);
  T_OK(tcoll_all_gather(&in, 0, NULL, &out));
  T_OK(tcoll_wait(in.data));
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending after waiting on the view",
           tcoll_pending_count());
  mv_ag_ctx c = {TCOLL_INT32, 1, 0, t_size, shape, NULL};
  t_check_all("in-place all_gather waited on the view", &out, mv_ag_expect, &c, 0);
  tcoll_tensor_free(&out);
}
END_TEST

START_TEST(zero_size) {
  static const shape_case cases[] = {{1, {0}}, {2, {0, 3}}, {2, {3, 0}}, {3, {2, 0, 2}}};
  for (int s = 0; s < 4; s++) {
    const shape_case *sc = &cases[s];
    for (int dim = -sc->ndim; dim < sc->ndim; dim++) {
      for (int prealloc = 0; prealloc < 2; prealloc++) {
        int nd = dim < 0 ? dim + sc->ndim : dim;
        int64_t oshape[4];
        memcpy(oshape, sc->shape, sizeof oshape);
        oshape[nd] *= t_size;
        tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, sc->ndim, sc->shape);
        tcoll_tensor_t out = prealloc ? t_alloc(TCOLL_FLOAT32, sc->ndim, oshape) : t_empty();
        T_OK(tcoll_all_gather(&in, dim, NULL, &out));
        T_EXPECT(out.data != NULL, "zero-size all_gather: no output buffer");
        T_OK(tcoll_wait(out.data));
        MV_EXPECT_SHAPE(&out, sc->ndim, oshape, "zero-size all_gather");
        T_EXPECT(tcoll_tensor_numel(&out) == 0, "zero-size all_gather: %lld elements",
                 (long long)tcoll_tensor_numel(&out));
        tcoll_tensor_free(&in);
        tcoll_tensor_free(&out);
      }
    }
  }
  /* The list and coalesced forms with nothing to move. */
  int64_t z[2] = {0, 4};
  tcoll_tensor_t in = t_alloc(TCOLL_INT8, 2, z);
  tcoll_tensor_t *outs = calloc((size_t)t_size, sizeof *outs);
  for (int r = 0; r < t_size; r++) outs[r] = t_empty();
  T_OK(tcoll_all_gather_list(&in, NULL, outs));
  for (int r = 0; r < t_size; r++) {
    T_OK(tcoll_wait(outs[r].data));
    MV_EXPECT_SHAPE(&outs[r], 2, z, "zero-size all_gather_list");
    tcoll_tensor_free(&outs[r]);
  }
  free(outs);
  tcoll_tensor_t cout = t_empty();
  int64_t zg[2] = {0, 4};
  T_OK(tcoll_all_gather_coalesced(&in, 1, NULL, &cout));
  T_OK(tcoll_wait(cout.data));
  MV_EXPECT_SHAPE(&cout, 2, zg, "zero-size all_gather_coalesced");
  tcoll_tensor_free(&cout);
  tcoll_tensor_free(&in);
}
END_TEST

START_TEST(bad_arguments) {
  int64_t shape[2] = {2, 3}, oshape[2] = {2 * (int64_t)t_size, 3};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 2, shape), out = t_empty();
  /* A 0-dim input has no dim to gather along. */
  tcoll_tensor_t scalar = t_alloc(TCOLL_FLOAT32, 0, NULL);
  T_FAILS(tcoll_all_gather(&scalar, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "0-dim");
  T_EXPECT(out.data == NULL, "a refused all_gather allocated its output");
  T_FAILS(tcoll_all_gather(&in, 2, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "gather_dim is 2 (expected -2..1)");
  T_FAILS(tcoll_all_gather(&in, -3, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "gather_dim is -3");
  T_FAILS(tcoll_all_gather(NULL, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "in is NULL");
  T_FAILS(tcoll_all_gather(&in, 0, NULL, NULL), TCOLL_ERR_INVALID_ARGUMENT, "out is NULL");
  /* A preallocated output must have exactly the gathered shape, dtype and device. */
  int64_t wshape[2] = {2, 4}; /* neither [2 size, 3] nor [2, 3 size] */
  tcoll_tensor_t wrong = t_alloc(TCOLL_FLOAT32, 2, wshape);
  T_FAILS(tcoll_all_gather(&in, 0, NULL, &wrong), TCOLL_ERR_INVALID_ARGUMENT,
          "out->shape is [2, 4]");
  T_FAILS(tcoll_all_gather(&in, 1, NULL, &wrong), TCOLL_ERR_INVALID_ARGUMENT,
          "out->shape is [2, 4]");
  tcoll_tensor_free(&wrong);
  tcoll_tensor_t wrong_dt = t_alloc(TCOLL_INT32, 2, oshape);
  T_FAILS(tcoll_all_gather(&in, 0, NULL, &wrong_dt), TCOLL_ERR_INVALID_ARGUMENT,
          "out->dtype is int32 (expected float32)");
  tcoll_tensor_free(&wrong_dt);
  /* An input inside the output but not at this rank's slot is an overlap, not the in-place form. */
  tcoll_tensor_t big = t_alloc(TCOLL_FLOAT32, 2, oshape);
  size_t nb = tcoll_tensor_nbytes(&in);
  if (t_size > 1) {
    tcoll_tensor_t off = tcoll_tensor_make((char *)big.data + (size_t)((t_rank + 1) % t_size) * nb,
                                           TCOLL_FLOAT32, 2, shape, big.device);
    T_FAILS(tcoll_all_gather(&off, 0, NULL, &big), TCOLL_ERR_INVALID_ARGUMENT, "overlaps");
  } else { /* one rank: a [1, 3] input one element into a [1, 3] output */
    int64_t one[2] = {1, 3};
    tcoll_tensor_t o1 = tcoll_tensor_make(big.data, TCOLL_FLOAT32, 2, one, big.device);
    tcoll_tensor_t off = tcoll_tensor_make((char *)big.data + 4, TCOLL_FLOAT32, 2, one, big.device);
    T_FAILS(tcoll_all_gather(&off, 0, NULL, &o1), TCOLL_ERR_INVALID_ARGUMENT, "overlaps");
  }
  /* The in-place form exists along dim 0 only: the own slot along dim 1 overlaps. */
  tcoll_tensor_t slot = tcoll_tensor_make((char *)big.data + (size_t)t_rank * nb, TCOLL_FLOAT32, 2,
                                          shape, big.device);
  if (t_size > 1) {
    int64_t o1[2] = {2, 3 * (int64_t)t_size};
    tcoll_tensor_t big1 = tcoll_tensor_make(big.data, TCOLL_FLOAT32, 2, o1, big.device);
    T_FAILS(tcoll_all_gather(&slot, 1, NULL, &big1), TCOLL_ERR_INVALID_ARGUMENT, "overlaps");
  }
  tcoll_tensor_free(&big);
  /* A dtype that does not exist. */
  tcoll_tensor_t bad_dt = in;
  bad_dt.dtype = (tcoll_dtype_t)42;
  T_FAILS(tcoll_all_gather(&bad_dt, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "in->dtype is 42");
  T_EXPECT(tcoll_pending_count() == 0, "refused calls left %zu pending", tcoll_pending_count());
  /* The library stays usable. */
  tcoll_tensor_free(&scalar);
  tcoll_tensor_free(&in);
  gather_and_check(TCOLL_FLOAT32, 2, shape, 1, NULL, NULL, t_rank, false);
}
END_TEST

START_TEST(shape_rule) {
  tcoll_tensor_t t = tcoll_tensor_make(NULL, TCOLL_BFLOAT16, 3, (int64_t[]){2, 3, 5}, TCOLL_HOST);
  int64_t shape[TCOLL_MAX_DIMS];
  for (int g = 1; g <= 5; g += 2) {
    for (int dim = -3; dim < 3; dim++) {
      memset(shape, 0xff, sizeof shape);
      T_OK(tcoll_all_gather_shape(&t, dim, g, shape));
      int nd = dim < 0 ? dim + 3 : dim;
      for (int d = 0; d < 3; d++) {
        int64_t want = t.shape[d] * (d == nd ? g : 1);
        T_EXPECT(shape[d] == want, "all_gather_shape(dim %d, group %d)[%d] = %lld (expected %lld)",
                 dim, g, d, (long long)shape[d], (long long)want);
      }
      T_EXPECT(shape[3] == -1, "all_gather_shape wrote past ndim");
    }
  }
  tcoll_tensor_t zero = tcoll_tensor_make(NULL, TCOLL_INT8, 2, (int64_t[]){0, 4}, TCOLL_HOST);
  T_OK(tcoll_all_gather_shape(&zero, 0, 4, shape));
  T_EXPECT(shape[0] == 0 && shape[1] == 4, "all_gather_shape of [0, 4]: [%lld, %lld]",
           (long long)shape[0], (long long)shape[1]);
  T_OK(tcoll_all_gather_shape(&zero, 1, 4, shape));
  T_EXPECT(shape[0] == 0 && shape[1] == 16, "all_gather_shape of [0, 4] dim 1: [%lld, %lld]",
           (long long)shape[0], (long long)shape[1]);
  tcoll_tensor_t scalar = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 0, NULL, TCOLL_HOST);
  T_FAILS(tcoll_all_gather_shape(&scalar, 0, 2, shape), TCOLL_ERR_INVALID_ARGUMENT, "0-dim");
  T_FAILS(tcoll_all_gather_shape(&t, 3, 2, shape), TCOLL_ERR_INVALID_ARGUMENT, "gather_dim is 3");
  T_FAILS(tcoll_all_gather_shape(&t, 0, 0, shape), TCOLL_ERR_INVALID_ARGUMENT, "group_size is 0");
  T_FAILS(tcoll_all_gather_shape(&t, 0, 2, NULL), TCOLL_ERR_INVALID_ARGUMENT, "shape is NULL");
  T_FAILS(tcoll_all_gather_shape(NULL, 0, 2, shape), TCOLL_ERR_INVALID_ARGUMENT, "in is NULL");
  /* Overflow of the gathered dim is refused, not wrapped. */
  tcoll_tensor_t huge =
      tcoll_tensor_make(NULL, TCOLL_BOOL, 1, (int64_t[]){(int64_t)1 << 62}, TCOLL_HOST);
  T_FAILS(tcoll_all_gather_shape(&huge, 0, 4, shape), TCOLL_ERR_INVALID_ARGUMENT, "overflows");
}
END_TEST

/* ---- all_gather_coalesced ---- */

#define NCO 6
static const tcoll_dtype_t co_dt[NCO] = {TCOLL_FLOAT64, TCOLL_INT8,    TCOLL_BFLOAT16,
                                         TCOLL_BOOL,    TCOLL_FLOAT16, TCOLL_INT32};
static const shape_case co_shape[NCO] = {{1, {3}}, {2, {2, 3}}, {3, {4, 1, 2}},
                                         {1, {5}}, {1, {1}},    {2, {0, 2}}};

static void coalesced_case(bool prealloc, tcoll_comm_t *comm, const int *world_of) {
  int size = tcoll_comm_size(comm ? comm : tcoll_comm_world());
  int me = tcoll_comm_rank(comm ? comm : tcoll_comm_world());
  tcoll_tensor_t in[NCO], out[NCO];
  int tags[NCO][8];
  for (int i = 0; i < NCO; i++) {
    in[i] = t_alloc(co_dt[i], co_shape[i].ndim, co_shape[i].shape);
    mv_fill(&in[i], 16 * (world_of ? world_of[me] : me) + i, 0);
    for (int r = 0; r < size; r++) tags[i][r] = 16 * (world_of ? world_of[r] : r) + i;
    out[i] = t_empty();
    if (prealloc) {
      int64_t os[4];
      memcpy(os, co_shape[i].shape, sizeof os);
      os[0] *= size;
      out[i] = t_alloc(co_dt[i], co_shape[i].ndim, os);
      mv_fill(&out[i], 777, 0);
    }
  }
  T_OK(tcoll_all_gather_coalesced(in, NCO, comm, out));
  for (int i = 0; i < NCO; i++) {
    /* Each output is registered and waited on its own. */
    T_OK(tcoll_wait(out[i].data));
    int64_t os[4];
    memcpy(os, co_shape[i].shape, sizeof os);
    os[0] *= size;
    char what[96];
    snprintf(what, sizeof what, "all_gather_coalesced out[%d] (%s)", i,
             prealloc ? "preallocated" : "allocating");
    MV_EXPECT_SHAPE(&out[i], co_shape[i].ndim, os, what);
    T_EXPECT(out[i].dtype == co_dt[i], "%s: dtype %s", what, tcoll_dtype_name(out[i].dtype));
    mv_ag_ctx c = {co_dt[i], co_shape[i].ndim, 0, size, co_shape[i].shape, tags[i]};
    t_check_all(what, &out[i], mv_ag_expect, &c, 0);
  }
  for (int i = 0; i < NCO; i++) {
    tcoll_tensor_free(&in[i]);
    tcoll_tensor_free(&out[i]);
  }
}

START_TEST(coalesced) {
  coalesced_case(false, NULL, NULL);
  coalesced_case(true, NULL, NULL);
  /* n == 0 is a no-op. */
  T_OK(tcoll_all_gather_coalesced(NULL, 0, NULL, NULL));
  T_EXPECT(tcoll_pending_count() == 0, "empty all_gather_coalesced left work pending");
}
END_TEST

START_TEST(coalesced_bad_arguments) {
  tcoll_tensor_t in[2], out[2] = {t_empty(), t_empty()};
  int64_t s[1] = {3};
  in[0] = t_alloc(TCOLL_FLOAT32, 1, s);
  in[1] = t_alloc(TCOLL_FLOAT32, 0, NULL);
  T_FAILS(tcoll_all_gather_coalesced(in, 2, NULL, out), TCOLL_ERR_INVALID_ARGUMENT, "in[1]");
  T_EXPECT(t_contains(tcoll_last_error(), "0-dim"), "message \"%s\" lacks \"0-dim\"",
           tcoll_last_error());
  T_EXPECT(out[0].data == NULL && out[1].data == NULL,
           "a refused all_gather_coalesced allocated outputs");
  T_FAILS(tcoll_all_gather_coalesced(in, -1, NULL, out), TCOLL_ERR_INVALID_ARGUMENT, "n is -1");
  T_FAILS(tcoll_all_gather_coalesced(NULL, 2, NULL, out), TCOLL_ERR_INVALID_ARGUMENT, "in is NULL");
  int64_t ws[1] = {3};
  out[0] = t_alloc(TCOLL_FLOAT32, 1, ws); /* wrong unless one rank */
  if (t_size > 1)
    T_FAILS(tcoll_all_gather_coalesced(in, 1, NULL, out), TCOLL_ERR_INVALID_ARGUMENT,
            "out[0]->shape");
  tcoll_tensor_free(&out[0]);
  T_EXPECT(tcoll_pending_count() == 0, "refused calls left %zu pending", tcoll_pending_count());
  tcoll_tensor_free(&in[0]);
  tcoll_tensor_free(&in[1]);
}
END_TEST

/* ---- all_gather_list ---- */

START_TEST(list_form) {
  static const shape_case cases[] = {{2, {2, 3}}, {1, {7}}, {3, {1, 2, 2}}};
  for (int k = 0; k < MV_NUM_DTYPES; k++) {
    tcoll_dtype_t dt = mv_all_dtypes[k];
    const shape_case *sc = &cases[k % 3];
    bool prealloc = k % 2;
    tcoll_tensor_t in = t_alloc(dt, sc->ndim, sc->shape);
    mv_fill(&in, t_rank, 0);
    tcoll_tensor_t *outs = calloc((size_t)t_size, sizeof *outs);
    for (int r = 0; r < t_size; r++) {
      outs[r] = prealloc ? t_alloc(dt, sc->ndim, sc->shape) : t_empty();
      if (prealloc) mv_fill(&outs[r], 300 + r, 0);
    }
    T_OK(tcoll_all_gather_list(&in, NULL, outs));
    for (int r = 0; r < t_size; r++) {
      T_OK(tcoll_wait(outs[r].data));
      char what[96];
      snprintf(what, sizeof what, "all_gather_list outs[%d] %s", r, tcoll_dtype_name(dt));
      MV_EXPECT_SHAPE(&outs[r], sc->ndim, sc->shape, what);
      mv_check_fill(what, &outs[r], r, 0);
      tcoll_tensor_free(&outs[r]);
    }
    free(outs);
    tcoll_tensor_free(&in);
  }
}
END_TEST

START_TEST(list_bad_arguments) {
  int64_t s[2] = {2, 3}, w[2] = {3, 2};
  tcoll_tensor_t in = t_alloc(TCOLL_INT16, 2, s);
  T_FAILS(tcoll_all_gather_list(&in, NULL, NULL), TCOLL_ERR_INVALID_ARGUMENT, "outs is NULL");
  tcoll_tensor_t *outs = calloc((size_t)t_size, sizeof *outs);
  for (int r = 0; r < t_size; r++) outs[r] = t_empty();
  outs[t_size - 1] = t_alloc(TCOLL_INT16, 2, w);
  char needle[32];
  snprintf(needle, sizeof needle, "outs[%d]->shape", t_size - 1);
  T_FAILS(tcoll_all_gather_list(&in, NULL, outs), TCOLL_ERR_INVALID_ARGUMENT, needle);
  for (int r = 0; r < t_size - 1; r++)
    T_EXPECT(outs[r].data == NULL, "refused all_gather_list allocated outs[%d]", r);
  tcoll_tensor_free(&outs[t_size - 1]);
  free(outs);
  tcoll_tensor_free(&in);
}
END_TEST

/* ---- sub-communicators ---- */

START_TEST(sub_communicators) {
  /* Even and odd world ranks; group rank g is world rank 2g + parity. */
  tcoll_comm_t *half = NULL;
  int parity = t_rank % 2;
  T_OK(tcoll_comm_split(tcoll_comm_world(), parity, t_rank, &half));
  if (half) {
    int n = tcoll_comm_size(half);
    int tags[8];
    for (int g = 0; g < n; g++) tags[g] = 2 * g + parity;
    int64_t shape[3] = {2, 3, 2};
    for (int dim = -3; dim < 3; dim++)
      gather_and_check(dim % 2 ? TCOLL_FLOAT16 : TCOLL_INT64, 3, shape, dim, half, tags, t_rank,
                       dim >= 0);
    int world_of[8];
    for (int g = 0; g < n; g++) world_of[g] = tags[g];
    coalesced_case(false, half, world_of);
    T_OK(tcoll_comm_free(&half));
  }
  /* A 2-D mesh (2 x size/2 when size is even, else 1 x size) and its slices. */
  int dims[2] = {t_size % 2 == 0 ? 2 : 1, t_size % 2 == 0 ? t_size / 2 : t_size};
  tcoll_mesh_t *mesh = NULL;
  T_OK(tcoll_mesh_create(tcoll_comm_world(), 2, dims, &mesh));
  if (mesh) {
    int c0 = tcoll_mesh_coord(mesh, 0), c1 = tcoll_mesh_coord(mesh, 1);
    for (int md = 0; md < 2; md++) {
      tcoll_comm_t *slice = tcoll_mesh_comm(mesh, md);
      T_EXPECT(slice != NULL, "mesh slice %d: %s", md, tcoll_last_error());
      if (!slice) continue;
      int tags[8];
      for (int k = 0; k < dims[md]; k++) tags[k] = md == 0 ? k * dims[1] + c1 : c0 * dims[1] + k;
      int64_t shape[2] = {3, 2};
      gather_and_check(TCOLL_BFLOAT16, 2, shape, 1, slice, tags, t_rank, false);
      gather_and_check(TCOLL_UINT8, 2, shape, 0, slice, tags, t_rank, true);
    }
    T_OK(tcoll_mesh_free(&mesh));
  }
}
END_TEST

/* An input that is itself a pending output is waited for first. */
START_TEST(pending_input) {
  int64_t shape[2] = {2, 3};
  tcoll_tensor_t in = t_alloc(TCOLL_INT32, 2, shape), mid = t_empty(), out = t_empty();
  mv_fill(&in, t_rank, 0);
  T_OK(tcoll_all_gather(&in, 0, NULL, &mid));
  T_OK(tcoll_all_gather(&mid, 1, NULL, &out)); /* mid not waited */
  T_OK(tcoll_wait(out.data));
  T_OK(tcoll_wait(mid.data));
  /* out[i, j] = mid[i, j % 3] for every rank's block: mid is [2 size, 3]. */
  mv_ag_ctx mc = {TCOLL_INT32, 2, 0, t_size, shape, NULL};
  t_check_all("first all_gather", &mid, mv_ag_expect, &mc, 0);
  int64_t n = tcoll_tensor_numel(&out);
  double *got = malloc((size_t)n * sizeof *got);
  t_read(&out, got);
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t row = i / (3 * t_size), col = i % (3 * t_size) % 3;
    double want = mv_ag_expect(row * 3 + col, &mc);
    if (got[i] != want && bad++ < 3)
      T_EXPECT(false, "chained all_gather element %lld: %g (expected %g)", (long long)i, got[i],
               want);
  }
  T_EXPECT(bad == 0, "chained all_gather: %d elements differ", bad);
  free(got);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&mid);
  tcoll_tensor_free(&out);
}
END_TEST

/* The in-place form is a property of each rank (as in NCCL): some ranks in place, others not. */
START_TEST(in_place_on_some_ranks) {
  int64_t shape[2] = {3, 2}, oshape[2] = {3 * (int64_t)t_size, 2};
  for (int k = 0; k < MV_SOME_DTYPES; k++) {
    tcoll_dtype_t dt = mv_some_dtypes[k];
    for (int pattern = 0; pattern < 2; pattern++) {
      bool inplace = (t_rank + pattern) % 2 == 0;
      tcoll_tensor_t out = t_alloc(dt, 2, oshape), in = t_empty();
      mv_fill(&out, 600 + t_rank, 0);
      size_t nb = (size_t)6 * tcoll_dtype_size(dt);
      if (inplace)
        in = tcoll_tensor_make((char *)out.data + (size_t)t_rank * nb, dt, 2, shape, out.device);
      else
        in = t_alloc(dt, 2, shape);
      mv_fill(&in, t_rank, 0);
      T_OK(tcoll_all_gather(&in, 0, NULL, &out));
      T_OK(tcoll_wait(out.data));
      mv_ag_ctx c = {dt, 2, 0, t_size, shape, NULL};
      t_check_all(inplace ? "all_gather, in place on this rank only"
                          : "all_gather, in place on other ranks only",
                  &out, mv_ag_expect, &c, 0);
      if (!inplace) tcoll_tensor_free(&in);
      tcoll_tensor_free(&out);
    }
  }
}
END_TEST

/* Zero-size inputs may come without a buffer (data NULL). */
START_TEST(zero_size_null_data) {
  int64_t z[2] = {0, 3};
  tcoll_tensor_t in = tcoll_tensor_make(NULL, TCOLL_FLOAT64, 2, z, t_device());
  for (int dim = 0; dim < 2; dim++) {
    tcoll_tensor_t out = t_empty();
    T_OK(tcoll_all_gather(&in, dim, NULL, &out));
    T_OK(tcoll_wait(out.data));
    int64_t os[2] = {dim == 0 ? 0 : 0, dim == 1 ? 3 * (int64_t)t_size : 3};
    MV_EXPECT_SHAPE(&out, 2, os, "all_gather of a NULL zero-size input");
    tcoll_tensor_free(&out);
  }
  tcoll_tensor_t *outs = calloc((size_t)t_size, sizeof *outs);
  for (int r = 0; r < t_size; r++) outs[r] = t_empty();
  T_OK(tcoll_all_gather_list(&in, NULL, outs));
  for (int r = 0; r < t_size; r++) {
    T_OK(tcoll_wait(outs[r].data));
    tcoll_tensor_free(&outs[r]);
  }
  free(outs);
  int64_t s1[1] = {2};
  tcoll_tensor_t cin[2] = {in, t_alloc(TCOLL_INT16, 1, s1)}, cout[2] = {t_empty(), t_empty()};
  mv_fill(&cin[1], t_rank, 0);
  T_OK(tcoll_all_gather_coalesced(cin, 2, NULL, cout));
  T_OK(tcoll_wait(cout[0].data));
  T_OK(tcoll_wait(cout[1].data));
  mv_ag_ctx c = {TCOLL_INT16, 1, 0, t_size, s1, NULL};
  t_check_all("coalesced next to a NULL zero-size input", &cout[1], mv_ag_expect, &c, 0);
  tcoll_tensor_free(&cin[1]);
  tcoll_tensor_free(&cout[0]);
  tcoll_tensor_free(&cout[1]);
  /* An empty tensor has 0 bytes however large its other dims are. */
  int64_t wide[2] = {0, (int64_t)1 << 61}; /* 2^63 bytes of float32 per row, but no rows */
  tcoll_tensor_t win = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 2, wide, t_device()),
                 wout = t_empty();
  T_OK(tcoll_all_gather(&win, 0, NULL, &wout));
  T_OK(tcoll_wait(wout.data));
  MV_EXPECT_SHAPE(&wout, 2, wide, "all_gather of an empty [0, 2^61] input");
  tcoll_tensor_free(&wout);
}
END_TEST

/* ---- large outputs along a dim other than 0 ----
 * On host buffers these go through the host pipeline (chunks of rows gathered and interleaved
 * one by one, their MPI calls posted as earlier chunks complete; into outputs of 8 MiB and more
 * with streaming stores) or the cma algorithm; on devices through the staging pipeline or a
 * strided datatype. */

START_TEST(large_other_dims) {
  static const struct {
    tcoll_dtype_t dt;
    int ndim;
    int64_t shape[3];
    int dim;
  } cases[] = {
      {TCOLL_FLOAT32, 2, {601, 257}, 1},  /* chunks end inside runs */
      {TCOLL_INT16, 3, {5, 200, 101}, 1}, /* an inner dim; one chunk at 1 rank, pipelined from 2 */
      {TCOLL_FLOAT64, 2, {2, 90001}, -1}, /* runs longer than a chunk */
      {TCOLL_BFLOAT16, 3, {700, 3, 131}, 2},
      {TCOLL_UINT8, 2, {1, 700001}, 1}, /* leading 1: one contiguous block, not pipelined */
      {TCOLL_FLOAT32,
       2,
       {4100, 263},
       1}, /* from 2 ranks an output of 8 MiB and more: runs streamed */
  };
  for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++)
    gather_and_check(cases[i].dt, cases[i].ndim, cases[i].shape, cases[i].dim, NULL, NULL, t_rank,
                     i % 2 == 0);
}
END_TEST

/* Pipelined gathers interleaved with other collectives on the same communicator, completed in
 * an order that differs between ranks (and partly by tcoll_test): every rank still posts the
 * chunks' MPI calls in the same order, and every result is right. */
START_TEST(large_pipelines_any_completion_order) {
  enum { N = 3 };
  int64_t s[2] = {640, 301}, as[1] = {4096};
  tcoll_tensor_t in[N], out[N];
  int tags[N][8];
  for (int k = 0; k < N; k++) {
    in[k] = t_alloc(TCOLL_FLOAT32, 2, s);
    mv_fill(&in[k], 10 * k + t_rank, 0);
    out[k] = t_empty();
    for (int r = 0; r < t_size; r++) tags[k][r] = 10 * k + r;
  }
  tcoll_tensor_t sum = t_alloc(TCOLL_FLOAT64, 1, as);
  mv_fill_const(&sum, t_rank + 1.0);
  T_OK(tcoll_all_gather(&in[0], 1, NULL, &out[0]));
  T_OK(tcoll_all_reduce(&sum, TCOLL_SUM, NULL, &sum));
  T_OK(tcoll_all_gather(&in[1], -1, NULL, &out[1]));
  T_OK(tcoll_all_gather(&in[2], 1, NULL, &out[2]));
  if (t_rank % 2 == 0) {
    T_OK(tcoll_wait(out[2].data));
    T_OK(tcoll_wait(sum.data));
    T_OK(tcoll_wait(out[1].data));
    T_OK(tcoll_wait(out[0].data));
  } else {
    int rc;
    while ((rc = tcoll_test(out[1].data)) == TCOLL_IN_PROGRESS) {
    }
    T_OK(rc);
    T_OK(tcoll_wait(out[0].data));
    T_OK(tcoll_wait(out[2].data));
    T_OK(tcoll_wait(sum.data));
  }
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending after every wait", tcoll_pending_count());
  double want = t_size * (t_size + 1) / 2.0;
  t_check_all("all_reduce between pipelined gathers", &sum, mv_const_fn, &want, 0);
  for (int k = 0; k < N; k++) {
    char what[64];
    snprintf(what, sizeof what, "pipelined all_gather %d of %d", k, N);
    mv_ag_ctx c = {TCOLL_FLOAT32, 2, 1, t_size, s, tags[k]};
    t_check_all(what, &out[k], mv_ag_expect, &c, 0);
    tcoll_tensor_free(&in[k]);
    tcoll_tensor_free(&out[k]);
  }
  tcoll_tensor_free(&sum);
}
END_TEST

/* Outputs with pending work are refused (TCOLL_ERR_BUSY) and nothing starts; outputs of one call
 * may not overlap each other. */
START_TEST(busy_and_overlapping_outputs) {
  int64_t s[1] = {4};
  tcoll_tensor_t in = t_alloc(TCOLL_INT32, 1, s), out = t_empty();
  mv_fill(&in, t_rank, 0);
  T_OK(tcoll_all_gather(&in, 0, NULL, &out));
  T_FAILS(tcoll_all_gather(&in, 0, NULL, &out), TCOLL_ERR_BUSY, "pending");
  tcoll_tensor_t cin[2] = {in, in}, cout[2] = {t_empty(), out};
  T_FAILS(tcoll_all_gather_coalesced(cin, 2, NULL, cout), TCOLL_ERR_BUSY, "pending");
  T_EXPECT(cout[0].data == NULL, "a refused all_gather_coalesced kept the output it allocated");
  T_EXPECT(tcoll_pending_count() == 1, "%zu pending (expected 1)", tcoll_pending_count());
  T_OK(tcoll_wait(out.data));
  mv_ag_ctx c = {TCOLL_INT32, 1, 0, t_size, s, NULL};
  t_check_all("all_gather after refused calls on its output", &out, mv_ag_expect, &c, 0);
  /* Two outputs of one call on the same buffer. */
  cout[0] = out;
  T_FAILS(tcoll_all_gather_coalesced(cin, 2, NULL, cout), TCOLL_ERR_INVALID_ARGUMENT,
          "overlaps another output");
  if (t_size > 1) {
    tcoll_tensor_t *outs = calloc((size_t)t_size, sizeof *outs);
    for (int r = 0; r < t_size; r++)
      outs[r] = r < 2 ? tcoll_tensor_make(out.data, TCOLL_INT32, 1, s, out.device) : t_empty();
    T_FAILS(tcoll_all_gather_list(&in, NULL, outs), TCOLL_ERR_INVALID_ARGUMENT,
            "overlaps another output");
    for (int r = 2; r < t_size; r++)
      T_EXPECT(outs[r].data == NULL, "refused all_gather_list kept outs[%d]", r);
    free(outs);
  }
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending after refused calls", tcoll_pending_count());
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}
END_TEST

/* all_gather_coalesced with some outputs preallocated and the others allocated. */
START_TEST(coalesced_mixed_outputs) {
  int64_t a[2] = {2, 3}, b[1] = {5}, ao[2] = {2 * (int64_t)t_size, 3};
  tcoll_tensor_t in[2] = {t_alloc(TCOLL_FLOAT16, 2, a), t_alloc(TCOLL_UINT8, 1, b)};
  mv_fill(&in[0], t_rank, 0);
  mv_fill(&in[1], 10 + t_rank, 0);
  tcoll_tensor_t out[2] = {t_alloc(TCOLL_FLOAT16, 2, ao), t_empty()};
  T_OK(tcoll_all_gather_coalesced(in, 2, NULL, out));
  T_OK(tcoll_wait(out[1].data)); /* in the other order */
  T_OK(tcoll_wait(out[0].data));
  int tags[8];
  for (int r = 0; r < t_size; r++) tags[r] = 10 + r;
  mv_ag_ctx c0 = {TCOLL_FLOAT16, 2, 0, t_size, a, NULL}, c1 = {TCOLL_UINT8, 1, 0, t_size, b, tags};
  t_check_all("coalesced preallocated output", &out[0], mv_ag_expect, &c0, 0);
  t_check_all("coalesced allocated output", &out[1], mv_ag_expect, &c1, 0);
  for (int i = 0; i < 2; i++) {
    tcoll_tensor_free(&in[i]);
    tcoll_tensor_free(&out[i]);
  }
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("all_gather");
  TCase *tc = t_tcase("all_gather");
  tcase_add_test(tc, every_dim_allocating);
  tcase_add_test(tc, every_dim_preallocated);
  tcase_add_test(tc, leading_ones_and_odd_sizes);
  tcase_add_test(tc, in_place);
  tcase_add_test(tc, in_place_wait_on_view);
  tcase_add_test(tc, zero_size);
  tcase_add_test(tc, bad_arguments);
  tcase_add_test(tc, shape_rule);
  tcase_add_test(tc, coalesced);
  tcase_add_test(tc, coalesced_bad_arguments);
  tcase_add_test(tc, list_form);
  tcase_add_test(tc, list_bad_arguments);
  tcase_add_test(tc, sub_communicators);
  tcase_add_test(tc, pending_input);
  tcase_add_test(tc, in_place_on_some_ranks);
  tcase_add_test(tc, zero_size_null_data);
  tcase_add_test(tc, busy_and_overlapping_outputs);
  tcase_add_test(tc, coalesced_mixed_outputs);
  tcase_add_test(tc, large_other_dims);
  tcase_add_test(tc, large_pipelines_any_completion_order);
  suite_add_tcase(s, tc);
  return s;
}
