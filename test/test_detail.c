/* TCOLL_DEBUG=DETAIL (set by the suite's environment): ranks compare each collective's
 * signature before posting it. Disagreements return TCOLL_ERR_MISMATCH on every rank, name the
 * ranks and fields, never hang, and leave the library usable. */
#include "harness.h"

#include <string.h>

static double one(int64_t i, void *ctx) {
  (void)i;
  (void)ctx;
  return 1.0;
}

/* After a refused call the communicator still works: a correct all_reduce. */
static void expect_usable(void) {
  int64_t shape[1] = {5};
  tcoll_tensor_t x = t_alloc(TCOLL_FLOAT32, 1, shape), y = t_empty();
  t_set_all(&x, one, NULL);
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_wait(y.data));
  for (int i = 0; i < 5; i++)
    T_EXPECT(t_get(&y, i) == t_size, "y[%d] = %g, expected %d", i, t_get(&y, i), t_size);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending after a refused call", tcoll_pending_count());
}

START_TEST(config_says_detail) {
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  T_EXPECT(c.debug == TCOLL_LOG_DETAIL, "debug level is %d, expected DETAIL from TCOLL_DEBUG",
           (int)c.debug);
}
END_TEST

START_TEST(matching_calls_pass) {
  int64_t shape[2] = {3, 2 * t_size};
  tcoll_tensor_t x = t_alloc(TCOLL_INT32, 2, shape), y = t_empty(), z = t_empty(), b = t_empty();
  t_set_all(&x, one, NULL);
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_reduce_scatter(&x, TCOLL_MAX, 1, NULL, &z));
  T_OK(tcoll_broadcast(&x, t_size - 1, NULL, &b));
  T_OK(tcoll_wait_all());
  T_EXPECT(t_get(&y, 0) == t_size, "all_reduce gave %g", t_get(&y, 0));
  T_EXPECT(t_get(&z, 0) == 1, "reduce_scatter max gave %g", t_get(&z, 0));
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&z);
  tcoll_tensor_free(&b);
}
END_TEST

/* A checked call right after a collective whose later steps this rank starts (t_pending_ring):
 * the check's wait for the other ranks drives it (a blocking one hung at 3 ranks and more). */
START_TEST(check_after_pending) {
  int64_t shape[1] = {5};
  tcoll_tensor_t x = t_host(TCOLL_FLOAT32, 1, shape), y = t_empty();
  t_set_all(&x, one, NULL);
  t_pending_t pr;
  t_pending_ring(&pr, tcoll_comm_world());
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
  t_pending_ring_done(&pr, "a DETAIL check after a pending ring");
  T_OK(tcoll_wait(y.data));
  T_EXPECT(t_get(&y, 0) == t_size, "all_reduce gave %g", t_get(&y, 0));
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
}
END_TEST

static void set_timeout(double seconds) {
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  c.timeout = seconds;
  T_OK(tcoll_set_config(&c));
}

/* Rank 1 misses a collective on a communicator of its own: the others' check gives up after
 * TCOLL_TIMEOUT, says so, leaves nothing pending, and refuses any later call on that
 * communicator. Rank 1 then joins the abandoned check late with another op: it learns of the
 * disagreement and its own exchange of the details times out, while MPI completes the others'
 * abandoned exchange into the buffers they kept for it (under ASan, a use after free if not). */
START_TEST(missing_rank_times_out) {
  if (t_size < 2) return;
  tcoll_comm_t *c;
  T_OK(tcoll_comm_split(tcoll_comm_world(), 0, t_rank, &c));
  int64_t shape[1] = {5};
  tcoll_tensor_t x = t_host(TCOLL_FLOAT32, 1, shape), y = t_empty();
  t_set_all(&x, one, NULL);
  set_timeout(0.3);
  if (t_rank != 1) {
    int rc = tcoll_all_reduce(&x, TCOLL_SUM, c, &y);
    const char *m = tcoll_last_error();
    T_EXPECT(rc == TCOLL_ERR_TIMEOUT, "all_reduce with rank 1 missing returned %s: %s",
             tcoll_status_string(rc), m);
    T_EXPECT(t_contains(m, "DETAIL check of all_reduce (comm seq 1)") &&
                 t_contains(m, "not every rank arrived within 0.3 s") &&
                 t_contains(m, "no longer usable"),
             "message: %s", m);
    T_EXPECT(y.data == NULL, "the refused all_reduce left an output allocated");
    T_EXPECT(tcoll_pending_count() == 0, "%zu pending after the timeout", tcoll_pending_count());
    rc = tcoll_broadcast(&x, 0, c, &y);
    m = tcoll_last_error();
    T_EXPECT(rc == TCOLL_ERR_STATE, "a call after the timeout returned %s: %s",
             tcoll_status_string(rc), m);
    T_EXPECT(
        t_contains(m, "is no longer usable: the DETAIL check of its collective seq 1 timed out") &&
            t_contains(m, "broadcast started nothing"),
        "message: %s", m);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (t_rank == 1) {
    int rc = tcoll_broadcast(&x, 0, c, &y);
    T_EXPECT(rc == TCOLL_ERR_TIMEOUT, "the late rank's broadcast returned %s: %s",
             tcoll_status_string(rc), tcoll_last_error());
  }
  set_timeout(0.0);
  MPI_Barrier(MPI_COMM_WORLD); /* the others' abandoned exchange completes meanwhile */
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending", tcoll_pending_count());
  T_OK(tcoll_comm_free(&c));
  tcoll_tensor_free(&x);
  expect_usable();
}
END_TEST

/* Rank 0 calls all_reduce while the others call all_gather. */
START_TEST(different_ops) {
  if (t_size < 2) return;
  int64_t shape[1] = {4};
  tcoll_tensor_t x = t_alloc(TCOLL_FLOAT32, 1, shape), y = t_empty();
  int rc =
      t_rank == 0 ? tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y) : tcoll_all_gather(&x, 0, NULL, &y);
  T_EXPECT(rc == TCOLL_ERR_MISMATCH, "got %s: %s", tcoll_status_string(rc), tcoll_last_error());
  const char *m = tcoll_last_error();
  T_EXPECT(t_contains(m, "op: rank 0 all_reduce, rank 1 all_gather"),
           "message lacks the op field: %s", m);
  T_EXPECT(y.data == NULL, "a refused call allocated its output");
  tcoll_tensor_free(&x);
  expect_usable();
}
END_TEST

START_TEST(different_shapes_and_dtypes) {
  if (t_size < 2) return;
  int64_t shape[2] = {2, t_rank == t_size - 1 ? 3 : 2};
  tcoll_dtype_t dt = t_rank == 1 ? TCOLL_FLOAT64 : TCOLL_FLOAT32;
  tcoll_tensor_t x = t_alloc(dt, 2, shape), y = t_empty();
  int rc = tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y);
  T_EXPECT(rc == TCOLL_ERR_MISMATCH, "got %s: %s", tcoll_status_string(rc), tcoll_last_error());
  const char *m = tcoll_last_error();
  T_EXPECT(t_contains(m, "dtype: rank 0 float32, rank 1 float64"),
           "message lacks the dtype field: %s", m);
  char want[64];
  snprintf(want, sizeof want, "rank %d [2, 3]", t_size - 1);
  T_EXPECT(t_contains(m, want), "message lacks \"%s\": %s", want, m);
  tcoll_tensor_free(&x);
  expect_usable();
}
END_TEST

START_TEST(different_roots_and_ops) {
  if (t_size < 2) return;
  int64_t shape[1] = {3};
  tcoll_tensor_t x = t_alloc(TCOLL_FLOAT32, 1, shape), y = t_empty(), z = t_empty();
  int rc = tcoll_broadcast(&x, t_rank == 1 ? 1 : 0, NULL, &y);
  T_EXPECT(rc == TCOLL_ERR_MISMATCH && t_contains(tcoll_last_error(), "root: rank 0 0, rank 1 1"),
           "broadcast roots: %s: %s", tcoll_status_string(rc), tcoll_last_error());
  rc = tcoll_all_reduce(&x, t_rank == 0 ? TCOLL_MAX : TCOLL_SUM, NULL, &z);
  T_EXPECT(rc == TCOLL_ERR_MISMATCH &&
               t_contains(tcoll_last_error(), "reduce op: rank 0 max, rank 1 sum"),
           "reduce ops: %s: %s", tcoll_status_string(rc), tcoll_last_error());
  tcoll_tensor_free(&x);
  expect_usable();
}
END_TEST

/* A rank whose arguments are refused locally still tells the others, who would otherwise wait
 * forever for it. */
START_TEST(local_failure_reaches_the_others) {
  if (t_size < 2) return;
  int64_t shape[1] = {3};
  tcoll_tensor_t x = t_alloc(TCOLL_FLOAT32, 1, shape), y = t_empty();
  int rc = tcoll_broadcast(&x, t_rank == 0 ? t_size + 5 : 0, NULL, &y);
  if (t_rank == 0) {
    T_EXPECT(rc == TCOLL_ERR_INVALID_ARGUMENT, "rank 0 got %s", tcoll_status_string(rc));
    T_EXPECT(t_contains(tcoll_last_error(), "src is"), "rank 0's own message was replaced: %s",
             tcoll_last_error());
  } else {
    T_EXPECT(rc == TCOLL_ERR_MISMATCH, "got %s: %s", tcoll_status_string(rc), tcoll_last_error());
    T_EXPECT(t_contains(tcoll_last_error(), "rank 0 could not start broadcast"), "message: %s",
             tcoll_last_error());
  }
  tcoll_tensor_free(&x);
  expect_usable();
}
END_TEST

/* BUSY on one rank only: that rank keeps its BUSY, the others learn of it. */
START_TEST(busy_on_one_rank) {
  if (t_size < 2) return;
  int64_t shape[1] = {4};
  tcoll_tensor_t x = t_alloc(TCOLL_FLOAT32, 1, shape), y = t_alloc(TCOLL_FLOAT32, 1, shape);
  tcoll_tensor_t held = t_alloc(TCOLL_FLOAT32, 1, shape);
  t_set_all(&x, one, NULL);
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &held)); /* pending on every rank */
  int rc = tcoll_all_reduce(&x, TCOLL_SUM, NULL, t_rank == 1 ? &held : &y);
  if (t_rank == 1)
    T_EXPECT(rc == TCOLL_ERR_BUSY, "rank 1 got %s: %s", tcoll_status_string(rc),
             tcoll_last_error());
  else
    T_EXPECT(rc == TCOLL_ERR_MISMATCH &&
                 t_contains(tcoll_last_error(), "rank 1 could not start all_reduce"),
             "got %s: %s", tcoll_status_string(rc), tcoll_last_error());
  T_OK(tcoll_wait(held.data));
  T_EXPECT(t_get(&held, 0) == t_size, "the first all_reduce gave %g", t_get(&held, 0));
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&held);
  expect_usable();
}
END_TEST

/* all_to_all_single: row counts may differ per rank; what must agree is what each pair sends
 * and expects. */
START_TEST(split_agreement) {
  int size = t_size, me = t_rank;
  int64_t in_splits[8], out_splits[8], rows_in = 0, rows_out = 0;
  for (int j = 0; j < size; j++) {
    in_splits[j] = me + j;  /* rank i sends i + j rows to rank j */
    out_splits[j] = j + me; /* so rank j expects j + i rows from rank i */
    rows_in += in_splits[j];
    rows_out += out_splits[j];
  }
  int64_t shape[2] = {rows_in, 2};
  tcoll_tensor_t x = t_alloc(TCOLL_INT32, 2, shape), y = t_empty();
  T_OK(tcoll_all_to_all_single(&x, out_splits, in_splits, NULL, &y));
  T_OK(tcoll_wait(y.data));
  T_EXPECT(y.shape[0] == rows_out, "output has %lld rows, expected %lld", (long long)y.shape[0],
           (long long)rows_out);
  tcoll_tensor_free(&y);
  if (size >= 2) {
    /* Rank 1 now expects one more row from rank 0 than rank 0 sends. */
    if (me == 1) out_splits[0] += 1;
    y = t_empty();
    int rc = tcoll_all_to_all_single(&x, out_splits, in_splits, NULL, &y);
    T_EXPECT(rc == TCOLL_ERR_MISMATCH, "got %s: %s", tcoll_status_string(rc), tcoll_last_error());
    T_EXPECT(t_contains(tcoll_last_error(), "rank 1 expects 2 rows from rank 0"), "message: %s",
             tcoll_last_error());
  }
  tcoll_tensor_free(&x);
  expect_usable();
}
END_TEST

/* The list all_to_all: rank i's ins[j] must hold as many elements as rank j's outs[i]. */
START_TEST(list_agreement) {
  int size = t_size, me = t_rank;
  tcoll_tensor_t ins[8] = {{0}}, outs[8] = {{0}};
  for (int j = 0; j < size; j++) {
    int64_t ni = me + j + 1, no = j + me + 1; /* rank i sends i + j + 1 elements to rank j */
    if (me == 1 && j == 0) no += 1;           /* but rank 1 expects one more from rank 0 */
    ins[j] = t_alloc(TCOLL_INT32, 1, &ni);
    outs[j] = t_alloc(TCOLL_INT32, 1, &no);
  }
  int rc = tcoll_all_to_all(ins, NULL, outs);
  if (size >= 2) {
    T_EXPECT(rc == TCOLL_ERR_MISMATCH, "got %s: %s", tcoll_status_string(rc), tcoll_last_error());
    T_EXPECT(t_contains(tcoll_last_error(),
                        "rank 1 expects 3 elements from rank 0 (its outs[0]) but rank 0 sends 2"),
             "message: %s", tcoll_last_error());
  } else {
    T_EXPECT(rc == TCOLL_SUCCESS, "one rank: got %s: %s", tcoll_status_string(rc),
             tcoll_last_error());
    T_OK(tcoll_wait_all());
  }
  for (int j = 0; j < size; j++) {
    tcoll_tensor_free(&ins[j]);
    tcoll_tensor_free(&outs[j]);
  }
  expect_usable();
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("detail");
  TCase *tc = t_tcase("detail");
  tcase_add_test(tc, config_says_detail);
  tcase_add_test(tc, matching_calls_pass);
  tcase_add_test(tc, different_ops);
  tcase_add_test(tc, different_shapes_and_dtypes);
  tcase_add_test(tc, different_roots_and_ops);
  tcase_add_test(tc, local_failure_reaches_the_others);
  tcase_add_test(tc, busy_on_one_rank);
  tcase_add_test(tc, split_agreement);
  tcase_add_test(tc, list_agreement);
  tcase_add_test(tc, check_after_pending);
  tcase_add_test(tc, missing_rank_times_out);
  suite_add_tcase(s, tc);
  return s;
}
