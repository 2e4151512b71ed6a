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
 * TCOLL_CMA_FAULT=ERRNO (read at each call) makes this rank's reads (and the pushes below: writes)
 * fail with ERRNO half-way. */
#ifndef TC_CMA_H
#define TC_CMA_H

#include "schedule.h"

/* Whether the cma all_gather and the push below can run on comm: every rank on one node, reads
 * between every pair of ranks work (probed by reading each peer's probe word), and TCOLL_CMA is
 * not 0 on any rank (the knob pretends cross-memory attach is unavailable: at the probe, i.e. per
 * communicator). Probed at the first call on comm, then cached: a collective on comm's control
 * communicator, so every rank must ask at the same point (the first all_gather or ring
 * reduce_scatter that would use it: every rank decides the same way). Logs at INFO when it does
 * not apply. */
bool tc_cma_usable(tcoll_comm_t *comm);

/* Scratch bytes of the cma all_gather on p ranks of blocks of outer rows of run bytes. */
size_t tc_cma_scratch(int p, size_t run, int64_t outer);
/* Appends the cma all_gather to s: in holds this rank's block, `outer` rows of `run` bytes
 * (contiguous); out receives outer rows of p * run bytes, rank r's run at r * run in each (along
 * dim 0 outer is 1 and run the whole block). in may be this rank's place in out (in place, dim 0). */
int tc_build_cma_all_gather(tc_sched_t *s, const void *in, void *out, size_t run, int64_t outer, void *scratch);

/* The ring reduce_scatter's first message along a dim other than 0, pushed: the block it carries
 * lies strided in the sender's input, so MPI would need it packed first (or a derived datatype,
 * which packs into its own fragments). Instead the sender writes its runs, packed, straight into
 * the receiving rank's buffer with process_vm_writev (the kernel gathers them from one local
 * iovec per run: one copy instead of two), then sends that rank an empty message with the step's
 * tag; the receiver's ordinary receive of the block (rcount elements from `from`, tag `tag`)
 * completes with it, its buffer already filled. Each rank first sends the address of that buffer
 * (rbuf) to the rank that pushes into it (tag addr_tag).
 * Where a write fails (ptrace rights withdrawn, a peer gone) the block goes through MPI instead:
 * packed into spare and sent in that message, which the same receive takes (logged at INFO).
 * Needs tc_cma_usable(comm), asked by every rank alike. */
typedef struct tc_cma_push_args {
  const void *src; /* runs runs of run bytes, stride bytes apart */
  size_t run, stride;
  int64_t runs;
  tcoll_dtype_t dtype; /* the block's elements (the message's type) */
  void *spare;         /* runs * run bytes, for a failed write */
  void *rbuf;          /* where this rank receives `from`'s push: rcount elements */
  int64_t rcount;
  int to, from, tag, addr_tag;
} tc_cma_push_args_t;

size_t tc_cma_push_scratch(void);
/* Appends the push and the receive of from's block to s, from a new round: steps in a later
 * round start once the block left (written, or its message sent) and from's arrived. scratch:
 * tc_cma_push_scratch() bytes, held by the work until it completes. */
int tc_build_cma_push(tc_sched_t *s, void *scratch, const tc_cma_push_args_t *a);

#endif
