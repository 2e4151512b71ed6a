/* Hand-computed small cases for every differentiable collective (forward values and gradients
 * in closed form, exact), and the API around them: argument errors, BUSY, asynchrony (grads
 * pending until waited), node lifetime, a node used twice, in place, freed communicators. */
#include "grad_common.h"

/* ---- closed forms: value functions of (element index, context) ---- */

typedef struct {
  double a, b, c; /* v(i) = a + b * i, or as documented per use */
  int rank;
} lin_t;
static double lin(int64_t i, void *ctx) {
  lin_t *l = ctx;
  return l->a + l->b * (double)i;
}
static void fill_lin(tcoll_tensor_t *t, double a, double b) {
  lin_t l = {a, b, 0, 0};
  t_set_all(t, lin, &l);
}
static int check_lin(const char *what, const tcoll_tensor_t *t, double a, double b, double tol) {
  lin_t l = {a, b, 0, 0};
  return t_check_all(what, t, lin, &l, tol);
}
static double tri(int n) { return (double)n * (n + 1) / 2; } /* 1 + ... + n */

#define FREE_ALL(...)                                                                   \
  do {                                                                                  \
    tcoll_tensor_t *f_[] = {__VA_ARGS__};                                               \
    for (size_t k_ = 0; k_ < sizeof f_ / sizeof f_[0]; k_++) tcoll_tensor_free(f_[k_]); \
  } while (0)

START_TEST(case_broadcast) {
  int src = t_size - 1;
  tcoll_tensor_t x = g_t1(TCOLL_FLOAT32, 4), y = t_empty(), g = g_t1(TCOLL_FLOAT32, 4),
                 gx = g_t1(TCOLL_FLOAT32, 4);
  fill_lin(&x, 10.0 * t_rank, 1);
  fill_lin(&g, t_rank + 1, 1);
  fill_lin(&gx, 7, 0); /* a caller's buffer: overwritten (zeros off src) */
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_broadcast(&x, src, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  check_lin("broadcast y", &y, 10.0 * src, 1, 0);
  T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  if (t_rank == src)
    check_lin("broadcast grad on src", &gx, tri(t_size), t_size, 0); /* sum_r (r + 1 + i) */
  else
    check_lin("broadcast grad off src", &gx, 0, 0, 0);
  tcoll_grad_node_free(node);
  FREE_ALL(&x, &y, &g, &gx);
}
END_TEST

START_TEST(case_reduce) {
  tcoll_redop_t pm;
  T_OK(tcoll_redop_create_premul_sum(2.0, &pm));
  tcoll_redop_t ops[3] = {TCOLL_SUM, TCOLL_AVG, pm};
  double scale[3] = {1.0, 1.0 / t_size, 2.0};
  int dst = 0;
  for (int k = 0; k < 3; k++) {
    tcoll_tensor_t x = g_t1(TCOLL_FLOAT32, 3), y = t_empty(), g = g_t1(TCOLL_FLOAT32, 3),
                   gx = t_empty();
    fill_lin(&x, t_rank + 1, 1);
    if (t_rank == dst)
      fill_lin(&g, 1, 1);
    else
      fill_lin(&g, 99, 0); /* ignored: y off dst is not a function of x */
    tcoll_grad_node_t *node = NULL;
    T_OK(tcoll_grad_reduce(&x, dst, ops[k], NULL, &y, &node));
    T_OK(tcoll_wait(y.data));
    if (t_rank == dst)
      check_lin("reduce y", &y, tri(t_size) * scale[k], t_size * scale[k], 1e-6);
    else
      check_lin("reduce y off dst (untouched)", &y, 0, 0, 0);
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    check_lin("reduce grad", &gx, scale[k], scale[k], 1e-6);
    tcoll_grad_node_free(node);
    FREE_ALL(&x, &y, &g, &gx);
  }
  T_OK(tcoll_redop_destroy(pm));
}
END_TEST

START_TEST(case_gather) {
  int dst = t_size / 2;
  tcoll_tensor_t x = g_t1(TCOLL_FLOAT64, 3), gx = t_empty();
  tcoll_tensor_t *ys = g_list(t_size, &x, true), *g = NULL;
  fill_lin(&x, 100.0 * t_rank, 1);
  for (int r = 0; r < t_size; r++) fill_lin(&ys[r], 5, 0); /* off dst: overwritten with zeros */
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_gather(&x, dst, NULL, ys, &node));
  g_wait_list(ys, t_size);
  for (int r = 0; r < t_size; r++) {
    if (t_rank == dst)
      check_lin("gather ys on dst", &ys[r], 100.0 * r, 1, 0);
    else
      check_lin("gather ys off dst", &ys[r], 0, 0, 0);
  }
  if (t_rank == dst) { /* off dst: no grad_outputs at all */
    g = g_list(t_size, &x, true);
    for (int r = 0; r < t_size; r++) fill_lin(&g[r], 1000 + 10.0 * r, 1);
  }
  T_OK(tcoll_grad_backward(node, g, g ? t_size : 0, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  check_lin("gather grad", &gx, 1000 + 10.0 * t_rank, 1, 0);
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&gx);
  g_list_free(ys, t_size);
  g_list_free(g, t_size);

  /* ys NULL off dst: the work is keyed on x there, as for tcoll_gather */
  tcoll_tensor_t *ys2 = t_rank == dst ? g_list(t_size, &x, false) : NULL;
  T_OK(tcoll_grad_gather(&x, dst, NULL, ys2, &node));
  if (ys2)
    g_wait_list(ys2, t_size);
  else
    T_OK(tcoll_wait(x.data));
  for (int r = 0; ys2 && r < t_size; r++) check_lin("gather ys (second)", &ys2[r], 100.0 * r, 1, 0);
  tcoll_grad_node_free(node);
  g_list_free(ys2, t_size);
  tcoll_tensor_free(&x);
}
END_TEST

START_TEST(case_scatter) {
  int src = 0;
  int64_t shape[1] = {4};
  tcoll_tensor_t proto = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, shape, t_device());
  tcoll_tensor_t *xs = t_rank == src ? g_list(t_size, &proto, true) : NULL;
  for (int r = 0; xs && r < t_size; r++) fill_lin(&xs[r], 7.0 * r, 1);
  tcoll_tensor_t y = proto, g = g_t1(TCOLL_FLOAT32, 4);
  fill_lin(&g, -t_rank, 2);
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_scatter(xs, src, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  check_lin("scatter y", &y, 7.0 * t_rank, 1, 0);
  /* with grad_inputs everywhere (zeros off src) */
  tcoll_tensor_t *gxs = g_list(t_size, &proto, true);
  for (int r = 0; r < t_size; r++) fill_lin(&gxs[r], 3, 3);
  T_OK(tcoll_grad_backward(node, &g, 1, gxs, t_size));
  g_wait_list(gxs, t_size);
  for (int r = 0; r < t_size; r++) {
    if (t_rank == src)
      check_lin("scatter grad on src", &gxs[r], -r, 2, 0);
    else
      check_lin("scatter grad off src", &gxs[r], 0, 0, 0);
  }
  g_list_free(gxs, t_size);
  /* without grad_inputs off src: the work is keyed on grad_outputs[0] there */
  gxs = t_rank == src ? g_list(t_size, &proto, false) : NULL;
  T_OK(tcoll_grad_backward(node, &g, 1, gxs, gxs ? t_size : 0));
  if (gxs)
    g_wait_list(gxs, t_size);
  else
    T_OK(tcoll_wait(g.data));
  for (int r = 0; gxs && r < t_size; r++)
    check_lin("scatter grad on src (second)", &gxs[r], -r, 2, 0);
  g_list_free(gxs, t_size);
  tcoll_grad_node_free(node);
  g_list_free(xs, t_size);
  FREE_ALL(&y, &g);
}
END_TEST

START_TEST(case_all_gather) {
  tcoll_tensor_t x = g_t1(TCOLL_FLOAT32, 3), gx = t_empty();
  tcoll_tensor_t *ys = g_list(t_size, &x, false), *g = g_list(t_size, &x, true);
  fill_lin(&x, 10.0 * t_rank, 1);
  for (int s = 0; s < t_size; s++) fill_lin(&g[s], t_rank + 100.0 * s, 1);
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_all_gather(&x, NULL, ys, &node));
  g_wait_list(ys, t_size);
  for (int s = 0; s < t_size; s++) check_lin("all_gather ys", &ys[s], 10.0 * s, 1, 0);
  T_OK(tcoll_grad_backward(node, g, t_size, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  /* sum_r (r + 100 s + i) for s = my rank */
  check_lin("all_gather grad", &gx, tri(t_size - 1) + t_size * 100.0 * t_rank, t_size, 0);
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&gx);
  g_list_free(ys, t_size);
  g_list_free(g, t_size);
}
END_TEST

/* [2, 3] per rank, gathered along dim 1 into [2, 3 * size]. */
static double agt_x(int64_t e, void *ctx) {
  return 100.0 * *(int *)ctx + (double)e;
} /* e = 3a + b */
static double agt_y(int64_t e, void *ctx) {
  (void)ctx;
  int64_t a = e / (3 * t_size), c = e % (3 * t_size), s = c / 3, b = c % 3;
  return 100.0 * (double)s + 3.0 * (double)a + (double)b;
}
static double agt_g(int64_t e, void *ctx) { /* g_r[a, c] = r + c + 10 a */
  (void)ctx;
  int64_t a = e / (3 * t_size), c = e % (3 * t_size);
  return t_rank + (double)c + 10.0 * (double)a;
}
static double agt_gx(int64_t e, void *ctx) { /* sum_r (r + 3 s + b + 10 a), s = my rank */
  (void)ctx;
  int64_t a = e / 3, b = e % 3;
  return tri(t_size - 1) + t_size * (3.0 * t_rank + (double)b + 10.0 * (double)a);
}

START_TEST(case_all_gather_into_tensor) {
  tcoll_tensor_t x = g_t2(TCOLL_FLOAT32, 2, 3), y = t_empty(), gx = t_empty();
  t_set_all(&x, agt_x, &t_rank);
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_all_gather_into_tensor(&x, -1, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  T_EXPECT(y.shape[0] == 2 && y.shape[1] == 3 * t_size, "y shape");
  t_check_all("all_gather_into_tensor y", &y, agt_y, NULL, 0);
  tcoll_tensor_t g = t_alloc(TCOLL_FLOAT32, 2, y.shape);
  t_set_all(&g, agt_g, NULL);
  T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  t_check_all("all_gather_into_tensor grad", &gx, agt_gx, NULL, 0);
  tcoll_grad_node_free(node);
  FREE_ALL(&x, &y, &g, &gx);
}
END_TEST

START_TEST(case_reduce_scatter) {
  int64_t shape[1] = {2};
  tcoll_tensor_t proto = tcoll_tensor_make(NULL, TCOLL_FLOAT64, 1, shape, t_device());
  for (int avg = 0; avg < 2; avg++) {
    double sc = avg ? 1.0 / t_size : 1.0;
    tcoll_tensor_t *xs = g_list(t_size, &proto, true), *gxs = g_list(t_size, &proto, false);
    for (int j = 0; j < t_size; j++) fill_lin(&xs[j], t_rank + 10.0 * j, 1);
    tcoll_tensor_t y = t_empty(), g = g_t1(TCOLL_FLOAT64, 2);
    fill_lin(&g, t_rank + 1, 1);
    tcoll_grad_node_t *node = NULL;
    T_OK(tcoll_grad_reduce_scatter(xs, avg ? TCOLL_AVG : TCOLL_SUM, NULL, &y, &node));
    T_OK(tcoll_wait(y.data));
    check_lin("reduce_scatter y", &y, (tri(t_size - 1) + t_size * 10.0 * t_rank) * sc, t_size * sc,
              1e-14);
    T_OK(tcoll_grad_backward(node, &g, 1, gxs, t_size));
    g_wait_list(gxs, t_size);
    for (int r = 0; r < t_size; r++)
      check_lin("reduce_scatter grad", &gxs[r], (r + 1) * sc, sc, 1e-14);
    tcoll_grad_node_free(node);
    g_list_free(xs, t_size);
    g_list_free(gxs, t_size);
    FREE_ALL(&y, &g);
  }
}
END_TEST

/* x_r: [2, 2 size], x_r[a, c] = r + c + 10 a; scattered along dim 1 into [2, 2]. */
static double rst_x(int64_t e, void *ctx) {
  (void)ctx;
  int64_t a = e / (2 * t_size), c = e % (2 * t_size);
  return t_rank + (double)c + 10.0 * (double)a;
}
static double rst_y(int64_t e, void *ctx) {
  (void)ctx;
  int64_t a = e / 2, b = e % 2;
  return tri(t_size - 1) + t_size * (2.0 * t_rank + (double)b + 10.0 * (double)a);
}
static double rst_g(int64_t e, void *ctx) {
  (void)ctx;
  return 100.0 * t_rank + (double)e; /* e = 2a + b: g_s[a, b] = 100 s + 2a + b */
}
static double rst_gx(int64_t e, void *ctx) {
  (void)ctx;
  int64_t a = e / (2 * t_size), c = e % (2 * t_size), s = c / 2, b = c % 2;
  return 100.0 * (double)s + 2.0 * (double)a + (double)b;
}

START_TEST(case_reduce_scatter_tensor) {
  tcoll_tensor_t x = g_t2(TCOLL_FLOAT32, 2, 2 * t_size), y = t_empty(),
                 g = g_t2(TCOLL_FLOAT32, 2, 2), gx = t_empty();
  t_set_all(&x, rst_x, NULL);
  t_set_all(&g, rst_g, NULL);
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_reduce_scatter_tensor(&x, TCOLL_SUM, 1, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  t_check_all("reduce_scatter_tensor y", &y, rst_y, NULL, 0);
  T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  T_EXPECT(gx.shape[0] == 2 && gx.shape[1] == 2 * t_size, "grad shape");
  t_check_all("reduce_scatter_tensor grad", &gx, rst_gx, NULL, 0);
  tcoll_grad_node_free(node);
  FREE_ALL(&x, &y, &g, &gx);
}
END_TEST

START_TEST(case_all_to_all) {
  /* rank r: xs[j] = [j + 1] elements 100 r + 10 j + k; receives ys[i] = [r + 1] from rank i */
  tcoll_tensor_t *xs = calloc((size_t)t_size, sizeof *xs), *ys = calloc((size_t)t_size, sizeof *ys);
  tcoll_tensor_t *g = calloc((size_t)t_size, sizeof *g), *gxs = calloc((size_t)t_size, sizeof *gxs);
  for (int j = 0; j < t_size; j++) {
    xs[j] = g_t1(TCOLL_FLOAT32, j + 1);
    fill_lin(&xs[j], 100.0 * t_rank + 10.0 * j, 1);
    int64_t n = t_rank + 1;
    ys[j] = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, &n, t_device());
    g[j] = g_t1(TCOLL_FLOAT32, t_rank + 1);
    fill_lin(&g[j], 1000 + 100.0 * t_rank + 10.0 * j, 1);
    gxs[j] = t_empty();
  }
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_all_to_all(xs, NULL, ys, &node));
  g_wait_list(ys, t_size);
  for (int i = 0; i < t_size; i++)
    check_lin("all_to_all ys", &ys[i], 100.0 * i + 10.0 * t_rank, 1, 0);
  T_OK(tcoll_grad_backward(node, g, t_size, gxs, t_size));
  g_wait_list(gxs, t_size);
  for (int j = 0; j < t_size; j++) {
    T_EXPECT(gxs[j].ndim == 1 && gxs[j].shape[0] == j + 1, "grad_inputs[%d] shape", j);
    check_lin("all_to_all grad", &gxs[j], 1000 + 100.0 * j + 10.0 * t_rank, 1, 0);
  }
  tcoll_grad_node_free(node);
  g_list_free(xs, t_size);
  g_list_free(ys, t_size);
  g_list_free(g, t_size);
  g_list_free(gxs, t_size);
}
END_TEST

/* Rank r sends j + 1 rows to rank j; x_r[row, c] = 100 r + 10 row + c (2 columns). */
static int64_t off_rows(int j) { return (int64_t)j * (j + 1) / 2; }
static double a2a_x(int64_t e, void *ctx) {
  (void)ctx;
  return 100.0 * t_rank + 10.0 * (double)(e / 2) + (double)(e % 2);
}
static double a2a_y(int64_t e, void *ctx) { /* y[i (r + 1) + k, c] = x_i[off(r) + k, c] */
  (void)ctx;
  int64_t row = e / 2, c = e % 2, i = row / (t_rank + 1), k = row % (t_rank + 1);
  return 100.0 * (double)i + 10.0 * (double)(off_rows(t_rank) + k) + (double)c;
}
static double a2a_g(int64_t e, void *ctx) {
  (void)ctx;
  return 5000 + 100.0 * t_rank + 10.0 * (double)(e / 2) + (double)(e % 2);
}
static double a2a_gx(int64_t e, void *ctx) { /* gx[off(j) + k, c] = g_j[r (j + 1) + k, c] */
  (void)ctx;
  int64_t row = e / 2, c = e % 2, j = 0;
  while (off_rows((int)j + 1) <= row) j++;
  int64_t k = row - off_rows((int)j);
  return 5000 + 100.0 * (double)j + 10.0 * (double)(t_rank * (j + 1) + k) + (double)c;
}

START_TEST(case_all_to_all_single) {
  int64_t *isplit = calloc((size_t)t_size, sizeof *isplit),
          *osplit = calloc((size_t)t_size, sizeof *osplit);
  for (int j = 0; j < t_size; j++) {
    isplit[j] = j + 1;
    osplit[j] = t_rank + 1;
  }
  tcoll_tensor_t x = g_t2(TCOLL_FLOAT64, off_rows(t_size), 2), y = t_empty(), gx = t_empty();
  t_set_all(&x, a2a_x, NULL);
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_all_to_all_single(&x, osplit, isplit, NULL, &y, &node));
  free(isplit); /* the node keeps its own copy of the splits */
  free(osplit);
  T_OK(tcoll_wait(y.data));
  T_EXPECT(y.shape[0] == (int64_t)t_size * (t_rank + 1), "y rows %lld", (long long)y.shape[0]);
  t_check_all("all_to_all_single y", &y, a2a_y, NULL, 0);
  tcoll_tensor_t g = t_alloc(TCOLL_FLOAT64, 2, y.shape);
  t_set_all(&g, a2a_g, NULL);
  T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  T_EXPECT(gx.shape[0] == off_rows(t_size), "grad rows %lld", (long long)gx.shape[0]);
  t_check_all("all_to_all_single grad", &gx, a2a_gx, NULL, 0);
  tcoll_grad_node_free(node);
  FREE_ALL(&x, &y, &g, &gx);
}
END_TEST

START_TEST(case_all_reduce) {
  tcoll_redop_t pm;
  T_OK(tcoll_redop_create_premul_sum(3.0, &pm));
  tcoll_redop_t ops[3] = {TCOLL_SUM, TCOLL_AVG, pm};
  double scale[3] = {1.0, 1.0 / t_size, 3.0};
  for (int k = 0; k < 3; k++) {
    tcoll_tensor_t x = g_t1(TCOLL_FLOAT64, 5), y = t_empty(), g = g_t1(TCOLL_FLOAT64, 5),
                   gx = t_empty();
    fill_lin(&x, t_rank, 1);
    fill_lin(&g, t_rank + 1, 2);
    tcoll_grad_node_t *node = NULL;
    T_OK(tcoll_grad_all_reduce(&x, ops[k], NULL, &y, &node));
    if (k == 2) T_OK(tcoll_redop_destroy(pm)); /* the node keeps the scalar */
    T_OK(tcoll_wait(y.data));
    check_lin("all_reduce y", &y, tri(t_size - 1) * scale[k], t_size * scale[k], 1e-14);
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    check_lin("all_reduce grad", &gx, tri(t_size) * scale[k], 2.0 * t_size * scale[k], 1e-14);
    tcoll_grad_node_free(node);
    FREE_ALL(&x, &y, &g, &gx);
  }
}
END_TEST

/* The local math runs in float64 and rounds once into 16-bit dtypes. */
START_TEST(case_half_dtypes) {
  /* all_reduce PRODUCT in bfloat16: x = 2 everywhere, g = 1: grad = size * 2^(size-1) */
  tcoll_tensor_t x = g_t1(TCOLL_BFLOAT16, 3), y = t_empty(), g = g_t1(TCOLL_BFLOAT16, 3),
                 gx = t_empty();
  fill_lin(&x, 2, 0);
  fill_lin(&g, 1, 0);
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_all_reduce(&x, TCOLL_PRODUCT, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  check_lin("bfloat16 product y", &y, ldexp(1.0, t_size), 0, 0);
  T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  check_lin("bfloat16 product grad", &gx, t_size * ldexp(1.0, t_size - 1), 0, 0);
  tcoll_grad_node_free(node);
  FREE_ALL(&x, &y, &g, &gx);

  /* all_reduce MAX in float16: x = r + i, g = 1 + i: the last rank gets size * (1 + i) */
  x = g_t1(TCOLL_FLOAT16, 3), y = t_empty(), g = g_t1(TCOLL_FLOAT16, 3), gx = t_empty();
  fill_lin(&x, t_rank, 1);
  fill_lin(&g, 1, 1);
  T_OK(tcoll_grad_all_reduce(&x, TCOLL_MAX, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  check_lin("float16 max y", &y, t_size - 1, 1, 0);
  T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  double w = t_rank == t_size - 1 ? t_size : 0;
  check_lin("float16 max grad", &gx, w, w, 0);
  tcoll_grad_node_free(node);
  FREE_ALL(&x, &y, &g, &gx);

  /* reduce_scatter AVG in float16: grad = g / size, rounded once */
  int64_t shape[1] = {2};
  tcoll_tensor_t proto = tcoll_tensor_make(NULL, TCOLL_FLOAT16, 1, shape, t_device());
  tcoll_tensor_t *xs = g_list(t_size, &proto, true), *gxs = g_list(t_size, &proto, false);
  y = t_empty(), g = g_t1(TCOLL_FLOAT16, 2);
  fill_lin(&g, 3, 1);
  T_OK(tcoll_grad_reduce_scatter(xs, TCOLL_AVG, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  T_OK(tcoll_grad_backward(node, &g, 1, gxs, t_size));
  g_wait_list(gxs, t_size);
  for (int r = 0; r < t_size; r++)
    check_lin("float16 reduce_scatter avg grad", &gxs[r], 3.0 / t_size, 1.0 / t_size, 1e-3);
  tcoll_grad_node_free(node);
  g_list_free(xs, t_size);
  g_list_free(gxs, t_size);
  FREE_ALL(&y, &g);
}
END_TEST

/* ---- the API around the rules ---- */

START_TEST(api_bad_arguments) {
  tcoll_tensor_t x = g_t1(TCOLL_FLOAT32, 4), y = t_empty(), g = g_t1(TCOLL_FLOAT32, 4),
                 gx = t_empty();
  tcoll_grad_node_t *node = NULL;
  T_FAILS(tcoll_grad_all_reduce(&x, TCOLL_SUM, NULL, &y, NULL), TCOLL_ERR_INVALID_ARGUMENT,
          "node is NULL");
  T_FAILS(tcoll_grad_broadcast(&x, t_size, NULL, &y, &node), TCOLL_ERR_INVALID_ARGUMENT, "src is");
  T_EXPECT(node == NULL && y.data == NULL, "a failed forward leaves no node and no output");
  T_FAILS(tcoll_grad_all_reduce(&x, 77, NULL, &y, &node), TCOLL_ERR_INVALID_ARGUMENT, "op is 77");
  T_FAILS(tcoll_grad_backward(NULL, &g, 1, &gx, 1), TCOLL_ERR_INVALID_ARGUMENT, "node is NULL");
  T_EXPECT(tcoll_pending_count() == 0, "nothing pending");

  T_OK(tcoll_grad_all_reduce(&x, TCOLL_MAX, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  T_FAILS(tcoll_grad_backward(node, &g, 2, &gx, 1), TCOLL_ERR_INVALID_ARGUMENT,
          "n_grad_outputs is 2 (expected 1 for all_reduce)");
  T_FAILS(tcoll_grad_backward(node, &g, 1, &gx, 0), TCOLL_ERR_INVALID_ARGUMENT,
          "n_grad_inputs is 0");
  T_FAILS(tcoll_grad_backward(node, NULL, 1, &gx, 1), TCOLL_ERR_INVALID_ARGUMENT,
          "grad_outputs is NULL");
  tcoll_tensor_t g5 = g_t1(TCOLL_FLOAT32, 5), gd = g_t1(TCOLL_FLOAT64, 4);
  T_FAILS(tcoll_grad_backward(node, &g5, 1, &gx, 1), TCOLL_ERR_INVALID_ARGUMENT,
          "grad_outputs[0]->shape is [5]");
  T_FAILS(tcoll_grad_backward(node, &gd, 1, &gx, 1), TCOLL_ERR_INVALID_ARGUMENT,
          "grad_outputs[0]->dtype is float64");
  T_FAILS(tcoll_grad_backward(node, &g, 1, &gd, 1), TCOLL_ERR_INVALID_ARGUMENT,
          "grad_inputs[0]->dtype is float64");
  T_FAILS(tcoll_grad_backward(node, &g, 1, &g, 1), TCOLL_ERR_INVALID_ARGUMENT, "overlaps");
  if (t_device() != TCOLL_HOST) {
    tcoll_tensor_t gh = t_host(TCOLL_FLOAT32, 1, g.shape);
    T_FAILS(tcoll_grad_backward(node, &gh, 1, &gx, 1), TCOLL_ERR_INVALID_ARGUMENT,
            "grad_outputs[0]->device is -1");
    tcoll_tensor_free(&gh);
  }
  T_EXPECT(gx.data == NULL, "nothing allocated");
  T_EXPECT(tcoll_pending_count() == 0, "nothing pending");
  tcoll_grad_node_free(node);
  tcoll_grad_node_free(NULL);
  FREE_ALL(&x, &y, &g, &gx, &g5, &gd);
}
END_TEST

/* A grad_input that is pending from other work: TCOLL_ERR_BUSY, nothing started, on the direct
 * path (SUM) and the composite one (MAX). */
START_TEST(api_busy) {
  tcoll_redop_t ops[2] = {TCOLL_SUM, TCOLL_MAX};
  for (int k = 0; k < 2; k++) {
    tcoll_tensor_t x = g_t1(TCOLL_FLOAT64, 4), y = t_empty(), g = g_t1(TCOLL_FLOAT64, 4),
                   other = t_empty();
    fill_lin(&x, t_rank, 1);
    fill_lin(&g, 1, 0);
    tcoll_grad_node_t *node = NULL;
    T_OK(tcoll_grad_all_reduce(&x, ops[k], NULL, &y, &node));
    T_OK(tcoll_wait(y.data));
    T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &other)); /* other is pending */
    T_FAILS(tcoll_grad_backward(node, &g, 1, &other, 1), TCOLL_ERR_BUSY, "pending");
    T_EXPECT(tcoll_pending_count() == 1, "only the other work is pending (%zu)",
             tcoll_pending_count());
    T_OK(tcoll_wait(other.data));
    check_lin("the other work", &other, tri(t_size - 1), t_size, 0);
    T_OK(tcoll_grad_backward(node, &g, 1, &other, 1)); /* now free: fine */
    T_OK(tcoll_wait(other.data));
    if (k == 0) check_lin("grad", &other, t_size, 0, 0);
    tcoll_grad_node_free(node);
    FREE_ALL(&x, &y, &g, &other);
  }
}
END_TEST

/* Grads are pending until waited, on every path; wait_all completes composites. */
START_TEST(api_pending_until_waited) {
  tcoll_redop_t ops[4] = {TCOLL_SUM, TCOLL_MAX, TCOLL_PRODUCT, TCOLL_AVG};
  for (int k = 0; k < 4; k++) {
    tcoll_tensor_t x = g_t1(TCOLL_FLOAT64, 3), y = t_empty(), g = g_t1(TCOLL_FLOAT64, 3),
                   gx = t_empty();
    fill_lin(&x, 2.0 + t_rank, 0); /* distinct per rank: unique max on the last rank */
    fill_lin(&g, 1, 0);
    tcoll_grad_node_t *node = NULL;
    T_OK(tcoll_grad_reduce(&x, 0, ops[k], NULL, &y, &node));
    T_EXPECT(tcoll_pending_count() >= 1, "y pending after the forward");
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_EXPECT(gx.data != NULL, "grad allocated at once");
    T_EXPECT(tcoll_pending_count() >= 2, "y and the grad pending (%zu)", tcoll_pending_count());
    int rc = tcoll_test(gx.data);
    T_EXPECT(rc == TCOLL_SUCCESS || rc == TCOLL_IN_PROGRESS, "test: %s", tcoll_status_string(rc));
    T_OK(tcoll_wait_all());
    T_EXPECT(tcoll_pending_count() == 0, "wait_all left %zu pending", tcoll_pending_count());
    double want;
    switch (k) {
    case 0: want = 1.0; break;
    case 1: want = t_rank == t_size - 1 ? 1.0 : 0.0; break;
    case 2: { /* prod of the others' x: (2 + s) for s != r */
      want = 1.0;
      for (int s = 0; s < t_size; s++)
        if (s != t_rank) want *= 2.0 + s;
      break;
    }
    default: want = 1.0 / t_size; break;
    }
    check_lin("grad after wait_all", &gx, want, 0, 1e-14);
    tcoll_grad_node_free(node);
    FREE_ALL(&x, &y, &g, &gx);
  }
}
END_TEST

/* The node may be freed before its forward output or its grads are waited; a node serves any
 * number of backward calls; the caller's x may change after the forward. */
START_TEST(api_node_lifetime) {
  tcoll_tensor_t x = g_t1(TCOLL_FLOAT32, 4), y = t_empty(), g = g_t1(TCOLL_FLOAT32, 4);
  tcoll_tensor_t gx1 = t_empty(), gx2 = t_empty();
  fill_lin(&x, t_rank, 10); /* max on the last rank */
  fill_lin(&g, 1, 1);
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_all_reduce(&x, TCOLL_MAX, NULL, &y, &node));
  fill_lin(&x, -50, 0); /* the node copied x at the forward */
  T_OK(tcoll_grad_backward(node, &g, 1, &gx1, 1));
  T_OK(tcoll_grad_backward(node, &g, 1, &gx2, 1));
  tcoll_grad_node_free(node);               /* before anything was waited */
  T_OK(tcoll_wait_timeout(gx2.data, 30.0)); /* a deadline reaches the inner collectives too */
  T_OK(tcoll_wait(y.data));
  T_OK(tcoll_wait(gx1.data));
  check_lin("y", &y, t_size - 1, 10, 0);
  double gs = t_size; /* sum_r g_r[i] = size * (1 + i) */
  check_lin("first grad", &gx1, t_rank == t_size - 1 ? gs : 0, t_rank == t_size - 1 ? gs : 0, 0);
  check_lin("second grad", &gx2, t_rank == t_size - 1 ? gs : 0, t_rank == t_size - 1 ? gs : 0, 0);

  /* freed before the forward output was waited */
  tcoll_tensor_t y2 = t_empty();
  fill_lin(&x, -t_rank, 1); /* min on the last rank */
  T_OK(tcoll_grad_all_reduce(&x, TCOLL_MIN, NULL, &y2, &node));
  tcoll_grad_node_free(node);
  T_OK(tcoll_wait(y2.data));
  check_lin("y after the node was freed", &y2, -(t_size - 1), 1, 0);
  FREE_ALL(&x, &y, &g, &gx1, &gx2, &y2);
}
END_TEST

/* In place forward (y == x): MAX goes through the node's copies, SUM through the plain op. */
START_TEST(api_in_place) {
  tcoll_redop_t ops[2] = {TCOLL_MAX, TCOLL_SUM};
  for (int k = 0; k < 2; k++) {
    tcoll_tensor_t x = g_t1(TCOLL_FLOAT64, 3), g = g_t1(TCOLL_FLOAT64, 3), gx = t_empty();
    fill_lin(&x, t_rank, 1);
    fill_lin(&g, 2, 0);
    tcoll_grad_node_t *node = NULL;
    T_OK(tcoll_grad_all_reduce(&x, ops[k], NULL, &x, &node));
    T_OK(tcoll_wait(x.data));
    if (k == 0)
      check_lin("in place max", &x, t_size - 1, 1, 0);
    else
      check_lin("in place sum", &x, tri(t_size - 1), t_size, 0);
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    double w = k == 0 ? (t_rank == t_size - 1 ? 2.0 * t_size : 0.0) : 2.0 * t_size;
    check_lin("in place grad", &gx, w, 0, 0);
    tcoll_grad_node_free(node);
    FREE_ALL(&x, &g, &gx);
  }
}
END_TEST

/* Nodes do not own their communicator: backward after it was freed is refused. */
START_TEST(api_freed_communicator) {
  tcoll_comm_t *sub = NULL;
  T_OK(tcoll_comm_split(tcoll_comm_world(), 0, t_rank, &sub));
  tcoll_tensor_t x = g_t1(TCOLL_FLOAT32, 2), y = t_empty(), g = g_t1(TCOLL_FLOAT32, 2),
                 gx = t_empty();
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_all_reduce(&x, TCOLL_SUM, sub, &y, &node));
  T_OK(tcoll_wait(y.data));
  T_OK(tcoll_comm_free(&sub));
  T_FAILS(tcoll_grad_backward(node, &g, 1, &gx, 1), TCOLL_ERR_INVALID_ARGUMENT,
          "not a live tcoll communicator");
  tcoll_grad_node_free(node);
  FREE_ALL(&x, &y, &g, &gx);
}
END_TEST

/* An input that is a pending output of earlier work is waited for, also by gather off dst
 * (where the work is keyed on the input): regression test for a TCOLL_ERR_BUSY there, which
 * left dst alone in the collective. */
START_TEST(api_gather_pending_input) {
  int dst = 0;
  tcoll_tensor_t a = g_t1(TCOLL_FLOAT32, 3), x = t_empty();
  fill_lin(&a, t_rank, 1);
  T_OK(tcoll_all_reduce(&a, TCOLL_SUM, NULL, &x)); /* x pending */
  tcoll_tensor_t *ys = t_rank == dst ? g_list(t_size, &a, false) : NULL;
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_gather(&x, dst, NULL, ys, &node)); /* plain gather off dst: keyed on x */
  T_OK(tcoll_wait(x.data));
  if (ys) g_wait_list(ys, t_size);
  for (int r = 0; ys && r < t_size; r++)
    check_lin("gather of a pending input", &ys[r], tri(t_size - 1), t_size, 0);
  tcoll_grad_node_free(node);
  g_list_free(ys, t_size);
  FREE_ALL(&a, &x);
}
END_TEST

/* A composite grad whose inner collective cannot complete yet (the other ranks have not posted
 * it): test says IN_PROGRESS, a wait with a deadline times out and leaves it pending, a later
 * wait completes it. */
START_TEST(api_timeout_then_wait) {
  tcoll_tensor_t x = g_t1(TCOLL_FLOAT64, 3), y = t_empty(), g = g_t1(TCOLL_FLOAT64, 3),
                 gx = t_empty();
  fill_lin(&x, t_rank, 1);
  fill_lin(&g, 1, 0);
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_all_reduce(&x, TCOLL_MAX, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  if (t_rank == 0) {
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    if (t_size > 1) {
      T_EXPECT(tcoll_test(gx.data) == TCOLL_IN_PROGRESS, "test before the others posted");
      T_FAILS(tcoll_wait_timeout(gx.data, 0.2), TCOLL_ERR_TIMEOUT, "still pending");
      T_EXPECT(tcoll_pending_count() >= 1, "still pending after the timeout");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
  }
  T_OK(tcoll_wait(gx.data));
  check_lin("grad after a timeout", &gx, t_rank == t_size - 1 ? t_size : 0, 0, 0);
  tcoll_grad_node_free(node);
  FREE_ALL(&x, &y, &g, &gx);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("grad_cases");
  TCase *tc = t_tcase("cases");
  tcase_add_test(tc, case_broadcast);
  tcase_add_test(tc, case_reduce);
  tcase_add_test(tc, case_gather);
  tcase_add_test(tc, case_scatter);
  tcase_add_test(tc, case_all_gather);
  tcase_add_test(tc, case_all_gather_into_tensor);
  tcase_add_test(tc, case_reduce_scatter);
  tcase_add_test(tc, case_reduce_scatter_tensor);
  tcase_add_test(tc, case_all_to_all);
  tcase_add_test(tc, case_all_to_all_single);
  tcase_add_test(tc, case_all_reduce);
  tcase_add_test(tc, case_half_dtypes);
  suite_add_tcase(s, tc);
  tc = t_tcase("api");
  tcase_add_test(tc, api_bad_arguments);
  tcase_add_test(tc, api_busy);
  tcase_add_test(tc, api_pending_until_waited);
  tcase_add_test(tc, api_node_lifetime);
  tcase_add_test(tc, api_in_place);
  tcase_add_test(tc, api_freed_communicator);
  tcase_add_test(tc, api_gather_pending_input);
  tcase_add_test(tc, api_timeout_then_wait);
  suite_add_tcase(s, tc);
  return s;
}
