/* Fault and tracing scenarios, each run by test/faults.sh under mpiexec, which checks the exit
 * status and the messages. Usage: scenario NAME
 *   late        rank 1 joins an all_reduce a second late: everyone completes, values exact
 *   never       rank 1 never joins: the others' wait times out (TCOLL_TIMEOUT); with
 *               TCOLL_ON_TIMEOUT=abort the job ends with a diagnosis instead of hanging
 *   exit-early  rank 1 exits without finalizing while the others wait: the job must end
 *   mismatch    under TCOLL_DEBUG=DETAIL, ranks call different ops: every rank gets
 *               TCOLL_ERR_MISMATCH, and the flight recorder is dumped
 *   trace       a few collectives; the flight recorder is written at finalize (TCOLL_TRACE) */
#include <tcoll.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size;

static int fail(const char *what) {
  fprintf(stderr, "scenario rank %d: %s: %s\n", rank, what, tcoll_last_error());
  return 1;
}

static int post_sum(tcoll_tensor_t *x, tcoll_tensor_t *y) {
  int64_t shape[1] = {1024};
  if (tcoll_tensor_alloc(x, TCOLL_FLOAT64, 1, shape, TCOLL_HOST)) return fail("alloc");
  for (int i = 0; i < 1024; i++) ((double *)x->data)[i] = rank + i;
  *y = (tcoll_tensor_t){0};
  return tcoll_all_reduce(x, TCOLL_SUM, NULL, y) ? fail("all_reduce") : 0;
}

static int check_sum(const tcoll_tensor_t *y) {
  for (int i = 0; i < 1024; i++) {
    double want = (double)size * (size - 1) / 2 + (double)size * i;
    if (((double *)y->data)[i] != want) {
      fprintf(stderr, "scenario rank %d: y[%d] = %g, expected %g\n", rank, i,
              ((double *)y->data)[i], want);
      return 1;
    }
  }
  return 0;
}

static int late(void) {
  tcoll_tensor_t x, y;
  if (rank == 1) sleep(1);
  if (post_sum(&x, &y)) return 1;
  if (tcoll_wait(y.data)) return fail("wait");
  int bad = check_sum(&y);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  if (!bad && rank == 0) printf("late joiner: completed with exact values\n");
  return bad;
}

static int never(void) {
  tcoll_tensor_t x, y;
  if (rank == 1) { /* never joins the all_reduce; stays alive until the job is torn down */
    sleep(60);
    return 0;
  }
  if (post_sum(&x, &y)) return 1;
  int rc = tcoll_wait(y.data); /* TCOLL_TIMEOUT bounds it */
  fprintf(stderr, "scenario rank %d: wait returned %s: %s\n", rank, tcoll_status_string(rc),
          tcoll_last_error());
  /* Reached only with TCOLL_ON_TIMEOUT=return: the work stays pending and cannot complete. */
  _exit(rc == TCOLL_ERR_TIMEOUT ? 42 : 1);
}

static int exit_early(void) {
  if (rank == 1) _exit(3); /* no tcoll_finalize, no MPI_Finalize */
  tcoll_tensor_t x, y;
  if (post_sum(&x, &y)) return 1;
  int rc = tcoll_wait(y.data);
  fprintf(stderr, "scenario rank %d: wait returned %s\n", rank, tcoll_status_string(rc));
  _exit(rc ? 43 : 44);
}

static int mismatch(void) {
  int64_t shape[1] = {8};
  tcoll_tensor_t x, y = {0};
  if (tcoll_tensor_alloc(&x, TCOLL_FLOAT32, 1, shape, TCOLL_HOST)) return fail("alloc");
  int rc =
      rank == 0 ? tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y) : tcoll_all_gather(&x, 0, NULL, &y);
  tcoll_tensor_free(&x);
  if (rc != TCOLL_ERR_MISMATCH) return fail("expected TCOLL_ERR_MISMATCH");
  printf("rank %d: %s\n", rank, tcoll_last_error());
  return 0;
}

static int trace(void) {
  tcoll_tensor_t x, y;
  for (int k = 0; k < 3; k++) {
    if (post_sum(&x, &y)) return 1;
    if (tcoll_wait(y.data) || check_sum(&y)) return fail("all_reduce");
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
  }
  tcoll_comm_t *half;
  if (tcoll_comm_split(NULL, rank % 2, rank, &half)) return fail("split");
  tcoll_comm_set_name(half, rank % 2 ? "odd" : "even");
  int64_t shape[2] = {2, 3};
  tcoll_tensor_t a, g = {0};
  tcoll_tensor_alloc(&a, TCOLL_INT32, 2, shape, TCOLL_HOST);
  if (tcoll_all_gather(&a, 1, half, &g) || tcoll_wait(g.data)) return fail("all_gather");
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&g);
  tcoll_comm_free(&half);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: scenario late|never|exit-early|mismatch|trace\n");
    return 2;
  }
  if (tcoll_init(&argc, &argv)) return fail("tcoll_init");
  rank = tcoll_comm_rank(tcoll_comm_world());
  size = tcoll_comm_size(tcoll_comm_world());
  const char *s = argv[1];
  int rc = !strcmp(s, "late")         ? late()
           : !strcmp(s, "never")      ? never()
           : !strcmp(s, "exit-early") ? exit_early()
           : !strcmp(s, "mismatch")   ? mismatch()
           : !strcmp(s, "trace")      ? trace()
                                      : 2;
  if (tcoll_finalize()) return fail("tcoll_finalize");
  return rc;
}
