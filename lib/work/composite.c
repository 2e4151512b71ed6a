/* Composite works (see composite.h): a work whose one step polls the inner buffers in order. */
#include "composite.h"

#include "registry.h"
#include "staging.h"
#include "../comm.h"

#include <string.h>

/* What lives in the work's private bytes: the wait list, then the caller's state. */
typedef struct comp_state {
  void **wait; /* inner output buffers to wait for (scratch array) */
  int nwait, ndone, wait_cap;
  int rc; /* the first inner failure */
  tc_comp_fn finish, release;
  _Alignas(16) unsigned char ctx[TC_COMP_CTX_BYTES];
} comp_state_t;
TC_PRIV_FITS(comp_state_t);

static tc_work_t *work_of(tc_comp_t *c) { return (tc_work_t *)(void *)c; }
static comp_state_t *state_of(tc_work_t *w) { return TC_WORK_PRIV(w, comp_state_t); }

void *tc_comp_ctx(tc_comp_t *c) { return state_of(work_of(c))->ctx; }

static void release(comp_state_t *st) {
  if (st->release) st->release(st->ctx);
  st->release = NULL;
}

/* Waits for the inner buffers in order. Non-blocking (or past the deadline): IN_PROGRESS as soon
 * as one is still pending. A failed inner work is still completed; the first failure is kept. */
static int poll_inner(void *arg, bool block, double deadline) {
  comp_state_t *st = state_of(arg);
  while (st->ndone < st->nwait) {
    double secs = 0.0;
    bool blk = block;
    if (block && deadline > 0) {
      secs = deadline - tc_now();
      if (secs <= 0) {
        secs = 0.0;
        blk = false;
      }
    }
    int rc = tc_wait_ptr(st->wait[st->ndone], secs, blk);
    if (rc == TCOLL_IN_PROGRESS || rc == TCOLL_ERR_TIMEOUT) return TCOLL_IN_PROGRESS;
    if (rc && !st->rc) st->rc = rc;
    st->ndone++;
  }
  if (st->rc) {
    release(st); /* finish does not run after a failure */
    return st->rc;
  }
  return TCOLL_SUCCESS;
}

static int run_finish(tc_work_t *w) {
  comp_state_t *st = state_of(w);
  int rc = st->finish ? st->finish(st->ctx) : TCOLL_SUCCESS;
  release(st);
  return rc;
}

int tc_comp_begin(tc_comp_t **c, const char *op, tcoll_comm_t *comm, int nwait, void **ctx) {
  tc_work_t *w;
  /* The collectives inside are checked and numbered themselves: this work is local. */
  int rc = tc_work_begin(&w, op, comm, TC_SIG(.local = true));
  if (rc) return rc;
  comp_state_t *st = state_of(w);
  memset(st, 0, sizeof *st);
  st->wait_cap = nwait;
  st->wait = tc_work_scratch(w, (size_t)(nwait > 0 ? nwait : 1) * sizeof *st->wait);
  if (!st->wait) return tc_work_end(w, TCOLL_ERR_NO_MEMORY);
  *c = (tc_comp_t *)(void *)w;
  *ctx = st->ctx;
  return TCOLL_SUCCESS;
}

int tc_comp_output(tc_comp_t *c, int k, tcoll_tensor_t *out, const tcoll_tensor_t *desc,
                   bool written, void **host) {
  tc_work_t *w = work_of(c);
  *host = NULL;
  /* Not written: left unchanged, so zeros when allocated here. */
  int rc = written
               ? tc_work_output(w, out, desc->dtype, desc->ndim, desc->shape, desc->device)
               : tc_work_output_zeroed(w, out, desc->dtype, desc->ndim, desc->shape, desc->device);
  if (rc) return rc;
  if (k == 0) { /* what the op works on, for logs and traces */
    w->dtype = desc->dtype;
    w->ndim = desc->ndim;
    w->device = desc->device;
    memcpy(w->shape, desc->shape, sizeof w->shape);
  }
  if (!written) return TCOLL_SUCCESS;
  size_t nb = tcoll_tensor_nbytes(out);
  if (out->device == TCOLL_HOST) {
    *host = out->data;
    return TCOLL_SUCCESS;
  }
  if ((rc = tc_stage_scratch(w, nb, out->device, host))) return rc;
  return nb ? tc_work_piece(w, out->data, out->device, *host, nb) : TCOLL_SUCCESS;
}

int tc_comp_register(tc_comp_t *c) { return tc_work_register(work_of(c)); }

void *tc_comp_scratch(tc_comp_t *c, size_t nbytes) { return tc_work_scratch(work_of(c), nbytes); }

int tc_comp_host_view(tc_comp_t *c, const tcoll_tensor_t *t, const void **p) {
  int rc = tc_wait_ptr(t->data, 0.0, true); /* a pending input is waited for first */
  if (rc) return rc;
  if (t->device == TCOLL_HOST) {
    *p = t->data;
    return TCOLL_SUCCESS;
  }
  size_t nb = tcoll_tensor_nbytes(t);
  void *h;
  if ((rc = tc_stage_scratch(work_of(c), nb, t->device, &h))) return rc;
  tcoll_tensor_t dst = tcoll_tensor_make(h, t->dtype, t->ndim, t->shape, TCOLL_HOST);
  if (nb && (rc = tcoll_tensor_copy(&dst, t))) return rc;
  *p = h;
  return TCOLL_SUCCESS;
}

void tc_comp_wait_on(tc_comp_t *c, void *p) {
  comp_state_t *st = state_of(work_of(c));
  if (p && st->nwait < st->wait_cap) st->wait[st->nwait++] = p;
}

int tc_comp_end(tc_comp_t *c, int rc, tc_comp_fn finish, tc_comp_fn release_fn) {
  tc_work_t *w = work_of(c);
  comp_state_t *st = state_of(w);
  st->release = release_fn;
  if (rc) {
    /* Inner collectives already posted read or write this work's scratch: complete them before
     * the work (and its scratch) is undone. Their own errors do not replace rc. */
    for (int i = 0; i < st->nwait; i++) tc_wait_ptr(st->wait[i], 0.0, true);
    st->nwait = 0;
    release(st);
    return tc_work_end(w, rc);
  }
  st->finish = finish;
  w->finish = run_finish;
  return tc_work_end(w, tc_sched_poll(&w->sched, poll_inner, w, true));
}

int tc_comp_wait(const void *p) { return tc_wait_ptr(p, 0.0, true); }

int tc_comp_comm_live(tcoll_comm_t *comm, const char *argname) {
  tcoll_comm_t *c;
  return tc_comm_resolve(comm, argname, &c);
}
