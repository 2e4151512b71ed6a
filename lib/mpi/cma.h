/* Cross-memory attach (Linux process_vm_readv / process_vm_writev) between the ranks of a
 * communicator on one node: whether it works (the probe, agreed by every rank), moving rows of
 * bytes between processes, and the ring reduce_scatter's push. The cma all_gather
 * (all_gather/cma.c) reads its peers' inputs with it. For tests, TCOLL_CMA_FAULT=ERRNO (read at
 * each call) makes this rank's reads and writes fail with ERRNO half-way. */
#ifndef TC_MPI_CMA_H
#define TC_MPI_CMA_H

#include "../sched/schedule.h"

#include <sys/types.h>

/* Where a buffer lies in another process: sent to the peers that read or write it. */
typedef struct tc_cma_addr {
  int64_t pid;
  uint64_t addr;
} tc_cma_addr_t;

/* Whether the cma all_gather and the push below can run on comm: every rank on one node, reads
 * between every pair of ranks work (probed by reading each peer's probe word), and TCOLL_CMA is
 * not 0 on any rank (the knob pretends cross-memory attach is unavailable: at the probe, i.e. per
 * communicator). Probed at the first call on comm, then cached: a collective on comm's control
 * communicator, so every rank must ask at the same point (the first all_gather or ring
 * reduce_scatter that would use it: every rank decides the same way). Logs at INFO when it does
 * not apply. */
bool tc_cma_usable(tcoll_comm_t *comm);

/* Moves `rows` rows of `run` bytes between remote (contiguous, in process pid) and local (rows
 * `stride` apart): read (process_vm_readv: remote to local) or write (process_vm_writev: local
 * to remote), one local iovec per row and one remote iovec per call. Returns 0, or errno (ENODATA
 * for a call that moved nothing) with *done the bytes moved. fault (tc_cma_fault): fail with it
 * half-way. */
int tc_cma_move_rows(pid_t pid, uint64_t remote, char *local, size_t run, size_t stride,
                     int64_t rows, bool write, size_t *done, int fault);
/* TCOLL_CMA_FAULT's errno (tests), 0 without it: read at each call. */
int tc_cma_fault(void);

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
