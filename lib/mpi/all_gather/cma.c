/* The cma all_gather (TCOLL_ALGO all_gather:cma): every rank of the communicator on one node
 * reads its peers' inputs straight into its own output with process_vm_readv (cross-memory
 * attach, cma.h), one copy per byte whatever the layout: along a dim other than 0 rank r's block
 * of each outer row lands at r * run within the row, read from the peer's contiguous input with
 * one local iovec per row. Open MPI's shared-memory transport moves large messages the same way,
 * but a strided receive (or a contiguous one interleaved afterwards) costs it a second copy.
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
 * rights withdrawn), TCOLL_ERR_MPI otherwise (ESRCH, EFAULT, a read that stopped). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "../algo.h"
#include "../cma.h"
#include "place.h"

#include "../../base/stream_copy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* Outputs along a dim other than 0 from TC_STREAM_OUT_MIN_BYTES are written with streaming
 * stores: each peer's input is read contiguously into a bounce chunk that stays in cache, whose
 * runs are then streamed into the output (base/stream_copy.h). Below it the output stays in cache
 * and the reads go straight into it, one local iovec per run. Measured at 2 ranks on the CI
 * machine, both interleaved in one program, dim 1 over tcoll's dim 0 (streamed / not): runs of 1
 * KiB 1.35 / 1.96x at 8 MiB, 1.11-1.42 / 1.50-1.90x at 12-64 MiB; runs of 2-16 KiB 1.42 / 1.53x at
 * 8 MiB, 1.02-1.22 / 1.13-1.64x from 12 MiB; at 4 MiB 1.95-2.23 / 0.84-1.45x. */
#define BOUNCE ((size_t)256 << 10)

/* The work's scratch: the job, then the address table (p entries), 16-byte aligned, then the
 * bounce chunk where the output is streamed. */
typedef struct cma_job {
  tc_cma_addr_t mine;
  const char *in;
  char *out;
  size_t run;
  int64_t outer;
  int rank, size;
  tc_cma_addr_t *peers;
  char *done;   /* p bytes: the "read" notes received (their content is unused) */
  char note;    /* the note sent */
  int fault;    /* TCOLL_CMA_FAULT (tests): reads fail with this errno half-way */
  int status;   /* the first failed read, reported at the end */
  char *bounce; /* BOUNCE bytes where the output is streamed, else NULL */
  char msg[240];
} cma_job_t;

#define JOB_BYTES ((sizeof(cma_job_t) + 15) & ~(size_t)15)
#define TABLE_BYTES(p) (((size_t)(p) * (sizeof(tc_cma_addr_t) + 1) + 15) & ~(size_t)15)

static void place(const cma_job_t *j, int p, const char *src, size_t f0, size_t f1) {
  tc_gather_out_t o = {j->out, j->run, j->size, j->bounce != NULL};
  tc_gather_place(&o, p, src, f0, f1);
}

/* This rank's block into place (while the addresses travel). */
static int cma_own(void *arg) {
  cma_job_t *j = arg;
  if (j->out + (size_t)j->rank * j->run == j->in || !j->run) return TCOLL_SUCCESS;
  place(j, j->rank, j->in, 0, j->run * (size_t)j->outer);
  if (j->bounce) tc_stream_fence();
  return TCOLL_SUCCESS;
}

/* Rank p's input through the bounce chunk: read contiguously, then placed. Returns 0 or errno,
 * *done the bytes read. */
static int read_bounced(cma_job_t *j, int p, size_t *done) {
  size_t total = j->run * (size_t)j->outer;
  *done = 0;
  for (size_t f0 = 0; f0 < total; f0 += BOUNCE) {
    size_t n = total - f0 < BOUNCE ? total - f0 : BOUNCE, got = 0;
    if (j->fault && f0 + n > total / 2) return j->fault; /* fails half-way */
    while (got < n) { /* a partial read goes on where it stopped */
      struct iovec local = {j->bounce + got, n - got};
      struct iovec remote = {(void *)(uintptr_t)(j->peers[p].addr + f0 + got), n - got};
      ssize_t r = process_vm_readv((pid_t)j->peers[p].pid, &local, 1, &remote, 1, 0);
      if (r <= 0) {
        *done += got;
        return r < 0 ? errno : ENODATA;
      }
      got += (size_t)r;
    }
    place(j, p, j->bounce, f0, f0 + n);
    *done += n;
  }
  return 0;
}

/* Once the addresses arrived: every peer's block, starting with the next rank (ranks read
 * different peers at a time). Failures are kept for the end, after the notes. */
static int cma_read(void *arg) {
  cma_job_t *j = arg;
  size_t stride = j->run * (size_t)j->size, total = j->run * (size_t)j->outer;
  if (!total) return TCOLL_SUCCESS;
  for (int k = 1; k < j->size; k++) {
    int p = (j->rank + k) % j->size;
    size_t done = 0;
    int err = j->bounce ? read_bounced(j, p, &done)
                        : tc_cma_move_rows((pid_t)j->peers[p].pid, j->peers[p].addr,
                                           j->out + (size_t)p * j->run, j->run, stride, j->outer,
                                           false, &done, j->fault);
    if (err && !j->status) {
      j->status = err == EPERM || err == EACCES ? TCOLL_ERR_UNSUPPORTED : TCOLL_ERR_MPI;
      snprintf(j->msg, sizeof j->msg,
               "all_gather (cma): process_vm_readv of rank %d's input (pid %lld) failed: %s (errno "
               "%d) after %zu of "
               "%zu bytes",
               p, (long long)j->peers[p].pid, strerror(err), err, done, total);
    }
  }
  if (j->bounce) tc_stream_fence();
  return TCOLL_SUCCESS;
}

static int cma_report(void *arg) {
  cma_job_t *j = arg;
  return j->status ? tc_error(j->status, "%s", j->msg) : TCOLL_SUCCESS;
}

/* Point-to-point steps on the schedule communicator (Open MPI's libnbc MPI_Iallgather and
 * MPI_Ibarrier cost 4-15 us more per call at 2 ranks, measured with a stand-alone prototype): round
 * 0 sends this rank's address to every peer and receives theirs while this rank's own block is
 * copied; round 1 reads the peers; round 2 tells every peer its input was read and waits for
 * the same word from every peer, so that no rank completes (and lets its input change) before
 * its peers read it; round 3 reports a failed read. */
static int build(tc_work_t *w, const tc_algo_call_t *c) {
  tc_sched_t *s = &w->sched;
  int p = s->comm->size, me = s->comm->rank;
  cma_job_t *j = tc_work_scratch(
      w, JOB_BYTES + TABLE_BYTES(p) + (tc_gather_streamed(c->run, c->outer, p) ? BOUNCE : 0));
  if (!j) return TCOLL_ERR_NO_MEMORY;
  *j = (cma_job_t){.mine = {(int64_t)getpid(), (uint64_t)(uintptr_t)c->src},
                   .in = c->src,
                   .out = c->dst,
                   .run = c->run,
                   .outer = c->outer,
                   .rank = me,
                   .size = p,
                   .fault = tc_cma_fault(),
                   .peers = (tc_cma_addr_t *)((char *)j + JOB_BYTES)};
  j->done = (char *)(j->peers + p);
  j->bounce =
      tc_gather_streamed(c->run, c->outer, p) ? (char *)j + JOB_BYTES + TABLE_BYTES(p) : NULL;
  int rc = tc_sched_reserve(s, 4 * p + 4);
  for (int k = 1; k < p && !rc; k++) {
    int q = (me + k) % p;
    rc = tc_sched_recv(s, &j->peers[q], (int64_t)sizeof(tc_cma_addr_t), TCOLL_UINT8, q, 0, false);
    if (!rc)
      rc = tc_sched_send(s, &j->mine, (int64_t)sizeof(tc_cma_addr_t), TCOLL_UINT8, q, 0, false);
  }
  if (!rc) rc = tc_sched_call(s, cma_own, j, false);
  if (!rc) rc = tc_sched_call(s, cma_read, j, true);
  for (int k = 1; k < p && !rc; k++) {
    int q = (me + k) % p;
    rc = tc_sched_send(s, &j->note, 1, TCOLL_UINT8, q, 1, k == 1);
    if (!rc) rc = tc_sched_recv(s, &j->done[q], 1, TCOLL_UINT8, q, 1, false);
  }
  if (!rc) rc = tc_sched_call(s, cma_report, j, true);
  return rc;
}

/* Host tensors with elements, on a communicator whose ranks can read each other's memory (probed
 * at the first such call, by every rank alike: every input here is the same on every rank). */
static bool supported(const tc_algo_query_t *q) {
  return !q->device && q->count > 0 && tc_cma_usable(q->comm);
}

const tc_algo_t tc_all_gather_cma = {
    .name = "cma", .layouts = TC_LAYOUT_ANY, .supported = supported, .build = build};
