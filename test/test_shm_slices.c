/* The large shared-memory all_reduce, reduce_scatter and reduce ("shm_slices",
 * lib/mpi/shm_slices.h): ranks of one node cut the input into chunks that fit a slot of their
 * communicator's segment, and each rank reduces its own slice of every chunk, its own input first,
 * then every peer's in rank order. Forced (tcoll_config_t.algo
 * "all_reduce:shm_slices,reduce_scatter:shm_slices"):
 *   - sizes placed on the chunk geometry (1 chunk, exactly k chunks, k chunks and 1 element, fewer
 *     elements than ranks, counts the ranks do not divide), in place and out of place;
 *   - every kind of op on the dtypes tcoll reduces, against closed forms (reduce_common.h);
 *   - results bitwise the same on every rank and bitwise a serial reference in the stated order,
 *     with float sums that are not exact;
 *   - reduce_scatter along dim 0 and along inner dims (interleaved runs), against a serial sum
 *     of each rank's block, found here by walking the input's coordinates;
 *   - reduce to every root, in place and out of place (off the root out stays unchanged);
 *   - the shared-memory all_gather ("all_gather:shm", the same calls) along dims 0, 1 and 2, in
 *     place, with outputs written with streaming stores;
 *   - tcoll_last_algorithm(): "shm_slices" where it runs, the ring where it cannot (one rank,
 *     TCOLL_SHM=0: the -noshm runs, premul_sum);
 *   - many calls in flight on two communicators, mixed with the small protocol ("shm") on the
 *     same segments; calls after a fallback and after communicators made and freed.
 * The chunk geometry comes from TCOLL_SHM_BYTES as the library reads it, so that the -small runs
 * (TCOLL_SHM_BYTES=9000: a few KiB a slot) cross hundreds of chunk boundaries with the same code.
 *
 * Every test that sets the algorithm puts back the setting it found ("auto": the suite is not
 * among test/meson.build's algo_suites). */
#include "algo_util.h"
#include "reduce_common.h"

#include <unistd.h>

#define SLICES "all_reduce:shm_slices,reduce_scatter:shm_slices"

/* ---------------------------------------------------------------- the chunk geometry */

/* A segment's area: a header of this many bytes, then two slots; none is made below AREA_MIN
 * (lib/node/segment.c). */
#define AREA_HEADER 256
#define AREA_MIN (AREA_HEADER + 2 * 4096)
#define LINE 64

/* TCOLL_SHM_BYTES as the library reads it, 1 MiB where unset. */
static size_t shm_bytes(void) { return t_env_bytes("TCOLL_SHM_BYTES", (size_t)1 << 20); }

static bool segments_on(void) {
  const char *on = getenv("TCOLL_SHM");
  return !(on && !strcmp(on, "0"));
}

/* A slot's bytes: the area (TCOLL_SHM_BYTES in whole pages) less its header, halved, in whole
 * lines; 0 where TCOLL_SHM_BYTES is too small for a segment. */
static size_t slot_bytes(void) {
  size_t b = shm_bytes(), pg = (size_t)sysconf(_SC_PAGESIZE);
  if (b < AREA_MIN) return 0;
  size_t area = (b + pg - 1) / pg * pg;
  return (area - AREA_HEADER) / 2 / LINE * LINE;
}

/* Whether forced shm_slices runs on p ranks here: a segment, and a whole line per rank. */
static bool slices_expected(int p) {
  return p >= 2 && segments_on() && slot_bytes() / (size_t)p >= LINE;
}

/* Elements of a piece (a chunk of one block) on p ranks for es-byte elements: slot / p rounded
 * down to whole lines (at least a line). With TCOLL_SHM=0 (the -noshm runs: everything through
 * the ring, 4 ranks on 2 cores) the sizes are those of a 4 KiB slot, to keep the runs short. */
static int64_t piece(int p, size_t es) {
  size_t slot = segments_on() ? slot_bytes() : 4096, line = LINE / es ? LINE / es : 1;
  int64_t e = (int64_t)(slot / (size_t)p / es / line * line);
  return e > 0 ? e : (int64_t)line;
}
/* Elements of a chunk of the all_reduce's vector: a piece of every rank's block. */
static int64_t chunk(int p, size_t es) { return (int64_t)p * piece(p, es); }

/* ---------------------------------------------------------------- what ran */

/* What forced shm_slices must report on p ranks: itself, or its fallback (the ring; on one rank
 * the ring runs too: there is nothing to exchange). */
static const char *slices_want(int p) { return slices_expected(p) ? "shm_slices" : "ring"; }

static bool is_slices(const char *got) { return got && !strcmp(got, "shm_slices"); }

/* Checks the algorithm reported right after a post against want (NULL: any but shm_slices). */
static void expect_algo(const char *what, const char *got, const char *want) {
  T_EXPECT(got != NULL, "%s: tcoll_last_algorithm() is NULL", what);
  if (!got) return;
  if (want)
    T_EXPECT(!strcmp(got, want), "%s: tcoll_last_algorithm() is \"%s\" (expected \"%s\")", what,
             got, want);
  else
    T_EXPECT(!is_slices(got), "%s: shm_slices ran where it cannot", what);
}

static double from_array(int64_t i, void *p) { return ((const double *)p)[i]; }

/* ---------------------------------------------------------------- reduce_scatter's blocks */

/* The input indices of rank r's block of a reduce_scatter of `shape` along dim over p ranks, in
 * the output's order: the elements whose coordinate along dim lies in [r len / p,
 * (r + 1) len / p), walked in the input's row-major order. Returns how many (numel / p). */
static int64_t block_indices(const int64_t *shape, int ndim, int dim, int r, int p, int64_t *idx) {
  int64_t numel = 1, inner = 1, len = shape[dim], j = 0;
  for (int i = 0; i < ndim; i++) numel *= shape[i];
  for (int i = dim + 1; i < ndim; i++) inner *= shape[i];
  for (int64_t i = 0; i < numel; i++) {
    int64_t coord = i / inner % len;
    if (coord >= r * len / p && coord < (r + 1) * len / p) idx[j++] = i;
  }
  return j;
}

/* ---------------------------------------------------------------- sizes across chunks */

/* Small integers: every float32 sum over a few ranks is exact in any order. Call j, rank r. */
static double ex_value(int j, int r, int64_t i) {
  return (double)((j * 3 + i * 5 + r * 11) % 17 - 8);
}
typedef struct ex_ctx {
  int j;  /* the call */
  int id; /* the filling rank */
} ex_ctx_t;
static double ex_fill(int64_t i, void *p) {
  const ex_ctx_t *c = p;
  return ex_value(c->j, c->id, i);
}
/* Every communicator here has world's members: the sum over world's ranks. */
static double ex_want(int64_t i, void *p) {
  const ex_ctx_t *c = p;
  double acc = 0;
  for (int r = 0; r < t_size; r++) acc += ex_value(c->j, r, i);
  return acc;
}

/* One forced all_reduce of n float32 elements of call j's values, checked. */
static void ex_all_reduce(const char *label, int j, int64_t n, bool inplace, tcoll_comm_t *comm) {
  char what[200];
  snprintf(what, sizeof what, "%s: all_reduce sum float32 of %lld elements %s", label, (long long)n,
           inplace ? "in place" : "out of place");
  int64_t shape[1] = {n};
  ex_ctx_t c = {j, t_rank};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape);
  t_set_all(&in, ex_fill, &c);
  tcoll_tensor_t out = inplace ? in : t_alloc(TCOLL_FLOAT32, 1, shape);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, comm, &out));
  const char *got = tcoll_last_algorithm();
  T_OK(tcoll_wait(out.data));
  expect_algo(what, got, slices_want(comm ? tcoll_comm_size(comm) : t_size));
  t_check_all(what, &out, ex_want, &c, 0);
  if (!inplace) {
    char w2[240];
    snprintf(w2, sizeof w2, "%s: input", what);
    t_check_all(w2, &in, ex_fill, &c, 0);
    tcoll_tensor_free(&out);
  }
  tcoll_tensor_free(&in);
}

/* Counts placed on the chunk geometry: fewer than the ranks, around one chunk, exactly 2 chunks
 * and one more element, counts the ranks do not divide, and up to 8 MiB (at most 256 chunks, so
 * that the -small runs stay short). */
START_TEST(sizes_across_chunks) {
  t_save_algo();
  t_set_algo(SLICES);
  int p = t_size;
  int64_t C = chunk(p, 4), big = (int64_t)2 << 20;
  if (big > 256 * C) big = 256 * C;
  const int64_t sizes[] = {1,     p - 1,     p + 1,         C - 1,     C,
                           C + 1, 2 * C - 1, 2 * C,         2 * C + 1, 3 * C + p + 1,
                           5 * C, 5 * C + 1, 7 * C - p + 2, big + 3};
  for (size_t s = 0; s < T_LEN(sizes); s++) {
    if (sizes[s] < 1 || (s > 0 && sizes[s] == sizes[s - 1])) continue;
    char label[80];
    snprintf(label, sizeof label, "sizes (chunk %lld elements)", (long long)C);
    for (int inplace = 0; inplace < 2; inplace++)
      ex_all_reduce(label, (int)s, sizes[s], inplace, NULL);
  }
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- reduce to a root */

/* A value no reduction here gives (out is left unchanged off the root). */
static double untouched(int64_t i, void *p) {
  (void)i;
  (void)p;
  return -1000.0;
}

/* One forced reduce of n float32 elements of call j's values to root, checked on the root;
 * elsewhere out stays as it was. In place on the root when inplace. */
static void ex_reduce(int j, int64_t n, int root, bool inplace) {
  char what[200];
  snprintf(what, sizeof what, "reduce: sum float32 of %lld elements to rank %d %s", (long long)n,
           root, inplace ? "in place" : "out of place");
  int64_t shape[1] = {n};
  ex_ctx_t c = {j, t_rank};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape);
  t_set_all(&in, ex_fill, &c);
  bool same = inplace && t_rank == root;
  tcoll_tensor_t out = same ? in : t_alloc(TCOLL_FLOAT32, 1, shape);
  if (!same) t_set_all(&out, untouched, NULL);
  T_OK(tcoll_reduce(&in, root, TCOLL_SUM, NULL, &out));
  const char *got = tcoll_last_algorithm();
  T_OK(tcoll_wait(out.data));
  expect_algo(what, got, slices_want(t_size));
  if (t_rank == root)
    t_check_all(what, &out, ex_want, &c, 0);
  else
    t_check_all(what, &out, untouched, NULL, 0);
  if (!same) {
    char w2[240];
    snprintf(w2, sizeof w2, "%s: input", what);
    t_check_all(w2, &in, ex_fill, &c, 0);
    tcoll_tensor_free(&out);
  }
  tcoll_tensor_free(&in);
}

/* reduce:shm_slices to every root, across chunk boundaries, in place and out of place; then AVG
 * and MAX of other dtypes against their closed forms. */
START_TEST(reduce_to_root) {
  t_save_algo();
  t_set_algo("reduce:shm_slices");
  int p = t_size;
  int64_t C = chunk(p, 4);
  const int64_t sizes[] = {1, C - 1, 2 * C + 1, 5 * C + p};
  for (int root = 0; root < p; root++)
    for (size_t s = 0; s < T_LEN(sizes); s++)
      if (sizes[s] >= 1) ex_reduce((int)s + 10 * root, sizes[s], root, (root + (int)s) % 2);
  const struct {
    tcoll_dtype_t d;
    int k;
  } kinds[] = {{TCOLL_FLOAT64, K_AVG}, {TCOLL_INT32, K_MAX}, {TCOLL_FLOAT16, K_SUM}};
  for (size_t i = 0; i < T_LEN(kinds); i++) {
    rc_t c = rc_world(kinds[i].d, kinds[i].k, 1);
    int64_t n = 2 * chunk(p, tcoll_dtype_size(kinds[i].d)) + 3, shape[1] = {n};
    int root = (int)i % p;
    char what[200];
    snprintf(what, sizeof what, "reduce: %s %s of %lld elements to rank %d", kname(kinds[i].k),
             tcoll_dtype_name(kinds[i].d), (long long)n, root);
    tcoll_tensor_t in = t_alloc(kinds[i].d, 1, shape), out = t_alloc(kinds[i].d, 1, shape);
    t_set_all(&in, rc_fill, &c);
    T_OK(tcoll_reduce(&in, root, (tcoll_redop_t)kinds[i].k, NULL, &out));
    const char *got = tcoll_last_algorithm();
    T_OK(tcoll_wait(out.data));
    expect_algo(what, got, slices_want(t_size));
    if (t_rank == root) t_check_all(what, &out, rc_want, &c, 0);
    tcoll_tensor_free(&out);
    tcoll_tensor_free(&in);
  }
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- every dtype and op */

/* The kinds of op on the dtypes tcoll reduces (its own code for float16, bfloat16 and bool). */
static const struct {
  tcoll_dtype_t d;
  int k;
} OPS[] = {
    {TCOLL_FLOAT32, K_SUM}, {TCOLL_FLOAT32, K_AVG},  {TCOLL_FLOAT32, K_MAX},
    {TCOLL_FLOAT32, K_MIN}, {TCOLL_FLOAT64, K_PROD}, {TCOLL_FLOAT64, K_AVG},
    {TCOLL_INT32, K_BAND},  {TCOLL_INT32, K_BOR},    {TCOLL_INT64, K_SUM},
    {TCOLL_UINT8, K_MIN},   {TCOLL_INT8, K_BXOR},    {TCOLL_INT16, K_MAX},
    {TCOLL_FLOAT16, K_SUM}, {TCOLL_FLOAT16, K_AVG},  {TCOLL_BFLOAT16, K_SUM},
    {TCOLL_BOOL, K_BOR},    {TCOLL_BOOL, K_BAND},
};

/* One forced all_reduce of c's closed form (reduce_common.h), checked. */
static void rc_all_reduce(const rc_t *c, int64_t n, bool inplace) {
  char what[200];
  snprintf(what, sizeof what, "dtypes: all_reduce %s %s of %lld elements %s", kname(c->k),
           tcoll_dtype_name(c->d), (long long)n, inplace ? "in place" : "out of place");
  rc_t cc = *c;
  int64_t shape[1] = {n};
  tcoll_tensor_t in = t_alloc(cc.d, 1, shape);
  t_set_all(&in, rc_fill, &cc);
  tcoll_tensor_t out = inplace ? in : t_alloc(cc.d, 1, shape);
  T_OK(tcoll_all_reduce(&in, (tcoll_redop_t)cc.k, NULL, &out));
  const char *got = tcoll_last_algorithm();
  T_OK(tcoll_wait(out.data));
  expect_algo(what, got, slices_want(t_size));
  t_check_all(what, &out, rc_want, &cc, 0);
  if (!inplace) {
    char w2[240];
    snprintf(w2, sizeof w2, "%s: input", what);
    t_check_all(w2, &in, rc_orig, &cc, 0);
    tcoll_tensor_free(&out);
  }
  tcoll_tensor_free(&in);
}

/* One forced reduce_scatter of c's closed form along dim of `shape`, checked against the
 * reference over this rank's block (block_indices); `op` the handle (premul_sum's, or c's kind),
 * `want` the algorithm (NULL: any but shm_slices). */
static void rc_reduce_scatter(const char *label, const rc_t *c, tcoll_redop_t op, int ndim,
                              const int64_t *shape, int dim, const char *want) {
  char what[240];
  int64_t numel = 1, oshape[TCOLL_MAX_DIMS];
  for (int i = 0; i < ndim; i++) numel *= shape[i];
  memcpy(oshape, shape, (size_t)ndim * sizeof *shape);
  oshape[dim] /= t_size;
  snprintf(what, sizeof what, "%s: reduce_scatter %s %s of %lld elements along dim %d of %d", label,
           kname(c->k), tcoll_dtype_name(c->d), (long long)numel, dim, ndim);
  rc_t cc = *c;
  tcoll_tensor_t in = t_alloc(cc.d, ndim, shape), out = t_alloc(cc.d, ndim, oshape);
  t_set_all(&in, rc_fill, &cc);
  T_OK(tcoll_reduce_scatter(&in, op, dim, NULL, &out));
  const char *got = tcoll_last_algorithm();
  T_OK(tcoll_wait(out.data));
  expect_algo(what, got, want);
  int64_t *idx = malloc((size_t)numel * sizeof *idx);
  double *exp = malloc((size_t)numel * sizeof *exp);
  int64_t m = block_indices(shape, ndim, dim, t_rank, t_size, idx);
  T_EXPECT(m == tcoll_tensor_numel(&out), "%s: %lld output elements, the block has %lld", what,
           (long long)tcoll_tensor_numel(&out), (long long)m);
  for (int64_t j = 0; j < m; j++) exp[j] = rref(cc.d, cc.k, cc.s, cc.salt + idx[j], cc.ids, cc.G);
  if (m == tcoll_tensor_numel(&out)) t_check_all(what, &out, from_array, exp, 0);
  char w2[280];
  snprintf(w2, sizeof w2, "%s: input", what);
  t_check_all(w2, &in, rc_orig, &cc, 0);
  free(exp);
  free(idx);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}

/* Each op kind and dtype across a chunk boundary of its own geometry (the piece is in whole lines
 * of 64 bytes, so the dtype's size moves it): all_reduce of 1 chunk and 1 element and of 2 chunks
 * and a few (a count the ranks do not divide), reduce_scatter of 2 pieces and 3 elements a rank. */
START_TEST(every_dtype_op) {
  t_save_algo();
  t_set_algo(SLICES);
  int p = t_size;
  for (size_t i = 0; i < T_LEN(OPS); i++) {
    size_t es = tcoll_dtype_size(OPS[i].d);
    rc_t c = rc_world(OPS[i].d, OPS[i].k, 1);
    int64_t C = chunk(p, es), P = piece(p, es);
    rc_all_reduce(&c, C + 1, i % 2);
    rc_all_reduce(&c, 2 * C + 2 * p + 3, !(i % 2));
    int64_t shape[1] = {p * (2 * P + 3)};
    rc_reduce_scatter("dtypes", &c, (tcoll_redop_t)c.k, 1, shape, 0, slices_want(p));
  }
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- bitwise */

/* Rank r's element i: magnitudes 1e-3 .. 1e3 by (r + i) % 5, alternating signs and an inexact
 * fraction, so that the order of the operations shows in the last bits. Held as float32 here. */
static const double MAG[5] = {1e-3, 0.1, 1, 10, 1e3};
static double nx_value(int r, int64_t i) {
  double v = (1 + 0.13 * r + (double)(i % 997) * 1.7e-3) * MAG[(r + i) % 5];
  return (double)(float)((r + i) % 2 ? -v : v);
}
static double nx_fill(int64_t i, void *p) { return nx_value(*(const int *)p, i); }

/* The serial reference for element i reduced by rank `owner` of p: acc = x_owner, then
 * acc = x_q op acc for every other q in ascending order; AVG divides once at the end. In
 * float32 (f32) or float64 arithmetic. */
static double nx_ref(bool f32, int k, int64_t i, int owner, int p) {
  if (f32) {
    float acc = (float)nx_value(owner, i);
    for (int q = 0; q < p; q++) {
      if (q == owner) continue;
      float v = (float)nx_value(q, i);
      acc = k == K_PROD ? v * acc : v + acc;
    }
    return k == K_AVG ? (double)(acc / (float)p) : (double)acc;
  }
  double acc = nx_value(owner, i);
  for (int q = 0; q < p; q++) {
    if (q == owner) continue;
    double v = nx_value(q, i);
    acc = k == K_PROD ? v * acc : v + acc;
  }
  return k == K_AVG ? acc / p : acc;
}

/* The all_reduce block (the rank that reduces it) element i of n falls in on p ranks: n / p
 * elements a block, one more for the first n % p. */
static int owner_of(int64_t i, int64_t n, int p) {
  int64_t q = n / p, rem = n % p, head = rem * (q + 1);
  return i < head ? (int)(i / (q + 1)) : (int)(rem + (i - head) / q);
}

/* Compares vals (n results of `what`; idx: their input indices, NULL: the same) with the
 * reference want: bitwise where shm_slices ran (or where the order cannot differ: 2 ranks or
 * fewer), else within rounding (mag: the sum of the terms' magnitudes). */
static void nx_expect(const char *what, const char *got, bool f32, const double *vals,
                      const double *want, const double *mag, const int64_t *idx, int64_t n) {
  bool exact = is_slices(got) || t_size <= 2;
  double eps = f32 ? 0x1p-24 : 0x1p-53;
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    bool ok = exact ? !memcmp(&vals[i], &want[i], sizeof *vals)
                    : fabs(vals[i] - want[i]) <= 4.0 * t_size * eps * mag[i];
    if (!ok && bad++ < 3)
      T_EXPECT(false, "%s (%s): element %lld (input %lld) is %a (%.9g), expected %s %a (%.9g)",
               what, got ? got : "?", (long long)i, (long long)(idx ? idx[i] : i), vals[i], vals[i],
               exact ? "bitwise" : "about", want[i], want[i]);
  }
  if (bad > 3) T_EXPECT(false, "%s: %d elements differ in all", what, bad);
}

/* Every rank's n results bitwise rank 0's (MPI_Bcast of rank 0's). */
static void expect_same_bits(const char *what, const char *got, const double *vals, int64_t n) {
  double *root = malloc((size_t)n * sizeof *root);
  if (t_rank == 0) memcpy(root, vals, (size_t)n * sizeof *root);
  MPI_Bcast(root, (int)n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  int64_t first = -1;
  for (int64_t i = 0; i < n && first < 0; i++)
    if (memcmp(&root[i], &vals[i], sizeof *vals)) first = i;
  T_EXPECT(first < 0, "%s (%s): element %lld is %a here, %a on rank 0", what, got ? got : "?",
           (long long)first, first < 0 ? 0 : vals[first], first < 0 ? 0 : root[first]);
  free(root);
}

/* The sum of the magnitudes of element i's terms (the tolerance of another order). */
static double nx_mag(int k, int64_t i, int p) {
  double m = 0;
  for (int q = 0; q < p; q++) m += fabs(nx_value(q, i));
  if (k == K_PROD) return fabs(nx_ref(false, k, i, 0, p));
  return k == K_AVG ? m / p : m;
}

static void nx_all_reduce(tcoll_dtype_t d, int k, int64_t n, bool inplace) {
  char what[200];
  snprintf(what, sizeof what, "bitwise: all_reduce %s %s of %lld elements %s", kname(k),
           tcoll_dtype_name(d), (long long)n, inplace ? "in place" : "out of place");
  int64_t shape[1] = {n};
  int me = t_rank;
  tcoll_tensor_t in = t_alloc(d, 1, shape);
  t_set_all(&in, nx_fill, &me);
  tcoll_tensor_t out = inplace ? in : t_alloc(d, 1, shape);
  T_OK(tcoll_all_reduce(&in, (tcoll_redop_t)k, NULL, &out));
  const char *got = tcoll_last_algorithm();
  T_OK(tcoll_wait(out.data));
  expect_algo(what, got, slices_want(t_size));
  bool f32 = d == TCOLL_FLOAT32;
  double *vals = malloc((size_t)n * 3 * sizeof *vals), *want = vals + n, *mag = want + n;
  t_read(&out, vals);
  for (int64_t i = 0; i < n; i++) {
    want[i] = nx_ref(f32, k, i, owner_of(i, n, t_size), t_size);
    mag[i] = nx_mag(k, i, t_size);
  }
  nx_expect(what, got, f32, vals, want, mag, NULL, n);
  expect_same_bits(what, got, vals, n);
  if (!inplace) {
    char w2[240];
    snprintf(w2, sizeof w2, "%s: input", what);
    t_check_all(w2, &in, nx_fill, &me, 0);
    tcoll_tensor_free(&out);
  }
  free(vals);
  tcoll_tensor_free(&in);
}

/* reduce_scatter along dim of `shape`: this rank reduces its block, own input first. */
static void nx_reduce_scatter(tcoll_dtype_t d, int k, int ndim, const int64_t *shape, int dim) {
  char what[200];
  int64_t numel = 1, oshape[TCOLL_MAX_DIMS];
  for (int i = 0; i < ndim; i++) numel *= shape[i];
  memcpy(oshape, shape, (size_t)ndim * sizeof *shape);
  oshape[dim] /= t_size;
  snprintf(what, sizeof what, "bitwise: reduce_scatter %s %s of %lld elements along dim %d of %d",
           kname(k), tcoll_dtype_name(d), (long long)numel, dim, ndim);
  int me = t_rank;
  tcoll_tensor_t in = t_alloc(d, ndim, shape), out = t_alloc(d, ndim, oshape);
  t_set_all(&in, nx_fill, &me);
  T_OK(tcoll_reduce_scatter(&in, (tcoll_redop_t)k, dim, NULL, &out));
  const char *got = tcoll_last_algorithm();
  T_OK(tcoll_wait(out.data));
  expect_algo(what, got, slices_want(t_size));
  int64_t *idx = malloc((size_t)numel * sizeof *idx), m = numel / t_size;
  block_indices(shape, ndim, dim, t_rank, t_size, idx);
  double *vals = malloc((size_t)m * 3 * sizeof *vals), *want = vals + m, *mag = want + m;
  t_read(&out, vals);
  bool f32 = d == TCOLL_FLOAT32;
  for (int64_t j = 0; j < m; j++) {
    want[j] = nx_ref(f32, k, idx[j], t_rank, t_size);
    mag[j] = nx_mag(k, idx[j], t_size);
  }
  nx_expect(what, got, f32, vals, want, mag, idx, m);
  free(vals);
  free(idx);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}

/* Sums, products and averages that are not exact: each element reduced in the stated order by
 * the rank whose block holds it, so every rank has the same bits and they are the serial
 * reference's. */
START_TEST(bitwise_rank_order) {
  t_save_algo();
  t_set_algo(SLICES);
  int p = t_size;
  int64_t C = chunk(p, 4), P = piece(p, 4);
  const int ks[] = {K_SUM, K_PROD, K_AVG};
  const int64_t sizes[] = {p + 1, C + 1, 2 * C + p + 1};
  for (size_t k = 0; k < T_LEN(ks); k++)
    for (size_t s = 0; s < T_LEN(sizes); s++) nx_all_reduce(TCOLL_FLOAT32, ks[k], sizes[s], s % 2);
  nx_all_reduce(TCOLL_FLOAT64, K_SUM, chunk(p, 8) * 2 + 1, true);
  int64_t s2[2] = {3, (int64_t)p * (P / 2 + 5)}, s3[3] = {2, 3, (int64_t)p * (P / 3 + 7)};
  nx_reduce_scatter(TCOLL_FLOAT32, K_SUM, 2, s2, 1);
  nx_reduce_scatter(TCOLL_FLOAT32, K_AVG, 3, s3, 2);
  int64_t s1[1] = {(int64_t)p * (2 * piece(p, 8) + 1)};
  nx_reduce_scatter(TCOLL_FLOAT64, K_PROD, 1, s1, 0);
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- reduce_scatter's dims */

/* Along dim 0 and the inner dims of 2-D and 3-D tensors (the dim's length a multiple of the
 * ranks), a block of 1 to 3 chunks: short runs (many to a chunk), runs longer than a chunk,
 * blocks of exactly 2 pieces. float32 SUM (exact), one AVG, int32 SUM and MAX. */
START_TEST(reduce_scatter_dims) {
  t_save_algo();
  t_set_algo(SLICES);
  int p = t_size;
  int64_t P = piece(p, 4);
  const char *want = slices_want(p);
  rc_t sum = rc_world(TCOLL_FLOAT32, K_SUM, 1), avg = rc_world(TCOLL_FLOAT32, K_AVG, 1);
  rc_t isum = rc_world(TCOLL_INT32, K_SUM, 1), imax = rc_world(TCOLL_INT32, K_MAX, 1);
  /* dim 0: blocks of exactly 2 pieces, of 2 pieces and 1, of 2.5 pieces in rows of 7 */
  int64_t d0a[1] = {p * 2 * P}, d0b[1] = {p * (2 * P + 1)}, d0c[2] = {p * ((5 * P / 2) / 7 + 1), 7};
  rc_reduce_scatter("dims", &sum, TCOLL_SUM, 1, d0a, 0, want);
  rc_reduce_scatter("dims", &sum, TCOLL_SUM, 1, d0b, 0, want);
  rc_reduce_scatter("dims", &isum, TCOLL_SUM, 2, d0c, 0, want);
  /* dim 1 of 2-D: runs of 5 (a run across every chunk boundary that 5 does not divide), runs a
   * piece and 3 long (each across a boundary), the AVG */
  int64_t d1a[2] = {(2 * P + 3) / 5 + 1, p * 5}, d1b[2] = {2, p * (P + 3)};
  rc_reduce_scatter("dims", &sum, TCOLL_SUM, 2, d1a, 1, want);
  rc_reduce_scatter("dims", &avg, TCOLL_AVG, 2, d1b, 1, want);
  /* 3-D: dim 1 (3 runs a block, each 4 len / p long), dim 2 (15 runs a block, each len / p) */
  int64_t d3a[3] = {3, p * ((P / 2 + 1) / 4 + 1), 4}, d3b[3] = {3, 5, p * ((P + 9) / 15 + 1)};
  rc_reduce_scatter("dims", &sum, TCOLL_SUM, 3, d3a, 1, want);
  rc_reduce_scatter("dims", &imax, TCOLL_MAX, 3, d3b, 2, want);
  rc_reduce_scatter("dims", &sum, TCOLL_SUM, 3, d3b, 2, want);
  if (t_size == 2) { /* inputs of 8 MiB and more at 2 ranks: the output streamed (runs of 4200 B) */
    int64_t big1[2] = {1024, 2100}, big0[1] = {2200006};
    rc_reduce_scatter("dims (streamed)", &sum, TCOLL_SUM, 2, big1, 1, want);
    rc_reduce_scatter("dims (streamed)", &isum, TCOLL_SUM, 1, big0, 0, want);
  }
  t_restore_algo();
}
END_TEST

/* Along a dim other than 0 from 4 MiB at every rank count (the runs read out of memory rather
 * than cache): 2-D tensors with runs of 280, 256 and 252 B (1-5 rows more than 4 MiB holds, so
 * the tail is ragged), the AVG, a 3-D tensor along dim 1 (each run 13 x 5 elements) with int32 MAX.
 */
START_TEST(reduce_scatter_large_dims) {
  t_save_algo();
  t_set_algo(SLICES);
  int64_t p = t_size, mib4 = (int64_t)4 << 20;
  const char *want = slices_want(t_size);
  rc_t sum = rc_world(TCOLL_FLOAT32, K_SUM, 1), avg = rc_world(TCOLL_FLOAT32, K_AVG, 1);
  rc_t imax = rc_world(TCOLL_INT32, K_MAX, 1);
  int64_t a[2] = {mib4 / (p * 70 * 4) + 3, p * 70}, b[2] = {mib4 / (p * 64 * 4) + 1, p * 64};
  int64_t c[3] = {mib4 / (p * 65 * 4) + 2, p * 13, 5}, d[2] = {mib4 / (p * 63 * 4) + 5, p * 63};
  rc_reduce_scatter("large dims", &sum, TCOLL_SUM, 2, a, 1, want);
  rc_reduce_scatter("large dims", &avg, TCOLL_AVG, 2, b, 1, want);
  rc_reduce_scatter("large dims", &imax, TCOLL_MAX, 3, c, 1, want);
  rc_reduce_scatter("large dims", &sum, TCOLL_SUM, 2, d, 1, want);
  t_restore_algo();
}
END_TEST

/* Reduce_scatter from 8 MiB writes its output with streaming stores from the output's first
 * 16-byte boundary on (lib/base/host_loops.c): outputs a few bytes past such a boundary and
 * blocks of an odd count (a scalar head, two vectors a step, a scalar tail), for float32 SUM,
 * float64 PROD (the other loop) and int32 SUM wrapping past INT32_MAX, against a serial
 * reduction of every rank's input. */
static double streamed_value(int64_t i, int r, tcoll_dtype_t dt) {
  if (dt == TCOLL_FLOAT64) return (i + r) % 3 == 0 ? 2.0 : (i + r) % 3 == 1 ? 0.5 : 1.0;
  return (double)(i % 1000 + r);
}

static void streamed_case(tcoll_dtype_t dt, tcoll_redop_t op, size_t shift) {
  int p = t_size, me = t_rank;
  size_t es = dt == TCOLL_FLOAT64 ? 8 : 4;
  int64_t m = (int64_t)((((size_t)8 << 20) / es + (size_t)p - 1) / (size_t)p) | 1, n = m * p;
  size_t out_bytes = ((size_t)m * es + 64 + 63) / 64 * 64; /* (C11: a multiple of the alignment) */
  char *in = malloc((size_t)n * es), *out = aligned_alloc(64, out_bytes);
  T_EXPECT(in && out, "cannot allocate %lld elements", (long long)n);
  if (!in || !out) goto done;
  for (int64_t i = 0; i < n; i++) {
    double v = streamed_value(i, me, dt);
    if (dt == TCOLL_FLOAT64) ((double *)(void *)in)[i] = v;
    if (dt == TCOLL_FLOAT32) ((float *)(void *)in)[i] = (float)v;
    if (dt == TCOLL_INT32) ((int32_t *)(void *)in)[i] = INT32_MAX - (int32_t)v;
  }
  int64_t sin[1] = {n}, sout[1] = {m};
  tcoll_tensor_t x = tcoll_tensor_make(in, dt, 1, sin, TCOLL_HOST);
  tcoll_tensor_t y = tcoll_tensor_make(out + shift, dt, 1, sout, TCOLL_HOST);
  T_OK(tcoll_reduce_scatter(&x, op, 0, NULL, &y));
  T_OK(tcoll_wait(y.data));
  int64_t bad = 0, first = -1;
  for (int64_t t = 0; t < m; t++) {
    int64_t i = me * m + t;
    double want = op == TCOLL_PRODUCT ? 1.0 : 0.0;
    uint32_t iwant = 0;
    for (int r = 0; r < p; r++) {
      double v = streamed_value(i, r, dt);
      want = op == TCOLL_PRODUCT ? want * v : want + v;
      iwant += (uint32_t)(INT32_MAX - (int32_t)v);
    }
    const char *at = out + shift + (size_t)t * es;
    bool ok = dt == TCOLL_FLOAT64   ? *(const double *)(const void *)at == want
              : dt == TCOLL_FLOAT32 ? *(const float *)(const void *)at == (float)want
                                    : *(const uint32_t *)(const void *)at == iwant;
    if (!ok && bad++ == 0) first = t;
  }
  T_EXPECT(bad == 0,
           "streamed reduce_scatter (%s, output %zu bytes past 64): %lld of %lld wrong, "
           "the first at %lld",
           tcoll_dtype_name(dt), shift, (long long)bad, (long long)m, (long long)first);
done:
  free(in);
  free(out);
}

START_TEST(streamed_unaligned) {
  t_save_algo();
  t_set_algo(SLICES);
  streamed_case(TCOLL_FLOAT32, TCOLL_SUM, 4);
  streamed_case(TCOLL_FLOAT64, TCOLL_PRODUCT, 8);
  streamed_case(TCOLL_INT32, TCOLL_SUM, 12);
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- what ran, fallbacks */

/* Forced shm_slices reports itself where it runs and the ring where it cannot, with the same
 * results: on world (the ring at 1 rank and in the -noshm runs), on a communicator of one rank,
 * for premul_sum (the ring everywhere), for an empty tensor (the literal mapping). */
START_TEST(algorithm_reported) {
  t_save_algo();
  t_set_algo(SLICES);
  int p = t_size;
  int64_t C = chunk(p, 4);
  ex_all_reduce("reported on world", 1, 2 * C + 1, false, NULL);
  rc_t sum = rc_world(TCOLL_FLOAT32, K_SUM, 1);
  int64_t P = piece(p, 4), s2[2] = {3, p * (P + 5)};
  rc_reduce_scatter("reported on world", &sum, TCOLL_SUM, 2, s2, 1, slices_want(p));
  tcoll_comm_t *alone = NULL;
  T_OK(tcoll_comm_split(NULL, t_rank, 0, &alone));
  T_EXPECT(alone && tcoll_comm_size(alone) == 1, "a split by rank is not of one rank");
  if (alone) {
    /* values of world's rank t_rank only: the sum over "world" would be wrong, so check here */
    int64_t shape[1] = {2 * C + 1};
    ex_ctx_t c = {2, t_rank};
    tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_alloc(TCOLL_FLOAT32, 1, shape);
    t_set_all(&in, ex_fill, &c);
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, alone, &out));
    const char *got = tcoll_last_algorithm();
    T_OK(tcoll_wait(out.data));
    expect_algo("reported on one rank: all_reduce", got, slices_want(1));
    t_check_all("reported on one rank: all_reduce", &out, ex_fill, &c, 0);
    tcoll_tensor_free(&out);
    tcoll_tensor_free(&in);
    T_OK(tcoll_comm_free(&alone));
  }
  /* premul_sum: the ring, also along dim 1 */
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  rc_t c = rc_world(TCOLL_FLOAT32, K_PREMUL, 0.5);
  int64_t shape[1] = {2 * C + 1};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_alloc(TCOLL_FLOAT32, 1, shape);
  t_set_all(&in, rc_fill, &c);
  T_OK(tcoll_all_reduce(&in, premul, NULL, &out));
  const char *got = tcoll_last_algorithm();
  T_OK(tcoll_wait(out.data));
  expect_algo("premul_sum all_reduce", got, "ring");
  t_check_all("premul_sum all_reduce", &out, rc_want, &c, 0);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
  rc_reduce_scatter("premul", &c, premul, 2, s2, 1, "ring");
  T_OK(tcoll_redop_destroy(premul));
  /* empty: nothing for either to do */
  int64_t zero[1] = {0};
  tcoll_tensor_t zin = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, zero, t_device()),
                 zout = t_empty();
  T_OK(tcoll_all_reduce(&zin, TCOLL_SUM, NULL, &zout));
  expect_algo("empty all_reduce", tcoll_last_algorithm(), NULL);
  T_OK(tcoll_wait(zout.data));
  tcoll_tensor_free(&zout);
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- many in flight */

#define NBIG 60

/* One call of the sequence: a large all_reduce or reduce_scatter (2 to 3 chunks) or a small
 * all_reduce (the small protocol, "shm", on the same segment). */
typedef struct fl_call {
  tcoll_tensor_t in, out;
  const char *algo, *want;
  bool scatter;
  int j;
  tcoll_comm_t *comm;
} fl_call_t;

/* The j-th call's tensors, filled (reduce_scatter: along dim 0 of p blocks). */
static void fl_post(fl_call_t *f, int j, bool big, tcoll_comm_t *comm) {
  int p = t_size;
  f->j = j;
  f->comm = comm;
  f->scatter = big && j % 4 == 1;
  int64_t n = big ? 2 * chunk(p, 4) + 1 + j * (chunk(p, 4) / NBIG) : 1 + (j * 37) % 64;
  int64_t shape[1] = {f->scatter ? (int64_t)p * (2 * piece(p, 4) + j) : n};
  int64_t oshape[1] = {f->scatter ? shape[0] / p : n};
  ex_ctx_t c = {j, t_rank};
  f->in = t_alloc(TCOLL_FLOAT32, 1, shape);
  t_set_all(&f->in, ex_fill, &c);
  f->out = t_alloc(TCOLL_FLOAT32, 1, oshape);
  t_set_algo(big ? SLICES : "all_reduce:shm,reduce_scatter:shm_slices");
  T_OK(f->scatter ? tcoll_reduce_scatter(&f->in, TCOLL_SUM, 0, comm, &f->out)
                  : tcoll_all_reduce(&f->in, TCOLL_SUM, comm, &f->out));
  f->algo = tcoll_last_algorithm();
  bool seg = segments_on() && slot_bytes() > 0 && p >= 2;
  f->want = big ? slices_want(p) : seg ? "shm" : "mpi";
}

/* Checks a completed call: its algorithm, its result (reduce_scatter: the rank's block of world's
 * or the split's order) and its input. */
static void fl_check(fl_call_t *f, int r) {
  char what[160];
  snprintf(what, sizeof what, "in flight: call %d (%s %s of %lld) on %s", f->j,
           f->scatter ? "reduce_scatter" : "all_reduce", f->want,
           (long long)tcoll_tensor_numel(&f->in), f->comm ? "the split" : "world");
  expect_algo(what, f->algo, f->want);
  ex_ctx_t c = {f->j, t_rank};
  if (!f->scatter) {
    t_check_all(what, &f->out, ex_want, &c, 0);
  } else { /* the block of this rank's place in the communicator: r */
    int64_t m = tcoll_tensor_numel(&f->out);
    double *exp = malloc((size_t)m * sizeof *exp);
    for (int64_t i = 0; i < m; i++) exp[i] = ex_want(r * m + i, &c);
    t_check_all(what, &f->out, from_array, exp, 0);
    free(exp);
  }
  char w2[200];
  snprintf(w2, sizeof w2, "%s: input", what);
  t_check_all(w2, &f->in, ex_fill, &c, 0);
  tcoll_tensor_free(&f->out);
  tcoll_tensor_free(&f->in);
}

/* NBIG large calls, each followed by a small one, alternating between world and a split of it in
 * reverse order (rank 0 starts 20 ms late), then waited in reverse order and checked. */
START_TEST(many_in_flight) {
  tcoll_comm_t *other = NULL;
  T_OK(tcoll_comm_split(NULL, 0, t_size - 1 - t_rank, &other));
  T_EXPECT(
      other && tcoll_comm_size(other) == t_size && tcoll_comm_rank(other) == t_size - 1 - t_rank,
      "split: size %d rank %d", tcoll_comm_size(other), tcoll_comm_rank(other));
  if (!other) return;
  t_save_algo();
  fl_call_t *calls = calloc(2 * NBIG, sizeof *calls);
  if (t_rank == 0) usleep(20000);
  for (int j = 0; j < NBIG; j++) {
    fl_post(&calls[2 * j], j, true, j % 2 ? other : NULL);
    fl_post(&calls[2 * j + 1], NBIG + j, false, j % 2 ? NULL : other);
  }
  for (int i = 2 * NBIG; i-- > 0;) T_OK(tcoll_wait(calls[i].out.data));
  for (int i = 0; i < 2 * NBIG; i++)
    fl_check(&calls[i], calls[i].comm ? t_size - 1 - t_rank : t_rank);
  free(calls);
  T_OK(tcoll_comm_free(&other));
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- staying in step */

/* Three rounds of an all_reduce and a reduce_scatter on world, checked (after something that
 * might have left the ranks' call numbers apart). */
static void rounds_on_world(const char *after) {
  int p = t_size;
  for (int round = 0; round < 3; round++) {
    char label[120];
    snprintf(label, sizeof label, "round %d after %s", round, after);
    ex_all_reduce(label, 10 + round, 2 * chunk(p, 4) + round, round % 2, NULL);
    rc_t c = rc_world(TCOLL_FLOAT32, K_SUM, 1);
    c.salt = round;
    int64_t shape[2] = {2, p * (piece(p, 4) + 1 + round)};
    rc_reduce_scatter(label, &c, TCOLL_SUM, 2, shape, 1, slices_want(p));
  }
}

/* ---------------------------------------------------------------- all_gather along any dim */

/* Rank r's input element i: exact in float32 and in uint8's 0..255 for the 7-byte runs. */
static double ag_value(int r, int64_t i, tcoll_dtype_t d) {
  return d == TCOLL_UINT8 ? (double)((r * 37 + i * 11) % 251) : (double)(r * 1000 + i % 997);
}
typedef struct ag_ctx {
  int r;
  tcoll_dtype_t d;
  int64_t outer, len, inner; /* the input's shape around the gathered dim */
} ag_ctx_t;
static double ag_in(int64_t i, void *p) {
  const ag_ctx_t *c = p;
  return ag_value(c->r, i, c->d);
}
/* Output element i: row o, position k along the gathered dim (rank k / len's k % len), e. */
static double ag_out(int64_t i, void *p) {
  const ag_ctx_t *c = p;
  int64_t glen = c->len * t_size, e = i % c->inner, k = i / c->inner % glen,
          o = i / c->inner / glen;
  return ag_value((int)(k / c->len), (o * c->len + k % c->len) * c->inner + e, c->d);
}

/* One forced all_gather:shm of host tensors along dim, checked (in place: dim 0, the input is
 * this rank's slice of the output). */
static void ag_case(tcoll_dtype_t d, int ndim, const int64_t *shape, int dim, bool inplace) {
  char what[200];
  snprintf(what, sizeof what, "all_gather:shm %s of %d dims along dim %d (%lld along it) %s",
           tcoll_dtype_name(d), ndim, dim, (long long)shape[dim], inplace ? "in place" : "");
  ag_ctx_t c = {t_rank, d, 1, shape[dim], 1};
  for (int i = 0; i < dim; i++) c.outer *= shape[i];
  for (int i = dim + 1; i < ndim; i++) c.inner *= shape[i];
  int64_t oshape[TCOLL_MAX_DIMS];
  memcpy(oshape, shape, (size_t)ndim * sizeof *shape);
  oshape[dim] *= t_size;
  tcoll_tensor_t out = t_host(d, ndim, oshape), in = out;
  if (inplace) {
    memcpy(in.shape, shape, (size_t)ndim * sizeof *shape);
    in.data = (char *)out.data + (size_t)t_rank * (size_t)(c.len * c.inner) * tcoll_dtype_size(d);
  } else {
    in = t_host(d, ndim, shape);
  }
  t_set_all(&in, ag_in, &c);
  T_OK(tcoll_all_gather(&in, dim, NULL, &out));
  const char *got = tcoll_last_algorithm();
  T_OK(tcoll_wait(out.data));
  expect_algo(what, got, slices_expected(t_size) ? "shm" : "mpi");
  t_check_all(what, &out, ag_out, &c, 0);
  if (!inplace) {
    char w2[240];
    snprintf(w2, sizeof w2, "%s: input", what);
    t_check_all(w2, &in, ag_in, &c, 0);
    tcoll_tensor_free(&in);
  }
  tcoll_tensor_free(&out);
}

/* all_gather:shm along dims 0, 1 and 2, across chunk boundaries (a slot a chunk), runs of one
 * element to several KiB, in place along dim 0, and outputs of 8 MiB and more along dim 1 (written
 * with streaming stores: runs of 520 B, and of 7 B, not multiples of 16). */
START_TEST(all_gather_any_dim) {
  t_save_algo();
  t_set_algo("all_gather:shm");
  int64_t per = (int64_t)(slot_bytes() / 4) + 3; /* float32 elements: a slot's worth and more */
  if (per < 5) per = 5;
  int64_t d0[1] = {2 * per + 1}, d1[2] = {per / 64 + 2, 64}, d1b[2] = {3, 2 * per + 5},
          d2[3] = {5, 7, per / 35 + 3}, one[2] = {per, 1}, big[2] = {16384, 130},
          bytes7[2] = {1200000, 7};
  ag_case(TCOLL_FLOAT32, 1, d0, 0, false);
  ag_case(TCOLL_FLOAT32, 1, d0, 0, true);
  ag_case(TCOLL_FLOAT32, 2, d1, 1, false);
  ag_case(TCOLL_FLOAT32, 2, d1b, 1, false);
  ag_case(TCOLL_FLOAT32, 3, d2, 2, false);
  ag_case(TCOLL_FLOAT32, 3, d2, 1, false);
  ag_case(TCOLL_FLOAT32, 2, one, 1, false);
  if (t_size == 2) { /* 8 MiB outputs at 2 ranks (the streamed path; kept short elsewhere) */
    ag_case(TCOLL_FLOAT32, 2, big, 1, false);
    ag_case(TCOLL_UINT8, 2, bytes7, 1, false);
  }
  t_restore_algo();
}
END_TEST

/* The fallback (premul_sum) makes no call of the protocol on any rank, and communicators made
 * and freed 20 times (each running one all_reduce of 3 chunks on its own segment) leave world's
 * segment alone: the calls after them run and agree. */
START_TEST(in_step_after_fallback_and_churn) {
  t_save_algo();
  t_set_algo(SLICES);
  int p = t_size;
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(2.0, &premul));
  rc_t c = rc_world(TCOLL_FLOAT32, K_PREMUL, 2.0);
  int64_t shape[1] = {p * (piece(p, 4) + 3)};
  rc_reduce_scatter("premul fallback", &c, premul, 1, shape, 0, "ring");
  T_OK(tcoll_redop_destroy(premul));
  rounds_on_world("a premul fallback");
  for (int it = 0; it < 20; it++) {
    tcoll_comm_t *dup = NULL;
    T_OK(tcoll_comm_from_mpi(MPI_COMM_WORLD, &dup));
    if (!dup) break;
    char label[80];
    snprintf(label, sizeof label, "comm churn %d", it);
    ex_all_reduce(label, it, 3 * chunk(p, 4), it % 2, dup);
    T_OK(tcoll_comm_free(&dup));
  }
  rounds_on_world("20 communicators made and freed");
  t_restore_algo();
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("shm_slices");
  TCase *tc = t_tcase("shm_slices");
  tcase_add_test(tc, sizes_across_chunks);
  tcase_add_test(tc, reduce_to_root);
  tcase_add_test(tc, every_dtype_op);
  tcase_add_test(tc, bitwise_rank_order);
  tcase_add_test(tc, reduce_scatter_dims);
  tcase_add_test(tc, reduce_scatter_large_dims);
  tcase_add_test(tc, streamed_unaligned);
  tcase_add_test(tc, algorithm_reported);
  tcase_add_test(tc, many_in_flight);
  tcase_add_test(tc, all_gather_any_dim);
  tcase_add_test(tc, in_step_after_fallback_and_churn);
  suite_add_tcase(s, tc);
  return s;
}
