/* tcoll-bench: timing one point. Warm-up rounds set the number of timed rounds (--time), the
 * variants of a point run interleaved in each round (variant_at), and each variant's time per
 * round is the slowest rank's; then the OSU-style overlap rounds and the check of the results.
 * Also the medians and the paired ratios the rows are made of. */
#include "bench.h"

#include "alloc_count.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median of v[0..n) after taking the slowest rank per entry (collective; sorts v). */
static double median_over_ranks(double *v, int n) {
  MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, g_mpi);
  return median(v, n);
}

/* Median over iterations of t[a][i] / t[b][i]: each tcoll iteration against the raw-MPI
 * iteration next to it in time. Robust to the bimodal times of a shared machine (a rank that
 * loses its core makes one iteration slow, and mostly both variants of that round). */
double paired_ratio(const measured_t *m, int a, int b) {
  double *q = xmalloc((size_t)m->iters * sizeof(double));
  for (int i = 0; i < m->iters; i++) q[i] = m->t[a][i] / m->t[b][i];
  double r = median(q, m->iters);
  free(q);
  return r;
}

void measured_free(measured_t *m) {
  for (int v = 0; v < MAX_VARIANTS; v++) free(m->t[v]);
}

static volatile double compute_sink;
/* Busy computation for `secs` seconds (no MPI calls: nothing progresses the collective but
 * MPI's own or tcoll's progress thread, if any). */
static void compute_for(double secs) {
  double end = now() + secs, x = 1.0;
  while (now() < end)
    for (int k = 0; k < 64; k++) x = x * 1.0000001 + 1e-9;
  compute_sink += x;
}

/* ------------------------------------------------------------------ algorithm settings */

/* The run's own TCOLL_ALGO (or config), and the setting in force now. */
static char g_base_algo[256], g_cur_algo[256];

void algo_set_base(const char *algo) {
  snprintf(g_base_algo, sizeof g_base_algo, "%s", algo);
  snprintf(g_cur_algo, sizeof g_cur_algo, "%s", algo);
}

/* Puts a variant's algorithm setting in force (every rank runs the same variants in the same
 * order, so every rank changes it between the same collectives). Not timed. */
static void use_algo(const char *algo) {
  const char *want = algo ? algo : g_base_algo;
  if (!strcmp(want, g_cur_algo)) return;
  tcoll_config_t cfg;
  TC(tcoll_get_config(&cfg));
  snprintf(cfg.algo, sizeof cfg.algo, "%s", want);
  TC(tcoll_set_config(&cfg));
  snprintf(g_cur_algo, sizeof g_cur_algo, "%s", want);
}

/* ------------------------------------------------------------------ rounds */

/* The k-th variant run in round i. The memcpy variant (the last) opens every round (caches
 * flushed of the other variants' buffers); the others run in every rotation of their order and
 * of its reverse in turn (for tcoll, raw and blocking: all six orders), so that each runs first,
 * and right after each other one, in as many rounds as the others. Fixed orders favoured one
 * call: with the memcpy inside an ABBA flip the raw call always ran second of three, and tcoll's
 * all_gather at 1 MiB read 1.18-1.22x raw while a driver separating the two by barriers put it
 * at 1.01-1.02x; with the blocking call inside it, the raw call (which then used the blocking
 * call's buffers) ran right after it in every other round, its buffers in cache: tcoll's broadcast
 * at 256 KiB read 1.26-1.37x raw, 1.06x in blocks of calls alternated (2026-12-02). The blocking
 * call has buffers of its own since (point.c). */
static int variant_at(const point_t *p, int i, int k) {
  int n = p->nv - (p->vmemcpy ? 1 : 0);
  if (p->vmemcpy) {
    if (k == 0) return p->vmemcpy;
    k--;
  }
  int r = i % (2 * n);
  return r < n ? (k + r) % n : (n - 1 - k + r) % n;
}

static void run_round(point_t *p, int i) {
  for (int k = 0; k < p->nv; k++) {
    int v = variant_at(p, i, k);
    use_algo(p->v[v].algo);
    p->v[v].post(p);
    p->v[v].wait(p);
  }
}

/* Untimed rounds before the timing: --warmup below 1 MiB, 2 from 1 MiB on, and at least what
 * the op asks for. */
static int warmup_rounds(const point_t *p) {
  int warm = p->bytes >= ((size_t)1 << 20) ? 2 : opt.warmup;
  if (warm < op_desc(p->op)->min_warmup) warm = op_desc(p->op)->min_warmup;
  return warm < 1 ? 1 : warm;
}

/* Runs the warm-up rounds; the timed rounds are those that fit --time at the median warm-up
 * round's pace (the slowest rank's: the same number on every rank), within --min-iters and
 * --iters. */
static int warm_up(point_t *p) {
  int warm = warmup_rounds(p);
  double *wt = xmalloc((size_t)warm * sizeof(double));
  for (int i = 0; i < warm; i++) {
    double t0 = now();
    run_round(p, i);
    wt[i] = now() - t0;
  }
  double round = median_over_ranks(wt, warm);
  free(wt);
  int iters = (int)(opt.time_per_point / (round > 1e-9 ? round : 1e-9));
  if (iters > opt.max_iters) iters = opt.max_iters;
  if (iters < opt.min_iters) iters = opt.min_iters;
  return iters;
}

/* The timed rounds: this rank's time of every call into m->t, and the heap allocations made
 * inside the calls (whole process, and libtcoll's own) summed per variant. */
static void timed_rounds(point_t *p, measured_t *m, unsigned long long *allocs,
                         unsigned long long *own) {
  for (int v = 0; v < p->nv; v++) m->t[v] = xmalloc((size_t)m->iters * sizeof(double));
  MPI_Barrier(g_mpi);
  for (int i = 0; i < m->iters; i++) {
    for (int k = 0; k < p->nv; k++) {
      int v = variant_at(p, i, k);
      use_algo(p->v[v].algo);
      unsigned long long a0 = bench_alloc_count(), o0 = bench_alloc_count_watched();
      double s = now();
      p->v[v].post(p);
      if (v == 0) m->algo = tcoll_last_algorithm();
      p->v[v].wait(p);
      double e = now();
      allocs[v] += bench_alloc_count() - a0;
      own[v] += bench_alloc_count_watched() - o0;
      m->t[v][i] = e - s;
    }
  }
}

/* Each call's time becomes the slowest rank's; each variant's median over the rounds, and its
 * allocations per call (the largest over the ranks). */
static void summarize(measured_t *m, int nv, const unsigned long long *allocs,
                      const unsigned long long *own) {
  int iters = m->iters;
  for (int v = 0; v < nv; v++) {
    MPI_Allreduce(MPI_IN_PLACE, m->t[v], iters, MPI_DOUBLE, MPI_MAX, g_mpi);
    double *sorted = xmalloc((size_t)iters * sizeof(double));
    memcpy(sorted, m->t[v], (size_t)iters * sizeof(double));
    m->med[v] = median(sorted, iters);
    free(sorted);
    m->allocs[v] = (double)allocs[v] / iters;
    m->own[v] = (double)own[v] / iters;
    MPI_Allreduce(MPI_IN_PLACE, &m->allocs[v], 1, MPI_DOUBLE, MPI_MAX, g_mpi);
    MPI_Allreduce(MPI_IN_PLACE, &m->own[v], 1, MPI_DOUBLE, MPI_MAX, g_mpi);
    m->overlap[v] = NAN;
  }
}

/* BENCH_DUMP: every timed iteration, slowest rank, for looking at the distributions. */
static void dump_iterations(const point_t *p, const measured_t *m) {
  if (!getenv("BENCH_DUMP") || g_rank != 0) return;
  FILE *f = fopen(getenv("BENCH_DUMP"), "a");
  for (int i = 0; f && i < m->iters; i++) {
    fprintf(f, "%s %zu %d", op_name(p->op), p->bytes, i);
    for (int v = 0; v < p->nv; v++) fprintf(f, " %.3f", m->t[v][i] * 1e6);
    fprintf(f, "\n");
  }
  if (f) fclose(f);
}

/* ------------------------------------------------------------------ overlap */

/* OSU's osu_iallreduce: post, compute for about the pure communication time, wait. The share of
 * the communication hidden behind the computation, in percent within [0, 100]. */
static double overlap_percent(double total, double compute, double pure) {
  double ov = 100.0 * (1.0 - (total - compute) / pure);
  return ov < 0 ? 0 : ov > 100 ? 100 : ov;
}

/* Rounds of every variant with computation between post and wait; the order of the variants
 * flips every round. */
static void measure_overlap(point_t *p, measured_t *m) {
  int nv = p->nv, oit = m->iters / 4;
  if (oit < 3) oit = 3;
  if (oit > 200) oit = 200;
  double *tot[MAX_VARIANTS], *cmp[MAX_VARIANTS];
  for (int v = 0; v < nv; v++) {
    tot[v] = xmalloc((size_t)oit * sizeof(double));
    cmp[v] = xmalloc((size_t)oit * sizeof(double));
  }
  MPI_Barrier(g_mpi);
  for (int i = 0; i < oit; i++) {
    for (int k = 0; k < nv; k++) {
      int v = (i & 1) ? nv - 1 - k : k;
      use_algo(p->v[v].algo);
      double s = now();
      p->v[v].post(p);
      double c0 = now();
      compute_for(m->med[v]);
      double c1 = now();
      p->v[v].wait(p);
      tot[v][i] = now() - s;
      cmp[v][i] = c1 - c0;
    }
  }
  for (int v = 0; v < nv; v++) {
    double total = median_over_ranks(tot[v], oit), comp = median_over_ranks(cmp[v], oit);
    m->overlap[v] = overlap_percent(total, comp, m->med[v]);
    free(tot[v]);
    free(cmp[v]);
  }
}

void measure(point_t *p, measured_t *m) {
  unsigned long long allocs[MAX_VARIANTS] = {0}, own[MAX_VARIANTS] = {0};
  memset(m, 0, sizeof *m);
  m->iters = warm_up(p);
  timed_rounds(p, m, allocs, own);
  summarize(m, p->nv, allocs, own);
  dump_iterations(p, m);
  if (opt.overlap) measure_overlap(p, m);
  use_algo(NULL);
  m->wrong = opt.check ? point_check(p) : 0;
}
