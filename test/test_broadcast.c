/* broadcast (every src; in place, out of place, allocating; zero-size; errors), gather (every
 * dst; outs NULL off dst) and scatter (every src; ins NULL off src; *out describes the piece),
 * on the world and on sub-communicators.
 *
 * Values are mv_val(dtype, tag, index) (move_util.h) with the tag naming who filled them. */
#include "move_util.h"

typedef struct shape_case {
  int ndim;
  int64_t shape[3];
} shape_case;

static const shape_case shapes[] = {{2, {3, 4}}, {1, {7}}, {3, {2, 1, 3}}, {0, {0}}};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

enum { OUT_OF_PLACE, ALLOCATING, IN_PLACE };
static const char *mode_name[] = {"out of place", "allocating", "in place"};

/* tags: the tag of each group rank (NULL: the rank). */
static void bcast_case(tcoll_dtype_t dt, int ndim, const int64_t *shape, int src, int mode,
                       tcoll_comm_t *comm, const int *tags) {
  tcoll_comm_t *c = comm ? comm : tcoll_comm_world();
  int me = tcoll_comm_rank(c);
  int my_tag = tags ? tags[me] : me, src_tag = tags ? tags[src] : src;
  tcoll_tensor_t in = t_alloc(dt, ndim, shape), out = t_empty();
  mv_fill(&in, my_tag, 0); /* only src's data may arrive */
  if (mode == OUT_OF_PLACE) {
    out = t_alloc(dt, ndim, shape);
    mv_fill(&out, 100 + my_tag, 0);
  } else if (mode == IN_PLACE) {
    out = in;
  }
  char what[128];
  snprintf(what, sizeof what, "broadcast %s from %d (%s, %d dims)", tcoll_dtype_name(dt), src,
           mode_name[mode], ndim);
  int rc = tcoll_broadcast(&in, src, comm, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, ndim, shape, what);
    T_EXPECT(out.dtype == dt && out.device == in.device, "%s: dtype %s device %d", what,
             tcoll_dtype_name(out.dtype), out.device);
    mv_check_fill(what, &out, src_tag, 0);
    if (mode != IN_PLACE) mv_check_fill("broadcast input afterwards", &in, my_tag, 0);
  }
  if (mode != IN_PLACE) tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}

START_TEST(broadcast_every_src) {
  for (int src = 0; src < t_size; src++)
    for (int k = 0; k < MV_NUM_DTYPES; k++)
      for (int mode = 0; mode < 3; mode++) {
        const shape_case *s = &shapes[(k + mode + src) % N_SHAPES];
        bcast_case(mv_all_dtypes[k], s->ndim, s->shape, src, mode, NULL, NULL);
      }
}
END_TEST

START_TEST(broadcast_zero_size) {
  int64_t z1[1] = {0}, z2[2] = {3, 0};
  for (int mode = 0; mode < 3; mode++) {
    bcast_case(TCOLL_FLOAT32, 1, z1, t_size - 1, mode, NULL, NULL);
    bcast_case(TCOLL_INT8, 2, z2, 0, mode, NULL, NULL);
  }
}
END_TEST

START_TEST(broadcast_bad_arguments) {
  int64_t s[2] = {2, 3}, w[2] = {3, 2};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT64, 2, s), out = t_empty();
  char needle[96];
  snprintf(needle, sizeof needle, "src is %d (expected a rank in [0, %d))", t_size, t_size);
  T_FAILS(tcoll_broadcast(&in, t_size, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, needle);
  T_FAILS(tcoll_broadcast(&in, -1, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "src is -1");
  T_FAILS(tcoll_broadcast(NULL, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "in is NULL");
  T_FAILS(tcoll_broadcast(&in, 0, NULL, NULL), TCOLL_ERR_INVALID_ARGUMENT, "out is NULL");
  tcoll_tensor_t wrong = t_alloc(TCOLL_FLOAT64, 2, w);
  T_FAILS(tcoll_broadcast(&in, 0, NULL, &wrong), TCOLL_ERR_INVALID_ARGUMENT,
          "out->shape is [3, 2] (expected [2, 3])");
  tcoll_tensor_free(&wrong);
  tcoll_tensor_t wrong_dt = t_alloc(TCOLL_FLOAT32, 2, s);
  T_FAILS(tcoll_broadcast(&in, 0, NULL, &wrong_dt), TCOLL_ERR_INVALID_ARGUMENT,
          "out->dtype is float32");
  tcoll_tensor_free(&wrong_dt);
  /* Overlapping but not the same buffer: neither in place nor out of place. */
  int64_t one[1] = {3};
  tcoll_tensor_t a = tcoll_tensor_make(in.data, TCOLL_FLOAT64, 1, one, in.device);
  tcoll_tensor_t b = tcoll_tensor_make((char *)in.data + 8, TCOLL_FLOAT64, 1, one, in.device);
  T_FAILS(tcoll_broadcast(&a, 0, NULL, &b), TCOLL_ERR_INVALID_ARGUMENT, "overlaps");
  T_EXPECT(out.data == NULL && tcoll_pending_count() == 0,
           "refused broadcasts left an output or pending work");
  tcoll_tensor_free(&in);
  bcast_case(TCOLL_INT16, 2, s, 0, ALLOCATING, NULL, NULL); /* still usable */
}
END_TEST

/* A broadcast whose input is the pending output of another one. */
START_TEST(broadcast_chained) {
  int64_t s[1] = {6};
  tcoll_tensor_t in = t_alloc(TCOLL_INT32, 1, s), mid = t_empty(), out = t_empty();
  mv_fill(&in, t_rank, 0);
  T_OK(tcoll_broadcast(&in, 0, NULL, &mid));
  T_OK(tcoll_broadcast(&mid, t_size - 1, NULL, &out));
  T_OK(tcoll_wait(out.data));
  T_OK(tcoll_wait(mid.data));
  mv_check_fill("chained broadcast", &out, 0, 0);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&mid);
  tcoll_tensor_free(&out);
}
END_TEST

/* ---- gather ---- */

static void gather_case(tcoll_dtype_t dt, int ndim, const int64_t *shape, int dst, bool prealloc,
                        tcoll_comm_t *comm, const int *tags) {
  tcoll_comm_t *c = comm ? comm : tcoll_comm_world();
  int size = tcoll_comm_size(c), me = tcoll_comm_rank(c);
  tcoll_tensor_t in = t_alloc(dt, ndim, shape);
  mv_fill(&in, tags ? tags[me] : me, 0);
  tcoll_tensor_t *outs = NULL;
  if (me == dst) {
    outs = calloc((size_t)size, sizeof *outs);
    for (int r = 0; r < size; r++) {
      outs[r] = prealloc ? t_alloc(dt, ndim, shape) : t_empty();
      if (prealloc) mv_fill(&outs[r], 200 + r, 0);
    }
  }
  char what[128];
  snprintf(what, sizeof what, "gather %s to %d (%s, %d dims)", tcoll_dtype_name(dt), dst,
           prealloc ? "preallocated" : "allocating", ndim);
  int rc = tcoll_gather(&in, dst, comm, outs);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    if (me == dst) {
      for (int r = 0; r < size; r++) {
        T_OK(tcoll_wait(outs[r].data));
        MV_EXPECT_SHAPE(&outs[r], ndim, shape, what);
        T_EXPECT(outs[r].dtype == dt && outs[r].device == in.device,
                 "%s: outs[%d] dtype %s device %d", what, r, tcoll_dtype_name(outs[r].dtype),
                 outs[r].device);
        char w2[160];
        snprintf(w2, sizeof w2, "%s outs[%d]", what, r);
        mv_check_fill(w2, &outs[r], tags ? tags[r] : r, 0);
      }
    } else {
      /* No output here: the work is registered under the input. */
      T_EXPECT(tcoll_pending_count() == 1, "%s: %zu pending off dst (expected 1)", what,
               tcoll_pending_count());
      T_OK(tcoll_wait(in.data));
    }
  }
  mv_check_fill("gather input afterwards", &in, tags ? tags[me] : me, 0);
  if (outs) {
    for (int r = 0; r < size; r++) tcoll_tensor_free(&outs[r]);
    free(outs);
  }
  tcoll_tensor_free(&in);
}

START_TEST(gather_every_dst) {
  for (int dst = 0; dst < t_size; dst++)
    for (int k = 0; k < MV_NUM_DTYPES; k++) {
      const shape_case *s = &shapes[(k + dst) % N_SHAPES];
      gather_case(mv_all_dtypes[k], s->ndim, s->shape, dst, (k + dst) % 2, NULL, NULL);
    }
}
END_TEST

START_TEST(gather_zero_size) {
  int64_t z[2] = {0, 5};
  for (int dst = 0; dst < t_size; dst++)
    gather_case(TCOLL_BFLOAT16, 2, z, dst, dst % 2, NULL, NULL);
}
END_TEST

START_TEST(gather_bad_arguments) {
  int64_t s[1] = {4}, w[1] = {5};
  tcoll_tensor_t in = t_alloc(TCOLL_UINT8, 1, s);
  char needle[96];
  snprintf(needle, sizeof needle, "dst is %d (expected a rank in [0, %d))", t_size, t_size);
  T_FAILS(tcoll_gather(&in, t_size, NULL, NULL), TCOLL_ERR_INVALID_ARGUMENT, needle);
  T_FAILS(tcoll_gather(&in, -1, NULL, NULL), TCOLL_ERR_INVALID_ARGUMENT, "dst is -1");
  /* Errors only dst can see: on a one-rank communicator, where every rank is dst. */
  tcoll_comm_t *self = mv_self_comm();
  if (self) {
    T_FAILS(tcoll_gather(&in, 0, self, NULL), TCOLL_ERR_INVALID_ARGUMENT, "outs is NULL on dst");
    tcoll_tensor_t bad = t_alloc(TCOLL_UINT8, 1, w);
    T_FAILS(tcoll_gather(&in, 0, self, &bad), TCOLL_ERR_INVALID_ARGUMENT,
            "outs[0]->shape is [5] (expected [4])");
    tcoll_tensor_free(&bad);
    T_FAILS(tcoll_gather(&in, 0, self, &in), TCOLL_ERR_INVALID_ARGUMENT, "overlaps");
    /* One-rank gather works. */
    tcoll_tensor_t one = t_empty();
    mv_fill(&in, 7, 0);
    T_OK(tcoll_gather(&in, 0, self, &one));
    T_OK(tcoll_wait(one.data));
    mv_check_fill("one-rank gather", &one, 7, 0);
    tcoll_tensor_free(&one);
    T_OK(tcoll_comm_free(&self));
  }
  T_EXPECT(tcoll_pending_count() == 0, "refused gathers left %zu pending", tcoll_pending_count());
  tcoll_tensor_free(&in);
}
END_TEST

/* An input that is the pending output of an earlier call is waited for first, on dst and off
 * dst alike (off dst the gather is keyed under that very input). */
START_TEST(gather_pending_input) {
  int64_t s[1] = {5};
  for (int dst = 0; dst < t_size; dst++) {
    tcoll_tensor_t x = t_alloc(TCOLL_INT32, 1, s), in = t_empty();
    mv_fill(&x, t_rank, 0);
    T_OK(tcoll_broadcast(&x, 0, NULL, &in)); /* in: pending, rank 0's values everywhere */
    tcoll_tensor_t *outs = NULL;
    if (t_rank == dst) {
      outs = calloc((size_t)t_size, sizeof *outs);
      for (int r = 0; r < t_size; r++) outs[r] = t_empty();
    }
    int rc = tcoll_gather(&in, dst, NULL, outs);
    T_EXPECT(rc == TCOLL_SUCCESS, "gather of a pending input to %d: %s: %s", dst,
             tcoll_status_string(rc), tcoll_last_error());
    if (outs) {
      for (int r = 0; r < t_size && rc == TCOLL_SUCCESS; r++) {
        T_OK(tcoll_wait(outs[r].data));
        mv_check_fill("gather of a pending input", &outs[r], 0, 0);
      }
      for (int r = 0; r < t_size; r++) tcoll_tensor_free(&outs[r]);
      free(outs);
    }
    T_OK(tcoll_wait(in.data));
    mv_check_fill("gather's pending input", &in, 0, 0);
    tcoll_tensor_free(&in);
    tcoll_tensor_free(&x);
  }
}
END_TEST

/* Two gathers of the same input in flight at once, to different roots: off dst each is keyed
 * under that input, so the second waits for the first instead of being refused. */
START_TEST(two_gathers_of_one_input) {
  int64_t s[1] = {3};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT64, 1, s);
  mv_fill(&in, t_rank, 0);
  int roots[2] = {0, t_size - 1};
  tcoll_tensor_t *outs[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    if (t_rank == roots[k]) {
      outs[k] = calloc((size_t)t_size, sizeof *outs[k]);
      for (int r = 0; r < t_size; r++) outs[k][r] = t_empty();
    }
    int rc = tcoll_gather(&in, roots[k], NULL, outs[k]);
    T_EXPECT(rc == TCOLL_SUCCESS, "gather %d of one input (to %d): %s: %s", k, roots[k],
             tcoll_status_string(rc), tcoll_last_error());
  }
  for (int k = 0; k < 2; k++) {
    if (!outs[k]) continue;
    for (int r = 0; r < t_size; r++) {
      T_OK(tcoll_wait(outs[k][r].data));
      mv_check_fill("two gathers of one input", &outs[k][r], r, 0);
      tcoll_tensor_free(&outs[k][r]);
    }
    free(outs[k]);
  }
  T_OK(tcoll_wait(in.data));
  T_OK(tcoll_wait(in.data));
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending", tcoll_pending_count());
  tcoll_tensor_free(&in);
}
END_TEST

/* ---- scatter ---- */

static void scatter_case(tcoll_dtype_t dt, int ndim, const int64_t *shape, int src, bool prealloc,
                         tcoll_comm_t *comm, const int *tags) {
  tcoll_comm_t *c = comm ? comm : tcoll_comm_world();
  int size = tcoll_comm_size(c), me = tcoll_comm_rank(c);
  int stag = tags ? tags[src] : src;
  tcoll_tensor_t *ins = NULL;
  if (me == src) {
    ins = calloc((size_t)size, sizeof *ins);
    for (int r = 0; r < size; r++) {
      ins[r] = t_alloc(dt, ndim, shape);
      mv_fill(&ins[r], 16 * stag + r, 0);
    }
  }
  /* *out describes the piece: with data NULL its shape and device say what to allocate. */
  tcoll_tensor_t out =
      prealloc ? t_alloc(dt, ndim, shape) : tcoll_tensor_make(NULL, dt, ndim, shape, t_device());
  if (prealloc) mv_fill(&out, 300 + me, 0);
  char what[128];
  snprintf(what, sizeof what, "scatter %s from %d (%s, %d dims)", tcoll_dtype_name(dt), src,
           prealloc ? "preallocated" : "allocating", ndim);
  int rc = tcoll_scatter(ins, src, comm, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, ndim, shape, what);
    T_EXPECT(out.device == t_device(), "%s: out on device %d", what, out.device);
    mv_check_fill(what, &out, 16 * stag + me, 0);
  }
  if (ins) {
    for (int r = 0; r < size; r++) {
      mv_check_fill("scatter input afterwards", &ins[r], 16 * stag + r, 0);
      tcoll_tensor_free(&ins[r]);
    }
    free(ins);
  }
  if (out.data) tcoll_tensor_free(&out);
}

START_TEST(scatter_every_src) {
  for (int src = 0; src < t_size; src++)
    for (int k = 0; k < MV_NUM_DTYPES; k++) {
      const shape_case *s = &shapes[(k + src + 1) % N_SHAPES];
      scatter_case(mv_all_dtypes[k], s->ndim, s->shape, src, (k + src) % 2, NULL, NULL);
    }
}
END_TEST

START_TEST(scatter_zero_size) {
  int64_t z[3] = {2, 0, 2};
  for (int src = 0; src < t_size; src++)
    scatter_case(TCOLL_FLOAT16, 3, z, src, src % 2, NULL, NULL);
}
END_TEST

START_TEST(scatter_bad_arguments) {
  int64_t s[1] = {4}, w[1] = {5};
  tcoll_tensor_t out = tcoll_tensor_make(NULL, TCOLL_INT64, 1, s, t_device());
  char needle[96];
  snprintf(needle, sizeof needle, "src is %d (expected a rank in [0, %d))", t_size, t_size);
  T_FAILS(tcoll_scatter(NULL, t_size, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, needle);
  T_FAILS(tcoll_scatter(NULL, 0, NULL, NULL), TCOLL_ERR_INVALID_ARGUMENT, "out is NULL");
  tcoll_tensor_t neg = out;
  neg.shape[0] = -1;
  T_FAILS(tcoll_scatter(NULL, 0, NULL, &neg), TCOLL_ERR_INVALID_ARGUMENT, "out->shape[0] is -1");
  /* Errors only src can see: on a one-rank communicator. */
  tcoll_comm_t *self = mv_self_comm();
  if (self) {
    T_FAILS(tcoll_scatter(NULL, 0, self, &out), TCOLL_ERR_INVALID_ARGUMENT, "ins is NULL on src");
    tcoll_tensor_t in = t_alloc(TCOLL_INT64, 1, s);
    tcoll_tensor_t wrong = tcoll_tensor_make(NULL, TCOLL_INT64, 1, w, t_device());
    T_FAILS(tcoll_scatter(&in, 0, self, &wrong), TCOLL_ERR_INVALID_ARGUMENT,
            "out describes a different piece");
    tcoll_tensor_t wrong_dt = tcoll_tensor_make(NULL, TCOLL_INT32, 1, s, t_device());
    T_FAILS(tcoll_scatter(&in, 0, self, &wrong_dt), TCOLL_ERR_INVALID_ARGUMENT,
            "out describes a different piece");
    tcoll_tensor_t wrong_pre = t_alloc(TCOLL_INT64, 1, w);
    T_FAILS(tcoll_scatter(&in, 0, self, &wrong_pre), TCOLL_ERR_INVALID_ARGUMENT,
            "out->shape is [5] (expected [4])");
    tcoll_tensor_free(&wrong_pre);
    T_FAILS(tcoll_scatter(&in, 0, self, &in), TCOLL_ERR_INVALID_ARGUMENT, "overlaps");
    mv_fill(&in, 9, 0);
    T_OK(tcoll_scatter(&in, 0, self, &out));
    T_OK(tcoll_wait(out.data));
    mv_check_fill("one-rank scatter", &out, 9, 0);
    tcoll_tensor_free(&out);
    tcoll_tensor_free(&in);
    T_OK(tcoll_comm_free(&self));
  }
  T_EXPECT(tcoll_pending_count() == 0, "refused scatters left %zu pending", tcoll_pending_count());
}
END_TEST

/* Zero-size inputs may come without a buffer (data NULL): nothing may stay pending. */
START_TEST(zero_size_null_data) {
  int64_t z[2] = {0, 3};
  tcoll_tensor_t in = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 2, z, t_device());
  for (int root = 0; root < t_size; root++) {
    tcoll_tensor_t out = t_empty();
    T_OK(tcoll_broadcast(&in, root, NULL, &out));
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, 2, z, "broadcast of a NULL zero-size input");
    tcoll_tensor_free(&out);
    tcoll_tensor_t *outs = NULL;
    if (t_rank == root) {
      outs = calloc((size_t)t_size, sizeof *outs);
      for (int r = 0; r < t_size; r++) outs[r] = t_empty();
    }
    T_OK(tcoll_gather(&in, root, NULL, outs));
    if (outs) {
      for (int r = 0; r < t_size; r++) {
        T_OK(tcoll_wait(outs[r].data));
        MV_EXPECT_SHAPE(&outs[r], 2, z, "gather of NULL zero-size inputs");
        tcoll_tensor_free(&outs[r]);
      }
      free(outs);
    } else {
      T_OK(tcoll_wait(in.data));
    }
    T_EXPECT(tcoll_pending_count() == 0,
             "gather of NULL zero-size inputs to %d: %zu pending after the waits", root,
             tcoll_pending_count());
    tcoll_tensor_t *ins = NULL;
    if (t_rank == root) {
      ins = calloc((size_t)t_size, sizeof *ins);
      for (int r = 0; r < t_size; r++) ins[r] = in;
    }
    out = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 2, z, t_device());
    T_OK(tcoll_scatter(ins, root, NULL, &out));
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, 2, z, "scatter of NULL zero-size inputs");
    tcoll_tensor_free(&out);
    free(ins);
    T_EXPECT(tcoll_pending_count() == 0, "%zu pending", tcoll_pending_count());
    tcoll_wait_all(); /* so that one failure does not spill into the next root */
  }
}
END_TEST

/* Pending inputs of scatter (on src) and broadcast are waited for first; a pending output is
 * refused with TCOLL_ERR_BUSY. */
START_TEST(pending_inputs_and_busy_outputs) {
  int64_t s[1] = {4};
  for (int root = 0; root < t_size; root++) {
    tcoll_tensor_t *ins = calloc((size_t)t_size, sizeof *ins),
                   *mid = calloc((size_t)t_size, sizeof *mid);
    for (int r = 0; r < t_size; r++) {
      ins[r] = t_alloc(TCOLL_INT16, 1, s);
      mv_fill(&ins[r], 16 * t_rank + r, 0);
      mid[r] = t_empty();
    }
    /* mid[r] = ins[r] of rank `root` everywhere, pending */
    for (int r = 0; r < t_size; r++) T_OK(tcoll_broadcast(&ins[r], root, NULL, &mid[r]));
    tcoll_tensor_t out = tcoll_tensor_make(NULL, TCOLL_INT16, 1, s, t_device());
    T_OK(tcoll_scatter(t_rank == root ? mid : NULL, root, NULL, &out));
    T_FAILS(tcoll_broadcast(&ins[0], root, NULL, &out), TCOLL_ERR_BUSY, "pending");
    T_OK(tcoll_wait(out.data));
    mv_check_fill("scatter of pending inputs", &out, 16 * root + t_rank, 0);
    for (int r = 0; r < t_size; r++) {
      T_OK(tcoll_wait(mid[r].data));
      tcoll_tensor_free(&mid[r]);
      tcoll_tensor_free(&ins[r]);
    }
    tcoll_tensor_free(&out);
    free(ins);
    free(mid);
  }
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
    int64_t s[2] = {2, 3};
    for (int root = 0; root < n; root++) {
      bcast_case(TCOLL_FLOAT16, 2, s, root, root % 3, half, tags);
      gather_case(TCOLL_INT32, 2, s, root, root % 2, half, tags);
      scatter_case(TCOLL_BOOL, 2, s, root, !(root % 2), half, tags);
    }
    T_OK(tcoll_comm_free(&half));
  }
  int dims[2] = {t_size % 2 == 0 ? 2 : 1, t_size % 2 == 0 ? t_size / 2 : t_size};
  tcoll_mesh_t *mesh = NULL;
  T_OK(tcoll_mesh_create(tcoll_comm_world(), 2, dims, &mesh));
  if (mesh) {
    int c0 = tcoll_mesh_coord(mesh, 0), c1 = tcoll_mesh_coord(mesh, 1);
    for (int md = 0; md < 2; md++) {
      tcoll_comm_t *slice = tcoll_mesh_comm(mesh, md);
      T_EXPECT(slice != NULL, "mesh slice %d: %s", md, tcoll_last_error());
      if (!slice) continue;
      int n = dims[md], tags[8];
      for (int k = 0; k < n; k++) tags[k] = md == 0 ? k * dims[1] + c1 : c0 * dims[1] + k;
      int64_t s[1] = {5};
      bcast_case(TCOLL_BFLOAT16, 1, s, n - 1, IN_PLACE, slice, tags);
      gather_case(TCOLL_FLOAT64, 1, s, n - 1, false, slice, tags);
      scatter_case(TCOLL_INT8, 1, s, 0, true, slice, tags);
    }
    T_OK(tcoll_mesh_free(&mesh));
  }
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("broadcast");
  TCase *tc = t_tcase("broadcast");
  tcase_add_test(tc, broadcast_every_src);
  tcase_add_test(tc, broadcast_zero_size);
  tcase_add_test(tc, broadcast_bad_arguments);
  tcase_add_test(tc, broadcast_chained);
  tcase_add_test(tc, gather_every_dst);
  tcase_add_test(tc, gather_zero_size);
  tcase_add_test(tc, gather_bad_arguments);
  tcase_add_test(tc, gather_pending_input);
  tcase_add_test(tc, two_gathers_of_one_input);
  tcase_add_test(tc, scatter_every_src);
  tcase_add_test(tc, scatter_zero_size);
  tcase_add_test(tc, scatter_bad_arguments);
  tcase_add_test(tc, sub_communicators);
  tcase_add_test(tc, zero_size_null_data);
  tcase_add_test(tc, pending_inputs_and_busy_outputs);
  suite_add_tcase(s, tc);
  return s;
}
