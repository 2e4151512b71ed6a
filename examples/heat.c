/* heat: an existing MPI simulation that adopts tcoll for its collectives.
 *
 * 2-D heat diffusion on the unit square, zero (Dirichlet) boundary, explicit five-point stencil:
 *
 *     u'[i][j] = u[i][j] + r * (u[i-1][j] + u[i+1][j] + u[i][j-1] + u[i][j+1] - 4 u[i][j])
 *
 * The code is written the way MPI simulations usually are: it calls MPI_Init itself, builds its
 * own communicator (MPI_Comm_split, then a 1-D MPI_Cart_create over which the rows of the grid
 * are distributed) and exchanges halo rows with MPI_Sendrecv. It adopts tcoll only for its
 * collectives, without giving anything up:
 *
 *   - tcoll_init after MPI_Init (tcoll sees MPI running and leaves it alone), tcoll_finalize
 *     before MPI_Finalize (tcoll does not finalize MPI it did not start);
 *   - tcoll_comm_from_mpi wraps the simulation's own Cartesian communicator (tcoll duplicates
 *     it: the simulation's point-to-point traffic and tcoll's collectives never mix);
 *   - the global residual, every few steps, is a tcoll_all_reduce posted asynchronously and
 *     waited one step later, so the reduction overlaps the next stencil sweep;
 *   - the energy E = 1/2 sum u^2 is an all_reduce too, through tcoll's gradient module.
 *
 * The adjoint: dE/du0, the gradient of the final energy with respect to the initial field.
 * Reverse mode runs the program backwards, each step replaced by its adjoint (its transpose,
 * for these linear steps), applied to the gradient of what the step produced:
 *
 *   forward:  u0 -step-> u1 -step-> ... -step-> uT -(1/2 sum of u^2 here)-> e_r -all_reduce-> E
 *   backward: dE/du0 <-step^T- ... <-step^T- dE/duT = dE/de_r * uT <- dE/de_r <-all_reduce^T- 1
 *
 * The stencil and the halo exchange are the simulation's own code, so their adjoints are
 * written by hand (step_adjoint, halo_exchange_adjoint). The collective is tcoll's, and so is
 * its adjoint: energy_forward runs the all_reduce with tcoll_grad_all_reduce, which also returns
 * a grad node, and energy_backward hands the seed to tcoll_grad_backward on that node, which
 * posts the all_reduce's transpose (for SUM, an all_reduce SUM of the seeds) like any other
 * collective. The simulation never writes the adjoint of a collective itself.
 *
 * The example checks itself and exits nonzero on failure:
 *   1. the distributed field equals, bit for bit, a serial run of the same stencil on the whole
 *      grid (each rank computes the serial run: the grid is small);
 *   2. a discrete eigenmode sin(pi x) sin(pi y) decays by exactly the factor the stencil gives
 *      it, g = 1 - 4r (sin^2(pi hx / 2) + sin^2(pi hy / 2)), each step (closed form);
 *   3. the adjoint of one step passes the dot-product test <A x, y> = <x, A^T y> (global sums);
 *   4. the gradient matches central finite differences of E along a random direction (E is
 *      quadratic in u0, so the difference quotient is exact up to rounding).
 *
 *   mpiexec -n 4 tcoll-heat [NX NY STEPS]        (default 50 x 40 interior points, 120 steps) */
#include <mpi.h>
#include <tcoll.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define CHECK_TC(call)                                                                           \
  do {                                                                                           \
    int rc_ = (call);                                                                            \
    if (rc_ != TCOLL_SUCCESS) {                                                                  \
      fprintf(stderr, "%s failed: %s\n", #call, tcoll_last_error());                             \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                              \
    }                                                                                            \
  } while (0)

typedef struct params {
  int nx, ny;      /* interior points: nx rows (distributed) by ny columns */
  double r;        /* alpha dt / h^2; the explicit scheme is stable for r <= 1/4 */
  int steps;
  int check_every; /* steps between global residuals */
} params_t;

/* The simulation's decomposition: rows [row0, row0 + nrows) of the interior live here, stored
 * with one ghost row above and below and the two boundary columns, (nrows + 2) x (ny + 2). */
typedef struct domain {
  MPI_Comm cart; /* the simulation's own communicator */
  int rank, size;
  int up, down;  /* neighbours in cart (MPI_PROC_NULL at the boundary) */
  int row0, nrows, ny;
  tcoll_comm_t *tc; /* tcoll's handle on cart */
} domain_t;

static size_t field_len(const domain_t *d) { return (size_t)(d->nrows + 2) * (size_t)(d->ny + 2); }
#define AT(u, d, i, j) ((u)[(size_t)(i) * (size_t)((d)->ny + 2) + (size_t)(j)])

static double *field_new(const domain_t *d) {
  double *u = calloc(field_len(d), sizeof *u);
  if (!u) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return u;
}

/* A reproducible value for global interior point (gi, gj): the same on every decomposition. */
static double hashed(int gi, int gj, unsigned seed) {
  uint64_t h = (uint64_t)(unsigned)gi * 0x9E3779B97F4A7C15ULL ^ (uint64_t)(unsigned)gj * 0xC2B2AE3D27D4EB4FULL ^ seed;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 29;
  return (double)(h >> 11) / (double)(1ULL << 53) - 0.5;
}

static void fill_hashed(const domain_t *d, double *u, unsigned seed) {
  for (int i = 1; i <= d->nrows; i++)
    for (int j = 1; j <= d->ny; j++) AT(u, d, i, j) = hashed(d->row0 + i - 1, j - 1, seed);
}

/* ------------------------------------------------------------------ forward */

/* Ghost rows from the neighbours (the simulation's own point-to-point code). At the boundary
 * the neighbour is MPI_PROC_NULL and the ghost row keeps its zeros: the Dirichlet boundary. */
static void halo_exchange(const domain_t *d, double *u) {
  int w = d->ny + 2;
  MPI_Sendrecv(&AT(u, d, 1, 0), w, MPI_DOUBLE, d->up, 0, &AT(u, d, d->nrows + 1, 0), w, MPI_DOUBLE, d->down, 0,
               d->cart, MPI_STATUS_IGNORE);
  MPI_Sendrecv(&AT(u, d, d->nrows, 0), w, MPI_DOUBLE, d->down, 1, &AT(u, d, 0, 0), w, MPI_DOUBLE, d->up, 1, d->cart,
               MPI_STATUS_IGNORE);
}

/* One sweep of the stencil over the interior rows 1..nrows (ghosts already in place). */
static void stencil(const domain_t *d, const double *u, double *un, double r) {
  for (int i = 1; i <= d->nrows; i++)
    for (int j = 1; j <= d->ny; j++)
      AT(un, d, i, j) = AT(u, d, i, j) + r * (AT(u, d, i - 1, j) + AT(u, d, i + 1, j) + AT(u, d, i, j - 1) +
                                              AT(u, d, i, j + 1) - 4.0 * AT(u, d, i, j));
}

static void step(const domain_t *d, double *u, double *un, double r) {
  halo_exchange(d, u);
  stencil(d, u, un, r);
}

static double local_sum_sq(const domain_t *d, const double *u) {
  double s = 0;
  for (int i = 1; i <= d->nrows; i++)
    for (int j = 1; j <= d->ny; j++) s += AT(u, d, i, j) * AT(u, d, i, j);
  return s;
}

static double local_dot(const domain_t *d, const double *x, const double *y) {
  double s = 0;
  for (int i = 1; i <= d->nrows; i++)
    for (int j = 1; j <= d->ny; j++) s += AT(x, d, i, j) * AT(y, d, i, j);
  return s;
}

/* A global sum through tcoll (posted, then waited at once). */
static double global_sum(const domain_t *d, double local) {
  double total = 0;
  tcoll_tensor_t in = tcoll_tensor_make(&local, TCOLL_FLOAT64, 0, NULL, TCOLL_HOST);
  tcoll_tensor_t out = tcoll_tensor_make(&total, TCOLL_FLOAT64, 0, NULL, TCOLL_HOST);
  CHECK_TC(tcoll_all_reduce(&in, TCOLL_SUM, d->tc, &out));
  CHECK_TC(tcoll_wait(&total));
  return total;
}

/* The residual ||u^{n+1} - u^n|| of one step: its reduction is posted here and completed by
 * residual_finish one step later, while the next sweep runs. in/out stay untouched meanwhile. */
typedef struct residual {
  double local, global;
  int step;
  bool pending;
} residual_t;

static void residual_post(const domain_t *d, residual_t *res, const double *u, const double *un, int n) {
  double s = 0;
  for (int i = 1; i <= d->nrows; i++)
    for (int j = 1; j <= d->ny; j++) {
      double diff = AT(un, d, i, j) - AT(u, d, i, j);
      s += diff * diff;
    }
  res->local = s;
  res->step = n;
  tcoll_tensor_t in = tcoll_tensor_make(&res->local, TCOLL_FLOAT64, 0, NULL, TCOLL_HOST);
  tcoll_tensor_t out = tcoll_tensor_make(&res->global, TCOLL_FLOAT64, 0, NULL, TCOLL_HOST);
  CHECK_TC(tcoll_all_reduce(&in, TCOLL_SUM, d->tc, &out));
  res->pending = true;
}

static void residual_finish(const domain_t *d, residual_t *res, bool verbose) {
  if (!res->pending) return;
  CHECK_TC(tcoll_wait(&res->global));
  res->pending = false;
  if (verbose && d->rank == 0) printf("  step %4d  residual %.6e\n", res->step, sqrt(res->global));
}

/* Runs `steps` steps from u (overwritten with the final field). */
static void forward(const domain_t *d, const params_t *p, double **u, bool verbose) {
  double *un = field_new(d);
  residual_t res = {0};
  for (int n = 1; n <= p->steps; n++) {
    step(d, *u, un, p->r);
    residual_finish(d, &res, verbose); /* the previous check's reduction ran during this sweep */
    if (p->check_every > 0 && n % p->check_every == 0) residual_post(d, &res, *u, un, n);
    double *t = *u;
    *u = un;
    un = t;
  }
  residual_finish(d, &res, verbose);
  free(un);
}

/* E = 1/2 sum over the whole grid of u^2: each rank's share e_r = 1/2 sum of its own u^2, then
 * E = sum_r e_r by an all_reduce SUM. With node != NULL the all_reduce is differentiable:
 * tcoll_grad_all_reduce runs the same collective and also returns a grad node (it remembers the
 * communicator, the op and the shapes; free it with tcoll_grad_node_free). node == NULL: the
 * plain all_reduce, for energies whose gradient is not wanted. */
static double energy_forward(const domain_t *d, const double *u, tcoll_grad_node_t **node) {
  double local = 0.5 * local_sum_sq(d, u), total = 0;
  if (!node) return global_sum(d, local);
  tcoll_tensor_t e = tcoll_tensor_make(&local, TCOLL_FLOAT64, 0, NULL, TCOLL_HOST);
  tcoll_tensor_t E = tcoll_tensor_make(&total, TCOLL_FLOAT64, 0, NULL, TCOLL_HOST);
  CHECK_TC(tcoll_grad_all_reduce(&e, TCOLL_SUM, d->tc, &E, node));
  CHECK_TC(tcoll_wait(&total)); /* asynchronous like every collective: E is ready once waited */
  return total;
}

/* The adjoint of the all_reduce in energy_forward. Every rank holds a copy of E, and the loss is
 * the sum over the ranks of what each rank does with its copy, so this rank's seed is dL/dE_r,
 * the gradient of its own copy. Returns dL/de_r, the gradient of this rank's share:
 * E_s = sum_r e_r on every rank s gives dL/de_r = sum_s dL/dE_s, the all_reduce SUM of the
 * seeds. tcoll_grad_backward posts exactly that (it is a collective: every rank calls it, in
 * the same order as its other collectives) into grad, which is pending until waited. */
static double energy_backward(tcoll_grad_node_t *node, double seed) {
  double grad = 0;
  tcoll_tensor_t g_out = tcoll_tensor_make(&seed, TCOLL_FLOAT64, 0, NULL, TCOLL_HOST);
  tcoll_tensor_t g_in = tcoll_tensor_make(&grad, TCOLL_FLOAT64, 0, NULL, TCOLL_HOST);
  CHECK_TC(tcoll_grad_backward(node, &g_out, 1, &g_in, 1));
  CHECK_TC(tcoll_wait(&grad));
  return grad;
}

/* ------------------------------------------------------------------ adjoint */

/* The adjoint of halo_exchange: what a ghost row's adjoint holds goes back to the rank that
 * sent the row and is added to the row it came from. Ghost rows are cleared afterwards. */
static void halo_exchange_adjoint(const domain_t *d, double *a, double *tmp) {
  int w = d->ny + 2;
  /* Forward: my row 1 went to up's bottom ghost. Back: my bottom ghost adjoint goes to down,
   * whose row 1 it belongs to; up's comes to me, for my row 1. */
  memset(tmp, 0, (size_t)w * sizeof *tmp); /* stays zero when up is MPI_PROC_NULL */
  MPI_Sendrecv(&AT(a, d, d->nrows + 1, 0), w, MPI_DOUBLE, d->down, 2, tmp, w, MPI_DOUBLE, d->up, 2, d->cart,
               MPI_STATUS_IGNORE);
  for (int j = 0; j < w; j++) AT(a, d, 1, j) += tmp[j];
  /* Forward: my row nrows went to down's top ghost. Back: my top ghost adjoint goes to up. */
  memset(tmp, 0, (size_t)w * sizeof *tmp);
  MPI_Sendrecv(&AT(a, d, 0, 0), w, MPI_DOUBLE, d->up, 3, tmp, w, MPI_DOUBLE, d->down, 3, d->cart, MPI_STATUS_IGNORE);
  for (int j = 0; j < w; j++) AT(a, d, d->nrows, j) += tmp[j];
  memset(&AT(a, d, 0, 0), 0, (size_t)w * sizeof *a);
  memset(&AT(a, d, d->nrows + 1, 0), 0, (size_t)w * sizeof *a);
}

/* a = A^T an for one step A = stencil o halo_exchange. an: the adjoint of the new field
 * (interior); a: the adjoint of the old field (interior; boundaries and ghosts end at zero). */
static void step_adjoint(const domain_t *d, const double *an, double *a, double r, double *tmp) {
  memset(a, 0, field_len(d) * sizeof *a);
  for (int i = 1; i <= d->nrows; i++)
    for (int j = 1; j <= d->ny; j++) {
      double g = AT(an, d, i, j);
      AT(a, d, i, j) += (1.0 - 4.0 * r) * g;
      AT(a, d, i - 1, j) += r * g;
      AT(a, d, i + 1, j) += r * g;
      AT(a, d, i, j - 1) += r * g;
      AT(a, d, i, j + 1) += r * g;
    }
  for (int i = 0; i <= d->nrows + 1; i++) AT(a, d, i, 0) = AT(a, d, i, d->ny + 1) = 0; /* the boundary is fixed */
  halo_exchange_adjoint(d, a, tmp);
}

/* dE/du0, given the final field uT and the grad node of the energy's all_reduce (from
 * energy_forward(uT)): seeds the energy's adjoint, then runs the steps backwards. The stencil
 * is linear, so no forward state needs to be kept. */
static void gradient(const domain_t *d, const params_t *p, tcoll_grad_node_t *energy_node, const double *uT,
                     double *g) {
  /* The loss is E counted once: rank 0's copy gets the seed dL/dE = 1, the other copies 0. */
  double seed = d->rank == 0 ? 1.0 : 0.0;
  double de_local = energy_backward(energy_node, seed); /* dL/de_r: 1 on every rank */
  double *a = field_new(d), *an = field_new(d), *tmp = calloc((size_t)d->ny + 2, sizeof *tmp);
  for (int i = 1; i <= d->nrows; i++) /* e_r = 1/2 sum u^2, so de_r/du = u */
    for (int j = 1; j <= d->ny; j++) AT(an, d, i, j) = de_local * AT(uT, d, i, j);
  for (int n = 0; n < p->steps; n++) {
    step_adjoint(d, an, a, p->r, tmp);
    double *t = an;
    an = a;
    a = t;
  }
  memcpy(g, an, field_len(d) * sizeof *g);
  free(a);
  free(an);
  free(tmp);
}

/* ------------------------------------------------------------------ checks */

static int failures;

static void expect(const domain_t *d, bool ok, const char *what, double err, double tol) {
  int bad = !ok, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, d->cart);
  if (any) failures++;
  if (d->rank == 0) printf("%s %-58s error %.3e (tolerance %.1e)\n", any ? "FAIL" : "ok  ", what, err, tol);
}

/* 1. The distributed run against a serial run of the same code on the whole grid. */
static void check_serial(const domain_t *d, const params_t *p, const double *u_dist) {
  domain_t s = *d; /* one "rank" owning every row; neighbours MPI_PROC_NULL */
  s.row0 = 0;
  s.nrows = p->nx;
  s.up = s.down = MPI_PROC_NULL;
  double *u = field_new(&s), *un = field_new(&s);
  fill_hashed(&s, u, 1);
  for (int n = 0; n < p->steps; n++) {
    stencil(&s, u, un, p->r);
    double *t = u;
    u = un;
    un = t;
  }
  long differ = 0;
  double maxdiff = 0;
  for (int i = 1; i <= d->nrows; i++)
    for (int j = 1; j <= d->ny; j++) {
      double x = AT(u_dist, d, i, j), y = AT(u, &s, d->row0 + i, j);
      if (x != y) differ++;
      if (fabs(x - y) > maxdiff) maxdiff = fabs(x - y);
    }
  MPI_Allreduce(MPI_IN_PLACE, &maxdiff, 1, MPI_DOUBLE, MPI_MAX, d->cart);
  expect(d, differ == 0, "distributed field == serial field, bit for bit", maxdiff, 0.0);
  double e_serial = 0.5 * local_sum_sq(&s, u), e_dist = energy_forward(d, u_dist, NULL);
  double rel = fabs(e_dist - e_serial) / e_serial;
  expect(d, rel <= 1e-13, "energy (tcoll all_reduce) == serial energy", rel, 1e-13);
  free(u);
  free(un);
}

/* 2. The eigenmode sin(pi x) sin(pi y) decays by the stencil's factor g each step. */
static void check_eigenmode(const domain_t *d, const params_t *p) {
  double hx = 1.0 / (p->nx + 1), hy = 1.0 / (p->ny + 1);
  double *u = field_new(d);
  for (int i = 1; i <= d->nrows; i++)
    for (int j = 1; j <= d->ny; j++) AT(u, d, i, j) = sin(M_PI * (d->row0 + i) * hx) * sin(M_PI * j * hy);
  double sx = sin(M_PI * hx / 2), sy = sin(M_PI * hy / 2);
  double g = 1.0 - 4.0 * p->r * (sx * sx + sy * sy), gT = pow(g, p->steps);
  forward(d, p, &u, false);
  double err = 0;
  for (int i = 1; i <= d->nrows; i++)
    for (int j = 1; j <= d->ny; j++) {
      double want = gT * sin(M_PI * (d->row0 + i) * hx) * sin(M_PI * j * hy);
      if (fabs(AT(u, d, i, j) - want) > err) err = fabs(AT(u, d, i, j) - want);
    }
  MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, d->cart);
  err /= gT; /* relative to the mode's amplitude */
  expect(d, err <= 1e-11, "eigenmode decays by g^steps (closed form)", err, 1e-11);
  free(u);
}

/* 3. <A x, y> == <x, A^T y> for one step, summed over the ranks. */
static void check_dot_product(const domain_t *d, const params_t *p) {
  double *x = field_new(d), *y = field_new(d), *ax = field_new(d), *aty = field_new(d);
  double *tmp = calloc((size_t)d->ny + 2, sizeof *tmp);
  fill_hashed(d, x, 11);
  fill_hashed(d, y, 12);
  step(d, x, ax, p->r);
  step_adjoint(d, y, aty, p->r, tmp);
  double lhs = global_sum(d, local_dot(d, ax, y)), rhs = global_sum(d, local_dot(d, x, aty));
  double rel = fabs(lhs - rhs) / fmax(fabs(lhs), fabs(rhs));
  expect(d, rel <= 1e-12, "adjoint of one step: <A x, y> == <x, A^T y>", rel, 1e-12);
  free(x);
  free(y);
  free(ax);
  free(aty);
  free(tmp);
}

/* 4. dE/du0 against central differences along a random direction v. */
static void check_finite_differences(const domain_t *d, const params_t *p, const double *g) {
  double *v = field_new(d), *up = field_new(d), *um = field_new(d);
  fill_hashed(d, v, 21);
  const double eps = 1e-3;
  fill_hashed(d, up, 1);
  fill_hashed(d, um, 1);
  for (size_t k = 0; k < field_len(d); k++) {
    up[k] += eps * v[k];
    um[k] -= eps * v[k];
  }
  forward(d, p, &up, false);
  forward(d, p, &um, false);
  double fd = (energy_forward(d, up, NULL) - energy_forward(d, um, NULL)) / (2 * eps);
  double an = global_sum(d, local_dot(d, g, v));
  double rel = fabs(fd - an) / fabs(an);
  expect(d, rel <= 1e-8, "dE/du0 (adjoint) == central finite differences", rel, 1e-8);
  free(v);
  free(up);
  free(um);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
  /* The simulation owns MPI ... */
  MPI_Init(&argc, &argv);
  int wrank, wsize;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);

  params_t p = {.nx = 50, .ny = 40, .r = 0.2, .steps = 120, .check_every = 20};
  if (argc >= 4) {
    p.nx = atoi(argv[1]);
    p.ny = atoi(argv[2]);
    p.steps = atoi(argv[3]);
  }
  if (p.nx < wsize || p.ny < 1 || p.steps < 1) {
    if (wrank == 0) fprintf(stderr, "usage: heat [NX NY STEPS] with NX >= ranks (%d), NY >= 1, STEPS >= 1\n", wsize);
    MPI_Finalize();
    return 2;
  }

  /* ... and its own communicators: every rank computes (color 0), ranked in reverse world order
   * to show that nothing assumes the world numbering, then a 1-D Cartesian layout of the rows. */
  MPI_Comm sim, cart;
  MPI_Comm_split(MPI_COMM_WORLD, 0, wsize - 1 - wrank, &sim);
  int dims[1] = {wsize}, periods[1] = {0};
  MPI_Cart_create(sim, 1, dims, periods, 0, &cart);

  /* tcoll joins in: after MPI_Init, on the simulation's communicator. */
  CHECK_TC(tcoll_init(&argc, &argv));
  domain_t d = {.cart = cart, .ny = p.ny};
  MPI_Comm_rank(cart, &d.rank);
  MPI_Comm_size(cart, &d.size);
  MPI_Cart_shift(cart, 0, 1, &d.up, &d.down);
  int coord;
  MPI_Cart_coords(cart, d.rank, 1, &coord);
  int base = p.nx / d.size, extra = p.nx % d.size;
  d.nrows = base + (coord < extra);
  d.row0 = coord * base + (coord < extra ? coord : extra);
  CHECK_TC(tcoll_comm_from_mpi(cart, &d.tc));

  if (d.rank == 0)
    printf("heat: %d x %d interior points, r = %.2f, %d steps, rows over %d ranks; residual every %d steps\n", p.nx,
           p.ny, p.r, p.steps, d.size, p.check_every);

  /* The simulation: from a reproducible rough field. */
  double *u = field_new(&d);
  fill_hashed(&d, u, 1);
  double e0 = energy_forward(&d, u, NULL);
  forward(&d, &p, &u, true);
  tcoll_grad_node_t *energy_node; /* the final energy's all_reduce, for its adjoint */
  double eT = energy_forward(&d, u, &energy_node);
  if (d.rank == 0) printf("energy: %.6e at step 0, %.6e at step %d\n", e0, eT, p.steps);

  /* Its adjoint: dE/du0. */
  double *g = field_new(&d);
  gradient(&d, &p, energy_node, u, g);
  tcoll_grad_node_free(energy_node); /* before tcoll_comm_free: the node uses d.tc */
  double gnorm = sqrt(global_sum(&d, local_sum_sq(&d, g)));
  if (d.rank == 0) printf("|dE/du0| = %.6e\n", gnorm);

  expect(&d, eT < e0 && eT > 0, "energy decays and stays positive (E(T)/E(0) < 1)", eT / e0, 1.0);
  check_serial(&d, &p, u);
  check_eigenmode(&d, &p);
  check_dot_product(&d, &p);
  check_finite_differences(&d, &p, g);

  free(u);
  free(g);
  /* tcoll leaves before MPI does; the simulation frees its own communicators. */
  CHECK_TC(tcoll_comm_free(&d.tc));
  CHECK_TC(tcoll_finalize());
  MPI_Comm_free(&cart);
  MPI_Comm_free(&sim);
  int fails = failures;
  if (d.rank == 0) printf("heat: %s\n", fails ? "FAILED" : "all checks passed");
  MPI_Finalize();
  return fails ? 1 : 0;
}
