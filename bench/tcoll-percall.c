/* tcoll-percall: what one call costs inside tcoll, counted rather than timed.
 *
 *   mpiexec -n 2 tcoll-percall [--case NAME] [--bytes N] [--iters N] [--warmup N]
 *
 * Runs --warmup untimed calls, then --iters calls of one case inside percall_loop(), and prints
 * per call: the mutex lock calls and heap allocation calls made by libtcoll's own code (the
 * caller's address lies in libtcoll: lock_count.c, alloc_count.c) and the wall time. Under
 * callgrind, percall_loop is the function to look at: scripts/percall runs rank 0 under
 * `valgrind --tool=callgrind --toggle-collect=percall_loop` and reports the instructions spent
 * in it minus those inside MPI's entry points (MPI_* / PMPI_*), i.e. tcoll's own code with the
 * libc functions it calls.
 *
 * Cases (float32, SUM, on the world communicator, host buffers):
 *   all_reduce        tcoll_all_reduce into a preallocated output + tcoll_wait
 *   all_reduce_alloc  the same with out.data == NULL (tcoll allocates), then tcoll_tensor_free
 *   grad_all_reduce   tcoll_grad_all_reduce + wait, tcoll_grad_backward + wait (outputs allocated
 *                     by tcoll), frees and tcoll_grad_node_free
 *   coalesced         tcoll_all_reduce_coalesced of 64 tensors of --bytes / 64 + 64 waits
 *   separate          the same tensors as 64 tcoll_all_reduce calls, then 64 waits
 *   all_to_all        tcoll_all_to_all (the list form), a tensor of --bytes / 64 to and from each
 *                     rank + a wait per rank
 *   raw               MPI_Iallreduce + MPI_Wait (what MPI alone costs)
 *   empty             tcoll_all_reduce of a tensor of 0 elements + tcoll_wait: everything tcoll
 *                     does for a call (checks, registry, recorder, wait) with no MPI call at all */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <tcoll.h>

#include "alloc_count.h"
#include "lock_count.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COAL_N 64

static const char *case_name = "all_reduce";
static size_t nbytes = 8;
static int iters = 1000, warmup = 100, nranks = 1;

static tcoll_tensor_t x, y, ex, ey, cx[COAL_N], cy[COAL_N];
static float *raw_in, *raw_out;

static void check(int rc, const char *what) {
  if (rc == TCOLL_SUCCESS) return;
  fprintf(stderr, "tcoll-percall: %s: %s: %s\n", what, tcoll_status_string(rc), tcoll_last_error());
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static void one_all_reduce(void) {
  check(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y), "tcoll_all_reduce");
  check(tcoll_wait(y.data), "tcoll_wait");
}

static void one_all_reduce_alloc(void) {
  tcoll_tensor_t out = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 0, NULL, TCOLL_HOST);
  check(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &out), "tcoll_all_reduce");
  check(tcoll_wait(out.data), "tcoll_wait");
  tcoll_tensor_free(&out);
}

static void one_grad_all_reduce(void) {
  tcoll_tensor_t out = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 0, NULL, TCOLL_HOST), gx = out;
  tcoll_grad_node_t *node;
  check(tcoll_grad_all_reduce(&x, TCOLL_SUM, NULL, &out, &node), "tcoll_grad_all_reduce");
  check(tcoll_wait(out.data), "tcoll_wait");
  check(tcoll_grad_backward(node, &out, 1, &gx, 1), "tcoll_grad_backward");
  check(tcoll_wait(gx.data), "tcoll_wait");
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&gx);
  tcoll_grad_node_free(node);
}

static void one_coalesced(void) {
  check(tcoll_all_reduce_coalesced(cx, COAL_N, TCOLL_SUM, NULL, cy), "tcoll_all_reduce_coalesced");
  for (int i = 0; i < COAL_N; i++) check(tcoll_wait(cy[i].data), "tcoll_wait");
}

/* The coalesced case's tensors as 64 separate all_reduces, all posted before the first wait
 * (64 outputs and 64 inputs pending at once in the registry). */
static void one_separate(void) {
  for (int i = 0; i < COAL_N; i++)
    check(tcoll_all_reduce(&cx[i], TCOLL_SUM, NULL, &cy[i]), "tcoll_all_reduce");
  for (int i = 0; i < COAL_N; i++) check(tcoll_wait(cy[i].data), "tcoll_wait");
}

/* The list all_to_all: one tensor to and from each rank, the first entries of the coalesced
 * case's (--bytes / 64 per peer, at least one element; more ranks than COAL_N are refused). */
static void one_all_to_all(void) {
  check(tcoll_all_to_all(cx, NULL, cy), "tcoll_all_to_all");
  for (int i = 0; i < nranks; i++) check(tcoll_wait(cy[i].data), "tcoll_wait");
}

static void one_empty(void) {
  check(tcoll_all_reduce(&ex, TCOLL_SUM, NULL, &ey), "tcoll_all_reduce");
  check(tcoll_wait(ey.data), "tcoll_wait");
}

static void one_raw(void) {
  MPI_Request r;
  MPI_Iallreduce(raw_in, raw_out, (int)(nbytes / sizeof(float)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                 &r);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
}

/* The measured calls: scripts/percall points callgrind at this function (and only at this one:
 * the warm-up runs through run_calls directly). */
static void run_calls(void (*one)(void), int n) {
  for (int i = 0; i < n; i++) one();
}
__attribute__((noinline)) void percall_loop(void (*one)(void), int n);
__attribute__((noinline)) void percall_loop(void (*one)(void), int n) { run_calls(one, n); }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void setup(void) {
  int64_t n = (int64_t)(nbytes / sizeof(float));
  if (n < 1) n = 1;
  check(tcoll_tensor_alloc(&x, TCOLL_FLOAT32, 1, &n, TCOLL_HOST), "tcoll_tensor_alloc");
  check(tcoll_tensor_alloc(&y, TCOLL_FLOAT32, 1, &n, TCOLL_HOST), "tcoll_tensor_alloc");
  int64_t zero = 0;
  check(tcoll_tensor_alloc(&ex, TCOLL_FLOAT32, 1, &zero, TCOLL_HOST), "tcoll_tensor_alloc");
  check(tcoll_tensor_alloc(&ey, TCOLL_FLOAT32, 1, &zero, TCOLL_HOST), "tcoll_tensor_alloc");
  int64_t per = n / COAL_N > 0 ? n / COAL_N : 1;
  for (int i = 0; i < COAL_N; i++) {
    check(tcoll_tensor_alloc(&cx[i], TCOLL_FLOAT32, 1, &per, TCOLL_HOST), "tcoll_tensor_alloc");
    check(tcoll_tensor_alloc(&cy[i], TCOLL_FLOAT32, 1, &per, TCOLL_HOST), "tcoll_tensor_alloc");
  }
  raw_in = calloc((size_t)n, sizeof *raw_in);
  raw_out = calloc((size_t)n, sizeof *raw_out);
}

static void teardown(void) {
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&ex);
  tcoll_tensor_free(&ey);
  for (int i = 0; i < COAL_N; i++) {
    tcoll_tensor_free(&cx[i]);
    tcoll_tensor_free(&cy[i]);
  }
  free(raw_in);
  free(raw_out);
}

int main(int argc, char **argv) {
  check(tcoll_init(&argc, &argv), "tcoll_init");
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--case"))
      case_name = argv[i + 1];
    else if (!strcmp(argv[i], "--bytes"))
      nbytes = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--iters"))
      iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--warmup"))
      warmup = atoi(argv[i + 1]);
    else {
      fprintf(
          stderr,
          "usage: tcoll-percall [--case "
          "all_reduce|all_reduce_alloc|grad_all_reduce|coalesced|separate|all_to_all|raw|empty] "
          "[--bytes N] [--iters N] [--warmup N]\n");
      return 2;
    }
  }
  static const struct {
    const char *name;
    void (*one)(void);
  } cases[] = {{"all_reduce", one_all_reduce},
               {"all_reduce_alloc", one_all_reduce_alloc},
               {"grad_all_reduce", one_grad_all_reduce},
               {"coalesced", one_coalesced},
               {"separate", one_separate},
               {"all_to_all", one_all_to_all},
               {"raw", one_raw},
               {"empty", one_empty}};
  void (*one)(void) = NULL;
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
    if (!strcmp(cases[k].name, case_name)) one = cases[k].one;
  if (!one) {
    fprintf(stderr, "tcoll-percall: unknown case '%s'\n", case_name);
    return 2;
  }
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (one == one_all_to_all && nranks > COAL_N) {
    fprintf(stderr, "tcoll-percall: all_to_all takes at most %d ranks\n", COAL_N);
    return 2;
  }
  bool watching = bench_alloc_watch("libtcoll") == 0 && bench_lock_watch("libtcoll") == 0;
  setup();
  run_calls(one, warmup);
  MPI_Barrier(MPI_COMM_WORLD);
  unsigned long long l0 = bench_lock_count_watched(), a0 = bench_alloc_count_watched(),
                     p0 = bench_alloc_count();
  double t0 = now();
  percall_loop(one, iters);
  double t1 = now();
  unsigned long long locks = bench_lock_count_watched() - l0,
                     allocs = bench_alloc_count_watched() - a0, all = bench_alloc_count() - p0;
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    printf(
        "case %s, %zu bytes, %d calls: %.2f lock calls by libtcoll per call, %.2f heap allocations "
        "by libtcoll "
        "per call (%.2f by the whole process), %.3f us per call%s\n",
        case_name, nbytes, iters, (double)locks / iters, (double)allocs / iters,
        (double)all / iters, 1e6 * (t1 - t0) / iters,
        watching ? "" : " (libtcoll not found: counts are 0)");
  teardown();
  return tcoll_finalize() == TCOLL_SUCCESS ? 0 : 1;
}
