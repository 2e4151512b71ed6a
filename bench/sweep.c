/* tcoll-bench: a sweep, every selected op at every size from --min to --max, each point set up,
 * measured and turned into rows; and --repeat, which runs the sweep N times and reports per
 * point the median of each column over the sweeps. */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The row spec's ratios in the row's note fields (extra, extra2, extra3). */
static void set_extras(row_t *r, const measured_t *m, const row_spec_t *s) {
  const char **names[3] = {&r->extra_name, &r->extra2_name, &r->extra3_name};
  double *values[3] = {&r->extra, &r->extra2, &r->extra3};
  for (int k = 0; k < 3; k++) {
    if (!s->extra[k].name) continue;
    *names[k] = s->extra[k].name;
    *values[k] = paired_ratio(m, s->extra[k].a, s->extra[k].b);
  }
}

/* Variant 0's row carries what only tcoll's own call has: the algorithm it chose, --alloc's
 * ratio and --tune's. */
static void set_tcoll_call_columns(row_t *r, const point_t *p, const measured_t *m, int vm) {
  if (p->valloc) r->alloc_ratio = paired_ratio(m, p->valloc, 0);
  r->algo = m->algo ? m->algo : "-";
  r->ntune = p->ntune;
  for (int k = 0; k < p->ntune; k++) {
    r->tune_names[k] = p->tune_names[k];
    r->tune[k] = paired_ratio(m, p->vtune + k, vm);
  }
}

static row_t make_row(const point_t *p, const measured_t *m, const row_spec_t *s) {
  int vt = s->t, vm = s->m;
  row_t r = {.op = s->name,
             .bytes = p->bytes,
             .count = p->count,
             .iters = m->iters,
             .t = m->med[vt],
             .m = m->med[vm],
             .ovl_t = m->overlap[vt],
             .ovl_m = m->overlap[vm],
             .alloc_t = m->allocs[vt],
             .alloc_m = m->allocs[vm],
             .own_t = m->own[vt],
             .busfactor = p->busfactor,
             .wrong = m->wrong,
             .ratio = paired_ratio(m, vt, vm),
             .alloc_ratio = NAN,
             .algo = "-"};
  if (vt == 0) set_tcoll_call_columns(&r, p, m, vm);
  r.mcpy_t = p->vmemcpy ? 100.0 * paired_ratio(m, p->vmemcpy, vt) : NAN;
  r.mcpy_m = p->vmemcpy ? 100.0 * paired_ratio(m, p->vmemcpy, vm) : NAN;
  r.blk = p->vblocking && vt == 0 ? m->med[p->vblocking] : NAN;
  r.ratio_blk = p->vblocking && vt == 0 ? paired_ratio(m, vt, p->vblocking) : NAN;
  set_extras(&r, m, s);
  return r;
}

/* The rows of a measured point, in the order the op's descriptor names them. */
static void add_point_rows(const point_t *p, const measured_t *m) {
  const op_desc_t *d = op_desc(p->op);
  if (!d->rows[0].name) {
    row_spec_t plain = {d->name, 0, 1, {{NULL, 0, 0}}};
    row_t r = make_row(p, m, &plain);
    add_row(&r);
    return;
  }
  for (int k = 0; k < MAX_ROWS && d->rows[k].name; k++) {
    row_t r = make_row(p, m, &d->rows[k]);
    add_row(&r);
  }
}

static void run_point(int op, size_t bytes) {
  point_t *p = malloc(sizeof *p);
  if (!p) die("out of memory");
  if (point_setup(p, op, bytes)) {
    measured_t m;
    measure(p, &m);
    add_point_rows(p, &m);
    measured_free(&m);
  }
  point_teardown(p);
  free(p);
}

/* The sizes of a sweep: --min, times --step each, and --max itself where a step jumps past it
 * (--min 1K --max 12K --step 4: 1K, 4K, 12K). 0 ends the sweep. */
static size_t next_size(size_t b) {
  if (b >= opt.max_bytes || opt.step < 2) return 0;
  return b > opt.max_bytes / (size_t)opt.step ? opt.max_bytes : b * (size_t)opt.step;
}

static void run_op(int op) {
  if (op_desc(op)->one_size) {
    run_point(op, 0);
    return;
  }
  for (size_t b = opt.min_bytes; b; b = next_size(b)) run_point(op, b);
}

static void sweep(void) {
  for (int op = 0; op < NUM_OPS; op++)
    if (opt.ops[op]) run_op(op);
}

/* ------------------------------------------------------------------ --repeat */

/* The median over the n sweeps of field f of row i (NaN stays NaN: not measured). */
#define MEDIAN_OF(f)                                   \
  do {                                                 \
    for (int k = 0; k < n; k++) v[k] = sweeps[k][i].f; \
    r.f = isnan(v[0]) ? v[0] : median(v, n);           \
  } while (0)

/* Row i with every measured column the median over the sweeps. */
static row_t median_row(row_t *const *sweeps, int n, int i) {
  row_t r = sweeps[0][i];
  double *v = xmalloc((size_t)n * sizeof *v);
  MEDIAN_OF(t);
  MEDIAN_OF(m);
  MEDIAN_OF(ovl_t);
  MEDIAN_OF(ovl_m);
  MEDIAN_OF(alloc_t);
  MEDIAN_OF(alloc_m);
  MEDIAN_OF(own_t);
  MEDIAN_OF(ratio);
  MEDIAN_OF(extra);
  MEDIAN_OF(extra2);
  MEDIAN_OF(extra3);
  MEDIAN_OF(alloc_ratio);
  MEDIAN_OF(mcpy_t);
  MEDIAN_OF(mcpy_m);
  MEDIAN_OF(blk);
  MEDIAN_OF(ratio_blk);
  for (int t = 0; t < r.ntune; t++) MEDIAN_OF(tune[t]);
  r.iters = 0;
  r.wrong = 0;
  for (int k = 0; k < n; k++) {
    r.iters += sweeps[k][i].iters; /* timed iterations over all sweeps */
    r.wrong += sweeps[k][i].wrong;
    r.own_t = fmax(r.own_t, sweeps[k][i].own_t); /* an allocation in any sweep counts */
  }
  free(v);
  return r;
}
#undef MEDIAN_OF

/* N silent sweeps, kept; then one row per point with the medians over the sweeps. */
static void repeated_sweeps(void) {
  row_t **sweeps = xmalloc((size_t)opt.repeat * sizeof *sweeps);
  int per_sweep = 0;
  g_collect = true;
  for (int k = 0; k < opt.repeat; k++) {
    g_nrows = 0;
    sweep();
    if (k > 0 && g_nrows != per_sweep)
      die("sweep %d measured %d points, the first %d", k + 1, g_nrows, per_sweep);
    per_sweep = g_nrows;
    sweeps[k] = xmalloc((size_t)g_nrows * sizeof **sweeps + 1);
    memcpy(sweeps[k], g_rows, (size_t)g_nrows * sizeof **sweeps);
    if (g_rank == 0) {
      printf("# sweep %d of %d done\n", k + 1, opt.repeat);
      fflush(stdout);
    }
  }
  g_collect = false;
  g_nrows = 0;
  for (int i = 0; i < per_sweep; i++) {
    row_t r = median_row(sweeps, opt.repeat, i);
    add_row(&r);
  }
  for (int k = 0; k < opt.repeat; k++) free(sweeps[k]);
  free(sweeps);
}

void run_sweeps(void) {
  if (opt.repeat > 1)
    repeated_sweeps();
  else
    sweep();
}
