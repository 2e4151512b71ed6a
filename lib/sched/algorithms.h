/* Composed algorithms: builders that append a collective's steps to a schedule, for host buffers
 * (device buffers reach them staged). Each fixes its reduction order per (algorithm, ranks,
 * count), so results are reproducible bit for bit, and every rank of an all_reduce gets the
 * same bits (each block is reduced once, on one rank, then copied to the others).
 *
 * Blocks: a vector of n elements split over p ranks gives block b n / p elements, plus one for
 * the first n % p blocks (equal blocks when p divides n, as in reduce_scatter). */
#ifndef TC_ALGORITHMS_H
#define TC_ALGORITHMS_H

#include "schedule.h"

static inline int64_t tc_block_count(int64_t n, int p, int b) { return n / p + (b < n % p ? 1 : 0); }
static inline int64_t tc_block_offset(int64_t n, int p, int b) {
  return (int64_t)b * (n / p) + (b < n % p ? b : n % p);
}

/* Where the p blocks of an input lie: contiguous one after the other (runs == 1), or, for a
 * tensor split along a dim other than 0, interleaved: block b is `runs` runs of `run` elements,
 * run k at k * p * run + b * run (p divides the dim, so blocks are equal). */
typedef struct tc_blocks {
  int64_t runs, run;
  /* MPI_DATATYPE_NULL: the block sent at step 0 is packed first; else it goes out through this
   * datatype (runs runs of run elements, p * run apart), valid until the step is posted. */
  MPI_Datatype send_type;
  /* Non-NULL: the block sent at step 0 is pushed into the next rank's buffer instead (cma.h's
   * tc_build_cma_push; this is its scratch), on every rank alike. */
  void *push;
} tc_blocks_t;

/* Scratch bytes of the ring reduce_scatter of n elements (two blocks). */
size_t tc_ring_reduce_scatter_scratch(int64_t n, int p, tcoll_dtype_t d);
/* Ring reduce_scatter: in holds the p blocks of n elements (laid out as `blocks` says; NULL:
 * contiguous); this rank's reduced block goes to out, contiguous (which may be in's own block
 * when contiguous: in place). p - 1 steps; at step s rank r sends its partial of block r - s - 1
 * to r + 1 and adds its own contribution to the partial of block r - s - 2 it receives from
 * r - 1. Block b is summed along the ring starting at rank b + 1. Interleaved blocks are packed
 * (or sent through blocks->send_type, or pushed: blocks->push) only at step 0; the reductions
 * read them in place. */
int tc_build_ring_reduce_scatter(tc_sched_t *s, const void *in, void *out, int64_t n, tcoll_dtype_t d, MPI_Op op,
                                 void *scratch, int tag0, const tc_blocks_t *blocks);
/* Ring all-gather in place: buf holds the p blocks of n elements, this rank's filled in. */
int tc_build_ring_all_gather(tc_sched_t *s, void *buf, int64_t n, tcoll_dtype_t d, int tag0);
/* The blocks to one rank, in a round after the steps so far: every other rank sends its block
 * (`mine`, contiguous) to root, which receives block q into its place in buf (the p blocks of n
 * elements; root's own block is already there). The tail of the ring reduce. */
int tc_build_blocks_to_root(tc_sched_t *s, void *buf, const void *mine, int64_t n, tcoll_dtype_t d, int root, int tag0);
/* Scratch bytes of the MPI_Iallgatherv all-gather (its counts and displacements; 8-byte aligned). */
size_t tc_allgatherv_scratch(int p);
/* Whether one MPI_Iallgatherv can carry blocks of n elements: int counts within the per-call
 * limit, or MPI_Iallgatherv_c where MPI has large counts. */
bool tc_allgatherv_fits(int64_t n, int p);
/* MPI_Iallgatherv in place over buf's p blocks, posted once the steps before it are done. */
int tc_build_allgatherv(tc_sched_t *s, void *buf, int64_t n, tcoll_dtype_t d, void *scratch);

/* Scratch bytes of the all-to-all reduce_scatter (every rank's block of this rank). */
size_t tc_alltoall_reduce_scatter_scratch(int64_t nper, int p, tcoll_dtype_t d);
/* Whether one MPI_Ialltoall can carry blocks of nper elements (within the limit, or its _c form). */
bool tc_alltoall_fits(int64_t nper);
/* MPI_Ialltoall of the p blocks of nper elements, then out = block of rank p-1 (op) ... (op)
 * block of rank 0, reduced on the host in rank order. */
int tc_build_alltoall_reduce_scatter(tc_sched_t *s, const void *in, void *out, int64_t nper, tcoll_dtype_t d,
                                     MPI_Op op, void *scratch);

#endif
