/* The cma all_gather (TC_ALGO_CMA): every rank of the communicator on one node reads its peers'
 * inputs straight into its own output with process_vm_readv (Linux cross-memory attach), one
 * copy per byte whatever the layout: along a dim other than 0 rank r's block of each outer row
 * lands at r * run within the row, read from the peer's contiguous input with one local iovec
 * per row. Open MPI's shared-memory transport moves large messages the same way, but a strided
 * receive (or a contiguous one interleaved afterwards) costs it a second copy.
 *
 * Outputs of 8 MiB and more along a dim other than 0 are written with streaming stores (they
 * bypass the cache, base/stream_copy.h): each peer's input is read contiguously into a bounce
 * chunk of scratch that stays in cache and its runs streamed into place, and so is the rank's
 * own block: ordinary stores of short runs into an output larger than the cache read every line
 * first.
 *
 * Steps (point-to-point, on the schedule communicator): each rank sends its (pid, input address)
 * to every peer and copies its own block into place; then reads every peer's block; then sends
 * every peer a note that its input was read and waits for every peer's, so that no rank completes
 * (and lets its input be changed) before every peer has read it. A failed read is reported after
 * the notes, naming the peer, errno and the bytes read, so that the other ranks are not left
 * waiting and the communicator stays usable: TCOLL_ERR_UNSUPPORTED for EPERM / EACCES (ptrace
 * rights withdrawn), TCOLL_ERR_MPI otherwise (ESRCH, EFAULT, a read that stopped). For tests,
 * TCOLL_CMA_FAULT=ERRNO (read at each call) makes this rank's reads fail with ERRNO half-way. */
#ifndef TC_CMA_H
#define TC_CMA_H

#include "schedule.h"

/* Whether the cma all_gather can run on comm: every rank on one node, reads between every pair
 * of ranks work (probed by reading each peer's probe word), and TCOLL_CMA is not 0 on any rank
 * (the knob pretends cross-memory attach is unavailable: at the probe, i.e. per communicator).
 * Probed at the first call on comm, then cached: a collective on comm's control communicator,
 * so every rank must ask at the same point (the first all_gather that would take cma: every
 * rank decides the same way). Logs at INFO when it does not apply. */
bool tc_cma_usable(tcoll_comm_t *comm);

/* Scratch bytes of the cma all_gather on p ranks of blocks of outer rows of run bytes. */
size_t tc_cma_scratch(int p, size_t run, int64_t outer);
/* Appends the cma all_gather to s: in holds this rank's block, `outer` rows of `run` bytes
 * (contiguous); out receives outer rows of p * run bytes, rank r's run at r * run in each (along
 * dim 0 outer is 1 and run the whole block). in may be this rank's place in out (in place, dim 0). */
int tc_build_cma_all_gather(tc_sched_t *s, const void *in, void *out, size_t run, int64_t outer, void *scratch);

#endif
