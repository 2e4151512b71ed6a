/* The work registry: outputs stay pending until waited, conflicts are refused with
 * TCOLL_ERR_BUSY and start nothing, views find their buffer's work, coalesced work lives until
 * its last buffer is waited, test / wait_timeout / wait_all / pending_count, frees and inputs
 * that wait for pending work first. */
#include "harness.h"
#include "mpi_count.h"

#include <pthread.h>
#include <string.h>

#define F32 TCOLL_FLOAT32

/* Rank r contributes (r + 1) * (i % 7 + 1); the sum over ranks is size(size+1)/2 * (i % 7 + 1). */
static double rank_val(int64_t i, void *ctx) {
  (void)ctx;
  return (double)(t_rank + 1) * (double)(i % 7 + 1);
}
static double sum_val(int64_t i, void *ctx) {
  int64_t off = ctx ? *(int64_t *)ctx : 0; /* element i of a view starting `off` elements in */
  return (double)(t_size * (t_size + 1) / 2) * (double)((i + off) % 7 + 1);
}
/* all_reduce SUM of sum_val: every rank holds the same sum. */
static double sum_sum_val(int64_t i, void *ctx) { return (double)t_size * sum_val(i, ctx); }
static double src_val(int64_t i, void *ctx) {
  (void)ctx;
  return (double)(3 * i + 1);
}

static tcoll_tensor_t input_1d(int64_t n) {
  int64_t shape[1] = {n};
  tcoll_tensor_t t = t_alloc(F32, 1, shape);
  t_set_all(&t, rank_val, NULL);
  return t;
}

/* A descriptor for elements [off, off + n) of t (a view; tcoll does not own it). */
static tcoll_tensor_t view_1d(const tcoll_tensor_t *t, int64_t off, int64_t n) {
  int64_t shape[1] = {n};
  return tcoll_tensor_make((char *)t->data + (size_t)off * tcoll_dtype_size(t->dtype), t->dtype, 1,
                           shape, t->device);
}

#define PENDING_IS(n)                                                                 \
  do {                                                                                \
    size_t t_p_ = tcoll_pending_count();                                              \
    T_EXPECT(t_p_ == (size_t)(n), "tcoll_pending_count() is %zu, expected %zu", t_p_, \
             (size_t)(n));                                                            \
  } while (0)

START_TEST(pending_until_waited) {
  tcoll_tensor_t in = input_1d(64), out = t_empty();
  PENDING_IS(0);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_EXPECT(out.data != NULL, "out.data was not allocated");
  T_EXPECT(out.dtype == F32 && out.ndim == 1 && out.shape[0] == 64 && out.device == in.device,
           "allocated out is %s ndim %d shape[0] %lld device %d", tcoll_dtype_name(out.dtype),
           out.ndim, (long long)out.shape[0], out.device);
  PENDING_IS(1);
  /* Every rank has posted by now and MPI may well have finished: still pending until waited. */
  MPI_Barrier(MPI_COMM_WORLD);
  PENDING_IS(1);
  /* Inputs are not keyed: waiting on one returns at once and leaves the output pending. */
  T_OK(tcoll_wait(in.data));
  PENDING_IS(1);
  T_OK(tcoll_wait(out.data));
  PENDING_IS(0);
  T_OK(tcoll_wait(out.data)); /* nothing pending any more */
  T_OK(tcoll_wait_tensor(&out));
  t_check_all("all_reduce", &out, sum_val, NULL, 0);
  /* A zero-element output is pending too (tcoll gives it one byte so it can be keyed). */
  int64_t zero[2] = {3, 0};
  tcoll_tensor_t ein = t_alloc(F32, 2, zero), eout = t_empty();
  T_OK(tcoll_all_reduce(&ein, TCOLL_SUM, NULL, &eout));
  T_EXPECT(eout.data != NULL, "zero-element output was not allocated");
  PENDING_IS(1);
  T_OK(tcoll_wait_tensor(&eout));
  PENDING_IS(0);
  tcoll_tensor_free(&ein);
  tcoll_tensor_free(&eout);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}
END_TEST

START_TEST(busy_overlaps) {
  int64_t big_shape[1] = {64};
  tcoll_tensor_t big = t_alloc(F32, 1, big_shape);
  tcoll_tensor_t in16 = input_1d(16), in4 = input_1d(4), in8 = input_1d(8), in64 = input_1d(64);
  tcoll_tensor_t out = view_1d(&big, 16, 16); /* elements [16, 32) of big */
  T_OK(tcoll_all_reduce(&in16, TCOLL_SUM, NULL, &out));
  PENDING_IS(1);
  long calls = t_mpi_calls();

  /* The same buffer, a view inside it, ranges overlapping its start, its end, and all of it. */
  tcoll_tensor_t same = view_1d(&big, 16, 16), inside = view_1d(&big, 20, 4),
                 last = view_1d(&big, 31, 1);
  tcoll_tensor_t over_start = view_1d(&big, 8, 16), over_end = view_1d(&big, 24, 16),
                 first_byte = view_1d(&big, 12, 5);
  T_FAILS(tcoll_all_reduce(&in16, TCOLL_SUM, NULL, &same), TCOLL_ERR_BUSY, "pending work");
  T_FAILS(tcoll_all_reduce(&in4, TCOLL_SUM, NULL, &inside), TCOLL_ERR_BUSY, "pending work");
  T_FAILS(tcoll_all_reduce(&in16, TCOLL_SUM, NULL, &over_start), TCOLL_ERR_BUSY, "pending work");
  T_FAILS(tcoll_all_reduce(&in16, TCOLL_SUM, NULL, &over_end), TCOLL_ERR_BUSY, "pending work");
  T_FAILS(tcoll_all_reduce(&in64, TCOLL_SUM, NULL, &big), TCOLL_ERR_BUSY, "pending work");
  T_FAILS(tcoll_broadcast(&in4, 0, NULL, &inside), TCOLL_ERR_BUSY, "pending work");
  int64_t one_shape[1] = {1};
  tcoll_tensor_t in1 = tcoll_tensor_make(in4.data, F32, 1, one_shape, in4.device);
  T_FAILS(tcoll_all_reduce(&in1, TCOLL_SUM, NULL, &last), TCOLL_ERR_BUSY, "pending work");
  tcoll_tensor_t in5 = tcoll_tensor_make(in8.data, F32, 1, (int64_t[]){5}, in8.device);
  T_FAILS(tcoll_all_reduce(&in5, TCOLL_SUM, NULL, &first_byte), TCOLL_ERR_BUSY, "pending work");
  /* The message names the work that holds the buffer. */
  T_FAILS(tcoll_all_reduce(&in16, TCOLL_SUM, NULL, &same), TCOLL_ERR_BUSY, "all_reduce");
  /* A call refused half-way through its outputs undoes what it allocated. */
  tcoll_tensor_t cin[2] = {in4, in16}, cout[2] = {t_empty(), same};
  T_FAILS(tcoll_all_reduce_coalesced(cin, 2, TCOLL_SUM, NULL, cout), TCOLL_ERR_BUSY,
          "pending work");
  T_EXPECT(cout[0].data == NULL, "refused call left out[0] allocated (%p)", cout[0].data);
  tcoll_tensor_t lin = in4, louts[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
  if (t_size <= 4) {
    louts[t_size - 1] = inside;
    T_FAILS(tcoll_all_gather_list(&lin, NULL, louts), TCOLL_ERR_BUSY, "pending work");
    for (int r = 0; r < t_size - 1; r++)
      T_EXPECT(louts[r].data == NULL, "refused call left outs[%d] allocated", r);
  }
  /* Nothing was started: no MPI call, the pending count is unchanged. */
  T_EXPECT(t_mpi_calls() == calls, "refused calls made %ld MPI calls", t_mpi_calls() - calls);
  PENDING_IS(1);

  /* Adjacent ranges are free, and valid calls work right after. */
  tcoll_tensor_t before = view_1d(&big, 0, 16), after = view_1d(&big, 32, 16);
  T_OK(tcoll_all_reduce(&in16, TCOLL_SUM, NULL, &before));
  T_OK(tcoll_all_reduce(&in16, TCOLL_SUM, NULL, &after));
  /* (the shared-memory all_reduce makes none) */
  T_EXPECT(t_mpi_calls() >= calls + 2 || !strcmp(tcoll_last_algorithm(), "shm"),
           "valid calls were not seen posting MPI calls (the counter is broken)");
  PENDING_IS(3);
  T_OK(tcoll_wait(out.data));
  T_OK(tcoll_wait(before.data));
  T_OK(tcoll_wait(after.data));
  PENDING_IS(0);
  t_check_all("out", &out, sum_val, NULL, 0);
  t_check_all("before", &before, sum_val, NULL, 0);
  t_check_all("after", &after, sum_val, NULL, 0);
  /* Once waited, the buffer takes new work. */
  T_OK(tcoll_all_reduce(&in16, TCOLL_SUM, NULL, &same));
  T_OK(tcoll_wait(same.data));
  t_check_all("same", &same, sum_val, NULL, 0);
  tcoll_tensor_free(&big);
  tcoll_tensor_free(&in16);
  tcoll_tensor_free(&in4);
  tcoll_tensor_free(&in8);
  tcoll_tensor_free(&in64);
}
END_TEST

START_TEST(busy_same_call) {
  /* Two outputs of one call that overlap are refused before anything starts. */
  int64_t big_shape[1] = {32};
  tcoll_tensor_t big = t_alloc(F32, 1, big_shape);
  tcoll_tensor_t in[2] = {input_1d(8), input_1d(8)};
  tcoll_tensor_t out[2] = {view_1d(&big, 0, 8), view_1d(&big, 4, 8)};
  long calls = t_mpi_calls();
  T_FAILS(tcoll_all_reduce_coalesced(in, 2, TCOLL_SUM, NULL, out), TCOLL_ERR_INVALID_ARGUMENT,
          "overlaps");
  out[1] = view_1d(&big, 0, 8);
  T_FAILS(tcoll_all_reduce_coalesced(in, 2, TCOLL_SUM, NULL, out), TCOLL_ERR_INVALID_ARGUMENT,
          "overlaps");
  T_EXPECT(t_mpi_calls() == calls, "refused calls made %ld MPI calls", t_mpi_calls() - calls);
  PENDING_IS(0);
  out[1] = view_1d(&big, 8, 8);
  T_OK(tcoll_all_reduce_coalesced(in, 2, TCOLL_SUM, NULL, out));
  T_OK(tcoll_wait_all());
  t_check_all("out[0]", &out[0], sum_val, NULL, 0);
  t_check_all("out[1]", &out[1], sum_val, NULL, 0);
  tcoll_tensor_free(&big);
  tcoll_tensor_free(&in[0]);
  tcoll_tensor_free(&in[1]);
}
END_TEST

START_TEST(view_finds_work) {
  tcoll_tensor_t in = input_1d(64), out = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  size_t nb = tcoll_tensor_nbytes(&out);
  /* One past the end is not inside the buffer. */
  T_OK(tcoll_wait((char *)out.data + nb));
  T_OK(tcoll_test((char *)out.data + nb));
  PENDING_IS(1);
  /* The last byte is. */
  T_OK(tcoll_wait((char *)out.data + nb - 1));
  PENDING_IS(0);
  t_check_all("waited through its last byte", &out, sum_val, NULL, 0);

  /* Element k of the output, and a tensor descriptor viewing the middle of it. */
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait((float *)out.data + 37));
  PENDING_IS(0);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  tcoll_tensor_t mid = view_1d(&out, 10, 20);
  T_OK(tcoll_wait_tensor(&mid));
  PENDING_IS(0);
  int64_t off = 10;
  t_check_all("view", &mid, sum_val, &off, 0);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait_timeout((float *)out.data + 5, 30.0));
  PENDING_IS(0);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  int rc;
  while ((rc = tcoll_test((float *)out.data + 63)) == TCOLL_IN_PROGRESS) {
  }
  T_EXPECT(rc == TCOLL_SUCCESS, "tcoll_test returned %s", tcoll_status_string(rc));
  PENDING_IS(0);
  t_check_all("tested through element 63", &out, sum_val, NULL, 0);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}
END_TEST

START_TEST(coalesced_lifetime) {
  int64_t s0[1] = {5}, s1[2] = {2, 3}, s2[1] = {4};
  tcoll_tensor_t in[3] = {t_alloc(F32, 1, s0), t_alloc(TCOLL_INT32, 2, s1), t_alloc(F32, 1, s2)};
  for (int i = 0; i < 3; i++) t_set_all(&in[i], rank_val, NULL);
  tcoll_tensor_t out[3] = {t_empty(), t_empty(), t_empty()};
  T_OK(tcoll_all_reduce_coalesced(in, 3, TCOLL_SUM, NULL, out));
  PENDING_IS(3); /* one work keyed under three buffers */
  tcoll_tensor_t x = input_1d(4);
  T_FAILS(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &out[2]), TCOLL_ERR_BUSY, "all_reduce_coalesced");
  /* The first wait completes the whole work ... */
  T_OK(tcoll_wait(out[1].data));
  PENDING_IS(2);
  if (t_device() == TCOLL_HOST) {
    /* ... so the other outputs already hold their results (read without waiting). */
    t_check_all("out[0] before its wait", &out[0], sum_val, NULL, 0);
    t_check_all("out[2] before its wait", &out[2], sum_val, NULL, 0);
    PENDING_IS(2);
  }
  /* ... but each buffer stays keyed until it is waited itself. */
  T_FAILS(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &out[2]), TCOLL_ERR_BUSY, "pending work");
  T_EXPECT(tcoll_test(out[0].data) == TCOLL_SUCCESS,
           "tcoll_test on a completed coalesced output is not SUCCESS");
  PENDING_IS(1);
  T_OK(tcoll_wait((char *)out[2].data + 4)); /* through a view: releases the work */
  PENDING_IS(0);
  for (int i = 0; i < 3; i++) t_check_all("coalesced all_reduce", &out[i], sum_val, NULL, 0);

  /* all_gather_coalesced the same way, waited last-first. */
  tcoll_tensor_t g[3] = {t_empty(), t_empty(), t_empty()};
  T_OK(tcoll_all_gather_coalesced(in, 3, NULL, g));
  PENDING_IS(3);
  T_OK(tcoll_wait(g[2].data));
  PENDING_IS(2);
  T_OK(tcoll_wait(g[0].data));
  T_OK(tcoll_wait(g[1].data));
  PENDING_IS(0);
  T_EXPECT(g[1].shape[0] == 2 * t_size && g[1].shape[1] == 3, "gathered shape [%lld, %lld]",
           (long long)g[1].shape[0], (long long)g[1].shape[1]);
  for (int i = 0; i < 3; i++) {
    tcoll_tensor_free(&in[i]);
    tcoll_tensor_free(&out[i]);
    tcoll_tensor_free(&g[i]);
  }
  tcoll_tensor_free(&x);
}
END_TEST

START_TEST(test_returns) {
  /* Unknown pointers: nothing pending, SUCCESS at once from every entry point. */
  int local = 0;
  T_OK(tcoll_wait(&local));
  T_OK(tcoll_wait(NULL));
  T_OK(tcoll_test(&local));
  T_OK(tcoll_test(NULL));
  T_OK(tcoll_wait_timeout(&local, 0.001));
  T_OK(tcoll_wait_timeout(NULL, -1.0));
  tcoll_tensor_t none = t_empty();
  T_OK(tcoll_wait_tensor(&none));
  T_FAILS(tcoll_wait_tensor(NULL), TCOLL_ERR_INVALID_ARGUMENT, "t is NULL");
  T_FAILS(tcoll_wait_timeout(&local, 0.0 / 0.0), TCOLL_ERR_INVALID_ARGUMENT, "seconds is NaN");
  T_OK(tcoll_wait_all());

  /* tcoll_test says IN_PROGRESS or SUCCESS, never anything else, and pops once done. */
  tcoll_tensor_t in = input_1d(1024), out = t_empty();
  int seen_progress = 0;
  for (int round = 0; round < 3; round++) {
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
    double t0 = MPI_Wtime();
    int rc;
    while ((rc = tcoll_test(out.data)) == TCOLL_IN_PROGRESS) {
      seen_progress++;
      T_EXPECT(tcoll_pending_count() == 1, "pending count changed while in progress");
      if (MPI_Wtime() - t0 > 30) break;
    }
    T_EXPECT(rc == TCOLL_SUCCESS, "tcoll_test returned %s", tcoll_status_string(rc));
    if (rc != TCOLL_SUCCESS) T_OK(tcoll_wait(out.data));
    PENDING_IS(0);
    T_OK(tcoll_test(out.data)); /* popped: nothing pending */
    t_check_all("tested", &out, sum_val, NULL, 0);
  }
  (void)seen_progress; /* may be 0: MPI can finish before the first test */
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}
END_TEST

START_TEST(wait_all_and_count) {
  tcoll_tensor_t in = input_1d(12), a = t_empty(), b = t_empty(), c = t_empty();
  tcoll_tensor_t cin[2] = {input_1d(3), input_1d(5)}, cout[2] = {t_empty(), t_empty()};
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &a));
  PENDING_IS(1);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &b));
  PENDING_IS(2);
  T_OK(tcoll_all_reduce_coalesced(cin, 2, TCOLL_SUM, NULL, cout));
  PENDING_IS(4);
  T_OK(tcoll_broadcast(&in, 0, NULL, &c));
  PENDING_IS(5);
  T_OK(tcoll_wait_all());
  PENDING_IS(0);
  t_check_all("a", &a, sum_val, NULL, 0);
  t_check_all("b", &b, sum_val, NULL, 0);
  t_check_all("cout[0]", &cout[0], sum_val, NULL, 0);
  t_check_all("cout[1]", &cout[1], sum_val, NULL, 0);
  /* broadcast from rank 0: rank 0's values, (0 + 1) * (i % 7 + 1) */
  double bvals[12];
  t_read(&c, bvals);
  for (int i = 0; i < 12; i++)
    T_EXPECT(bvals[i] == (double)(i % 7 + 1), "broadcast element %d is %g", i, bvals[i]);
  T_OK(tcoll_wait_all()); /* nothing left: returns at once */
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&b);
  tcoll_tensor_free(&c);
  for (int i = 0; i < 2; i++) {
    tcoll_tensor_free(&cin[i]);
    tcoll_tensor_free(&cout[i]);
  }
}
END_TEST

/* Deterministic timeout: rank 0 posts a broadcast from rank 1 and waits with a short deadline;
 * rank 1 posts only after a barrier that rank 0 enters after its timed-out waits, so rank 0's
 * broadcast cannot complete before then. Nothing blocks on the broadcast before the barrier. */
START_TEST(wait_timeout_leaves_pending) {
  int64_t shape[1] = {16};
  tcoll_tensor_t in = t_alloc(F32, 1, shape), out = t_alloc(F32, 1, shape);
  if (t_rank == 1) t_set_all(&in, src_val, NULL);
  if (t_size < 2) {
    /* One rank: a broadcast from itself completes within any deadline. */
    T_OK(tcoll_broadcast(&in, 0, NULL, &out));
    T_OK(tcoll_wait_timeout(out.data, 10.0));
    PENDING_IS(0);
  } else {
    if (t_rank != 1) T_OK(tcoll_broadcast(&in, 1, NULL, &out));
    if (t_rank == 0) {
      T_EXPECT(tcoll_test(out.data) == TCOLL_IN_PROGRESS,
               "broadcast from rank 1 completed before rank 1 posted");
      double t0 = MPI_Wtime();
      T_FAILS(tcoll_wait_timeout(out.data, 0.2), TCOLL_ERR_TIMEOUT, "did not complete within");
      double waited = MPI_Wtime() - t0;
      T_EXPECT(waited >= 0.19 && waited < 10, "wait_timeout(0.2) returned after %g s", waited);
      PENDING_IS(1);
      T_FAILS(tcoll_wait_timeout((float *)out.data + 3, 0.05), TCOLL_ERR_TIMEOUT, "still pending");
      PENDING_IS(1);
      /* The configured default deadline (TCOLL_TIMEOUT) applies to tcoll_wait. */
      tcoll_config_t cfg, saved;
      T_OK(tcoll_get_config(&saved));
      cfg = saved;
      cfg.timeout = 0.05;
      T_OK(tcoll_set_config(&cfg));
      T_FAILS(tcoll_wait(out.data), TCOLL_ERR_TIMEOUT, "broadcast");
      T_FAILS(tcoll_wait_tensor(&out), TCOLL_ERR_TIMEOUT, "did not complete");
      T_OK(tcoll_set_config(&saved));
      PENDING_IS(1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (t_rank == 1) T_OK(tcoll_broadcast(&in, 1, NULL, &out));
    T_OK(tcoll_wait(out.data)); /* the later wait completes it */
    PENDING_IS(0);
    t_check_all("broadcast after a timeout", &out, src_val, NULL, 0);
  }
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}
END_TEST

START_TEST(free_waits) {
  /* Freeing a pending output waits for it first. */
  tcoll_tensor_t in = input_1d(32), out = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  PENDING_IS(1);
  tcoll_tensor_free(&out);
  T_EXPECT(out.data == NULL, "tcoll_tensor_free left data %p", out.data);
  PENDING_IS(0);

  /* Freeing one output of a coalesced work completes the whole work. */
  tcoll_tensor_t cin[2] = {input_1d(6), input_1d(10)}, cout[2] = {t_empty(), t_empty()};
  T_OK(tcoll_all_reduce_coalesced(cin, 2, TCOLL_SUM, NULL, cout));
  tcoll_tensor_free(&cout[0]);
  T_EXPECT(cout[0].data == NULL, "tcoll_tensor_free left data");
  PENDING_IS(1);
  if (t_device() == TCOLL_HOST)
    t_check_all("the other output, before its wait", &cout[1], sum_val, NULL, 0);
  T_OK(tcoll_wait(cout[1].data));
  t_check_all("the other output", &cout[1], sum_val, NULL, 0);
  PENDING_IS(0);
  /* And the library is fine afterwards. */
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait(out.data));
  t_check_all("after frees", &out, sum_val, NULL, 0);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&cout[1]);
  tcoll_tensor_free(&cin[0]);
  tcoll_tensor_free(&cin[1]);
  tcoll_tensor_free(&in);
}
END_TEST

START_TEST(pending_input_waited) {
  tcoll_tensor_t in = input_1d(24), a = t_empty(), b = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &a));
  PENDING_IS(1);
  /* a is an input now: it is waited for before the second call reads it. */
  T_OK(tcoll_all_reduce(&a, TCOLL_SUM, NULL, &b));
  PENDING_IS(1);
  T_OK(tcoll_test(a.data)); /* a is no longer pending */
  PENDING_IS(1);
  T_OK(tcoll_wait(b.data));
  t_check_all("all_reduce of a pending all_reduce", &b, sum_sum_val, NULL, 0);
  t_check_all("its input", &a, sum_val, NULL, 0);

  /* An input that is a view into a pending buffer waits for that buffer's work. */
  tcoll_tensor_t c = t_empty(), d = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &c));
  tcoll_tensor_t mid = view_1d(&c, 4, 8);
  T_OK(tcoll_all_reduce(&mid, TCOLL_SUM, NULL, &d));
  PENDING_IS(1);
  T_OK(tcoll_wait(d.data));
  int64_t off = 4;
  t_check_all("all_reduce of a view of a pending output", &d, sum_sum_val, &off, 0);

  /* Other ops and a coalesced input too. */
  tcoll_tensor_t e = t_empty(), f = t_empty(), g = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &e));
  T_OK(tcoll_broadcast(&e, 0, NULL, &f));
  PENDING_IS(1);
  T_OK(tcoll_wait(f.data));
  t_check_all("broadcast of a pending output", &f, sum_val, NULL, 0);
  tcoll_tensor_t cin[2] = {input_1d(3), input_1d(4)}, cout[2] = {t_empty(), t_empty()};
  T_OK(tcoll_all_reduce_coalesced(cin, 2, TCOLL_SUM, NULL, cout));
  PENDING_IS(2);
  T_OK(tcoll_all_reduce(&cout[1], TCOLL_SUM, NULL, &g));
  PENDING_IS(2); /* cout[1] waited (popped), cout[0] still keyed, g pending */
  T_OK(tcoll_wait_all());
  t_check_all("all_reduce of a pending coalesced output", &g, sum_sum_val, NULL, 0);

  /* gather keys its work under the input on ranks other than dst: a pending input is still
   * waited for there, not refused as busy (which would leave dst's gather unmatched). */
  tcoll_tensor_t ga = t_empty(), gouts[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &ga));
  T_OK(tcoll_gather(&ga, 0, NULL, t_rank == 0 ? gouts : NULL));
  T_OK(tcoll_wait_timeout(t_rank == 0 ? gouts[0].data : ga.data, 20.0));
  T_OK(tcoll_wait_all());
  if (t_rank == 0)
    for (int r = 0; r < t_size; r++)
      t_check_all("gather of a pending output", &gouts[r], sum_val, NULL, 0);
  for (int r = 0; r < 4; r++) tcoll_tensor_free(&gouts[r]);
  tcoll_tensor_free(&ga);

  /* In place on a pending buffer is a new output on it: refused, like PyTorch's register_work. */
  tcoll_tensor_t ip = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &ip));
  T_FAILS(tcoll_all_reduce(&ip, TCOLL_SUM, NULL, &ip), TCOLL_ERR_BUSY, "pending work");
  PENDING_IS(1);
  T_OK(tcoll_wait(ip.data));
  T_OK(tcoll_all_reduce(&ip, TCOLL_SUM, NULL, &ip));
  T_OK(tcoll_wait(ip.data));
  t_check_all("in place after the wait", &ip, sum_sum_val, NULL, 0);
  tcoll_tensor_free(&ip);

  /* A copy from a pending tensor waits for it. */
  tcoll_tensor_t h = t_host(F32, 1, (int64_t[]){24}), k = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &k));
  T_OK(tcoll_tensor_copy(&h, &k));
  PENDING_IS(0);
  t_check_all("copy of a pending output", &h, sum_val, NULL, 0);
  /* A copy into a pending tensor waits for it first, then overwrites it. */
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &k));
  t_set_all(&h, src_val, NULL);
  T_OK(tcoll_tensor_copy(&k, &h));
  PENDING_IS(0);
  t_check_all("copy into a pending output", &k, src_val, NULL, 0);

  tcoll_tensor_t *all[] = {&in, &a, &b, &c,      &d,      &e,       &f,
                           &g,  &h, &k, &cin[0], &cin[1], &cout[0], &cout[1]};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) tcoll_tensor_free(all[i]);
}
END_TEST

START_TEST(empty_buffers) {
  /* Zero elements with data == NULL are valid tensors; whatever a call keys must be waitable
   * through the tensor the caller holds. */
  int64_t zero[1] = {0};
  tcoll_tensor_t in = tcoll_tensor_make(NULL, F32, 1, zero, t_device());
  tcoll_tensor_t outs[4], out = t_empty();
  for (int r = 0; r < 4; r++) outs[r] = t_empty();
  T_OK(tcoll_gather(&in, 0, NULL, t_rank == 0 ? outs : NULL));
  if (t_rank == 0) {
    for (int r = 0; r < t_size; r++) T_OK(tcoll_wait_tensor(&outs[r]));
  } else {
    T_OK(tcoll_wait_tensor(&in));
  }
  PENDING_IS(0);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait_tensor(&out));
  PENDING_IS(0);
  T_OK(tcoll_wait_all());
  for (int r = 0; r < 4; r++) tcoll_tensor_free(&outs[r]);
  tcoll_tensor_free(&out);
}
END_TEST

typedef struct {
  const void *p;
  int rc;
} waiter_t;
static void *wait_thread(void *arg) {
  waiter_t *w = arg;
  w->rc = tcoll_wait(w->p);
  return NULL;
}

START_TEST(concurrent_waits) {
  /* Several threads wait on the same buffer (one through a view) and on another at once: every
   * wait returns SUCCESS once, and the work is popped and released exactly once. */
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) return;
  for (int round = 0; round < 5; round++) {
    tcoll_tensor_t in = input_1d(4096), a = t_empty(), b = t_empty();
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &a));
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &b));
    waiter_t w[4] = {{a.data, -100}, {(float *)a.data + 100, -100}, {b.data, -100}, {a.data, -100}};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
      T_EXPECT(pthread_create(&th[i], NULL, wait_thread, &w[i]) == 0, "pthread_create");
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++)
      T_EXPECT(w[i].rc == TCOLL_SUCCESS, "round %d: waiter %d got %s", round, i,
               tcoll_status_string(w[i].rc));
    PENDING_IS(0);
    t_check_all("waited by threads", &a, sum_val, NULL, 0);
    t_check_all("waited by threads", &b, sum_val, NULL, 0);
    tcoll_tensor_free(&in);
    tcoll_tensor_free(&a);
    tcoll_tensor_free(&b);
  }
}
END_TEST

START_TEST(many_pending) {
  /* Enough buffers to grow the registry's tables several times: adjacent views of one
   * allocation and separate allocations, waited in mixed orders and through views, with new
   * work posted into freed slots in between. */
  enum { NV = 96, NS = 64, E = 8 };
  int64_t bshape[1] = {NV * E};
  tcoll_tensor_t big = t_alloc(F32, 1, bshape), in = input_1d(E);
  tcoll_tensor_t views[NV], sep[NS];
  for (int k = 0; k < NV; k++) views[k] = view_1d(&big, (int64_t)k * E, E);
  for (int k = 0; k < NS; k++) sep[k] = t_empty();
  for (int k = 0; k < NV; k++) T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &views[k]));
  for (int k = 0; k < NS; k++) T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &sep[k]));
  PENDING_IS(NV + NS);
  /* Every view is busy, and so is a range straddling two of them. */
  tcoll_tensor_t straddle = view_1d(&big, 5 * E + 4, E);
  T_FAILS(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &straddle), TCOLL_ERR_BUSY, "pending work");
  /* Odd views through an interior element, separate ones from the end. */
  for (int k = 1; k < NV; k += 2) T_OK(tcoll_wait((float *)views[k].data + 3));
  PENDING_IS(NV / 2 + NS);
  for (int k = NS - 1; k >= 0; k -= 3) T_OK(tcoll_wait_tensor(&sep[k]));
  size_t left = tcoll_pending_count();
  /* Reuse the odd slots while the even ones are still pending. */
  for (int k = 1; k < NV; k += 2) T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &views[k]));
  PENDING_IS(left + NV / 2);
  for (int k = 0; k < NV; k += 2) {
    int rc;
    while ((rc = tcoll_test(views[k].data)) == TCOLL_IN_PROGRESS) {
    }
    T_EXPECT(rc == TCOLL_SUCCESS, "tcoll_test: %s", tcoll_status_string(rc));
  }
  T_OK(tcoll_wait_all());
  PENDING_IS(0);
  for (int k = 0; k < NV; k++) t_check_all("many: view", &views[k], sum_val, NULL, 0);
  for (int k = 0; k < NS; k++) t_check_all("many: separate", &sep[k], sum_val, NULL, 0);
  for (int k = 0; k < NS; k++) tcoll_tensor_free(&sep[k]);
  tcoll_tensor_free(&big);
  tcoll_tensor_free(&in);
}
END_TEST

START_TEST(ends_churn) {
  /* The ordered index has room on both sides: waiting from the front or the back, and posting
   * again below or above the pending range, must keep overlaps, views and counts exact. */
  enum { NV = 200, E = 4 };
  int64_t bshape[1] = {NV * E};
  tcoll_tensor_t big = t_alloc(F32, 1, bshape), in = input_1d(E);
  tcoll_tensor_t views[NV];
  for (int k = 0; k < NV; k++) views[k] = view_1d(&big, (int64_t)k * E, E);
  for (int k = 0; k < NV; k++) T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &views[k]));
  for (int k = 0; k < 50; k++) T_OK(tcoll_wait(views[k].data)); /* from the front */
  PENDING_IS(NV - 50);
  for (int k = 24; k >= 0; k--)
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &views[k])); /* below the rest */
  PENDING_IS(NV - 25);
  tcoll_tensor_t across =
      view_1d(&big, 24 * E + 2, E); /* half in view 24 (pending), half in 25 (free) */
  T_FAILS(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &across), TCOLL_ERR_BUSY, "pending work");
  tcoll_tensor_t gap = view_1d(&big, 30 * E + 2, E); /* inside the waited range: free */
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &gap));
  T_OK(tcoll_wait(gap.data));
  for (int k = NV - 1; k >= NV - 50; k--) T_OK(tcoll_wait(views[k].data)); /* from the back */
  PENDING_IS(NV - 75);
  for (int k = NV - 50; k < NV; k++)
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &views[k])); /* above */
  PENDING_IS(NV - 25);
  /* every pending view is still found through an interior element, and still refuses a writer */
  for (int k = 0; k < NV; k++) {
    bool pending = k < 25 || k >= 50;
    tcoll_tensor_t one = view_1d(&big, (int64_t)k * E + 1, 1), one_in = view_1d(&in, 0, 1);
    if (pending)
      T_FAILS(tcoll_all_reduce(&one_in, TCOLL_SUM, NULL, &one), TCOLL_ERR_BUSY, "pending work");
    else
      T_EXPECT(tcoll_test(one.data) == TCOLL_SUCCESS, "view %d: nothing should be pending", k);
  }
  for (int k = 0; k < NV; k += 2) T_OK(tcoll_wait((float *)views[k].data + 1));
  T_OK(tcoll_wait_all());
  PENDING_IS(0);
  for (int k = 0; k < NV; k++)
    if (k < 25 || k >= 50) t_check_all("ends_churn: view", &views[k], sum_val, NULL, 0);
  tcoll_tensor_free(&big);
  tcoll_tensor_free(&in);
}
END_TEST

START_TEST(batch_below_pending) {
  /* A coalesced call keys all its buffers in one merge: here the second call's outputs, and its
   * inputs, lie below the first call's, so every entry lands in front of pending ones. Overlaps
   * must still be found on both sides of the boundary, for outputs and for inputs being read. */
  enum { N = 300, E = 2 };
  int64_t bshape[1] = {2 * N * E};
  tcoll_tensor_t outs = t_alloc(F32, 1, bshape), ins = t_alloc(F32, 1, bshape);
  t_set_all(&ins, rank_val, NULL);
  tcoll_tensor_t in_hi[N], out_hi[N], in_lo[N], out_lo[N];
  for (int k = 0; k < N; k++) {
    in_hi[k] = view_1d(&ins, (int64_t)(N + k) * E, E);
    out_hi[k] = view_1d(&outs, (int64_t)(N + k) * E, E);
    in_lo[k] = view_1d(&ins, (int64_t)k * E, E);
    out_lo[k] = view_1d(&outs, (int64_t)k * E, E);
  }
  T_OK(tcoll_all_reduce_coalesced(in_hi, N, TCOLL_SUM, NULL, out_hi));
  T_OK(tcoll_all_reduce_coalesced(in_lo, N, TCOLL_SUM, NULL, out_lo));
  PENDING_IS(2 * N);
  tcoll_tensor_t src = input_1d(E);
  for (int k = 0; k < N; k += 37) { /* any one element of any output or input is refused */
    tcoll_tensor_t o[4] = {
        view_1d(&outs, (int64_t)k * E + 1, 1), view_1d(&outs, (int64_t)(N + k) * E, 1),
        view_1d(&ins, (int64_t)k * E + 1, 1), view_1d(&ins, (int64_t)(N + k) * E, 1)};
    tcoll_tensor_t one = view_1d(&src, 0, 1);
    for (int j = 0; j < 4; j++)
      T_FAILS(tcoll_all_reduce(&one, TCOLL_SUM, NULL, &o[j]), TCOLL_ERR_BUSY,
              j < 2 ? "pending work" : "the input of");
  }
  tcoll_tensor_t across =
      view_1d(&outs, (int64_t)N * E - 1, 2); /* last of the low half, first of the high */
  T_FAILS(tcoll_all_reduce(&src, TCOLL_SUM, NULL, &across), TCOLL_ERR_BUSY, "pending work");
  PENDING_IS(2 * N);
  for (int k = N - 1; k >= 0; k -= 2) T_OK(tcoll_wait(out_lo[k].data)); /* some from the back */
  T_OK(tcoll_wait_all());
  PENDING_IS(0);
  int64_t off = 0;
  t_check_all("batch_below_pending", &outs, sum_val, &off, 0);
  tcoll_tensor_free(&src);
  tcoll_tensor_free(&outs);
  tcoll_tensor_free(&ins);
}
END_TEST

/* Slot k of an order of n slots: forward, reverse, or scrambled (n coprime with 7). */
static int64_t slot_of(int order, int64_t k, int64_t n) {
  return order == 0 ? k : order == 1 ? n - 1 - k : k * 7 % n;
}

START_TEST(batch_in_any_address_order) {
  /* One call's buffers keyed and read in address order, in reverse or scrambled: each element
   * of each is refused while pending, and the reads are forgotten exactly when waited, also
   * while a second call's reads lie between them. Even slots go to call A, odd ones to B. */
  enum { N = 150, E = 3 };
  int64_t bshape[1] = {2 * N * E};
  for (int order = 0; order < 3; order++) {
    tcoll_tensor_t outs = t_alloc(F32, 1, bshape), ins = t_alloc(F32, 1, bshape), src = input_1d(1);
    t_set_all(&ins, rank_val, NULL);
    tcoll_tensor_t in_a[N], out_a[N], in_b[N], out_b[N], one = view_1d(&src, 0, 1);
    for (int k = 0; k < N; k++) {
      int64_t a = 2 * slot_of(order, k, N), b = 2 * slot_of(2 - order, k, N) + 1;
      in_a[k] = view_1d(&ins, a * E, E);
      out_a[k] = view_1d(&outs, a * E, E);
      in_b[k] = view_1d(&ins, b * E, E);
      out_b[k] = view_1d(&outs, b * E, E);
    }
    T_OK(tcoll_all_reduce_coalesced(in_a, N, TCOLL_SUM, NULL, out_a));
    T_OK(tcoll_all_reduce_coalesced(in_b, N, TCOLL_SUM, NULL, out_b));
    PENDING_IS(2 * N);
    for (int64_t slot = 0; slot < 2 * N; slot++) {
      tcoll_tensor_t o = view_1d(&outs, slot * E + slot % E, 1),
                     i = view_1d(&ins, slot * E + 2 - slot % E, 1);
      T_FAILS(tcoll_all_reduce(&one, TCOLL_SUM, NULL, &o), TCOLL_ERR_BUSY, "pending work");
      T_FAILS(tcoll_all_reduce(&one, TCOLL_SUM, NULL, &i), TCOLL_ERR_BUSY,
              "the input of pending work");
    }
    /* B first: its read of the top slot is the table's last entry, its other reads lie between
     * A's. */
    for (int k = 0; k < N; k++) T_OK(tcoll_wait(out_b[(k * 11) % N].data));
    PENDING_IS(N);
    /* Pending meanwhile, most likely on B's recycled work: a read of B's left behind would
     * name it and refuse the writes below. */
    tcoll_tensor_t other_in = input_1d(2), other_out = t_empty();
    T_OK(tcoll_all_reduce(&other_in, TCOLL_SUM, NULL, &other_out));
    for (int64_t slot = 0; slot < 2 * N; slot++) { /* B's inputs are free, A's still read */
      tcoll_tensor_t i = view_1d(&ins, slot * E + 1, 1);
      if (slot % 2 == 0) {
        T_FAILS(tcoll_all_reduce(&one, TCOLL_SUM, NULL, &i), TCOLL_ERR_BUSY,
                "the input of pending work");
      } else {
        T_OK(tcoll_all_reduce(&one, TCOLL_SUM, NULL, &i));
        T_OK(tcoll_wait(i.data));
      }
    }
    T_OK(tcoll_wait(other_out.data));
    T_OK(tcoll_wait_all());
    PENDING_IS(0);
    int64_t off = 0;
    t_check_all(order == 0   ? "forward order"
                : order == 1 ? "reverse order"
                             : "scrambled order",
                &outs, sum_val, &off, 0);
    tcoll_tensor_t free_in = view_1d(&ins, 1, 1); /* slot 0 (A's): writable again */
    T_OK(tcoll_all_reduce(&one, TCOLL_SUM, NULL, &free_in));
    T_OK(tcoll_wait(free_in.data));
    tcoll_tensor_free(&other_in);
    tcoll_tensor_free(&other_out);
    tcoll_tensor_free(&src);
    tcoll_tensor_free(&outs);
    tcoll_tensor_free(&ins);
  }
}
END_TEST

START_TEST(forgotten_reads) {
  /* The inputs of waited work are forgotten in bulk; the input of the one work still pending
   * must stay protected through that, wherever it lies among the others. */
  enum { N = 1000, E = 3 };
  int64_t bshape[1] = {N * E};
  tcoll_tensor_t ins = t_alloc(F32, 1, bshape), outs = t_alloc(F32, 1, bshape);
  t_set_all(&ins, rank_val, NULL);
  const int keep = 637; /* the work left pending */
  for (int k = 0; k < N; k++) {
    tcoll_tensor_t in = view_1d(&ins, (int64_t)k * E, E), out = view_1d(&outs, (int64_t)k * E, E);
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  }
  for (int k = 0; k < N; k++)
    if (k != keep) T_OK(tcoll_wait((float *)outs.data + k * E));
  PENDING_IS(1);
  tcoll_tensor_t src = input_1d(E), read = view_1d(&ins, (int64_t)keep * E + 1, 1),
                 one = view_1d(&src, 0, 1);
  T_FAILS(tcoll_all_reduce(&one, TCOLL_SUM, NULL, &read), TCOLL_ERR_BUSY,
          "the input of pending work");
  tcoll_tensor_t free_in =
      view_1d(&ins, (int64_t)(keep + 1) * E, 1); /* the next input: no longer read */
  T_OK(tcoll_all_reduce(&one, TCOLL_SUM, NULL, &free_in));
  T_OK(tcoll_wait_all());
  T_OK(tcoll_all_reduce(&one, TCOLL_SUM, NULL, &read)); /* and now that one is free too */
  T_OK(tcoll_wait_all());
  PENDING_IS(0);
  int64_t off = 0;
  t_check_all("forgotten_reads", &outs, sum_val, &off, 0);
  tcoll_tensor_free(&src);
  tcoll_tensor_free(&outs);
  tcoll_tensor_free(&ins);
}
END_TEST

/* ---- Many pending buffers: the hash keyed by base beside the ordered index ---- */

/* A permutation of 0..n-1 from a fixed-seed LCG (Fisher-Yates): a scrambled order fixed in
 * advance, the same on every rank. */
static void scrambled(int *v, int n, uint64_t seed) {
  for (int i = 0; i < n; i++) v[i] = i;
  for (int i = n - 1; i > 0; i--) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    int j = (int)((seed >> 33) % (uint64_t)(i + 1));
    int t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

/* n on host buffers; an eighth on device ones, where every pending call also holds staging
 * buffers and events (the registry sees addresses either way). */
static int many(int n) { return t_device() == TCOLL_HOST ? n : (n + 7) / 8; }

START_TEST(thousands_in_random_order) {
  /* Thousands of pending buffers (adjacent 7-element views of one allocation), posted in one
   * scrambled order and waited in another, through their base or an interior element: every
   * wait pops exactly its own buffer. Meanwhile writes overlapping any of them, or the input
   * all of them read, are refused. With E = 7, element i of the whole allocation ends up
   * sum_val(i) whichever view wrote it. */
  enum { MOST = 2048, E = 7 };
  const int N = many(MOST);
  int64_t bshape[1] = {(int64_t)N * E};
  tcoll_tensor_t big = t_alloc(F32, 1, bshape), in = input_1d(E), src = input_1d(2 * E);
  static int post[MOST], order[MOST];
  scrambled(post, N, 11);
  scrambled(order, N, 29);
  for (int i = 0; i < N; i++) {
    tcoll_tensor_t out = view_1d(&big, (int64_t)post[i] * E, E);
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  }
  PENDING_IS(N);
  long calls = t_mpi_calls();
  for (int k = 0; k < N; k += 97) {
    tcoll_tensor_t same = view_1d(&big, (int64_t)k * E, E),
                   straddle = view_1d(&big, (int64_t)k * E + 3, E);
    tcoll_tensor_t same_in = view_1d(&src, 0, E);
    T_FAILS(tcoll_all_reduce(&same_in, TCOLL_SUM, NULL, &same), TCOLL_ERR_BUSY, "pending work");
    if (k + 1 < N)
      T_FAILS(tcoll_all_reduce(&same_in, TCOLL_SUM, NULL, &straddle), TCOLL_ERR_BUSY,
              "pending work");
  }
  tcoll_tensor_t whole_in = input_1d((int64_t)N * E);
  T_FAILS(tcoll_all_reduce(&whole_in, TCOLL_SUM, NULL, &big), TCOLL_ERR_BUSY,
          "pending work"); /* all of them */
  tcoll_tensor_t in_part = view_1d(&in, 2, 3), src3 = view_1d(&src, 0, 3);
  T_FAILS(tcoll_all_reduce(&src3, TCOLL_SUM, NULL, &in_part), TCOLL_ERR_BUSY,
          "the input of pending work");
  T_EXPECT(t_mpi_calls() == calls, "refused calls made %ld MPI calls", t_mpi_calls() - calls);
  PENDING_IS(N);
  for (int i = 0; i < N; i++) {
    float *p = (float *)big.data + (int64_t)order[i] * E + (i % 2 ? i % E : 0);
    T_OK(tcoll_wait(p));
    PENDING_IS(N - 1 - i);
    T_OK(tcoll_test((float *)big.data + (int64_t)order[i] * E)); /* popped: nothing pending there */
  }
  t_check_all("thousands in random order", &big, sum_val, NULL, 0);
  T_OK(tcoll_all_reduce(&src3, TCOLL_SUM, NULL, &in_part)); /* no longer read */
  T_OK(tcoll_wait(in_part.data));
  tcoll_tensor_free(&big);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&src);
  tcoll_tensor_free(&whole_in);
}
END_TEST

START_TEST(bases_a_power_of_two_apart) {
  /* Buffers whose addresses agree in all their low bits: 4 KiB, 64 KiB and 1 MiB apart inside
   * one allocation, all pending at once (the three strides at different small offsets, so none
   * overlap). Each is found through its base and its last element, and refuses a writer; a
   * pointer half a stride away, never posted, finds nothing; they are waited in a scrambled
   * order, half through an interior element. */
  enum { NPAT = 3, E = 7, MOST = 512 + 128 + 32 };
  const struct {
    int64_t stride, count, off; /* in floats */
  } pat[NPAT] = {{1024, many(512), 0}, {16384, many(128), 8}, {262144, many(32), 16}};
  int64_t bshape[1] = {262144 * pat[2].count + 32};
  tcoll_tensor_t big = t_alloc(F32, 1, bshape), in = input_1d(E), one_src = input_1d(1);
  tcoll_tensor_t one = view_1d(&one_src, 0, 1);
  const int N = (int)(pat[0].count + pat[1].count + pat[2].count);
  static int64_t at[MOST]; /* each buffer's first element, in posting order */
  int n = 0;
  for (int64_t k = 0; k < pat[0].count; k++) /* the strides interleaved */
    for (int p = 0; p < NPAT; p++)
      if (k < pat[p].count) at[n++] = pat[p].off + k * pat[p].stride;
  T_EXPECT(n == N, "%d buffers laid out, expected %d", n, N);
  for (int i = 0; i < N; i++) {
    tcoll_tensor_t out = view_1d(&big, at[i], E);
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  }
  PENDING_IS(N);
  float *f = big.data;
  for (int i = 0; i < N; i++) {
    tcoll_tensor_t first = view_1d(&big, at[i], 1), last = view_1d(&big, at[i] + E - 1, 1);
    T_FAILS(tcoll_all_reduce(&one, TCOLL_SUM, NULL, &first), TCOLL_ERR_BUSY, "pending work");
    T_FAILS(tcoll_all_reduce(&one, TCOLL_SUM, NULL, &last), TCOLL_ERR_BUSY, "pending work");
    T_OK(tcoll_wait(f + at[i] + 512)); /* half the smallest stride away: in no buffer */
    T_OK(tcoll_test(f + at[i] + E));   /* one past its end */
  }
  PENDING_IS(N);
  static int order[MOST];
  scrambled(order, N, 5);
  for (int i = 0; i < N; i++) {
    T_OK(tcoll_wait(f + at[order[i]] + (i % 2 ? 1 + i % (E - 1) : 0)));
    PENDING_IS(N - 1 - i);
  }
  for (int i = 0; i < N; i++) {
    tcoll_tensor_t out = view_1d(&big, at[i], E);
    t_check_all("a power of two apart", &out, sum_val, NULL, 0);
  }
  tcoll_tensor_free(&big);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&one_src);
}
END_TEST

START_TEST(views_and_gaps_among_many) {
  /* Pending buffers of 12 elements with 4-element gaps between them: a pointer inside any
   * buffer finds its work (popping it alone), a pointer in a gap or one past an end finds
   * nothing, and a range over a gap that touches a buffer on either side is refused. */
  enum { E = 12, GAP = 4, S = E + GAP };
  const int N = many(600);
  int64_t bshape[1] = {(int64_t)N * S};
  tcoll_tensor_t big = t_alloc(F32, 1, bshape), in = input_1d(E), src = input_1d(GAP + 2);
  for (int k = 0; k < N; k++) {
    tcoll_tensor_t out = view_1d(&big, (int64_t)k * S, E);
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  }
  PENDING_IS(N);
  float *f = big.data;
  for (int k = 0; k < N; k += 7) {
    T_OK(tcoll_wait(f + (int64_t)k * S + E));           /* one past its end: the gap */
    T_OK(tcoll_test(f + (int64_t)k * S + E + GAP - 1)); /* the gap's last element */
    tcoll_tensor_t gap = view_1d(&big, (int64_t)k * S + E, GAP), gap_in = view_1d(&src, 0, GAP);
    T_OK(tcoll_all_reduce(&gap_in, TCOLL_SUM, NULL, &gap)); /* a gap takes work of its own */
    T_OK(tcoll_wait((float *)gap.data + 1));
    if (k + 1 < N) { /* a gap and one element more on either side */
      tcoll_tensor_t left = view_1d(&big, (int64_t)k * S + E - 1, GAP + 1);
      tcoll_tensor_t right = view_1d(&big, (int64_t)k * S + E, GAP + 1),
                     wide_in = view_1d(&src, 0, GAP + 1);
      T_FAILS(tcoll_all_reduce(&wide_in, TCOLL_SUM, NULL, &left), TCOLL_ERR_BUSY, "pending work");
      T_FAILS(tcoll_all_reduce(&wide_in, TCOLL_SUM, NULL, &right), TCOLL_ERR_BUSY, "pending work");
    }
  }
  PENDING_IS(N);
  for (int k = N - 1; k >= 0; k--) { /* from the top, each through a different interior element */
    T_OK(tcoll_wait(f + (int64_t)k * S + 1 + k % (E - 1)));
    PENDING_IS(k);
  }
  for (int k = 0; k < N; k++) {
    tcoll_tensor_t out = view_1d(&big, (int64_t)k * S, E);
    t_check_all("views among many", &out, sum_val, NULL, 0);
  }
  tcoll_tensor_free(&big);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&src);
}
END_TEST

START_TEST(grow_and_shrink) {
  /* Rounds of very different sizes (the table grows, then shrinks as they are waited): each
   * round's buffers are all found, an overlap is refused, and a lone post-wait cycle between
   * rounds works. */
  enum { E = 7, MOST = 3000 };
  static const int rounds[] = {3000, 5, 1500, 1, 700, 0, 64};
  int64_t bshape[1] = {MOST * E};
  tcoll_tensor_t big = t_alloc(F32, 1, bshape), in = input_1d(E),
                 lone_out = t_alloc(F32, 1, (int64_t[]){E});
  static int order[MOST];
  for (size_t r = 0; r < sizeof rounds / sizeof *rounds; r++) {
    int n = many(rounds[r]);
    for (int k = 0; k < n; k++) {
      tcoll_tensor_t out = view_1d(&big, (int64_t)k * E, E);
      T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
    }
    PENDING_IS(n);
    if (n > 0) {
      tcoll_tensor_t again = view_1d(&big, (int64_t)(n - 1) * E + 2, 3),
                     again_in = view_1d(&in, 0, 3);
      T_FAILS(tcoll_all_reduce(&again_in, TCOLL_SUM, NULL, &again), TCOLL_ERR_BUSY, "pending work");
    }
    scrambled(order, n, 100 + r);
    for (int i = 0; i < n; i++) {
      T_OK(tcoll_wait((float *)big.data + (int64_t)order[i] * E + i % E));
      if (i % 100 == 0 || i == n - 1) PENDING_IS(n - 1 - i);
    }
    PENDING_IS(0);
    if (n > 0) {
      tcoll_tensor_t done = view_1d(&big, 0, (int64_t)n * E);
      t_check_all("grow and shrink", &done, sum_val, NULL, 0);
      t_set_all(&done, src_val, NULL); /* the next round must write every element again */
    }
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &lone_out)); /* alone in the registry */
    T_OK(tcoll_wait(lone_out.data));
    t_check_all("alone between rounds", &lone_out, sum_val, NULL, 0);
  }
  tcoll_tensor_free(&big);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&lone_out);
}
END_TEST

/* sum_val times size^k: k more all_reduces SUM of it (*ctx: k). */
static double chain_val(int64_t i, void *ctx) {
  double v = sum_val(i, NULL);
  for (int k = *(int *)ctx; k > 0; k--) v *= t_size;
  return v;
}

/* A post-wait loop's posts take the registry's quiet path (tc_work_begin_alone: nothing pending
 * but waited work); any other state the general one. Chains of calls, each reading the output of
 * the one before, waited or still pending, and a call writing a pending output refused. */
START_TEST(alone_after_wait) {
  tcoll_tensor_t a = input_1d(5), b = input_1d(5), c = input_1d(5);
  int one = 1, two = 2, three = 3;
  T_OK(tcoll_all_reduce(&a, TCOLL_SUM, NULL, &b));
  T_OK(tcoll_wait(b.data));
  T_OK(tcoll_all_reduce(&b, TCOLL_SUM, NULL, &c)); /* its input waited */
  T_OK(tcoll_wait(c.data));
  t_check_all("c after two", &c, chain_val, &one, 0);
  T_OK(tcoll_all_reduce(&c, TCOLL_SUM, NULL, &b)); /* its output waited before */
  PENDING_IS(1);
  long calls = t_mpi_calls();
  T_FAILS(tcoll_all_reduce(&c, TCOLL_SUM, NULL, &b), TCOLL_ERR_BUSY, "pending work");
  T_EXPECT(t_mpi_calls() == calls, "a refused call made MPI calls");
  T_OK(tcoll_all_reduce(&b, TCOLL_SUM, NULL, &a)); /* its input pending: waited first */
  PENDING_IS(1);
  T_OK(tcoll_wait(a.data));
  PENDING_IS(0);
  t_check_all("b after three", &b, chain_val, &two, 0);
  t_check_all("a after four", &a, chain_val, &three, 0);
  /* In place, waited each time: the loop a solver runs */
  for (int k = 0; k < 3; k++) {
    T_OK(tcoll_all_reduce(&a, TCOLL_SUM, NULL, &a));
    T_OK(tcoll_wait(a.data));
  }
  int six = 6;
  t_check_all("a in place", &a, chain_val, &six, 0);
  PENDING_IS(0);
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&b);
  tcoll_tensor_free(&c);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("registry");
  TCase *tc = t_tcase("registry");
  tcase_add_test(tc, pending_until_waited);
  tcase_add_test(tc, busy_overlaps);
  tcase_add_test(tc, alone_after_wait);
  tcase_add_test(tc, busy_same_call);
  tcase_add_test(tc, view_finds_work);
  tcase_add_test(tc, coalesced_lifetime);
  tcase_add_test(tc, test_returns);
  tcase_add_test(tc, wait_all_and_count);
  tcase_add_test(tc, wait_timeout_leaves_pending);
  tcase_add_test(tc, free_waits);
  tcase_add_test(tc, pending_input_waited);
  tcase_add_test(tc, empty_buffers);
  tcase_add_test(tc, many_pending);
  tcase_add_test(tc, ends_churn);
  tcase_add_test(tc, batch_below_pending);
  tcase_add_test(tc, batch_in_any_address_order);
  tcase_add_test(tc, forgotten_reads);
  tcase_add_test(tc, thousands_in_random_order);
  tcase_add_test(tc, bases_a_power_of_two_apart);
  tcase_add_test(tc, views_and_gaps_among_many);
  tcase_add_test(tc, grow_and_shrink);
  tcase_add_test(tc, concurrent_waits);
  suite_add_tcase(s, tc);
  return s;
}
