/* registry-scale: what one post + wait costs while many other buffers are pending.
 *
 *   mpiexec -n 1 registry-scale [--counts 10,100,1000,10000] [--reps N] [--batches N] [--iters N]
 *
 * For each count N: N host all_reduces of 8 bytes are posted and left pending (outputs and inputs
 * at even 8-byte slots of two big allocations, in address order), then --batches batches of
 * --iters post + wait cycles of one more all_reduce are timed, its output and input at the odd
 * slot in the middle of the pending ones (where an ordered array would move half its entries on
 * every insert and remove). The pending ones are waited afterwards, untimed. Counts run
 * interleaved, in an order rotated every repetition, so that a noisy neighbour on a shared
 * machine hits them alike; each repetition gives one value per count (the median of its batches'
 * means). Printed per count: the median over repetitions, the lowest and highest, and the median
 * against the first count's.
 *
 * One rank is the intended run: a one-rank MPI_Iallreduce completes at once, so MPI keeps no
 * request in flight for the pending works and only tcoll's per-call cost grows with N (with more
 * ranks the N outstanding MPI requests weigh on every progress call). */
#include <tcoll.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_COUNTS 16
#define SLOT_FLOATS 2 /* 8 bytes */

static void check(int rc, const char *what) {
  if (rc == TCOLL_SUCCESS) return;
  fprintf(stderr, "registry-scale: %s: %s: %s\n", what, tcoll_status_string(rc),
          tcoll_last_error());
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The 8-byte tensor at slot s of a buffer. */
static tcoll_tensor_t slot(float *base, long s) {
  int64_t shape[1] = {SLOT_FLOATS};
  return tcoll_tensor_make(base + s * SLOT_FLOATS, TCOLL_FLOAT32, 1, shape, TCOLL_HOST);
}

/* One repetition at count n: the mean microseconds of each batch's post + wait cycles; returns
 * their median. */
static double run_count(float *ins, float *outs, long n, int batches, int iters) {
  for (long k = 0; k < n; k++) {
    tcoll_tensor_t in = slot(ins, 2 * k), out = slot(outs, 2 * k);
    check(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out), "pending all_reduce");
  }
  if (tcoll_pending_count() != (size_t)n) {
    fprintf(stderr, "registry-scale: %zu pending, expected %ld\n", tcoll_pending_count(), n);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  long mid = 2 * (n / 2) + 1;
  tcoll_tensor_t in = slot(ins, mid), out = slot(outs, mid);
  for (int i = 0; i < iters; i++) { /* warm-up */
    check(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out), "all_reduce");
    check(tcoll_wait(out.data), "wait");
  }
  double per[batches];
  for (int b = 0; b < batches; b++) {
    double t0 = now();
    for (int i = 0; i < iters; i++) {
      check(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out), "all_reduce");
      check(tcoll_wait(out.data), "wait");
    }
    per[b] = 1e6 * (now() - t0) / iters;
  }
  check(tcoll_wait_all(), "wait_all");
  return median(per, batches);
}

int main(int argc, char **argv) {
  check(tcoll_init(&argc, &argv), "tcoll_init");
  long counts[MAX_COUNTS] = {10, 100, 1000, 10000};
  int ncounts = 4, reps = 7, batches = 9, iters = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--counts")) {
      ncounts = 0;
      for (char *s = argv[i + 1]; *s && ncounts < MAX_COUNTS; s += *s == ',')
        counts[ncounts++] = strtol(s, &s, 10);
    } else if (!strcmp(argv[i], "--reps"))
      reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--batches"))
      batches = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--iters"))
      iters = atoi(argv[i + 1]);
    else {
      fprintf(stderr,
              "usage: registry-scale [--counts N,N,...] [--reps N] [--batches N] [--iters N]\n");
      return 2;
    }
  }
  bool bad = ncounts < 1 || reps < 1 || batches < 1 || iters < 1;
  for (int c = 0; c < ncounts; c++) bad = bad || counts[c] < 1;
  if (bad) {
    fprintf(stderr, "registry-scale: counts, reps, batches and iters must be positive\n");
    return 2;
  }
  long most = 0;
  for (int c = 0; c < ncounts; c++) most = counts[c] > most ? counts[c] : most;
  size_t floats = (size_t)(2 * most + 2) * SLOT_FLOATS;
  float *ins = calloc(floats, sizeof *ins), *outs = calloc(floats, sizeof *outs);
  double *us = malloc(sizeof *us * (size_t)(ncounts * reps));
  if (!ins || !outs || !us) check(TCOLL_ERR_NO_MEMORY, "calloc");
  for (int r = 0; r < reps; r++)
    for (int j = 0; j < ncounts; j++) {
      int c = (j + r) % ncounts; /* rotated: every count runs first, last and in between */
      us[c * reps + r] = run_count(ins, outs, counts[c], batches, iters);
    }
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    printf(
        "# registry-scale: post + wait of one 8-byte host all_reduce among N pending, %d "
        "repetitions of "
        "%d x %d calls\n# %8s %12s %12s %12s %10s\n",
        reps, batches, iters, "N", "median us", "min us", "max us", "vs first");
    double first = 0;
    for (int c = 0; c < ncounts; c++) {
      double *v = &us[c * reps],
             m = median(v, reps); /* sorts v: v[0] lowest, v[reps - 1] highest */
      if (c == 0) first = m;
      printf("  %8ld %12.3f %12.3f %12.3f %9.2fx\n", counts[c], m, v[0], v[reps - 1], m / first);
    }
  }
  free(ins);
  free(outs);
  free(us);
  return tcoll_finalize() == TCOLL_SUCCESS ? 0 : 1;
}
