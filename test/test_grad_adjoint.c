/* The adjoint identity for every linear gradient rule: with random x and random output grads y
 * (float64, seeded per rank), sum over ranks <A x, y> == sum over ranks <x, A^T y>, where A is
 * the forward (tcoll_grad_*) and A^T the backward (tcoll_grad_backward). The inner products
 * and their sums over ranks are computed by the test (t_read + MPI_Allreduce). */
#include "grad_common.h"

#define TOL 1e-12

static tcoll_redop_t premul(double s) {
  tcoll_redop_t op = TCOLL_SUM;
  T_OK(tcoll_redop_create_premul_sum(s, &op));
  return op;
}

/* ---- single tensor in, single tensor out ---- */

START_TEST(adjoint_broadcast) {
  for (int src = 0; src < t_size; src += (t_size > 2 ? t_size - 1 : 1)) {
    tcoll_tensor_t x = g_t2(TCOLL_FLOAT64, 3, 4), y = t_empty(), g = g_t2(TCOLL_FLOAT64, 3, 4),
                   gx = t_empty();
    tcoll_grad_node_t *node = NULL;
    g_fill_random(&x, 11 + src);
    g_fill_random(&g, 12 + src);
    T_OK(tcoll_grad_broadcast(&x, src, NULL, &y, &node));
    T_OK(tcoll_wait(y.data));
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    T_EXPECT(gx.device == t_device(), "grad on device %d", gx.device);
    G_EXPECT_ADJOINT("broadcast", g_dot(&y, &g), g_dot(&x, &gx), TOL);
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
    tcoll_tensor_free(&gx);
  }
}
END_TEST

START_TEST(adjoint_reduce) {
  tcoll_redop_t ops[3] = {TCOLL_SUM, TCOLL_AVG, premul(-1.25)};
  const char *names[3] = {"reduce sum", "reduce avg", "reduce premul_sum"};
  int dst = t_size / 2;
  for (int k = 0; k < 3; k++) {
    tcoll_tensor_t x = g_t1(TCOLL_FLOAT64, 7), y = t_empty(), g = g_t1(TCOLL_FLOAT64, 7),
                   gx = t_empty();
    tcoll_grad_node_t *node = NULL;
    g_fill_random(&x, 21 + k);
    g_fill_random(&g, 31 + k); /* random off dst too: y there is not a function of x (zeros) */
    T_OK(tcoll_grad_reduce(&x, dst, ops[k], NULL, &y, &node));
    T_OK(tcoll_wait(y.data));
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    G_EXPECT_ADJOINT(names[k], g_dot(&y, &g), g_dot(&x, &gx), TOL);
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
    tcoll_tensor_free(&gx);
  }
  T_OK(tcoll_redop_destroy(ops[2]));
}
END_TEST

START_TEST(adjoint_all_reduce) {
  tcoll_redop_t ops[3] = {TCOLL_SUM, TCOLL_AVG, premul(0.375)};
  const char *names[3] = {"all_reduce sum", "all_reduce avg", "all_reduce premul_sum"};
  for (int k = 0; k < 3; k++) {
    tcoll_tensor_t x = g_t3(TCOLL_FLOAT64, 2, 3, 2), y = t_empty(),
                   g = g_t3(TCOLL_FLOAT64, 2, 3, 2), gx = t_empty();
    tcoll_grad_node_t *node = NULL;
    g_fill_random(&x, 41 + k);
    g_fill_random(&g, 51 + k);
    T_OK(tcoll_grad_all_reduce(&x, ops[k], NULL, &y, &node));
    T_OK(tcoll_wait(y.data));
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    G_EXPECT_ADJOINT(names[k], g_dot(&y, &g), g_dot(&x, &gx), TOL);
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
    tcoll_tensor_free(&gx);
  }
  T_OK(tcoll_redop_destroy(ops[2]));
}
END_TEST

START_TEST(adjoint_all_gather_into_tensor) {
  int dims[4] = {0, 1, 2, -1};
  for (int k = 0; k < 4; k++) {
    tcoll_tensor_t x = g_t3(TCOLL_FLOAT64, 2, 3, 2), y = t_empty(), gx = t_empty();
    tcoll_grad_node_t *node = NULL;
    g_fill_random(&x, 61 + k);
    T_OK(tcoll_grad_all_gather_into_tensor(&x, dims[k], NULL, &y, &node));
    T_OK(tcoll_wait(y.data));
    tcoll_tensor_t g = t_alloc(TCOLL_FLOAT64, y.ndim, y.shape);
    g_fill_random(&g, 71 + k);
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    T_EXPECT(gx.ndim == 3 && gx.shape[0] == 2 && gx.shape[1] == 3 && gx.shape[2] == 2,
             "grad shape");
    char what[64];
    snprintf(what, sizeof what, "all_gather_into_tensor dim %d", dims[k]);
    G_EXPECT_ADJOINT(what, g_dot(&y, &g), g_dot(&x, &gx), TOL);
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
    tcoll_tensor_free(&gx);
  }
}
END_TEST

START_TEST(adjoint_reduce_scatter_tensor) {
  int dims[3] = {0, 1, -1};
  for (int k = 0; k < 3; k++) {
    tcoll_tensor_t x = g_t3(TCOLL_FLOAT64, 2 * t_size, 3 * t_size, t_size), y = t_empty(),
                   gx = t_empty();
    tcoll_grad_node_t *node = NULL;
    g_fill_random(&x, 81 + k);
    T_OK(tcoll_grad_reduce_scatter_tensor(&x, TCOLL_SUM, dims[k], NULL, &y, &node));
    T_OK(tcoll_wait(y.data));
    tcoll_tensor_t g = t_alloc(TCOLL_FLOAT64, y.ndim, y.shape);
    g_fill_random(&g, 91 + k);
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    char what[64];
    snprintf(what, sizeof what, "reduce_scatter_tensor dim %d", dims[k]);
    G_EXPECT_ADJOINT(what, g_dot(&y, &g), g_dot(&x, &gx), TOL);
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
    tcoll_tensor_free(&gx);
  }
}
END_TEST

/* Rank r sends split(r, j) rows to rank j (uneven, some zero). */
static int64_t split_rows(int from, int to) { return (from + 2 * to) % 3 + (to == from ? 1 : 0); }

START_TEST(adjoint_all_to_all_single) {
  int64_t *isplit = calloc((size_t)t_size, sizeof *isplit),
          *osplit = calloc((size_t)t_size, sizeof *osplit);
  int64_t rows = 0;
  for (int j = 0; j < t_size; j++) {
    isplit[j] = split_rows(t_rank, j);
    osplit[j] = split_rows(j, t_rank);
    rows += isplit[j];
  }
  for (int even = 0; even < 2; even++) {
    tcoll_tensor_t x = even ? g_t2(TCOLL_FLOAT64, 2 * t_size, 3) : g_t2(TCOLL_FLOAT64, rows, 3);
    tcoll_tensor_t y = t_empty(), gx = t_empty();
    tcoll_grad_node_t *node = NULL;
    g_fill_random(&x, 101 + even);
    T_OK(tcoll_grad_all_to_all_single(&x, even ? NULL : osplit, even ? NULL : isplit, NULL, &y,
                                      &node));
    T_OK(tcoll_wait(y.data));
    tcoll_tensor_t g = t_alloc(TCOLL_FLOAT64, y.ndim, y.shape);
    g_fill_random(&g, 111 + even);
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    T_EXPECT(gx.shape[0] == x.shape[0], "grad rows %lld, x rows %lld", (long long)gx.shape[0],
             (long long)x.shape[0]);
    G_EXPECT_ADJOINT(even ? "all_to_all_single even" : "all_to_all_single uneven", g_dot(&y, &g),
                     g_dot(&x, &gx), TOL);
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
    tcoll_tensor_free(&gx);
  }
  free(isplit);
  free(osplit);
}
END_TEST

/* ---- list forms ---- */

START_TEST(adjoint_gather) {
  int dst = t_size - 1;
  tcoll_tensor_t x = g_t2(TCOLL_FLOAT64, 2, 3), gx = t_empty();
  tcoll_tensor_t *ys = g_list(t_size, &x, false), *g = g_list(t_size, &x, true);
  tcoll_grad_node_t *node = NULL;
  g_fill_random(&x, 121);
  for (int i = 0; i < t_size; i++) g_fill_random(&g[i], 131 + (uint64_t)i);
  T_OK(tcoll_grad_gather(&x, dst, NULL, ys, &node)); /* ys off dst: zeros */
  g_wait_list(ys, t_size);
  T_OK(tcoll_grad_backward(node, g, t_size, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  G_EXPECT_ADJOINT("gather", g_list_dot(ys, g, t_size), g_dot(&x, &gx), TOL);
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&gx);
  g_list_free(ys, t_size);
  g_list_free(g, t_size);
}
END_TEST

START_TEST(adjoint_scatter) {
  int src = t_size / 2;
  int64_t shape[2] = {3, 2};
  tcoll_tensor_t proto = tcoll_tensor_make(NULL, TCOLL_FLOAT64, 2, shape, t_device());
  tcoll_tensor_t *xs = t_rank == src ? g_list(t_size, &proto, true) : NULL;
  tcoll_tensor_t y = proto, g = g_t2(TCOLL_FLOAT64, 3, 2);
  tcoll_tensor_t *gxs = g_list(t_size, &proto, false);
  tcoll_grad_node_t *node = NULL;
  for (int i = 0; xs && i < t_size; i++) g_fill_random(&xs[i], 141 + (uint64_t)i);
  g_fill_random(&g, 151);
  T_OK(tcoll_grad_scatter(xs, src, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  T_OK(tcoll_grad_backward(node, &g, 1, gxs, t_size)); /* zeros off src */
  g_wait_list(gxs, t_size);
  G_EXPECT_ADJOINT("scatter", g_dot(&y, &g), xs ? g_list_dot(xs, gxs, t_size) : 0.0, TOL);
  if (!xs) /* no xs here: the grads must be zero */
    for (int i = 0; i < t_size; i++)
      T_EXPECT(g_dot(&gxs[i], &gxs[i]) == 0.0, "grad_inputs[%d] is not zero off src", i);
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&g);
  g_list_free(xs, t_size);
  g_list_free(gxs, t_size);
}
END_TEST

START_TEST(adjoint_all_gather) {
  tcoll_tensor_t x = g_t3(TCOLL_FLOAT64, 2, 1, 3), gx = t_empty();
  tcoll_tensor_t *ys = g_list(t_size, &x, false), *g = g_list(t_size, &x, true);
  tcoll_grad_node_t *node = NULL;
  g_fill_random(&x, 161);
  for (int i = 0; i < t_size; i++) g_fill_random(&g[i], 171 + (uint64_t)i);
  T_OK(tcoll_grad_all_gather(&x, NULL, ys, &node));
  g_wait_list(ys, t_size);
  T_OK(tcoll_grad_backward(node, g, t_size, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  G_EXPECT_ADJOINT("all_gather", g_list_dot(ys, g, t_size), g_dot(&x, &gx), TOL);
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&gx);
  g_list_free(ys, t_size);
  g_list_free(g, t_size);
}
END_TEST

START_TEST(adjoint_reduce_scatter) {
  tcoll_redop_t ops[3] = {TCOLL_SUM, TCOLL_AVG, premul(3.5)};
  const char *names[3] = {"reduce_scatter sum", "reduce_scatter avg", "reduce_scatter premul_sum"};
  for (int k = 0; k < 3; k++) {
    int64_t shape[1] = {5};
    tcoll_tensor_t proto = tcoll_tensor_make(NULL, TCOLL_FLOAT64, 1, shape, t_device());
    tcoll_tensor_t *xs = g_list(t_size, &proto, true), *gxs = g_list(t_size, &proto, false);
    tcoll_tensor_t y = t_empty(), g = g_t1(TCOLL_FLOAT64, 5);
    tcoll_grad_node_t *node = NULL;
    for (int i = 0; i < t_size; i++) g_fill_random(&xs[i], 181 + 10 * (uint64_t)k + (uint64_t)i);
    g_fill_random(&g, 191 + k);
    T_OK(tcoll_grad_reduce_scatter(xs, ops[k], NULL, &y, &node));
    T_OK(tcoll_wait(y.data));
    T_OK(tcoll_grad_backward(node, &g, 1, gxs, t_size));
    g_wait_list(gxs, t_size);
    for (int i = 0; i < t_size; i++)
      T_EXPECT(gxs[i].device == t_device(), "grad_inputs[%d] device", i);
    G_EXPECT_ADJOINT(names[k], g_dot(&y, &g), g_list_dot(xs, gxs, t_size), TOL);
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
    g_list_free(xs, t_size);
    g_list_free(gxs, t_size);
  }
  T_OK(tcoll_redop_destroy(ops[2]));
}
END_TEST

START_TEST(adjoint_all_to_all) {
  /* Rank r sends xs[j] of shape [r + 2j + 1, 2] to rank j. */
  tcoll_tensor_t *xs = calloc((size_t)t_size, sizeof *xs), *ys = calloc((size_t)t_size, sizeof *ys);
  tcoll_tensor_t *g = calloc((size_t)t_size, sizeof *g), *gxs = calloc((size_t)t_size, sizeof *gxs);
  for (int j = 0; j < t_size; j++) {
    xs[j] = g_t2(TCOLL_FLOAT64, t_rank + 2 * j + 1, 2);
    g_fill_random(&xs[j], 201 + (uint64_t)j);
    int64_t s[2] = {j + 2 * t_rank + 1, 2};
    ys[j] = tcoll_tensor_make(NULL, TCOLL_FLOAT64, 2, s, t_device());
    g[j] = t_alloc(TCOLL_FLOAT64, 2, s);
    g_fill_random(&g[j], 211 + (uint64_t)j);
    gxs[j] = t_empty();
  }
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_all_to_all(xs, NULL, ys, &node));
  g_wait_list(ys, t_size);
  T_OK(tcoll_grad_backward(node, g, t_size, gxs, t_size));
  g_wait_list(gxs, t_size);
  G_EXPECT_ADJOINT("all_to_all", g_list_dot(ys, g, t_size), g_list_dot(xs, gxs, t_size), TOL);
  tcoll_grad_node_free(node);
  g_list_free(xs, t_size);
  g_list_free(ys, t_size);
  g_list_free(g, t_size);
  g_list_free(gxs, t_size);
}
END_TEST

/* ---- a sub-communicator: roots and ranks are those of the communicator ---- */

START_TEST(adjoint_sub_communicator) {
  tcoll_comm_t *sub = NULL;
  T_OK(
      tcoll_comm_split(tcoll_comm_world(), t_rank % 2, t_size - t_rank, &sub)); /* reversed order */
  int n = tcoll_comm_size(sub), root = n - 1;
  tcoll_tensor_t x = g_t2(TCOLL_FLOAT64, 2, 3);
  g_fill_random(&x, 221);
  /* broadcast, reduce avg, all_gather_into_tensor dim 1, gather on sub */
  {
    tcoll_tensor_t y = t_empty(), g = g_t2(TCOLL_FLOAT64, 2, 3), gx = t_empty();
    tcoll_grad_node_t *node = NULL;
    g_fill_random(&g, 222);
    T_OK(tcoll_grad_broadcast(&x, root, sub, &y, &node));
    T_OK(tcoll_wait(y.data));
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    G_EXPECT_ADJOINT("broadcast on a split", g_dot(&y, &g), g_dot(&x, &gx), TOL);
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
    tcoll_tensor_free(&gx);
  }
  {
    tcoll_tensor_t y = t_empty(), g = g_t2(TCOLL_FLOAT64, 2, 3), gx = t_empty();
    tcoll_grad_node_t *node = NULL;
    g_fill_random(&g, 223);
    T_OK(tcoll_grad_reduce(&x, 0, TCOLL_AVG, sub, &y, &node));
    T_OK(tcoll_wait(y.data));
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    G_EXPECT_ADJOINT("reduce avg on a split", g_dot(&y, &g), g_dot(&x, &gx), TOL);
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
    tcoll_tensor_free(&gx);
  }
  {
    tcoll_tensor_t y = t_empty(), gx = t_empty();
    tcoll_grad_node_t *node = NULL;
    T_OK(tcoll_grad_all_gather_into_tensor(&x, 1, sub, &y, &node));
    T_OK(tcoll_wait(y.data));
    tcoll_tensor_t g = t_alloc(TCOLL_FLOAT64, 2, y.shape);
    g_fill_random(&g, 224);
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    G_EXPECT_ADJOINT("all_gather_into_tensor on a split", g_dot(&y, &g), g_dot(&x, &gx), TOL);
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
    tcoll_tensor_free(&gx);
  }
  {
    tcoll_tensor_t *ys = g_list(n, &x, false), *g = g_list(n, &x, true), gx = t_empty();
    tcoll_grad_node_t *node = NULL;
    for (int i = 0; i < n; i++) g_fill_random(&g[i], 225 + (uint64_t)i);
    T_OK(tcoll_grad_gather(&x, root, sub, ys, &node));
    g_wait_list(ys, n);
    T_OK(tcoll_grad_backward(node, g, n, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    G_EXPECT_ADJOINT("gather on a split", g_list_dot(ys, g, n), g_dot(&x, &gx), TOL);
    tcoll_grad_node_free(node);
    g_list_free(ys, n);
    g_list_free(g, n);
    tcoll_tensor_free(&gx);
  }
  tcoll_tensor_free(&x);
  T_OK(tcoll_comm_free(&sub));
}
END_TEST

/* float32: the rules are dtype-generic (direct collectives and the scaled composite paths). */
START_TEST(adjoint_float32) {
  tcoll_redop_t ops[2] = {TCOLL_AVG, premul(0.5)};
  for (int k = 0; k < 2; k++) {
    tcoll_tensor_t x = g_t1(TCOLL_FLOAT32, 9), y = t_empty(), g = g_t1(TCOLL_FLOAT32, 9),
                   gx = t_empty();
    tcoll_grad_node_t *node = NULL;
    g_fill_random(&x, 231 + k);
    g_fill_random(&g, 241 + k);
    T_OK(tcoll_grad_reduce(&x, 0, ops[k], NULL, &y, &node));
    T_OK(tcoll_wait(y.data));
    T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
    T_OK(tcoll_wait(gx.data));
    T_EXPECT(gx.dtype == TCOLL_FLOAT32, "grad dtype %s", tcoll_dtype_name(gx.dtype));
    G_EXPECT_ADJOINT(k ? "reduce premul_sum float32" : "reduce avg float32", g_dot(&y, &g),
                     g_dot(&x, &gx), 1e-5);
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
    tcoll_tensor_free(&gx);
  }
  T_OK(tcoll_redop_destroy(ops[1]));
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("grad_adjoint");
  TCase *tc = t_tcase("adjoint");
  tcase_add_test(tc, adjoint_broadcast);
  tcase_add_test(tc, adjoint_reduce);
  tcase_add_test(tc, adjoint_all_reduce);
  tcase_add_test(tc, adjoint_all_gather_into_tensor);
  tcase_add_test(tc, adjoint_reduce_scatter_tensor);
  tcase_add_test(tc, adjoint_all_to_all_single);
  tcase_add_test(tc, adjoint_gather);
  tcase_add_test(tc, adjoint_scatter);
  tcase_add_test(tc, adjoint_all_gather);
  tcase_add_test(tc, adjoint_reduce_scatter);
  tcase_add_test(tc, adjoint_all_to_all);
  tcase_add_test(tc, adjoint_sub_communicator);
  tcase_add_test(tc, adjoint_float32);
  suite_add_tcase(s, tc);
  return s;
}
