/* Counts above the per-call element limit, for every data-movement op.
 *
 * The suite runs with TCOLL_MAX_COUNT=1000 (test/meson.build), so a few thousand elements stand
 * for counts above INT_MAX: all_gather along dim 0 and along other dims (blocks and block counts
 * above the limit), broadcast, all_to_all_single (per-peer counts above the limit: the
 * MPI_Ialltoallw path; rows above the limit: big unit types), permute, shard_dim_all_to_all,
 * gather / scatter, the list and coalesced forms, and odd sizes around the limit. Where MPI has
 * the MPI-4 large-count calls (MPICH 4), a count above the limit goes in one _c call instead
 * (the all-to-all then takes MPI_Ialltoallv_c, not MPI_Ialltoallw): the one_c_call tests count
 * the calls of all_reduce, reduce, reduce_scatter, broadcast, all_gather, all_to_all_single,
 * gather, scatter, the composed algorithms and the staging pipeline on both kinds of MPI. A
 * last test lowers the limit to 7 at run time so that the derived datatypes nest several levels
 * deep. Values are exact (move_util.h closed forms). */
#include "algo_util.h"
#include "move_util.h"
#include "forward.h"

#include <limits.h>
#include <sys/mman.h>

#define LIMIT 1000

static int64_t current_limit(void) {
  tcoll_config_t cfg;
  if (tcoll_get_config(&cfg) != TCOLL_SUCCESS) return -1;
  return cfg.max_count;
}

static void set_limit(int64_t n) {
  tcoll_config_t cfg;
  T_OK(tcoll_get_config(&cfg));
  cfg.max_count = n;
  T_OK(tcoll_set_config(&cfg));
}

/* ---- watching what reaches MPI ----
 *
 * The test program defines the PMPI entry points tcoll posts with (and the datatype constructors
 * it builds with); the dynamic linker binds libtcoll's calls to them, and they forward to MPI's
 * own (forward.h). Each one counts the call, so that tests can see which path an op took, and
 * checks its counts: an int count never exceeds the limit in force, and an MPI-4 _c call (MPICH) is
 * made only for a count above it (within the limit the int form is the call to make). */
#if MPI_VERSION >= 4
#define LARGE_COUNT 1 /* this MPI has the _c calls: a count above the limit goes in one of them */
#else
#define LARGE_COUNT 0 /* it has not: a count above the limit is split or a derived datatype */
#endif

enum {
  W_ALLREDUCE,
  W_REDUCE,
  W_REDUCE_SCATTER_BLOCK,
  W_BCAST,
  W_ALLGATHER,
  W_ALLGATHERV,
  W_GATHER,
  W_SCATTER,
  W_ALLTOALL,
  W_ALLTOALLV,
  W_ALLTOALLW,
  W_SEND,
  W_RECV,
  W_REDUCE_LOCAL,
  W_NCALLS
};
static const char *const W_NAMES[W_NCALLS] = {
    "MPI_Iallreduce", "MPI_Ireduce",     "MPI_Ireduce_scatter_block",
    "MPI_Ibcast",     "MPI_Iallgather",  "MPI_Iallgatherv",
    "MPI_Igather",    "MPI_Iscatter",    "MPI_Ialltoall",
    "MPI_Ialltoallv", "MPI_Ialltoallw",  "MPI_Isend",
    "MPI_Irecv",      "MPI_Reduce_local"};

static struct {
  int over;    /* int counts above the limit */
  int small_c; /* _c calls whose counts all fit the limit */
  int64_t max_count;
  int calls[W_NCALLS], calls_c[W_NCALLS]; /* int forms, _c forms */
  int type_ctors;
  unsigned fail; /* bit w: calls of function w fail */
  char first_over[160];
} watch;

static void watch_begin(void) { memset(&watch, 0, sizeof watch); }

/* The wrappers run on whichever thread posts (with TCOLL_PROGRESS=thread, the progress thread
 * posts schedule steps while the test's thread posts or waits): every update is atomic. */
static int bump(int *n) { return __atomic_fetch_add(n, 1, __ATOMIC_RELAXED); }
static void raise_max(int64_t *m, int64_t v) {
  int64_t cur = __atomic_load_n(m, __ATOMIC_RELAXED);
  while (v > cur &&
         !__atomic_compare_exchange_n(m, &cur, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

static void note(const char *fn, int64_t count) {
  raise_max(&watch.max_count, count);
  int64_t L = current_limit();
  if (count > L && bump(&watch.over) == 0)
    snprintf(watch.first_over, sizeof watch.first_over, "%s got a count of %lld (limit %lld)", fn,
             (long long)count, (long long)L);
}

static void note_array(const char *fn, const int *counts, MPI_Comm comm) {
  int n = 0;
  PMPI_Comm_size(comm, &n);
  for (int i = 0; i < n; i++) note(fn, counts[i]);
}

/* Every count within the limit and every _c call needed; returns nothing, records failures. */
#define WATCH_END(what)                                                                       \
  do {                                                                                        \
    T_EXPECT(watch.over == 0, "%s: %d counts above the limit, first: %s", (what), watch.over, \
             watch.first_over);                                                               \
    T_EXPECT(watch.small_c == 0, "%s: %d _c calls with every count within the limit", (what), \
             watch.small_c);                                                                  \
  } while (0)

/* Whether a test made calls of function w fail (with MPI_ERR_COUNT, without calling MPI). */
static bool failing(int w) { return (watch.fail >> w) & 1u; }

/* The int forms: count, check; then fail or forward. */
static bool count_int(int w, const char *fn, int64_t n) {
  bump(&watch.calls[w]);
  note(fn, n);
  return failing(w);
}

int PMPI_Iallreduce(const void *sb, void *rb, int n, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                    MPI_Request *req) {
  if (count_int(W_ALLREDUCE, "MPI_Iallreduce", n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Iallreduce, sb, rb, n, dt, op, comm, req);
}

int PMPI_Ireduce(const void *sb, void *rb, int n, MPI_Datatype dt, MPI_Op op, int root,
                 MPI_Comm comm, MPI_Request *req) {
  if (count_int(W_REDUCE, "MPI_Ireduce", n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Ireduce, sb, rb, n, dt, op, root, comm, req);
}

int PMPI_Ireduce_scatter_block(const void *sb, void *rb, int n, MPI_Datatype dt, MPI_Op op,
                               MPI_Comm comm, MPI_Request *req) {
  if (count_int(W_REDUCE_SCATTER_BLOCK, "MPI_Ireduce_scatter_block", n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Ireduce_scatter_block, sb, rb, n, dt, op, comm, req);
}

int PMPI_Iallgather(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt,
                    MPI_Comm comm, MPI_Request *req) {
  if (count_int(W_ALLGATHER, "MPI_Iallgather", sc)) return MPI_ERR_COUNT;
  note("MPI_Iallgather", rc);
  FORWARD(PMPI_Iallgather, sb, sc, st, rb, rc, rt, comm, req);
}

int PMPI_Iallgatherv(const void *sb, int sc, MPI_Datatype st, void *rb, const int rc[],
                     const int rd[], MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  if (count_int(W_ALLGATHERV, "MPI_Iallgatherv", sb == MPI_IN_PLACE ? 0 : sc)) return MPI_ERR_COUNT;
  note_array("MPI_Iallgatherv", rc, comm);
  FORWARD(PMPI_Iallgatherv, sb, sc, st, rb, rc, rd, rt, comm, req);
}

int PMPI_Ibcast(void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm, MPI_Request *req) {
  if (count_int(W_BCAST, "MPI_Ibcast", count)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Ibcast, buf, count, dt, root, comm, req);
}

int PMPI_Igather(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt,
                 int root, MPI_Comm comm, MPI_Request *req) {
  if (count_int(W_GATHER, "MPI_Igather", sc)) return MPI_ERR_COUNT;
  note("MPI_Igather", rc);
  FORWARD(PMPI_Igather, sb, sc, st, rb, rc, rt, root, comm, req);
}

int PMPI_Iscatter(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt,
                  int root, MPI_Comm comm, MPI_Request *req) {
  if (count_int(W_SCATTER, "MPI_Iscatter", sc)) return MPI_ERR_COUNT;
  note("MPI_Iscatter", rc);
  FORWARD(PMPI_Iscatter, sb, sc, st, rb, rc, rt, root, comm, req);
}

int PMPI_Ialltoall(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt,
                   MPI_Comm comm, MPI_Request *req) {
  if (count_int(W_ALLTOALL, "MPI_Ialltoall", sc)) return MPI_ERR_COUNT;
  note("MPI_Ialltoall", rc);
  FORWARD(PMPI_Ialltoall, sb, sc, st, rb, rc, rt, comm, req);
}

int PMPI_Ialltoallv(const void *sb, const int sc[], const int sd[], MPI_Datatype st, void *rb,
                    const int rc[], const int rd[], MPI_Datatype rt, MPI_Comm comm,
                    MPI_Request *req) {
  bump(&watch.calls[W_ALLTOALLV]);
  note_array("MPI_Ialltoallv", sc, comm);
  note_array("MPI_Ialltoallv", rc, comm);
  if (failing(W_ALLTOALLV)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Ialltoallv, sb, sc, sd, st, rb, rc, rd, rt, comm, req);
}

int PMPI_Ialltoallw(const void *sb, const int sc[], const int sd[], const MPI_Datatype st[],
                    void *rb, const int rc[], const int rd[], const MPI_Datatype rt[],
                    MPI_Comm comm, MPI_Request *req) {
  bump(&watch.calls[W_ALLTOALLW]);
  note_array("MPI_Ialltoallw", sc, comm);
  note_array("MPI_Ialltoallw", rc, comm);
  if (failing(W_ALLTOALLW)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Ialltoallw, sb, sc, sd, st, rb, rc, rd, rt, comm, req);
}

int PMPI_Isend(const void *buf, int n, MPI_Datatype dt, int peer, int tag, MPI_Comm comm,
               MPI_Request *req) {
  if (count_int(W_SEND, "MPI_Isend", n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Isend, buf, n, dt, peer, tag, comm, req);
}

int PMPI_Irecv(void *buf, int n, MPI_Datatype dt, int peer, int tag, MPI_Comm comm,
               MPI_Request *req) {
  if (count_int(W_RECV, "MPI_Irecv", n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Irecv, buf, n, dt, peer, tag, comm, req);
}

int PMPI_Reduce_local(const void *in, void *acc, int n, MPI_Datatype dt, MPI_Op op) {
  if (count_int(W_REDUCE_LOCAL, "MPI_Reduce_local", n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Reduce_local, in, acc, n, dt, op);
}

#if LARGE_COUNT
/* The _c forms: count, check that some count needed one, forward. */
static bool note_c(int w, MPI_Count largest) {
  bump(&watch.calls_c[w]);
  raise_max(&watch.max_count, largest);
  if (largest <= current_limit()) bump(&watch.small_c);
  return failing(w);
}

static MPI_Count largest_of(const MPI_Count *v, MPI_Comm comm) {
  int n = 0;
  PMPI_Comm_size(comm, &n);
  MPI_Count m = 0;
  for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

static MPI_Count max2(MPI_Count a, MPI_Count b) { return a > b ? a : b; }

int PMPI_Iallreduce_c(const void *sb, void *rb, MPI_Count n, MPI_Datatype dt, MPI_Op op,
                      MPI_Comm comm, MPI_Request *req) {
  if (note_c(W_ALLREDUCE, n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Iallreduce_c, sb, rb, n, dt, op, comm, req);
}

int PMPI_Ireduce_c(const void *sb, void *rb, MPI_Count n, MPI_Datatype dt, MPI_Op op, int root,
                   MPI_Comm comm, MPI_Request *req) {
  if (note_c(W_REDUCE, n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Ireduce_c, sb, rb, n, dt, op, root, comm, req);
}

int PMPI_Ireduce_scatter_block_c(const void *sb, void *rb, MPI_Count n, MPI_Datatype dt, MPI_Op op,
                                 MPI_Comm comm, MPI_Request *req) {
  if (note_c(W_REDUCE_SCATTER_BLOCK, n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Ireduce_scatter_block_c, sb, rb, n, dt, op, comm, req);
}

int PMPI_Ibcast_c(void *buf, MPI_Count n, MPI_Datatype dt, int root, MPI_Comm comm,
                  MPI_Request *req) {
  if (note_c(W_BCAST, n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Ibcast_c, buf, n, dt, root, comm, req);
}

int PMPI_Iallgather_c(const void *sb, MPI_Count sc, MPI_Datatype st, void *rb, MPI_Count rc,
                      MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  if (note_c(W_ALLGATHER, max2(sc, rc))) return MPI_ERR_COUNT;
  FORWARD(PMPI_Iallgather_c, sb, sc, st, rb, rc, rt, comm, req);
}

int PMPI_Iallgatherv_c(const void *sb, MPI_Count sc, MPI_Datatype st, void *rb,
                       const MPI_Count rc[], const MPI_Aint rd[], MPI_Datatype rt, MPI_Comm comm,
                       MPI_Request *req) {
  if (note_c(W_ALLGATHERV, largest_of(rc, comm))) return MPI_ERR_COUNT;
  FORWARD(PMPI_Iallgatherv_c, sb, sc, st, rb, rc, rd, rt, comm, req);
}

int PMPI_Igather_c(const void *sb, MPI_Count sc, MPI_Datatype st, void *rb, MPI_Count rc,
                   MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request *req) {
  if (note_c(W_GATHER, max2(sc, rc))) return MPI_ERR_COUNT;
  FORWARD(PMPI_Igather_c, sb, sc, st, rb, rc, rt, root, comm, req);
}

int PMPI_Iscatter_c(const void *sb, MPI_Count sc, MPI_Datatype st, void *rb, MPI_Count rc,
                    MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request *req) {
  if (note_c(W_SCATTER, max2(sc, rc))) return MPI_ERR_COUNT;
  FORWARD(PMPI_Iscatter_c, sb, sc, st, rb, rc, rt, root, comm, req);
}

int PMPI_Ialltoall_c(const void *sb, MPI_Count sc, MPI_Datatype st, void *rb, MPI_Count rc,
                     MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  if (note_c(W_ALLTOALL, max2(sc, rc))) return MPI_ERR_COUNT;
  FORWARD(PMPI_Ialltoall_c, sb, sc, st, rb, rc, rt, comm, req);
}

int PMPI_Ialltoallv_c(const void *sb, const MPI_Count sc[], const MPI_Aint sd[], MPI_Datatype st,
                      void *rb, const MPI_Count rc[], const MPI_Aint rd[], MPI_Datatype rt,
                      MPI_Comm comm, MPI_Request *req) {
  if (note_c(W_ALLTOALLV, max2(largest_of(sc, comm), largest_of(rc, comm)))) return MPI_ERR_COUNT;
  FORWARD(PMPI_Ialltoallv_c, sb, sc, sd, st, rb, rc, rd, rt, comm, req);
}

int PMPI_Isend_c(const void *buf, MPI_Count n, MPI_Datatype dt, int peer, int tag, MPI_Comm comm,
                 MPI_Request *req) {
  if (note_c(W_SEND, n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Isend_c, buf, n, dt, peer, tag, comm, req);
}

int PMPI_Irecv_c(void *buf, MPI_Count n, MPI_Datatype dt, int peer, int tag, MPI_Comm comm,
                 MPI_Request *req) {
  if (note_c(W_RECV, n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Irecv_c, buf, n, dt, peer, tag, comm, req);
}

int PMPI_Reduce_local_c(const void *in, void *acc, MPI_Count n, MPI_Datatype dt, MPI_Op op) {
  if (note_c(W_REDUCE_LOCAL, n)) return MPI_ERR_COUNT;
  FORWARD(PMPI_Reduce_local_c, in, acc, n, dt, op);
}
#endif

int PMPI_Type_contiguous(int count, MPI_Datatype old, MPI_Datatype *t) {
  bump(&watch.type_ctors);
  note("MPI_Type_contiguous", count);
  FORWARD(PMPI_Type_contiguous, count, old, t);
}

int PMPI_Type_create_hvector(int count, int blen, MPI_Aint stride, MPI_Datatype old,
                             MPI_Datatype *t) {
  bump(&watch.type_ctors);
  note("MPI_Type_create_hvector", count);
  note("MPI_Type_create_hvector (block length)", blen);
  FORWARD(PMPI_Type_create_hvector, count, blen, stride, old, t);
}

int PMPI_Type_create_hindexed(int count, const int blens[], const MPI_Aint displs[],
                              MPI_Datatype old, MPI_Datatype *t) {
  bump(&watch.type_ctors);
  note("MPI_Type_create_hindexed", count);
  for (int i = 0; i < count; i++) note("MPI_Type_create_hindexed (block length)", blens[i]);
  FORWARD(PMPI_Type_create_hindexed, count, blens, displs, old, t);
}

int PMPI_Type_create_struct(int count, const int blens[], const MPI_Aint displs[],
                            const MPI_Datatype types[], MPI_Datatype *t) {
  bump(&watch.type_ctors);
  note("MPI_Type_create_struct", count);
  for (int i = 0; i < count; i++) note("MPI_Type_create_struct (block length)", blens[i]);
  FORWARD(PMPI_Type_create_struct, count, blens, displs, types, t);
}

START_TEST(limit_in_force) {
  int64_t L = current_limit();
  T_EXPECT(L == LIMIT, "max_count is %lld (expected %d from TCOLL_MAX_COUNT)", (long long)L, LIMIT);
  /* The watch sees tcoll's MPI calls (else every other check here would be vacuous): the literal
   * all_gather's one MPI_Iallgather (forced: the suite also runs with all_gather:cma, which
   * makes none). */
  tcoll_config_t cfg, lit;
  T_OK(tcoll_get_config(&cfg));
  lit = cfg;
  snprintf(lit.algo, sizeof lit.algo, "mpi");
  T_OK(tcoll_set_config(&lit));
  watch_begin();
  int64_t n = 3;
  tcoll_tensor_t in = t_alloc(TCOLL_INT32, 1, &n), out = t_empty();
  T_OK(tcoll_all_gather(&in, 0, NULL, &out));
  T_OK(tcoll_wait(out.data));
  T_OK(tcoll_set_config(&cfg));
  T_EXPECT(watch.calls[W_ALLGATHER] == 1 && watch.max_count == 3,
           "the MPI watch saw %d MPI_Iallgather calls, max count %lld", watch.calls[W_ALLGATHER],
           (long long)watch.max_count);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}
END_TEST

/* ---- all_gather ---- */

static void ag_case(tcoll_dtype_t dt, int ndim, const int64_t *shape, int dim, bool prealloc) {
  int nd = dim < 0 ? dim + ndim : dim;
  int64_t oshape[TCOLL_MAX_DIMS];
  memcpy(oshape, shape, (size_t)ndim * sizeof *oshape);
  oshape[nd] *= t_size;
  tcoll_tensor_t in = t_alloc(dt, ndim, shape),
                 out = prealloc ? t_alloc(dt, ndim, oshape) : t_empty();
  mv_fill(&in, t_rank, 0);
  if (prealloc) mv_fill(&out, 50 + t_rank, 0);
  char what[160], sh[64];
  snprintf(what, sizeof what, "large all_gather %s %s along %d", tcoll_dtype_name(dt),
           mv_shape_str(sh, sizeof sh, ndim, shape), dim);
  int rc = tcoll_all_gather(&in, dim, NULL, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, ndim, oshape, what);
    mv_ag_ctx c = {dt, ndim, nd, t_size, shape, NULL};
    t_check_all(what, &out, mv_ag_expect, &c, 0);
  }
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

START_TEST(all_gather_dim0) {
  watch_begin();
  static const int64_t sizes[] = {1001, 2500, 3001, 999};
  static const tcoll_dtype_t dts[] = {TCOLL_FLOAT32, TCOLL_INT8, TCOLL_FLOAT16, TCOLL_FLOAT64,
                                      TCOLL_BOOL};
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 5; k++) ag_case(dts[k], 1, &sizes[i], 0, (i + k) % 2);
  int64_t s2[2] = {1100, 3}; /* rows x 3 */
  ag_case(TCOLL_BFLOAT16, 2, s2, 0, false);
  ag_case(TCOLL_INT64, 2, s2, -2, true);
  WATCH_END("all_gather_dim0");
}
END_TEST

START_TEST(all_gather_other_dims) {
  watch_begin();
  struct {
    int ndim;
    int64_t shape[3];
    int dim;
  } cases[] = {
      {2, {3, 1500}, 1},     /* blocks above the limit */
      {2, {1200, 2}, 1},     /* more blocks than the limit */
      {2, {2100, 1}, -1},    /* block count above twice the limit, blocks of one element */
      {3, {2, 1100, 3}, 1},  /* blocks of 3300 */
      {3, {2, 3, 1001}, -1}, /* odd block size just above the limit */
      {2, {1, 2001}, 1},     /* leading 1: contiguous form above the limit */
      {3, {1003, 1, 1}, 2},  /* many one-element blocks */
  };
  static const tcoll_dtype_t dts[] = {TCOLL_FLOAT64, TCOLL_FLOAT16, TCOLL_INT8, TCOLL_BFLOAT16,
                                      TCOLL_INT32,   TCOLL_BOOL,    TCOLL_UINT8};
  for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
    ag_case(dts[i], cases[i].ndim, cases[i].shape, cases[i].dim, false);
    ag_case(TCOLL_FLOAT32, cases[i].ndim, cases[i].shape, cases[i].dim, true);
  }
  WATCH_END("all_gather_other_dims");
}
END_TEST

START_TEST(all_gather_in_place) {
  watch_begin();
  static const int64_t sizes[] = {2003, 1000, 1001};
  for (int i = 0; i < 3; i++) {
    int64_t n = sizes[i], on = n * t_size;
    tcoll_dtype_t dt = i == 1 ? TCOLL_FLOAT16 : TCOLL_INT32;
    tcoll_tensor_t out = t_alloc(dt, 1, &on);
    mv_fill(&out, 70, 0);
    size_t es = tcoll_dtype_size(dt);
    tcoll_tensor_t in = tcoll_tensor_make((char *)out.data + (size_t)t_rank * (size_t)n * es, dt, 1,
                                          &n, out.device);
    mv_fill(&in, t_rank, 0);
    T_OK(tcoll_all_gather(&in, 0, NULL, &out));
    T_OK(tcoll_wait(out.data));
    mv_ag_ctx c = {dt, 1, 0, t_size, &n, NULL};
    t_check_all("large in-place all_gather", &out, mv_ag_expect, &c, 0);
    tcoll_tensor_free(&out);
  }
  WATCH_END("all_gather_in_place");
}
END_TEST

START_TEST(all_gather_list_and_coalesced) {
  watch_begin();
  /* list */
  int64_t n = 1500;
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, &n);
  mv_fill(&in, t_rank, 0);
  tcoll_tensor_t *outs = calloc((size_t)t_size, sizeof *outs);
  for (int r = 0; r < t_size; r++) outs[r] = t_empty();
  T_OK(tcoll_all_gather_list(&in, NULL, outs));
  for (int r = 0; r < t_size; r++) {
    T_OK(tcoll_wait(outs[r].data));
    mv_check_fill("large all_gather_list", &outs[r], r, 0);
    tcoll_tensor_free(&outs[r]);
  }
  free(outs);
  tcoll_tensor_free(&in);
  /* coalesced: 3401 packed bytes per rank */
  tcoll_tensor_t cin[3], cout[3];
  const tcoll_dtype_t dts[3] = {TCOLL_FLOAT64, TCOLL_INT8, TCOLL_FLOAT16};
  const int64_t lens[3] = {300, 501, 250};
  for (int i = 0; i < 3; i++) {
    cin[i] = t_alloc(dts[i], 1, &lens[i]);
    mv_fill(&cin[i], 8 * t_rank + i, 0);
    cout[i] = t_empty();
  }
  T_OK(tcoll_all_gather_coalesced(cin, 3, NULL, cout));
  for (int i = 0; i < 3; i++) {
    T_OK(tcoll_wait(cout[i].data));
    int tags[8];
    for (int r = 0; r < t_size; r++) tags[r] = 8 * r + i;
    mv_ag_ctx c = {dts[i], 1, 0, t_size, &lens[i], tags};
    t_check_all("large all_gather_coalesced", &cout[i], mv_ag_expect, &c, 0);
    tcoll_tensor_free(&cin[i]);
    tcoll_tensor_free(&cout[i]);
  }
  WATCH_END("all_gather_list_and_coalesced");
}
END_TEST

/* ---- broadcast ---- */

START_TEST(broadcast_large) {
  watch_begin();
  static const int64_t sizes[] = {3001, 1001, 2000};
  static const tcoll_dtype_t dts[] = {TCOLL_FLOAT64, TCOLL_BFLOAT16, TCOLL_UINT8};
  for (int src = 0; src < t_size; src++) {
    for (int i = 0; i < 3; i++) {
      for (int mode = 0; mode < 3; mode++) { /* out of place, allocating, in place */
        tcoll_tensor_t in = t_alloc(dts[i], 1, &sizes[i]), out = t_empty();
        mv_fill(&in, t_rank, 0);
        if (mode == 0) out = t_alloc(dts[i], 1, &sizes[i]);
        if (mode == 2) out = in;
        T_OK(tcoll_broadcast(&in, src, NULL, &out));
        T_OK(tcoll_wait(out.data));
        mv_check_fill("large broadcast", &out, src, 0);
        if (mode != 2) tcoll_tensor_free(&out);
        tcoll_tensor_free(&in);
      }
    }
  }
  WATCH_END("broadcast_large");
}
END_TEST

/* ---- all_to_all_single ---- */

/* S[i * size + j] rows from i to j, rows of `row` elements. S NULL: `even` rows per pair. */
static void a2a_case(tcoll_dtype_t dt, const int64_t *S, int64_t even, int64_t row, bool prealloc,
                     const char *kind) {
  int size = t_size, me = t_rank;
  int64_t *E = NULL;
  if (!S) {
    E = malloc((size_t)size * (size_t)size * sizeof *E);
    for (int k = 0; k < size * size; k++) E[k] = even;
  }
  const int64_t *M = S ? S : E;
  int64_t *is = malloc((size_t)size * sizeof *is), *os = malloc((size_t)size * sizeof *os),
          irows = 0, orows = 0;
  for (int p = 0; p < size; p++) {
    is[p] = M[me * size + p];
    os[p] = M[p * size + me];
    irows += is[p];
    orows += os[p];
  }
  int64_t ishape[2] = {irows, row}, oshape[2] = {orows, row};
  int nd = row == 1 ? 1 : 2;
  tcoll_tensor_t in = t_alloc(dt, nd, ishape), out = prealloc ? t_alloc(dt, nd, oshape) : t_empty();
  mv_fill(&in, me, 0);
  if (prealloc) mv_fill(&out, 60 + me, 0);
  char what[128];
  snprintf(what, sizeof what, "large all_to_all_single %s (%s, rows of %lld)", tcoll_dtype_name(dt),
           kind, (long long)row);
  int rc = S ? tcoll_all_to_all_single(&in, os, is, NULL, &out)
             : tcoll_all_to_all_single(&in, NULL, NULL, NULL, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, nd, oshape, what);
    mv_a2a_ctx c = {dt, size, me, row, M, NULL};
    t_check_all(what, &out, mv_a2a_expect, &c, 0);
  }
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  free(is);
  free(os);
  free(E);
}

START_TEST(all_to_all_single_large) {
  watch_begin();
  int size = t_size;
  /* Even: 1500 one-element rows per peer (counts above the limit: MPI_Ialltoallv_c, or without
   * it MPI_Ialltoallw). */
  a2a_case(TCOLL_FLOAT32, NULL, 1500, 1, false, "even, 1500 per peer");
  /* The calls of the literal mapping; the scattered exchange (TCOLL_ALGO or the table) makes
   * none: its messages are split at the limit like every point-to-point step. */
  bool literal = !strcmp(tcoll_last_algorithm(), "mpi");
  int big = LARGE_COUNT ? watch.calls_c[W_ALLTOALLV] : watch.calls[W_ALLTOALLW];
  int all = watch.calls[W_ALLTOALLV] + watch.calls[W_ALLTOALLW] + watch.calls_c[W_ALLTOALLV];
  T_EXPECT(literal ? big == 1 && all == 1 : all == 0,
           "1500 elements per peer (%s): %d MPI_Ialltoallw, %d MPI_Ialltoallv and %d "
           "MPI_Ialltoallv_c calls (expected "
           "%s)",
           tcoll_last_algorithm(), watch.calls[W_ALLTOALLW], watch.calls[W_ALLTOALLV],
           watch.calls_c[W_ALLTOALLV],
           !literal      ? "none"
           : LARGE_COUNT ? "one MPI_Ialltoallv_c"
                         : "one MPI_Ialltoallw");
  a2a_case(TCOLL_INT8, NULL, 1001, 1, true, "even, 1001 per peer");
  /* Uneven: 0, 600, 1200 or 1800 rows per pair, above and below the limit and zero. */
  int64_t *S = malloc((size_t)size * (size_t)size * sizeof *S);
  for (int i = 0; i < size; i++)
    for (int j = 0; j < size; j++) S[i * size + j] = ((i + 2 * j + 1) % 4) * 600;
  a2a_case(TCOLL_FLOAT64, S, 0, 1, false, "uneven 0..1800");
  a2a_case(TCOLL_FLOAT16, S, 0, 1, true, "uneven 0..1800");
  /* Uneven rows of 3 elements: 0..1800 rows (up to 5400 elements) per pair. */
  a2a_case(TCOLL_INT16, S, 0, 3, false, "uneven rows of 3");
  /* Odd counts around the limit. */
  for (int i = 0; i < size; i++)
    for (int j = 0; j < size; j++) S[i * size + j] = (i + j) % 2 ? 1001 : 999;
  a2a_case(TCOLL_BOOL, S, 0, 1, false, "999 / 1001");
  a2a_case(TCOLL_INT32, S, 0, 1, true, "999 / 1001");
  free(S);
  /* Rows above the limit: one row of 1500 elements per peer (counts fit, the unit does not):
   * one MPI_Ialltoallv of one row each (a derived datatype), or with large counts one
   * MPI_Ialltoallv_c of 1500 elements each. */
  int w0 = watch.calls[W_ALLTOALLW], v0 = watch.calls[W_ALLTOALLV], c0 = watch.calls_c[W_ALLTOALLV];
  a2a_case(TCOLL_BFLOAT16, NULL, 1, 1500, false, "one 1500-element row per peer");
  int dv = watch.calls[W_ALLTOALLV] - v0, dc = watch.calls_c[W_ALLTOALLV] - c0;
  if (literal)
    T_EXPECT(
        watch.calls[W_ALLTOALLW] == w0 && dv == (LARGE_COUNT ? 0 : 1) &&
            dc == (LARGE_COUNT ? 1 : 0),
        "one row of 1500 per peer: expected one %s (got %d MPI_Ialltoallv, %d MPI_Ialltoallv_c, %d "
        "MPI_Ialltoallw)",
        LARGE_COUNT ? "MPI_Ialltoallv_c" : "MPI_Ialltoallv", dv, dc, watch.calls[W_ALLTOALLW] - w0);
  else
    T_EXPECT(watch.calls[W_ALLTOALLW] == w0 && !dv && !dc,
             "one row of 1500 per peer, scattered: an all-to-all call");
  /* Many rows of 7: 200 rows (1400 elements) per peer, counts in rows fit. */
  a2a_case(TCOLL_UINT8, NULL, 200, 7, true, "200 rows of 7 per peer");
  WATCH_END("all_to_all_single_large");
}
END_TEST

/* ---- permute ---- */

START_TEST(permute_large) {
  watch_begin();
  int64_t n = 2500;
  int *p = malloc((size_t)t_size * sizeof *p);
  for (int variant = 0; variant < 3; variant++) {
    for (int m = 0; m < t_size; m++)
      p[m] = variant == 0   ? (m + 1) % t_size
             : variant == 1 ? t_size - 1 - m
                            : m; /* shift, reversal, identity */
    int from = -1;
    for (int m = 0; m < t_size; m++)
      if (p[m] == t_rank) from = m;
    tcoll_dtype_t dt = variant == 1 ? TCOLL_FLOAT16 : TCOLL_FLOAT64;
    tcoll_tensor_t in = t_alloc(dt, 1, &n), out = t_empty();
    mv_fill(&in, t_rank, 0);
    int big0 = LARGE_COUNT ? watch.calls_c[W_ALLTOALLV] : watch.calls[W_ALLTOALLW];
    int send0 = watch.calls[W_SEND] + watch.calls_c[W_SEND];
    T_OK(tcoll_permute(&in, p, NULL, &out));
    T_OK(tcoll_wait(out.data));
    mv_check_fill("large permute", &out, from, 0);
    /* The literal mapping: one large all-to-all call. The scattered exchange: one MPI_Isend_c, or
     * 3 sends of at most 1000 elements; nothing for a rank that keeps its own tensor. */
    int big = (LARGE_COUNT ? watch.calls_c[W_ALLTOALLV] : watch.calls[W_ALLTOALLW]) - big0;
    int sends = watch.calls[W_SEND] + watch.calls_c[W_SEND] - send0;
    bool literal = !strcmp(tcoll_last_algorithm(), "mpi");
    int want_sends = literal || p[t_rank] == t_rank ? 0 : LARGE_COUNT ? 1 : 3;
    T_EXPECT(big == (literal ? 1 : 0) && sends == want_sends,
             "large permute %d (%s): %d %s calls, %d sends (expected %d and %d)", variant,
             tcoll_last_algorithm(), big, LARGE_COUNT ? "MPI_Ialltoallv_c" : "MPI_Ialltoallw",
             sends, literal ? 1 : 0, want_sends);
    tcoll_tensor_free(&in);
    tcoll_tensor_free(&out);
  }
  free(p);
  WATCH_END("permute_large");
}
END_TEST

/* ---- shard_dim_all_to_all ---- */

static void shard_case(tcoll_dtype_t dt, int ndim, const int64_t *ishape, int g, int s,
                       bool prealloc) {
  int64_t oshape[TCOLL_MAX_DIMS];
  memcpy(oshape, ishape, (size_t)ndim * sizeof *oshape);
  oshape[s] /= t_size;
  oshape[g] *= t_size;
  tcoll_tensor_t in = t_alloc(dt, ndim, ishape),
                 out = prealloc ? t_alloc(dt, ndim, oshape) : t_empty();
  mv_fill(&in, t_rank, 0);
  char what[160], sh[64];
  snprintf(what, sizeof what, "large shard_dim_all_to_all %s %s gather %d shard %d",
           tcoll_dtype_name(dt), mv_shape_str(sh, sizeof sh, ndim, ishape), g, s);
  int rc = tcoll_shard_dim_all_to_all(&in, g, s, NULL, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s: %s", what, tcoll_status_string(rc), tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    MV_EXPECT_SHAPE(&out, ndim, oshape, what);
    mv_shard_ctx c = {dt, ndim, g, s, t_size, t_rank, ishape, NULL};
    t_check_all(what, &out, mv_shard_expect, &c, 0);
  }
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

START_TEST(shard_large) {
  watch_begin();
  int64_t P = t_size;
  int64_t a[2] = {3, 1100 * P}; /* chunks of 3 x 1100 */
  shard_case(TCOLL_FLOAT32, 2, a, 0, 1, false);
  shard_case(TCOLL_INT8, 2, a, 1, 1, true);
  int64_t b[2] = {1200 * P, 2}; /* chunks of 1200 rows: 2400 contiguous elements */
  shard_case(TCOLL_FLOAT64, 2, b, 1, 0, false);
  shard_case(TCOLL_FLOAT16, 2, b, 0, 0, true);
  int64_t c[3] = {2, 2 * P, 1001}; /* blocks of 1001 */
  shard_case(TCOLL_BFLOAT16, 3, c, 2, 1, false);
  shard_case(TCOLL_INT32, 3, c, 0, 1, true);
  int64_t d[1] = {1500 * P};
  shard_case(TCOLL_UINT8, 1, d, 0, 0, false);
  int64_t e[2] = {1001, 2 * P}; /* 1001 blocks of 2 elements */
  shard_case(TCOLL_INT16, 2, e, 0, 1, false);
  WATCH_END("shard_large");
}
END_TEST

/* ---- gather / scatter ---- */

START_TEST(gather_scatter_large) {
  watch_begin();
  int64_t n = 2100;
  for (int root = 0; root < t_size; root++) {
    tcoll_dtype_t dt = root % 2 ? TCOLL_FLOAT16 : TCOLL_FLOAT64;
    /* gather */
    tcoll_tensor_t in = t_alloc(dt, 1, &n), *outs = NULL;
    mv_fill(&in, t_rank, 0);
    if (t_rank == root) {
      outs = calloc((size_t)t_size, sizeof *outs);
      for (int r = 0; r < t_size; r++) outs[r] = t_empty();
    }
    T_OK(tcoll_gather(&in, root, NULL, outs));
    if (outs) {
      for (int r = 0; r < t_size; r++) {
        T_OK(tcoll_wait(outs[r].data));
        mv_check_fill("large gather", &outs[r], r, 0);
        tcoll_tensor_free(&outs[r]);
      }
      free(outs);
    } else {
      T_OK(tcoll_wait(in.data));
    }
    tcoll_tensor_free(&in);
    /* scatter */
    tcoll_tensor_t *ins = NULL, out = tcoll_tensor_make(NULL, dt, 1, &n, t_device());
    if (t_rank == root) {
      ins = calloc((size_t)t_size, sizeof *ins);
      for (int r = 0; r < t_size; r++) {
        ins[r] = t_alloc(dt, 1, &n);
        mv_fill(&ins[r], 16 * root + r, 0);
      }
    }
    T_OK(tcoll_scatter(ins, root, NULL, &out));
    T_OK(tcoll_wait(out.data));
    mv_check_fill("large scatter", &out, 16 * root + t_rank, 0);
    tcoll_tensor_free(&out);
    if (ins) {
      for (int r = 0; r < t_size; r++) tcoll_tensor_free(&ins[r]);
      free(ins);
    }
  }
  WATCH_END("gather_scatter_large");
}
END_TEST

/* ---- all_to_all (list) ---- */

START_TEST(all_to_all_list_large) {
  watch_begin();
  int size = t_size, me = t_rank;
  tcoll_tensor_t *ins = calloc((size_t)size, sizeof *ins),
                 *outs = calloc((size_t)size, sizeof *outs);
  for (int p = 0; p < size; p++) {
    int64_t ni = (me + p) % 2 ? 1200 : 17, no = (p + me) % 2 ? 1200 : 17;
    ins[p] = t_alloc(TCOLL_INT32, 1, &ni);
    mv_fill(&ins[p], 16 * me + p, 0);
    outs[p] = tcoll_tensor_make(NULL, TCOLL_INT32, 1, &no, t_device());
  }
  T_OK(tcoll_all_to_all(ins, NULL, outs));
  for (int p = 0; p < size; p++) {
    T_OK(tcoll_wait(outs[p].data));
    mv_check_fill("large all_to_all", &outs[p], 16 * p + me, 0);
    tcoll_tensor_free(&outs[p]);
    tcoll_tensor_free(&ins[p]);
  }
  free(ins);
  free(outs);
  WATCH_END("all_to_all_list_large");
}
END_TEST

/* ---- many pending at once ---- */

/* More distinct derived datatypes in flight than the datatype cache has slots (256), waited in
 * an order that differs between ranks: cache slots in use are never recycled under MPI. */
START_TEST(many_pending_distinct_types) {
  watch_begin();
  enum { N = 300 };
  tcoll_tensor_t *in = calloc(N, sizeof *in), *out = calloc(N, sizeof *out);
  int64_t(*shape)[2] = calloc(N, sizeof *shape);
  for (int k = 0; k < N; k++) {
    shape[k][0] = 2;
    shape[k][1] = 1001 + k; /* blocks above the limit, a new datatype each */
    in[k] = t_alloc(TCOLL_INT8, 2, shape[k]);
    mv_fill(&in[k], t_rank + k, 0);
    out[k] = t_empty();
    T_OK(tcoll_all_gather(&in[k], 1, NULL, &out[k]));
  }
  T_EXPECT(tcoll_pending_count() == N, "%zu pending (expected %d)", tcoll_pending_count(), N);
  int bad = 0;
  for (int i = 0; i < N; i++) {
    int k = t_rank % 2 ? N - 1 - i : (i * 7) % N; /* 7 and 300 are coprime: a permutation */
    T_OK(tcoll_wait(out[k].data));
    int tags[8];
    for (int r = 0; r < t_size; r++) tags[r] = r + k;
    mv_ag_ctx c = {TCOLL_INT8, 2, 1, t_size, shape[k], tags};
    if (bad < 3)
      bad += t_check_all("one of many pending all_gathers", &out[k], mv_ag_expect, &c, 0) > 0;
  }
  for (int k = 0; k < N; k++) {
    tcoll_tensor_free(&in[k]);
    tcoll_tensor_free(&out[k]);
  }
  free(in);
  free(out);
  free(shape);
  WATCH_END("many_pending_distinct_types");
}
END_TEST

/* Every data-movement op pending at the same time, above the limit, completed in an order that
 * differs between ranks. */
START_TEST(every_op_pending_at_once) {
  watch_begin();
  int size = t_size, me = t_rank;
  int64_t n = 1500;
  int64_t sh2[2] = {3, 1100}, shs[2] = {2, 1001 * (int64_t)size}, nsz = 1200 * (int64_t)size;
  tcoll_tensor_t x1 = t_alloc(TCOLL_FLOAT32, 1, &n), x2 = t_alloc(TCOLL_FLOAT16, 2, sh2),
                 xa = t_alloc(TCOLL_INT32, 1, &nsz), xs = t_alloc(TCOLL_FLOAT64, 2, shs);
  mv_fill(&x1, me, 0);
  mv_fill(&x2, me, 0);
  mv_fill(&xa, me, 0);
  mv_fill(&xs, me, 0);
  tcoll_tensor_t ag = t_empty(), bc = t_empty(), a2a = t_empty(), pm = t_empty(), sd = t_empty(),
                 sc = t_empty();
  tcoll_tensor_t *gouts = NULL, *sins = NULL;
  int *p = malloc((size_t)size * sizeof *p);
  for (int m = 0; m < size; m++) p[m] = size - 1 - m;
  int root = size - 1;
  if (me == root) {
    gouts = calloc((size_t)size, sizeof *gouts);
    sins = calloc((size_t)size, sizeof *sins);
    for (int r = 0; r < size; r++) {
      gouts[r] = t_empty();
      sins[r] = t_alloc(TCOLL_FLOAT32, 1, &n);
      mv_fill(&sins[r], 16 * root + r, 0);
    }
  }
  sc = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, &n, t_device());
  T_OK(tcoll_all_gather(&x2, 1, NULL, &ag));
  T_OK(tcoll_broadcast(&x1, 0, NULL, &bc));
  T_OK(tcoll_all_to_all_single(&xa, NULL, NULL, NULL, &a2a));
  T_OK(tcoll_permute(&x1, p, NULL, &pm));
  T_OK(tcoll_shard_dim_all_to_all(&xs, 0, 1, NULL, &sd));
  T_OK(tcoll_gather(&x1, root, NULL, gouts));
  T_OK(tcoll_scatter(sins, root, NULL, &sc));
  /* Complete them in a rank-dependent order. */
  void *bufs[7] = {
      ag.data, bc.data, a2a.data, pm.data, sd.data, me == root ? gouts[0].data : x1.data, sc.data};
  /* 7 is prime and the step 1..6 is coprime to it: every buffer once, at any rank count */
  for (int i = 0; i < 7; i++) T_OK(tcoll_wait(bufs[(i * (me % 6 + 1) + me) % 7]));
  if (me == root)
    for (int r = 1; r < size; r++) T_OK(tcoll_wait(gouts[r].data));
  T_EXPECT(tcoll_pending_count() == 0, "%zu still pending", tcoll_pending_count());
  mv_ag_ctx c1 = {TCOLL_FLOAT16, 2, 1, size, sh2, NULL};
  t_check_all("concurrent all_gather", &ag, mv_ag_expect, &c1, 0);
  mv_check_fill("concurrent broadcast", &bc, 0, 0);
  int64_t *E = malloc((size_t)size * (size_t)size * sizeof *E);
  for (int k = 0; k < size * size; k++) E[k] = 1200;
  mv_a2a_ctx c2 = {TCOLL_INT32, size, me, 1, E, NULL};
  t_check_all("concurrent all_to_all_single", &a2a, mv_a2a_expect, &c2, 0);
  mv_check_fill("concurrent permute", &pm, size - 1 - me, 0);
  mv_shard_ctx c3 = {TCOLL_FLOAT64, 2, 0, 1, size, me, shs, NULL};
  t_check_all("concurrent shard_dim_all_to_all", &sd, mv_shard_expect, &c3, 0);
  mv_check_fill("concurrent scatter", &sc, 16 * root + me, 0);
  if (me == root)
    for (int r = 0; r < size; r++) {
      mv_check_fill("concurrent gather", &gouts[r], r, 0);
      tcoll_tensor_free(&gouts[r]);
      tcoll_tensor_free(&sins[r]);
    }
  free(gouts);
  free(sins);
  free(E);
  free(p);
  tcoll_tensor_t *all[] = {&x1, &x2, &xa, &xs, &ag, &bc, &a2a, &pm, &sd, &sc};
  for (int i = 0; i < 10; i++) tcoll_tensor_free(all[i]);
  WATCH_END("every_op_pending_at_once");
}
END_TEST

/* ---- one _c call, or a split, per MPI ----
 *
 * TCOLL_MAX_COUNT is the largest int count per MPI call. Where MPI has the MPI-4 large-count
 * calls (MPICH 4), a count above it goes in exactly one call of the _c form; where it has not
 * (Open MPI: MPI 3.1), it is split into several calls or described with derived datatypes.
 * These tests count every call each op makes (host buffers, so the staging pipeline stays out
 * except where a test asks for it) and check the results against closed forms. */

typedef struct want {
  int w, calls, calls_c; /* MPI function, int-form calls, _c calls */
} want_t;

/* Since watch_begin: exactly the calls listed (none of any function not listed). */
static void expect_calls(const char *what, const want_t *want, int n) {
  for (int w = 0; w < W_NCALLS; w++) {
    int c = 0, cc = 0;
    for (int k = 0; k < n; k++)
      if (want[k].w == w) c = want[k].calls, cc = want[k].calls_c;
    T_EXPECT(watch.calls[w] == c && watch.calls_c[w] == cc,
             "%s (%s): %d %s and %d %s_c calls (expected %d and %d)", what,
             LARGE_COUNT ? "MPI-4" : "MPI-3", watch.calls[w], W_NAMES[w], watch.calls_c[w],
             W_NAMES[w], c, cc);
  }
}

/* One op that needs one call of function w carrying `count` elements, which is above the
 * limit: one _c call with all of them, or `split` int-form calls of function w_split. */
static void expect_one_c(const char *what, int w, int64_t count, int w_split, int split) {
  want_t large = {w, 0, 1}, small = {w_split, split, 0};
  expect_calls(what, LARGE_COUNT ? &large : &small, 1);
  if (LARGE_COUNT)
    T_EXPECT(watch.max_count == count, "%s: the _c call carried %lld elements (expected %lld)",
             what, (long long)watch.max_count, (long long)count);
}

/* Reductions: rank r contributes x_r[i] = (off + i) % 7 + r, so the sum over p ranks is
 * p * ((off + i) % 7) + p (p - 1) / 2: small integers, exact in every dtype. */
typedef struct red_ctx {
  int64_t off;
  int p;
} red_ctx;

static double red_in(int64_t i, void *c) {
  return (double)((((red_ctx *)c)->off + i) % 7 + t_rank);
}
static double red_sum(int64_t i, void *c) {
  red_ctx *x = c;
  return (double)(x->p * ((x->off + i) % 7) + x->p * (x->p - 1) / 2);
}

/* The MAX over p ranks: (off + i) % 7 + p - 1. */
static double red_max(int64_t i, void *c) {
  red_ctx *x = c;
  return (double)((x->off + i) % 7 + x->p - 1);
}

/* all_reduce (op: SUM or MAX) of n elements of dt; the result checked. */
static void op_case(const char *what, tcoll_redop_t op, tcoll_dtype_t dt, int64_t n, int device) {
  red_ctx c = {0, t_size};
  tcoll_tensor_t in = device == TCOLL_HOST ? t_host(dt, 1, &n) : t_alloc(dt, 1, &n),
                 out = t_empty();
  t_set_all(&in, red_in, &c);
  watch_begin();
  T_OK(tcoll_all_reduce(&in, op, NULL, &out));
  T_OK(tcoll_wait(out.data));
  t_check_all(what, &out, op == TCOLL_MAX ? red_max : red_sum, &c, 0);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

static void sum_case(const char *what, tcoll_dtype_t dt, int64_t n, int device) {
  op_case(what, TCOLL_SUM, dt, n, device);
}

/* reduce_scatter (op: SUM or MAX) of nper elements per rank on the host; the result checked. */
static void rs_op_case(const char *what, tcoll_redop_t op, tcoll_dtype_t dt, int64_t nper) {
  int64_t n = nper * t_size;
  red_ctx in_c = {0, t_size}, out_c = {nper * t_rank, t_size};
  tcoll_tensor_t in = t_host(dt, 1, &n), out = t_empty();
  t_set_all(&in, red_in, &in_c);
  watch_begin();
  T_OK(tcoll_reduce_scatter(&in, op, 0, NULL, &out));
  T_OK(tcoll_wait(out.data));
  t_check_all(what, &out, op == TCOLL_MAX ? red_max : red_sum, &out_c, 0);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

static void rs_sum_case(const char *what, tcoll_dtype_t dt, int64_t nper) {
  rs_op_case(what, TCOLL_SUM, dt, nper);
}

START_TEST(one_c_call_reductions) {
  t_save_algo();
  t_set_algo("mpi"); /* the literal mapping: one MPI call per collective */
  int64_t n = 2500;
  /* all_reduce: one MPI_Iallreduce_c, or 3 pieces (float16 goes through tcoll's own op) */
  sum_case("all_reduce int32 2500", TCOLL_INT32, n, TCOLL_HOST);
  expect_one_c("all_reduce int32 2500", W_ALLREDUCE, n, W_ALLREDUCE, 3);
  WATCH_END("all_reduce int32");
  sum_case("all_reduce float16 2500", TCOLL_FLOAT16, n, TCOLL_HOST);
  expect_one_c("all_reduce float16 2500", W_ALLREDUCE, n, W_ALLREDUCE, 3);
  WATCH_END("all_reduce float16");
  /* reduce to the last rank: one MPI_Ireduce_c, or 3 pieces */
  red_ctx c = {0, t_size};
  int dst = t_size - 1;
  tcoll_tensor_t in = t_host(TCOLL_FLOAT64, 1, &n), out = t_host(TCOLL_FLOAT64, 1, &n);
  t_set_all(&in, red_in, &c);
  watch_begin();
  T_OK(tcoll_reduce(&in, dst, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait(out.data));
  if (t_rank == dst) t_check_all("reduce float64 2500", &out, red_sum, &c, 0);
  expect_one_c("reduce float64 2500", W_REDUCE, n, W_REDUCE, 3);
  WATCH_END("reduce");
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  /* reduce_scatter, 1500 per rank: one MPI_Ireduce_scatter_block_c, or each owner's block
   * reduced to it in 2 pieces (MPI_Ireduce per root and piece) */
  rs_sum_case("reduce_scatter bfloat16 1500 per rank", TCOLL_BFLOAT16, 1500);
  expect_one_c("reduce_scatter bfloat16 1500 per rank", W_REDUCE_SCATTER_BLOCK, 1500, W_REDUCE,
               2 * t_size);
  WATCH_END("reduce_scatter");
  t_restore_algo();
}
END_TEST

START_TEST(one_c_call_moves) {
  t_save_algo();
  t_set_algo("mpi");
  /* broadcast from the last rank: one MPI_Ibcast_c and no derived datatype, or one MPI_Ibcast
   * of a derived datatype */
  int64_t n = 3001;
  tcoll_tensor_t in = t_host(TCOLL_FLOAT32, 1, &n), out = t_empty();
  mv_fill(&in, t_rank, 0);
  watch_begin();
  T_OK(tcoll_broadcast(&in, t_size - 1, NULL, &out));
  T_OK(tcoll_wait(out.data));
  mv_check_fill("broadcast 3001", &out, t_size - 1, 0);
  expect_one_c("broadcast float32 3001", W_BCAST, n, W_BCAST, 1);
  if (LARGE_COUNT)
    T_EXPECT(watch.type_ctors == 0, "broadcast: %d datatype constructors", watch.type_ctors);
  WATCH_END("broadcast");
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  /* all_gather along dim 0: one MPI_Iallgather_c, or one MPI_Iallgather of a derived datatype */
  n = 2500;
  in = t_host(TCOLL_INT16, 1, &n);
  out = t_empty();
  mv_fill(&in, t_rank, 0);
  watch_begin();
  T_OK(tcoll_all_gather(&in, 0, NULL, &out));
  T_OK(tcoll_wait(out.data));
  mv_ag_ctx ag = {TCOLL_INT16, 1, 0, t_size, &n, NULL};
  t_check_all("all_gather int16 2500", &out, mv_ag_expect, &ag, 0);
  expect_one_c("all_gather int16 2500", W_ALLGATHER, n, W_ALLGATHER, 1);
  WATCH_END("all_gather");
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  /* all_to_all_single, 1500 per peer: one MPI_Ialltoallv_c, or one MPI_Ialltoallw */
  int64_t rows = 1500 * (int64_t)t_size;
  in = t_host(TCOLL_FLOAT64, 1, &rows);
  out = t_empty();
  mv_fill(&in, t_rank, 0);
  watch_begin();
  T_OK(tcoll_all_to_all_single(&in, NULL, NULL, NULL, &out));
  T_OK(tcoll_wait(out.data));
  int64_t *E = malloc((size_t)t_size * (size_t)t_size * sizeof *E);
  for (int k = 0; k < t_size * t_size; k++) E[k] = 1500;
  mv_a2a_ctx a2a = {TCOLL_FLOAT64, t_size, t_rank, 1, E, NULL};
  t_check_all("all_to_all_single float64 1500 per peer", &out, mv_a2a_expect, &a2a, 0);
  expect_one_c("all_to_all_single float64 1500 per peer", W_ALLTOALLV, 1500, W_ALLTOALLW, 1);
  WATCH_END("all_to_all_single");
  free(E);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  /* gather and scatter at the last rank: one MPI_Igather_c / MPI_Iscatter_c, or one call of a
   * derived datatype */
  n = 2100;
  int root = t_size - 1;
  in = t_host(TCOLL_UINT8, 1, &n);
  mv_fill(&in, t_rank, 0);
  tcoll_tensor_t *outs = calloc((size_t)t_size, sizeof *outs);
  for (int r = 0; r < t_size; r++) outs[r] = t_empty();
  watch_begin();
  T_OK(tcoll_gather(&in, root, NULL, t_rank == root ? outs : NULL));
  T_OK(tcoll_wait(t_rank == root ? outs[0].data : in.data));
  for (int r = 0; r < t_size && t_rank == root; r++) {
    if (r) T_OK(tcoll_wait(outs[r].data));
    mv_check_fill("gather uint8 2100", &outs[r], r, 0);
  }
  expect_one_c("gather uint8 2100", W_GATHER, n, W_GATHER, 1);
  WATCH_END("gather");
  tcoll_tensor_t sc = t_host(TCOLL_UINT8, 1, &n);
  if (t_rank == root)
    for (int r = 0; r < t_size; r++) mv_fill(&outs[r], 16 + r, 0);
  watch_begin();
  T_OK(tcoll_scatter(t_rank == root ? outs : NULL, root, NULL, &sc));
  T_OK(tcoll_wait(sc.data));
  mv_check_fill("scatter uint8 2100", &sc, 16 + t_rank, 0);
  expect_one_c("scatter uint8 2100", W_SCATTER, n, W_SCATTER, 1);
  WATCH_END("scatter");
  for (int r = 0; r < t_size; r++) tcoll_tensor_free(&outs[r]);
  free(outs);
  tcoll_tensor_free(&sc);
  tcoll_tensor_free(&in);
  t_restore_algo();
}
END_TEST

/* The composed algorithms' steps (the schedule engine): point-to-point steps, local reductions
 * and their collectives take one _c call per block above the limit, or pieces of it. The
 * reductions are MAX, which MPI_Reduce_local does; sums and products of these types are reduced
 * in C (base/host_loops.c), with no MPI call at all. */
START_TEST(one_c_call_composed) {
  t_save_algo();
  int p = t_size, hops = p - 1;
  /* ring all_reduce of blocks of 3000: per hop one MPI_Isend_c / MPI_Irecv_c (MPI_Reduce_local_c
   * in the reduce-scatter half), or 3 pieces of each */
  int64_t n = 3000 * (int64_t)p;
  t_set_algo("all_reduce:ring");
  op_case("ring all_reduce, blocks of 3000", TCOLL_MAX, TCOLL_INT32, n, TCOLL_HOST);
  want_t ring_c[] = {{W_SEND, 0, 2 * hops}, {W_RECV, 0, 2 * hops}, {W_REDUCE_LOCAL, 0, hops}};
  want_t ring_split[] = {
      {W_SEND, 6 * hops, 0}, {W_RECV, 6 * hops, 0}, {W_REDUCE_LOCAL, 3 * hops, 0}};
  expect_calls("ring all_reduce, blocks of 3000", LARGE_COUNT ? ring_c : ring_split, 3);
  WATCH_END("ring all_reduce");
  /* the same ring summing: the sends and receives alike, no MPI_Reduce_local */
  sum_case("ring all_reduce summing, blocks of 3000", TCOLL_INT32, n, TCOLL_HOST);
  expect_calls("ring all_reduce summing, blocks of 3000", LARGE_COUNT ? ring_c : ring_split, 2);
  WATCH_END("ring all_reduce summing");
  /* ring reduce-scatter, then one MPI_Iallgatherv_c; without large counts the gather is a ring */
  t_set_algo("all_reduce:ring_allgather");
  op_case("ring_allgather all_reduce, blocks of 3000", TCOLL_MAX, TCOLL_FLOAT32, n, TCOLL_HOST);
  want_t gv_c[] = {
      {W_SEND, 0, hops}, {W_RECV, 0, hops}, {W_REDUCE_LOCAL, 0, hops}, {W_ALLGATHERV, 0, p > 1}};
  expect_calls("ring_allgather all_reduce, blocks of 3000", LARGE_COUNT ? gv_c : ring_split,
               LARGE_COUNT ? 4 : 3);
  WATCH_END("ring_allgather all_reduce");
  /* reduce_scatter by one MPI_Ialltoall_c of blocks of 1500 and a reduction per block; without
   * large counts the ring (2 pieces a block) */
  t_set_algo("reduce_scatter:alltoall");
  rs_op_case("alltoall reduce_scatter, blocks of 1500", TCOLL_MAX, TCOLL_INT64, 1500);
  want_t a2a_c[] = {{W_ALLTOALL, 0, 1}, {W_REDUCE_LOCAL, 0, hops}};
  want_t a2a_split[] = {
      {W_SEND, 2 * hops, 0}, {W_RECV, 2 * hops, 0}, {W_REDUCE_LOCAL, 2 * hops, 0}};
  expect_calls("alltoall reduce_scatter, blocks of 1500", LARGE_COUNT ? a2a_c : a2a_split,
               LARGE_COUNT ? 2 : 3);
  WATCH_END("alltoall reduce_scatter");
  t_restore_algo();
}
END_TEST

/* Device buffers through the staging pipeline: a chunk is one MPI call, so with large counts
 * chunks of more than the limit go in _c calls; without, chunks never exceed the limit. */
START_TEST(one_c_call_pipeline) {
  if (t_device() == TCOLL_HOST) return; /* the -dev runs */
  t_save_algo();
  t_set_algo("mpi");
  tcoll_config_t cfg;
  T_OK(tcoll_get_config(&cfg));
  size_t old_chunk = cfg.staging_chunk;
  cfg.staging_chunk = 8192; /* 2048 float32: 3 chunks of 6000, or 6 of at most 1000 */
  T_OK(tcoll_set_config(&cfg));
  int64_t n = 6000;
  sum_case("pipelined all_reduce float32 6000", TCOLL_FLOAT32, n, t_device());
  want_t ar_c = {W_ALLREDUCE, 0, 3}, ar_split = {W_ALLREDUCE, 6, 0};
  expect_calls("pipelined all_reduce float32 6000", LARGE_COUNT ? &ar_c : &ar_split, 1);
  WATCH_END("pipelined all_reduce");
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, &n), out = t_empty();
  mv_fill(&in, t_rank, 0);
  watch_begin();
  T_OK(tcoll_broadcast(&in, 0, NULL, &out));
  T_OK(tcoll_wait(out.data));
  mv_check_fill("pipelined broadcast float32 6000", &out, 0, 0);
  want_t bc_c = {W_BCAST, 0, 3}, bc_split = {W_BCAST, 6, 0};
  expect_calls("pipelined broadcast float32 6000", LARGE_COUNT ? &bc_c : &bc_split, 1);
  WATCH_END("pipelined broadcast");
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  cfg.staging_chunk = old_chunk;
  T_OK(tcoll_set_config(&cfg));
  t_restore_algo();
}
END_TEST

/* A call MPI refuses is named in tcoll's error in the form that was called: its _c form where
 * a count above the limit took one. The watch makes the calls fail (MPI_ERR_COUNT) before MPI
 * sees them, on every rank alike. */
static void expect_named(const char *what, int rc, const char *call) {
  char want[64];
  snprintf(want, sizeof want, "%s failed", call);
  T_EXPECT(rc == TCOLL_ERR_MPI && t_contains(tcoll_last_error(), want),
           "%s: %s: %s (expected \"%s\")", what, tcoll_status_string(rc), tcoll_last_error(), want);
  /* A work whose post failed may stay registered, for a wait to report the failure again. */
  rc = tcoll_wait_all();
  T_EXPECT(rc == TCOLL_SUCCESS || t_contains(tcoll_last_error(), want), "%s: the wait said %s",
           what, tcoll_last_error());
  T_EXPECT(tcoll_pending_count() == 0, "%s: %zu pending after the wait", what,
           tcoll_pending_count());
}

START_TEST(c_call_errors_named) {
  t_save_algo();
  t_set_algo("mpi");
  int64_t n = 2500, rows = 1500 * (int64_t)t_size;
  tcoll_tensor_t in = t_host(TCOLL_FLOAT32, 1, &n), big = t_host(TCOLL_FLOAT32, 1, &rows),
                 out = t_empty();
  watch_begin();
  watch.fail = 1u << W_ALLREDUCE;
  expect_named("all_reduce", tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out),
               LARGE_COUNT ? "MPI_Iallreduce_c" : "MPI_Iallreduce");
  tcoll_tensor_free(&out);
  watch.fail = 1u << W_BCAST;
  expect_named("broadcast", tcoll_broadcast(&in, 0, NULL, &out),
               LARGE_COUNT ? "MPI_Ibcast_c" : "MPI_Ibcast");
  tcoll_tensor_free(&out);
  watch.fail = 1u << W_ALLTOALLV | 1u << W_ALLTOALLW;
  expect_named("all_to_all_single", tcoll_all_to_all_single(&big, NULL, NULL, NULL, &out),
               LARGE_COUNT ? "MPI_Ialltoallv_c" : "MPI_Ialltoallw");
  tcoll_tensor_free(&out);
  if (t_size > 1) { /* the schedule engine's steps: the ring's first send */
    t_set_algo("all_reduce:ring");
    int64_t nr = 3000 * (int64_t)t_size;
    tcoll_tensor_t r = t_host(TCOLL_FLOAT32, 1, &nr);
    watch.fail = 1u << W_SEND | 1u << W_RECV;
    expect_named("ring all_reduce", tcoll_all_reduce(&r, TCOLL_SUM, NULL, &out),
                 LARGE_COUNT ? "MPI_Isend_c" : "MPI_Isend");
    tcoll_tensor_free(&out);
    tcoll_tensor_free(&r);
  }
  if (LARGE_COUNT) { /* the schedule engine's collectives (without large counts: the ring) */
    t_set_algo("reduce_scatter:alltoall");
    watch.fail = 1u << W_ALLTOALL;
    expect_named("alltoall reduce_scatter", tcoll_reduce_scatter(&big, TCOLL_SUM, 0, NULL, &out),
                 "MPI_Ialltoall_c");
    tcoll_tensor_free(&out);
  }
  watch.fail = 0;
  t_restore_algo();
  /* Nothing was left half done: the next collective works. */
  sum_case("all_reduce after the refused calls", TCOLL_INT32, n, TCOLL_HOST);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&big);
}
END_TEST

/* Counts above INT_MAX themselves, TCOLL_MAX_COUNT at its default: each reaches MPI whole, in
 * one _c call, or within int counts without large counts. The buffers are address space only
 * (MAP_NORESERVE): the watch fails each call before MPI moves any data, and tcoll touches none. */
static void expect_whole(const char *what, int rc, int w, int64_t n, int split_w) {
  T_EXPECT(rc == TCOLL_ERR_MPI, "%s: %s (expected the failure the watch made)", what,
           tcoll_status_string(rc));
  tcoll_wait_all();
  if (LARGE_COUNT)
    T_EXPECT(watch.calls_c[w] == 1 && watch.max_count == n,
             "%s: %d %s_c calls, largest count %lld (expected one "
             "of %lld)",
             what, watch.calls_c[w], W_NAMES[w], (long long)watch.max_count, (long long)n);
  else
    T_EXPECT(watch.calls[split_w] == 1 && watch.max_count <= INT_MAX,
             "%s: %d %s calls, largest count %lld", what, watch.calls[split_w], W_NAMES[split_w],
             (long long)watch.max_count);
  WATCH_END(what);
}

START_TEST(counts_above_int_max) {
  int64_t n = (int64_t)INT_MAX + 1001, p = t_size;
  size_t bytes =
      (size_t)(2 * p + 1) * (size_t)n; /* uint8: in and out of an all-to-all, one more n */
  char *mem =
      mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  int ok = mem != MAP_FAILED, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_ok) {
    if (t_rank == 0)
      printf("counts_above_int_max: no %zu bytes of address space here; not run\n", bytes);
    if (ok) munmap(mem, bytes);
    return;
  }
  t_save_algo();
  t_set_algo("mpi");
  set_limit(INT_MAX);
  int64_t pn = p * n;
  tcoll_tensor_t x = tcoll_tensor_make(mem, TCOLL_UINT8, 1, &n, TCOLL_HOST);
  tcoll_tensor_t all = tcoll_tensor_make(mem, TCOLL_UINT8, 1, &pn, TCOLL_HOST);
  tcoll_tensor_t mine =
      tcoll_tensor_make(mem + (size_t)t_rank * (size_t)n, TCOLL_UINT8, 1, &n, TCOLL_HOST);
  tcoll_tensor_t other = tcoll_tensor_make(mem + (size_t)pn, TCOLL_UINT8, 1, &pn, TCOLL_HOST);
  tcoll_tensor_t last = tcoll_tensor_make(mem + 2 * (size_t)pn, TCOLL_UINT8, 1, &n, TCOLL_HOST);
  watch_begin();
  watch.fail = 1u << W_BCAST;
  expect_whole("broadcast of INT_MAX + 1001", tcoll_broadcast(&x, 0, NULL, &x), W_BCAST, n,
               W_BCAST);
  watch_begin();
  watch.fail = 1u << W_ALLREDUCE;
  expect_whole("all_reduce of INT_MAX + 1001", tcoll_all_reduce(&x, TCOLL_SUM, NULL, &x),
               W_ALLREDUCE, n, W_ALLREDUCE);
  watch_begin();
  watch.fail = 1u << W_ALLGATHER;
  expect_whole("all_gather of INT_MAX + 1001", tcoll_all_gather(&mine, 0, NULL, &all), W_ALLGATHER,
               n, W_ALLGATHER);
  watch_begin();
  watch.fail = 1u << W_REDUCE_SCATTER_BLOCK | 1u << W_REDUCE;
  expect_whole("reduce_scatter of INT_MAX + 1001 per rank",
               tcoll_reduce_scatter(&all, TCOLL_SUM, 0, NULL, &last), W_REDUCE_SCATTER_BLOCK, n,
               W_REDUCE);
  watch_begin();
  watch.fail = 1u << W_ALLTOALLV | 1u << W_ALLTOALLW;
  expect_whole("all_to_all_single of INT_MAX + 1001 per peer",
               tcoll_all_to_all_single(&all, NULL, NULL, NULL, &other), W_ALLTOALLV, n,
               W_ALLTOALLW);
  watch.fail = 0;
  set_limit(LIMIT);
  t_restore_algo();
  munmap(mem, bytes);
}
END_TEST

/* ---- a tiny limit: derived datatypes nested several levels ---- */

START_TEST(tiny_limit) {
  watch_begin();
  set_limit(7); /* counts above 7^2 and 7^3 nest the repeat types */
  int64_t s1[2] = {60, 9};
  ag_case(TCOLL_FLOAT32, 2, s1, 1, false); /* 60 blocks of 9 */
  ag_case(TCOLL_INT8, 2, s1, 0, true);     /* 540 contiguous */
  int64_t s2[3] = {5, 11, 13};
  ag_case(TCOLL_FLOAT16, 3, s2, 1, false);
  int64_t n = 500;
  tcoll_tensor_t in = t_alloc(TCOLL_FLOAT64, 1, &n), out = t_empty();
  mv_fill(&in, t_rank, 0);
  T_OK(tcoll_broadcast(&in, t_size - 1, NULL, &out));
  T_OK(tcoll_wait(out.data));
  mv_check_fill("tiny-limit broadcast", &out, t_size - 1, 0);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
  int64_t *S = malloc((size_t)t_size * (size_t)t_size * sizeof *S);
  for (int i = 0; i < t_size; i++)
    for (int j = 0; j < t_size; j++) S[i * t_size + j] = ((i + 2 * j + 1) % 4) * 20;
  a2a_case(TCOLL_BFLOAT16, S, 0, 1, false, "tiny limit, uneven");
  a2a_case(TCOLL_INT64, S, 0, 9, true, "tiny limit, rows of 9");
  a2a_case(TCOLL_FLOAT32, NULL, 2, 60, false, "tiny limit, rows of 60");
  free(S);
  int64_t sh[2] = {9, 10 * (int64_t)t_size};
  shard_case(TCOLL_INT32, 2, sh, 0, 1, false);
  set_limit(LIMIT);
  T_EXPECT(current_limit() == LIMIT, "limit not restored");
  WATCH_END("tiny_limit");
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("large_count");
  TCase *tc = t_tcase("large_count");
  tcase_add_test(tc, limit_in_force);
  tcase_add_test(tc, all_gather_dim0);
  tcase_add_test(tc, all_gather_other_dims);
  tcase_add_test(tc, all_gather_in_place);
  tcase_add_test(tc, all_gather_list_and_coalesced);
  tcase_add_test(tc, broadcast_large);
  tcase_add_test(tc, all_to_all_single_large);
  tcase_add_test(tc, permute_large);
  tcase_add_test(tc, shard_large);
  tcase_add_test(tc, gather_scatter_large);
  tcase_add_test(tc, all_to_all_list_large);
  tcase_add_test(tc, many_pending_distinct_types);
  tcase_add_test(tc, every_op_pending_at_once);
  tcase_add_test(tc, one_c_call_reductions);
  tcase_add_test(tc, one_c_call_moves);
  tcase_add_test(tc, one_c_call_composed);
  tcase_add_test(tc, one_c_call_pipeline);
  tcase_add_test(tc, c_call_errors_named);
  tcase_add_test(tc, counts_above_int_max);
  tcase_add_test(tc, tiny_limit);
  suite_add_tcase(s, tc);
  return s;
}
