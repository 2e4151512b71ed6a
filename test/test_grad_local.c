/* The differentiable single-process multi-device ops (seed 001: Broadcast <-> ReduceAddCoalesced,
 * Scatter <-> Gather) on 2 emulated devices plus the host:
 *   - the adjoint identity <A x, y> == <x, A^T y> with random float64 data, per process (these
 *     ops involve no other rank; every rank checks its own identity);
 *   - hand-computed small cases (closed forms): uneven and empty chunks, dims other than 0,
 *     the host among the devices, scalar gather, grad_inputs given or allocated;
 *   - bad arguments of the forwards and of tcoll_grad_backward.
 * Inputs of the adjoint tests start on t_device() (the host, or device 0 in the -dev variant). */
#include "grad_common.h"

#define TOL 1e-12

static const int devs[3] = {0, 1, TCOLL_HOST};

static tcoll_tensor_t on(int dev, tcoll_dtype_t dt, int ndim, const int64_t *shape) {
  tcoll_tensor_t t = t_empty();
  T_OK(tcoll_tensor_alloc(&t, dt, ndim, shape, dev));
  return t;
}

/* A tensor shaped and placed like t, random. */
static tcoll_tensor_t random_like(const tcoll_tensor_t *t, uint64_t seed) {
  tcoll_tensor_t r = on(t->device, t->dtype, t->ndim, t->shape);
  g_fill_random(&r, seed);
  return r;
}

static void free_all(tcoll_tensor_t *t, int n) {
  for (int i = 0; i < n; i++) tcoll_tensor_free(&t[i]);
}

static tcoll_tensor_t *empties(int n) {
  tcoll_tensor_t *l = calloc((size_t)n, sizeof *l);
  for (int i = 0; i < n; i++) l[i] = t_empty();
  return l;
}

/* Per process: <A x, y> == <x, A^T y>. */
#define L_EXPECT_ADJOINT(what, fwd, bwd)                                                         \
  do {                                                                                           \
    double l_f_ = (fwd), l_b_ = (bwd);                                                           \
    T_EXPECT(g_close(l_f_, l_b_, TOL), "%s: <Ax, y> = %.17g but <x, A^T y> = %.17g (diff %.3g)", \
             what, l_f_, l_b_, l_f_ - l_b_);                                                     \
  } while (0)

static void expect_like(const tcoll_tensor_t *t, const tcoll_tensor_t *want, const char *what,
                        int i) {
  bool same = t->dtype == want->dtype && t->ndim == want->ndim && t->device == want->device;
  for (int k = 0; same && k < t->ndim; k++) same = t->shape[k] == want->shape[k];
  T_EXPECT(same, "%s[%d]: dtype %s ndim %d device %d (expected %s ndim %d device %d, same shape)",
           what, i, tcoll_dtype_name(t->dtype), t->ndim, t->device, tcoll_dtype_name(want->dtype),
           want->ndim, want->device);
}

/* ------------------------------------------------------------------ adjoint identities */

/* Broadcast of three inputs (one on t_device(), one on device 1, one on the host: backward
 * reduces each on its own device) to device 0, the host, device 1 and device 0 again. */
START_TEST(adjoint_broadcast_coalesced) {
  enum { N = 3, ND = 4 };
  const int to[ND] = {0, TCOLL_HOST, 1, 0};
  int64_t s0[2] = {3, 4}, s1[1] = {5}, s2[3] = {2, 1, 3};
  tcoll_tensor_t x[N] = {on(t_device(), TCOLL_FLOAT64, 2, s0), on(1, TCOLL_FLOAT64, 1, s1),
                         on(TCOLL_HOST, TCOLL_FLOAT64, 3, s2)};
  for (int i = 0; i < N; i++) g_fill_random(&x[i], 11 + (uint64_t)i);
  tcoll_tensor_t *y = empties(N * ND), g[N * ND], *gx = empties(N);
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_local_broadcast_coalesced(x, N, to, ND, y, &node));
  for (int k = 0; k < N * ND; k++) g[k] = random_like(&y[k], 21 + (uint64_t)k);
  T_OK(tcoll_grad_backward(node, g, N * ND, gx, N));
  for (int i = 0; i < N; i++) expect_like(&gx[i], &x[i], "grad_inputs", i);
  T_EXPECT(tcoll_pending_count() == 0, "the local ops left %zu buffers pending",
           tcoll_pending_count());
  L_EXPECT_ADJOINT("local_broadcast_coalesced", g_list_dot(y, g, N * ND), g_list_dot(x, gx, N));
  tcoll_grad_node_free(node);
  free_all(x, N);
  free_all(g, N * ND);
  g_list_free(y, N * ND);
  g_list_free(gx, N);
}
END_TEST

/* Three groups of two on device 0, the host and device 1, reduced onto each destination. */
START_TEST(adjoint_reduce_add_coalesced) {
  enum { N = 2, ND = 3 };
  const int from[ND] = {0, TCOLL_HOST, 1};
  int64_t sa[2] = {4, 3}, sb[1] = {7};
  for (int k = 0; k < 3; k++) {
    int dst = devs[k];
    tcoll_tensor_t x[ND * N];
    for (int d = 0; d < ND; d++) {
      x[d * N + 0] = on(from[d], TCOLL_FLOAT64, 2, sa);
      x[d * N + 1] = on(from[d], TCOLL_FLOAT64, 1, sb);
      for (int i = 0; i < N; i++)
        g_fill_random(&x[d * N + i], 31 + 10 * (uint64_t)k + (uint64_t)(d * N + i));
    }
    tcoll_tensor_t *y = empties(N), g[N], *gx = empties(ND * N);
    tcoll_grad_node_t *node = NULL;
    T_OK(tcoll_grad_local_reduce_add_coalesced(x, ND, N, dst, y, &node));
    for (int i = 0; i < N; i++) {
      T_EXPECT(y[i].device == dst, "output %d on %d, expected %d", i, y[i].device, dst);
      g[i] = random_like(&y[i], 41 + 10 * (uint64_t)k + (uint64_t)i);
    }
    T_OK(tcoll_grad_backward(node, g, N, gx, ND * N));
    for (int j = 0; j < ND * N; j++) expect_like(&gx[j], &x[j], "grad_inputs", j);
    char what[64];
    snprintf(what, sizeof what, "local_reduce_add_coalesced to %d", dst);
    L_EXPECT_ADJOINT(what, g_list_dot(y, g, N), g_list_dot(x, gx, ND * N));
    tcoll_grad_node_free(node);
    free_all(x, ND * N);
    free_all(g, N);
    g_list_free(y, N);
    g_list_free(gx, ND * N);
  }
}
END_TEST

/* Scatter along dims 0, 1 and -1, torch.chunk sizes and uneven explicit ones with an empty
 * chunk, onto device 1, the host and device 0. */
START_TEST(adjoint_scatter) {
  enum { ND = 3 };
  const int to[ND] = {1, TCOLL_HOST, 0};
  int dims[3] = {0, 1, -1};
  int64_t shape[3] = {5, 7, 4};
  for (int k = 0; k < 3; k++) {
    for (int even = 0; even < 2; even++) {
      int d0 = dims[k] < 0 ? dims[k] + 3 : dims[k];
      int64_t len = shape[d0], sizes[ND] = {len - 1, 0, 1}; /* uneven, one empty */
      tcoll_tensor_t x = on(t_device(), TCOLL_FLOAT64, 3, shape), y[ND], g[ND], gx = t_empty();
      for (int i = 0; i < ND; i++) y[i] = t_empty();
      g_fill_random(&x, 51 + 2 * (uint64_t)k + (uint64_t)even);
      tcoll_grad_node_t *node = NULL;
      T_OK(tcoll_grad_local_scatter(&x, to, ND, even ? NULL : sizes, dims[k], y, &node));
      for (int i = 0; i < ND; i++)
        g[i] = random_like(&y[i], 61 + 10 * (uint64_t)k + 3 * (uint64_t)even + (uint64_t)i);
      T_OK(tcoll_grad_backward(node, g, ND, &gx, 1));
      expect_like(&gx, &x, "grad_inputs", 0);
      char what[64];
      snprintf(what, sizeof what, "local_scatter dim %d%s", dims[k],
               even ? " (torch.chunk)" : " (chunk_sizes)");
      L_EXPECT_ADJOINT(what, g_list_dot(y, g, ND), g_dot(&x, &gx));
      tcoll_grad_node_free(node);
      tcoll_tensor_free(&x);
      tcoll_tensor_free(&gx);
      free_all(y, ND);
      free_all(g, ND);
    }
  }
}
END_TEST

/* Gather of uneven pieces (on t_device(), the host and device 1) along dims 0, 1 and -1 onto
 * each target. */
START_TEST(adjoint_gather) {
  enum { N = 3 };
  const int from[N] = {TCOLL_HOST, 1, TCOLL_HOST};
  int dims[3] = {0, 1, -1};
  int64_t along[N] = {2, 0, 3};
  for (int k = 0; k < 3; k++) {
    for (int t = 0; t < 3; t++) {
      int d0 = dims[k] < 0 ? dims[k] + 3 : dims[k];
      tcoll_tensor_t x[N], y = t_empty(), g, *gx = empties(N);
      for (int i = 0; i < N; i++) {
        int64_t s[3] = {2, 3, 4};
        s[d0] = along[i];
        x[i] = on(i == 0 ? t_device() : from[i], TCOLL_FLOAT64, 3, s);
        g_fill_random(&x[i], 71 + 10 * (uint64_t)k + (uint64_t)i);
      }
      tcoll_grad_node_t *node = NULL;
      T_OK(tcoll_grad_local_gather(x, N, dims[k], devs[t], &y, &node));
      T_EXPECT(y.device == devs[t] && y.shape[d0] == 5, "gathered on %d with %lld along dim %d",
               y.device, (long long)y.shape[d0], d0);
      g = random_like(&y, 81 + 3 * (uint64_t)k + (uint64_t)t);
      T_OK(tcoll_grad_backward(node, &g, 1, gx, N));
      for (int i = 0; i < N; i++) expect_like(&gx[i], &x[i], "grad_inputs", i);
      char what[64];
      snprintf(what, sizeof what, "local_gather dim %d onto %d", dims[k], devs[t]);
      L_EXPECT_ADJOINT(what, g_dot(&y, &g), g_list_dot(x, gx, N));
      tcoll_grad_node_free(node);
      free_all(x, N);
      tcoll_tensor_free(&y);
      tcoll_tensor_free(&g);
      g_list_free(gx, N);
    }
  }
}
END_TEST

START_TEST(adjoint_gather_scalars) {
  enum { N = 3 };
  tcoll_tensor_t x[N], y = t_empty(), g, *gx = empties(N);
  for (int i = 0; i < N; i++) {
    x[i] = on(devs[i], TCOLL_FLOAT64, 0, NULL);
    g_fill_random(&x[i], 91 + (uint64_t)i);
  }
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_local_gather(x, N, 0, t_device(), &y, &node)); /* warns: a vector of 3 */
  T_EXPECT(y.ndim == 1 && y.shape[0] == N, "scalars gathered as ndim %d", y.ndim);
  g = random_like(&y, 95);
  T_OK(tcoll_grad_backward(node, &g, 1, gx, N));
  for (int i = 0; i < N; i++) expect_like(&gx[i], &x[i], "grad_inputs", i);
  L_EXPECT_ADJOINT("local_gather of scalars", g_dot(&y, &g), g_list_dot(x, gx, N));
  tcoll_grad_node_free(node);
  free_all(x, N);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&g);
  g_list_free(gx, N);
}
END_TEST

/* Exactly equal elements (same numel). */
static bool same_values(const tcoll_tensor_t *a, const tcoll_tensor_t *b) {
  int64_t n = tcoll_tensor_numel(a);
  if (n != tcoll_tensor_numel(b)) return false;
  double *va = malloc((size_t)(n ? n : 1) * sizeof *va),
         *vb = malloc((size_t)(n ? n : 1) * sizeof *vb);
  t_read(a, va);
  t_read(b, vb);
  bool same = n == 0 || memcmp(va, vb, (size_t)n * sizeof *va) == 0;
  free(va);
  free(vb);
  return same;
}

/* Composition: scatter then gather back is the identity, and so is its backward. */
START_TEST(adjoint_round_trip) {
  enum { ND = 3 };
  const int to[ND] = {TCOLL_HOST, 0, 1};
  int64_t shape[2] = {4, 9}, sizes[ND] = {2, 4, 3};
  tcoll_tensor_t x = on(t_device(), TCOLL_FLOAT64, 2, shape), mid[ND], y = t_empty(), g, gmid[ND],
                 gx = t_empty();
  for (int i = 0; i < ND; i++) mid[i] = gmid[i] = t_empty();
  g_fill_random(&x, 101);
  tcoll_grad_node_t *sc = NULL, *ga = NULL;
  T_OK(tcoll_grad_local_scatter(&x, to, ND, sizes, 1, mid, &sc));
  T_OK(tcoll_grad_local_gather(mid, ND, 1, x.device, &y, &ga));
  g = random_like(&y, 102);
  T_OK(tcoll_grad_backward(ga, &g, 1, gmid, ND));
  T_OK(tcoll_grad_backward(sc, gmid, ND, &gx, 1));
  L_EXPECT_ADJOINT("gather o scatter", g_dot(&y, &g), g_dot(&x, &gx));
  T_EXPECT(same_values(&y, &x) && same_values(&gx, &g),
           "gather o scatter and its backward are not the identity");
  tcoll_grad_node_free(sc);
  tcoll_grad_node_free(ga);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&g);
  tcoll_tensor_free(&gx);
  free_all(mid, ND);
  free_all(gmid, ND);
}
END_TEST

/* ------------------------------------------------------------------ hand-computed cases */

static double iota(int64_t i, void *c) { return (double)i + (c ? *(double *)c : 0.0); }

/* g[d*n + i] = (d + 1) (j + 1) + 10 i at element j; sum over 3 devices: 6 (j + 1) + 30 i. */
typedef struct bc {
  double d, i;
} bc_t;
static double bc_val(int64_t j, void *c) {
  return ((bc_t *)c)->d * (double)(j + 1) + 10.0 * ((bc_t *)c)->i;
}

START_TEST(cases_broadcast_coalesced) {
  enum { N = 2, ND = 3 };
  const int to[ND] = {1, TCOLL_HOST, 0};
  int64_t s0[2] = {2, 3}, s1[1] = {4};
  tcoll_tensor_t x[N] = {on(0, TCOLL_FLOAT32, 2, s0), on(TCOLL_HOST, TCOLL_INT64, 1, s1)};
  double off = 0.5;
  t_set_all(&x[0], iota, &off);
  t_set_all(&x[1], iota, NULL);
  tcoll_tensor_t *y = empties(N * ND), g[N * ND];
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_local_broadcast_coalesced(x, N, to, ND, y, &node));
  for (int d = 0; d < ND; d++) {
    T_EXPECT(y[d * N].device == to[d] && y[d * N + 1].device == to[d],
             "outputs of group %d misplaced", d);
    t_check_all("broadcast_coalesced forward", &y[d * N], iota, &off, 0);
    t_check_all("broadcast_coalesced forward", &y[d * N + 1], iota, NULL, 0);
    for (int i = 0; i < N; i++) {
      g[d * N + i] = on(to[d], x[i].dtype, x[i].ndim, x[i].shape);
      bc_t v = {d + 1, i};
      t_set_all(&g[d * N + i], bc_val, &v);
    }
  }
  /* grad_inputs: the first allocated, the second given */
  tcoll_tensor_t gx[N] = {t_empty(), on(TCOLL_HOST, TCOLL_INT64, 1, s1)};
  void *given = gx[1].data;
  T_OK(tcoll_grad_backward(node, g, N * ND, gx, N));
  T_EXPECT(gx[0].device == 0 && gx[0].dtype == TCOLL_FLOAT32 && gx[0].ndim == 2,
           "grad_inputs[0] misplaced");
  T_EXPECT(gx[1].data == given, "grad_inputs[1] (given) was replaced");
  for (int i = 0; i < N; i++) {
    bc_t want = {6, 3 * i};
    t_check_all("broadcast_coalesced backward: sum over the devices", &gx[i], bc_val, &want, 0);
  }
  tcoll_grad_node_free(node);
  free_all(x, N);
  free_all(gx, N);
  free_all(g, N * ND);
  g_list_free(y, N * ND);
}
END_TEST

START_TEST(cases_reduce_add_coalesced) {
  enum { N = 2, ND = 3 };
  const int from[ND] = {TCOLL_HOST, 1, 0};
  int64_t sa[1] = {6}, sb[2] = {2, 2};
  tcoll_tensor_t x[ND * N];
  for (int d = 0; d < ND; d++) {
    x[d * N] = on(from[d], TCOLL_FLOAT64, 1, sa);
    x[d * N + 1] = on(from[d], TCOLL_FLOAT32, 2, sb);
    for (int i = 0; i < N; i++) {
      bc_t v = {d + 1, i};
      t_set_all(&x[d * N + i], bc_val, &v);
    }
  }
  tcoll_tensor_t *y = empties(N), g[N], *gx = empties(ND * N);
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_local_reduce_add_coalesced(x, ND, N, 1, y, &node));
  for (int i = 0; i < N; i++) {
    bc_t want = {6, 3 * i};
    t_check_all("reduce_add_coalesced forward", &y[i], bc_val, &want, 0);
    g[i] = on(1, x[i].dtype, x[i].ndim, x[i].shape);
    double o = 7.0 * i;
    t_set_all(&g[i], iota, &o);
  }
  free_all(x, ND * N); /* backward reads nothing of the forward's tensors */
  T_OK(tcoll_grad_backward(node, g, N, gx, ND * N));
  for (int d = 0; d < ND; d++)
    for (int i = 0; i < N; i++) {
      tcoll_tensor_t *t = &gx[d * N + i];
      T_EXPECT(t->device == from[d] && t->dtype == (i ? TCOLL_FLOAT32 : TCOLL_FLOAT64),
               "grad_inputs[%d] misplaced", d * N + i);
      double o = 7.0 * i;
      t_check_all("reduce_add_coalesced backward: a copy per group", t, iota, &o, 0);
    }
  tcoll_grad_node_free(node);
  free_all(g, N);
  g_list_free(y, N);
  g_list_free(gx, ND * N);
}
END_TEST

/* [2, 5, 3] scattered along dim 1 in chunks {3, 0, 2}; g[i] = 1000 i + its own flat index. */
typedef struct chunks {
  int64_t outer, len, inner;
  const int64_t *sizes;
  int n;
  double scale; /* per chunk offset */
} chunks_t;
/* The value at flat index e of the concatenation of the pieces along dim, piece i holding
 * scale * i + its own flat index. */
static double cat_val(int64_t e, void *c) {
  const chunks_t *k = c;
  int64_t a = e / (k->len * k->inner), b = (e / k->inner) % k->len, in = e % k->inner, start = 0;
  int i = 0;
  while (b >= start + k->sizes[i]) start += k->sizes[i++];
  return k->scale * i + (double)((a * k->sizes[i] + (b - start)) * k->inner + in);
}

START_TEST(cases_scatter_uneven_dim1) {
  enum { ND = 3 };
  const int to[ND] = {TCOLL_HOST, 1, 0};
  int64_t shape[3] = {2, 5, 3}, sizes[ND] = {3, 0, 2};
  tcoll_tensor_t x = on(TCOLL_HOST, TCOLL_FLOAT64, 3, shape), y[ND], g[ND], gx = t_empty();
  t_set_all(&x, iota, NULL);
  for (int i = 0; i < ND; i++) y[i] = t_empty();
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_local_scatter(&x, to, ND, sizes, 1, y, &node));
  for (int i = 0; i < ND; i++) {
    T_EXPECT(y[i].device == to[i] && y[i].shape[0] == 2 && y[i].shape[1] == sizes[i] &&
                 y[i].shape[2] == 3,
             "piece %d misplaced", i);
    g[i] = on(to[i], TCOLL_FLOAT64, 3, y[i].shape);
    double o = 1000.0 * i;
    t_set_all(&g[i], iota, &o);
  }
  T_OK(tcoll_grad_backward(node, g, ND, &gx, 1));
  T_EXPECT(gx.device == TCOLL_HOST && gx.ndim == 3 && gx.shape[1] == 5, "grad_inputs[0] misplaced");
  chunks_t c = {2, 5, 3, sizes, ND, 1000.0};
  t_check_all("scatter backward: the grads concatenated along dim 1", &gx, cat_val, &c, 0);
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&gx);
  free_all(y, ND);
  free_all(g, ND);
}
END_TEST

/* Pieces [2, 1, 3], [2, 4, 3], [2, 2, 3] gathered along dim -2 onto device 0; g = iota. */
START_TEST(cases_gather_dim_minus2) {
  enum { N = 3 };
  const int from[N] = {1, TCOLL_HOST, 0};
  int64_t sizes[N] = {1, 4, 2};
  tcoll_tensor_t x[N], y = t_empty(), g, gx[N];
  for (int i = 0; i < N; i++) {
    int64_t s[3] = {2, sizes[i], 3};
    x[i] = on(from[i], TCOLL_FLOAT32, 3, s);
    double o = 100.0 * i;
    t_set_all(&x[i], iota, &o);
    gx[i] = t_empty();
  }
  gx[1] = on(TCOLL_HOST, TCOLL_FLOAT32, 3, x[1].shape); /* one given */
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_local_gather(x, N, -2, 0, &y, &node));
  T_EXPECT(y.device == 0 && y.shape[0] == 2 && y.shape[1] == 7 && y.shape[2] == 3,
           "gathered shape");
  chunks_t fwd = {2, 7, 3, sizes, N, 100.0};
  t_check_all("gather forward along dim -2", &y, cat_val, &fwd, 0);
  g = on(0, TCOLL_FLOAT32, 3, y.shape);
  t_set_all(&g, iota, NULL);
  T_OK(tcoll_grad_backward(node, &g, 1, gx, N));
  int64_t start = 0;
  for (int i = 0; i < N; i++) {
    T_EXPECT(gx[i].device == from[i] && gx[i].shape[1] == sizes[i], "grad_inputs[%d] misplaced", i);
    /* element (a, b, c) of piece i is g at (a, start + b, c) = (7a + start + b) 3 + c */
    int64_t n = tcoll_tensor_numel(&gx[i]);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    t_read(&gx[i], v);
    int bad = 0;
    for (int64_t e = 0; e < n; e++) {
      int64_t a = e / (sizes[i] * 3), b = (e / 3) % sizes[i], c = e % 3;
      bad += v[e] != (double)((7 * a + start + b) * 3 + c);
    }
    T_EXPECT(bad == 0, "gather backward: grad_inputs[%d] has %d wrong elements", i, bad);
    free(v);
    start += sizes[i];
  }
  tcoll_grad_node_free(node);
  free_all(x, N);
  free_all(gx, N);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&g);
}
END_TEST

/* Scalars on device 0, device 1 and the host gathered onto the host as a vector (with the
 * warning); backward hands each a scalar again. */
START_TEST(cases_gather_scalars) {
  enum { N = 3 };
  tcoll_tensor_t x[N], y = t_empty(), gx[N];
  for (int i = 0; i < N; i++) {
    x[i] = on(devs[i], TCOLL_FLOAT64, 0, NULL);
    double v = 10.0 * (i + 1);
    t_set_all(&x[i], iota, &v);
    gx[i] = t_empty();
  }
  gx[2] = on(TCOLL_HOST, TCOLL_FLOAT64, 0, NULL); /* given: a scalar */
  void *given = gx[2].data;
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_local_gather(x, N, 0, TCOLL_HOST, &y, &node));
  T_EXPECT(y.ndim == 1 && y.shape[0] == N && y.device == TCOLL_HOST, "scalars gathered as ndim %d",
           y.ndim);
  for (int i = 0; i < N; i++)
    T_EXPECT(t_get(&y, i) == 10.0 * (i + 1), "y[%d] is %g", i, t_get(&y, i));
  tcoll_tensor_t g = on(TCOLL_HOST, TCOLL_FLOAT64, 1, y.shape);
  double five = 5;
  t_set_all(&g, iota, &five);
  T_OK(tcoll_grad_backward(node, &g, 1, gx, N));
  T_EXPECT(gx[2].data == given, "the given scalar grad_input was replaced");
  for (int i = 0; i < N; i++) {
    T_EXPECT(gx[i].ndim == 0 && gx[i].device == devs[i],
             "grad_inputs[%d]: ndim %d device %d (expected a scalar on %d)", i, gx[i].ndim,
             gx[i].device, devs[i]);
    T_EXPECT(t_get(&gx[i], 0) == 5.0 + i, "grad_inputs[%d] is %g, expected %g", i, t_get(&gx[i], 0),
             5.0 + i);
  }
  tcoll_grad_node_free(node);
  free_all(x, N);
  free_all(gx, N);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&g);
}
END_TEST

/* A node serves several backward calls; n == 0 forwards give nodes with nothing to do. */
START_TEST(cases_reuse_and_empty) {
  int64_t s[1] = {3};
  tcoll_tensor_t x = on(0, TCOLL_FLOAT64, 1, s), y[2] = {t_empty(), t_empty()}, g[2];
  t_set_all(&x, iota, NULL);
  const int to[2] = {TCOLL_HOST, 1};
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_local_broadcast_coalesced(&x, 1, to, 2, y, &node));
  for (int d = 0; d < 2; d++) g[d] = on(to[d], TCOLL_FLOAT64, 1, s);
  for (int rep = 0; rep < 2; rep++) {
    for (int d = 0; d < 2; d++) {
      double o = 10.0 * d + rep;
      t_set_all(&g[d], iota, &o);
    }
    tcoll_tensor_t gx = t_empty();
    T_OK(tcoll_grad_backward(node, g, 2, &gx, 1));
    double o = 5.0 + rep; /* (i + rep) + (i + 10 + rep) = 2 i + 10 + 2 rep */
    for (int64_t i = 0; i < 3; i++)
      T_EXPECT(t_get(&gx, i) == 2.0 * (double)i + 2.0 * o, "backward %d: element %lld is %g", rep,
               (long long)i, t_get(&gx, i));
    tcoll_tensor_free(&gx);
  }
  tcoll_grad_node_free(node);
  free_all(y, 2);
  free_all(g, 2);
  tcoll_tensor_free(&x);
  /* nothing to broadcast or reduce */
  tcoll_grad_node_t *e1 = NULL, *e2 = NULL;
  T_OK(tcoll_grad_local_broadcast_coalesced(NULL, 0, devs, 3, NULL, &e1));
  T_OK(tcoll_grad_local_reduce_add_coalesced(NULL, 2, 0, 0, NULL, &e2));
  T_EXPECT(e1 && e2, "n == 0 forwards gave no node");
  if (e1) T_OK(tcoll_grad_backward(e1, NULL, 0, NULL, 0));
  if (e2) T_OK(tcoll_grad_backward(e2, NULL, 0, NULL, 0));
  tcoll_grad_node_free(e1);
  tcoll_grad_node_free(e2);
}
END_TEST

/* ------------------------------------------------------------------ errors */

START_TEST(bad_arguments) {
  int64_t s6[1] = {6}, s5[1] = {5}, s3[1] = {3};
  tcoll_tensor_t a = on(0, TCOLL_FLOAT32, 1, s6), b = on(1, TCOLL_FLOAT32, 1, s5);
  tcoll_tensor_t out[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
  tcoll_grad_node_t *node = (tcoll_grad_node_t *)&a; /* must come back NULL */
  int bad_devs[2] = {0, 7};
  /* forwards: the plain ops' checks, plus node */
  T_FAILS(tcoll_grad_local_scatter(&a, devs, 2, NULL, 0, out, NULL), TCOLL_ERR_INVALID_ARGUMENT,
          "node is NULL");
  T_FAILS(tcoll_grad_local_broadcast_coalesced(&a, 1, devs, 0, out, &node),
          TCOLL_ERR_INVALID_ARGUMENT, "n_devices is 0");
  T_EXPECT(node == NULL, "a failed forward left *node set");
  T_FAILS(tcoll_grad_local_broadcast_coalesced(&a, -1, devs, 2, out, &node),
          TCOLL_ERR_INVALID_ARGUMENT, "n is -1");
  T_FAILS(tcoll_grad_local_broadcast_coalesced(&a, 1, bad_devs, 2, out, &node),
          TCOLL_ERR_INVALID_ARGUMENT, "devices[1] is 7 but device 7 does not exist");
  tcoll_tensor_t ab[2] = {a, b};
  T_FAILS(tcoll_grad_local_reduce_add_coalesced(ab, 2, 1, 0, out, &node),
          TCOLL_ERR_INVALID_ARGUMENT, "in[1]->shape is [5]");
  T_FAILS(tcoll_grad_local_reduce_add_coalesced(ab, 0, 1, 0, out, &node),
          TCOLL_ERR_INVALID_ARGUMENT, "n_devices is 0");
  T_FAILS(tcoll_grad_local_reduce_add_coalesced(&a, 1, 1, 9, out, &node),
          TCOLL_ERR_INVALID_ARGUMENT, "destination is 9");
  int64_t sizes[2] = {2, 3};
  T_FAILS(tcoll_grad_local_scatter(&a, devs, 2, sizes, 0, out, &node), TCOLL_ERR_INVALID_ARGUMENT,
          "chunk_sizes sum to 5");
  T_FAILS(tcoll_grad_local_scatter(&a, devs, 2, NULL, 1, out, &node), TCOLL_ERR_INVALID_ARGUMENT,
          "dim is 1");
  T_FAILS(tcoll_grad_local_scatter(&a, devs, 0, NULL, 0, out, &node), TCOLL_ERR_INVALID_ARGUMENT,
          "n_devices is 0");
  int64_t s23[2] = {2, 3}, s24[2] = {2, 4};
  tcoll_tensor_t m[2] = {on(0, TCOLL_FLOAT32, 2, s23), on(1, TCOLL_FLOAT32, 2, s24)};
  T_FAILS(tcoll_grad_local_gather(m, 2, 0, TCOLL_HOST, out, &node), TCOLL_ERR_INVALID_ARGUMENT,
          "in[1]->shape[1] is 4");
  T_FAILS(tcoll_grad_local_gather(m, 0, 0, TCOLL_HOST, out, &node), TCOLL_ERR_INVALID_ARGUMENT,
          "n is 0");
  T_FAILS(tcoll_grad_local_gather(m, 2, 1, 3, out, &node), TCOLL_ERR_INVALID_ARGUMENT,
          "target_device is 3");
  T_EXPECT(node == NULL, "a failed forward left *node set");
  for (int i = 0; i < 4; i++)
    T_EXPECT(out[i].data == NULL, "a failed forward allocated out[%d]", i);

  /* backward of a scatter of a (6 on device 0) into 3 + 3 on devices 0 and 1 */
  T_OK(tcoll_grad_local_scatter(&a, devs, 2, NULL, 0, out, &node));
  tcoll_tensor_t g[2] = {on(0, TCOLL_FLOAT32, 1, s3), on(1, TCOLL_FLOAT32, 1, s3)}, gx = t_empty();
  T_FAILS(tcoll_grad_backward(node, g, 1, &gx, 1), TCOLL_ERR_INVALID_ARGUMENT,
          "n_grad_outputs is 1 (expected 2 for local_scatter)");
  T_FAILS(tcoll_grad_backward(node, g, 2, &gx, 2), TCOLL_ERR_INVALID_ARGUMENT,
          "n_grad_inputs is 2");
  tcoll_tensor_t swapped[2] = {g[1], g[0]};
  T_FAILS(tcoll_grad_backward(node, swapped, 2, &gx, 1), TCOLL_ERR_INVALID_ARGUMENT,
          "grad_outputs[0]->device is 1");
  tcoll_tensor_t wrong_dev = on(TCOLL_HOST, TCOLL_FLOAT32, 1, s6),
                 wrong_dt = on(0, TCOLL_FLOAT64, 1, s6);
  T_FAILS(tcoll_grad_backward(node, g, 2, &wrong_dev, 1), TCOLL_ERR_INVALID_ARGUMENT,
          "grad_inputs[0]->device is -1");
  T_FAILS(tcoll_grad_backward(node, g, 2, &wrong_dt, 1), TCOLL_ERR_INVALID_ARGUMENT,
          "grad_inputs[0]->dtype is float64");
  /* a grad_input overlapping a grad_output */
  tcoll_tensor_t big = on(0, TCOLL_FLOAT32, 1, s6), g_in_big[2] = {big, g[1]};
  g_in_big[0].shape[0] = 3;
  T_FAILS(tcoll_grad_backward(node, g_in_big, 2, &big, 1), TCOLL_ERR_INVALID_ARGUMENT, "overlaps");
  T_EXPECT(gx.data == NULL, "a failed backward allocated grad_inputs[0]");
  tcoll_grad_node_free(node);
  node = NULL;

  /* backward of a scalar gather: grad_inputs are scalars, not [1] */
  tcoll_tensor_t sc[2] = {on(0, TCOLL_FLOAT64, 0, NULL), on(TCOLL_HOST, TCOLL_FLOAT64, 0, NULL)},
                 v = t_empty();
  T_OK(tcoll_grad_local_gather(sc, 2, 0, 1, &v, &node));
  int64_t one[1] = {1}, two[1] = {2};
  tcoll_tensor_t gv = on(1, TCOLL_FLOAT64, 1, two),
                 notscalar[2] = {on(0, TCOLL_FLOAT64, 1, one), t_empty()};
  T_FAILS(tcoll_grad_backward(node, &gv, 1, notscalar, 2), TCOLL_ERR_INVALID_ARGUMENT,
          "grad_inputs[0]->shape is [1]");
  T_EXPECT(notscalar[1].data == NULL, "a failed backward allocated grad_inputs[1]");
  tcoll_grad_node_free(node);

  T_EXPECT(tcoll_pending_count() == 0, "%zu buffers pending", tcoll_pending_count());
  free_all(m, 2);
  free_all(out, 4);
  free_all(g, 2);
  free_all(sc, 2);
  free_all(notscalar, 2);
  tcoll_tensor_free(&gv);
  tcoll_tensor_free(&v);
  tcoll_tensor_free(&wrong_dev);
  tcoll_tensor_free(&wrong_dt);
  tcoll_tensor_free(&big);
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&b);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("grad_local");
  if (tcoll_device_count() < 2) { /* a machine with one GPU: the cuda suite covers its local ops */
    if (t_rank == 0)
      printf("grad_local: needs 2 devices, %d here: nothing to run\n", tcoll_device_count());
    return s;
  }
  TCase *adj = t_tcase("adjoint");
  tcase_add_test(adj, adjoint_broadcast_coalesced);
  tcase_add_test(adj, adjoint_reduce_add_coalesced);
  tcase_add_test(adj, adjoint_scatter);
  tcase_add_test(adj, adjoint_gather);
  tcase_add_test(adj, adjoint_gather_scalars);
  tcase_add_test(adj, adjoint_round_trip);
  suite_add_tcase(s, adj);
  TCase *cases = t_tcase("cases");
  tcase_add_test(cases, cases_broadcast_coalesced);
  tcase_add_test(cases, cases_reduce_add_coalesced);
  tcase_add_test(cases, cases_scatter_uneven_dim1);
  tcase_add_test(cases, cases_gather_dim_minus2);
  tcase_add_test(cases, cases_gather_scalars);
  tcase_add_test(cases, cases_reuse_and_empty);
  tcase_add_test(cases, bad_arguments);
  suite_add_tcase(s, cases);
  return s;
}
