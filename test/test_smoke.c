/* A first end-to-end check: all_reduce SUM on world. */
#include "harness.h"

static double rank_value(int64_t i, void *ctx) {
  return (double)(*(int *)ctx + 1) * (double)(i % 5 + 1);
}
static double sum_value(int64_t i, void *ctx) {
  (void)ctx;
  return (double)(t_size * (t_size + 1) / 2) * (double)(i % 5 + 1);
}

START_TEST(all_reduce_sum) {
  int64_t shape[2] = {3, 7};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 2, shape), out = t_empty();
  t_set_all(&in, rank_value, &t_rank);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait(out.data));
  t_check_all("all_reduce sum", &out, sum_value, NULL, 0);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("smoke");
  TCase *tc = t_tcase("smoke");
  tcase_add_test(tc, all_reduce_sum);
  suite_add_tcase(s, tc);
  return s;
}
