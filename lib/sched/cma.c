/* The cma all_gather and the ring's push (see cma.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "cma.h"

#include "../base/dtype.h"
#include "../base/stream_copy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#ifdef TC_HAVE_MEMCHECK
#include <valgrind/memcheck.h>
#endif

/* Local iovecs per process_vm_readv call (the kernel takes at most IOV_MAX = 1024). */
#define CMA_IOV 1024

typedef struct cma_addr {
  int64_t pid;
  uint64_t addr;
} cma_addr_t;

/* Outputs along a dim other than 0 from TC_STREAM_OUT_MIN_BYTES are written with streaming
 * stores: each peer's input is read contiguously into a bounce chunk that stays in cache, whose
 * runs are then streamed into the output (base/stream_copy.h). Below it the output stays in cache and the
 * reads go straight into it, one local iovec per run. Measured at 2 ranks on the CI machine,
 * both interleaved in one program, dim 1 over tcoll's dim 0 (streamed / not): runs of 1 KiB 1.35
 * / 1.96x at 8 MiB, 1.11-1.42 / 1.50-1.90x at 12-64 MiB; runs of 2-16 KiB 1.42 / 1.53x at 8 MiB,
 * 1.02-1.22 / 1.13-1.64x from 12 MiB; at 4 MiB 1.95-2.23 / 0.84-1.45x. */
#define BOUNCE ((size_t)256 << 10)

/* The work's scratch: the job, then the address table (p entries), 16-byte aligned, then the
 * bounce chunk where the output is streamed. */
typedef struct cma_job {
  cma_addr_t mine;
  const char *in;
  char *out;
  size_t run;
  int64_t outer;
  int rank, size;
  cma_addr_t *peers;
  char *done;  /* p bytes: the "read" notes received (their content is unused) */
  char note;   /* the note sent */
  int fault;   /* TCOLL_CMA_FAULT (tests): reads fail with this errno half-way */
  int status;  /* the first failed read, reported at the end */
  char *bounce; /* BOUNCE bytes where the output is streamed, else NULL */
  char msg[240];
} cma_job_t;

/* TCOLL_CMA_FAULT=ERRNO (tests), read at each call: this rank's reads and writes fail half-way. */
static int fault_knob(void) {
  const char *v = getenv("TCOLL_CMA_FAULT");
  return v ? atoi(v) : 0;
}

#define JOB_BYTES ((sizeof(cma_job_t) + 15) & ~(size_t)15)
#define TABLE_BYTES(p) (((size_t)(p) * (sizeof(cma_addr_t) + 1) + 15) & ~(size_t)15)

static bool streamed(size_t run, int64_t outer, int p) {
  return outer > 1 && run * (size_t)outer * (size_t)p >= TC_STREAM_OUT_MIN_BYTES;
}

size_t tc_cma_scratch(int p, size_t run, int64_t outer) {
  return JOB_BYTES + TABLE_BYTES(p) + (streamed(run, outer, p) ? BOUNCE : 0);
}

/* Moves `rows` rows of `run` bytes between remote (contiguous) and local (rows `stride` apart):
 * read (process_vm_readv: remote to local) or write (process_vm_writev: local to remote), one
 * local iovec per row and one remote iovec per call. Returns 0, or errno (ENODATA for a call
 * that moved nothing) with *done the bytes moved. */
static int move_rows(pid_t pid, uint64_t remote, char *local, size_t run, size_t stride, int64_t rows, bool write,
                     size_t *done, int fault) {
  struct iovec liov[CMA_IOV];
  *done = 0;
  if (fault) rows /= 2; /* then fails */
  for (int64_t r0 = 0; r0 < rows; r0 += CMA_IOV) {
    int64_t nr = rows - r0 < CMA_IOV ? rows - r0 : CMA_IOV;
    for (int64_t i = 0; i < nr; i++) {
      liov[i].iov_base = local + (size_t)(r0 + i) * stride;
      liov[i].iov_len = run;
    }
    struct iovec *lv = liov;
    unsigned long lcnt = (unsigned long)nr;
    size_t want = (size_t)nr * run, got = 0;
    while (got < want) { /* a partial transfer goes on where it stopped */
      struct iovec riov = {(void *)(uintptr_t)(remote + (uint64_t)(*done + got)), want - got};
      ssize_t n = write ? process_vm_writev(pid, lv, lcnt, &riov, 1, 0) : process_vm_readv(pid, lv, lcnt, &riov, 1, 0);
      if (n <= 0) {
        *done += got;
        return n < 0 ? errno : ENODATA;
      }
      got += (size_t)n;
      for (size_t k = (size_t)n; k && lcnt;) { /* skip the iovecs done */
        if (k >= lv->iov_len) {
          k -= lv->iov_len;
          lv++;
          lcnt--;
        } else {
          lv->iov_base = (char *)lv->iov_base + k;
          lv->iov_len -= k;
          k = 0;
        }
      }
    }
    *done += want;
  }
  return fault;
}

/* Bytes [f0, f1) of rank p's input, at src, into their places in the output (row f / run). */
static void place(const cma_job_t *j, int p, const char *src, size_t f0, size_t f1) {
  size_t stride = j->run * (size_t)j->size;
  for (size_t f = f0; f < f1;) {
    size_t col = f % j->run, len = j->run - col < f1 - f ? j->run - col : f1 - f;
    char *dst = j->out + f / j->run * stride + (size_t)p * j->run + col;
    if (j->bounce) tc_stream_copy(dst, src + (f - f0), len);
    else memcpy(dst, src + (f - f0), len);
    f += len;
  }
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
                        : move_rows((pid_t)j->peers[p].pid, j->peers[p].addr, j->out + (size_t)p * j->run, j->run,
                                    stride, j->outer, false, &done, j->fault);
    if (err && !j->status) {
      j->status = err == EPERM || err == EACCES ? TCOLL_ERR_UNSUPPORTED : TCOLL_ERR_MPI;
      snprintf(j->msg, sizeof j->msg,
               "all_gather (cma): process_vm_readv of rank %d's input (pid %lld) failed: %s (errno %d) after %zu of "
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
 * MPI_Ibarrier cost 4-15 us more per call at 2 ranks, measured with a stand-alone prototype): round 0
 * sends this rank's address to every peer and receives theirs while this rank's own block is
 * copied; round 1 reads the peers; round 2 tells every peer its input was read and waits for
 * the same word from every peer, so that no rank completes (and lets its input change) before
 * its peers read it; round 3 reports a failed read. */
int tc_build_cma_all_gather(tc_sched_t *s, const void *in, void *out, size_t run, int64_t outer, void *scratch) {
  cma_job_t *j = scratch;
  int p = s->comm->size, me = s->comm->rank;
  *j = (cma_job_t){.mine = {(int64_t)getpid(), (uint64_t)(uintptr_t)in}, .in = in, .out = out, .run = run,
                   .outer = outer, .rank = me, .size = p, .fault = fault_knob(),
                   .peers = (cma_addr_t *)((char *)scratch + JOB_BYTES)};
  j->done = (char *)(j->peers + p);
  j->bounce = streamed(run, outer, p) ? (char *)scratch + JOB_BYTES + TABLE_BYTES(p) : NULL;
  int rc = tc_sched_reserve(s, 4 * p + 4);
  for (int k = 1; k < p && !rc; k++) {
    int q = (me + k) % p;
    rc = tc_sched_recv(s, &j->peers[q], (int64_t)sizeof(cma_addr_t), TCOLL_UINT8, q, 0, false);
    if (!rc) rc = tc_sched_send(s, &j->mine, (int64_t)sizeof(cma_addr_t), TCOLL_UINT8, q, 0, false);
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

/* ---------------------------------------------------------------- the push */

typedef struct cma_push {
  cma_addr_t mine; /* this rank's receive buffer, sent to the rank that pushes into it */
  cma_addr_t dest; /* where this rank pushes */
  tc_cma_push_args_t a;
  tc_sched_t *s;
  int first_note, nnote; /* the steps of the message that says the block is there */
  int fault;             /* TCOLL_CMA_FAULT (tests): writes fail with this errno half-way */
} cma_push_t;

size_t tc_cma_push_scratch(void) { return sizeof(cma_push_t); }

/* Writes the block into the next rank's buffer; the message that follows then carries nothing.
 * A failed write leaves the block to MPI: packed into spare, it goes in that message (the
 * receiver's buffer is overwritten whole, whatever the write left there). */
static int push_block(void *arg) {
  cma_push_t *j = arg;
  const tc_cma_push_args_t *a = &j->a;
  size_t total = a->run * (size_t)a->runs, done = 0;
  int err = move_rows((pid_t)j->dest.pid, j->dest.addr, (char *)a->src, a->run, a->stride, a->runs, true, &done,
                      j->fault);
  if (!err) {
    for (int i = j->first_note; i < j->first_note + j->nnote; i++) j->s->steps[i].u.p2p.count = 0;
    return TCOLL_SUCCESS;
  }
  tc_pack_runs(a->spare, a->src, a->stride, a->run, a->runs);
  tc_info("ring reduce_scatter (cma): process_vm_writev into rank %d's buffer (pid %lld) failed: %s (errno %d) after "
          "%zu of %zu bytes; the block goes through MPI instead",
          a->to, (long long)j->dest.pid, strerror(err), err, done, total);
  return TCOLL_SUCCESS;
}

/* Under valgrind, bytes that another process wrote with process_vm_writev look unwritten to
 * memcheck, which sees its own process's writes only: once they arrived, they are marked
 * written. */
static int mark_pushed(void *arg) {
  const cma_push_t *j = arg;
#ifdef TC_HAVE_MEMCHECK
  VALGRIND_MAKE_MEM_DEFINED(j->a.rbuf, (size_t)j->a.rcount * tc_dtype_size(j->a.dtype));
#else
  TC_UNUSED(j);
#endif
  return TCOLL_SUCCESS;
}

static bool under_valgrind(void) {
#ifdef TC_HAVE_MEMCHECK
  return RUNNING_ON_VALGRIND != 0;
#else
  return false;
#endif
}

/* In a new round: this rank's buffer goes to `from` while `to`'s arrives; once it has, the block
 * is written there and the message sent, whose steps depend on the write only (the rest of the
 * round waits for `from`'s message). Steps start in the order they were added, so the address's
 * receive (a message of its own, tag addr_tag) is posted before the block's and matches first,
 * whatever tags the block's pieces take. */
int tc_build_cma_push(tc_sched_t *s, void *scratch, const tc_cma_push_args_t *a) {
  cma_push_t *j = scratch;
  *j = (cma_push_t){.mine = {(int64_t)getpid(), (uint64_t)(uintptr_t)a->rbuf}, .a = *a, .s = s,
                    .fault = fault_knob()};
  int rc = tc_sched_reserve(s, 6); /* the message and the block unsplit */
  if (!rc) rc = tc_sched_send(s, &j->mine, (int64_t)sizeof(cma_addr_t), TCOLL_UINT8, a->from, a->addr_tag, true);
  if (!rc) rc = tc_sched_recv(s, &j->dest, (int64_t)sizeof(cma_addr_t), TCOLL_UINT8, a->to, a->addr_tag, false);
  int addr = tc_sched_last(s);
  if (!rc) rc = tc_sched_call(s, push_block, j, false);
  int write = tc_sched_last(s);
  if (!rc) rc = tc_sched_after(s, write, addr);
  j->first_note = s->n;
  int64_t n = (int64_t)(a->run * (size_t)a->runs / tc_dtype_size(a->dtype));
  if (!rc) rc = tc_sched_send(s, a->spare, n, a->dtype, a->to, a->tag, false);
  j->nnote = s->n - j->first_note;
  for (int i = j->first_note; i < s->n && !rc; i++) rc = tc_sched_after(s, i, write);
  if (!rc) rc = tc_sched_recv(s, a->rbuf, a->rcount, a->dtype, a->from, a->tag, false);
  if (!rc && under_valgrind()) rc = tc_sched_call(s, mark_pushed, j, true);
  return rc;
}

/* ---------------------------------------------------------------- the probe */

/* What each rank's probe word holds: its pid and a cookie (random: processes on other nodes may
 * have the same pid and addresses), read back by every peer. */
typedef struct probe_word {
  char magic[16];
  int64_t pid;
  uint64_t cookie;
} probe_word_t;

static probe_word_t probe_word;

/* What each rank tells the others: where its probe word lies, what it holds, and its node's name
 * (MPI_Get_processor_name, cut to 63 bytes). */
typedef struct probe_entry {
  cma_addr_t at;
  probe_word_t word;
  char host[64];
} probe_entry_t;

static bool knob_off(void) {
  const char *v = getenv("TCOLL_CMA");
  return v && (!strcmp(v, "0") || !strcasecmp(v, "off") || !strcasecmp(v, "no") || !strcasecmp(v, "false"));
}

static void probe_word_init(void) {
  if (probe_word.pid) return;
  uint64_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    rnd = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec;
  }
  memcpy(probe_word.magic, "tcoll-cma-probe", 16);
  probe_word.pid = (int64_t)getpid();
  probe_word.cookie = rnd ^ (uint64_t)(uintptr_t)&probe_word;
}

/* Reads rank p's probe word: whether it holds what p said. */
static bool read_peer(const probe_entry_t *e, int p, char *why, size_t len) {
  probe_word_t got;
  memset(&got, 0, sizeof got);
  struct iovec l = {&got, sizeof got}, r = {(void *)(uintptr_t)e->at.addr, sizeof got};
  ssize_t n = process_vm_readv((pid_t)e->at.pid, &l, 1, &r, 1, 0);
  int err = n < 0 ? errno : 0;
  if (n == (ssize_t)sizeof got && !memcmp(&got, &e->word, sizeof got)) return true;
  snprintf(why, len, "reading rank %d's memory (pid %lld) with process_vm_readv %s%s%s", p, (long long)e->at.pid,
           n < 0 ? "failed: " : "returned other bytes", n < 0 ? strerror(err) : "",
           err == EPERM ? " (ptrace rights: Yama's ptrace_scope, a container's seccomp or capabilities)" : "");
  return false;
}

/* This rank's view: 1 where every rank takes part, every peer is on this node and every read
 * worked, else 0 (why in `why`). Every rank makes the same collective calls, whatever it finds,
 * each driving the schedules in flight while it waits: the probe runs inside a post, and a peer
 * may join it only after waiting for an earlier collective whose later steps this rank starts. */
static int probe_peers(tcoll_comm_t *c, char *why, size_t len) {
  probe_entry_t *all = calloc((size_t)c->size, sizeof *all), mine;
  int ok = all != NULL, every = 0;
  if (!ok) snprintf(why, len, "no memory for the probe");
  else if (knob_off()) ok = 0, snprintf(why, len, "TCOLL_CMA=%s", getenv("TCOLL_CMA"));
  if (tc_mpi_allreduce(&ok, &every, 1, MPI_INT, MPI_LAND, c->ctrl, true) != MPI_SUCCESS) every = 0;
  if (ok && !every) ok = 0, snprintf(why, len, "another rank cannot take part");
  if (every) {
    probe_word_init();
    memset(&mine, 0, sizeof mine);
    mine.at = (cma_addr_t){(int64_t)getpid(), (uint64_t)(uintptr_t)&probe_word};
    mine.word = probe_word;
    char host[MPI_MAX_PROCESSOR_NAME];
    int hl = 0;
    if (MPI_Get_processor_name(host, &hl) == MPI_SUCCESS) snprintf(mine.host, sizeof mine.host, "%.*s", hl, host);
    if (tc_mpi_allgather(&mine, (int64_t)sizeof mine, MPI_BYTE, all, (int64_t)sizeof mine, MPI_BYTE, c->ctrl, true) !=
        MPI_SUCCESS)
      ok = 0, snprintf(why, len, "the probe's MPI_Allgather failed");
  }
  for (int p = 0; ok && p < c->size; p++)
    if (strcmp(all[p].host, mine.host))
      ok = 0, snprintf(why, len, "rank %d runs on node %s, this rank on %s", p, all[p].host, mine.host);
  for (int p = 0; ok && p < c->size; p++)
    if (p != c->rank && !read_peer(&all[p], p, why, len)) ok = 0;
  free(all);
  return ok;
}

bool tc_cma_usable(tcoll_comm_t *c) {
  int known = __atomic_load_n(&c->cma, __ATOMIC_ACQUIRE);
  if (known) return known > 0;
  char why[256] = "";
  int ok = c->size == 1 ? !knob_off() : probe_peers(c, why, sizeof why);
  if (c->size == 1 && !ok) snprintf(why, sizeof why, "TCOLL_CMA=%s", getenv("TCOLL_CMA"));
  int all = ok;
  if (c->size > 1 && tc_mpi_allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, c->ctrl, true) != MPI_SUCCESS) all = 0;
  char label[TC_COMM_NAME_LEN + 16];
  if (!all)
    tc_info("communicator %s: cross-memory attach does not apply (%s); all_gather and the ring reduce_scatter "
            "take their other paths",
            tc_comm_label(c, label, sizeof label), ok ? "another rank cannot read its peers' memory" : why);
  __atomic_store_n(&c->cma, all ? 1 : -1, __ATOMIC_RELEASE);
  return all;
}
