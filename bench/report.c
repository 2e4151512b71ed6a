/* tcoll-bench: the results. Every row is kept (the targets and --tune read them at the end),
 * printed on the table as it comes (rank 0) and written to the CSV (--csv); and the --tune
 * table of the best algorithm by size. */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

row_t *g_rows;
int g_nrows;
bool g_collect;

static int rows_cap;
static FILE *csv;

static void store_row(const row_t *r) {
  if (g_nrows == rows_cap) {
    rows_cap = rows_cap ? 2 * rows_cap : 64;
    g_rows = realloc(g_rows, (size_t)rows_cap * sizeof *g_rows);
    if (!g_rows) die("out of memory");
  }
  g_rows[g_nrows++] = *r;
}

long rows_wrong(void) {
  long wrong = 0;
  for (int i = 0; i < g_nrows; i++) wrong += g_rows[i].wrong;
  return wrong;
}

void rows_free(void) { free(g_rows); }

/* ------------------------------------------------------------------ the table */

void print_header(void) {
  printf(
      "%-20s %7s %9s %5s %10s %10s %6s %8s %8s %6s %8s %8s %8s %5s %5s %5s %5s %7s %7s %5s %5s "
      "%-14s  %s\n",
      "op", "size", "count", "iters", "tcoll_us", "mpi_us", "ratio", "ovh_us", "blk_us", "t/blk",
      "algbw", "busbw", "mpi_bus", "mcp_t", "mcp_m", "ovl_t", "ovl_m", "alloc_t", "alloc_m", "own",
      "wrong", "algorithm", "note");
  printf(
      "%-20s %7s %9s %5s %10s %10s %6s %8s %8s %6s %8s %8s %8s %5s %5s %5s %5s %7s %7s %5s %5s "
      "%-14s\n",
      "", "(B)", "(elems)", "", "(med)", "(med)", "t/m", "t-m", "(med)", "", "(GB/s)", "(GB/s)",
      "(GB/s)", "(%)", "(%)", "(%)", "(%)", "(/call)", "(/call)", "", "", "(tcoll)");
}

static const char *pct(double v, char *buf, size_t len) {
  if (isnan(v))
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, "%.0f", v);
  return buf;
}

/* Appends to the string in buf (truncating at len, as snprintf does). */
static void appendf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t len, const char *fmt, ...) {
  size_t used = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, len - used, fmt, ap);
  va_end(ap);
}

/* --tune's part of the note (and the CSV's tune column): each algorithm's time over raw MPI's. */
static void format_tune(const row_t *r, char *tune, size_t len) {
  tune[0] = '\0';
  for (int k = 0, off = 0; k < r->ntune && off < (int)len; k++)
    off += snprintf(tune + off, len - (size_t)off, "%s%s %.3f",
                    k ? " " : "tune/mpi: ", r->tune_names[k], r->tune[k]);
}

static void format_note(const row_t *r, const char *tune, char *note, size_t len) {
  note[0] = '\0';
  if (r->extra_name)
    snprintf(note, len, "%s %.2f%s", r->extra_name, r->extra,
             strcmp(r->extra_name, "speedup") ? "" : "x");
  if (r->extra2_name) appendf(note, len, " (%s %.2f)", r->extra2_name, r->extra2);
  if (r->extra3_name) appendf(note, len, " %s %.3f", r->extra3_name, r->extra3);
  if (!isnan(r->alloc_ratio)) appendf(note, len, " alloc/prealloc %.3f", r->alloc_ratio);
  if (*tune) appendf(note, len, "%s%s", *note ? " " : "", tune);
}

/* GB/s: algbw = S / t, busbw = algbw x the op's factor; of tcoll's time and of raw MPI's. */
typedef struct bandwidths {
  double alg, bus, mpi_alg, mpi_bus;
} bandwidths_t;

static bandwidths_t bandwidths_of(const row_t *r) {
  bandwidths_t bw;
  bw.alg = (double)r->bytes / r->t / 1e9;
  bw.bus = bw.alg * r->busfactor;
  bw.mpi_alg = (double)r->bytes / r->m / 1e9;
  bw.mpi_bus = bw.mpi_alg * r->busfactor;
  return bw;
}

static const char *num(double v, const char *fmt, char *buf, size_t len) {
  if (isnan(v))
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, fmt, v);
  return buf;
}

static void print_row(const row_t *r, const char *note) {
  char sz[32], ot[16], om[16], ct[16], cm[16], bt[24], br[24];
  bandwidths_t bw = bandwidths_of(r);
  printf(
      "%-20s %7s %9lld %5d %10.2f %10.2f %6.3f %8.2f %8s %6s %8.3f %8.3f %8.3f %5s %5s %5s %5s "
      "%7.2f %7.2f %5.2f %5ld %-14s  %s\n",
      r->op, human(r->bytes, sz, sizeof sz), (long long)r->count, r->iters, r->t * 1e6, r->m * 1e6,
      r->ratio, (r->t - r->m) * 1e6, num(r->blk * 1e6, "%.2f", bt, sizeof bt),
      num(r->ratio_blk, "%.3f", br, sizeof br), bw.alg, bw.bus, bw.mpi_bus,
      pct(r->mcpy_t, ct, sizeof ct), pct(r->mcpy_m, cm, sizeof cm), pct(r->ovl_t, ot, sizeof ot),
      pct(r->ovl_m, om, sizeof om), r->alloc_t, r->alloc_m, r->own_t, r->wrong,
      r->algo ? r->algo : "-", note);
  fflush(stdout);
}

/* ------------------------------------------------------------------ the CSV */

void csv_open(const char *path) {
  csv = fopen(path, "w");
  if (!csv) die("cannot write %s: %s", path, strerror(errno));
  fprintf(csv,
          "op,bytes,count,ranks,device,iters,tcoll_us,mpi_us,ratio,ratio_of_medians,"
          "overhead_us,tcoll_algbw_GBps,tcoll_busbw_GBps,mpi_algbw_GBps,mpi_busbw_GBps,"
          "tcoll_overlap_pct,mpi_overlap_pct,tcoll_allocs_per_call,mpi_allocs_per_call,"
          "tcoll_own_allocs_per_call,wrong,extra_name,extra,extra2_name,extra2,extra3_name,"
          "extra3,alloc_ratio,algorithm,memcpy_pct_of_tcoll,memcpy_pct_of_mpi,tune,blocking_mpi_us,"
          "ratio_blocking\n");
}

void csv_close(void) {
  if (csv) fclose(csv);
}

static void csv_row(const row_t *r, const char *tune) {
  bandwidths_t bw = bandwidths_of(r);
  fprintf(csv,
          "%s,%zu,%lld,%d,%s,%d,%.4f,%.4f,%.5f,%.5f,%.4f,%.5f,%.5f,%.5f,%.5f,%.1f,%.1f,%.3f,"
          "%.3f,%.3f,%ld,%s,%.4f,%s,%.4f,%s,%.4f,%.4f",
          r->op, r->bytes, (long long)r->count, g_size,
          opt.device ? tcoll_device_backend() : "host", r->iters, r->t * 1e6, r->m * 1e6, r->ratio,
          r->t / r->m, (r->t - r->m) * 1e6, bw.alg, bw.bus, bw.mpi_alg, bw.mpi_bus, r->ovl_t,
          r->ovl_m, r->alloc_t, r->alloc_m, r->own_t, r->wrong, r->extra_name ? r->extra_name : "",
          r->extra_name ? r->extra : 0.0, r->extra2_name ? r->extra2_name : "",
          r->extra2_name ? r->extra2 : 0.0, r->extra3_name ? r->extra3_name : "",
          r->extra3_name ? r->extra3 : 0.0, r->alloc_ratio);
  fprintf(csv, ",%s,%.2f,%.2f,\"%s\",%.4f,%.5f\n", r->algo ? r->algo : "-", r->mcpy_t, r->mcpy_m,
          tune, r->blk * 1e6, r->ratio_blk);
  fflush(csv);
}

void add_row(const row_t *r) {
  store_row(r);
  if (g_rank != 0 || g_collect) return;
  char note[256], tune[160];
  format_tune(r, tune, sizeof tune);
  format_note(r, tune, note, sizeof note);
  print_row(r, note);
  if (csv) csv_row(r, tune);
}

/* ------------------------------------------------------------------ --tune's table */

/* The algorithm of row r: the fastest, where a composed algorithm must beat mpi (the first) by
 * 5% and any other the previous size's choice by 5% (noise must not flip the table). */
static const char *tune_choice(const row_t *r, const char *prev) {
  int best = 0, kept = -1;
  for (int k = 1; k < r->ntune; k++)
    if (r->tune[k] < r->tune[best] * (best == 0 ? 0.95 : 1.0)) best = k;
  for (int k = 0; k < r->ntune && prev; k++) /* the previous size's choice, if within 5% */
    if (!strcmp(r->tune_names[k], prev) && r->tune[k] <= r->tune[best] * 1.05) kept = k;
  return r->tune_names[kept >= 0 ? kept : best];
}

/* One op's rows of the table: each run of sizes with the same choice. */
static void report_tune_op(int op) {
  const char *prev = NULL;
  size_t from = 0, last = 0;
  for (int i = 0; i < g_nrows; i++) {
    const row_t *r = &g_rows[i];
    if (r->ntune == 0 || strcmp(r->op, op_name(op))) continue;
    const char *name = tune_choice(r, prev);
    if (prev && strcmp(prev, name))
      printf("#   %-15s [%zu, %zu] bytes: %s\n", op_name(op), from, last, prev);
    if (!prev || strcmp(prev, name)) from = r->bytes;
    prev = name;
    last = r->bytes;
  }
  if (prev) printf("#   %-15s [%zu, %zu] bytes: %s\n", op_name(op), from, last, prev);
}

/* --tune: per op, the sizes where each algorithm was fastest, as table rows. */
void report_tune(void) {
  if (g_rank != 0) return;
  printf(
      "# --tune: best algorithm by size, %d ranks (ratios: time over raw MPI's; a composed "
      "algorithm must beat mpi by 5%%, another algorithm the previous size's by 5%%)\n",
      g_size);
  for (int op = 0; op < NUM_OPS; op++) report_tune_op(op);
}
