/* tcoll-bench's shared types, and the functions each of its files offers to the others
 * (tcoll-bench.c says what the bench measures and how, and which file holds what). */
#ifndef BENCH_H
#define BENCH_H

#include <tcoll.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ the ops */

/* In the order of --help, of a sweep, and of the --tune table. */
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

#define COAL_N 64      /* tensors in the coalesced case */
#define COAL_NUMEL 256 /* elements per tensor */
#define MAX_VARIANTS 11
#define MAX_TUNE 6 /* algorithms of one op besides auto */
#define MAX_ROWS 3 /* rows one point makes (coalesced: three) */

/* ------------------------------------------------------------------ options (args.c) */

typedef struct options {
  bool ops[NUM_OPS];
  size_t min_bytes, max_bytes;
  int step;
  int max_iters, min_iters, warmup, repeat;
  double time_per_point;
  const char *csv;
  bool device, overlap, check;
  bool alloc; /* --alloc: also time each op with outputs tcoll allocates (data == NULL) */
  bool tune;  /* --tune: also time every algorithm of all_reduce and reduce_scatter */
} options_t;

extern options_t opt;

/* The element type (--dtype): tcoll's and raw MPI's names for it. */
typedef struct dtype_info {
  const char *name;
  tcoll_dtype_t tc;
  MPI_Datatype mpi;
  size_t size;
} dtype_info_t;

extern dtype_info_t g_dt;

/* Reads the command line into opt and g_dt; --help prints the usage and exits. */
void parse_args(int argc, char **argv);

/* ------------------------------------------------------------------ the run (common.c) */

extern int g_rank, g_size;
extern int g_dev;          /* where tcoll's tensors live */
extern MPI_Comm g_mpi;     /* raw MPI's communicator (a duplicate of MPI_COMM_WORLD) */
extern tcoll_comm_t *g_tc; /* tcoll's world */

void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define TC(call)                                                              \
  do {                                                                        \
    int rc_ = (call);                                                         \
    if (rc_ != TCOLL_SUCCESS)                                                 \
      die("%s: %s: %s", #call, tcoll_status_string(rc_), tcoll_last_error()); \
  } while (0)
#define MP(call)                                                         \
  do {                                                                   \
    int rc_ = (call);                                                    \
    if (rc_ != MPI_SUCCESS) die("%s failed (MPI error %d)", #call, rc_); \
  } while (0)

double now(void);
/* Zeroed, 64-byte aligned; dies when out of memory. */
void *xmalloc(size_t n);
/* A size in bytes as 4K, 16M, 1G where it divides evenly, else in bytes. */
const char *human(size_t b, char *buf, size_t len);

/* ------------------------------------------------------------------ data (data.c) */

double pattern(int rank, int64_t i);
void store(void *x, int64_t i, double v);
double load(const void *x, int64_t i);
tcoll_tensor_t tensor_on(int device, int ndim, int64_t a, int64_t b);
void fill_host(void *x, int64_t n);
void fill_tensor(tcoll_tensor_t *t);
long diff_tensor(const tcoll_tensor_t *t, const void *ref);

/* ------------------------------------------------------------------ a benchmark point (point.c) */

typedef struct point point_t;
typedef void (*step_fn)(point_t *);
typedef struct variant {
  step_fn post, wait;
  const char *algo; /* TCOLL_ALGO in force for this variant (--tune); NULL: the run's own */
} variant_t;

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
  int vblocking;                /* index of the blocking MPI call's variant; 0: none */
  char *cpy_src, *cpy_dst;      /* memcpy of the bytes each rank must move (S x busbw factor) */
  size_t cpy_bytes;
  int vtune, ntune; /* --tune: the variants forcing each algorithm */
  const char *tune_names[MAX_TUNE];
  char *mone; /* coalesced: one contiguous buffer for one raw MPI_Iallreduce */
  tcoll_tensor_t cin[COAL_N], cout[COAL_N], sout[COAL_N];
  /* raw MPI side (host) */
  char *min, *mout, *mout2, *scratch; /* g_dt elements */
  size_t min_bytes, mout_bytes;       /* min's and mout's sizes (raw_in, raw_out) */
  /* The blocking call's own copies of min and mout: the raw call, which runs beside it in the
   * same round, must not find its buffers in cache because the blocking call just used them. */
  char *bmin, *bmout;
  char *mcin[COAL_N], *mcout[COAL_N], *msout[COAL_N];
  MPI_Datatype vec, rvec;                /* shard: the slab types of the input and the output */
  int *ones, *slabs, *pcounts, *pdispls; /* shard: counts and displacements; permute: raw MPI's */
  int to, from;                          /* permute: this rank's destination and source */
  MPI_Request req, reqs[COAL_N];
  MPI_Status stats[COAL_N]; /* not MPI_STATUSES_IGNORE: MPICH's (MPI_Status *)1 makes GCC 12 warn */
};

/* What one point measured (timing.c). */
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

/* One line of the table and of the CSV (report.c). */
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
  const char *extra2_name; /* all_gather_dim1: raw MPI contiguous + interleave / tcoll dim 0 */
  double extra2;
  const char *extra3_name; /* coalesced: / one raw MPI_Iallreduce; grad: / two plain all_reduces */
  double extra3;
  double alloc_ratio;    /* --alloc: allocated / preallocated outputs (paired); NaN: not measured */
  const char *algo;      /* what tcoll chose (tcoll_last_algorithm) */
  double mcpy_t, mcpy_m; /* memcpy of the bytes each rank moves, in % of tcoll's / MPI's time */
  double blk;            /* the blocking MPI call (seconds, median); NaN: none */
  double ratio_blk;      /* tcoll over the blocking MPI call (paired); NaN: none */
  int ntune;             /* --tune: each algorithm's time over raw MPI's (paired) */
  const char *tune_names[MAX_TUNE];
  double tune[MAX_TUNE];
} row_t;

/* --tune: the algorithms of an op, by the name the table shows and the TCOLL_ALGO setting that
 * forces each. */
typedef struct tune_set {
  int n;
  const char *names[MAX_TUNE];
  const char *settings[MAX_TUNE];
} tune_set_t;

/* A ratio in a row's note: variant a's time over variant b's, paired by iteration. */
typedef struct ratio_spec {
  const char *name;
  int a, b;
} ratio_spec_t;

/* A row made of a point: variant t in the tcoll columns, variant m in the MPI ones, and the
 * ratios of the note (the row's extra, extra2 and extra3: each has its own format there). */
typedef struct row_spec {
  const char *name;
  int t, m;
  ratio_spec_t extra[3];
} row_spec_t;

/* One op of the bench: how a point of it is set up, filled, checked and reported. */
typedef struct op_desc {
  const char *name;
  variant_t tcoll, mpi; /* variants 0 and 1: tcoll's call, and raw MPI code doing the same */
  /* Sizes and buffers for about `elems` elements of S, and any variants after the first two;
   * false: the size does not apply. */
  bool (*setup)(point_t *p, int64_t elems);
  void (*fill)(point_t *p);  /* the inputs; NULL: tin, min and tin0 with the pattern */
  long (*check)(point_t *p); /* this rank's differing elements; NULL: tout against mout */
  row_spec_t rows[MAX_ROWS]; /* none named: one row under the op's name, variant 0 against 1 */
  step_fn alloc_post;        /* --alloc: the call with an output tcoll allocates; NULL: none */
  step_fn blocking;          /* the blocking MPI call a user has today (MPI_Allreduce...); NULL:
                                none */
  const tune_set_t *tune;    /* --tune: the algorithms to force; NULL: none */
  int min_warmup;            /* warm-up rounds at the least */
  bool one_size;             /* one point, whatever --min and --max say */
  bool no_memcpy;            /* no memcpy variant: the point is several collectives */
} op_desc_t;

/* The descriptors, one per op (ops-*.c). */
extern const op_desc_t op_all_reduce, op_reduce, op_broadcast, op_grad_all_reduce;
extern const op_desc_t op_all_gather, op_all_gather_dim1, op_reduce_scatter, op_reduce_scatter_dim1;
extern const op_desc_t op_all_to_all_single, op_all_to_all, op_permute, op_shard_dim;
extern const op_desc_t op_shard_dim_g1s0, op_coalesced;

const op_desc_t *op_desc(int op);
const char *op_name(int op);

/* Sets up the buffers and variants of op at about `bytes` (S); false if the size does not apply
 * (point_teardown is due either way). */
bool point_setup(point_t *p, int op, size_t bytes);
void point_teardown(point_t *p);
/* tcoll's results against raw MPI's (both from the last iteration): differing elements, summed
 * over the ranks (collective). */
long point_check(point_t *p);

/* Helpers of the ops' setups. */
void add_variant(point_t *p, step_fn post, step_fn wait);
void set_size(point_t *p, int64_t count, int64_t s_elems, double busfactor);
double ring_factor(void);
/* Raw MPI's input and output of n bytes (p->min, p->mout), their sizes noted. */
char *raw_in(point_t *p, size_t n);
char *raw_out(point_t *p, size_t n);
bool setup_whole_tensor(point_t *p, int64_t elems, double busfactor, bool has_output);
int64_t split_evenly(point_t *p, int64_t elems);
int64_t rows_for(int64_t m);
MPI_Datatype slab_type(int64_t outer, int64_t block);
tcoll_tensor_t unallocated(void);

/* Steps the ops share. */
void t_allreduce_post(point_t *p);
void m_allreduce_post(point_t *p);
void t_wait_out(point_t *p);
void t_wait_out0(point_t *p);
void t_alloc_wait(point_t *p);
void m_wait(point_t *p);
void no_wait(point_t *p);

/* ------------------------------------------------------------------ measuring (timing.c) */

/* Remembers the run's own algorithm setting, which variants without one of their own run under. */
void algo_set_base(const char *algo);
/* Times the variants of p in interleaved rounds, then the overlap and the check. */
void measure(point_t *p, measured_t *m);
void measured_free(measured_t *m);
double paired_ratio(const measured_t *m, int a, int b);
/* Median of v[0..n) (sorts v). */
double median(double *v, int n);

/* ------------------------------------------------------------------ sweeps (sweep.c) */

/* Every selected op at every size, --repeat times; the rows land in g_rows. */
void run_sweeps(void);

/* ------------------------------------------------------------------ rows (report.c, targets.c) */

extern row_t *g_rows;
extern int g_nrows;
extern bool g_collect; /* --repeat: a sweep stores its rows silently; the medians are printed */

void print_header(void);
/* Stores r; prints it on the table and in the CSV unless g_collect. */
void add_row(const row_t *r);
long rows_wrong(void);
void rows_free(void);
void csv_open(const char *path);
void csv_close(void);
void report_tune(void);
void report_targets(void);

#endif
