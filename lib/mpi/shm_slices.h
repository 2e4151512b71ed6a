/* The large shared-memory reduce_scatter, all_reduce and reduce (TCOLL_ALGO
 * reduce_scatter:shm_slices, all_reduce:shm_slices, reduce:shm_slices): each rank reduces its own
 * slice of every chunk, reading its own input where it lies and only its peers' parts from the
 * segment.
 *
 * The input is cut into chunks that fit a slot: chunk c holds elements [c e, (c + 1) e) of every
 * rank's block (block b: what rank b gets, or reduces, of the result), e elements a piece, p pieces
 * a slot. Each chunk is one call of the small protocol (shm_small.h), whose rules keep every slot
 * from being rewritten while a peer reads it:
 *   - reduce-scatter call: every rank copies its pieces for the others (not its own) into its slot
 *     and publishes; then rank b reduces piece b: its own input's piece, then every peer's in rank
 *     order (the same order whatever the timing), into its output;
 *   - all_reduce adds a gather call per chunk: rank b reduces its piece straight into the
 *     outputs of the peers whose outputs lie in the symmetric heap, and where its own output does
 *     not lie there it copies the piece into its slot of the next call's parity (the peers
 *     published this call, so they are done reading that parity); once the gather call is
 *     published every rank whose output is not in the heap copies the others' pieces out (from
 *     their outputs in the heap or their slots), the others have them already;
 *   - reduce does the same, but off the root the piece is reduced straight into the slot (there
 *     is no output), and only the root waits for the gather call and copies the pieces out.
 * Every element is reduced by one rank only, so all_reduce's result has the same bits on every
 * rank.
 * Consecutive chunks alternate the two slots: a rank copies chunk c + 1 in while its peers still
 * reduce chunk c. Where every rank's input (all_reduce: and output) lies in the symmetric heap,
 * nothing goes through the slots: the first call reduces each rank's whole block, and the calls
 * after it only keep the ranks in step.
 *
 * Along a dim other than 0 (reduce_scatter), a block is interleaved runs: the copies in and the
 * reduction read them where they lie, walking the runs with no division per run, and
 * short runs go into the slot through a bounce buffer in cache (plain stores into lines a peer
 * read cost far more than one long memcpy), and each span's successor is prefetched (the next run
 * often starts on another page, where the processor's prefetchers start cold). At 256 KiB that
 * costs about what dim 0 costs; from 1 MiB still 1.2-1.7x (2 ranks, the CI machine).
 * premul_sum takes
 * the fallback (the ring). A run of calls keeps going after an error (a size mismatch between
 * ranks, a failed MPI_Reduce_local): the error is reported once every call ran, so that the
 * communicator's next calls stay in step. */
#ifndef TC_MPI_SHM_SLICES_H
#define TC_MPI_SHM_SLICES_H

#include "algo.h"

typedef enum { TC_SLICES_ALL_REDUCE, TC_SLICES_REDUCE_SCATTER, TC_SLICES_REDUCE } tc_slices_kind_t;

/* Whether the call fits: at least 2 ranks, a segment, no premul. */
bool tc_shm_slices_supported(const tc_algo_query_t *q);
/* all_reduce and reduce (c->n: the vector; reduce: c->root, c->dst NULL off it) or reduce_scatter
 * (c->n: one block, c->blocks: where they lie). */
int tc_shm_slices_build(tc_work_t *w, const tc_algo_call_t *c, tc_slices_kind_t kind);

#endif
