/* A plain MPI program, with no tcoll in it: conjugate gradients on the 1-D Poisson matrix
 * (tridiagonal 2, -1), its rows split over the ranks. Each iteration exchanges one halo value
 * with each neighbour and makes two dot products (MPI_Allreduce of one double): the pattern of an
 * implicit solver, whose time at small sizes is the latency of those reductions.
 *
 *   mpicc cg.c -o cg                       (no tcoll at build time)
 *   tcoll-mpiexec -n 2 ./cg [N] [REPEATS]  MPI's own collectives
 *   tcoll-mpiexec --preload -n 2 ./cg      the same binary through tcoll's drop-in layer
 *
 * It solves A x = b with b = A * ones, REPEATS times (default 1), and prints the iterations, the
 * final residual and the error against the known solution; it fails (exit 1) unless that error is
 * below 1e-6. With --preload the iterations must match the plain run and the residual agree to
 * 1e-12 relative (tcoll's reduction order may differ from MPI's). Wall time goes to stderr. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct part {
  int rank, size;
  long n, first, rows; /* the global size; this rank's first row and its row count */
} part_t;

static double dot(const part_t *p, const double *a, const double *b) {
  double local = 0, global = 0;
  for (long i = 0; i < p->rows; i++) local += a[i] * b[i];
  MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return global;
}

/* y = A x: the neighbours' edge values first (zero outside the domain). */
static void apply(const part_t *p, const double *x, double *y) {
  double left = 0, right = 0;
  int lo = p->rank > 0 ? p->rank - 1 : MPI_PROC_NULL;
  int hi = p->rank < p->size - 1 ? p->rank + 1 : MPI_PROC_NULL;
  if (p->rows == 0) lo = hi = MPI_PROC_NULL;
  MPI_Sendrecv(&x[0], 1, MPI_DOUBLE, lo, 0, &right, 1, MPI_DOUBLE, hi, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  MPI_Sendrecv(&x[p->rows - 1], 1, MPI_DOUBLE, hi, 1, &left, 1, MPI_DOUBLE, lo, 1, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  for (long i = 0; i < p->rows; i++) {
    double l = i > 0 ? x[i - 1] : left, r = i < p->rows - 1 ? x[i + 1] : right;
    y[i] = 2 * x[i] - l - r;
  }
}

/* Solves A x = b from x = 0 to a relative residual of 1e-10; returns the iterations. */
static int solve(const part_t *p, const double *b, double *x, double *res) {
  long m = p->rows;
  double *r = malloc(sizeof(double) * (size_t)(m + 1)),
         *d = malloc(sizeof(double) * (size_t)(m + 1));
  double *q = malloc(sizeof(double) * (size_t)(m + 1));
  for (long i = 0; i < m; i++) x[i] = 0, r[i] = d[i] = b[i];
  double rr = dot(p, r, r), stop = 1e-20 * rr;
  int it = 0;
  while (rr > stop && it < 10 * p->n) {
    apply(p, d, q);
    double alpha = rr / dot(p, d, q);
    for (long i = 0; i < m; i++) x[i] += alpha * d[i], r[i] -= alpha * q[i];
    double next = dot(p, r, r);
    for (long i = 0; i < m; i++) d[i] = r[i] + next / rr * d[i];
    rr = next;
    it++;
  }
  *res = sqrt(rr);
  free(r), free(d), free(q);
  return it;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  part_t p;
  MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.size);
  p.n = argc > 1 ? atol(argv[1]) : 400;
  int repeats = argc > 2 ? atoi(argv[2]) : 1;
  p.rows = p.n / p.size + (p.rank < p.n % p.size);
  p.first = p.rank * (p.n / p.size) + (p.rank < p.n % p.size ? p.rank : p.n % p.size);
  double *b = calloc((size_t)p.rows + 1, sizeof(double)),
         *x = calloc((size_t)p.rows + 1, sizeof(double));
  double *ones = calloc((size_t)p.rows + 1, sizeof(double));
  for (long i = 0; i < p.rows; i++) ones[i] = 1;
  apply(&p, ones, b);
  int it = 0;
  double res = 0, t0 = MPI_Wtime();
  for (int k = 0; k < repeats; k++) it = solve(&p, b, x, &res);
  double seconds = MPI_Wtime() - t0, err = 0, worst = 0;
  for (long i = 0; i < p.rows; i++) err = fmax(err, fabs(x[i] - 1));
  MPI_Allreduce(&err, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (p.rank == 0) {
    printf("cg: n %ld, %d ranks: %d iterations, residual %.17g, max error %.3g\n", p.n, p.size, it,
           res, worst);
    fprintf(stderr, "cg: %d solve(s) in %.6f s (%.3f us per iteration)\n", repeats, seconds,
            1e6 * seconds / ((double)repeats * (it ? it : 1)));
  }
  free(b), free(x), free(ones);
  MPI_Finalize();
  return worst < 1e-6 ? 0 : 1;
}
