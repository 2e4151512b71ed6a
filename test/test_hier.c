/* The two-level algorithms ("hier", lib/node/hier.h, lib/mpi/hier.h): on a communicator whose
 * ranks span several nodes, all_reduce reduces each node to its leader through its own segment,
 * the leaders all-reduce through MPI, and each leader publishes the result to its node; reduce
 * and broadcast go the same way (up, across, down where needed). Nodes here are what the MPI's
 * shared split says: MPICH's pretend nodes (MPIR_CVAR_NUM_CLIQUES=2: the -cliques runs) or ranks in
 * two network namespaces with hostnames of their own (scripts/netns-run with NETNS_SHM=1: the
 * netns-hier run). Where all ranks share one node (the plain runs) hier never runs, and forcing
 * it gives the other algorithms' results.
 *
 * Checked: the table picks hier for small vectors exactly where the test's own reading of the
 * nodes says there are several (T_EXPECT_HIER=1: there must be); every integer and floating
 * dtype with sum, max, min, product, avg and premul_sum, in place and out of place, at sizes in a
 * line, in a slot and past what a slot holds (chunk by chunk, several chunks), against
 * closed forms; the same bits on every rank; many calls in flight at once interleaved with
 * broadcasts and reduce_scatters (the leaders' MPI calls keep their order: a leader alone on its
 * node could post before the others' earlier calls); communicators split from world by parity and
 * reversed (two levels or one node, whatever they span); broadcast and reduce (AVG, MAX) from
 * every root, leader or not, in place and not. Every test that sets the algorithm
 * puts back the setting it found. */
#include "algo_util.h"

#include <math.h>

#define TC_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---------------------------------------------------------------- what the test expects */

/* How many nodes world's ranks are on, by the MPI's shared split (0: its groups do not make a
 * partition, as Open MPI's over two namespaces of one hostname). Collective. */
static int count_nodes(void) {
  MPI_Comm node;
  int first = t_rank, size = 1;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t_rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &size);
  MPI_Bcast(&first, 1, MPI_INT, 0, node); /* its lowest world rank */
  MPI_Comm_free(&node);
  int mine[2] = {first, size}, *all = malloc(2 * sizeof(int) * (size_t)t_size), nodes = 0;
  MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
  for (int q = 0; q < t_size; q++) {
    int named = 0;
    for (int r = 0; r < t_size; r++) named += all[2 * r] == all[2 * q];
    if (named != all[2 * q + 1] || all[2 * all[2 * q]] != all[2 * q]) {
      free(all);
      return 0;
    }
    nodes += all[2 * q] == q;
  }
  free(all);
  return nodes;
}

/* Whether world runs hier for small vectors: several nodes, not all of one rank, segments on. */
static bool hier_expected(void) {
  static int known = -1;
  if (known < 0) {
    const char *shm = getenv("TCOLL_SHM");
    int nodes = count_nodes();
    known = nodes >= 2 && nodes < t_size && !(shm && !strcmp(shm, "0"));
  }
  return known;
}

static bool is_hier(void) { return !strcmp(tcoll_last_algorithm(), "hier"); }

/* ---------------------------------------------------------------- values */

/* Rank r's element i: small integers, so that every dtype holds them and float sums are exact in
 * any order; products stay small (1 or 2). */
static double value(int r, int64_t i, tcoll_redop_t op) {
  if (op == TCOLL_PRODUCT) return (r + i) % 3 == 0 ? 2 : 1;
  return (double)((r * 7 + i * 3) % 11 + 1);
}

/* The reduction of value(r, i) over ranks 0..p-1 (premul: each scaled by it first). */
static double expected(int p, int64_t i, tcoll_redop_t op, double premul) {
  double acc = value(0, i, op) * premul;
  for (int r = 1; r < p; r++) {
    double v = value(r, i, op) * premul;
    switch (op) {
    case TCOLL_MAX: acc = fmax(acc, v); break;
    case TCOLL_MIN: acc = fmin(acc, v); break;
    case TCOLL_PRODUCT: acc *= v; break;
    default: acc += v; break;
    }
  }
  return op == TCOLL_AVG ? acc / p : acc;
}

static void put(void *buf, tcoll_dtype_t d, int64_t i, double v) {
  switch (d) {
  case TCOLL_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case TCOLL_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case TCOLL_FLOAT32: ((float *)buf)[i] = (float)v; break;
  default: ((double *)buf)[i] = v; break;
  }
}

static double get(const void *buf, tcoll_dtype_t d, int64_t i) {
  switch (d) {
  case TCOLL_INT32: return ((const int32_t *)buf)[i];
  case TCOLL_INT64: return (double)((const int64_t *)buf)[i];
  case TCOLL_FLOAT32: return ((const float *)buf)[i];
  default: return ((const double *)buf)[i];
  }
}

/* Whether buf holds the same bytes on every rank of comm (rank 0's, broadcast). Collective. */
static bool same_everywhere(const void *buf, size_t bytes, MPI_Comm comm) {
  char *theirs = malloc(bytes ? bytes : 1);
  int me;
  MPI_Comm_rank(comm, &me);
  memcpy(theirs, buf, bytes);
  MPI_Bcast(theirs, (int)bytes, MPI_BYTE, 0, comm);
  int same = !memcmp(theirs, buf, bytes), all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, comm);
  free(theirs);
  return all;
}

typedef struct call {
  tcoll_dtype_t d;
  int64_t n;
  tcoll_redop_t op;
  double premul; /* 0: op itself; else a premul_sum by it */
  bool inplace;
} call_t;

/* One all_reduce of c on comm; checks the values, the bits across ranks, and the algorithm
 * (want: "hier", or NULL: anything). */
static void run_one(const call_t *c, tcoll_comm_t *comm, const char *want) {
  int p = tcoll_comm_size(comm), r = tcoll_comm_rank(comm);
  size_t esz = tcoll_dtype_size(c->d), bytes = (size_t)c->n * esz;
  void *in = malloc(bytes), *out = c->inplace ? in : malloc(bytes);
  tcoll_redop_t op = c->op;
  if (c->premul != 0) T_OK(tcoll_redop_create_premul_sum(c->premul, &op));
  for (int64_t i = 0; i < c->n; i++) put(in, c->d, i, value(r, i, c->op));
  if (!c->inplace) memset(out, 0xEE, bytes);
  tcoll_tensor_t ti = tcoll_tensor_make(in, c->d, 1, &c->n, TCOLL_HOST);
  tcoll_tensor_t to = tcoll_tensor_make(out, c->d, 1, &c->n, TCOLL_HOST);
  T_OK(tcoll_all_reduce(&ti, op, comm, &to));
  const char *algo = tcoll_last_algorithm();
  T_OK(tcoll_wait(out));
  if (want)
    T_EXPECT(!strcmp(algo, want), "%s x %lld, %s: algorithm \"%s\" (expected \"%s\")",
             tcoll_dtype_name(c->d), (long long)c->n, tcoll_redop_name(op), algo, want);
  int bad = 0;
  for (int64_t i = 0; i < c->n; i++) {
    double want_v = expected(p, i, c->op, c->premul != 0 ? c->premul : 1);
    double got = get(out, c->d, i);
    if (c->d == TCOLL_INT32 || c->d == TCOLL_INT64) want_v = trunc(want_v);
    if (fabs(got - want_v) > 1e-5 * fabs(want_v) && bad++ < 3)
      T_EXPECT(false, "%s x %lld, %s (%s, %s): element %lld is %g (expected %g)",
               tcoll_dtype_name(c->d), (long long)c->n, tcoll_redop_name(op), algo,
               c->inplace ? "in place" : "out of place", (long long)i, got, want_v);
  }
  T_EXPECT(same_everywhere(out, bytes, tcoll_comm_mpi(comm)),
           "%s x %lld, %s: the ranks' results differ in their bits", tcoll_dtype_name(c->d),
           (long long)c->n, tcoll_redop_name(op));
  if (c->premul != 0) T_OK(tcoll_redop_destroy(op));
  if (!c->inplace) free(out);
  free(in);
}

/* ---------------------------------------------------------------- tests */

/* The table's choice: hier for a scalar exactly where world spans several nodes. */
START_TEST(table_picks_hier) {
  const char *need = getenv("T_EXPECT_HIER");
  if (need && !strcmp(need, "1"))
    T_EXPECT(hier_expected(),
             "T_EXPECT_HIER=1, but world's ranks are on %d node(s) by the MPI's "
             "shared split (0: groups that overlap)",
             count_nodes());
  double x = t_rank + 1.0;
  int64_t one = 1;
  tcoll_tensor_t t = tcoll_tensor_make(&x, TCOLL_FLOAT64, 1, &one, TCOLL_HOST);
  T_OK(tcoll_all_reduce(&t, TCOLL_SUM, NULL, &t));
  bool hier = is_hier();
  T_OK(tcoll_wait(&x));
  T_EXPECT(hier == hier_expected(), "an 8-byte all_reduce ran \"%s\" (hier expected: %s)",
           tcoll_last_algorithm(), hier_expected() ? "yes" : "no");
  T_EXPECT(x == t_size * (t_size + 1) / 2.0, "the sum is %g (expected %g)", x,
           t_size * (t_size + 1) / 2.0);
}
END_TEST

/* Every dtype and op, in place and not, sizes in a line (up to 48 bytes), in a slot, and past a
 * slot (chunk by chunk: 4 MiB and a remainder, past the default 1 MiB slot). */
START_TEST(forced_values) {
  t_save_algo();
  t_set_algo("all_reduce:hier");
  static const tcoll_dtype_t dts[] = {TCOLL_INT32, TCOLL_INT64, TCOLL_FLOAT32, TCOLL_FLOAT64};
  static const int64_t ns[] = {1, 5, 13, 1000, 20000};
  static const tcoll_redop_t ops[] = {TCOLL_SUM, TCOLL_MAX, TCOLL_MIN, TCOLL_PRODUCT, TCOLL_AVG};
  for (size_t a = 0; a < TC_LEN(dts); a++)
    for (size_t b = 0; b < TC_LEN(ns); b++)
      for (size_t o = 0; o < TC_LEN(ops) + 1; o++) {
        bool floating = dts[a] == TCOLL_FLOAT32 || dts[a] == TCOLL_FLOAT64;
        bool premul = o == TC_LEN(ops);
        if (!floating && (premul || ops[o] == TCOLL_AVG)) continue;
        const char *want = hier_expected() ? "hier" : NULL;
        for (int inplace = 0; inplace < 2; inplace++) {
          call_t c = {dts[a], ns[b], premul ? TCOLL_SUM : ops[o], premul ? 0.5 : 0, inplace};
          run_one(&c, NULL, want);
        }
      }
  for (int inplace = 0; inplace < 2; inplace++) { /* past a slot: in chunks */
    call_t big = {TCOLL_FLOAT32, (1 << 20) + 3, TCOLL_SUM, 0, inplace};
    call_t avg = {TCOLL_FLOAT64, (1 << 18) + 5, TCOLL_AVG, 0, inplace};
    run_one(&big, NULL, hier_expected() ? "hier" : NULL);
    run_one(&avg, NULL, hier_expected() ? "hier" : NULL);
  }
  t_restore_algo();
}
END_TEST

#define FLIGHT 12

/* Many hier calls in flight at once, with broadcasts and reduce_scatters between them on the
 * same communicator, waited in reverse order: the leaders' MPI calls are posted in the order of
 * the calls on every leader. */
START_TEST(many_in_flight) {
  t_save_algo();
  t_set_algo("all_reduce:hier");
  int64_t n = 37, rs_n = 4 * t_size;
  double *x[FLIGHT], *b[FLIGHT];
  float *rs_in[FLIGHT], *rs_out[FLIGHT];
  for (int round = 0; round < 20; round++) {
    for (int k = 0; k < FLIGHT; k++) {
      x[k] = malloc((size_t)n * sizeof(double));
      b[k] = malloc((size_t)n * sizeof(double));
      rs_in[k] = malloc((size_t)rs_n * sizeof(float));
      rs_out[k] = malloc(4 * sizeof(float));
      for (int64_t i = 0; i < n; i++) {
        x[k][i] = value(t_rank, i + k, TCOLL_SUM);
        b[k][i] = t_rank == k % t_size ? (double)(k * 100 + i) : -1;
      }
      for (int64_t i = 0; i < rs_n; i++) rs_in[k][i] = (float)(i + t_rank);
      tcoll_tensor_t tx = tcoll_tensor_make(x[k], TCOLL_FLOAT64, 1, &n, TCOLL_HOST);
      tcoll_tensor_t tb = tcoll_tensor_make(b[k], TCOLL_FLOAT64, 1, &n, TCOLL_HOST);
      int64_t four = 4;
      tcoll_tensor_t ri = tcoll_tensor_make(rs_in[k], TCOLL_FLOAT32, 1, &rs_n, TCOLL_HOST);
      tcoll_tensor_t ro = tcoll_tensor_make(rs_out[k], TCOLL_FLOAT32, 1, &four, TCOLL_HOST);
      T_OK(tcoll_all_reduce(&tx, TCOLL_SUM, NULL, &tx));
      if (k % 3 == 1) T_OK(tcoll_broadcast(&tb, k % t_size, NULL, &tb));
      if (k % 3 == 2) T_OK(tcoll_reduce_scatter(&ri, TCOLL_SUM, 0, NULL, &ro));
    }
    for (int k = FLIGHT - 1; k >= 0; k--) {
      T_OK(tcoll_wait(x[k]));
      if (k % 3 == 1) T_OK(tcoll_wait(b[k]));
      if (k % 3 == 2) T_OK(tcoll_wait(rs_out[k]));
      int bad = 0;
      for (int64_t i = 0; i < n; i++) {
        double want = expected(t_size, i + k, TCOLL_SUM, 1);
        if (x[k][i] != want && bad++ < 2)
          T_EXPECT(false, "round %d call %d: element %lld is %g (expected %g)", round, k,
                   (long long)i, x[k][i], want);
        if (k % 3 == 1 && b[k][i] != (double)(k * 100 + i) && bad++ < 2)
          T_EXPECT(false, "round %d broadcast %d: element %lld is %g", round, k, (long long)i,
                   b[k][i]);
      }
      for (int64_t i = 0; k % 3 == 2 && i < 4; i++) {
        double want = 0;
        for (int q = 0; q < t_size; q++) want += (double)(4 * t_rank + i + q);
        if (rs_out[k][i] != want && bad++ < 2)
          T_EXPECT(false, "round %d reduce_scatter %d: element %lld is %g (expected %g)", round, k,
                   (long long)i, rs_out[k][i], want);
      }
      free(x[k]), free(b[k]), free(rs_in[k]), free(rs_out[k]);
    }
  }
  t_restore_algo();
}
END_TEST

/* Communicators split from world: by parity (on MPICH's cliques, each parity is one pretend node)
 * and in reverse order (leaders are no longer world's lowest ranks). Forced hier runs where the
 * communicator spans several nodes; the values are right either way. */
START_TEST(sub_communicators) {
  t_save_algo();
  t_set_algo("all_reduce:hier");
  tcoll_comm_t *parity = NULL, *reversed = NULL;
  T_OK(tcoll_comm_split(NULL, t_rank % 2, t_rank, &parity));
  T_OK(tcoll_comm_split(NULL, 0, t_size - t_rank, &reversed));
  for (int k = 0; k < 2; k++) {
    tcoll_comm_t *c = k ? reversed : parity;
    for (int inplace = 0; inplace < 2; inplace++) {
      call_t a = {TCOLL_FLOAT64, 3, TCOLL_SUM, 0, inplace};
      call_t m = {TCOLL_INT32, 300, TCOLL_MAX, 0, inplace};
      run_one(&a, c, NULL);
      run_one(&m, c, NULL);
    }
  }
  call_t s = {TCOLL_FLOAT32, 9, TCOLL_SUM, 0, false};
  run_one(&s, reversed, hier_expected() ? "hier" : NULL);
  T_OK(tcoll_comm_free(&parity));
  T_OK(tcoll_comm_free(&reversed));
  t_restore_algo();
}
END_TEST

/* Broadcast and reduce from every root (leaders or not), in place and not: the values, and hier
 * where expected; past a slot (1 MiB by default) in chunks. */
START_TEST(broadcast_and_reduce) {
  t_save_algo();
  t_set_algo("broadcast:hier,reduce:hier");
  static const int64_t ns[] = {1, 13, 1000, (1 << 17) + 777};
  for (int root = 0; root < t_size; root++)
    for (size_t b = 0; b < TC_LEN(ns); b++)
      for (int inplace = 0; inplace < 2; inplace++) {
        int64_t n = ns[b];
        double *in = malloc((size_t)n * sizeof *in), *out = inplace ? in : malloc(n * sizeof *out);
        for (int64_t i = 0; i < n; i++) in[i] = t_rank == root ? (double)(root * 1000 + i) : -7;
        tcoll_tensor_t ti = tcoll_tensor_make(in, TCOLL_FLOAT64, 1, &n, TCOLL_HOST);
        tcoll_tensor_t to = tcoll_tensor_make(out, TCOLL_FLOAT64, 1, &n, TCOLL_HOST);
        T_OK(tcoll_broadcast(&ti, root, NULL, &to));
        const char *algo = tcoll_last_algorithm();
        T_OK(tcoll_wait(out));
        T_EXPECT(!hier_expected() || !strcmp(algo, "hier"), "broadcast: algorithm \"%s\"", algo);
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
          if (out[i] != (double)(root * 1000 + i) && bad++ < 2)
            T_EXPECT(false, "broadcast from %d, %lld elements: element %lld is %g", root,
                     (long long)n, (long long)i, out[i]);
        /* reduce: AVG (divided once, at the root) and MAX */
        for (int k = 0; k < 2; k++) {
          tcoll_redop_t op = k ? TCOLL_MAX : TCOLL_AVG;
          for (int64_t i = 0; i < n; i++) in[i] = value(t_rank, i, op);
          if (!inplace) memset(out, 0, (size_t)n * sizeof *out);
          T_OK(tcoll_reduce(&ti, root, op, NULL, &to));
          algo = tcoll_last_algorithm();
          T_OK(tcoll_wait(out));
          T_EXPECT(!hier_expected() || !strcmp(algo, "hier"), "reduce: algorithm \"%s\"", algo);
          for (int64_t i = 0; t_rank == root && i < n; i++) {
            double want = expected(t_size, i, op, 1);
            if (fabs(out[i] - want) > 1e-12 * fabs(want) && bad++ < 2)
              T_EXPECT(false, "reduce %s to %d, %lld elements: element %lld is %g (expected %g)",
                       tcoll_redop_name(op), root, (long long)n, (long long)i, out[i], want);
          }
        }
        if (!inplace) free(out);
        free(in);
      }
  t_restore_algo();
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("hier");
  TCase *tc = t_tcase("hier");
  tcase_add_test(tc, table_picks_hier);
  tcase_add_test(tc, forced_values);
  tcase_add_test(tc, many_in_flight);
  tcase_add_test(tc, sub_communicators);
  tcase_add_test(tc, broadcast_and_reduce);
  suite_add_tcase(s, tc);
  return s;
}
