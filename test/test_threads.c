/* Threads: concurrent collectives from 4 threads on different communicators, waits from one
 * thread on work another thread started, and a shared registry under load. The suite also runs
 * with TCOLL_PROGRESS=thread (threads-progress), where a fifth thread tests the same works. */
#include "harness.h"

#include <pthread.h>
#include <stdlib.h>

#define NT 4
#define ITERS 25

typedef struct job {
  int k;
  tcoll_comm_t *comm;
  pthread_barrier_t *barrier;
  tcoll_tensor_t *handoff; /* cross-thread: the tensor another thread waits on */
} job_t;

static double value(int rank, int k, int iter, int64_t i) {
  return (double)(rank + 1) * (k + 1) + iter + (double)(i % 3);
}
static double sum_value(int k, int iter, int64_t i) {
  double s = 0;
  for (int r = 0; r < t_size; r++) s += value(r, k, iter, i);
  return s;
}

static void make_comms(tcoll_comm_t **comms) {
  for (int k = 0; k < NT; k++)
    T_OK(tcoll_comm_from_mpi(MPI_COMM_WORLD, &comms[k])); /* collective: main thread */
}

static void free_comms(tcoll_comm_t **comms) {
  for (int k = 0; k < NT; k++) T_OK(tcoll_comm_free(&comms[k]));
}

static void *concurrent_body(void *arg) {
  job_t *j = arg;
  int64_t shape[1] = {64 + j->k};
  for (int it = 0; it < ITERS; it++) {
    tcoll_tensor_t x = t_host(TCOLL_FLOAT64, 1, shape), y = t_empty(), g = t_empty();
    for (int64_t i = 0; i < shape[0]; i++) ((double *)x.data)[i] = value(t_rank, j->k, it, i);
    T_OK(tcoll_all_reduce(&x, TCOLL_SUM, j->comm, &y));
    T_OK(tcoll_all_gather(&x, 0, j->comm, &g));
    T_OK(tcoll_wait(g.data));
    T_OK(tcoll_wait(y.data));
    for (int64_t i = 0; i < shape[0]; i++) {
      double want = sum_value(j->k, it, i), got = ((double *)y.data)[i];
      T_EXPECT(got == want, "thread %d iter %d: y[%lld] = %g, expected %g", j->k, it, (long long)i,
               got, want);
    }
    for (int r = 0; r < t_size; r++) {
      double got = ((double *)g.data)[r * shape[0] + 1], want = value(r, j->k, it, 1);
      T_EXPECT(got == want, "thread %d iter %d: gathered block %d is %g, expected %g", j->k, it, r,
               got, want);
    }
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&g);
  }
  return NULL;
}

static void run_threads(void *(*body)(void *), job_t *jobs) {
  pthread_t th[NT];
  for (int k = 0; k < NT; k++) pthread_create(&th[k], NULL, body, &jobs[k]);
  for (int k = 0; k < NT; k++) pthread_join(th[k], NULL);
}

START_TEST(concurrent_communicators) {
  tcoll_comm_t *comms[NT];
  make_comms(comms);
  job_t jobs[NT];
  for (int k = 0; k < NT; k++) jobs[k] = (job_t){.k = k, .comm = comms[k]};
  run_threads(concurrent_body, jobs);
  free_comms(comms);
}
END_TEST

/* Thread k posts on comm k; thread (k + 1) % NT waits for it and checks the values. */
static void *handoff_body(void *arg) {
  job_t *j = arg;
  int64_t shape[1] = {33};
  tcoll_tensor_t x = t_host(TCOLL_FLOAT64, 1, shape);
  for (int it = 0; it < ITERS; it++) {
    for (int64_t i = 0; i < shape[0]; i++) ((double *)x.data)[i] = value(t_rank, j->k, it, i);
    tcoll_tensor_t *mine = &j->handoff[j->k];
    *mine = t_empty();
    T_OK(tcoll_all_reduce(&x, TCOLL_SUM, j->comm, mine));
    pthread_barrier_wait(j->barrier);
    int from = (j->k + NT - 1) % NT;
    tcoll_tensor_t *theirs = &j->handoff[from];
    T_OK(tcoll_wait(theirs->data));
    for (int64_t i = 0; i < shape[0]; i++) {
      double got = ((double *)theirs->data)[i], want = sum_value(from, it, i);
      T_EXPECT(got == want, "thread %d waited on thread %d's work: [%lld] = %g, expected %g", j->k,
               from, (long long)i, got, want);
    }
    pthread_barrier_wait(j->barrier); /* everyone has read before anyone frees */
    tcoll_tensor_free(theirs);
    pthread_barrier_wait(j->barrier);
  }
  tcoll_tensor_free(&x);
  return NULL;
}

START_TEST(wait_on_another_threads_work) {
  tcoll_comm_t *comms[NT];
  make_comms(comms);
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, NT);
  tcoll_tensor_t handoff[NT];
  job_t jobs[NT];
  for (int k = 0; k < NT; k++)
    jobs[k] = (job_t){.k = k, .comm = comms[k], .barrier = &barrier, .handoff = handoff};
  run_threads(handoff_body, jobs);
  pthread_barrier_destroy(&barrier);
  free_comms(comms);
}
END_TEST

/* Many pending works from several threads at once; one wait_all from the main thread. */
static void *pile_body(void *arg) {
  job_t *j = arg;
  int64_t shape[1] = {8};
  for (int it = 0; it < ITERS; it++) {
    tcoll_tensor_t x = t_host(TCOLL_INT64, 1, shape);
    for (int64_t i = 0; i < shape[0]; i++)
      ((int64_t *)x.data)[i] = (int64_t)value(t_rank, j->k, it, i);
    j->handoff[j->k * ITERS + it] = t_empty();
    T_OK(tcoll_all_reduce(&x, TCOLL_SUM, j->comm, &j->handoff[j->k * ITERS + it]));
    tcoll_tensor_free(&x); /* the input is waited first: nothing is freed under MPI */
  }
  return NULL;
}

START_TEST(pile_then_wait_all) {
  tcoll_comm_t *comms[NT];
  make_comms(comms);
  tcoll_tensor_t *outs = calloc(NT * ITERS, sizeof *outs);
  job_t jobs[NT];
  for (int k = 0; k < NT; k++) jobs[k] = (job_t){.k = k, .comm = comms[k], .handoff = outs};
  run_threads(pile_body, jobs);
  T_OK(tcoll_wait_all());
  T_EXPECT(tcoll_pending_count() == 0, "%zu pending after wait_all", tcoll_pending_count());
  for (int k = 0; k < NT; k++)
    for (int it = 0; it < ITERS; it++) {
      tcoll_tensor_t *y = &outs[k * ITERS + it];
      double got = (double)((int64_t *)y->data)[2], want = sum_value(k, it, 2);
      T_EXPECT(got == want, "thread %d iter %d: %g, expected %g", k, it, got, want);
      tcoll_tensor_free(y);
    }
  free(outs);
  free_comms(comms);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("threads");
  TCase *tc = t_tcase("threads");
  tcase_add_test(tc, concurrent_communicators);
  tcase_add_test(tc, wait_on_another_threads_work);
  tcase_add_test(tc, pile_then_wait_all);
  suite_add_tcase(s, tc);
  return s;
}
