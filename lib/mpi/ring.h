/* Schedule builders that several composed algorithms share (the ring reduce_scatter is the first
 * half of the ring all_reduce and of the ring reduce): they append steps to a schedule, on host
 * buffers. Each fixes its reduction order per (ranks, count), so results are reproducible bit for
 * bit, and every rank of an all_reduce gets the same bits (each block is reduced once, on one
 * rank, then copied to the others). Blocks: tc_block_count / tc_block_offset (algo.h). */
#ifndef TC_MPI_RING_H
#define TC_MPI_RING_H

#include "algo.h"

/* Scratch bytes of the ring reduce_scatter of n elements (two blocks). */
size_t tc_ring_reduce_scatter_scratch(int64_t n, int p, tcoll_dtype_t d);
/* Ring reduce_scatter: in holds the p blocks of n elements (laid out as `blocks` says; NULL:
 * contiguous); this rank's reduced block goes to out, contiguous (which may be in's own block
 * when contiguous: in place). p - 1 steps; at step s rank r sends its partial of block r - s - 1
 * to r + 1 and adds its own contribution to the partial of block r - s - 2 it receives from
 * r - 1. Block b is summed along the ring starting at rank b + 1. Interleaved blocks are packed
 * (or sent through blocks->send_type, or pushed: blocks->push) only at step 0; the reductions
 * read them in place. */
int tc_build_ring_reduce_scatter(tc_sched_t *s, const void *in, void *out, int64_t n,
                                 tcoll_dtype_t d, MPI_Op op, void *scratch, int tag0,
                                 const tc_blocks_t *blocks);
/* Ring all-gather in place: buf holds the p blocks of n elements, this rank's filled in. */
int tc_build_ring_all_gather(tc_sched_t *s, void *buf, int64_t n, tcoll_dtype_t d, int tag0);
/* The blocks to one rank, in a round after the steps so far: every other rank sends its block
 * (`mine`, contiguous) to root, which receives block q into its place in buf (the p blocks of n
 * elements; root's own block is already there). The tail of the ring reduce. */
int tc_build_blocks_to_root(tc_sched_t *s, void *buf, const void *mine, int64_t n, tcoll_dtype_t d,
                            int root, int tag0);

#endif
