/* The algorithm table (see select.h). */
#include "select.h"

#include "mpi_impl.h"

#include <limits.h>

/* A row applies to an op on an MPI, a range of ranks and of bytes [min, max). The first row
 * that applies wins; none: the literal MPI call. */
typedef struct row {
  tc_mpi_impl_t impl;
  tc_algo_op_t op;
  int min_ranks, max_ranks;
  size_t min_bytes, max_bytes;
  tc_algo_t algo;
} row_t;

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define ANY_SIZE ((size_t)-1)

/* From tcoll-bench --tune on the 2-core CI machine (doc/guide.md, "Algorithms", has the
 * numbers): the composed algorithm where it beat the MPI call by more than 5%. Beyond 4 ranks
 * only the large-message rows apply (a ring moves the fewest bytes per rank at any rank count;
 * not measured there). */
static const row_t table[] = {
    /* Open MPI 4.1's MPI_Ireduce_scatter_block reduces everything onto rank 0 and scatters. */
    {TC_MPI_OPEN_MPI, TC_OP_REDUCE_SCATTER, 2, 2, 0, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_OPEN_MPI, TC_OP_REDUCE_SCATTER, 3, 3, 8 * KiB, 512 * KiB, TC_ALGO_ALLTOALL},
    {TC_MPI_OPEN_MPI, TC_OP_REDUCE_SCATTER, 3, 3, 512 * KiB, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_OPEN_MPI, TC_OP_REDUCE_SCATTER, 4, 4, 8 * KiB, 4 * MiB, TC_ALGO_ALLTOALL},
    {TC_MPI_OPEN_MPI, TC_OP_REDUCE_SCATTER, 4, INT_MAX, 4 * MiB, ANY_SIZE, TC_ALGO_RING},
    /* libnbc's all_reduce: fine for small messages, slow for large ones. */
    {TC_MPI_OPEN_MPI, TC_OP_ALL_REDUCE, 2, 2, 32 * KiB, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_OPEN_MPI, TC_OP_ALL_REDUCE, 3, 3, 512 * KiB, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_OPEN_MPI, TC_OP_ALL_REDUCE, 4, INT_MAX, 16 * MiB, ANY_SIZE, TC_ALGO_RING},
    /* libnbc's MPI_Ireduce: 2.5-4x its own blocking MPI_Reduce at 2 ranks. */
    {TC_MPI_OPEN_MPI, TC_OP_REDUCE, 2, 2, 128 * KiB, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_OPEN_MPI, TC_OP_REDUCE, 3, 4, 512 * KiB, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_OPEN_MPI, TC_OP_REDUCE, 5, INT_MAX, 32 * MiB, ANY_SIZE, TC_ALGO_RING},
    /* MPICH 4.0: faster than Open MPI, and still slower than the ring for large messages. Its
     * 3- and 4-rank runs here have more ranks than cores, where MPICH's waits spin: only the
     * large-message rows, which won by the same margin there as at 2 ranks, are kept. */
    {TC_MPI_MPICH, TC_OP_REDUCE_SCATTER, 2, 2, 0, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_MPICH, TC_OP_REDUCE_SCATTER, 3, INT_MAX, 8 * MiB, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_MPICH, TC_OP_ALL_REDUCE, 2, 2, 128 * KiB, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_MPICH, TC_OP_ALL_REDUCE, 3, INT_MAX, 8 * MiB, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_MPICH, TC_OP_REDUCE, 2, 2, 32 * KiB, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_MPICH, TC_OP_REDUCE, 3, INT_MAX, 8 * MiB, ANY_SIZE, TC_ALGO_RING},
    /* MPICH 4.0's MPI_Ialltoallv is 1.2-1.5x its MPI_Ialltoall from 256 KiB at 2 ranks; the
     * scattered sends match MPI_Ialltoall there and beat it below. Ranks choose without the
     * bytes, which differ between ranks with uneven splits. The row serves all_to_all_single,
     * permute and shard_dim (tcoll over the raw call, medians of 3 runs, 8 B-16 MiB):
     * all_to_all_single 0.61-0.95x raw MPI_Ialltoall (literal 1.02-1.57x), permute 0.88-1.06x
     * its raw MPI_Ialltoallv (literal up to 1.58x), shard_dim 0.74-1.19x its raw strided
     * MPI_Ialltoallv (literal up to 1.52x). At 3-4 ranks the exchange also beat the literal
     * calls in the same runs, but those runs have more ranks than cores and their times are the
     * scheduler's (milliseconds for 8 B); runs forcing one algorithm each did not agree: no row
     * there. On Open MPI all_to_all_single and permute lose 5-20% from 2 MiB at 2 ranks and
     * 10-40% from 128 KiB at 3-4: no row. */
    {TC_MPI_MPICH, TC_OP_ALL_TO_ALL, 2, 2, 0, ANY_SIZE, TC_ALGO_SCATTERED},
    /* The list all_to_all's literal mapping packs the tensors into one buffer and unpacks the
     * results; the scattered exchange sends and receives host tensors where they lie. Against
     * raw MPI_Ialltoall of the same bytes (medians of 3 runs, scattered / literal, same runs):
     * Open MPI 2 ranks 1.51 / 1.78 at 8 B, 1.10 / 1.71 at 32 KiB, 0.60 / 1.17 at 2 MiB, 0.98 /
     * 1.91 at 16 MiB; 3-4 ranks 1.16-1.30 / 1.18-1.30 below 32 KiB, 0.84-1.00 / 1.08-1.34 above;
     * MPICH 2 ranks 1.23-1.63 / 1.70-2.22 below 32 KiB, 0.60-1.03 / 1.52-2.99 above (and
     * 0.04-0.65 / 0.16-1.00 in the oversubscribed 3-4-rank runs). Never slower: every size, at
     * the measured rank counts. */
    {TC_MPI_OPEN_MPI, TC_OP_ALL_TO_ALL_LIST, 2, 4, 0, ANY_SIZE, TC_ALGO_SCATTERED},
    /* all_gather along a dim other than 0 (lib/mpi/all_gather.c also wants runs of at least
     * 512 B and host tensors; the probe, every rank on one node with cross-memory attach): each
     * rank reads its peers' inputs into its strided output, one copy per byte, where the MPI
     * paths gather contiguously and interleave (or pipeline chunks). Against today's dim-1 path,
     * interleaved in one program (tcoll's all_gather timed against raw MPI, medians of 3 runs under load): 2
     * ranks 0.4-0.85x at 64 KiB-64 MiB with runs of 512 B-64 KiB (1.0-1.06x with 256 B runs at 1-4
     * MiB), 0.7x at 8 KiB, 1.9x at 1 KiB; 3 ranks 0.46-0.89x from 1 MiB, 4 ranks 0.53-0.93x
     * from 1 MiB with runs of 4 KiB and more (1.0-1.3x below 1 MiB); below 8 KiB at 2 ranks
     * 1.7-1.8x (8-32 KiB: 0.77-0.87x). MPICH 4.0 at 2 ranks: 0.2-0.8x from 32 KiB to 64 MiB
     * (256 B runs 0.34-0.77x), 1.6-2.2x below 32 KiB. Not measured beyond 4 ranks, nor on MPICH
     * beyond 2 (oversubscribed runs there are the scheduler's): no row there. */
    {TC_MPI_OPEN_MPI, TC_OP_ALL_GATHER, 2, 2, 8 * KiB, ANY_SIZE, TC_ALGO_CMA},
    {TC_MPI_OPEN_MPI, TC_OP_ALL_GATHER, 3, 4, 1 * MiB, ANY_SIZE, TC_ALGO_CMA},
    {TC_MPI_MPICH, TC_OP_ALL_GATHER, 2, 2, 32 * KiB, ANY_SIZE, TC_ALGO_CMA},
    {TC_MPI_MPICH, TC_OP_ALL_TO_ALL_LIST, 2, 4, 0, ANY_SIZE, TC_ALGO_SCATTERED},
};

static _Thread_local TC_TLS_HOT tc_algo_t last = TC_ALGO_MPI;

void tc_algo_note(tc_algo_t algo) { last = algo; }

const char *tcoll_last_algorithm(void) { return tc_algo_name(last); }

/* The rows of one op for one rank count on this MPI (their indices in the table), kept per
 * thread for the last rank count asked: a call scans one or two rows, not the table, so the
 * choice costs a small collective next to nothing. Small: initial-exec TLS is scarce. */
#define MAX_ROWS TC_ARRAY_LEN(table)
_Static_assert(MAX_ROWS <= UINT8_MAX, "the table's rows are indexed by uint8_t");
typedef struct bands {
  int ranks; /* 0: not filled */
  size_t below; /* the smallest size any row covers: smaller calls take the MPI call at once */
  uint8_t n, row[MAX_ROWS];
} bands_t;
static _Thread_local TC_TLS_HOT bands_t memo[TC_NUM_ALGO_OPS];

static void fill_bands(bands_t *b, tc_algo_op_t op, int ranks) {
  tc_mpi_impl_t impl = tc_mpi_impl();
  b->n = 0;
  b->below = ANY_SIZE;
  for (size_t i = 0; i < TC_ARRAY_LEN(table); i++) {
    const row_t *r = &table[i];
    if (r->op != op || r->impl != impl || ranks < r->min_ranks || ranks > r->max_ranks) continue;
    b->row[b->n++] = (uint8_t)i;
    if (r->min_bytes < b->below) b->below = r->min_bytes;
  }
  b->ranks = ranks;
}

tc_algo_t tc_algo_choose(const tc_algo_query_t *q) {
  tc_algo_t forced = tc_algo_forced[q->op];
  if (forced != TC_ALGO_AUTO) return forced;
  if (q->ranks < 2) return TC_ALGO_MPI;
  bands_t *b = &memo[q->op];
  if (TC_UNLIKELY(b->ranks != q->ranks)) fill_bands(b, q->op, q->ranks);
  if (q->bytes < b->below) return TC_ALGO_MPI;
  for (int i = 0; i < b->n; i++) {
    const row_t *r = &table[b->row[i]];
    if (q->bytes >= r->min_bytes && q->bytes < r->max_bytes) return r->algo;
  }
  return TC_ALGO_MPI;
}
