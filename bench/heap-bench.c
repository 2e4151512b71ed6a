/* heap-bench: what the symmetric heap saves, in one run. Per op (all_reduce, reduce_scatter,
 * all_gather: float32 sums, the algorithm the table picks) and size, it alternates every
 * iteration between tensors from tcoll_tensor_alloc (the node's symmetric heap: peers read them
 * in place) and the same shapes in malloc'd memory (copied in through the segment's slots), and a
 * memcpy of the input by every rank at once, the yardstick. Each time is the slowest
 * rank's; medians and the spread (min-max) over the iterations.
 *   mpiexec -n 2 build/bench/heap-bench [SIZE ...]    (bytes of the input; default 1M 4M 16M) */
#include "tcoll.h"

#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ITERS 40

static int rank, size;

static void die_on(int rc, const char *what) {
  if (rc == TCOLL_SUCCESS) return;
  fprintf(stderr, "heap-bench: %s: %s\n", what, tcoll_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The slowest rank's time of fn, started together. */
typedef void (*step_fn)(void *);
static double timed(step_fn fn, void *arg) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  fn(arg);
  t = MPI_Wtime() - t, MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

typedef struct job {
  const char *op;
  tcoll_tensor_t in, out;
  void *cpy_src, *cpy_dst;
  size_t bytes;
} job_t;

static void run_op(void *arg) {
  job_t *j = arg;
  tcoll_comm_t *w = tcoll_comm_world();
  if (!strcmp(j->op, "all_reduce"))
    die_on(tcoll_all_reduce(&j->in, TCOLL_SUM, w, &j->out), "all_reduce");
  else if (!strcmp(j->op, "reduce_scatter"))
    die_on(tcoll_reduce_scatter(&j->in, TCOLL_SUM, 0, w, &j->out), "reduce_scatter");
  else
    die_on(tcoll_all_gather(&j->in, 0, w, &j->out), "all_gather");
  die_on(tcoll_wait(j->out.data), "wait");
}

static void run_memcpy(void *arg) {
  job_t *j = arg;
  memcpy(j->cpy_dst, j->cpy_src, j->bytes);
}

/* Input and output shapes of op for an input of n floats. */
static void shapes(const char *op, int64_t n, int64_t *in, int64_t *out) {
  *in = n;
  *out = !strcmp(op, "reduce_scatter") ? n / size : !strcmp(op, "all_gather") ? n * size : n;
}

static job_t make(const char *op, int64_t n, bool heap) {
  job_t j = {.op = op};
  int64_t in_n, out_n;
  shapes(op, n, &in_n, &out_n);
  if (heap) {
    die_on(tcoll_tensor_alloc(&j.in, TCOLL_FLOAT32, 1, &in_n, TCOLL_HOST), "alloc");
    die_on(tcoll_tensor_alloc(&j.out, TCOLL_FLOAT32, 1, &out_n, TCOLL_HOST), "alloc");
  } else {
    void *a = NULL, *b = NULL;
    if (posix_memalign(&a, 4096, (size_t)in_n * 4) || posix_memalign(&b, 4096, (size_t)out_n * 4))
      MPI_Abort(MPI_COMM_WORLD, 1);
    j.in = tcoll_tensor_make(a, TCOLL_FLOAT32, 1, &in_n, TCOLL_HOST);
    j.out = tcoll_tensor_make(b, TCOLL_FLOAT32, 1, &out_n, TCOLL_HOST);
  }
  for (int64_t i = 0; i < in_n; i++) ((float *)j.in.data)[i] = (float)(rank + 1 + i % 7);
  memset(j.out.data, 0, (size_t)out_n * 4);
  return j;
}

static void drop(job_t *j, bool heap) {
  if (heap) {
    tcoll_tensor_free(&j->in);
    tcoll_tensor_free(&j->out);
  } else {
    free(j->in.data);
    free(j->out.data);
  }
}

static void report(const char *op, size_t bytes, const char *what, double *t, double *ref) {
  qsort(t, ITERS, sizeof *t, cmp);
  double med = t[ITERS / 2], r = med / ref[ITERS / 2];
  if (rank == 0)
    printf("%-15s %9zu %-8s %9.1f us (%.1f-%.1f)  %.2fx memcpy\n", op, bytes, what, med * 1e6,
           t[0] * 1e6, t[ITERS - 1] * 1e6, r);
}

static void measure(const char *op, size_t bytes) {
  int64_t n = (int64_t)(bytes / 4) / size * size;
  job_t heap = make(op, n, true), mine = make(op, n, false);
  heap.bytes = mine.bytes = (size_t)n * 4;
  heap.cpy_src = mine.in.data; /* memcpy: the input, into a buffer of its size */
  heap.cpy_dst = malloc((size_t)n * 4);
  memset(heap.cpy_dst, 0, (size_t)n * 4);
  double t_heap[ITERS], t_mine[ITERS], t_cpy[ITERS];
  for (int i = -3; i < ITERS; i++) { /* 3 rounds of warm-up */
    double a = timed(run_op, &heap), b = timed(run_op, &mine), c = timed(run_memcpy, &heap);
    if (i >= 0) t_heap[i] = a, t_mine[i] = b, t_cpy[i] = c;
  }
  double cpy[ITERS];
  memcpy(cpy, t_cpy, sizeof cpy);
  qsort(cpy, ITERS, sizeof *cpy, cmp);
  report(op, (size_t)n * 4, "heap", t_heap, cpy);
  report(op, (size_t)n * 4, "malloc", t_mine, cpy);
  report(op, (size_t)n * 4, "memcpy", t_cpy, cpy);
  if (rank == 0) printf("%-15s %9zu algorithm %s\n", op, (size_t)n * 4, tcoll_last_algorithm());
  free(heap.cpy_dst);
  drop(&heap, true);
  drop(&mine, false);
}

int main(int argc, char **argv) {
  die_on(tcoll_init(&argc, &argv), "tcoll_init");
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *defaults[] = {"1048576", "4194304", "16777216"};
  int nsizes = argc > 1 ? argc - 1 : 3;
  const char *ops[] = {"all_reduce", "reduce_scatter", "all_gather"};
  for (int s = 0; s < nsizes; s++) {
    size_t bytes = (size_t)strtoull(argc > 1 ? argv[s + 1] : defaults[s], NULL, 10);
    for (int o = 0; o < 3; o++) measure(ops[o], bytes);
  }
  tcoll_finalize();
  return 0;
}
