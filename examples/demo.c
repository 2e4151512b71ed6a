/* tcoll demo: train a small MLP with data and tensor parallelism on a 2 x 2 device mesh.
 *
 *   scripts/run demo                      (mpiexec -n 4 build/examples/tcoll-demo)
 *   tcoll-demo [--steps N] [--check-every K] [--lr LR] [--plain] [--corrupt]
 *
 * The model, in PyTorch terms (plain SGD, a fresh batch every step):
 *
 *     h    = tanh(x @ W1 + b1)      x: [64, 16]   W1: [16, 64]   b1: [64]
 *     y    = h @ W2                 W2: [64, 8]
 *     loss = mse_loss(y, t)         t = sin(x @ A): a fixed "teacher" that the MLP learns
 *
 * in float64, as torch.autograd.gradcheck wants it: the demo compares its gradients with a
 * serial computation, and in float64 that comparison measures the parallel code rather than
 * float32 rounding (which, summed over a batch with cancellation, reaches 1e-5 by itself).
 *
 * The parallel layout. tcoll_mesh_create lays the 4 ranks out row-major, like
 * DeviceMesh("cuda", [[0, 1], [2, 3]]); mesh dim 0 is data parallel (DP), dim 1 tensor parallel
 * (TP):
 *
 *                   tp = 0                  tp = 1
 *     dp = 0        rank 0                  rank 1          batch rows  0..31 (replica 0)
 *     dp = 1        rank 2                  rank 3          batch rows 32..63 (replica 1)
 *               hidden units 0..31      hidden units 32..63
 *               W1[:, 0:32], b1[0:32]   W1[:, 32:64], b1[32:64]
 *               W2[0:32, :]             W2[32:64, :]
 *
 * - Tensor parallel (Megatron style, with sequence parallelism): each TP rank holds half of the
 *   hidden units: a column block of W1 and b1, the matching row block of W2. Outside the MLP, a
 *   replica's 32 rows are split between its two TP ranks (16 rows each). Forward:
 *
 *     my 16 rows of x --all_gather (dim 0)--> the replica's 32 rows of x
 *       --my half of the hidden units--> y_partial [32, 8], my units' share of y
 *       --reduce_scatter SUM (dim 0)--> my 16 rows of y, complete
 *
 *   Both collectives are the differentiable variants (tcoll_grad_*): they return grad nodes, and
 *   tcoll_grad_backward posts their transposes: reduce_scatter's backward is an all_gather of
 *   dL/dy, all_gather's backward a reduce_scatter SUM of dL/dx (doc/gradients.md).
 * - Data parallel (like DDP): the two replicas see different halves of the batch and average
 *   their parameter gradients with tcoll_all_reduce_coalesced(AVG) along mesh dim 0. Layer 2's
 *   gradients are posted as soon as they exist and travel while layer 1's backward is computed.
 *
 * Which loss each rank differentiates: tcoll's gradient rules take the loss to be the sum over
 * the ranks of each rank's loss (doc/gradients.md, section 1). A rank's loss is the squared error
 * of its 16 rows divided by 32 * 8, so the two TP ranks' losses add up to their replica's MSE,
 * and the average over the replicas (the DP all_reduce AVG) is the MSE of the whole batch.
 *
 * Every collective is asynchronous: it returns at once and its output is pending until
 * tcoll_wait (or tcoll_wait_all) completes it. The forward waits right away (the next layer
 * needs the result); the backward posts the DP averages and the last gradient and waits for all
 * of them once, at the end of the step.
 *
 * Devices: every tensor that tcoll communicates lives on a device: a GPU when there is one (the
 * CUDA backend), otherwise an emulated device (TCOLL_FAKE_DEVICES: host memory behind the same
 * device interface, staged through pinned buffers as a GPU without CUDA-aware MPI is). To keep
 * this file self-contained the local math is plain C loops on host copies, moved with
 * tcoll_tensor_copy; a real program would run kernels (cuBLAS) on the device instead.
 *
 * The demo checks itself: every few steps each rank gathers the full parameters and recomputes
 * the whole model serially on the whole batch (independent code, below), and compares the loss
 * and its own shards of every gradient with the serial ones. The error of a tensor is normwise
 * relative: max |parallel - serial| / max |serial|. Every error on every rank must be <= 1e-5,
 * or the demo stops and exits with status 1. --corrupt adds a small error to one gradient on one
 * rank, to watch the check catch it. Rank 0 shows a progress bar and ends with a summary. */
#include <mpi.h>
#include <tcoll.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    int rc_ = (call);                                                                            \
    if (rc_ != TCOLL_SUCCESS) {                                                                  \
      fprintf(stderr, "%s failed: %s\n", #call, tcoll_last_error());                             \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                              \
    }                                                                                            \
  } while (0)

/* The whole model's sizes. */
enum { BATCH = 64, IN = 16, HIDDEN = 64, OUT = 8 };
#define TOLERANCE 1e-5

/* ------------------------------------------------------------------ timing
 * Wall time per category, on each rank: communication (inside tcoll's collective calls and
 * waits), copies between device and host (there only because the math below runs on the host),
 * the local math, and the serial checks. */
enum { T_COMM, T_COPY, T_MATH, T_CHECK, T_TOTAL, NT };
static double timers[NT];
#define TIMED(cat, call)                                                                         \
  do {                                                                                           \
    double t0_ = MPI_Wtime();                                                                    \
    CHECK(call);                                                                                 \
    timers[cat] += MPI_Wtime() - t0_;                                                            \
  } while (0)
#define COMM(call) TIMED(T_COMM, call)

/* Drives a pending collective once without waiting for it (TCOLL_IN_PROGRESS is fine). */
static void poke(const void *buffer) {
  double t0 = MPI_Wtime();
  int rc = tcoll_test(buffer);
  if (rc < 0) {
    fprintf(stderr, "tcoll_test failed: %s\n", tcoll_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  timers[T_COMM] += MPI_Wtime() - t0;
}

/* ------------------------------------------------------------------ tensors
 * A float64 tensor on the device (what tcoll communicates) with a host copy (what the C loops
 * compute on). pull: device -> host; push: host -> device. */
typedef struct buf {
  tcoll_tensor_t dev, host;
  double *h; /* host.data */
} buf_t;

static void buf_alloc(buf_t *b, int ndim, const int64_t *shape, int device) {
  CHECK(tcoll_tensor_alloc(&b->dev, TCOLL_FLOAT64, ndim, shape, device));
  CHECK(tcoll_tensor_alloc(&b->host, TCOLL_FLOAT64, ndim, shape, TCOLL_HOST));
  b->h = b->host.data;
}
/* BUF(&b, device, d0, d1, ...): allocates b with shape [d0, d1, ...]. */
#define BUF(b, device, ...)                                                                      \
  buf_alloc((b), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}, (device))
static void buf_free(buf_t *b) {
  tcoll_tensor_free(&b->dev);
  tcoll_tensor_free(&b->host);
}
static void pull(buf_t *b) { TIMED(T_COPY, tcoll_tensor_copy(&b->host, &b->dev)); }
static void push(buf_t *b) { TIMED(T_COPY, tcoll_tensor_copy(&b->dev, &b->host)); }

/* ------------------------------------------------------------------ local math (host)
 * C[m x n] = op(A) @ op(B), row-major; op(A) is m x k (A stored k x m when ta), op(B) is k x n
 * (B stored n x k when tb). */
static void matmul(double *C, const double *A, const double *B, int m, int n, int k, bool ta, bool tb) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < k; p++) s += (ta ? A[p * m + i] : A[i * k + p]) * (tb ? B[j * k + p] : B[p * n + j]);
      C[i * n + j] = s;
    }
}

/* ------------------------------------------------------------------ data
 * Every rank draws the same numbers from the same seeds (like a data loader with a shared seed)
 * and keeps its part. */
static uint64_t rng_state;
static double uniform(void) { /* splitmix64, in [-1, 1) */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-52 - 1.0;
}

static double teacher_a[IN * OUT];
/* The batch of step `step`: x [BATCH, IN] uniform in [-1, 1), t = sin(x @ A). */
static void make_batch(int step, double *x, double *t) {
  rng_state = 1000003ull * (uint64_t)(step + 1);
  for (int i = 0; i < BATCH * IN; i++) x[i] = uniform();
  for (int i = 0; i < BATCH; i++)
    for (int k = 0; k < OUT; k++) {
      double s = 0;
      for (int j = 0; j < IN; j++) s += x[i * IN + j] * teacher_a[j * OUT + k];
      t[i * OUT + k] = sin(s);
    }
}

/* ------------------------------------------------------------------ the serial reference
 * The whole model on the whole batch, written out independently of the parallel code (plain
 * loops, no matmul helper, one sample at a time): loss = mean (y - t)^2 and its gradients. */
typedef struct ref {
  double loss, w1[IN * HIDDEN], b1[HIDDEN], w2[HIDDEN * OUT], x[BATCH * IN];
} ref_t;

static void serial_reference(const double *x, const double *t, const double *w1, const double *b1,
                             const double *w2, ref_t *g) {
  memset(g, 0, sizeof *g);
  for (int i = 0; i < BATCH; i++) {
    double h[HIDDEN], gy[OUT];
    for (int u = 0; u < HIDDEN; u++) {
      double s = b1[u];
      for (int j = 0; j < IN; j++) s += x[i * IN + j] * w1[j * HIDDEN + u];
      h[u] = tanh(s);
    }
    for (int k = 0; k < OUT; k++) {
      double y = 0;
      for (int u = 0; u < HIDDEN; u++) y += h[u] * w2[u * OUT + k];
      double e = y - t[i * OUT + k];
      g->loss += e * e / (BATCH * OUT);
      gy[k] = 2 * e / (BATCH * OUT);
    }
    for (int u = 0; u < HIDDEN; u++) {
      double gh = 0;
      for (int k = 0; k < OUT; k++) {
        gh += gy[k] * w2[u * OUT + k];
        g->w2[u * OUT + k] += h[u] * gy[k];
      }
      gh *= 1 - h[u] * h[u]; /* tanh' */
      g->b1[u] += gh;
      for (int j = 0; j < IN; j++) {
        g->w1[j * HIDDEN + u] += x[i * IN + j] * gh;
        g->x[i * IN + j] += gh * w1[j * HIDDEN + u];
      }
    }
  }
}

/* Normwise relative error of a rows x cols block against the reference (row stride
 * want_stride), the reference multiplied by `scale` first. */
static double rel_error(const double *got, const double *want, int rows, int cols, int want_stride, double scale) {
  double diff = 0, norm = 0;
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) {
      double w = scale * want[i * want_stride + j];
      diff = fmax(diff, fabs(got[i * cols + j] - w));
      norm = fmax(norm, fabs(w));
    }
  return norm > 0 ? diff / norm : diff;
}

/* ------------------------------------------------------------------ progress bar (rank 0)
 * One line, rewritten in place ("\r"), at most once per percent, on a terminal. Into a file or a
 * pipe, or with --plain, a line per check instead: a log gets lines, not one 10 KB line of
 * carriage returns. Open MPI gives every rank a terminal of its own even when mpiexec's output
 * goes to a file, so isatty cannot tell there: tcoll-mpiexec says whether its own output is a
 * terminal (TCOLL_OUTPUT_TTY). */
static bool output_is_terminal(void) {
  const char *launcher_says = getenv("TCOLL_OUTPUT_TTY");
  if (launcher_says && !strcmp(launcher_says, "0")) return false;
  return isatty(STDOUT_FILENO);
}

static void progress(int step, int steps, double loss, int checks) {
  static int last = -1;
  int pct = (int)(100.0 * step / steps);
  if (pct == last) return;
  last = pct;
  char bar[31];
  for (int i = 0; i < 30; i++) bar[i] = i < 30 * step / steps ? '#' : '.';
  bar[30] = 0;
  printf("\r  step %4d/%d [%s] loss %.5f  checks passed: %d ", step, steps, bar, loss, checks);
  fflush(stdout);
}

int main(int argc, char **argv) {
  int steps = 2000, check_every = 100;
  double lr = 0.5;
  bool corrupt = false, plain = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--check-every") && i + 1 < argc) check_every = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--lr") && i + 1 < argc) lr = atof(argv[++i]);
    else if (!strcmp(argv[i], "--plain")) plain = true;
    else if (!strcmp(argv[i], "--corrupt")) corrupt = true;
    else {
      fprintf(stderr, "usage: %s [--steps N] [--check-every K] [--lr LR] [--plain] [--corrupt]\n", argv[0]);
      return 2;
    }
  }
  if (steps < 1 || check_every < 1) {
    fprintf(stderr, "--steps and --check-every must be positive\n");
    return 2;
  }
  if (!output_is_terminal()) plain = true;

  /* ---- MPI, tcoll, the device.
   * The demo initializes MPI itself so that it can restart tcoll: tcoll picks its device backend
   * at tcoll_init (TCOLL_FAKE_DEVICES, else CUDA if built and a GPU is present, else none). With
   * no device at all, it restarts tcoll with one emulated device, so that the tensors still live
   * "on a device" and take the path they would take on a GPU. */
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  CHECK(tcoll_init(&argc, &argv));
  if (tcoll_device_count() == 0) {
    CHECK(tcoll_finalize()); /* leaves MPI alone: the demo initialized it */
    setenv("TCOLL_FAKE_DEVICES", "1", 1);
    CHECK(tcoll_init(&argc, &argv));
  }
  tcoll_comm_t *world = tcoll_comm_world();
  int rank = tcoll_comm_rank(world), size = tcoll_comm_size(world);
  /* A device per rank: the ranks of a node take its devices round robin (with emulated devices
   * every process has its own device 0). */
  MPI_Comm node;
  int local_rank;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_free(&node);
  const int dev = local_rank % tcoll_device_count();

  /* ---- the mesh: DP x TP = 2 x 2 on 4 ranks; 1 x 1 on one rank, 1 x 2 on two, 4 x 2 on 8 */
  if (BATCH % size != 0) {
    if (rank == 0) fprintf(stderr, "tcoll-demo: needs a number of ranks that divides %d, not %d\n", BATCH, size);
    tcoll_finalize();
    MPI_Finalize();
    return 77; /* "skipped" for meson test */
  }
  const int TP = size % 2 == 0 ? 2 : 1, DP = size / TP;
  tcoll_mesh_t *mesh;
  CHECK(tcoll_mesh_create(world, 2, (int[]){DP, TP}, &mesh));
  tcoll_comm_t *dp_comm = tcoll_mesh_comm(mesh, 0), *tp_comm = tcoll_mesh_comm(mesh, 1);
  const int dp = tcoll_mesh_coord(mesh, 0), tp = tcoll_mesh_coord(mesh, 1);

  /* My share: RB rows of the batch in my replica, RL of them on this rank; HL hidden units. */
  const int RB = BATCH / DP, RL = RB / TP, HL = HIDDEN / TP;
  const int row0 = dp * RB + tp * RL, unit0 = tp * HL;

  /* ---- parameters: every rank draws the full matrices from one seed and keeps its block (DDP
   * would broadcast rank 0's initial parameters; one seed gives the same). */
  buf_t w1, b1, w2;
  BUF(&w1, dev, IN, HL);
  BUF(&b1, dev, HL);
  BUF(&w2, dev, HL, OUT);
  rng_state = 42;
  for (int j = 0; j < IN; j++)
    for (int u = 0; u < HIDDEN; u++) {
      double v = uniform() / sqrt(IN); /* nn.Linear's U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
      if (u >= unit0 && u < unit0 + HL) w1.h[j * HL + u - unit0] = v;
    }
  for (int u = 0; u < HIDDEN; u++) {
    double v = uniform() / sqrt(IN);
    if (u >= unit0 && u < unit0 + HL) b1.h[u - unit0] = v;
  }
  for (int u = 0; u < HIDDEN; u++)
    for (int k = 0; k < OUT; k++) {
      double v = uniform() / sqrt(HIDDEN);
      if (u >= unit0 && u < unit0 + HL) w2.h[(u - unit0) * OUT + k] = v;
    }
  push(&w1), push(&b1), push(&w2);
  for (int i = 0; i < IN * OUT; i++) teacher_a[i] = uniform();

  /* ---- activations and gradients (device, with host copies) */
  buf_t x_loc, x_rep, y_part, y_loc, gy_loc, gy_rep, gx_rep, gx_loc, gw1, gb1, gw2;
  BUF(&x_loc, dev, RL, IN);   /* my rows of x */
  BUF(&x_rep, dev, RB, IN);   /* my replica's rows of x (all_gather over TP) */
  BUF(&y_part, dev, RB, OUT); /* my hidden units' share of y, for the replica's rows */
  BUF(&y_loc, dev, RL, OUT);  /* my rows of y (reduce_scatter over TP) */
  BUF(&gy_loc, dev, RL, OUT); /* dL/dy for my rows */
  BUF(&gy_rep, dev, RB, OUT); /* ... for the replica's rows (backward of the reduce_scatter) */
  BUF(&gx_rep, dev, RB, IN);  /* dL/dx through my hidden units, replica's rows */
  BUF(&gx_loc, dev, RL, IN);  /* dL/dx for my rows (backward of the all_gather) */
  BUF(&gw1, dev, IN, HL);
  BUF(&gb1, dev, HL);
  BUF(&gw2, dev, HL, OUT);
  double *h = calloc((size_t)RB * HL, sizeof *h), *gh = calloc((size_t)RB * HL, sizeof *gh);
  double *x_all = calloc(BATCH * IN, sizeof *x_all), *t_all = calloc(BATCH * OUT, sizeof *t_all);
  /* The loss for the progress bar: a host scalar (like loss.item()), summed over all ranks. */
  double sse = 0;
  tcoll_tensor_t loss_t = tcoll_tensor_make(&sse, TCOLL_FLOAT64, 0, NULL, TCOLL_HOST);
  /* For the checks: the full parameters, gathered over TP. */
  buf_t w1_full, b1_full, w2_full;
  BUF(&w1_full, dev, IN, HIDDEN);
  BUF(&b1_full, dev, HIDDEN);
  BUF(&w2_full, dev, HIDDEN, OUT);
  static ref_t ref;

  if (rank == 0) {
    printf("tcoll demo: MLP %d -> %d (tanh) -> %d, MSE loss, batch %d, SGD lr %g, %d steps, float64\n", IN, HIDDEN,
           OUT, BATCH, lr, steps);
    bool fake = !strcmp(tcoll_device_backend(), "fake");
    printf("  %d ranks as a %d x %d mesh (data parallel %d x tensor parallel %d), tensors on %s device %d%s\n",
           size, DP, TP, DP, TP, fake ? "emulated" : tcoll_device_backend(), dev, fake ? " (no GPU here)" : "");
    fflush(stdout);
  }

  static const char *names[5] = {"loss", "dW1", "db1", "dW2", "dL/dx"};
  double first_loss = 0, loss = 0, worst[5] = {0};
  int checks = 0, done = 0, failed_step = 0;
  double t_start = MPI_Wtime();
  for (int step = 1; step <= steps; step++) {
    double t0 = MPI_Wtime();
    make_batch(step, x_all, t_all);
    memcpy(x_loc.h, x_all + (size_t)row0 * IN, sizeof(double) * RL * IN);
    timers[T_MATH] += MPI_Wtime() - t0;
    push(&x_loc);

    /* ================= forward ================= */
    /* x: gather the replica's rows from the TP ranks. Asynchronous: x_rep is pending until waited. */
    tcoll_grad_node_t *ag_node, *rs_node;
    COMM(tcoll_grad_all_gather_into_tensor(&x_loc.dev, 0, tp_comm, &x_rep.dev, &ag_node));
    COMM(tcoll_wait(x_rep.dev.data));
    pull(&x_rep);

    t0 = MPI_Wtime();
    matmul(h, x_rep.h, w1.h, RB, HL, IN, false, false); /* my hidden units, the replica's rows */
    for (int i = 0; i < RB; i++)
      for (int u = 0; u < HL; u++) h[i * HL + u] = tanh(h[i * HL + u] + b1.h[u]);
    matmul(y_part.h, h, w2.h, RB, OUT, HL, false, false); /* their contribution to y */
    timers[T_MATH] += MPI_Wtime() - t0;
    push(&y_part);

    /* y: sum the TP ranks' contributions, each rank keeping its own rows. */
    COMM(tcoll_grad_reduce_scatter_tensor(&y_part.dev, TCOLL_SUM, 0, tp_comm, &y_loc.dev, &rs_node));
    COMM(tcoll_wait(y_loc.dev.data));
    pull(&y_loc);

    /* My loss (the squared error of my rows / (RB * OUT)) and its gradient dL/dy. */
    t0 = MPI_Wtime();
    sse = 0;
    for (int i = 0; i < RL * OUT; i++) {
      double e = y_loc.h[i] - t_all[(size_t)row0 * OUT + i];
      sse += e * e;
      gy_loc.h[i] = 2 * e / (RB * OUT);
    }
    timers[T_MATH] += MPI_Wtime() - t0;
    /* The total over all ranks, for the progress bar: waited at the end of the step. */
    COMM(tcoll_all_reduce(&loss_t, TCOLL_SUM, world, &loss_t));
    push(&gy_loc);

    /* ================= backward ================= */
    /* Through the reduce_scatter: an all_gather of dL/dy over TP (the replica's rows). */
    COMM(tcoll_grad_backward(rs_node, &gy_loc.dev, 1, &gy_rep.dev, 1));
    COMM(tcoll_wait(gy_rep.dev.data));
    pull(&gy_rep);

    /* Layer 2: dW2 = h^T dL/dy. Post its DP average now: it travels during layer 1's backward. */
    t0 = MPI_Wtime();
    matmul(gw2.h, h, gy_rep.h, HL, OUT, RB, true, false);
    timers[T_MATH] += MPI_Wtime() - t0;
    push(&gw2);
    COMM(tcoll_all_reduce_coalesced(&gw2.dev, 1, TCOLL_AVG, dp_comm, &gw2.dev));

    /* Layer 1: dL/dh = dL/dy W2^T, through tanh, then dW1 = x^T dL/dpre, db1, and dL/dx. */
    t0 = MPI_Wtime();
    matmul(gh, gy_rep.h, w2.h, RB, HL, OUT, false, true);
    for (int i = 0; i < RB * HL; i++) gh[i] *= 1 - h[i] * h[i];
    timers[T_MATH] += MPI_Wtime() - t0;
    /* MPI moves a collective only inside MPI calls: a test now and then lets layer 2's average
     * progress while we compute (TCOLL_PROGRESS=thread is meant to do this in the background). */
    poke(gw2.dev.data);
    t0 = MPI_Wtime();
    matmul(gw1.h, x_rep.h, gh, IN, HL, RB, true, false);
    for (int u = 0; u < HL; u++) {
      double s = 0;
      for (int i = 0; i < RB; i++) s += gh[i * HL + u];
      gb1.h[u] = s;
    }
    matmul(gx_rep.h, gh, w1.h, RB, IN, HL, false, true);
    if (corrupt && rank == size - 1) gw1.h[0] += 1e-3; /* a deliberate bug, for --corrupt */
    timers[T_MATH] += MPI_Wtime() - t0;
    push(&gw1), push(&gb1), push(&gx_rep);
    /* Layer 1's DP average: both tensors in one coalesced all_reduce (one MPI call). */
    tcoll_tensor_t layer1[2] = {gw1.dev, gb1.dev};
    COMM(tcoll_all_reduce_coalesced(layer1, 2, TCOLL_AVG, dp_comm, layer1));
    /* Through the all_gather: a reduce_scatter SUM of dL/dx over TP (each TP rank holds the part
     * of dL/dx that flows through its hidden units). Nothing here needs dL/dx, but a preceding
     * layer would. */
    COMM(tcoll_grad_backward(ag_node, &gx_rep.dev, 1, &gx_loc.dev, 1));
    tcoll_grad_node_free(ag_node); /* allowed before the waits: the work keeps what it needs */
    tcoll_grad_node_free(rs_node);

    /* Everything posted above (the loss, both DP averages, dL/dx) completes here. */
    COMM(tcoll_wait_all());
    loss = sse / (BATCH * OUT);
    if (step == 1) first_loss = loss;
    pull(&gw1), pull(&gb1), pull(&gw2), pull(&gx_loc);

    /* ================= check against the serial model ================= */
    if (step % check_every == 0 || step == steps || step == 1) {
      double tc = MPI_Wtime();
      CHECK(tcoll_all_gather(&w1.dev, 1, tp_comm, &w1_full.dev)); /* column blocks: dim 1 */
      CHECK(tcoll_all_gather(&b1.dev, 0, tp_comm, &b1_full.dev));
      CHECK(tcoll_all_gather(&w2.dev, 0, tp_comm, &w2_full.dev)); /* row blocks: dim 0 */
      CHECK(tcoll_wait_all());
      CHECK(tcoll_tensor_copy(&w1_full.host, &w1_full.dev));
      CHECK(tcoll_tensor_copy(&b1_full.host, &b1_full.dev));
      CHECK(tcoll_tensor_copy(&w2_full.host, &w2_full.dev));
      serial_reference(x_all, t_all, w1_full.h, b1_full.h, w2_full.h, &ref);
      /* My shards against the matching blocks of the serial gradients. dL/dx: each replica
       * differentiated its own MSE, which is DP times its rows' share of the batch's MSE. */
      double err[5] = {
          fabs(loss - ref.loss) / ref.loss,
          rel_error(gw1.h, ref.w1 + unit0, IN, HL, HIDDEN, 1),
          rel_error(gb1.h, ref.b1 + unit0, 1, HL, HL, 1),
          rel_error(gw2.h, ref.w2 + (size_t)unit0 * OUT, HL, OUT, OUT, 1),
          rel_error(gx_loc.h, ref.x + (size_t)row0 * IN, RL, IN, IN, DP),
      };
      tcoll_tensor_t err_t = tcoll_tensor_make(err, TCOLL_FLOAT64, 1, (int64_t[]){5}, TCOLL_HOST);
      CHECK(tcoll_all_reduce(&err_t, TCOLL_MAX, world, &err_t)); /* the worst over the ranks */
      CHECK(tcoll_wait(err));
      double step_worst = 0;
      for (int i = 0; i < 5; i++) {
        worst[i] = fmax(worst[i], err[i]);
        step_worst = fmax(step_worst, err[i]);
        if (!(err[i] <= TOLERANCE)) { /* NaN fails too */
          if (rank == 0)
            fprintf(stderr, "%scheck FAILED at step %d: %s differs from the serial model by %.3g (tolerance %g)\n",
                    plain ? "" : "\n", step, names[i], err[i], TOLERANCE);
          failed_step = step;
        }
      }
      checks += !failed_step;
      if (rank == 0 && plain)
        printf("  step %4d/%d  loss %.5f  check %s (largest error %.2g)\n", step, steps, loss,
               failed_step ? "FAILED" : "passed", step_worst);
      timers[T_CHECK] += MPI_Wtime() - tc;
    }
    if (failed_step) break; /* every rank got the same errors: all stop here */

    /* ================= SGD ================= */
    t0 = MPI_Wtime();
    for (int i = 0; i < IN * HL; i++) w1.h[i] -= lr * gw1.h[i];
    for (int i = 0; i < HL; i++) b1.h[i] -= lr * gb1.h[i];
    for (int i = 0; i < HL * OUT; i++) w2.h[i] -= lr * gw2.h[i];
    timers[T_MATH] += MPI_Wtime() - t0;
    push(&w1), push(&b1), push(&w2);
    done = step;
    if (rank == 0 && !plain) progress(step, steps, loss, checks);
  }
  timers[T_TOTAL] = MPI_Wtime() - t_start;

  /* ---- summary: times averaged over the ranks */
  tcoll_tensor_t timers_t = tcoll_tensor_make(timers, TCOLL_FLOAT64, 1, (int64_t[]){NT}, TCOLL_HOST);
  CHECK(tcoll_all_reduce(&timers_t, TCOLL_AVG, world, &timers_t));
  CHECK(tcoll_wait(timers));
  if (rank == 0) {
    double train = timers[T_TOTAL] - timers[T_CHECK];
    if (!plain) printf("\n");
    if (failed_step)
      printf("stopped at step %d of %d: the parallel run disagrees with the serial model (%d checks passed)\n",
             failed_step, steps, checks);
    else
      printf("done: %d steps, loss %.5f -> %.5f (MSE of the step's batch)\n", done, first_loss, loss);
    printf("checks: %d of %d passed: loss and gradient shards against a serial run, on every rank\n", checks,
           checks + !!failed_step);
    printf("  worst error over the checks, max|parallel - serial| / max|serial| (tolerance %g):\n   ", TOLERANCE);
    for (int i = 0; i < 5; i++) printf(" %s %.1e", names[i], worst[i]);
    printf("\n");
    printf("time per rank (average over the ranks): %.2f s, of which %.2f s training:\n", timers[T_TOTAL], train);
    printf("  communication (tcoll calls and waits) %6.3f s  %5.1f%%\n", timers[T_COMM], 100 * timers[T_COMM] / train);
    printf("  local math                            %6.3f s  %5.1f%%\n", timers[T_MATH], 100 * timers[T_MATH] / train);
    printf("  device <-> host copies for the math   %6.3f s  %5.1f%%\n", timers[T_COPY], 100 * timers[T_COPY] / train);
    printf("  checks (serial model, not training)   %6.3f s\n", timers[T_CHECK]);
  }

  buf_t *bufs[] = {&w1, &b1, &w2, &x_loc, &x_rep, &y_part, &y_loc, &gy_loc, &gy_rep, &gx_rep,
                   &gx_loc, &gw1, &gb1, &gw2, &w1_full, &b1_full, &w2_full};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) buf_free(bufs[i]);
  free(h), free(gh), free(x_all), free(t_all);
  CHECK(tcoll_mesh_free(&mesh));
  int rc = tcoll_finalize();
  MPI_Finalize();
  return failed_step || rc != TCOLL_SUCCESS ? EXIT_FAILURE : EXIT_SUCCESS;
}
