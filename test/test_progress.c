/* TCOLL_PROGRESS=thread (set by the suite's environment): posted collectives complete while the
 * caller does not call tcoll or MPI at all. tcoll_query observes completion without advancing
 * anything itself. */
#include "harness.h"

#include <time.h>

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static double fill(int64_t i, void *ctx) { return (double)(*(int *)ctx + 1) + (double)(i % 4); }

START_TEST(config_says_thread) {
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  T_EXPECT(c.progress_thread == 1, "progress_thread is %d", c.progress_thread);
}
END_TEST

/* Post, then only sleep and query: the progress thread must complete the work. The bound is
 * generous (60 s): this checks that completion happens, not how fast. */
START_TEST(completes_without_the_caller) {
  int64_t shape[1] = {1 << 16};
  tcoll_tensor_t x = t_alloc(TCOLL_FLOAT32, 1, shape), y = t_empty(), g = t_empty();
  t_set_all(&x, fill, &t_rank);
  MPI_Barrier(MPI_COMM_WORLD); /* start together: nobody's query may depend on a late poster */
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_all_gather(&x, 0, NULL, &g));
  int waited = 0;
  while ((tcoll_query(y.data) != TCOLL_SUCCESS || tcoll_query(g.data) != TCOLL_SUCCESS) &&
         waited < 60000) {
    nap_ms(5);
    waited += 5;
  }
  T_EXPECT(tcoll_query(y.data) == TCOLL_SUCCESS,
           "all_reduce not completed by the progress thread after %d ms", waited);
  T_EXPECT(tcoll_query(g.data) == TCOLL_SUCCESS, "all_gather not completed by the progress thread");
  T_EXPECT(tcoll_pending_count() == 2, "completed work stays pending until waited (%zu)",
           tcoll_pending_count());
  T_OK(tcoll_wait(y.data));
  T_OK(tcoll_wait(g.data));
  double want = 0;
  for (int r = 0; r < t_size; r++) want += r + 1 + 3;
  T_EXPECT(t_get(&y, 3) == want, "y[3] = %g, expected %g", t_get(&y, 3), want);
  T_EXPECT(t_get(&g, (int64_t)(t_size - 1) * shape[0]) == t_size, "gathered value %g",
           t_get(&g, (int64_t)(t_size - 1) * shape[0]));
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&g);
}
END_TEST

/* The progress thread and explicit waits race for the same works: results stay exact. */
START_TEST(waits_race_the_thread) {
  int64_t shape[1] = {257};
  for (int it = 0; it < 200; it++) {
    tcoll_tensor_t x = t_alloc(TCOLL_INT32, 1, shape), y = t_empty();
    t_set_all(&x, fill, &t_rank);
    T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
    if (it % 3 == 0) nap_ms(1);
    T_OK(it % 2 ? tcoll_wait(y.data) : tcoll_wait_timeout(y.data, 60.0));
    double want = 0;
    for (int r = 0; r < t_size; r++) want += r + 1 + 1;
    T_EXPECT(t_get(&y, 5) == want, "iteration %d: %g, expected %g", it, t_get(&y, 5), want);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
  }
}
END_TEST

/* The progress thread completes device work on its own stream; the caller's stream must still
 * see the outputs after tcoll_wait (the pop orders the popping thread's current stream). Runs
 * with device tensors; the -delay variant slows every emulated copy so a missing order shows. */
START_TEST(caller_stream_sees_outputs) {
  if (t_device() == TCOLL_HOST) return;
  void *stream = NULL;
  T_OK(tcoll_stream_create(0, &stream));
  T_OK(tcoll_set_stream(0, stream));
  int64_t shape[1] = {4096};
  for (int it = 0; it < 6; it++) {
    tcoll_tensor_t x = t_alloc(TCOLL_FLOAT32, 1, shape), y = t_empty();
    int v = t_rank + it;
    t_set_all(&x, fill, &v);
    T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
    for (int waited = 0; tcoll_query(y.data) != TCOLL_SUCCESS && waited < 60000; waited++)
      nap_ms(1);
    T_OK(tcoll_wait(y.data));
    /* Read on the caller's stream, then wait for that stream only. */
    tcoll_tensor_t h = t_host(TCOLL_FLOAT32, 1, shape);
    T_OK(tcoll_tensor_copy_async(&h, &y, stream));
    T_OK(tcoll_stream_synchronize(0, stream));
    double want = 0;
    for (int r = 0; r < t_size; r++) want += r + it + 1 + 2; /* element 2 */
    T_EXPECT(((float *)h.data)[2] == want, "iteration %d: the caller's stream read %g, expected %g",
             it, ((float *)h.data)[2], want);
    tcoll_tensor_free(&h);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
  }
  T_OK(tcoll_set_stream(0, NULL));
  T_OK(tcoll_stream_destroy(0, stream));
}
END_TEST

static double sent(int64_t i, void *ctx) {
  return (double)(((int *)ctx)[0] * 100 + ((int *)ctx)[1] * 10) + (double)(i % 7);
}
static double junk(int64_t i, void *ctx) {
  (void)i;
  (void)ctx;
  return -1.0;
}

/* Outputs written at completion (here by the progress thread) land after what the posting
 * thread's stream had queued before the call, not after the completing thread's stream. Rank 0
 * sends nothing in this all_to_all, so posting reads nothing on its stream, while junk is still
 * being copied into its outputs there: with the -delay variant (2 ms per emulated operation) the
 * progress thread completes the exchange long before the junk copies are done. */
START_TEST(outputs_after_posting_stream) {
  if (t_device() == TCOLL_HOST) return;
  void *stream = NULL;
  T_OK(tcoll_stream_create(0, &stream));
  T_OK(tcoll_set_stream(0, stream));
  int64_t n = 512, none[1] = {0}, some[1] = {n};
  tcoll_tensor_t ins[8], outs[8], trash = t_alloc(TCOLL_FLOAT32, 1, some);
  t_set_all(&trash, junk, NULL);
  for (int p = 0; p < t_size; p++) {
    int who[2] = {t_rank, p};
    ins[p] = t_alloc(TCOLL_FLOAT32, 1, t_rank == 0 ? none : some);
    if (t_rank != 0) t_set_all(&ins[p], sent, who);
    outs[p] = t_alloc(TCOLL_FLOAT32, 1, p == 0 ? none : some);
    /* Only rank 0 keeps its stream busy: the others post at once (their inputs are read after
     * their own streams), so the exchange completes while rank 0's junk is still queued. */
    for (int k = 0; t_rank == 0 && p != 0 && k < 20; k++)
      T_OK(tcoll_tensor_copy_async(&outs[p], &trash, stream));
  }
  T_OK(tcoll_all_to_all(ins, NULL, outs));
  for (int waited = 0; tcoll_query(outs[t_size - 1].data) != TCOLL_SUCCESS && waited < 60000;
       waited++)
    nap_ms(1);
  for (int p = 0; p < t_size; p++) T_OK(tcoll_wait(outs[p].data));
  for (int p = 1; p < t_size; p++) {
    tcoll_tensor_t h = t_host(TCOLL_FLOAT32, 1, some);
    T_OK(tcoll_tensor_copy_async(&h, &outs[p], stream)); /* read on the posting stream */
    T_OK(tcoll_stream_synchronize(0, stream));
    int from[2] = {p, t_rank};
    t_check_all("all_to_all output written after the posting stream's junk", &h, sent, from, 0);
    tcoll_tensor_free(&h);
  }
  for (int p = 0; p < t_size; p++) {
    tcoll_tensor_free(&ins[p]);
    tcoll_tensor_free(&outs[p]);
  }
  tcoll_tensor_free(&trash);
  T_OK(tcoll_set_stream(0, NULL));
  T_OK(tcoll_stream_destroy(0, stream));
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("progress");
  TCase *tc = t_tcase("progress");
  tcase_add_test(tc, config_says_thread);
  tcase_add_test(tc, completes_without_the_caller);
  tcase_add_test(tc, waits_race_the_thread);
  tcase_add_test(tc, caller_stream_sees_outputs);
  tcase_add_test(tc, outputs_after_posting_stream);
  suite_add_tcase(s, tc);
  return s;
}
