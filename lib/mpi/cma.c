/* Cross-memory attach: moving rows between processes, the probe, and the ring's push (see cma.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "cma.h"

#include "../base/dtype.h"

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

int tc_cma_fault(void) {
  const char *v = getenv("TCOLL_CMA_FAULT");
  return v ? atoi(v) : 0;
}

int tc_cma_move_rows(pid_t pid, uint64_t remote, char *local, size_t run, size_t stride,
                     int64_t rows, bool write, size_t *done, int fault) {
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
      ssize_t n = write ? process_vm_writev(pid, lv, lcnt, &riov, 1, 0)
                        : process_vm_readv(pid, lv, lcnt, &riov, 1, 0);
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

/* ---------------------------------------------------------------- the push */

typedef struct cma_push {
  tc_cma_addr_t mine; /* this rank's receive buffer, sent to the rank that pushes into it */
  tc_cma_addr_t dest; /* where this rank pushes */
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
  int err = tc_cma_move_rows((pid_t)j->dest.pid, j->dest.addr, (char *)a->src, a->run, a->stride,
                             a->runs, true, &done, j->fault);
  if (!err) {
    for (int i = j->first_note; i < j->first_note + j->nnote; i++) j->s->steps[i].u.p2p.count = 0;
    return TCOLL_SUCCESS;
  }
  tc_pack_runs(a->spare, a->src, a->stride, a->run, a->runs);
  tc_info(
      "ring reduce_scatter (cma): process_vm_writev into rank %d's buffer (pid %lld) failed: %s "
      "(errno %d) after "
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
  *j = (cma_push_t){.mine = {(int64_t)getpid(), (uint64_t)(uintptr_t)a->rbuf},
                    .a = *a,
                    .s = s,
                    .fault = tc_cma_fault()};
  int rc = tc_sched_reserve(s, 6); /* the message and the block unsplit */
  if (!rc)
    rc = tc_sched_send(s, &j->mine, (int64_t)sizeof(tc_cma_addr_t), TCOLL_UINT8, a->from,
                       a->addr_tag, true);
  if (!rc)
    rc = tc_sched_recv(s, &j->dest, (int64_t)sizeof(tc_cma_addr_t), TCOLL_UINT8, a->to, a->addr_tag,
                       false);
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
  tc_cma_addr_t at;
  probe_word_t word;
  char host[64];
} probe_entry_t;

static bool knob_off(void) {
  const char *v = getenv("TCOLL_CMA");
  return v && (!strcmp(v, "0") || !strcasecmp(v, "off") || !strcasecmp(v, "no") ||
               !strcasecmp(v, "false"));
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
  snprintf(
      why, len, "reading rank %d's memory (pid %lld) with process_vm_readv %s%s%s", p,
      (long long)e->at.pid, n < 0 ? "failed: " : "returned other bytes", n < 0 ? strerror(err) : "",
      err == EPERM ? " (ptrace rights: Yama's ptrace_scope, a container's seccomp or capabilities)"
                   : "");
  return false;
}

/* This rank's view: 1 where every rank takes part, every peer is on this node and every read
 * worked, else 0 (why in `why`). Every rank makes the same collective calls, whatever it finds,
 * each driving the schedules in flight while it waits: the probe runs inside a post, and a peer
 * may join it only after waiting for an earlier collective whose later steps this rank starts. */
static int probe_peers(tcoll_comm_t *c, char *why, size_t len) {
  probe_entry_t *all = calloc((size_t)c->size, sizeof *all), mine;
  int ok = all != NULL, every = 0;
  if (!ok)
    snprintf(why, len, "no memory for the probe");
  else if (knob_off())
    ok = 0, snprintf(why, len, "TCOLL_CMA=%s", getenv("TCOLL_CMA"));
  if (tc_mpi_allreduce(&ok, &every, 1, MPI_INT, MPI_LAND, c->ctrl, true) != MPI_SUCCESS) every = 0;
  if (ok && !every) ok = 0, snprintf(why, len, "another rank cannot take part");
  if (every) {
    probe_word_init();
    memset(&mine, 0, sizeof mine);
    mine.at = (tc_cma_addr_t){(int64_t)getpid(), (uint64_t)(uintptr_t)&probe_word};
    mine.word = probe_word;
    char host[MPI_MAX_PROCESSOR_NAME];
    int hl = 0;
    if (PMPI_Get_processor_name(host, &hl) == MPI_SUCCESS)
      snprintf(mine.host, sizeof mine.host, "%.*s", hl, host);
    if (tc_mpi_allgather(&mine, (int64_t)sizeof mine, MPI_BYTE, all, (int64_t)sizeof mine, MPI_BYTE,
                         c->ctrl, true) != MPI_SUCCESS)
      ok = 0, snprintf(why, len, "the probe's MPI_Allgather failed");
  }
  for (int p = 0; ok && p < c->size; p++)
    if (strcmp(all[p].host, mine.host))
      ok = 0,
      snprintf(why, len, "rank %d runs on node %s, this rank on %s", p, all[p].host, mine.host);
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
  if (c->size > 1 &&
      tc_mpi_allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, c->ctrl, true) != MPI_SUCCESS)
    all = 0;
  char label[TC_COMM_NAME_LEN + 16];
  if (!all)
    tc_info(
        "communicator %s: cross-memory attach does not apply (%s); all_gather and the ring "
        "reduce_scatter "
        "take their other paths",
        tc_comm_label(c, label, sizeof label),
        ok ? "another rank cannot read its peers' memory" : why);
  __atomic_store_n(&c->cma, all ? 1 : -1, __ATOMIC_RELEASE);
  return all;
}
