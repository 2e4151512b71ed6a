/* Algorithm selection (TCOLL_ALGO, tcoll_config_t.algo, tcoll_last_algorithm): every forced
 * algorithm gives exact results for every kind of reduce op and the dtypes with their own
 * arithmetic, names itself in tcoll_last_algorithm() and in the INFO log, and is what actually
 * ran (the MPI calls made, counted below); every rank gets the same bits, and a repeated call
 * the same bits again; bad settings are refused with a message and change nothing.
 *
 * The suite also runs with TCOLL_ALGO set in the environment (test/meson.build, algo_suites):
 * every test sets the algorithm it needs and puts back the setting it found. */
#include "algo_util.h"
#include "move_util.h"
#include "mpi_count.h"
#include "reduce_common.h"

#include <pthread.h>

/* ---------------------------------------------------------------- MPI calls made
 *
 * Counted through the profiling interface (test/mpi_count.c), by every thread: with
 * TCOLL_PROGRESS=thread the progress thread posts the steps of a schedule while this thread
 * waits. Each count spans one collective, from its post to its completion, with nothing else
 * in flight (t_mpi_window_open), so every call in it is that collective's; what each algorithm
 * posts tells which one ran.
 *   mpi:            all_reduce MPI_Iallreduce; reduce_scatter MPI_Ireduce_scatter_block
 *                   (MPI_Ialltoallv along a dim other than 0)
 *   ring:           MPI_Isend / MPI_Irecv between neighbours only (no call at 1 rank)
 *   ring_allgather: MPI_Isend / MPI_Irecv, then MPI_Iallgatherv (no call at 1 rank)
 *   alltoall:       MPI_Ialltoall
 *   scattered:      (the all-to-all family) MPI_Isend / MPI_Irecv, one per peer and block
 *   shm:            (all_reduce) no MPI call: node-shared memory (its segment is made with the
 *                   communicator)
 *   shm_slices:     (all_reduce, reduce_scatter, reduce) no MPI call either: the large node-shared
 *                   algorithm */
typedef struct calls {
  long allreduce, rsb, alltoall, alltoallv, allgatherv, send, reduce, recv;
} calls_t;

/* Opens the count of one collective (nothing may be pending: see calls_since). */
static t_mpi_window_t calls_open(void) {
  t_mpi_window_t w;
  t_mpi_window_open(&w);
  return w;
}

static calls_t calls_since(const t_mpi_window_t *w) {
  return (calls_t){t_mpi_window_calls_of(w, T_MPI_IALLREDUCE),
                   t_mpi_window_calls_of(w, T_MPI_IREDUCE_SCATTER_BLOCK),
                   t_mpi_window_calls_of(w, T_MPI_IALLTOALL),
                   t_mpi_window_calls_of(w, T_MPI_IALLTOALLV),
                   t_mpi_window_calls_of(w, T_MPI_IALLGATHERV),
                   t_mpi_window_calls_of(w, T_MPI_ISEND),
                   t_mpi_window_calls_of(w, T_MPI_IREDUCE),
                   t_mpi_window_calls_of(w, T_MPI_IRECV)};
}

enum { OP_AR, OP_RS, OP_A2A, OP_RD };

/* Whether the calls c (from posting to completion of one collective) are those of `algo`. */
static bool ran(int op, const char *algo, calls_t c) {
  bool one = t_size == 1;
  if (op == OP_AR) {
    if (!strcmp(algo, "mpi"))
      return c.allreduce > 0 && !c.send && !c.allgatherv && !c.alltoall && !c.rsb;
    if (c.allreduce || c.alltoall || c.rsb || c.alltoallv) return false;
    if (!strcmp(algo, "shm") || !strcmp(algo, "shm_slices"))
      return !c.send && !c.allgatherv && !c.recv; /* memory, no MPI */
    if (!strcmp(algo, "ring")) return !c.allgatherv && (one ? !c.send : c.send > 0);
    if (!strcmp(algo, "ring_allgather"))
      return one ? !c.send && !c.allgatherv : c.send > 0 && c.allgatherv > 0;
    return false;
  }
  if (!strcmp(algo, "mpi"))
    return (c.rsb > 0 || c.alltoallv > 0) && !c.send && !c.alltoall && !c.allreduce;
  if (c.rsb || c.alltoallv || c.allreduce || c.allgatherv) return false;
  if (!strcmp(algo, "ring")) return !c.alltoall && (one ? !c.send : c.send > 0);
  if (!strcmp(algo, "alltoall")) return c.alltoall > 0 && !c.send;
  if (!strcmp(algo, "shm_slices")) return !c.alltoall && !c.send && !c.recv;
  return false;
}

static void expect_ran(const char *what, int op, const char *algo, calls_t c) {
  T_EXPECT(ran(op, algo, c),
           "%s: tcoll_last_algorithm() said \"%s\" but the MPI calls were Iallreduce %ld, "
           "Ireduce_scatter_block %ld, "
           "Ialltoall %ld, Ialltoallv %ld, Iallgatherv %ld, Isend %ld",
           what, algo, c.allreduce, c.rsb, c.alltoall, c.alltoallv, c.allgatherv, c.send);
}

/* ---------------------------------------------------------------- settings */

/* The algorithms each op offers (include/tcoll.h; the lists in lib/mpi/<op>/). */
static bool offered(int op, const char *algo) {
  if (!strcmp(algo, "mpi")) return true;
  if (op == OP_A2A) return !strcmp(algo, "scattered");
  if (!strcmp(algo, "ring")) return true;
  if (!strcmp(algo, "shm")) return op == OP_AR || op == OP_RD;
  if (!strcmp(algo, "shm_slices")) return op == OP_AR || op == OP_RS || op == OP_RD;
  return op == OP_AR ? !strcmp(algo, "ring_allgather") : op == OP_RS && !strcmp(algo, "alltoall");
}

/* tcoll_last_algorithm() is `want` (NULL: any algorithm op offers). */
static void expect_algo(const char *what, int op, const char *want) {
  const char *got = tcoll_last_algorithm();
  if (!got) {
    T_EXPECT(0, "%s: tcoll_last_algorithm() is NULL", what);
    return;
  }
  if (want)
    T_EXPECT(!strcmp(got, want), "%s: tcoll_last_algorithm() is \"%s\" (expected \"%s\")", what,
             got, want);
  else
    T_EXPECT(offered(op, got), "%s: tcoll_last_algorithm() is \"%s\", which %s does not offer",
             what, got,
             op == OP_AR    ? "all_reduce"
             : op == OP_RS  ? "reduce_scatter"
             : op == OP_A2A ? "all_to_all"
                            : "reduce");
}

/* The settings tried, with the algorithm each forces on all_reduce and reduce_scatter (NULL:
 * that op is left to the table). */
typedef struct forced {
  const char *spec, *ar, *rs;
} forced_t;
static const forced_t FORCED[] = {
    {"mpi", "mpi", "mpi"},
    {"all_reduce:ring", "ring", NULL},
    {"all_reduce:ring_allgather", "ring_allgather", NULL},
    {"reduce_scatter:ring", NULL, "ring"},
    {"reduce_scatter:alltoall", NULL, "alltoall"},
    {"all_reduce:ring,reduce_scatter:alltoall", "ring", "alltoall"},
    /* a bare name for every op, then one op overridden; spaces around items */
    {"mpi,reduce_scatter:ring", "mpi", "ring"},
    {" all_reduce:ring_allgather , reduce_scatter:ring ", "ring_allgather", "ring"},
    /* a later item for the same op wins */
    {"all_reduce:ring,all_reduce:mpi,reduce_scatter:alltoall", "mpi", "alltoall"},
    /* node-shared memory where the communicator has a segment, else (and for premul_sum) the
     * ring: any algorithm offered, checked against the MPI calls it made */
    {"all_reduce:shm_slices,reduce_scatter:shm_slices", NULL, NULL},
    {"auto", NULL, NULL},
};

/* ---------------------------------------------------------------- forced algorithms */

/* The ops and dtypes run under every setting: each kind of op, and the dtypes tcoll reduces in
 * its own code (float16, bfloat16, bool). */
static const struct {
  tcoll_dtype_t d;
  int k;
} OPS[] = {
    {TCOLL_FLOAT32, K_SUM},     {TCOLL_FLOAT32, K_AVG},  {TCOLL_FLOAT64, K_PREMUL},
    {TCOLL_FLOAT32, K_PREMUL},  {TCOLL_FLOAT32, K_MAX},  {TCOLL_INT32, K_BAND},
    {TCOLL_FLOAT16, K_SUM},     {TCOLL_BFLOAT16, K_SUM}, {TCOLL_FLOAT16, K_AVG},
    {TCOLL_BFLOAT16, K_PREMUL}, {TCOLL_INT64, K_PROD},   {TCOLL_UINT8, K_MIN},
    {TCOLL_INT16, K_BXOR},      {TCOLL_BOOL, K_BOR},
};

/* One all_reduce of n elements (out of place, in place or allocating), checked against the
 * closed form, its algorithm named `want` (NULL: any) and run. */
static void ar_case(const char *spec, const char *want, tcoll_dtype_t d, int k, tcoll_redop_t op,
                    double s, int variant, int ndim, const int64_t *shape) {
  char what[256];
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  snprintf(what, sizeof what, "algo \"%s\": all_reduce %s %s of %lld (%s)", spec, kname(k),
           tcoll_dtype_name(d), (long long)n,
           variant == 0   ? "out of place"
           : variant == 1 ? "in place"
                          : "allocating");
  rc_t c = rc_world(d, k, s);
  c.salt = 3;
  tcoll_tensor_t in = t_alloc(d, ndim, shape);
  t_set_all(&in, rc_fill, &c);
  tcoll_tensor_t out = variant == 0 ? t_alloc(d, ndim, shape) : variant == 1 ? in : t_empty();
  t_mpi_window_t before = calls_open();
  T_OK(tcoll_all_reduce(&in, op, NULL, &out));
  expect_algo(what, OP_AR, n == 0 ? "mpi" : want);
  T_OK(tcoll_wait(out.data));
  if (n > 0) expect_ran(what, OP_AR, tcoll_last_algorithm(), calls_since(&before));
  t_check_all(what, &out, rc_want, &c, 0);
  if (variant == 0) {
    char w2[300];
    snprintf(w2, sizeof w2, "%s: input", what);
    t_check_all(w2, &in, rc_orig, &c, 0);
  }
  if (variant != 1) tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}

/* One reduce_scatter along dim, checked likewise; `want` "mpi" where the composed algorithms do
 * not apply. */
static void rs_case(const char *spec, const char *want, tcoll_dtype_t d, int k, tcoll_redop_t op,
                    double s, bool alloc, int ndim, const int64_t *shape, int dim) {
  char what[256];
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  snprintf(what, sizeof what, "algo \"%s\": reduce_scatter %s %s of %lld along dim %d of %d", spec,
           kname(k), tcoll_dtype_name(d), (long long)n, dim, ndim);
  rc_t c = rc_world(d, k, s);
  c.salt = 5;
  tcoll_tensor_t in = t_alloc(d, ndim, shape);
  t_set_all(&in, rc_fill, &c);
  int64_t oshape[TCOLL_MAX_DIMS];
  memcpy(oshape, shape, (size_t)ndim * sizeof *shape);
  oshape[dim] /= t_size;
  tcoll_tensor_t out = alloc ? t_empty() : t_alloc(d, ndim, oshape);
  t_mpi_window_t before = calls_open();
  T_OK(tcoll_reduce_scatter(&in, op, dim, NULL, &out));
  expect_algo(what, OP_RS, n == 0 ? "mpi" : want);
  T_OK(tcoll_wait(out.data));
  if (n > 0) expect_ran(what, OP_RS, tcoll_last_algorithm(), calls_since(&before));
  rc_scatter(&c, shape, ndim, dim, t_rank);
  t_check_all(what, &out, rc_want, &c, 0);
  char w2[300];
  snprintf(w2, sizeof w2, "%s: input", what);
  c.scatter = false;
  t_check_all(w2, &in, rc_orig, &c, 0);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}

/* Every setting x every op kind: all_reduce of a count the ranks do not divide (out of place and
 * in place), reduce_scatter of 13 elements per rank. */
START_TEST(forced_ops) {
  t_save_algo();
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  int64_t ar_shape[1] = {37 * (int64_t)t_size + 5}, rs_shape[1] = {13 * (int64_t)t_size};
  for (size_t f = 0; f < T_LEN(FORCED); f++) {
    t_set_algo(FORCED[f].spec);
    for (size_t i = 0; i < T_LEN(OPS); i++) {
      tcoll_redop_t op = kop(OPS[i].k, premul);
      for (int v = 0; v < 2; v++)
        ar_case(FORCED[f].spec, FORCED[f].ar, OPS[i].d, OPS[i].k, op, 0.5, v, 1, ar_shape);
      rs_case(FORCED[f].spec, FORCED[f].rs, OPS[i].d, OPS[i].k, op, 0.5, i % 2, 1, rs_shape, 0);
    }
  }
  T_OK(tcoll_redop_destroy(premul));
  t_restore_algo();
}
END_TEST

/* Coalesced calls take, for each dtype group, the algorithm a single call of the group's bytes
 * would take: under every setting, a mixed-dtype all_reduce_coalesced (one group the ranks do not
 * divide) and reduce_scatter_coalesced (one tensor along dim 1), each checked against the closed
 * form, its algorithm named and run as said. */
#define COAL_T 3
static void coalesced_case(const forced_t *f, int k, tcoll_redop_t op, bool scatter) {
  const tcoll_dtype_t dt[COAL_T] = {TCOLL_FLOAT32, k == K_SUM ? TCOLL_INT32 : TCOLL_FLOAT64,
                                    TCOLL_FLOAT32};
  int64_t shapes[COAL_T][2] = {
      {37 * (int64_t)t_size + 5, 1}, {2, 3 * (int64_t)t_size}, {3 * (int64_t)t_size, 2}};
  if (scatter) shapes[0][0] = 8 * (int64_t)t_size;
  const int dims[COAL_T] = {0, 1, 0};
  tcoll_tensor_t in[COAL_T], out[COAL_T];
  rc_t c[COAL_T];
  for (int t = 0; t < COAL_T; t++) {
    c[t] = rc_world(dt[t], k, 0.5);
    c[t].salt = 100 * t;
    in[t] = t_alloc(dt[t], 2, shapes[t]);
    t_set_all(&in[t], rc_fill, &c[t]);
    out[t] = t_empty();
  }
  t_mpi_window_t before = calls_open();
  if (scatter)
    T_OK(tcoll_reduce_scatter_coalesced(in, COAL_T, op, dims, NULL, out));
  else
    T_OK(tcoll_all_reduce_coalesced(in, COAL_T, op, NULL, out));
  char what[256];
  snprintf(what, sizeof what, "algo \"%s\": %s_coalesced %s", f->spec,
           scatter ? "reduce_scatter" : "all_reduce", kname(k));
  expect_algo(what, scatter ? OP_RS : OP_AR, scatter ? f->rs : f->ar);
  for (int t = 0; t < COAL_T; t++) T_OK(tcoll_wait(out[t].data));
  expect_ran(what, scatter ? OP_RS : OP_AR, tcoll_last_algorithm(), calls_since(&before));
  for (int t = 0; t < COAL_T; t++) {
    char w2[300];
    snprintf(w2, sizeof w2, "%s: out[%d]", what, t);
    if (scatter) rc_scatter(&c[t], shapes[t], 2, dims[t], t_rank);
    t_check_all(w2, &out[t], rc_want, &c[t], 0);
    tcoll_tensor_free(&out[t]);
    tcoll_tensor_free(&in[t]);
  }
}

START_TEST(forced_coalesced) {
  t_save_algo();
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  for (size_t f = 0; f < T_LEN(FORCED); f++) {
    t_set_algo(FORCED[f].spec);
    for (int scatter = 0; scatter < 2; scatter++) {
      coalesced_case(&FORCED[f], K_SUM, TCOLL_SUM, scatter);
      coalesced_case(&FORCED[f], K_AVG, TCOLL_AVG, scatter);
      coalesced_case(&FORCED[f], K_PREMUL, premul, scatter);
    }
  }
  T_OK(tcoll_redop_destroy(premul));
  t_restore_algo();
}
END_TEST

/* all_to_all_single under each setting for it: uneven splits (rank r sends q + r + 1 rows of 3 to
 * rank q, so each pair agrees), a rank sending nothing to itself at the edges of the table, checked
 * element by element; "scattered" posts point-to-point messages only, "mpi" MPI_Ialltoallv. */
typedef struct a2a_ctx {
  int r;              /* the receiving rank */
  const int64_t *off; /* where each sender's rows start in the output */
} a2a_ctx_t;
/* Element j of row i of the block rank q sent to rank r: a value naming all four. */
static double a2a_value(int q, int r, int64_t i, int j) {
  return 1000.0 * q + 100.0 * r + 3.0 * (double)i + j;
}
static double a2a_in(int64_t e, void *p) {
  const a2a_ctx_t *c = p; /* c->r: this (sending) rank; c->off: its input offsets per receiver */
  int64_t row = e / 3;
  int q = 0;
  while (q + 1 < t_size && c->off[q + 1] <= row) q++;
  return a2a_value(c->r, q, row - c->off[q], (int)(e % 3));
}
static double a2a_out(int64_t e, void *p) {
  const a2a_ctx_t *c = p;
  int64_t row = e / 3;
  int q = 0;
  while (q + 1 < t_size && c->off[q + 1] <= row) q++;
  return a2a_value(q, c->r, row - c->off[q], (int)(e % 3));
}

START_TEST(forced_all_to_all) {
  t_save_algo();
  const char *specs[][2] = {{"all_to_all:scattered", "scattered"},
                            {"all_to_all:mpi", "mpi"},
                            {"mpi", "mpi"},
                            {"auto", NULL}};
  int64_t isz[T_MAX_G], osz[T_MAX_G], ioff[T_MAX_G + 1], ooff[T_MAX_G + 1];
  ioff[0] = ooff[0] = 0;
  for (int q = 0; q < t_size; q++) {
    isz[q] = q == t_rank ? 0 : q + t_rank + 1; /* nothing to itself: a block of no rows */
    osz[q] = q == t_rank ? 0 : q + t_rank + 1;
    ioff[q + 1] = ioff[q] + isz[q];
    ooff[q + 1] = ooff[q] + osz[q];
  }
  if (t_size == 1) isz[0] = osz[0] = 2, ioff[1] = ooff[1] = 2; /* alone: its own block only */
  for (size_t f = 0; f < T_LEN(specs); f++) {
    t_set_algo(specs[f][0]);
    int64_t ishape[2] = {ioff[t_size], 3};
    tcoll_tensor_t in = t_alloc(TCOLL_FLOAT64, 2, ishape), out = t_empty();
    a2a_ctx_t ci = {t_rank, ioff}, co = {t_rank, ooff};
    t_set_all(&in, a2a_in, &ci);
    t_mpi_window_t before = calls_open();
    T_OK(tcoll_all_to_all_single(&in, osz, isz, NULL, &out));
    char what[160];
    snprintf(what, sizeof what, "algo \"%s\": all_to_all_single", specs[f][0]);
    expect_algo(what, OP_A2A, specs[f][1]);
    const char *got = tcoll_last_algorithm();
    T_OK(tcoll_wait(out.data));
    calls_t c = calls_since(&before);
    if (!strcmp(got, "scattered"))
      T_EXPECT(!c.alltoallv && c.send == (t_size > 1 ? t_size - 1 : 0),
               "%s: Ialltoallv %ld, Isend %ld", what, c.alltoallv, c.send);
    else
      T_EXPECT(c.alltoallv == 1 && !c.send,
               "%s: Ialltoallv %ld, Isend %ld (expected the literal call)", what, c.alltoallv,
               c.send);
    T_EXPECT(out.shape[0] == ooff[t_size], "%s: %lld rows (expected %lld)", what,
             (long long)out.shape[0], (long long)ooff[t_size]);
    t_check_all(what, &out, a2a_out, &co, 0);
    tcoll_tensor_free(&out);
    tcoll_tensor_free(&in);
  }
  t_restore_algo();
}
END_TEST

/* The calls of the all-to-all family under `got`: "scattered" exactly `sends` MPI_Isend and `recvs`
 * MPI_Irecv and no all-to-all call; "mpi" `literal` MPI_Ialltoallv calls (one, or none where
 * nothing moves) and no point-to-point message. */
static void expect_a2a_calls(const char *what, const char *got, calls_t c, long sends, long recvs,
                             long literal) {
  if (!strcmp(got, "scattered"))
    T_EXPECT(!c.alltoallv && !c.alltoall && c.send == sends && c.recv == recvs,
             "%s: Ialltoallv %ld, Isend %ld, Irecv %ld (expected 0, %ld, %ld)", what, c.alltoallv,
             c.send, c.recv, sends, recvs);
  else
    T_EXPECT(c.alltoallv == literal && !c.send && !c.recv,
             "%s: Ialltoallv %ld, Isend %ld, Irecv %ld (expected the literal call: %ld, 0, 0)",
             what, c.alltoallv, c.send, c.recv, literal);
}

static const char *const a2a_specs[][2] = {{"all_to_all:scattered", "scattered"},
                                           {"all_to_all:mpi", "mpi"},
                                           {"mpi", "mpi"},
                                           {"auto", NULL}};

/* The list form has its own op: all_to_all's setting leaves it to the table, which takes the
 * scattered exchange at 2-4 ranks on Open MPI and MPICH (its literal mapping packs). */
/* Whether the MPI library's version string names it ("Open MPI", "MPICH"). */
static bool mpi_is(const char *name) {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  return strstr(v, name) != NULL;
}
static bool table_mpi(void) { return mpi_is("Open MPI") || mpi_is("MPICH"); }
static const char *list_table_choice(void) {
  return t_size >= 2 && t_size <= 4 && table_mpi() ? "scattered" : "mpi";
}

/* all_to_all (list) under each setting: rank q sends rank r list_n(q, r) elements of value
 * mv_val(tag 16 q + r, index), uneven per pair and empty where (q + 2 r) % 4 == 1 (also a rank's
 * block to itself at some rank counts); host tensors or emulated device ones (T_DEVICE). Sends
 * and receives: one per non-empty block to or from another rank. */
static int64_t list_n(int q, int r) { return (q + 2 * r) % 4 == 1 ? 0 : 2 * q + 3 * r + 1; }

START_TEST(forced_all_to_all_list) {
  t_save_algo();
  const char *const list_specs[][2] = {{"all_to_all_list:scattered", "scattered"},
                                       {"all_to_all_list:mpi", "mpi"},
                                       {"mpi", "mpi"},
                                       {"all_to_all:mpi", list_table_choice()},
                                       {"all_to_all:scattered,all_to_all_list:mpi", "mpi"},
                                       {"auto", list_table_choice()}};
  tcoll_dtype_t dts[] = {TCOLL_FLOAT64, TCOLL_INT16};
  for (size_t f = 0; f < T_LEN(list_specs); f++) {
    t_set_algo(list_specs[f][0]);
    for (size_t k = 0; k < T_LEN(dts); k++) {
      tcoll_tensor_t ins[T_MAX_G], outs[T_MAX_G];
      long sends = 0, recvs = 0;
      for (int p = 0; p < t_size; p++) {
        int64_t ni = list_n(t_rank, p), no = list_n(p, t_rank);
        ins[p] = t_alloc(dts[k], 1, &ni);
        mv_fill(&ins[p], 16 * t_rank + p, 0);
        outs[p] =
            k % 2 ? t_alloc(dts[k], 1, &no) : tcoll_tensor_make(NULL, dts[k], 1, &no, t_device());
        sends += p != t_rank && ni > 0;
        recvs += p != t_rank && no > 0;
      }
      t_mpi_window_t before = calls_open();
      T_OK(tcoll_all_to_all(ins, NULL, outs));
      char what[160];
      snprintf(what, sizeof what, "algo \"%s\": all_to_all %s", list_specs[f][0],
               tcoll_dtype_name(dts[k]));
      expect_algo(what, OP_A2A, list_specs[f][1]);
      const char *got = tcoll_last_algorithm();
      for (int p = 0; p < t_size; p++) T_OK(tcoll_wait(outs[p].data));
      expect_a2a_calls(what, got, calls_since(&before), sends, recvs, 1);
      for (int p = 0; p < t_size; p++) {
        char w2[200];
        snprintf(w2, sizeof w2, "%s: outs[%d]", what, p);
        mv_check_fill(w2, &outs[p], 16 * p + t_rank, 0);
        tcoll_tensor_free(&outs[p]);
        tcoll_tensor_free(&ins[p]);
      }
    }
  }
  t_restore_algo();
}
END_TEST

/* permute under each setting: shifts (shift 0: the identity, every rank a fixed point), the
 * reversal and neighbour swaps (fixed points where the rank count is odd), and an empty tensor.
 * Rank m's tensor holds mv_val(m, index); the scattered exchange sends one message to another
 * rank, copies at a fixed point and moves nothing when the tensor is empty. */
static void permute_algo_case(const char *spec, const char *want, const int *p, const char *kind,
                              int64_t n, tcoll_dtype_t dt) {
  int from = 0;
  while (p[from] != t_rank) from++;
  int64_t shape[2] = {n, 3};
  tcoll_tensor_t in = t_alloc(dt, 2, shape), out = t_empty();
  mv_fill(&in, t_rank, 0);
  t_mpi_window_t before = calls_open();
  T_OK(tcoll_permute(&in, p, NULL, &out));
  char what[160];
  snprintf(what, sizeof what, "algo \"%s\": permute %s of %lld rows (%s)", spec, kind, (long long)n,
           tcoll_dtype_name(dt));
  expect_algo(what, OP_A2A, want);
  const char *got = tcoll_last_algorithm();
  T_OK(tcoll_wait(out.data));
  bool moves = n > 0 && p[t_rank] != t_rank;
  expect_a2a_calls(what, got, calls_since(&before), moves, n > 0 && from != t_rank, n > 0);
  mv_check_fill(what, &out, from, 0);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}

START_TEST(forced_permute) {
  t_save_algo();
  int p[T_MAX_G];
  for (size_t f = 0; f < T_LEN(a2a_specs); f++) {
    const char *spec = a2a_specs[f][0], *want = a2a_specs[f][1];
    t_set_algo(spec);
    for (int shift = 0; shift < t_size; shift++) {
      for (int m = 0; m < t_size; m++) p[m] = (m + shift) % t_size;
      tcoll_dtype_t dt = shift % 2 ? TCOLL_INT32 : TCOLL_FLOAT16;
      permute_algo_case(spec, want, p, shift ? "shift" : "identity", 5 + shift, dt);
    }
    for (int m = 0; m < t_size; m++) p[m] = t_size - 1 - m;
    permute_algo_case(spec, want, p, "reversal", 4, TCOLL_FLOAT64);
    for (int m = 0; m < t_size; m++) p[m] = (m ^ 1) < t_size ? m ^ 1 : m;
    permute_algo_case(spec, want, p, "pair swap", 7, TCOLL_INT8);
    for (int m = 0; m < t_size; m++) p[m] = (m + 1) % t_size;
    permute_algo_case(spec, want, p, "shift, empty", 0, TCOLL_FLOAT32);
  }
  t_restore_algo();
}
END_TEST

/* shard_dim_all_to_all under each setting, for several (gather_dim, shard_dim) pairs of 2-D and
 * 3-D shapes and an empty one: the output against the closed form of move_util.h; the scattered
 * exchange sends one slab to every rank, itself included, the literal call is one
 * MPI_Ialltoallv (none where the tensor is empty). */
START_TEST(forced_shard_dim) {
  t_save_algo();
  int64_t P = t_size;
  static const struct {
    int ndim, g, s;
    int64_t shape[3]; /* dims multiplied by the rank count where marked negative */
  } cases[] = {{2, 0, 1, {3, -2}},    {2, 1, 0, {-2, 3}},    {2, 0, 0, {-3, 2}},
               {2, 1, 1, {2, -3}},    {3, 2, 1, {2, -2, 3}}, {3, 0, 2, {2, 3, -1}},
               {3, 1, 1, {2, -1, 2}}, {2, 0, 1, {0, -2}}};
  for (size_t f = 0; f < T_LEN(a2a_specs); f++) {
    t_set_algo(a2a_specs[f][0]);
    for (size_t i = 0; i < T_LEN(cases); i++) {
      int nd = cases[i].ndim, g = cases[i].g, sd = cases[i].s;
      int64_t ishape[3], oshape[3];
      for (int d = 0; d < nd; d++)
        ishape[d] = cases[i].shape[d] < 0 ? -cases[i].shape[d] * P : cases[i].shape[d];
      memcpy(oshape, ishape, sizeof oshape);
      oshape[sd] /= P;
      oshape[g] *= P;
      tcoll_dtype_t dt = i % 2 ? TCOLL_BFLOAT16 : TCOLL_INT32;
      tcoll_tensor_t in = t_alloc(dt, nd, ishape),
                     out = i % 3 ? t_alloc(dt, nd, oshape) : t_empty();
      mv_fill(&in, t_rank, 0);
      t_mpi_window_t before = calls_open();
      T_OK(tcoll_shard_dim_all_to_all(&in, g, sd, NULL, &out));
      char what[160], sh[64];
      snprintf(what, sizeof what, "algo \"%s\": shard_dim_all_to_all %s gather %d shard %d",
               a2a_specs[f][0], mv_shape_str(sh, sizeof sh, nd, ishape), g, sd);
      expect_algo(what, OP_A2A, a2a_specs[f][1]);
      const char *got = tcoll_last_algorithm();
      T_OK(tcoll_wait(out.data));
      bool moves = tcoll_tensor_numel(&in) > 0;
      expect_a2a_calls(what, got, calls_since(&before), moves ? t_size : 0, moves ? t_size : 0,
                       moves);
      MV_EXPECT_SHAPE(&out, nd, oshape, what);
      mv_shard_ctx c = {dt, nd, g, sd, t_size, t_rank, ishape, NULL};
      t_check_all(what, &out, mv_shard_expect, &c, 0);
      tcoll_tensor_free(&out);
      tcoll_tensor_free(&in);
    }
  }
  t_restore_algo();
}
END_TEST

/* The scattered exchange copies a rank's own block: one that does not fit where it lands is
 * refused before anything is posted (the literal call leaves that to MPI). Every rank makes the
 * same mistake, so no rank waits for another. */
START_TEST(scattered_own_block_too_large) {
  t_save_algo();
  t_set_algo("all_to_all:scattered,all_to_all_list:scattered");
  int64_t isz[T_MAX_G], osz[T_MAX_G], rows = 0, orows = 0;
  for (int q = 0; q < t_size; q++) {
    isz[q] = q == t_rank ? 3 : 1;
    osz[q] = q == t_rank ? 2 : 1;
    rows += isz[q];
    orows += osz[q];
  }
  int64_t shape[2] = {rows, 2}, oshape[2] = {orows, 2};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 2, shape), out = t_alloc(TCOLL_FLOAT32, 2, oshape);
  T_FAILS(tcoll_all_to_all_single(&in, osz, isz, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "own block");
  tcoll_tensor_t ins[T_MAX_G], outs[T_MAX_G];
  for (int p = 0; p < t_size; p++) {
    int64_t ni = p == t_rank ? 4 : 1, no = 1;
    ins[p] = t_alloc(TCOLL_FLOAT32, 1, &ni);
    outs[p] = t_alloc(TCOLL_FLOAT32, 1, &no);
  }
  T_FAILS(tcoll_all_to_all(ins, NULL, outs), TCOLL_ERR_INVALID_ARGUMENT, "own block");
  T_EXPECT(tcoll_pending_count() == 0, "refused calls left %zu works pending",
           tcoll_pending_count());
  for (int p = 0; p < t_size; p++) {
    tcoll_tensor_free(&ins[p]);
    tcoll_tensor_free(&outs[p]);
  }
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  t_restore_algo();
}
END_TEST

/* reduce under each setting for it, to every dst, out of place, in place and allocating, SUM,
 * AVG and PREMUL_SUM over a count the ranks do not divide: dst holds the closed form, the others
 * an output never written (zeros where tcoll allocated it); "ring" sends point-to-point messages
 * only, "mpi" calls MPI_Ireduce, "shm" and "shm_slices" call nothing (node-shared memory). */
START_TEST(forced_reduce) {
  t_save_algo();
  const char *specs[][2] = {
      {"reduce:ring", "ring"},    {"reduce:mpi", "mpi"}, {"mpi", "mpi"}, {"auto", NULL},
      {"reduce:shm", NULL}, /* shm where the communicator has a segment, else the literal call */
      {"reduce:shm_slices", NULL}}; /* where it has one, else the ring (and premul_sum) */
  tcoll_redop_t premul;
  T_OK(tcoll_redop_create_premul_sum(0.5, &premul));
  const struct {
    int k;
    tcoll_redop_t op;
    tcoll_dtype_t d;
  } ops[] = {{K_SUM, TCOLL_SUM, TCOLL_INT32},
             {K_AVG, TCOLL_AVG, TCOLL_FLOAT64},
             {K_PREMUL, premul, TCOLL_FLOAT32},
             {K_SUM, TCOLL_SUM, TCOLL_FLOAT16}};
  int64_t shape[1] = {37 * (int64_t)t_size + 5};
  for (size_t f = 0; f < T_LEN(specs); f++) {
    t_set_algo(specs[f][0]);
    for (int dst = 0; dst < t_size; dst++) {
      for (size_t i = 0; i < T_LEN(ops); i++) {
        int variant = (int)((dst + i) % 3); /* 0 out of place, 1 in place, 2 allocating */
        rc_t c = rc_world(ops[i].d, ops[i].k, 0.5);
        c.salt = 7 + dst;
        tcoll_tensor_t in = t_alloc(ops[i].d, 1, shape);
        t_set_all(&in, rc_fill, &c);
        tcoll_tensor_t out = variant == 0   ? t_alloc(ops[i].d, 1, shape)
                             : variant == 1 ? in
                                            : t_empty();
        t_mpi_window_t before = calls_open();
        T_OK(tcoll_reduce(&in, dst, ops[i].op, NULL, &out));
        char what[200];
        const char *how = variant == 0 ? "out of place" : variant == 1 ? "in place" : "allocating";
        snprintf(what, sizeof what, "algo \"%s\": reduce %s %s to %d (%s)", specs[f][0],
                 kname(ops[i].k), tcoll_dtype_name(ops[i].d), dst, how);
        expect_algo(what, OP_RD, specs[f][1]);
        const char *got = tcoll_last_algorithm();
        T_OK(tcoll_wait(out.data));
        calls_t n = calls_since(&before);
        if (!strcmp(got, "ring"))
          T_EXPECT(!n.reduce && (t_size == 1 ? !n.send : n.send > 0), "%s: Ireduce %ld, Isend %ld",
                   what, n.reduce, n.send);
        else if (!strcmp(got, "shm") || !strcmp(got, "shm_slices"))
          T_EXPECT(!n.reduce && !n.send && !n.recv, "%s: Ireduce %ld, Isend %ld (expected none)",
                   what, n.reduce, n.send);
        else
          T_EXPECT(n.reduce > 0 && !n.send,
                   "%s: Ireduce %ld, Isend %ld (expected the literal call)", what, n.reduce,
                   n.send);
        if (t_rank == dst) {
          t_check_all(what, &out, rc_want, &c, 0);
        } else if (variant == 2) {
          double zero = 0.0;
          t_check_all(what, &out, const_fill, &zero, 0);
        } else if (variant == 1) {
          t_check_all(what, &out, rc_orig, &c, 0); /* its input, untouched */
        }
        if (variant != 1) tcoll_tensor_free(&out);
        tcoll_tensor_free(&in);
      }
    }
  }
  T_OK(tcoll_redop_destroy(premul));
  t_restore_algo();
}
END_TEST

/* The algorithm of a reduce_scatter along a dim other than 0 when rs is chosen for dim 0: the
 * ring runs with interleaved blocks; the all-to-all form falls back to the literal call (whose
 * strided slabs are that exchange); NULL (the table's choice): either. */
static const char *strided_rs(const char *rs) {
  if (!rs) return NULL;
  return !strcmp(rs, "ring") ? "ring" : "mpi";
}

/* Shapes at the edges of each forced algorithm: fewer elements than ranks, a scalar, no elements
 * (the literal MPI call whatever is forced), several dims, reduce_scatter along other dims (the
 * ring on interleaved blocks, or the literal MPI call), an allocated output. */
START_TEST(forced_shapes) {
  t_save_algo();
  int64_t one[1] = {1}, few[1] = {t_size > 1 ? t_size - 1 : 1}, none[1] = {0},
          two[2] = {3, 2 * (int64_t)t_size + 1};
  int64_t rs1[1] = {t_size}, rs2[2] = {2 * (int64_t)t_size, 3},
          rs_strided[2] = {3, 2 * (int64_t)t_size}, rs_row[2] = {1, 4 * (int64_t)t_size},
          rs_none[2] = {0, 2 * (int64_t)t_size}, rs_three[3] = {2, 3 * (int64_t)t_size, 2};
  for (size_t f = 0; f < T_LEN(FORCED); f++) {
    const forced_t *F = &FORCED[f];
    t_set_algo(F->spec);
    ar_case(F->spec, F->ar, TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, 0, 1, one);
    ar_case(F->spec, F->ar, TCOLL_INT32, K_SUM, TCOLL_SUM, 1, 1, 1, few);
    ar_case(F->spec, F->ar, TCOLL_FLOAT64, K_MAX, TCOLL_MAX, 1, 2, 0, NULL);
    ar_case(F->spec, F->ar, TCOLL_FLOAT32, K_AVG, TCOLL_AVG, 1, 2, 2, two);
    ar_case(F->spec, "mpi", TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, 0, 1, none);
    rs_case(F->spec, F->rs, TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, false, 2, rs2, 0);
    rs_case(F->spec, F->rs, TCOLL_INT32, K_MAX, TCOLL_MAX, 1, true, 1, rs1, 0);
    rs_case(F->spec, strided_rs(F->rs), TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, true, 2, rs_strided, 1);
    rs_case(F->spec, strided_rs(F->rs), TCOLL_FLOAT64, K_AVG, TCOLL_AVG, 1, false, 3, rs_three, 1);
    rs_case(F->spec, "mpi", TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, true, 2, rs_none, 1);
    rs_case(F->spec, "mpi", TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, false, 1, none, 0);
    /* {1, 4 * size} along dim 1 is laid out as along dim 0: either way is right */
    rs_case(F->spec, NULL, TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, false, 2, rs_row, 1);
  }
  t_restore_algo();
}
END_TEST

/* One float32 reduce_scatter of `shape` along dim under the small limit, checked. */
static void small_limit_rs(const char *spec, int k, int ndim, const int64_t *shape, int dim) {
  char what[200];
  rc_t c = rc_world(TCOLL_FLOAT32, k, 1);
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, ndim, shape), rs = t_empty();
  t_set_all(&in, rc_fill, &c);
  T_OK(tcoll_reduce_scatter(&in, k, dim, NULL, &rs));
  T_OK(tcoll_wait(rs.data));
  snprintf(what, sizeof what, "max_count 7, algo \"%s\": reduce_scatter %s along dim %d", spec,
           kname(k), dim);
  rc_scatter(&c, shape, ndim, dim, t_rank);
  t_check_all(what, &rs, rc_want, &c, 0);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&rs);
}

/* A forced algorithm still gives exact results where the per-call element limit (TCOLL_MAX_COUNT)
 * is below the blocks' sizes. */
START_TEST(forced_small_limit) {
  t_save_algo();
  int64_t old = t_set_max_count(7);
  int64_t ar_shape[1] = {37 * (int64_t)t_size + 5}, rs_shape[1] = {13 * (int64_t)t_size},
          rs1_shape[2] = {4, 5 * (int64_t)t_size}, push_shape[2] = {3, 260 * (int64_t)t_size};
  for (size_t f = 0; f < T_LEN(FORCED); f++) {
    t_set_algo(FORCED[f].spec);
    for (int k = K_SUM; k <= K_AVG; k++) {
      char what[200];
      rc_t c = rc_world(TCOLL_FLOAT32, k, 1);
      tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, ar_shape), out = t_empty();
      t_set_all(&in, rc_fill, &c);
      T_OK(tcoll_all_reduce(&in, k, NULL, &out));
      T_OK(tcoll_wait(out.data));
      snprintf(what, sizeof what, "max_count 7, algo \"%s\": all_reduce %s", FORCED[f].spec,
               kname(k));
      t_check_all(what, &out, rc_want, &c, 0);
      tcoll_tensor_free(&out);
      tcoll_tensor_free(&in);
      small_limit_rs(FORCED[f].spec, k, 1, rs_shape, 0);
      /* along dim 1: interleaved blocks of 4 runs of 5, above the limit (the ring's messages
       * are split, its first one included) */
      small_limit_rs(FORCED[f].spec, k, 2, rs1_shape, 1);
      /* runs of 1040 B: under the ring, pushed with process_vm_writev where cross-memory attach
       * works, and the message that follows the push split into 112 pieces, whose tags pass the
       * address message's */
      small_limit_rs(FORCED[f].spec, k, 2, push_shape, 1);
    }
  }
  t_set_max_count(old);
  t_restore_algo();
}
END_TEST

/* tcoll_last_algorithm() follows the last posted collective: other collectives run the MPI call,
 * a refused call changes nothing, and each thread has its own. */
static void *other_thread(void *arg) {
  const char **seen = arg;
  seen[0] = tcoll_last_algorithm(); /* this thread has posted nothing yet */
  int64_t shape[1] = {4 * (int64_t)t_size};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_empty();
  int rc = tcoll_reduce_scatter(&in, TCOLL_SUM, 0, NULL, &out);
  seen[1] = tcoll_last_algorithm();
  if (!rc) rc = tcoll_wait(out.data);
  seen[2] = rc ? "(failed)" : "ok";
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  return NULL;
}

/* The table's choice is remembered per thread for the last query (a solver repeats one call):
 * the same call on another communicator, on a communicator made where a freed one was, or after
 * a change of the settings (TCOLL_MAX_COUNT decides whether the all-to-all form may run) is
 * chosen again, as on a communicator it was never remembered for. */
static const char *choice_on(tcoll_comm_t *c, int op) {
  int64_t shape[1] = {(int64_t)tcoll_comm_size(c) * 16384}; /* 64 KiB a rank: rows differ by
                                                              rank count and limit */
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_empty();
  T_OK(op == OP_AR ? tcoll_all_reduce(&in, TCOLL_SUM, c, &out)
                   : tcoll_reduce_scatter(&in, TCOLL_SUM, 0, c, &out));
  const char *got = tcoll_last_algorithm();
  T_OK(tcoll_wait(out.data));
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  return got;
}

static void expect_same_choice(const char *what, const char *got, const char *want) {
  T_EXPECT(got && want && !strcmp(got, want), "%s: \"%s\", on a fresh communicator \"%s\"", what,
           got ? got : "(null)", want ? want : "(null)");
}

START_TEST(choice_remembered_rightly) {
  t_save_algo();
  t_set_algo("auto");
  tcoll_comm_t *world = tcoll_comm_world(), *dup = NULL, *half = NULL;
  T_OK(tcoll_comm_split(world, 0, t_rank, &dup));
  for (int op = OP_AR; op <= OP_RS; op++) {
    /* (each call in a statement of its own: the last one is what is remembered) */
    const char *w = choice_on(world, op), *got = choice_on(world, op);
    expect_same_choice("the same call again", got, w);
    got = choice_on(dup, op);
    expect_same_choice("on a duplicate", got, w);
    /* where a communicator of two was freed, one of every rank */
    T_OK(tcoll_comm_split(world, t_rank < 2, t_rank, &half));
    choice_on(half, op);
    T_OK(tcoll_comm_free(&half));
    tcoll_comm_t *again = NULL;
    T_OK(tcoll_comm_split(world, 0, t_rank, &again));
    got = choice_on(again, op);
    expect_same_choice("on a communicator made after one was freed", got, w);
    T_OK(tcoll_comm_free(&again));
    /* a limit of 64 elements a call */
    tcoll_config_t cfg, low;
    T_OK(tcoll_get_config(&cfg));
    choice_on(world, op);
    low = cfg;
    low.max_count = 64;
    T_OK(tcoll_set_config(&low));
    got = choice_on(world, op);
    expect_same_choice("after TCOLL_MAX_COUNT changed", got, choice_on(dup, op));
    choice_on(world, op);
    T_OK(tcoll_set_config(&cfg));
    got = choice_on(world, op);
    expect_same_choice("after it changed back", got, w);
  }
  T_OK(tcoll_comm_free(&dup));
  t_restore_algo();
}
END_TEST

START_TEST(last_algorithm_follows) {
  t_save_algo();
  t_set_algo("all_reduce:ring_allgather,reduce_scatter:alltoall,broadcast:mpi");
  int64_t shape[1] = {3 * (int64_t)t_size + 1};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_empty(), b = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  expect_algo("forced all_reduce", OP_AR, "ring_allgather");
  T_OK(tcoll_wait(out.data));
  expect_algo("after its wait", OP_AR, "ring_allgather");
  tcoll_tensor_t bad = t_empty();
  int rc = tcoll_all_reduce(&in, 99, NULL, &bad);
  T_EXPECT(rc == TCOLL_ERR_INVALID_ARGUMENT, "all_reduce with op 99 returned %s",
           tcoll_status_string(rc));
  expect_algo("after a refused all_reduce", OP_AR, "ring_allgather");
  T_OK(tcoll_broadcast(&in, 0, NULL, &b));
  expect_algo("broadcast", OP_AR, "mpi");
  T_OK(tcoll_wait(b.data));
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait(out.data));
  const char *seen[3] = {NULL, NULL, NULL};
  pthread_t th;
  T_EXPECT(pthread_create(&th, NULL, other_thread, seen) == 0, "pthread_create failed");
  pthread_join(th, NULL);
  T_EXPECT(seen[0] && !strcmp(seen[0], "mpi"),
           "a new thread's tcoll_last_algorithm() is \"%s\" (expected \"mpi\")",
           seen[0] ? seen[0] : "(null)");
  T_EXPECT(seen[1] && !strcmp(seen[1], "alltoall"),
           "the other thread's reduce_scatter: \"%s\" (expected alltoall)",
           seen[1] ? seen[1] : "(null)");
  T_EXPECT(seen[2] && !strcmp(seen[2], "ok"), "the other thread's reduce_scatter %s",
           seen[2] ? seen[2] : "(null)");
  expect_algo("this thread, after the other thread's reduce_scatter", OP_AR, "ring_allgather");
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&b);
  t_restore_algo();
}
END_TEST

/* The table along a dim other than 0 (TCOLL_ALGO=auto): where it picks the all-to-all form, which
 * serves contiguous blocks only, a host input below 1 MiB takes the MPI path (the strided slabs)
 * and one of 1 MiB or more the ring (Open MPI at 4 ranks); where it picks the ring (2 ranks; 3
 * from 512 KiB on Open MPI), the ring runs along any dim. At 2 ranks with a node-shared segment
 * shm_slices runs instead at every size, on both MPIs.
 * Forcing the all-to-all form keeps the MPI path. Device tensors keep the MPI path (staged or
 * pipelined). */
static const char *table_other_dims(size_t bytes, bool device) {
  bool ompi = mpi_is("Open MPI"), mpich = !ompi && mpi_is("MPICH");
  const char *segments = getenv("TCOLL_SHM");
  bool shm = t_size == 2 && !(segments && !strcmp(segments, "0"));
  if (shm && (mpich || ompi)) return "shm_slices";
  if (t_size == 2 && (ompi || mpich)) return "ring";
  if (ompi && t_size == 3 && bytes >= (512 << 10)) return "ring";
  if (ompi && t_size == 4 && bytes >= (1 << 20) && !device) return "ring";
  return "mpi";
}

START_TEST(table_other_dims_rs) {
  t_save_algo();
  t_set_algo("auto");
  int64_t big[2] = {256, 256 * (int64_t)t_size},
          small[2] = {128, 256 * (int64_t)t_size}; /* 256 / 128 KiB x size */
  size_t bbig = (size_t)big[0] * (size_t)big[1] * 4,
         bsmall = (size_t)small[0] * (size_t)small[1] * 4;
  bool dev = t_device() != TCOLL_HOST;
  rs_case("auto", table_other_dims(bbig, dev), TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, false, 2, big,
          1);
  rs_case("auto", table_other_dims(bsmall, dev), TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, true, 2, small,
          1);
  t_set_algo("reduce_scatter:alltoall");
  rs_case("reduce_scatter:alltoall", "mpi", TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, false, 2, big, 1);
  t_restore_algo();
}
END_TEST

/* The rows measured with a core per rank at 8 and 16 ranks (Open MPI; test/meson.build runs this
 * case alone at 8 ranks): all_reduce takes the ring from 2 MiB, reduce_scatter the all-to-all form
 * from 32 KiB and the ring from 1 MiB; below, MPI's call. Results against the closed form. */
static const char *table_many(int op, size_t bytes) {
  if (!mpi_is("Open MPI") || t_size < 8 || t_size > 16) return NULL;
  if (op == OP_AR) return bytes >= (2 << 20) ? "ring" : "mpi";
  return bytes >= (1 << 20) ? "ring" : bytes >= (32 << 10) ? "alltoall" : "mpi";
}

START_TEST(table_many_ranks) {
  if (!table_many(OP_AR, 0)) return; /* other MPIs and rank counts: the suite's other tests */
  t_save_algo();
  t_set_algo("auto");
  const size_t sizes[] = {16 << 10, 64 << 10, 512 << 10, 1 << 20, 2 << 20};
  for (size_t i = 0; i < T_LEN(sizes); i++) {
    int64_t n[1] = {(int64_t)(sizes[i] / 4)};
    ar_case("auto", table_many(OP_AR, sizes[i]), TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, 0, 1, n);
    rs_case("auto", table_many(OP_RS, sizes[i]), TCOLL_FLOAT32, K_SUM, TCOLL_SUM, 1, false, 1, n,
            0);
  }
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- the same bits everywhere */

/* Rank r's element i: non-integers of very different magnitudes on different ranks (the
 * magnitude of an element cycles with r), so that the order of additions shows in the bits. */
typedef struct bits_ctx {
  tcoll_dtype_t d;
  int r;
} bits_ctx_t;

static double bits_val(tcoll_dtype_t d, int r, int64_t i) {
  static const double s32[3] = {1, 1e-3, 1e4}, s64[3] = {1, 1e-8, 1e8};
  double v =
      sin((double)r * 1000.0 + (double)i) * 1e3 * (d == TCOLL_FLOAT32 ? s32 : s64)[(i + r) % 3];
  return d == TCOLL_FLOAT32 ? (double)(float)v : v;
}
static double bits_fill(int64_t i, void *p) {
  const bits_ctx_t *c = p;
  return bits_val(c->d, c->r, i);
}

/* The output's bytes, on the host (malloc'ed). */
static void *host_bytes(const tcoll_tensor_t *t) {
  size_t nb = tcoll_tensor_nbytes(t);
  void *buf = malloc(nb ? nb : 1);
  if (t->device == TCOLL_HOST) {
    memcpy(buf, t->data, nb);
  } else {
    tcoll_tensor_t h = t_host(t->dtype, t->ndim, t->shape);
    T_OK(tcoll_tensor_copy(&h, t));
    memcpy(buf, h.data, nb);
    tcoll_tensor_free(&h);
  }
  return buf;
}

/* Elements of a that differ bitwise from b. */
static int64_t differing(const void *a, const void *b, int64_t n, size_t es) {
  int64_t bad = 0;
  const char *x = a, *y = b;
  for (int64_t i = 0; i < n; i++) bad += memcmp(x + (size_t)i * es, y + (size_t)i * es, es) != 0;
  return bad;
}

/* Near the exact sum (the bits themselves depend on the algorithm's order). */
static void check_near(const char *what, const void *got, tcoll_dtype_t d, int64_t n) {
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    long double want = 0, mag = 0;
    for (int r = 0; r < t_size; r++) {
      want += bits_val(d, r, i);
      mag += fabsl((long double)bits_val(d, r, i));
    }
    double g = d == TCOLL_FLOAT32 ? ((const float *)got)[i] : ((const double *)got)[i];
    long double tol = mag * t_size * (d == TCOLL_FLOAT32 ? 0x1p-23L : 0x1p-52L);
    if (fabsl((long double)g - want) > tol && bad++ < 3)
      t_fail_at(__FILE__, __LINE__, "%s: element %lld is %.17g, expected %.17Lg within %.3Lg", what,
                (long long)i, g, want, tol);
  }
}

/* How many elements the sum over ranks gives different bits for in rank order and in reverse
 * order: above 0, the data can tell orders apart. */
static int64_t order_sensitive(tcoll_dtype_t d, int64_t n) {
  int64_t diff = 0;
  for (int64_t i = 0; i < n; i++) {
    if (d == TCOLL_FLOAT32) {
      float a = 0, b = 0;
      for (int r = 0; r < t_size; r++) a += (float)bits_val(d, r, i);
      for (int r = t_size - 1; r >= 0; r--) b += (float)bits_val(d, r, i);
      diff += a != b;
    } else {
      double a = 0, b = 0;
      for (int r = 0; r < t_size; r++) a += bits_val(d, r, i);
      for (int r = t_size - 1; r >= 0; r--) b += bits_val(d, r, i);
      diff += a != b;
    }
  }
  return diff;
}

/* all_reduce SUM of non-integer values under each algorithm: every rank's output has the bits of
 * rank 0's, and the same call again (in place this time) gives the same bits. */
START_TEST(same_bits) {
  t_save_algo();
  static const char *const specs[] = {"auto", "mpi", "all_reduce:ring",
                                      "all_reduce:ring_allgather"};
  const tcoll_dtype_t dts[] = {TCOLL_FLOAT32, TCOLL_FLOAT64};
  const int64_t counts[] = {1, t_size - 1, 1000 * (int64_t)t_size + 3};
  for (size_t d = 0; d < T_LEN(dts); d++) {
    if (t_size >= 3)
      T_EXPECT(order_sensitive(dts[d], counts[2]) > counts[2] / 10,
               "%s: the test data gives the same sum in both orders too often (%lld of %lld "
               "elements differ)",
               tcoll_dtype_name(dts[d]), (long long)order_sensitive(dts[d], counts[2]),
               (long long)counts[2]);
    for (size_t s = 0; s < T_LEN(specs); s++) {
      t_set_algo(specs[s]);
      for (size_t c = 0; c < T_LEN(counts); c++) {
        char what[200];
        int64_t n = counts[c], shape[1] = {n};
        size_t es = tcoll_dtype_size(dts[d]);
        snprintf(what, sizeof what, "algo \"%s\": all_reduce sum %s of %lld", specs[s],
                 tcoll_dtype_name(dts[d]), (long long)n);
        bits_ctx_t ctx = {dts[d], t_rank};
        tcoll_tensor_t in = t_alloc(dts[d], 1, shape), out = t_empty();
        t_set_all(&in, bits_fill, &ctx);
        T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
        char algo[32];
        snprintf(algo, sizeof algo, "%s", tcoll_last_algorithm());
        T_OK(tcoll_wait(out.data));
        void *mine = host_bytes(&out), *root = malloc(n ? (size_t)n * es : 1);
        if (t_rank == 0) memcpy(root, mine, (size_t)n * es);
        MPI_Bcast(root, (int)((size_t)n * es), MPI_BYTE, 0, MPI_COMM_WORLD);
        int64_t bad = differing(mine, root, n, es);
        T_EXPECT(bad == 0, "%s (%s): %lld of %lld elements differ from rank 0's bits", what, algo,
                 (long long)bad, (long long)n);
        check_near(what, mine, dts[d], n);
        /* again, in place */
        T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &in)); /* in's data is still this rank's */
        T_EXPECT(!strcmp(tcoll_last_algorithm(), algo),
                 "%s: the repeated call ran %s, the first %s", what, tcoll_last_algorithm(), algo);
        T_OK(tcoll_wait(in.data));
        void *again = host_bytes(&in);
        bad = differing(again, mine, n, es);
        T_EXPECT(bad == 0, "%s (%s): repeated in place, %lld of %lld elements have other bits",
                 what, algo, (long long)bad, (long long)n);
        free(again);
        /* and once more out of place into the same output */
        t_set_all(&in, bits_fill, &ctx);
        T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
        T_OK(tcoll_wait(out.data));
        again = host_bytes(&out);
        bad = differing(again, mine, n, es);
        T_EXPECT(bad == 0, "%s (%s): repeated, %lld of %lld elements have other bits", what, algo,
                 (long long)bad, (long long)n);
        free(again);
        free(mine);
        free(root);
        tcoll_tensor_free(&in);
        tcoll_tensor_free(&out);
      }
    }
  }
  t_restore_algo();
}
END_TEST

/* reduce_scatter SUM of the same data under each algorithm: a repeated call gives the same bits. */
START_TEST(same_bits_reduce_scatter) {
  t_save_algo();
  static const char *const specs[] = {"auto", "mpi", "reduce_scatter:ring",
                                      "reduce_scatter:alltoall"};
  int64_t shape[1] = {501 * (int64_t)t_size};
  for (size_t s = 0; s < T_LEN(specs); s++) {
    t_set_algo(specs[s]);
    bits_ctx_t ctx = {TCOLL_FLOAT32, t_rank};
    tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_empty();
    t_set_all(&in, bits_fill, &ctx);
    void *first = NULL;
    for (int rep = 0; rep < 2; rep++) {
      T_OK(tcoll_reduce_scatter(&in, TCOLL_SUM, 0, NULL, &out));
      T_OK(tcoll_wait(out.data));
      void *b = host_bytes(&out);
      if (!first) {
        first = b;
        continue;
      }
      int64_t bad = differing(b, first, 501, 4);
      T_EXPECT(bad == 0,
               "algo \"%s\" (%s): repeated reduce_scatter, %lld of 501 elements have other bits",
               specs[s], tcoll_last_algorithm(), (long long)bad);
      free(b);
    }
    free(first);
    tcoll_tensor_free(&in);
    tcoll_tensor_free(&out);
  }
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- bad settings */

START_TEST(bad_settings) {
  t_save_algo();
  const char *known = "all_reduce:ring_allgather,reduce_scatter:alltoall";
  t_set_algo(known);
  static const struct {
    const char *value;
    const char *needles[3];
  } bad[] = {
      {"all_reduce:nope", {"\"nope\"", "all_reduce", "auto, mpi, ring, ring_allgather"}},
      {"nope:ring", {"\"nope\"", "unknown collective", "all_reduce"}},
      {"reduce_scatter:ring_allgather",
       {"\"ring_allgather\"", "reduce_scatter", "auto, mpi, ring, alltoall"}},
      {"ring", {"\"ring\"", "auto or mpi", "op:algorithm"}},
      {"all_reduce", {"\"all_reduce\"", "auto or mpi", "op:algorithm"}},
      {"all_reduce:", {"\"\"", "all_reduce", "ring_allgather"}},
      {"bogus", {"\"bogus\"", "expected", "op:algorithm"}},
      /* the valid first item must not take effect either */
      {"all_reduce:ring,reduce_scatter:nope", {"\"nope\"", "reduce_scatter", "alltoall"}},
      {"all_reduce:ring:ring", {"\"ring:ring\"", "all_reduce", "expected"}},
  };
  int64_t shape[1] = {5 * (int64_t)t_size + 2};
  for (size_t i = 0; i < T_LEN(bad); i++) {
    tcoll_config_t before, c, after;
    T_OK(tcoll_get_config(&before));
    c = before;
    snprintf(c.algo, sizeof c.algo, "%s", bad[i].value);
    c.max_count = 77; /* refused along with the rest */
    int rc = tcoll_set_config(&c);
    const char *m = tcoll_last_error();
    T_EXPECT(rc == TCOLL_ERR_INVALID_ARGUMENT,
             "algo \"%s\": tcoll_set_config returned %s (expected refusal)", bad[i].value,
             tcoll_status_string(rc));
    T_EXPECT(t_contains(m, "config->algo"),
             "algo \"%s\": the message does not name config->algo: \"%s\"", bad[i].value, m);
    for (int k = 0; k < 3; k++)
      T_EXPECT(t_contains(m, bad[i].needles[k]), "algo \"%s\": the message lacks %s: \"%s\"",
               bad[i].value, bad[i].needles[k], m);
    T_OK(tcoll_get_config(&after));
    T_EXPECT(!strcmp(after.algo, known), "algo \"%s\" refused, yet the setting is now \"%s\"",
             bad[i].value, after.algo);
    T_EXPECT(after.max_count == before.max_count,
             "algo \"%s\" refused, yet max_count changed to %lld", bad[i].value,
             (long long)after.max_count);
    /* still usable, with the setting in force before */
    rc_t cc = rc_world(TCOLL_FLOAT32, K_SUM, 1);
    tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_empty();
    t_set_all(&in, rc_fill, &cc);
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
    expect_algo("all_reduce after a refused setting", OP_AR, "ring_allgather");
    T_OK(tcoll_wait(out.data));
    t_check_all("all_reduce after a refused setting", &out, rc_want, &cc, 0);
    tcoll_tensor_free(&in);
    tcoll_tensor_free(&out);
  }
  /* no terminating NUL in the field */
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  memset(c.algo, 'm', sizeof c.algo);
  T_FAILS(tcoll_set_config(&c), TCOLL_ERR_INVALID_ARGUMENT,
          "config->algo is not a terminated string");
  char now[256];
  t_get_algo(now);
  T_EXPECT(!strcmp(now, known), "an unterminated algo was refused, yet the setting is now \"%s\"",
           now);
  /* the longest that fits (255 bytes) is accepted: "mpi" then separators */
  T_OK(tcoll_get_config(&c));
  memset(c.algo, ',', sizeof c.algo);
  memcpy(c.algo, "mpi", 3);
  c.algo[sizeof c.algo - 1] = '\0';
  T_OK(tcoll_set_config(&c));
  t_restore_algo();
}
END_TEST

/* The configuration in force at the start is TCOLL_ALGO's value, or "auto" without it. */
START_TEST(config_from_env) {
  const char *env = getenv("TCOLL_ALGO");
  char now[256];
  t_get_algo(now);
  const char *want = env && *env ? env : "auto";
  T_EXPECT(!strcmp(now, want), "config.algo is \"%s\" at the start (expected \"%s\")", now, want);
}
END_TEST

/* ---------------------------------------------------------------- the INFO log */

typedef struct log_call {
  int op;
} log_call_t;

static void one_call(void *p) {
  const log_call_t *lc = p;
  int64_t shape[1] = {6 * (int64_t)t_size};
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), out = t_empty();
  t_set_debug(TCOLL_LOG_INFO);
  T_OK(lc->op == OP_AR ? tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out)
                       : tcoll_reduce_scatter(&in, TCOLL_SUM, 0, NULL, &out));
  T_OK(tcoll_wait(out.data));
  t_set_debug(TCOLL_LOG_WARN);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

/* A line of text holding both `op` and the words "algorithm NAME". */
static bool logged(const char *text, const char *op, const char *algo) {
  char words[64];
  snprintf(words, sizeof words, "algorithm %s", algo);
  for (const char *line = text; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[1400];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
    if (t_has_word(buf, op) && t_has_word(buf, words)) return true;
    line = end ? end + 1 : NULL;
  }
  return false;
}

START_TEST(info_log_names_algorithm) {
  t_save_algo();
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  tcoll_log_level_t old = c.debug;
  static const struct {
    const char *spec;
    int op;
    const char *algo;
  } cases[] = {
      {"all_reduce:ring", OP_AR, "ring"},
      {"all_reduce:ring_allgather", OP_AR, "ring_allgather"},
      {"mpi", OP_AR, "mpi"},
      {"reduce_scatter:ring", OP_RS, "ring"},
      {"reduce_scatter:alltoall", OP_RS, "alltoall"},
      {"mpi", OP_RS, "mpi"},
  };
  for (size_t i = 0; i < T_LEN(cases); i++) {
    t_set_algo(cases[i].spec);
    log_call_t lc = {cases[i].op};
    const char *text = t_capture_stderr(one_call, &lc);
    const char *op = cases[i].op == OP_AR ? "all_reduce" : "reduce_scatter";
    T_EXPECT(logged(text, op, cases[i].algo),
             "algo \"%s\": no INFO line of %s names \"algorithm %s\"; got:\n%s", cases[i].spec, op,
             cases[i].algo, text);
  }
  t_set_debug(old);
  t_restore_algo();
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("algo");
  TCase *tc = t_tcase("algo");
  tcase_add_test(tc, config_from_env);
  tcase_add_test(tc, forced_ops);
  tcase_add_test(tc, forced_shapes);
  tcase_add_test(tc, forced_coalesced);
  tcase_add_test(tc, forced_all_to_all);
  tcase_add_test(tc, forced_all_to_all_list);
  tcase_add_test(tc, forced_permute);
  tcase_add_test(tc, forced_shard_dim);
  tcase_add_test(tc, scattered_own_block_too_large);
  tcase_add_test(tc, forced_reduce);
  tcase_add_test(tc, forced_small_limit);
  tcase_add_test(tc, last_algorithm_follows);
  tcase_add_test(tc, choice_remembered_rightly);
  tcase_add_test(tc, same_bits);
  tcase_add_test(tc, same_bits_reduce_scatter);
  tcase_add_test(tc, table_other_dims_rs);
  tcase_add_test(tc, bad_settings);
  tcase_add_test(tc, info_log_names_algorithm);
  suite_add_tcase(s, tc);
  TCase *many = t_tcase("many_ranks"); /* alone at 8 ranks: CK_RUN_CASE=many_ranks */
  tcase_add_test(many, table_many_ranks);
  suite_add_tcase(s, many);
  return s;
}
