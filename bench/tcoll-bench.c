/* tcoll-bench: tcoll's collectives against raw MPI, side by side in one run.
 *
 *   tcoll-mpiexec -n 2 tcoll-bench [--ops LIST] [--dtype T] [--min SIZE] [--max SIZE] [--step F] [--iters N]
 *                            [--min-iters N] [--time SEC] [--warmup N] [--csv FILE]
 *                            [--device] [--alloc] [--grad] [--tune] [--no-overlap] [--no-check] [--quiet]
 *                            [--repeat N]
 *
 * For each op and size the bench alternates iterations of the tcoll call (post + wait) and of
 * the raw MPI code that does the same thing (MPI_I* + MPI_Wait on host buffers), so that noise
 * on a shared machine hits both. Each iteration is timed on every rank; the time of an
 * iteration is the slowest rank's, and a point reports the median over iterations. The order
 * of the variants flips every iteration (ABBA) so that neither always runs first (the memcpy
 * of the %-of-memcpy column opens every iteration, outside the flipping: see variant_at). The ratio is
 * the median over iterations of tcoll's time over the adjacent MPI iteration's: on a loaded
 * machine times are bimodal (a rank that loses its core makes a round slow), which moves the
 * medians of the two variants independently but mostly moves both members of a pair together.
 *
 * Columns: the median times, the ratio (tcoll / MPI) and their difference, algbw = S / t, busbw =
 * algbw * factor with nccl-tests' S and factors (doc/PERFORMANCE.md there): all_reduce 2(n-1)/n,
 * all_gather and reduce_scatter (n-1)/n with S the whole gathered / scattered array, all_to_all
 * (n-1)/n, broadcast 1. The overlap columns follow OSU's osu_iallreduce: post, compute for about
 * the pure communication time, wait; overlap = 100 * (1 - (t_total - t_compute) / t_pure),
 * clamped to [0, 100]. Allocation columns count heap allocation calls per call in the timed
 * window: made by the whole process (tcoll, MPI, glibc, every thread) for tcoll and for raw MPI
 * (MPI's nonblocking collectives allocate too), and made by libtcoll's own code ("own": the
 * caller's address lies in libtcoll; see alloc_count.c). mcp_t / mcp_m: a memcpy of the bytes each
 * rank must move (S x the busbw factor), timed in the same rounds on every rank at once, in
 * percent of tcoll's / MPI's time: how close each comes to the machine's limit. algorithm: what
 * tcoll chose for the call (tcoll_last_algorithm; doc/guide.md, "Algorithms").
 *
 * --tune times all_reduce, reduce_scatter, reduce and the all-to-all family again under each
 * algorithm, forced through the config's algo field (as TCOLL_ALGO does), notes each one's time
 * over raw MPI's, and prints at the end the table of the best algorithm by size that it measured.
 *
 * Extra cases: all_gather and reduce_scatter along dim 1 also time the dim-0 call on the same
 * bytes (dim1/dim0), and all_gather_dim1 also a contiguous MPI all_gather followed by a local
 * interleave; coalesced times tcoll_all_reduce_coalesced of 64 x 256 elements against raw MPI
 * (pack, one MPI_Iallreduce, unpack), against one raw MPI_Iallreduce of the same total bytes from
 * one contiguous buffer (coalesced/one_raw: the target), and 64 separate tcoll_all_reduce calls
 * (all posted, then all waited) against 64 MPI_Iallreduce + MPI_Waitall. reduce goes to rank 0
 * (results compared there only). The all-to-all family: all_to_all (the list form, one tensor per
 * peer) against the raw MPI_Ialltoall of the same bytes between contiguous buffers, as
 * all_to_all_single; permute (a shift by one rank) against its literal call (MPI_Ialltoallv with
 * one non-empty block each way), and MPI_Irecv + MPI_Isend in the note (/p2p); shard_dim
 * ([R, n C] sharded along dim 1, gathered along 0) and shard_dim_g1s0 (the reverse) against their
 * literal call (MPI_Ialltoallv of strided slab datatypes), and the raw MPI_Ialltoall of the same
 * bytes in the note (/alltoall).
 *
 * --alloc adds to every op with one output a variant whose output tcoll allocates (data == NULL,
 * freed after the wait): alloc/prealloc in the note. grad_all_reduce (--grad, or in --ops) times
 * the differentiable all_reduce forward + backward, outputs allocated by tcoll, against one raw
 * MPI_Iallreduce (the ratio column), one plain tcoll_all_reduce (grad/plain: the target) and two
 * (grad/two_plain: what forward + backward communicate).
 *
 * --repeat N runs the whole sweep N times and reports, per point, the median over the sweeps of
 * each column: on a shared machine whose speed drifts over minutes, one sweep can land in a slow
 * spell that the per-point medians do not remove.
 *
 * --device puts tcoll's tensors on a device (TCOLL_FAKE_DEVICES=N emulates one; with CUDA the
 * rank's node-local index modulo the device count) and compares with raw MPI on host buffers:
 * the ratio then shows what staging costs. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <tcoll.h>

#include "alloc_count.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ options, globals */

enum {
  OP_ALL_REDUCE,
  OP_ALL_GATHER,
  OP_ALL_GATHER_D1,
  OP_REDUCE_SCATTER,
  OP_REDUCE_SCATTER_D1,
  OP_ALL_TO_ALL,
  OP_BROADCAST,
  OP_COALESCED,
  OP_GRAD_ALL_REDUCE,
  OP_REDUCE,
  OP_A2A_LIST,
  OP_PERMUTE,
  OP_SHARD,
  OP_SHARD_G1,
  NUM_OPS
};

static const char *const op_names[NUM_OPS] = {
    "all_reduce",          "all_gather", "all_gather_dim1", "reduce_scatter", "reduce_scatter_dim1",
    "all_to_all_single",   "broadcast",  "coalesced",       "grad_all_reduce",     "reduce",
    "all_to_all",          "permute",    "shard_dim",       "shard_dim_g1s0",
};

#define COAL_N 64       /* tensors in the coalesced case */
#define COAL_NUMEL 256  /* elements per tensor */
#define MAX_VARIANTS 8

static struct {
  bool ops[NUM_OPS];
  size_t min_bytes, max_bytes;
  int step;
  int max_iters, min_iters, warmup, repeat;
  double time_per_point;
  const char *csv;
  bool device, overlap, check, quiet;
  bool alloc; /* --alloc: also time each op with outputs tcoll allocates (data == NULL) */
  bool tune;  /* --tune: also time every algorithm of all_reduce and reduce_scatter */
} opt = {.min_bytes = 8,
         .max_bytes = (size_t)64 << 20,
         .step = 2,
         .max_iters = 1000,
         .min_iters = 10,
         .warmup = 5,
         .repeat = 1,
         .time_per_point = 0.25,
         .overlap = true,
         .check = true};

/* The element type (--dtype): tcoll's and raw MPI's names for it. */
static struct {
  const char *name;
  tcoll_dtype_t tc;
  MPI_Datatype mpi;
  size_t size;
} g_dt;

static int g_rank, g_size;
static int g_dev = TCOLL_HOST; /* where tcoll's tensors live */
static MPI_Comm g_mpi;          /* raw MPI's communicator (a duplicate of MPI_COMM_WORLD) */
static tcoll_comm_t *g_tc;      /* tcoll's world */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tcoll-bench (rank %d): ", g_rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

#define TC(call)                                                                                 \
  do {                                                                                           \
    int rc_ = (call);                                                                            \
    if (rc_ != TCOLL_SUCCESS) die("%s: %s: %s", #call, tcoll_status_string(rc_), tcoll_last_error()); \
  } while (0)
#define MP(call)                                                                                 \
  do {                                                                                           \
    int rc_ = (call);                                                                            \
    if (rc_ != MPI_SUCCESS) die("%s failed (MPI error %d)", #call, rc_);                          \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 64, n ? n : 1)) die("out of memory (%zu bytes)", n);
  memset(p, 0, n);
  return p;
}

/* ------------------------------------------------------------------ a benchmark point */

typedef struct point point_t;
typedef void (*step_fn)(point_t *);
typedef struct variant {
  step_fn post, wait;
  const char *algo; /* TCOLL_ALGO in force for this variant (--tune); NULL: the run's own */
} variant_t;

#define MAX_TUNE 3 /* algorithms of one op besides auto */

struct point {
  int op;
  size_t bytes;  /* nccl-tests' S */
  int64_t count; /* elements of one rank's input */
  double busfactor;
  int nv;
  variant_t v[MAX_VARIANTS];
  int64_t R, C; /* 2-D shape for the dim-1 cases (per-rank input for all_gather) */
  /* tcoll side (on g_dev) */
  tcoll_tensor_t tin, tout, tin0, tout0;
  tcoll_tensor_t talloc, tgrad; /* outputs tcoll allocates in the --alloc and grad variants */
  int valloc;                   /* --alloc: index of the allocated-output variant; 0: none */
  int vmemcpy;                  /* index of the memcpy variant; 0: none */
  char *cpy_src, *cpy_dst;      /* memcpy of the bytes each rank must move (S x busbw factor) */
  size_t cpy_bytes;
  int vtune, ntune;             /* --tune: the variants forcing each algorithm */
  const char *tune_names[MAX_TUNE];
  char *mone;                   /* coalesced: one contiguous buffer for one raw MPI_Iallreduce */
  tcoll_tensor_t cin[COAL_N], cout[COAL_N], sout[COAL_N];
  /* raw MPI side (host) */
  char *min, *mout, *mout2, *scratch; /* g_dt elements */
  char *mcin[COAL_N], *mcout[COAL_N], *msout[COAL_N];
  MPI_Datatype vec, rvec; /* shard: the slab types of the input and the output */
  int *ones, *slabs, *pcounts, *pdispls; /* shard: counts and displacements; permute: raw MPI's */
  int to, from;                          /* permute: this rank's destination and source */
  MPI_Request req, reqs[COAL_N];
  MPI_Status stats[COAL_N]; /* not MPI_STATUSES_IGNORE: MPICH's (MPI_Status *)1 makes GCC 12 warn */
};

/* Small integers: exact in every --dtype, and so are their sums over the ranks in any order. */
static double pattern(int rank, int64_t i) { return (double)((rank + 1) + (int)(i % 13)); }

static void store(void *x, int64_t i, double v) {
  switch (g_dt.tc) {
  case TCOLL_FLOAT64: ((double *)x)[i] = v; break;
  case TCOLL_INT32: ((int32_t *)x)[i] = (int32_t)v; break;
  case TCOLL_INT64: ((int64_t *)x)[i] = (int64_t)v; break;
  default: ((float *)x)[i] = (float)v; break;
  }
}

static double load(const void *x, int64_t i) {
  switch (g_dt.tc) {
  case TCOLL_FLOAT64: return ((const double *)x)[i];
  case TCOLL_INT32: return ((const int32_t *)x)[i];
  case TCOLL_INT64: return (double)((const int64_t *)x)[i];
  default: return ((const float *)x)[i];
  }
}

static tcoll_tensor_t tensor_on(int device, int ndim, int64_t a, int64_t b) {
  int64_t shape[2] = {a, b};
  tcoll_tensor_t t;
  memset(&t, 0, sizeof t);
  TC(tcoll_tensor_alloc(&t, g_dt.tc, ndim, shape, device));
  return t;
}

static void fill_host(void *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) store(x, i, pattern(g_rank, i));
}

static void fill_tensor(tcoll_tensor_t *t) {
  int64_t n = tcoll_tensor_numel(t);
  if (t->device == TCOLL_HOST) {
    fill_host(t->data, n);
    return;
  }
  tcoll_tensor_t h = tensor_on(TCOLL_HOST, 1, n, 0);
  fill_host(h.data, n);
  TC(tcoll_tensor_copy(t, &h));
  tcoll_tensor_free(&h);
}

/* Elements of t that differ from ref (t may live on a device). */
static long diff_tensor(const tcoll_tensor_t *t, const void *ref) {
  int64_t n = tcoll_tensor_numel(t);
  tcoll_tensor_t h = *t;
  if (t->device != TCOLL_HOST) {
    h = tensor_on(TCOLL_HOST, t->ndim, t->shape[0], t->ndim > 1 ? t->shape[1] : 0);
    TC(tcoll_tensor_copy(&h, t));
  }
  long bad = 0;
  const char *x = h.data, *r = ref;
  for (int64_t i = 0; i < n; i++) bad += memcmp(x + i * g_dt.size, r + i * g_dt.size, g_dt.size) != 0;
  if (t->device != TCOLL_HOST) tcoll_tensor_free(&h);
  return bad;
}

/* ---- all_reduce ---- */
static void t_allreduce_post(point_t *p) { TC(tcoll_all_reduce(&p->tin, TCOLL_SUM, g_tc, &p->tout)); }
static void t_wait_out(point_t *p) { TC(tcoll_wait(p->tout.data)); }
static void m_allreduce_post(point_t *p) {
  MP(MPI_Iallreduce(p->min, p->mout, (int)p->count, g_dt.mpi, MPI_SUM, g_mpi, &p->req));
}
static void m_wait(point_t *p) { MP(MPI_Wait(&p->req, MPI_STATUS_IGNORE)); }

/* ---- reduce (to rank 0) ---- */
static void t_reduce_post(point_t *p) { TC(tcoll_reduce(&p->tin, 0, TCOLL_SUM, g_tc, &p->tout)); }
static void m_reduce_post(point_t *p) {
  MP(MPI_Ireduce(p->min, p->mout, (int)p->count, g_dt.mpi, MPI_SUM, 0, g_mpi, &p->req));
}

/* ---- broadcast (in place on both sides, root 0) ---- */
static void t_bcast_post(point_t *p) { TC(tcoll_broadcast(&p->tin, 0, g_tc, &p->tin)); }
static void t_wait_in(point_t *p) { TC(tcoll_wait(p->tin.data)); }
static void m_bcast_post(point_t *p) { MP(MPI_Ibcast(p->min, (int)p->count, g_dt.mpi, 0, g_mpi, &p->req)); }

/* ---- all_gather ---- */
static void t_allgather_post(point_t *p) { TC(tcoll_all_gather(&p->tin, 0, g_tc, &p->tout)); }
static void t_allgather_d1_post(point_t *p) { TC(tcoll_all_gather(&p->tin, 1, g_tc, &p->tout)); }
static void t_allgather_d0_post(point_t *p) { TC(tcoll_all_gather(&p->tin0, 0, g_tc, &p->tout0)); }
static void t_wait_out0(point_t *p) { TC(tcoll_wait(p->tout0.data)); }
static void m_allgather_post(point_t *p) {
  MP(MPI_Iallgather(p->min, (int)p->count, g_dt.mpi, p->mout, (int)p->count, g_dt.mpi, g_mpi, &p->req));
}
/* Rank r's [R, C] block lands as columns r*C..(r+1)*C-1 of [R, n*C]: one strided datatype. */
static void m_allgather_d1_post(point_t *p) {
  MP(MPI_Iallgather(p->min, (int)p->count, g_dt.mpi, p->mout, 1, p->vec, g_mpi, &p->req));
}

/* The alternative a library could use: a contiguous all_gather into scratch, then a local
 * interleave (rank r's [R, C] block to columns r*C..). Measured to compare with the datatype. */
static void m_allgather_unpack_post(point_t *p) {
  MP(MPI_Iallgather(p->min, (int)p->count, g_dt.mpi, p->scratch, (int)p->count, g_dt.mpi, g_mpi, &p->req));
}
static void m_allgather_unpack_wait(point_t *p) {
  MP(MPI_Wait(&p->req, MPI_STATUS_IGNORE));
  size_t C = (size_t)p->C, R = (size_t)p->R, row = C * (size_t)g_size;
  for (int r = 0; r < g_size; r++)
    for (size_t i = 0; i < R; i++)
      memcpy(p->mout2 + (i * row + (size_t)r * C) * g_dt.size, p->scratch + ((size_t)r * R + i) * C * g_dt.size,
             C * g_dt.size);
}

/* ---- reduce_scatter ---- */
static void t_rs_post(point_t *p) { TC(tcoll_reduce_scatter(&p->tin, TCOLL_SUM, 0, g_tc, &p->tout)); }
static void t_rs_d1_post(point_t *p) { TC(tcoll_reduce_scatter(&p->tin, TCOLL_SUM, 1, g_tc, &p->tout)); }
static void t_rs_d0_post(point_t *p) { TC(tcoll_reduce_scatter(&p->tin0, TCOLL_SUM, 0, g_tc, &p->tout0)); }
static void m_rs_post(point_t *p) {
  MP(MPI_Ireduce_scatter_block(p->min, p->mout, (int)(p->count / g_size), g_dt.mpi, MPI_SUM, g_mpi, &p->req));
}
/* MPI's reductions take no strided datatypes: pack [R, n*Cs] rank-major first, as a user must. */
static void m_rs_d1_post(point_t *p) {
  int64_t R = p->R, C = p->C, cs = C / g_size;
  for (int r = 0; r < g_size; r++)
    for (int64_t i = 0; i < R; i++)
      memcpy(p->scratch + ((size_t)r * (size_t)R + (size_t)i) * (size_t)cs * g_dt.size,
             p->min + ((size_t)i * (size_t)C + (size_t)r * (size_t)cs) * g_dt.size, (size_t)cs * g_dt.size);
  MP(MPI_Ireduce_scatter_block(p->scratch, p->mout, (int)(R * cs), g_dt.mpi, MPI_SUM, g_mpi, &p->req));
}

/* ---- all_to_all_single (even splits) ---- */
static void t_a2a_post(point_t *p) { TC(tcoll_all_to_all_single(&p->tin, NULL, NULL, g_tc, &p->tout)); }
static void m_a2a_post(point_t *p) {
  int per = (int)(p->count / g_size);
  MP(MPI_Ialltoall(p->min, per, g_dt.mpi, p->mout, per, g_dt.mpi, g_mpi, &p->req));
}

/* ---- all_to_all (list): one tensor per peer of per = count / n elements, against the raw
 * MPI_Ialltoall of the same bytes between contiguous buffers (as all_to_all_single) ---- */
static void t_a2a_list_post(point_t *p) { TC(tcoll_all_to_all(p->cin, g_tc, p->cout)); }
static void t_a2a_list_wait(point_t *p) {
  for (int i = 0; i < g_size; i++) TC(tcoll_wait(p->cout[i].data));
}

/* ---- permute: a shift (rank r sends to r + 1), against its literal MPI call (MPI_Ialltoallv
 * with one non-empty block each way) and, in the note, against MPI_Irecv + MPI_Isend ---- */
static void t_perm_post(point_t *p) { TC(tcoll_permute(&p->tin, p->pcounts + 2 * g_size, g_tc, &p->tout)); }
static void m_perm_post(point_t *p) {
  int *c = p->pcounts, *d = p->pdispls;
  MP(MPI_Ialltoallv(p->min, c, d, g_dt.mpi, p->mout, c + g_size, d, g_dt.mpi, g_mpi, &p->req));
}
static void m_perm_p2p_post(point_t *p) {
  MP(MPI_Irecv(p->scratch, (int)p->count, g_dt.mpi, p->from, 0, g_mpi, &p->reqs[0]));
  MP(MPI_Isend(p->min, (int)p->count, g_dt.mpi, p->to, 0, g_mpi, &p->reqs[1]));
}
static void m_wait2(point_t *p) { MP(MPI_Waitall(2, p->reqs, p->stats)); }

/* ---- shard_dim_all_to_all: [R, n C] sharded along dim 1, gathered along 0 into [n R, C]
 * (shard_dim), or [n R, C] along 0 into [R, n C] (shard_dim_g1s0); against its literal MPI call
 * (MPI_Ialltoallv of one slab datatype per rank) and, in the note, the raw MPI_Ialltoall of the
 * same bytes between contiguous buffers ---- */
static void t_shard_post(point_t *p) {
  bool g1 = p->op == OP_SHARD_G1;
  TC(tcoll_shard_dim_all_to_all(&p->tin, g1 ? 1 : 0, g1 ? 0 : 1, g_tc, &p->tout));
}
static void m_shard_post(point_t *p) {
  MP(MPI_Ialltoallv(p->min, p->ones, p->slabs, p->vec, p->mout, p->ones, p->slabs, p->rvec, g_mpi, &p->req));
}
static void m_a2a_scratch_post(point_t *p) {
  int per = (int)(p->count / g_size);
  MP(MPI_Ialltoall(p->min, per, g_dt.mpi, p->scratch, per, g_dt.mpi, g_mpi, &p->req));
}

/* Slab r of a [outer, n block] layout: outer runs of block elements, n block apart, whose extent
 * is one block (displacement r selects slab r). */
static MPI_Datatype slab_type(int64_t outer, int64_t block) {
  MPI_Datatype v, t;
  MP(MPI_Type_vector((int)outer, (int)block, (int)(block * g_size), g_dt.mpi, &v));
  MP(MPI_Type_create_resized(v, 0, (MPI_Aint)(block * (int64_t)g_dt.size), &t));
  MP(MPI_Type_commit(&t));
  MPI_Type_free(&v);
  return t;
}

/* ---- coalesced: 64 tensors of 256 elements ---- */
static void t_coal_post(point_t *p) { TC(tcoll_all_reduce_coalesced(p->cin, COAL_N, TCOLL_SUM, g_tc, p->cout)); }
static void t_coal_wait(point_t *p) {
  for (int i = 0; i < COAL_N; i++) TC(tcoll_wait(p->cout[i].data));
}
static void m_coal_post(point_t *p) {
  for (int i = 0; i < COAL_N; i++) memcpy(p->scratch + i * COAL_NUMEL * g_dt.size, p->mcin[i], COAL_NUMEL * g_dt.size);
  MP(MPI_Iallreduce(MPI_IN_PLACE, p->scratch, COAL_N * COAL_NUMEL, g_dt.mpi, MPI_SUM, g_mpi, &p->req));
}
static void m_coal_wait(point_t *p) {
  MP(MPI_Wait(&p->req, MPI_STATUS_IGNORE));
  for (int i = 0; i < COAL_N; i++) memcpy(p->mcout[i], p->scratch + i * COAL_NUMEL * g_dt.size, COAL_NUMEL * g_dt.size);
}
static void t_sep_post(point_t *p) {
  for (int i = 0; i < COAL_N; i++) TC(tcoll_all_reduce(&p->cin[i], TCOLL_SUM, g_tc, &p->sout[i]));
}
static void t_sep_wait(point_t *p) {
  for (int i = 0; i < COAL_N; i++) TC(tcoll_wait(p->sout[i].data));
}
static void m_sep_post(point_t *p) {
  for (int i = 0; i < COAL_N; i++)
    MP(MPI_Iallreduce(p->mcin[i], p->msout[i], COAL_NUMEL, g_dt.mpi, MPI_SUM, g_mpi, &p->reqs[i]));
}
static void m_sep_wait(point_t *p) { MP(MPI_Waitall(COAL_N, p->reqs, p->stats)); }
/* The naive loop: each all_reduce waited before the next is posted. */
static void t_each_post(point_t *p) {
  for (int i = 0; i < COAL_N; i++) {
    TC(tcoll_all_reduce(&p->cin[i], TCOLL_SUM, g_tc, &p->sout[i]));
    TC(tcoll_wait(p->sout[i].data));
  }
}
static void m_each_post(point_t *p) {
  for (int i = 0; i < COAL_N; i++) {
    MP(MPI_Iallreduce(p->mcin[i], p->msout[i], COAL_NUMEL, g_dt.mpi, MPI_SUM, g_mpi, &p->reqs[i]));
    MP(MPI_Wait(&p->reqs[i], MPI_STATUS_IGNORE));
  }
}
static void no_wait(point_t *p) { (void)p; }
/* What the coalesced call is measured against: one raw MPI_Iallreduce of the same total bytes,
 * between two contiguous buffers (no packing), as the plain all_reduce row does. */
static void m_one_post(point_t *p) {
  MP(MPI_Iallreduce(p->mone, p->mone + p->bytes, COAL_N * COAL_NUMEL, g_dt.mpi, MPI_SUM, g_mpi, &p->req));
}

/* ---- --alloc: the same call with an output tcoll allocates (data == NULL), freed after the wait,
 * against the preallocated variant 0 ---- */
static tcoll_tensor_t unallocated(void) { return tcoll_tensor_make(NULL, TCOLL_FLOAT32, 0, NULL, g_dev); }
static void t_allreduce_alloc_post(point_t *p) {
  p->talloc = unallocated();
  TC(tcoll_all_reduce(&p->tin, TCOLL_SUM, g_tc, &p->talloc));
}
static void t_allgather_alloc_post(point_t *p) {
  p->talloc = unallocated();
  TC(tcoll_all_gather(&p->tin, p->op == OP_ALL_GATHER_D1 ? 1 : 0, g_tc, &p->talloc));
}
static void t_rs_alloc_post(point_t *p) {
  p->talloc = unallocated();
  TC(tcoll_reduce_scatter(&p->tin, TCOLL_SUM, p->op == OP_REDUCE_SCATTER_D1 ? 1 : 0, g_tc, &p->talloc));
}
static void t_a2a_alloc_post(point_t *p) {
  p->talloc = unallocated();
  TC(tcoll_all_to_all_single(&p->tin, NULL, NULL, g_tc, &p->talloc));
}
static void t_alloc_wait(point_t *p) {
  TC(tcoll_wait(p->talloc.data));
  tcoll_tensor_free(&p->talloc);
}

/* Adds the allocated-output variant of p's op (with --alloc; ops with one output tensor). */
static void add_alloc_variant(point_t *p) {
  step_fn post = NULL;
  switch (p->op) {
  case OP_ALL_REDUCE: post = t_allreduce_alloc_post; break;
  case OP_ALL_GATHER:
  case OP_ALL_GATHER_D1: post = t_allgather_alloc_post; break;
  case OP_REDUCE_SCATTER:
  case OP_REDUCE_SCATTER_D1: post = t_rs_alloc_post; break;
  case OP_ALL_TO_ALL: post = t_a2a_alloc_post; break;
  default: return;
  }
  p->valloc = p->nv;
  p->v[p->nv++] = (variant_t){post, t_alloc_wait};
}

/* --tune: the op's tcoll call again under each algorithm it offers, forced with TCOLL_ALGO's
 * setting (all_reduce, reduce_scatter along dim 0, reduce to rank 0, the all-to-all family). */
static void add_tune_variants(point_t *p) {
  static const char *const ar[] = {"mpi", "ring", "ring_allgather"}, *const ar_set[] = {
      "all_reduce:mpi", "all_reduce:ring", "all_reduce:ring_allgather"};
  static const char *const rs[] = {"mpi", "ring", "alltoall"}, *const rs_set[] = {
      "reduce_scatter:mpi", "reduce_scatter:ring", "reduce_scatter:alltoall"};
  static const char *const rd[] = {"mpi", "ring"}, *const rd_set[] = {"reduce:mpi", "reduce:ring"};
  static const char *const a2a[] = {"mpi", "scattered"}, *const a2a_set[] = {"all_to_all:mpi",
                                                                             "all_to_all:scattered"};
  static const char *const list_set[] = {"all_to_all_list:mpi", "all_to_all_list:scattered"};
  bool is_a2a = p->op == OP_ALL_TO_ALL || p->op == OP_A2A_LIST || p->op == OP_PERMUTE || p->op == OP_SHARD ||
                p->op == OP_SHARD_G1;
  const char *const *names = p->op == OP_ALL_REDUCE       ? ar
                             : p->op == OP_REDUCE_SCATTER ? rs
                             : p->op == OP_REDUCE         ? rd
                             : is_a2a                     ? a2a
                                                          : NULL;
  const char *const *sets = p->op == OP_ALL_REDUCE       ? ar_set
                            : p->op == OP_REDUCE_SCATTER ? rs_set
                            : p->op == OP_REDUCE         ? rd_set
                            : p->op == OP_A2A_LIST       ? list_set
                                                         : a2a_set;
  int count = p->op == OP_REDUCE || is_a2a ? 2 : MAX_TUNE;
  if (!names || g_size < 2) return;
  if (p->nv + count + 1 > MAX_VARIANTS) die("too many variants for one point");
  p->vtune = p->nv;
  p->ntune = count;
  for (int k = 0; k < count; k++) {
    p->tune_names[k] = names[k];
    p->v[p->nv++] = (variant_t){p->v[0].post, p->v[0].wait, sets[k]};
  }
}

/* The machine's limit, measured next to the collective: a memcpy of the bytes each rank must
 * move (S x the busbw factor), on every rank at once as the collective does. */
static void m_memcpy_post(point_t *p) { memcpy(p->cpy_dst, p->cpy_src, p->cpy_bytes); }

static void add_memcpy_variant(point_t *p) {
  if (p->op == OP_COALESCED || p->op == OP_GRAD_ALL_REDUCE) return;
  p->cpy_bytes = (size_t)((double)p->bytes * p->busfactor);
  if (p->cpy_bytes == 0) return;
  p->cpy_src = xmalloc(p->cpy_bytes);
  p->cpy_dst = xmalloc(p->cpy_bytes);
  memset(p->cpy_src, 1, p->cpy_bytes); /* pages faulted in before the timing */
  memset(p->cpy_dst, 0, p->cpy_bytes);
  p->vmemcpy = p->nv;
  p->v[p->nv++] = (variant_t){m_memcpy_post, no_wait, NULL};
}

/* ---- grad_all_reduce: forward + backward of the differentiable all_reduce, outputs allocated by
 * tcoll (y, then the gradient of x from g = y), against one and two plain all_reduces ---- */
static void t_grad_post(point_t *p) {
  tcoll_grad_node_t *node;
  tcoll_tensor_t y = unallocated();
  p->tgrad = unallocated();
  TC(tcoll_grad_all_reduce(&p->tin, TCOLL_SUM, g_tc, &y, &node));
  TC(tcoll_wait(y.data));
  TC(tcoll_grad_backward(node, &y, 1, &p->tgrad, 1));
  tcoll_grad_node_free(node);
  TC(tcoll_wait(p->tgrad.data));
  tcoll_tensor_free(&y);
}
static void t_grad_wait(point_t *p) { tcoll_tensor_free(&p->tgrad); }
static void t_two_post(point_t *p) {
  TC(tcoll_all_reduce(&p->tin, TCOLL_SUM, g_tc, &p->tout));
  TC(tcoll_wait(p->tout.data));
  TC(tcoll_all_reduce(&p->tout, TCOLL_SUM, g_tc, &p->tout0));
}
static void t_wait_out0_only(point_t *p) { TC(tcoll_wait(p->tout0.data)); }

static void setup_grad(point_t *p, int64_t elems, double ring) {
  p->count = elems;
  p->bytes = (size_t)elems * g_dt.size;
  p->busfactor = 2.0 * ring;
  p->tin = tensor_on(g_dev, 1, elems, 0);
  p->tout = tensor_on(g_dev, 1, elems, 0);
  p->tout0 = tensor_on(g_dev, 1, elems, 0);
  p->min = xmalloc(p->bytes);
  p->mout = xmalloc(p->bytes);
  p->nv = 4;
  p->v[0] = (variant_t){t_grad_post, t_grad_wait};
  p->v[1] = (variant_t){m_allreduce_post, m_wait};
  p->v[2] = (variant_t){t_allreduce_post, t_wait_out};
  p->v[3] = (variant_t){t_two_post, t_wait_out0_only};
}

/* After the timing: one more forward + backward kept for the check (y = sum of x, grad = size y). */
static long check_grad(point_t *p) {
  tcoll_grad_node_t *node;
  tcoll_tensor_t y = unallocated(), gx = unallocated();
  TC(tcoll_grad_all_reduce(&p->tin, TCOLL_SUM, g_tc, &y, &node));
  TC(tcoll_wait(y.data));
  TC(tcoll_grad_backward(node, &y, 1, &gx, 1));
  TC(tcoll_wait(gx.data));
  tcoll_grad_node_free(node);
  char *twice = xmalloc(p->bytes);
  for (int64_t i = 0; i < p->count; i++) store(twice, i, load(p->mout, i) * g_size);
  long bad = diff_tensor(&y, p->mout) + diff_tensor(&gx, twice);
  free(twice);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&gx);
  return bad;
}

/* Largest power of two r <= sqrt(m) that divides m: a square-ish [r, m/r] shape. */
static int64_t rows_for(int64_t m) {
  int64_t r = 1;
  while ((r * 2) * (r * 2) <= m && m % (r * 2) == 0) r *= 2;
  return r;
}

/* Sets up the buffers of op at about `bytes` (S); returns false if the size does not apply. */
static bool point_setup(point_t *p, int op, size_t bytes) {
  memset(p, 0, sizeof *p);
  p->op = op;
  p->vec = p->rvec = MPI_DATATYPE_NULL;
  p->req = MPI_REQUEST_NULL;
  int n = g_size;
  double ring = n > 1 ? (double)(n - 1) / n : 0.0;
  int64_t elems = (int64_t)(bytes / g_dt.size);
  p->nv = 2;
  switch (op) {
  case OP_GRAD_ALL_REDUCE:
    if (elems < 1) return false;
    setup_grad(p, elems, ring);
    break;
  case OP_ALL_REDUCE:
  case OP_REDUCE:
  case OP_BROADCAST: {
    if (elems < 1) return false;
    p->count = elems;
    p->bytes = (size_t)elems * g_dt.size;
    p->busfactor = op == OP_ALL_REDUCE ? 2.0 * ring : 1.0;
    p->tin = tensor_on(g_dev, 1, elems, 0);
    p->min = xmalloc(p->bytes);
    if (op == OP_ALL_REDUCE || op == OP_REDUCE) {
      p->tout = tensor_on(g_dev, 1, elems, 0);
      p->mout = xmalloc(p->bytes);
      p->v[0] = op == OP_REDUCE ? (variant_t){t_reduce_post, t_wait_out} : (variant_t){t_allreduce_post, t_wait_out};
      p->v[1] = op == OP_REDUCE ? (variant_t){m_reduce_post, m_wait} : (variant_t){m_allreduce_post, m_wait};
    } else {
      p->v[0] = (variant_t){t_bcast_post, t_wait_in};
      p->v[1] = (variant_t){m_bcast_post, m_wait};
    }
    break;
  }
  case OP_ALL_GATHER:
  case OP_ALL_GATHER_D1: {
    int64_t c = elems / n; /* per rank */
    if (c < 1) return false;
    p->count = c;
    p->bytes = (size_t)c * (size_t)n * g_dt.size;
    p->busfactor = ring;
    p->min = xmalloc((size_t)c * g_dt.size);
    p->mout = xmalloc(p->bytes);
    if (op == OP_ALL_GATHER) {
      p->tin = tensor_on(g_dev, 1, c, 0);
      p->tout = tensor_on(g_dev, 1, c * n, 0);
      p->v[0] = (variant_t){t_allgather_post, t_wait_out};
      p->v[1] = (variant_t){m_allgather_post, m_wait};
    } else {
      p->R = rows_for(c);
      p->C = c / p->R;
      p->tin = tensor_on(g_dev, 2, p->R, p->C);
      p->tout = tensor_on(g_dev, 2, p->R, p->C * n);
      p->tin0 = tensor_on(g_dev, 1, c, 0);
      p->tout0 = tensor_on(g_dev, 1, c * n, 0);
      MPI_Datatype v;
      MP(MPI_Type_vector((int)p->R, (int)p->C, (int)(p->C * n), g_dt.mpi, &v));
      MP(MPI_Type_create_resized(v, 0, (MPI_Aint)(p->C * (int64_t)g_dt.size), &p->vec));
      MP(MPI_Type_commit(&p->vec));
      MPI_Type_free(&v);
      p->mout2 = xmalloc(p->bytes);
      p->scratch = xmalloc(p->bytes);
      p->nv = 4;
      p->v[0] = (variant_t){t_allgather_d1_post, t_wait_out};
      p->v[1] = (variant_t){m_allgather_d1_post, m_wait};
      p->v[2] = (variant_t){t_allgather_d0_post, t_wait_out0};
      p->v[3] = (variant_t){m_allgather_unpack_post, m_allgather_unpack_wait};
    }
    break;
  }
  case OP_REDUCE_SCATTER:
  case OP_REDUCE_SCATTER_D1:
  case OP_ALL_TO_ALL: {
    int64_t per = elems / n;
    if (per < 1) return false;
    int64_t N = per * n;
    p->count = N;
    p->bytes = (size_t)N * g_dt.size;
    p->busfactor = ring;
    p->min = xmalloc(p->bytes);
    int64_t nout = op == OP_ALL_TO_ALL ? N : per;
    p->mout = xmalloc((size_t)nout * g_dt.size);
    if (op == OP_REDUCE_SCATTER_D1) {
      p->R = rows_for(per);
      p->C = N / p->R; /* a multiple of n */
      p->tin = tensor_on(g_dev, 2, p->R, p->C);
      p->tout = tensor_on(g_dev, 2, p->R, p->C / n);
      p->tin0 = tensor_on(g_dev, 1, N, 0);
      p->tout0 = tensor_on(g_dev, 1, per, 0);
      p->scratch = xmalloc(p->bytes);
      p->nv = 3;
      p->v[0] = (variant_t){t_rs_d1_post, t_wait_out};
      p->v[1] = (variant_t){m_rs_d1_post, m_wait};
      p->v[2] = (variant_t){t_rs_d0_post, t_wait_out0};
    } else {
      p->tin = tensor_on(g_dev, 1, N, 0);
      p->tout = tensor_on(g_dev, 1, nout, 0);
      if (op == OP_REDUCE_SCATTER) {
        p->v[0] = (variant_t){t_rs_post, t_wait_out};
        p->v[1] = (variant_t){m_rs_post, m_wait};
      } else {
        p->v[0] = (variant_t){t_a2a_post, t_wait_out};
        p->v[1] = (variant_t){m_a2a_post, m_wait};
      }
    }
    break;
  }
  case OP_A2A_LIST: {
    int64_t per = elems / n;
    if (per < 1) return false;
    p->count = per * n;
    p->bytes = (size_t)p->count * g_dt.size;
    p->busfactor = ring;
    p->min = xmalloc(p->bytes);
    p->mout = xmalloc(p->bytes);
    for (int i = 0; i < n; i++) {
      p->cin[i] = tensor_on(g_dev, 1, per, 0);
      p->cout[i] = tensor_on(g_dev, 1, per, 0);
    }
    p->v[0] = (variant_t){t_a2a_list_post, t_a2a_list_wait};
    p->v[1] = (variant_t){m_a2a_post, m_wait};
    break;
  }
  case OP_PERMUTE: {
    if (elems < 1) return false;
    p->count = elems;
    p->bytes = (size_t)elems * g_dt.size;
    p->busfactor = 1.0;
    p->tin = tensor_on(g_dev, 1, elems, 0);
    p->tout = tensor_on(g_dev, 1, elems, 0);
    p->min = xmalloc(p->bytes);
    p->mout = xmalloc(p->bytes);
    p->scratch = xmalloc(p->bytes);
    p->to = (g_rank + 1) % n;
    p->from = (g_rank + n - 1) % n;
    p->pcounts = calloc(3 * (size_t)n, sizeof *p->pcounts); /* send, receive counts; src_dst */
    p->pdispls = calloc((size_t)n, sizeof *p->pdispls);
    if (!p->pcounts || !p->pdispls) die("out of memory");
    p->pcounts[p->to] += (int)elems;
    p->pcounts[n + p->from] += (int)elems;
    for (int m = 0; m < n; m++) p->pcounts[2 * n + m] = (m + 1) % n;
    p->nv = 3;
    p->v[0] = (variant_t){t_perm_post, t_wait_out};
    p->v[1] = (variant_t){m_perm_post, m_wait};
    p->v[2] = (variant_t){m_perm_p2p_post, m_wait2};
    break;
  }
  case OP_SHARD:
  case OP_SHARD_G1: {
    int64_t per = elems / n; /* the chunk each rank sends each peer */
    if (per < 1) return false;
    p->count = per * n;
    p->bytes = (size_t)p->count * g_dt.size;
    p->busfactor = ring;
    p->R = rows_for(per);
    p->C = per / p->R;
    p->min = xmalloc(p->bytes);
    p->mout = xmalloc(p->bytes);
    p->scratch = xmalloc(p->bytes);
    if (op == OP_SHARD) { /* [R, n C] -> [n R, C]: strided slabs sent, contiguous ones received */
      p->tin = tensor_on(g_dev, 2, p->R, n * p->C);
      p->tout = tensor_on(g_dev, 2, n * p->R, p->C);
      p->vec = slab_type(p->R, p->C);
      p->rvec = slab_type(1, per);
    } else { /* [n R, C] -> [R, n C]: contiguous slabs sent, strided ones received */
      p->tin = tensor_on(g_dev, 2, n * p->R, p->C);
      p->tout = tensor_on(g_dev, 2, p->R, n * p->C);
      p->vec = slab_type(1, per);
      p->rvec = slab_type(p->R, p->C);
    }
    p->ones = calloc(2 * (size_t)n, sizeof *p->ones);
    if (!p->ones) die("out of memory");
    p->slabs = p->ones + n;
    for (int r = 0; r < n; r++) p->ones[r] = 1, p->slabs[r] = r;
    p->nv = 3;
    p->v[0] = (variant_t){t_shard_post, t_wait_out};
    p->v[1] = (variant_t){m_shard_post, m_wait};
    p->v[2] = (variant_t){m_a2a_scratch_post, m_wait};
    break;
  }
  case OP_COALESCED: {
    p->count = (int64_t)COAL_N * COAL_NUMEL;
    p->bytes = (size_t)p->count * g_dt.size;
    p->busfactor = 2.0 * ring;
    p->scratch = xmalloc(p->bytes);
    for (int i = 0; i < COAL_N; i++) {
      p->cin[i] = tensor_on(g_dev, 1, COAL_NUMEL, 0);
      p->cout[i] = tensor_on(g_dev, 1, COAL_NUMEL, 0);
      p->sout[i] = tensor_on(g_dev, 1, COAL_NUMEL, 0);
      p->mcin[i] = xmalloc(COAL_NUMEL * g_dt.size);
      p->mcout[i] = xmalloc(COAL_NUMEL * g_dt.size);
      p->msout[i] = xmalloc(COAL_NUMEL * g_dt.size);
    }
    p->nv = 6;
    p->v[0] = (variant_t){t_coal_post, t_coal_wait};
    p->v[1] = (variant_t){m_coal_post, m_coal_wait};
    p->v[2] = (variant_t){t_sep_post, t_sep_wait};
    p->v[3] = (variant_t){m_sep_post, m_sep_wait};
    p->v[4] = (variant_t){t_each_post, no_wait};
    p->v[5] = (variant_t){m_each_post, no_wait};
    p->mone = xmalloc(2 * p->bytes);
    p->v[6] = (variant_t){m_one_post, m_wait};
    p->nv = 7;
    break;
  }
  default: return false;
  }
  if (opt.alloc) add_alloc_variant(p);
  if (opt.tune) add_tune_variants(p);
  add_memcpy_variant(p);
  /* Inputs: every rank its own pattern; offsets keep the coalesced tensors distinct. */
  if (op == OP_COALESCED) {
    for (int i = 0; i < COAL_N; i++) {
      fill_tensor(&p->cin[i]);
      fill_host(p->mcin[i], COAL_NUMEL);
    }
  } else if (op == OP_A2A_LIST) { /* the pattern of one contiguous input, piece i in cin[i] */
    int64_t per = p->count / n;
    fill_host(p->min, p->count);
    for (int i = 0; i < n; i++) {
      tcoll_tensor_t h = tcoll_tensor_make(p->min + (size_t)(i * per) * g_dt.size, g_dt.tc, 1, &per, TCOLL_HOST);
      TC(tcoll_tensor_copy(&p->cin[i], &h));
    }
  } else {
    fill_tensor(&p->tin);
    fill_host(p->min, tcoll_tensor_numel(&p->tin));
    if (p->tin0.data) fill_tensor(&p->tin0);
  }
  return true;
}

static void point_teardown(point_t *p) {
  tcoll_tensor_free(&p->tin);
  tcoll_tensor_free(&p->tout);
  tcoll_tensor_free(&p->tin0);
  tcoll_tensor_free(&p->tout0);
  for (int i = 0; i < COAL_N; i++) {
    tcoll_tensor_free(&p->cin[i]);
    tcoll_tensor_free(&p->cout[i]);
    tcoll_tensor_free(&p->sout[i]);
    free(p->mcin[i]);
    free(p->mcout[i]);
    free(p->msout[i]);
  }
  free(p->min);
  free(p->mout);
  free(p->mout2);
  free(p->mone);
  free(p->scratch);
  free(p->cpy_src);
  free(p->cpy_dst);
  if (p->vec != MPI_DATATYPE_NULL) MPI_Type_free(&p->vec);
  if (p->rvec != MPI_DATATYPE_NULL) MPI_Type_free(&p->rvec);
  free(p->ones);
  free(p->pcounts);
  free(p->pdispls);
}

/* tcoll's results against raw MPI's (both from the last iteration): differing elements. */
static long point_check(point_t *p) {
  long bad = 0;
  switch (p->op) {
  case OP_BROADCAST: bad = diff_tensor(&p->tin, p->min); break;
  case OP_REDUCE: bad = g_rank == 0 ? diff_tensor(&p->tout, p->mout) : 0; break; /* written on the root only */
  case OP_GRAD_ALL_REDUCE: bad = check_grad(p); break;
  case OP_A2A_LIST:
    for (int i = 0; i < g_size; i++)
      bad += diff_tensor(&p->cout[i], p->mout + (size_t)(i * (p->count / g_size)) * g_dt.size);
    break;
  case OP_COALESCED:
    for (int i = 0; i < COAL_N; i++) {
      bad += diff_tensor(&p->cout[i], p->mcout[i]);
      bad += diff_tensor(&p->sout[i], p->msout[i]);
    }
    break;
  default:
    bad = diff_tensor(&p->tout, p->mout);
    if (p->mout2) bad += diff_tensor(&p->tout, p->mout2);
    if (p->tout0.data) { /* the dim-0 variant of a dim-1 point, against closed forms */
      int64_t n = tcoll_tensor_numel(&p->tout0);
      char *ref = xmalloc((size_t)n * g_dt.size);
      for (int64_t j = 0; j < n; j++) {
        if (p->op == OP_ALL_GATHER_D1) {
          store(ref, j, pattern((int)(j / p->count), j % p->count));
        } else {
          double s = 0;
          for (int r = 0; r < g_size; r++) s += pattern(r, g_rank * n + j);
          store(ref, j, s);
        }
      }
      bad += diff_tensor(&p->tout0, ref);
      free(ref);
    }
    break;
  }
  long total = 0;
  MPI_Allreduce(&bad, &total, 1, MPI_LONG, MPI_SUM, g_mpi);
  return total;
}

/* ------------------------------------------------------------------ measuring */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median of v[0..n) after taking the slowest rank per entry (collective; sorts v). */
static double median_over_ranks(double *v, int n) {
  MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, g_mpi);
  return median(v, n);
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

typedef struct measured {
  int iters;
  double *t[MAX_VARIANTS];      /* per iteration, slowest rank, in time order (seconds) */
  double med[MAX_VARIANTS];     /* seconds */
  double overlap[MAX_VARIANTS]; /* percent, NAN if not measured */
  double allocs[MAX_VARIANTS];  /* per call, whole process (largest over ranks) */
  double own[MAX_VARIANTS];     /* per call, made by libtcoll's own code (largest over ranks) */
  long wrong;
  const char *algo; /* the algorithm tcoll chose for variant 0 (tcoll_last_algorithm) */
} measured_t;

/* The run's own TCOLL_ALGO (or config), and the setting in force now. */
static char g_base_algo[256], g_cur_algo[256];

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

/* The k-th variant run in round i. The memcpy variant (the last) opens every round; the others
 * flip order every round (ABBA), so that tcoll's call and the raw one each follow the memcpy
 * (caches flushed of the other's buffers) in half the rounds. With the memcpy inside the
 * flipping, the raw call always ran second of three, and tcoll's all_gather at 1 MiB read
 * 1.18-1.22x raw in the bench while a driver separating the two by barriers put it at 1.01-1.02x. */
static int variant_at(const point_t *p, int i, int k) {
  int n = p->nv - (p->vmemcpy ? 1 : 0);
  if (p->vmemcpy) {
    if (k == 0) return p->vmemcpy;
    k--;
  }
  return (i & 1) ? n - 1 - k : k;
}

static void run_round(point_t *p, int i) {
  for (int k = 0; k < p->nv; k++) {
    int v = variant_at(p, i, k);
    use_algo(p->v[v].algo);
    p->v[v].post(p);
    p->v[v].wait(p);
  }
}

static void measure(point_t *p, measured_t *m) {
  int nv = p->nv;
  memset(m, 0, sizeof *m);
  int warm = p->bytes >= ((size_t)1 << 20) ? 2 : opt.warmup;
  /* The coalesced point mixes one 64-output work with bursts of 64 one-output works: tcoll's
   * work pool hands out its works last-in first-out and each grows its tables on first use of
   * 64 outputs, so reaching the steady state takes about as many rounds as the burst is long. */
  if (p->op == OP_COALESCED && warm < 2 * COAL_N) warm = 2 * COAL_N;
  if (warm < 1) warm = 1;
  /* Iterations from the median warm-up round (the slowest rank's), the same on every rank. */
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
  m->iters = iters;

  double *t[MAX_VARIANTS];
  unsigned long long allocs[MAX_VARIANTS] = {0}, own[MAX_VARIANTS] = {0};
  for (int v = 0; v < nv; v++) t[v] = xmalloc((size_t)iters * sizeof(double));
  MPI_Barrier(g_mpi);
  for (int i = 0; i < iters; i++) {
    for (int k = 0; k < nv; k++) {
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
      t[v][i] = e - s;
    }
  }
  for (int v = 0; v < nv; v++) {
    MPI_Allreduce(MPI_IN_PLACE, t[v], iters, MPI_DOUBLE, MPI_MAX, g_mpi);
    m->t[v] = t[v];
    double *sorted = xmalloc((size_t)iters * sizeof(double));
    memcpy(sorted, t[v], (size_t)iters * sizeof(double));
    m->med[v] = median(sorted, iters);
    free(sorted);
    m->allocs[v] = (double)allocs[v] / iters;
    m->own[v] = (double)own[v] / iters;
    MPI_Allreduce(MPI_IN_PLACE, &m->allocs[v], 1, MPI_DOUBLE, MPI_MAX, g_mpi);
    MPI_Allreduce(MPI_IN_PLACE, &m->own[v], 1, MPI_DOUBLE, MPI_MAX, g_mpi);
    m->overlap[v] = NAN;
  }

  /* Every timed iteration, slowest rank, for looking at the distributions. */
  if (getenv("BENCH_DUMP") && g_rank == 0) {
    FILE *f = fopen(getenv("BENCH_DUMP"), "a");
    for (int i = 0; f && i < iters; i++) {
      fprintf(f, "%s %zu %d", op_names[p->op], p->bytes, i);
      for (int v = 0; v < nv; v++) fprintf(f, " %.3f", t[v][i] * 1e6);
      fprintf(f, "\n");
    }
    if (f) fclose(f);
  }

  if (opt.overlap) {
    int oit = iters / 4;
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
        double e = now();
        tot[v][i] = e - s;
        cmp[v][i] = c1 - c0;
      }
    }
    for (int v = 0; v < nv; v++) {
      double total = median_over_ranks(tot[v], oit), comp = median_over_ranks(cmp[v], oit);
      double ov = 100.0 * (1.0 - (total - comp) / m->med[v]);
      m->overlap[v] = ov < 0 ? 0 : ov > 100 ? 100 : ov;
      free(tot[v]);
      free(cmp[v]);
    }
  }
  use_algo(NULL);
  m->wrong = opt.check ? point_check(p) : 0;
}

/* ------------------------------------------------------------------ results */

typedef struct row {
  const char *op;
  size_t bytes;
  int64_t count;
  int iters;
  double t, m; /* seconds */
  double ovl_t, ovl_m, alloc_t, alloc_m, own_t;
  double busfactor;
  double ratio; /* paired: median of per-iteration tcoll / MPI */
  long wrong;
  const char *extra_name; /* "speedup" (coalesced), "dim1/dim0" */
  double extra;
  const char *extra2_name; /* all_gather_dim1: raw MPI contiguous + local interleave / tcoll dim 0 */
  double extra2;
  const char *extra3_name; /* coalesced: / one raw MPI_Iallreduce; grad: / two plain all_reduces */
  double extra3;
  double alloc_ratio; /* --alloc: allocated / preallocated outputs (paired); NaN: not measured */
  const char *algo;   /* what tcoll chose (tcoll_last_algorithm) */
  double mcpy_t, mcpy_m; /* memcpy of the bytes each rank moves, in % of tcoll's / MPI's time */
  int ntune;          /* --tune: each algorithm's time over raw MPI's (paired) */
  const char *tune_names[MAX_TUNE];
  double tune[MAX_TUNE];
} row_t;

static row_t *rows;
static int nrows, rows_cap;
static FILE *csv;
static bool g_collect; /* --repeat: a sweep stores its rows silently; the medians are printed */

static const char *human(size_t b, char *buf, size_t len) {
  if (b >= ((size_t)1 << 30) && b % ((size_t)1 << 30) == 0) snprintf(buf, len, "%zuG", b >> 30);
  else if (b >= ((size_t)1 << 20) && b % ((size_t)1 << 20) == 0) snprintf(buf, len, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0) snprintf(buf, len, "%zuK", b >> 10);
  else snprintf(buf, len, "%zu", b);
  return buf;
}

static void print_header(void) {
  printf("%-20s %7s %9s %5s %10s %10s %6s %8s %8s %8s %8s %5s %5s %5s %5s %7s %7s %5s %5s %-14s  %s\n", "op", "size",
         "count", "iters", "tcoll_us", "mpi_us", "ratio", "ovh_us", "algbw", "busbw", "mpi_bus", "mcp_t", "mcp_m",
         "ovl_t", "ovl_m", "alloc_t", "alloc_m", "own", "wrong", "algorithm", "note");
  printf("%-20s %7s %9s %5s %10s %10s %6s %8s %8s %8s %8s %5s %5s %5s %5s %7s %7s %5s %5s %-14s\n", "", "(B)",
         "(elems)", "", "(med)", "(med)", "t/m", "t-m", "(GB/s)", "(GB/s)", "(GB/s)", "(%)", "(%)", "(%)", "(%)",
         "(/call)", "(/call)", "", "", "(tcoll)");
}

static const char *pct(double v, char *buf, size_t len) {
  if (isnan(v)) snprintf(buf, len, "-");
  else snprintf(buf, len, "%.0f", v);
  return buf;
}

static void add_row(const row_t *r) {
  if (nrows == rows_cap) {
    rows_cap = rows_cap ? 2 * rows_cap : 64;
    rows = realloc(rows, (size_t)rows_cap * sizeof *rows);
    if (!rows) die("out of memory");
  }
  rows[nrows++] = *r;
  if (g_rank != 0 || g_collect) return;
  char sz[32], note[256] = "", ot[16], om[16];
  double algbw = (double)r->bytes / r->t / 1e9, busbw = algbw * r->busfactor;
  double malgbw = (double)r->bytes / r->m / 1e9, mbusbw = malgbw * r->busfactor;
  if (r->extra_name) snprintf(note, sizeof note, "%s %.2f%s", r->extra_name, r->extra, strcmp(r->extra_name, "speedup") ? "" : "x");
  if (r->extra2_name) snprintf(note + strlen(note), sizeof note - strlen(note), " (%s %.2f)", r->extra2_name, r->extra2);
  if (r->extra3_name) snprintf(note + strlen(note), sizeof note - strlen(note), " %s %.3f", r->extra3_name, r->extra3);
  if (!isnan(r->alloc_ratio))
    snprintf(note + strlen(note), sizeof note - strlen(note), " alloc/prealloc %.3f", r->alloc_ratio);
  char ct[16], cm[16], tune[160] = "";
  for (int k = 0, off = 0; k < r->ntune && off < (int)sizeof tune; k++)
    off += snprintf(tune + off, sizeof tune - (size_t)off, "%s%s %.3f", k ? " " : "tune/mpi: ", r->tune_names[k], r->tune[k]);
  if (*tune) snprintf(note + strlen(note), sizeof note - strlen(note), "%s%s", *note ? " " : "", tune);
  printf("%-20s %7s %9lld %5d %10.2f %10.2f %6.3f %8.2f %8.3f %8.3f %8.3f %5s %5s %5s %5s %7.2f %7.2f %5.2f %5ld "
         "%-14s  %s\n",
         r->op, human(r->bytes, sz, sizeof sz), (long long)r->count, r->iters, r->t * 1e6, r->m * 1e6, r->ratio,
         (r->t - r->m) * 1e6, algbw, busbw, mbusbw, pct(r->mcpy_t, ct, sizeof ct), pct(r->mcpy_m, cm, sizeof cm),
         pct(r->ovl_t, ot, sizeof ot), pct(r->ovl_m, om, sizeof om), r->alloc_t, r->alloc_m, r->own_t, r->wrong,
         r->algo ? r->algo : "-", note);
  fflush(stdout);
  if (csv) {
    fprintf(csv, "%s,%zu,%lld,%d,%s,%d,%.4f,%.4f,%.5f,%.5f,%.4f,%.5f,%.5f,%.5f,%.5f,%.1f,%.1f,%.3f,%.3f,%.3f,%ld,%s,%.4f,%s,%.4f,%s,%.4f,%.4f",
            r->op, r->bytes, (long long)r->count, g_size, opt.device ? tcoll_device_backend() : "host", r->iters,
            r->t * 1e6, r->m * 1e6, r->ratio, r->t / r->m, (r->t - r->m) * 1e6, algbw, busbw, malgbw, mbusbw, r->ovl_t, r->ovl_m, r->alloc_t,
            r->alloc_m, r->own_t, r->wrong, r->extra_name ? r->extra_name : "", r->extra_name ? r->extra : 0.0,
            r->extra2_name ? r->extra2_name : "", r->extra2_name ? r->extra2 : 0.0, r->extra3_name ? r->extra3_name : "",
            r->extra3_name ? r->extra3 : 0.0, r->alloc_ratio);
    fprintf(csv, ",%s,%.2f,%.2f,\"%s\"\n", r->algo ? r->algo : "-", r->mcpy_t, r->mcpy_m, tune);
    fflush(csv);
  }
}

/* Median over iterations of t[a][i] / t[b][i]: each tcoll iteration against the raw-MPI
 * iteration next to it in time. Robust to the bimodal times of a shared machine (a rank that
 * loses its core makes one iteration slow, and mostly both variants of that round). */
static double paired_ratio(const measured_t *m, int a, int b) {
  double *q = xmalloc((size_t)m->iters * sizeof(double));
  for (int i = 0; i < m->iters; i++) q[i] = m->t[a][i] / m->t[b][i];
  double r = median(q, m->iters);
  free(q);
  return r;
}

static void measured_free(measured_t *m) {
  for (int v = 0; v < MAX_VARIANTS; v++) free(m->t[v]);
}

static row_t make_row(const point_t *p, const measured_t *m, const char *name, int vt, int vm) {
  row_t r = {.op = name, .bytes = p->bytes, .count = p->count, .iters = m->iters, .t = m->med[vt], .m = m->med[vm],
             .ovl_t = m->overlap[vt], .ovl_m = m->overlap[vm], .alloc_t = m->allocs[vt], .alloc_m = m->allocs[vm], .own_t = m->own[vt],
             .busfactor = p->busfactor, .wrong = m->wrong, .ratio = paired_ratio(m, vt, vm), .alloc_ratio = NAN};
  if (p->valloc && vt == 0) r.alloc_ratio = paired_ratio(m, p->valloc, 0);
  r.algo = vt == 0 && m->algo ? m->algo : "-";
  r.mcpy_t = p->vmemcpy ? 100.0 * paired_ratio(m, p->vmemcpy, vt) : NAN;
  r.mcpy_m = p->vmemcpy ? 100.0 * paired_ratio(m, p->vmemcpy, vm) : NAN;
  if (vt == 0) {
    r.ntune = p->ntune;
    for (int k = 0; k < p->ntune; k++) {
      r.tune_names[k] = p->tune_names[k];
      r.tune[k] = paired_ratio(m, p->vtune + k, vm);
    }
  }
  return r;
}

/* The sizes of a sweep: --min, times --step each, and --max itself where a step jumps past it
 * (--min 1K --max 12K --step 4: 1K, 4K, 12K). 0 ends the sweep. */
static size_t next_size(size_t b) {
  if (b >= opt.max_bytes || opt.step < 2) return 0;
  return b > opt.max_bytes / (size_t)opt.step ? opt.max_bytes : b * (size_t)opt.step;
}

/* The grad row: t is forward + backward, m one raw MPI all_reduce; against one plain tcoll
 * all_reduce (the target) and two (what forward + backward communicate). */
static void grad_extras(row_t *r, const measured_t *m) {
  r->extra_name = "grad/plain";
  r->extra = paired_ratio(m, 0, 2);
  r->extra3_name = "grad/two_plain";
  r->extra3 = paired_ratio(m, 0, 3);
}

static void run_op(int op) {
  if (op == OP_COALESCED) {
    point_t *p = malloc(sizeof *p);
    if (!p) die("out of memory");
    point_setup(p, op, 0);
    measured_t m;
    measure(p, &m);
    row_t sep = make_row(p, &m, "separate64", 2, 3);
    row_t each = make_row(p, &m, "separate64-each", 4, 5);
    row_t coal = make_row(p, &m, "coalesced", 0, 1);
    /* Two baselines: all 64 posted then waited (MPI overlaps them), and the naive loop that waits
     * each before posting the next. */
    coal.extra_name = "speedup";
    coal.extra = paired_ratio(&m, 2, 0);
    coal.extra2_name = "speedup vs waited each";
    coal.extra2 = paired_ratio(&m, 4, 0);
    coal.extra3_name = "coalesced/one_raw";
    coal.extra3 = paired_ratio(&m, 0, 6);
    sep.extra_name = "raw MPI separate/packed"; /* what the transport itself allows */
    sep.extra = paired_ratio(&m, 3, 1);
    sep.wrong = each.wrong = coal.wrong = m.wrong;
    add_row(&coal);
    add_row(&sep);
    add_row(&each);
    measured_free(&m);
    point_teardown(p);
    free(p);
    return;
  }
  for (size_t b = opt.min_bytes; b; b = next_size(b)) {
    point_t *p = malloc(sizeof *p);
    if (!p) die("out of memory");
    if (point_setup(p, op, b)) {
      measured_t m;
      measure(p, &m);
      row_t r = make_row(p, &m, op_names[op], 0, 1);
      if (op == OP_ALL_GATHER_D1 || op == OP_REDUCE_SCATTER_D1) {
        r.extra_name = "dim1/dim0";
        r.extra = paired_ratio(&m, 0, 2);
      }
      if (op == OP_ALL_GATHER_D1) {
        r.extra2_name = "mpi_contig+interleave/dim0";
        r.extra2 = paired_ratio(&m, 3, 2);
      }
      if (op == OP_GRAD_ALL_REDUCE) grad_extras(&r, &m);
      if (op == OP_PERMUTE) {
        r.extra_name = "/p2p";
        r.extra = paired_ratio(&m, 0, 2);
      }
      if (op == OP_SHARD || op == OP_SHARD_G1) {
        r.extra_name = "/alltoall";
        r.extra = paired_ratio(&m, 0, 2);
      }
      add_row(&r);
      measured_free(&m);
    }
    point_teardown(p);
    free(p);
  }
}

/* ------------------------------------------------------------------ targets (doc/guide.md, Performance) */

static int n_missed;

static void verdict(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verdict(bool ok, const char *fmt, ...) {
  if (!ok) n_missed++;
  if (g_rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  printf("  [%s] ", ok ? "MET   " : "MISSED");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
}

static const row_t *find_row(const char *op, size_t bytes) {
  for (int i = 0; i < nrows; i++)
    if (!strcmp(rows[i].op, op) && rows[i].bytes == bytes) return &rows[i];
  return NULL;
}

/* --alloc: outputs tcoll allocates against preallocated ones from 64 KiB; grad_all_reduce:
 * forward + backward against one plain all_reduce. */
static void report_alloc_and_grad(void) {
  char sz[32];
  double worst = 0, logsum = 0, gworst = 0;
  const row_t *w = NULL, *gw = NULL;
  int n = 0, ng = 0;
  for (int i = 0; i < nrows; i++) {
    const row_t *r = &rows[i];
    if (!isnan(r->alloc_ratio) && r->bytes >= 65536) {
      n++;
      logsum += log(r->alloc_ratio);
      if (!w || r->alloc_ratio > worst) {
        worst = r->alloc_ratio;
        w = r;
      }
    }
    if (!strcmp(r->op, op_names[OP_GRAD_ALL_REDUCE]) && r->bytes >= 65536) {
      ng++;
      if (!gw || r->extra > gworst) {
        gworst = r->extra;
        gw = r;
      }
    }
  }
  if (n)
    verdict(worst <= 1.05,
            "outputs allocated by tcoll from 64 KiB: worst %.3fx the preallocated call (%s at %s), geomean %.3f over %d "
            "points (target <= 1.05)",
            worst, w->op, human(w->bytes, sz, sizeof sz), exp(logsum / n), n);
  if (ng)
    verdict(gworst <= 2.1,
            "differentiable all_reduce forward + backward (outputs allocated) from 64 KiB: worst %.3fx one plain "
            "all_reduce (at %s) over %d sizes (target <= 2.1)",
            gworst, human(gw->bytes, sz, sizeof sz), ng);
}

/* --tune: per op, the sizes where each algorithm was fastest, as table rows. A composed algorithm
 * wins only when it beats the literal MPI call by more than 5% (noise must not flip the table). */
static void report_tune(void) {
  if (g_rank != 0) return;
  printf("# --tune: best algorithm by size, %d ranks (ratios: time over raw MPI's; a composed algorithm must beat "
         "mpi by 5%%, another algorithm the previous size's by 5%%)\n", g_size);
  for (int op = 0; op < NUM_OPS; op++) {
    const char *prev = NULL;
    size_t from = 0, last = 0;
    for (int i = 0; i < nrows; i++) {
      const row_t *r = &rows[i];
      if (r->ntune == 0 || strcmp(r->op, op_names[op])) continue;
      int best = 0, kept = -1;
      for (int k = 1; k < r->ntune; k++)
        if (r->tune[k] < r->tune[best] * (best == 0 ? 0.95 : 1.0)) best = k;
      for (int k = 0; k < r->ntune && prev; k++) /* the previous size's choice, if within 5% */
        if (!strcmp(r->tune_names[k], prev) && r->tune[k] <= r->tune[best] * 1.05) kept = k;
      const char *name = r->tune_names[kept >= 0 ? kept : best];
      if (prev && strcmp(prev, name)) printf("#   %-15s [%zu, %zu] bytes: %s\n", op_names[op], from, last, prev);
      if (!prev || strcmp(prev, name)) from = r->bytes;
      prev = name;
      last = r->bytes;
    }
    if (prev) printf("#   %-15s [%zu, %zu] bytes: %s\n", op_names[op], from, last, prev);
  }
}

static void report_targets(void) {
  char sz[32];
  if (g_rank == 0) printf("\n# targets (doc/guide.md, Performance; stated for 2 ranks, host buffers; this run: %d ranks, %s)\n",
                          g_size, opt.device ? "device buffers" : "host buffers");
  if (g_size != 2 && g_rank == 0) printf("  (the targets are defined at 2 ranks: read these as indications)\n");
  static const char *const plain[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all_single", "broadcast"};
  if (!opt.device) {
    for (size_t k = 0; k < sizeof plain / sizeof *plain; k++) {
      const row_t *small = NULL;
      double worst = 0, logsum = 0;
      size_t worst_at = 0;
      int nbig = 0;
      for (int i = 0; i < nrows; i++) {
        const row_t *r = &rows[i];
        if (strcmp(r->op, plain[k])) continue;
        if (!small || r->bytes < small->bytes) small = r;
        if (r->bytes >= 65536) {
          double q = r->ratio;
          logsum += log(q);
          nbig++;
          if (q > worst) {
            worst = q;
            worst_at = r->bytes;
          }
        }
      }
      if (small && small->bytes <= 8)
        verdict(small->t - small->m <= 0.25e-6,
                "%-18s overhead at %zu B: %+.2f us over raw MPI per post + wait (target <= 0.25 us; medians %.2f vs %.2f "
                "us, ratio %.3f)",
                plain[k], small->bytes, (small->t - small->m) * 1e6, small->t * 1e6, small->m * 1e6, small->ratio);
      /* Judged on the geometric mean over the sizes: a single large size runs only ~10 iterations
       * per variant and one descheduled rank moves it by several percent either way. */
      if (nbig)
        verdict(exp(logsum / nbig) <= 1.02,
                "%-18s overhead from 64 KiB: geomean ratio %.3f over %d sizes, worst %.3f at %s (target <= 1.02)",
                plain[k], exp(logsum / nbig), nbig, worst, human(worst_at, sz, sizeof sz));
    }
    const row_t *c = NULL;
    for (int i = 0; i < nrows; i++)
      if (!strcmp(rows[i].op, "coalesced")) c = &rows[i];
    if (c) {
      verdict(c->extra3 <= 1.25,
              "coalesced all_reduce of %d x %d elements: %.3fx one raw MPI_Iallreduce of the same %zu bytes (target <= "
              "1.25x; %.2fx faster than %d separate all_reduces posted together, %.2fx than each waited)",
              COAL_N, COAL_NUMEL, c->extra3, c->bytes, c->extra, COAL_N, c->extra2);
    }
    report_alloc_and_grad();
    static const char *const d1[] = {"all_gather_dim1", "reduce_scatter_dim1"};
    for (int k = 0; k < 2; k++) {
      double worst = 0;
      size_t at = 0;
      int n = 0;
      for (int i = 0; i < nrows; i++) {
        if (strcmp(rows[i].op, d1[k])) continue;
        n++;
        if (rows[i].extra > worst) {
          worst = rows[i].extra;
          at = rows[i].bytes;
        }
      }
      if (n) verdict(worst <= 1.15, "%-19s time / dim-0 time for the same bytes: worst %.3f at %s over %d sizes (target <= 1.15)",
                     d1[k], worst, human(at, sz, sizeof sz), n);
    }
    double worst_own = 0, worst_diff = 0;
    const char *own_op = NULL, *diff_op = NULL;
    size_t own_b = 0, diff_b = 0;
    for (int i = 0; i < nrows; i++) {
      /* grad rows compare two collectives with one raw MPI call: their whole-process count is not comparable */
      double d = strcmp(rows[i].op, op_names[OP_GRAD_ALL_REDUCE]) ? rows[i].alloc_t - rows[i].alloc_m : 0.0;
      if (!own_op || rows[i].own_t > worst_own) {
        worst_own = rows[i].own_t;
        own_op = rows[i].op;
        own_b = rows[i].bytes;
      }
      if (!diff_op || d > worst_diff) {
        worst_diff = d;
        diff_op = rows[i].op;
        diff_b = rows[i].bytes;
      }
    }
    if (nrows) {
      char sz2[32];
      verdict(worst_own == 0.0,
              "heap allocations by libtcoll per call in steady state: worst %.2f (%s at %s) over %d points (target: "
              "none); whole process, tcoll minus raw MPI: worst %+.2f (%s at %s)",
              worst_own, own_op, human(own_b, sz, sizeof sz), nrows, worst_diff, diff_op, human(diff_b, sz2, sizeof sz2));
    }
  } else {
    int n = 0;
    double worst = 1e300;
    const char *wop = NULL;
    size_t wb = 0;
    for (int i = 0; i < nrows; i++) {
      const row_t *r = &rows[i];
      if (r->bytes < ((size_t)16 << 20)) continue;
      double frac = 1.0 / r->ratio; /* tcoll-device throughput / raw-MPI-host throughput */
      n++;
      if (frac < worst) {
        worst = frac;
        wop = r->op;
        wb = r->bytes;
      }
    }
    if (n)
      verdict(worst >= 0.8, "staged device path (%s) from 16 MiB: worst throughput %.2fx of host MPI (%s at %s) over %d points (target >= 0.8x)",
              tcoll_device_backend(), worst, wop, human(wb, sz, sizeof sz), n);
    else if (g_rank == 0)
      printf("  (no point of 16 MiB or more: the staged-device target was not evaluated)\n");
  }
  long wrong = 0;
  for (int i = 0; i < nrows; i++) wrong += rows[i].wrong;
  if (opt.check) verdict(wrong == 0, "results equal raw MPI's: %ld differing elements", wrong);
  (void)find_row;
}

/* ------------------------------------------------------------------ main */

static size_t parse_size(const char *s) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0) die("bad size '%s' (expected a number with an optional K, M or G suffix)", s);
  size_t mul = 1;
  switch (*end) {
  case 'k': case 'K': mul = (size_t)1 << 10; end++; break;
  case 'm': case 'M': mul = (size_t)1 << 20; end++; break;
  case 'g': case 'G': mul = (size_t)1 << 30; end++; break;
  default: break;
  }
  if (*end == 'i') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) die("bad size '%s' (expected a number with an optional K, M or G suffix)", s);
  return (size_t)(v * (double)mul);
}

static void usage(void) {
  if (g_rank) return;
  printf("usage: mpiexec -n N tcoll-bench [options]\n"
         "  --ops LIST      comma-separated ops (default all): ");
  for (int i = 0; i < NUM_OPS; i++) printf("%s%s", op_names[i], i + 1 < NUM_OPS ? "," : "\n");
  printf("  --dtype T       element type: float32 (default), float64, int32, int64 (sums of small integers:\n"
         "                  exact in each, so results are compared bit for bit)\n"
         "  --min SIZE      smallest size in bytes (default 8; K, M, G suffixes)\n"
         "  --max SIZE      largest size (default 64M; always measured, also where --step jumps past it)\n"
         "  --step F        size factor between points (default 2)\n"
         "  --iters N       at most N timed iterations per variant and point (default 1000)\n"
         "  --min-iters N   at least N (default 5)\n"
         "  --time SEC      time budget of one point's timed loop (default 0.25)\n"
         "  --warmup N      untimed rounds before each point below 1 MiB (default 5; 2 above)\n"
         "  --csv FILE      also write the results as CSV (rank 0)\n"
         "  --device        tcoll on device buffers (TCOLL_FAKE_DEVICES=N emulates them) against MPI on host\n"
         "  --alloc         also time each op with outputs tcoll allocates (data == NULL, freed after the wait):\n"
         "                  the note's alloc/prealloc is that time over the preallocated call's\n"
         "  --grad          the grad_all_reduce op (same as adding it to --ops): differentiable all_reduce\n"
         "                  forward + backward, outputs allocated by tcoll, against one and two plain all_reduces\n"
         "  --tune          also time all_reduce, reduce_scatter, reduce and the all-to-all family under each\n"
         "                  algorithm (TCOLL_ALGO), note their times over raw MPI's, and print the table of the\n"
         "                  best algorithm by size at the end\n"
         "                  (--tune-algorithms: the same; Open MPI's mpiexec also reads --tune as its own option)\n"
         "  --no-overlap    skip the overlap measurement\n"
         "  --no-check      skip the comparison of the results with raw MPI's\n"
         "  --repeat N      run the whole sweep N times; report per point the median over the sweeps\n"
         "Environment: TCOLL_PROGRESS=thread, TCOLL_FAKE_DEVICES=N and the other TCOLL_* settings apply;\n"
         "BENCH_DUMP=FILE appends every timed iteration (rank 0, slowest-rank times in us) to FILE.\n");
}

/* The MPI library and the transport settings in force (the user's environment variables of Open
 * MPI's transports and collectives, MPICH, UCX, libfabric and tcoll; not those mpiexec sets for
 * its own bookkeeping): what makes one run's MPI numbers comparable with another's. */
static void print_transport(void) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  version[strcspn(version, "\n,")] = '\0';
  printf("# MPI: %s\n# transport settings:", version);
  extern char **environ;
  static const char *const prefixes[] = {"OMPI_MCA_btl", "OMPI_MCA_pml", "OMPI_MCA_mtl", "OMPI_MCA_coll",
                                         "OMPI_MCA_mpi_", "OMPI_MCA_rmaps_base_oversubscribe", "OMPI_MCA_osc",
                                         "MPIR_CVAR_", "MPICH_", "UCX_", "FI_", "TCOLL_"};
  bool single_copy_set = false;
  for (char **e = environ; *e; e++)
    for (size_t k = 0; k < sizeof prefixes / sizeof *prefixes; k++)
      if (!strncmp(*e, prefixes[k], strlen(prefixes[k])) && strncmp(*e, "TCOLL_OUTPUT_TTY", 16) &&
          strncmp(*e, "OMPI_MCA_mpi_oversubscribe", 26)) {
        printf(" %s", *e);
        single_copy_set |= !strncmp(*e, "OMPI_MCA_btl_vader_single_copy_mechanism", 40);
      }
  if (strstr(version, "Open MPI") && !single_copy_set) printf(" (vader single copy: the default, cma)");
  printf("\n");
}

static bool set_dtype(const char *name) {
  if (!strcmp(name, "float32")) g_dt.tc = TCOLL_FLOAT32, g_dt.mpi = MPI_FLOAT;
  else if (!strcmp(name, "float64")) g_dt.tc = TCOLL_FLOAT64, g_dt.mpi = MPI_DOUBLE;
  else if (!strcmp(name, "int32")) g_dt.tc = TCOLL_INT32, g_dt.mpi = MPI_INT32_T;
  else if (!strcmp(name, "int64")) g_dt.tc = TCOLL_INT64, g_dt.mpi = MPI_INT64_T;
  else return false;
  g_dt.name = name;
  g_dt.size = tcoll_dtype_size(g_dt.tc);
  return true;
}

static void parse_args(int argc, char **argv) {
  bool any = false;
  set_dtype("float32");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VAL()                                                                               \
  do {                                                                                           \
    if (!val) die("%s needs a value", a);                                                        \
    i++;                                                                                         \
  } while (0)
    if (!strcmp(a, "--ops")) {
      NEED_VAL();
      char *list = strdup(val), *save = NULL;
      for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < NUM_OPS && strcmp(tok, op_names[k])) k++;
        if (k == NUM_OPS) die("unknown op '%s' (see --help)", tok);
        opt.ops[k] = any = true;
      }
      free(list);
    } else if (!strcmp(a, "--dtype")) {
      NEED_VAL();
      if (!set_dtype(val)) die("unknown --dtype '%s' (expected float32, float64, int32 or int64)", val);
    } else if (!strcmp(a, "--min")) {
      NEED_VAL();
      opt.min_bytes = parse_size(val);
    } else if (!strcmp(a, "--max")) {
      NEED_VAL();
      opt.max_bytes = parse_size(val);
    } else if (!strcmp(a, "--step")) {
      NEED_VAL();
      opt.step = atoi(val);
    } else if (!strcmp(a, "--iters")) {
      NEED_VAL();
      opt.max_iters = atoi(val);
    } else if (!strcmp(a, "--min-iters")) {
      NEED_VAL();
      opt.min_iters = atoi(val);
    } else if (!strcmp(a, "--time")) {
      NEED_VAL();
      opt.time_per_point = atof(val);
    } else if (!strcmp(a, "--warmup")) {
      NEED_VAL();
      opt.warmup = atoi(val);
    } else if (!strcmp(a, "--csv")) {
      NEED_VAL();
      opt.csv = val;
    } else if (!strcmp(a, "--device")) {
      opt.device = true;
    } else if (!strcmp(a, "--alloc")) {
      opt.alloc = true;
    } else if (!strcmp(a, "--tune") || !strcmp(a, "--tune-algorithms")) {
      opt.tune = true;
    } else if (!strcmp(a, "--grad")) {
      opt.ops[OP_GRAD_ALL_REDUCE] = any = true;
    } else if (!strcmp(a, "--no-overlap")) {
      opt.overlap = false;
    } else if (!strcmp(a, "--no-check")) {
      opt.check = false;
    } else if (!strcmp(a, "--repeat")) {
      NEED_VAL();
      opt.repeat = atoi(val);
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage();
      tcoll_finalize();
      exit(0);
    } else {
      die("unknown option '%s' (see --help)", a);
    }
#undef NEED_VAL
  }
  if (!any)
    for (int k = 0; k < NUM_OPS; k++) opt.ops[k] = true;
  if (opt.min_bytes < 1) opt.min_bytes = 1;
  if (opt.max_bytes < opt.min_bytes) die("--max (%zu) is below --min (%zu)", opt.max_bytes, opt.min_bytes);
  if (opt.step < 1) die("--step must be >= 1");
  if (opt.min_iters < 1) opt.min_iters = 1;
  if (opt.max_iters < opt.min_iters) opt.max_iters = opt.min_iters;
  if (opt.warmup < 0) opt.warmup = 0;
  if (opt.repeat < 1) die("--repeat must be >= 1");
}

/* Row i with every measured column the median over the sweeps (NaN stays NaN: not measured). */
static row_t median_row(row_t *const *sweeps, int n, int i) {
  row_t r = sweeps[0][i];
  double *v = xmalloc((size_t)n * sizeof *v);
#define MEDIAN_OF(f)                                                                             \
  do {                                                                                           \
    for (int k = 0; k < n; k++) v[k] = sweeps[k][i].f;                                           \
    r.f = isnan(v[0]) ? v[0] : median(v, n);                                                     \
  } while (0)
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
  for (int t = 0; t < r.ntune; t++) MEDIAN_OF(tune[t]);
#undef MEDIAN_OF
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

static void sweep(void) {
  for (int op = 0; op < NUM_OPS; op++)
    if (opt.ops[op]) run_op(op);
}

/* --repeat N: N silent sweeps, then one row per point with the medians over the sweeps. */
static void repeated_sweeps(void) {
  row_t **sweeps = xmalloc((size_t)opt.repeat * sizeof *sweeps);
  int per_sweep = 0;
  g_collect = true;
  for (int k = 0; k < opt.repeat; k++) {
    nrows = 0;
    sweep();
    if (k > 0 && nrows != per_sweep) die("sweep %d measured %d points, the first %d", k + 1, nrows, per_sweep);
    per_sweep = nrows;
    sweeps[k] = xmalloc((size_t)nrows * sizeof **sweeps + 1);
    memcpy(sweeps[k], rows, (size_t)nrows * sizeof **sweeps);
    if (g_rank == 0) {
      printf("# sweep %d of %d done\n", k + 1, opt.repeat);
      fflush(stdout);
    }
  }
  g_collect = false;
  nrows = 0;
  for (int i = 0; i < per_sweep; i++) {
    row_t r = median_row(sweeps, opt.repeat, i);
    add_row(&r);
  }
  for (int k = 0; k < opt.repeat; k++) free(sweeps[k]);
  free(sweeps);
}

int main(int argc, char **argv) {
  TC(tcoll_init(&argc, &argv));
  bool watching = bench_alloc_watch("libtcoll") == 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MP(MPI_Comm_dup(MPI_COMM_WORLD, &g_mpi));
  g_tc = tcoll_comm_world();
  parse_args(argc, argv);

  if (opt.device) {
    int ndev = tcoll_device_count();
    if (ndev < 1)
      die("--device: no device (backend %s); set TCOLL_FAKE_DEVICES=1 to emulate one", tcoll_device_backend());
    MPI_Comm node;
    int local = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    g_dev = local % ndev;
  }
  if (opt.csv && g_rank == 0) {
    csv = fopen(opt.csv, "w");
    if (!csv) die("cannot write %s: %s", opt.csv, strerror(errno));
    fprintf(csv, "op,bytes,count,ranks,device,iters,tcoll_us,mpi_us,ratio,ratio_of_medians,overhead_us,tcoll_algbw_GBps,"
                 "tcoll_busbw_GBps,mpi_algbw_GBps,mpi_busbw_GBps,tcoll_overlap_pct,mpi_overlap_pct,"
                 "tcoll_allocs_per_call,mpi_allocs_per_call,tcoll_own_allocs_per_call,wrong,extra_name,extra,extra2_name,extra2,"
                 "extra3_name,extra3,alloc_ratio,algorithm,memcpy_pct_of_tcoll,memcpy_pct_of_mpi,tune\n");
  }
  tcoll_config_t cfg;
  TC(tcoll_get_config(&cfg));
  snprintf(g_base_algo, sizeof g_base_algo, "%s", cfg.algo);
  snprintf(g_cur_algo, sizeof g_cur_algo, "%s", cfg.algo);
  int thread_level = tcoll_mpi_thread_level();
  if (g_rank == 0) {
    int v = tcoll_version(); /* MAJOR * 10000 + MINOR * 100 + PATCH */
    printf("# tcoll-bench: tcoll %d.%d.%d%s, %d ranks, %s sum, %s buffers%s%s; raw MPI on host buffers\n",
           v / 10000, v / 100 % 100, v % 100, tcoll_version_suffix(), g_size, g_dt.name, opt.device ? "device" : "host",
           opt.device ? " on backend " : "", opt.device ? tcoll_device_backend() : "");
    print_transport();
    printf("# TCOLL_PROGRESS=%s, MPI thread level %d; times: median over iterations of the slowest rank; "
           "tcoll and MPI iterations alternate\n",
           cfg.progress_thread ? "thread" : "none", thread_level);
    printf("# ratio: median over iterations of tcoll time / time of the adjacent raw-MPI iteration; ovh_us: "
           "difference of the medians\n");
    printf("# size: nccl-tests' S (all_gather: gathered output; reduce_scatter: input); busbw = algbw x "
           "2(n-1)/n all_reduce, (n-1)/n all_gather/reduce_scatter/all_to_all, 1 broadcast\n");
    printf("# ovl: OSU-style overlap of post / compute / wait; alloc_t / alloc_m: heap allocations per call, whole "
           "process (MPI's included); own: those made by libtcoll's own code\n");
    if (!watching) printf("# (libtcoll not found among the loaded objects: the own column stays 0)\n");
    if (opt.repeat > 1)
      printf("# --repeat %d: every column is the median over %d sweeps of that point (own: the largest; iters and "
             "wrong: the sum)\n", opt.repeat, opt.repeat);
    print_header();
  }
  double t_start = now();
  if (opt.repeat > 1) repeated_sweeps();
  else sweep();
  report_targets();
  if (opt.tune) report_tune();
  if (g_rank == 0) printf("# %d points in %.1f s\n", nrows, now() - t_start);
  long wrong = 0;
  for (int i = 0; i < nrows; i++) wrong += rows[i].wrong;
  if (csv) fclose(csv);
  free(rows);
  MPI_Comm_free(&g_mpi);
  int rc = tcoll_finalize();
  return rc == TCOLL_SUCCESS && wrong == 0 ? 0 : 1;
}
