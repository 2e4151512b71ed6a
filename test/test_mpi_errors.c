/* MPI failures become TCOLL_ERR_MPI with MPI's own message; tcoll never lets them abort the
 * process (Open MPI 4.1 raises nonblocking-collective errors on MPI_COMM_WORLD, whose default
 * handler is fatal: lib/mpiglue/mpi_errors.c keeps them returning inside tcoll). */
#include "algo_util.h"

static double ones(int64_t i, void *ctx) {
  (void)i;
  (void)ctx;
  return 1.0;
}

/* Whether msg carries MPI's own text for one of its error classes. */
static bool has_mpi_error_text(const char *msg) {
  for (int cls = 1; cls <= MPI_ERR_LASTCODE; cls++) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(cls, text, &len) == MPI_SUCCESS && len > 0 && t_contains(msg, text))
      return true;
  }
  return false;
}

/* Without DETAIL, nothing stops ranks from disagreeing: a broadcast whose root sends more than
 * a receiver expects is truncated there. The standard calls such a program erroneous without
 * naming the error class (Open MPI says MPI_ERR_TRUNCATE, MPICH 4.0 MPI_ERR_OTHER): any MPI
 * error will do, as long as it comes back as TCOLL_ERR_MPI with MPI's own message. */
START_TEST(truncation_is_returned) {
  if (t_size < 2) return;
  t_save_algo();
  t_set_algo("broadcast:mpi"); /* MPI's error (shm finds the disagreement itself: test_shm.c) */
  int64_t shape[1] = {t_rank == 0 ? 64 : 16};
  tcoll_tensor_t x = t_alloc(TCOLL_FLOAT64, 1, shape), y = t_empty();
  T_OK(tcoll_broadcast(&x, 0, NULL, &y));
  int rc = tcoll_wait(y.data);
  if (t_rank == 0) {
    T_EXPECT(rc == TCOLL_SUCCESS, "the root got %s: %s", tcoll_status_string(rc),
             tcoll_last_error());
  } else {
    T_EXPECT(rc == TCOLL_ERR_MPI, "a truncated receiver got %s", tcoll_status_string(rc));
    T_EXPECT(
        t_contains(tcoll_last_error(), "broadcast #") && has_mpi_error_text(tcoll_last_error()),
        "message (no MPI error text in it): %s", tcoll_last_error());
  }
  T_EXPECT(tcoll_pending_count() == 0, "the failed work stays pending");
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  /* The library and the communicator still work. */
  int64_t s2[1] = {7};
  tcoll_tensor_t a = t_alloc(TCOLL_FLOAT64, 1, s2), b = t_empty();
  t_set_all(&a, ones, NULL);
  T_OK(tcoll_all_reduce(&a, TCOLL_SUM, NULL, &b));
  T_OK(tcoll_wait(b.data));
  T_EXPECT(t_get(&b, 6) == t_size, "all_reduce after the failure gave %g", t_get(&b, 6));
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&b);
  t_restore_algo();
}
END_TEST

/* A failure found at completion names the call that was posted, in its form: with counts above
 * TCOLL_MAX_COUNT where MPI has the MPI-4 large-count calls (MPICH 4), MPI_Ibcast_c. */
START_TEST(failure_names_the_call) {
  if (t_size < 2) return;
  tcoll_config_t old, cfg;
  T_OK(tcoll_get_config(&old));
  cfg = old;
  snprintf(cfg.algo, sizeof cfg.algo, "broadcast:mpi");
  if (MPI_VERSION >= 4) cfg.max_count = 10; /* 64 and 16 elements: one MPI_Ibcast_c each */
  T_OK(tcoll_set_config(&cfg));
  const char *want = MPI_VERSION >= 4 ? "MPI_Ibcast_c failed" : "MPI_Ibcast failed";
  int64_t shape[1] = {t_rank == 0 ? 64 : 16};
  tcoll_tensor_t x = t_alloc(TCOLL_FLOAT64, 1, shape), y = t_empty();
  T_OK(tcoll_broadcast(&x, 0, NULL, &y));
  int rc = tcoll_wait(y.data);
  if (t_rank != 0)
    T_EXPECT(rc == TCOLL_ERR_MPI && t_contains(tcoll_last_error(), want),
             "a truncated receiver got %s: %s "
             "(expected \"%s\")",
             tcoll_status_string(rc), tcoll_last_error(), want);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  T_OK(tcoll_set_config(&old));
}
END_TEST

/* The host program's own MPI_COMM_WORLD keeps its fatal semantics outside tcoll: the handler
 * tcoll installs is an exact stand-in (checked by the name MPI reports for it being ours, and
 * by errors inside tcoll returning, above). */
START_TEST(world_handler_is_restored_semantics) {
  MPI_Errhandler h;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &h);
  T_EXPECT(h != MPI_ERRORS_RETURN,
           "tcoll must not turn the host program's MPI_COMM_WORLD to errors-return");
  MPI_Errhandler_free(&h);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("mpi_errors");
  TCase *tc = t_tcase("mpi_errors");
  tcase_add_test(tc, truncation_is_returned);
  tcase_add_test(tc, failure_names_the_call);
  tcase_add_test(tc, world_handler_is_restored_semantics);
  suite_add_tcase(s, tc);
  return s;
}
