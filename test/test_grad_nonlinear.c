/* The nonlinear rules (all_reduce and reduce with MAX, MIN, PRODUCT):
 *  - central finite differences on float64, element by element and rank by rank, with data that
 *    has no ties and no zeros; the loss is sum over ranks of <g_r, y_r> (the plain collectives
 *    compute y for the differences);
 *  - exact gradients for ties (MAX / MIN: split evenly among the ranks holding the extremum) and
 *    zeros (PRODUCT: the product of the other ranks, exact);
 *  - the ops without a gradient: bitwise ops, integer dtypes, reduce_scatter's non-sum ops, and
 *    reduce_scatter_tensor's "Only sum reduce op is supported". */
#include "grad_common.h"

#define N 5
#define H 1e-6

typedef struct {
  const double *v;
} arr_ctx_t;
static double arr_value(int64_t i, void *ctx) { return ((const arr_ctx_t *)ctx)->v[i]; }
static void set_values(tcoll_tensor_t *t, const double *v) {
  arr_ctx_t c = {v};
  t_set_all(t, arr_value, &c);
}

/* No ties: the ranks' values differ by at least 0.01 in every element. */
static double distinct_value(int r, int i) {
  return (double)((r * 37 + i * 11) % 17) / 4.0 + 0.01 * r - 1.5;
}
/* No zeros, both signs, magnitudes in [0.6, 1.2]. */
static double product_value(int r, int i) {
  return (0.6 + 0.1 * ((r * 5 + i * 3) % 7)) * ((r + i) % 2 ? -1.0 : 1.0);
}

/* Local <g, y> with y computed by the plain collective (dst < 0: all_reduce). */
static double local_loss(tcoll_redop_t op, int dst, const double *xv, const tcoll_tensor_t *g) {
  tcoll_tensor_t x = g_t1(TCOLL_FLOAT64, N), y = t_empty();
  set_values(&x, xv);
  if (dst < 0)
    T_OK(tcoll_all_reduce(&x, op, NULL, &y));
  else
    T_OK(tcoll_reduce(&x, dst, op, NULL, &y));
  T_OK(tcoll_wait(y.data));
  double v = g_dot(&y, g);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  return v;
}

static void fd_check(const char *what, tcoll_redop_t op, int dst, double (*value)(int r, int i),
                     uint64_t seed) {
  double xv[N], gv[N], fd[N] = {0};
  for (int i = 0; i < N; i++) xv[i] = value(t_rank, i);
  tcoll_tensor_t x = g_t1(TCOLL_FLOAT64, N), y = t_empty(), g = g_t1(TCOLL_FLOAT64, N),
                 gx = t_empty();
  set_values(&x, xv);
  g_fill_random(&g, seed);
  tcoll_grad_node_t *node = NULL;
  if (dst < 0)
    T_OK(tcoll_grad_all_reduce(&x, op, NULL, &y, &node));
  else
    T_OK(tcoll_grad_reduce(&x, dst, op, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  t_read(&gx, gv);
  for (int q = 0; q < t_size; q++) {
    for (int i = 0; i < N; i++) {
      double xp[N], xm[N];
      memcpy(xp, xv, sizeof xp);
      memcpy(xm, xv, sizeof xm);
      if (t_rank == q) {
        xp[i] += H;
        xm[i] -= H;
      }
      double lp = g_allsum(local_loss(op, dst, xp, &g)), lm = g_allsum(local_loss(op, dst, xm, &g));
      if (t_rank == q) fd[i] = (lp - lm) / (2 * H);
    }
  }
  for (int i = 0; i < N; i++)
    T_EXPECT(fabs(gv[i] - fd[i]) <= 1e-6 * fmax(1.0, fabs(fd[i])),
             "%s: grad[%d] is %.12g, finite difference %.12g", what, i, gv[i], fd[i]);
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&g);
  tcoll_tensor_free(&gx);
}

START_TEST(fd_all_reduce_max) { fd_check("all_reduce max", TCOLL_MAX, -1, distinct_value, 1); }
END_TEST
START_TEST(fd_all_reduce_min) { fd_check("all_reduce min", TCOLL_MIN, -1, distinct_value, 2); }
END_TEST
START_TEST(fd_all_reduce_product) {
  fd_check("all_reduce product", TCOLL_PRODUCT, -1, product_value, 3);
}
END_TEST
START_TEST(fd_reduce_max) { fd_check("reduce max", TCOLL_MAX, t_size - 1, distinct_value, 4); }
END_TEST
START_TEST(fd_reduce_min) { fd_check("reduce min", TCOLL_MIN, 0, distinct_value, 5); }
END_TEST
START_TEST(fd_reduce_product) {
  fd_check("reduce product", TCOLL_PRODUCT, t_size / 2, product_value, 6);
}
END_TEST

/* ---- exact cases: ties and zeros ---- */

#define M 4
/* MAX ties: element 0 all ranks equal; element 1 held by ranks 0 and size-1; element 2 by
 * size-1 alone; element 3 by 0 alone. MIN uses the negated values. */
static double tie_value(int r, int i) {
  switch (i) {
  case 0: return 1.5;
  case 1: return r == 0 || r == t_size - 1 ? 2.0 : 0.25 * r - 5.0;
  case 2: return (double)r;
  default: return -(double)r;
  }
}
static double grad_value(int r, int i) {
  return (double)((r + 1) * (i + 1));
} /* integers: exact sums */

static double round_to(tcoll_dtype_t dt, double v) {
  return dt == TCOLL_FLOAT32 ? (double)(float)v : v;
}

static void tie_check(tcoll_dtype_t dt, tcoll_redop_t op, int dst) {
  double sign = op == TCOLL_MIN ? -1.0 : 1.0, xv[M], gvals[M], want[M], got[M];
  for (int i = 0; i < M; i++) {
    xv[i] = sign * tie_value(t_rank, i);
    gvals[i] = grad_value(t_rank, i);
    double best = sign * tie_value(0, i);
    for (int r = 1; r < t_size; r++)
      best =
          op == TCOLL_MIN ? fmin(best, sign * tie_value(r, i)) : fmax(best, sign * tie_value(r, i));
    int count = 0;
    double gsum = 0;
    for (int r = 0; r < t_size; r++) {
      count += sign * tie_value(r, i) == best;
      gsum += dst < 0 || r == dst ? grad_value(r, i) : 0.0;
    }
    want[i] = round_to(dt, xv[i] == best ? gsum / count : 0.0);
  }
  tcoll_tensor_t x = g_t1(dt, M), y = t_empty(), g = g_t1(dt, M), gx = g_t1(dt, M);
  g_fill_const(&gx, 99.0); /* overwritten */
  set_values(&x, xv);
  set_values(&g, gvals);
  tcoll_grad_node_t *node = NULL;
  if (dst < 0)
    T_OK(tcoll_grad_all_reduce(&x, op, NULL, &y, &node));
  else
    T_OK(tcoll_grad_reduce(&x, dst, op, NULL, &y, &node));
  T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1)); /* before waiting y: backward waits for it */
  T_OK(tcoll_wait(gx.data));
  T_OK(tcoll_wait(y.data));
  t_read(&gx, got);
  for (int i = 0; i < M; i++)
    T_EXPECT(got[i] == want[i], "%s %s (dst %d) %s: grad[%d] is %.17g, expected %.17g",
             dst < 0 ? "all_reduce" : "reduce", tcoll_redop_name(op), dst, tcoll_dtype_name(dt), i,
             got[i], want[i]);
  /* y itself: the extremum (on dst for reduce; untouched zeros elsewhere) */
  double yv[M];
  t_read(&y, yv);
  for (int i = 0; i < M; i++) {
    double best = sign * tie_value(0, i);
    for (int r = 1; r < t_size; r++)
      best =
          op == TCOLL_MIN ? fmin(best, sign * tie_value(r, i)) : fmax(best, sign * tie_value(r, i));
    double wy = dst < 0 || t_rank == dst ? best : 0.0;
    T_EXPECT(yv[i] == wy, "y[%d] is %g, expected %g", i, yv[i], wy);
  }
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&g);
  tcoll_tensor_free(&gx);
}

START_TEST(ties_all_reduce) {
  tie_check(TCOLL_FLOAT64, TCOLL_MAX, -1);
  tie_check(TCOLL_FLOAT64, TCOLL_MIN, -1);
  tie_check(TCOLL_FLOAT32, TCOLL_MAX, -1);
}
END_TEST

START_TEST(ties_reduce) {
  tie_check(TCOLL_FLOAT64, TCOLL_MAX, 0);
  tie_check(TCOLL_FLOAT64, TCOLL_MIN, t_size - 1);
  tie_check(TCOLL_FLOAT32, TCOLL_MIN, t_size / 2);
}
END_TEST

/* PRODUCT with zeros, powers of two (every product exact): element 0 no zero, element 1 one
 * zero (rank 0), element 2 two zeros (ranks 0 and 1), element 3 all zero. */
static double zero_value(int r, int i) {
  switch (i) {
  case 0: return r % 2 ? -2.0 : 0.5;
  case 1: return r == 0 ? 0.0 : 2.0;
  case 2: return r < 2 ? 0.0 : 4.0;
  default: return 0.0;
  }
}

static void zero_check(tcoll_dtype_t dt, int dst) {
  double xv[M], gvals[M], want[M], got[M];
  for (int i = 0; i < M; i++) {
    xv[i] = zero_value(t_rank, i);
    gvals[i] = grad_value(t_rank, i);
    double others = 1.0, gsum = 0.0;
    for (int r = 0; r < t_size; r++) {
      if (r != t_rank) others *= zero_value(r, i);
      gsum += dst < 0 || r == dst ? grad_value(r, i) : 0.0;
    }
    want[i] = round_to(dt, gsum * others);
  }
  tcoll_tensor_t x = g_t1(dt, M), y = t_empty(), g = g_t1(dt, M), gx = t_empty();
  set_values(&x, xv);
  set_values(&g, gvals);
  tcoll_grad_node_t *node = NULL;
  if (dst < 0)
    T_OK(tcoll_grad_all_reduce(&x, TCOLL_PRODUCT, NULL, &y, &node));
  else
    T_OK(tcoll_grad_reduce(&x, dst, TCOLL_PRODUCT, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  g_fill_const(&x, 123.0); /* the node keeps its own copy of x */
  T_OK(tcoll_grad_backward(node, &g, 1, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  t_read(&gx, got);
  for (int i = 0; i < M; i++)
    T_EXPECT(got[i] == want[i], "%s product %s: grad[%d] is %.17g, expected %.17g",
             dst < 0 ? "all_reduce" : "reduce", tcoll_dtype_name(dt), i, got[i], want[i]);
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&g);
  tcoll_tensor_free(&gx);
}

START_TEST(zeros_product) {
  zero_check(TCOLL_FLOAT64, -1);
  zero_check(TCOLL_FLOAT32, -1);
  zero_check(TCOLL_FLOAT64, t_size - 1);
  zero_check(TCOLL_FLOAT64, 0);
}
END_TEST

/* ---- no gradient ---- */

static double small_int(int64_t i, void *ctx) { return (double)((i + *(int *)ctx) % 5 + 1); }

START_TEST(bitwise_unsupported) {
  tcoll_redop_t ops[3] = {TCOLL_BAND, TCOLL_BOR, TCOLL_BXOR};
  for (int k = 0; k < 3; k++) {
    for (int rooted = 0; rooted < 2; rooted++) {
      tcoll_tensor_t x = g_t1(TCOLL_INT32, 6), y = t_empty(), g = g_t1(TCOLL_INT32, 6),
                     gx = t_empty();
      t_set_all(&x, small_int, &t_rank);
      tcoll_grad_node_t *node = NULL;
      if (rooted)
        T_OK(tcoll_grad_reduce(&x, 0, ops[k], NULL, &y, &node)); /* the forward works */
      else
        T_OK(tcoll_grad_all_reduce(&x, ops[k], NULL, &y, &node));
      T_OK(tcoll_wait(y.data));
      T_FAILS(tcoll_grad_backward(node, &g, 1, &gx, 1), TCOLL_ERR_UNSUPPORTED,
              "not differentiable");
      T_EXPECT(gx.data == NULL, "nothing allocated");
      T_EXPECT(tcoll_pending_count() == 0, "nothing pending");
      tcoll_grad_node_free(node);
      tcoll_tensor_free(&x);
      tcoll_tensor_free(&y);
      tcoll_tensor_free(&g);
    }
  }
}
END_TEST

START_TEST(integer_extremum_unsupported) {
  tcoll_redop_t ops[3] = {TCOLL_MAX, TCOLL_MIN, TCOLL_PRODUCT};
  for (int k = 0; k < 3; k++) {
    tcoll_tensor_t x = g_t1(TCOLL_INT64, 4), y = t_empty(), g = g_t1(TCOLL_INT64, 4),
                   gx = t_empty();
    t_set_all(&x, small_int, &t_rank);
    tcoll_grad_node_t *node = NULL;
    T_OK(tcoll_grad_all_reduce(&x, ops[k], NULL, &y, &node));
    T_OK(tcoll_wait(y.data));
    T_FAILS(tcoll_grad_backward(node, &g, 1, &gx, 1), TCOLL_ERR_UNSUPPORTED,
            "needs a floating dtype");
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
  }
}
END_TEST

START_TEST(reduce_scatter_nonsum_unsupported) {
  tcoll_redop_t ops[3] = {TCOLL_MAX, TCOLL_MIN, TCOLL_PRODUCT};
  int64_t shape[1] = {3};
  tcoll_tensor_t proto = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, shape, t_device());
  for (int k = 0; k < 3; k++) {
    tcoll_tensor_t *xs = g_list(t_size, &proto, true), *gxs = g_list(t_size, &proto, false);
    tcoll_tensor_t y = t_empty(), g = g_t1(TCOLL_FLOAT32, 3);
    tcoll_grad_node_t *node = NULL;
    T_OK(tcoll_grad_reduce_scatter(xs, ops[k], NULL, &y, &node));
    T_OK(tcoll_wait(y.data));
    T_FAILS(tcoll_grad_backward(node, &g, 1, gxs, t_size), TCOLL_ERR_UNSUPPORTED,
            "sum, avg and premul_sum");
    for (int i = 0; i < t_size; i++) T_EXPECT(gxs[i].data == NULL, "grad_inputs[%d] allocated", i);
    tcoll_grad_node_free(node);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
    g_list_free(xs, t_size);
    g_list_free(gxs, t_size);
  }
}
END_TEST

START_TEST(reduce_scatter_tensor_only_sum) {
  tcoll_redop_t pm;
  T_OK(tcoll_redop_create_premul_sum(2.0, &pm));
  tcoll_redop_t ops[5] = {TCOLL_AVG, TCOLL_MAX, TCOLL_MIN, TCOLL_PRODUCT, pm};
  tcoll_tensor_t x = g_t2(TCOLL_FLOAT32, 2 * t_size, 3);
  for (int k = 0; k < 5; k++) {
    tcoll_tensor_t y = t_empty();
    tcoll_grad_node_t *node = (tcoll_grad_node_t *)&y; /* must come back NULL */
    T_FAILS(tcoll_grad_reduce_scatter_tensor(&x, ops[k], 0, NULL, &y, &node), TCOLL_ERR_UNSUPPORTED,
            "Only sum reduce op is supported");
    T_EXPECT(node == NULL && y.data == NULL, "a failed forward leaves no node and no output");
    T_EXPECT(tcoll_pending_count() == 0, "a failed forward starts nothing");
  }
  /* bitwise ops on an integer tensor: the same answer */
  tcoll_tensor_t xi = g_t2(TCOLL_INT32, t_size, 2), yi = t_empty();
  tcoll_grad_node_t *node = NULL;
  T_FAILS(tcoll_grad_reduce_scatter_tensor(&xi, TCOLL_BOR, -2, NULL, &yi, &node),
          TCOLL_ERR_UNSUPPORTED, "Only sum reduce op is supported");
  T_OK(tcoll_redop_destroy(pm));
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&xi);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("grad_nonlinear");
  TCase *tc = t_tcase("finite_differences");
  tcase_add_test(tc, fd_all_reduce_max);
  tcase_add_test(tc, fd_all_reduce_min);
  tcase_add_test(tc, fd_all_reduce_product);
  tcase_add_test(tc, fd_reduce_max);
  tcase_add_test(tc, fd_reduce_min);
  tcase_add_test(tc, fd_reduce_product);
  suite_add_tcase(s, tc);
  tc = t_tcase("exact");
  tcase_add_test(tc, ties_all_reduce);
  tcase_add_test(tc, ties_reduce);
  tcase_add_test(tc, zeros_product);
  suite_add_tcase(s, tc);
  tc = t_tcase("no_gradient");
  tcase_add_test(tc, bitwise_unsupported);
  tcase_add_test(tc, integer_extremum_unsupported);
  tcase_add_test(tc, reduce_scatter_nonsum_unsupported);
  tcase_add_test(tc, reduce_scatter_tensor_only_sum);
  suite_add_tcase(s, tc);
  return s;
}
