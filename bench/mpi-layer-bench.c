/* mpi-layer-bench: a plain MPI program (no tcoll in it) that times MPI collectives as an
 * unmodified program calls them, to be run with and without the drop-in layer (libtcoll-mpi.so):
 * scripts/layer-bench runs both, interleaved, and prints the ratios.
 *
 *   mpi-layer-bench [OPS] [MIN MAX [STEP]]  OPS: comma list of allreduce, iallreduce,
 *                                       reduce_scatter_block, ireduce_scatter_block, bcast,
 *                                       ibcast, reduce, ireduce, allgather, iallgather,
 *                                       alltoall, ialltoall, self_allreduce (a call that
 *                                       always passes through: MPI_COMM_SELF), sendrecv
 *                                       (point-to-point, never wrapped)
 *
 * Sizes are the vector's bytes (reduce_scatter: the input's; allgather: the output's; alltoall: a
 * rank's whole buffer), float32 SUM, root 0, from MIN to MAX by a factor STEP (default 4).
 * Each point: a warm-up, then 5 rounds of enough calls for about 20 ms; prints the median time
 * per call in us ("op bytes us"), rank 0 only. */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct point {
  const char *op;
  size_t bytes;
  float *in, *out;
  int p;
} point_t;

static void one_call(const point_t *x) {
  int n = (int)(x->bytes / sizeof(float));
  MPI_Request req;
  if (!strcmp(x->op, "allreduce")) {
    MPI_Allreduce(x->in, x->out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  } else if (!strcmp(x->op, "iallreduce")) {
    MPI_Iallreduce(x->in, x->out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  } else if (!strcmp(x->op, "reduce_scatter_block")) {
    MPI_Reduce_scatter_block(x->in, x->out, n / x->p, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  } else if (!strcmp(x->op, "ireduce_scatter_block")) {
    MPI_Ireduce_scatter_block(x->in, x->out, n / x->p, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  } else if (!strcmp(x->op, "bcast")) {
    MPI_Bcast(x->in, n, MPI_FLOAT, 0, MPI_COMM_WORLD);
  } else if (!strcmp(x->op, "ibcast")) {
    MPI_Ibcast(x->in, n, MPI_FLOAT, 0, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  } else if (!strcmp(x->op, "reduce")) {
    MPI_Reduce(x->in, x->out, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  } else if (!strcmp(x->op, "ireduce")) {
    MPI_Ireduce(x->in, x->out, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  } else if (!strcmp(x->op, "allgather")) { /* bytes: the output */
    MPI_Allgather(x->in, n / x->p, MPI_FLOAT, x->out, n / x->p, MPI_FLOAT, MPI_COMM_WORLD);
  } else if (!strcmp(x->op, "iallgather")) {
    MPI_Iallgather(x->in, n / x->p, MPI_FLOAT, x->out, n / x->p, MPI_FLOAT, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  } else if (!strcmp(x->op, "alltoall")) { /* bytes: a rank's whole buffer */
    MPI_Alltoall(x->in, n / x->p, MPI_FLOAT, x->out, n / x->p, MPI_FLOAT, MPI_COMM_WORLD);
  } else if (!strcmp(x->op, "ialltoall")) {
    MPI_Ialltoall(x->in, n / x->p, MPI_FLOAT, x->out, n / x->p, MPI_FLOAT, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  } else if (!strcmp(x->op, "self_allreduce")) {
    MPI_Allreduce(x->in, x->out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_SELF);
  } else if (!strcmp(x->op, "sendrecv")) {
    int me, peer;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    peer = me ^ 1;
    if (peer >= x->p) peer = me;
    MPI_Sendrecv(x->in, n, MPI_FLOAT, peer, 0, x->out, n, MPI_FLOAT, peer, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
  }
}

/* Seconds for k calls, the slowest rank's. */
static double timed(const point_t *x, long k) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (long i = 0; i < k; i++) one_call(x);
  double t = MPI_Wtime() - t0, worst;
  MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); /* blocking: as the op */
  return worst;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median_us(const point_t *x) {
  long k = 1;
  timed(x, 2);
  while (timed(x, k) < 0.005 && k < (1L << 22)) k *= 4;
  long per_round = (long)(k * (0.02 / (timed(x, k) + 1e-9))) + 1;
  double t[5];
  for (int r = 0; r < 5; r++) t[r] = 1e6 * timed(x, per_round) / (double)per_round;
  qsort(t, 5, sizeof t[0], by_value);
  return t[2];
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  char *ops = strdup(argc > 1 ? argv[1] : "allreduce,iallreduce,reduce_scatter_block");
  size_t lo = argc > 2 ? strtoul(argv[2], NULL, 0) : 8,
         hi = argc > 3 ? strtoul(argv[3], NULL, 0) : (size_t)1 << 20,
         step = argc > 4 ? strtoul(argv[4], NULL, 0) : 4;
  if (step < 2) step = 2;
  size_t most = hi * (size_t)p; /* reduce_scatter's input may be rounded up to p blocks */
  point_t x = {.in = calloc(most / sizeof(float) + 16, sizeof(float)),
               .out = calloc(most / sizeof(float) + 16, sizeof(float)),
               .p = p};
  for (char *op = strtok(ops, ","); op; op = strtok(NULL, ",")) {
    for (size_t b = lo; b <= hi; b *= step) {
      x.op = op;
      bool blocks = strstr(op, "scatter") || strstr(op, "gather") || strstr(op, "alltoall");
      x.bytes = b < sizeof(float) * (size_t)p && blocks ? sizeof(float) * p : b;
      if (blocks) x.bytes -= x.bytes % (sizeof(float) * (size_t)p);
      double us = median_us(&x);
      if (rank == 0) printf("%s %zu %.3f\n", op, x.bytes, us);
    }
  }
  free(x.in), free(x.out), free(ops);
  MPI_Finalize();
  return 0;
}
