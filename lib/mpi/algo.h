/* Algorithms as descriptors, and the table that picks one per call.
 *
 * Every collective with a choice has one list (TC_OP_*): its first entry is the literal mapping
 * onto one MPI call (tc_algo_literal, "mpi", posted by the collective's own file), the others are
 * composed algorithms, each a descriptor in a file of its own next to its collective
 * (lib/mpi/<op>/<name>.c). A descriptor says which calls it can run (supported) and appends the
 * steps of one call to the work's schedule (build), on host buffers: the collective stages device
 * tensors first. The list also holds the collective's table rows: data measured with
 * tcoll-bench --tune, each naming where its figures came from. TCOLL_ALGO and
 * tcoll_last_algorithm() read the same lists.
 *
 * Choosing (tc_algo_choose): TCOLL_ALGO's override for the op if set, else the first row that
 * applies to the call (MPI, ranks, bytes, placement, layout) and whose algorithm serves the
 * call's block layout, else the literal mapping. Where the algorithm picked does not support the
 * call, its fallback is tried, then the literal mapping. Everything a choice reads is the same on
 * every rank of a collective, so every rank picks the same algorithm.
 *
 * Adding an algorithm: its file (the descriptor and its builder), its op's list and a table row
 * (the op's file), lib/mpi/meson.build and a test. */
#ifndef TC_MPI_ALGO_H
#define TC_MPI_ALGO_H

#include "../mpiglue/mpi_impl.h"
#include "../work/work.h"

#include <limits.h>

/* The collectives whose algorithm can be chosen, in TCOLL_ALGO's names. */
typedef enum {
  TC_OP_ALL_REDUCE,      /* "all_reduce" */
  TC_OP_REDUCE_SCATTER,  /* "reduce_scatter" (also its coalesced and multi-buffer forms) */
  TC_OP_ALL_GATHER,      /* "all_gather" */
  TC_OP_BROADCAST,       /* "broadcast" */
  TC_OP_ALL_TO_ALL,      /* "all_to_all": all_to_all_single, permute, shard_dim_all_to_all */
  TC_OP_REDUCE,          /* "reduce" */
  TC_OP_ALL_TO_ALL_LIST, /* "all_to_all_list": all_to_all of a list (its literal mapping packs) */
  TC_NUM_ALGO_OPS
} tc_algo_op_t;

/* How the p blocks of a call lie: one after the other, or interleaved (a tensor split or gathered
 * along a dim other than 0: block b is runs of `run` elements, p runs apart). */
enum { TC_LAYOUT_CONTIG = 1, TC_LAYOUT_STRIDED = 2, TC_LAYOUT_ANY = 3 };

/* What a choice reads: the same on every rank of the collective. */
typedef struct tc_algo_query {
  tcoll_comm_t *comm; /* its size is the rank count; probes (cma) run on it */
  /* all_reduce, reduce: the vector; reduce_scatter: the input; all_gather: the output; the
   * all-to-all family: 0 (chosen without bytes, which differ between ranks) */
  size_t bytes;
  int64_t count; /* elements: the vector, reduce_scatter's input, all_gather's own block */
  tcoll_dtype_t dtype;
  int redop;       /* TCOLL_SUM..., TC_REDOP_PREMUL_SUM; -1 for ops without one */
  bool device;     /* device buffers (staged, or handed to a CUDA-aware MPI) */
  unsigned layout; /* TC_LAYOUT_CONTIG or TC_LAYOUT_STRIDED */
  size_t run;      /* strided: bytes of one rank's run */
} tc_algo_query_t;

/* Where the p blocks of a reduce_scatter input lie (tc_algo_call_t.blocks): runs == 1, one after
 * the other (block b: tc_block_count elements at tc_block_offset); else interleaved, block b is
 * `runs` runs of `run` elements, run k at k * p * run + b * run (p divides the dim, equal blocks).
 */
typedef struct tc_blocks {
  int64_t runs, run;
  /* MPI_DATATYPE_NULL: the block sent at step 0 is packed first; else it goes out through this
   * datatype (runs runs of run elements, p * run apart), valid until the step is posted. */
  MPI_Datatype send_type;
  /* Non-NULL: the block sent at step 0 is pushed into the next rank's buffer instead (cma.h's
   * tc_build_cma_push; this is its scratch), on every rank alike. */
  void *push;
} tc_blocks_t;

/* The per-peer blocks of an all-to-all exchange (the all-to-all family's composed algorithms),
 * described by the op without arrays: block(x, p, recv, &at, &count) says where the block to
 * peer p (recv: from peer p) lies and its count, in elements of the call's dtype times c->n, or
 * in units of stype / rtype. The builder asks while it builds, never later. */
typedef struct tc_exchange tc_exchange_t;
struct tc_exchange {
  void (*block)(const tc_exchange_t *x, int p, bool recv, char **at, int64_t *count);
  const void *ctx;           /* the op's own description, for block */
  MPI_Datatype stype, rtype; /* MPI_DATATYPE_NULL: counts in elements; else one datatype a side
                                (strided slabs), and the own block is a message to itself */
  const char *sname, *rname, *units; /* the arguments the counts come from, and what they count
                                        ("rows"), for errors */
};

/* One call as a composed algorithm sees it: host memory (device tensors are staged before). */
typedef struct tc_algo_call {
  const void *src; /* this rank's input (src == dst: in place) */
  void *dst;       /* the result; reduce: NULL off the root */
  int64_t n;       /* all_reduce, reduce: the vector; reduce_scatter: one block (src holds p); the
                      all-to-all family: elements per count of x (a row) */
  tcoll_dtype_t dtype;
  MPI_Op op;
  double premul;  /* each rank's contribution is multiplied first (1: none; premul_sum) */
  double divisor; /* each reduced element is divided once (1: none; AVG) */
  int root;       /* reduce */
  bool staged;    /* src and dst are pinned staging buffers (device tensors) */
  const tc_blocks_t *blocks; /* reduce_scatter: where src's blocks lie; NULL: one after the other */
  size_t run; /* all_gather: this rank's block is `outer` rows of `run` bytes (dim 0: one row) */
  int64_t outer;
  const tc_exchange_t *x; /* the all-to-all family */
} tc_algo_call_t;

typedef struct tc_algo {
  const char *name; /* in TCOLL_ALGO and tcoll_last_algorithm() */
  unsigned layouts; /* the block layouts it serves (TC_LAYOUT_*); others take the literal mapping */
  /* Whether it can run the call (NULL: every call it serves). Called by every rank alike: it may
   * make a collective call on q->comm (the cma probe). */
  bool (*supported)(const tc_algo_query_t *q);
  /* Appends the call's steps to w's schedule. NULL: the literal mapping, posted by the op. */
  int (*build)(tc_work_t *w, const tc_algo_call_t *c);
  const char *fallback; /* tried where not supported (NULL: the literal mapping) */
} tc_algo_t;

/* The literal mapping: the first entry of every list. */
extern const tc_algo_t tc_algo_literal;
static inline bool tc_algo_is_literal(const tc_algo_t *a) { return a == &tc_algo_literal; }

/* A table row: where it applies (MPI, ranks, bytes [min, max)) and what runs there. */
enum {
  TC_WHERE_HOST = 1,    /* host buffers only */
  TC_WHERE_STRIDED = 2, /* strided blocks only */
  /* communicators with a node-shared segment only (lib/node/): a row of a shared-memory
   * algorithm, so that the rows after it, today's, still apply where there is none */
  TC_WHERE_SHM = 4,
  /* communicators spanning several nodes, each with a segment (lib/node/hier.h) only */
  TC_WHERE_HIER = 8
};
typedef struct tc_algo_row {
  tc_mpi_impl_t impl;
  int min_ranks, max_ranks;
  size_t min_bytes, max_bytes;
  unsigned where;     /* TC_WHERE_* */
  size_t min_run;     /* strided calls: the shortest run (bytes) it applies to */
  const char *algo;   /* a name in the op's list */
  const char *source; /* where its figures came from */
} tc_algo_row_t;
/* A row's source for the 8-16-rank rows: measured where a rank has a core of its own, which the
 * 2-core CI machine cannot show. */
#define TC_TUNE_16CORES                                                                        \
  "tcoll-bench --tune-algorithms, 16-core host of the GPU machine, a core per rank, Open MPI " \
  "without single copy, 8 and 16 ranks, two runs (2026-11-27, issue 27's note)"
/* The two-level rows (hier: communicators spanning several nodes): chosen for small payloads by
 * design, since they cross the network once per node instead of once per rank, not by a win
 * measured here: the only "network" here is a veth pair at memory speed, where all_reduce:hier took
 * 1.14-1.18x raw MPI's time at 8-512 B (3 ranks as 2 + 1, scripts/netns-run NETNS_SHM=1, Open
 * MPI, 2 cores); to be measured on real nodes. */
#define TC_TUNE_HIER                                                                             \
  "design (one network message per node); netns 2+1 ranks on the 2-core CI machine: all_reduce " \
  "1.14-1.18x raw MPI at 8-512 B over a memory-speed veth (issue 26's note)"
#define TC_KiB ((size_t)1 << 10)
#define TC_MiB ((size_t)1 << 20)
#define TC_ANY_SIZE ((size_t)-1)

typedef struct tc_algo_list {
  const char *op;                /* TCOLL_ALGO's name */
  const tc_algo_t *const *algos; /* [0]: tc_algo_literal */
  int nalgos;
  const tc_algo_row_t *rows;
  int nrows;
} tc_algo_list_t;
#define TC_ALGO_LIST(opname, algos, rows) \
  { opname, algos, TC_ARRAY_LEN(algos), rows, TC_ARRAY_LEN(rows) }

/* The algorithm that runs the call. */
const tc_algo_t *tc_algo_choose(tc_algo_op_t op, const tc_algo_query_t *q);
/* Whether TCOLL_ALGO forces an algorithm on op (NULL: the table decides). */
const tc_algo_t *tc_algo_forced(tc_algo_op_t op);
/* TCOLL_ERR_INTERNAL unless every list starts with the literal mapping, every row names an
 * algorithm of its list and says where its figures came from, and every fallback is in its list
 * (tcoll_init checks it, so a table edited wrong fails every test at once). */
int tc_algo_check_tables(void);
/* Checks "auto", "mpi" or "op:algorithm,..." (a bare name applies to every op); with apply, makes
 * it the override. what names the setting in messages. Installed in base/config.c by tcoll_init. */
int tc_algo_setting(const char *spec, const char *what, bool apply);

/* Blocks of a vector of n elements split over p ranks: block b has n / p elements, plus one for
 * the first n % p blocks (equal blocks when p divides n, as in reduce_scatter). */
static inline int64_t tc_block_count(int64_t n, int p, int b) {
  return n / p + (b < n % p ? 1 : 0);
}
static inline int64_t tc_block_offset(int64_t n, int p, int b) {
  return (int64_t)b * (n / p) + (b < n % p ? b : n % p);
}

/* The call's input scaled by c->premul into work scratch (the input itself when premul is 1):
 * a step in a new round. n: the input's elements. */
int tc_algo_scaled_src(tc_work_t *w, const tc_algo_call_t *c, int64_t n, const void **src);

#endif
