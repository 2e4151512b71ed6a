/* Timeouts: TCOLL_TIMEOUT (through tcoll_set_config) and tcoll_wait_timeout return
 * TCOLL_ERR_TIMEOUT with the pending op described and leave the work pending; a later wait
 * completes it. The late rank is held back by a barrier that the waiting ranks only reach after
 * their timed-out wait, so nothing depends on timing but the timeout itself. */
#include "harness.h"

static void set_timeout(double seconds) {
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  c.timeout = seconds;
  T_OK(tcoll_set_config(&c));
}

static double from_src(int64_t i, void *ctx) { return 100.0 * *(int *)ctx + (double)i; }

/* Rank 1 broadcasts late; the others time out first, then complete. `how` picks the wait. */
static void late_broadcast(int how) {
  if (t_size < 2) return;
  int64_t shape[1] = {16};
  tcoll_tensor_t x = t_alloc(TCOLL_FLOAT32, 1, shape), y = t_empty();
  t_set_all(&x, from_src, &t_rank);
  if (t_rank != 1) {
    T_OK(tcoll_broadcast(&x, 1, NULL, &y));
    T_EXPECT(tcoll_test(y.data) == TCOLL_IN_PROGRESS,
             "a broadcast whose root has not posted completed");
    T_EXPECT(tcoll_query(y.data) == TCOLL_IN_PROGRESS, "tcoll_query says complete");
    int rc = how == 0   ? tcoll_wait(y.data)
             : how == 1 ? tcoll_wait_timeout(y.data, 0.2)
                        : tcoll_wait_tensor(&y);
    T_EXPECT(rc == TCOLL_ERR_TIMEOUT, "wait returned %s", tcoll_status_string(rc));
    const char *m = tcoll_last_error();
    T_EXPECT(t_contains(m, "broadcast") && t_contains(m, "did not complete within") &&
                 t_contains(m, "still pending"),
             "message does not describe the pending op: %s", m);
    T_EXPECT(tcoll_pending_count() == 1, "the timed-out work is no longer pending (%zu)",
             tcoll_pending_count());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (t_rank == 1) T_OK(tcoll_broadcast(&x, 1, NULL, &y));
  set_timeout(0.0);
  T_OK(tcoll_wait(y.data));
  int src = 1;
  t_check_all("late broadcast", &y, from_src, &src, 0);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
}

START_TEST(config_timeout) {
  set_timeout(0.3);
  late_broadcast(0);
  set_timeout(0.0);
}
END_TEST

START_TEST(explicit_timeout) { late_broadcast(1); }
END_TEST

START_TEST(wait_tensor_timeout) {
  set_timeout(0.25);
  late_broadcast(2);
  set_timeout(0.0);
}
END_TEST

/* A timeout that does not expire changes nothing. */
START_TEST(generous_timeout) {
  int64_t shape[1] = {1000};
  tcoll_tensor_t x = t_alloc(TCOLL_FLOAT64, 1, shape), y = t_empty();
  t_set_all(&x, from_src, &t_rank);
  T_OK(tcoll_all_reduce(&x, TCOLL_MAX, NULL, &y));
  T_OK(tcoll_wait_timeout(y.data, 120.0));
  int top = t_size - 1;
  t_check_all("max", &y, from_src, &top, 0);
  T_FAILS(tcoll_wait_timeout(y.data, 0.0 / 0.0), TCOLL_ERR_INVALID_ARGUMENT, "NaN");
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("timeout");
  TCase *tc = t_tcase("timeout");
  tcase_add_test(tc, config_timeout);
  tcase_add_test(tc, explicit_timeout);
  tcase_add_test(tc, wait_tensor_timeout);
  tcase_add_test(tc, generous_timeout);
  suite_add_tcase(s, tc);
  return s;
}
