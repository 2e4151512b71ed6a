/* Composite works: a registry work keyed under the caller's outputs that waits for inner public
 * collectives, then runs local math (see grad.h). */
#include "grad.h"

#include "../work/registry.h"
#include "../work/staging.h"
#include "../tensor.h"

#include <string.h>

TC_PRIV_FITS(tg_job_t);

static void release_holds(tg_job_t *j) {
  for (int i = 0; i < j->nhold; i++) tg_saved_put(j->hold[i]);
  j->nhold = 0;
}

/* Waits for the inner buffers in order. Non-blocking (or past the deadline): IN_PROGRESS as soon
 * as one is still pending. A failed inner work is still completed; the first failure is kept. */
static int comp_poll(void *arg, bool block, double deadline) {
  tc_work_t *w = arg;
  tg_job_t *j = tg_job(w);
  while (j->ndone < j->nwait) {
    double secs = 0.0;
    bool blk = block;
    if (block && deadline > 0) {
      secs = deadline - tc_now();
      if (secs <= 0) {
        secs = 0.0;
        blk = false;
      }
    }
    int rc = tc_wait_ptr(j->wait[j->ndone], secs, blk);
    if (rc == TCOLL_IN_PROGRESS || rc == TCOLL_ERR_TIMEOUT) return TCOLL_IN_PROGRESS;
    if (rc && !j->rc) j->rc = rc;
    j->ndone++;
  }
  if (j->rc) {
    release_holds(j); /* finish does not run after a failure */
    return j->rc;
  }
  return TCOLL_SUCCESS;
}

static int comp_finish(tc_work_t *w) {
  tg_job_t *j = tg_job(w);
  int rc = j->fin ? j->fin(j) : TCOLL_SUCCESS;
  release_holds(j);
  return rc;
}

int tg_comp_begin(tc_work_t **out, const char *op, tcoll_comm_t *comm, int nout, int nwait) {
  tc_work_t *w;
  /* The collectives inside are checked and numbered themselves: this work is local. */
  int rc = tc_work_begin(&w, op, comm, TC_SIG(.local = true));
  if (rc) return rc;
  tg_job_t *j = tg_job(w);
  memset(j, 0, sizeof *j);
  j->nout = nout;
  j->wait_cap = nwait;
  j->res = tc_work_scratch(w, (size_t)(nout > 0 ? nout : 1) * sizeof *j->res);
  j->wait = tc_work_scratch(w, (size_t)(nwait > 0 ? nwait : 1) * sizeof *j->wait);
  if (!j->res || !j->wait) return tc_work_end(w, TCOLL_ERR_NO_MEMORY);
  memset(j->res, 0, (size_t)(nout > 0 ? nout : 1) * sizeof *j->res);
  *out = w;
  return TCOLL_SUCCESS;
}

int tg_comp_output(tc_work_t *w, int k, tcoll_tensor_t *out, const tcoll_tensor_t *desc, bool written) {
  tg_job_t *j = tg_job(w);
  /* Not written: left unchanged, so zeros when allocated here. */
  int rc = written ? tc_work_output(w, out, desc->dtype, desc->ndim, desc->shape, desc->device)
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
    j->res[k] = out->data;
    return TCOLL_SUCCESS;
  }
  void *host;
  if ((rc = tc_stage_scratch(w, nb, out->device, &host))) return rc;
  j->res[k] = host;
  return nb ? tc_work_piece(w, out->data, out->device, host, nb) : TCOLL_SUCCESS;
}

int tg_comp_register(tc_work_t *w) { return tc_work_register(w); }

void *tg_comp_scratch(tc_work_t *w, size_t nbytes) { return tc_work_scratch(w, nbytes); }

int tg_comp_host_view(tc_work_t *w, const tcoll_tensor_t *t, const void **p) {
  int rc = tc_wait_ptr(t->data, 0.0, true); /* a pending input is waited for first */
  if (rc) return rc;
  if (t->device == TCOLL_HOST) {
    *p = t->data;
    return TCOLL_SUCCESS;
  }
  size_t nb = tcoll_tensor_nbytes(t);
  void *h;
  if ((rc = tc_stage_scratch(w, nb, t->device, &h))) return rc;
  tcoll_tensor_t dst = tcoll_tensor_make(h, t->dtype, t->ndim, t->shape, TCOLL_HOST);
  if (nb && (rc = tcoll_tensor_copy(&dst, t))) return rc;
  *p = h;
  return TCOLL_SUCCESS;
}

void tg_comp_wait_on(tc_work_t *w, void *p) {
  tg_job_t *j = tg_job(w);
  if (p && j->nwait < j->wait_cap) j->wait[j->nwait++] = p;
}

void tg_comp_hold(tc_work_t *w, tg_saved_t *s) {
  tg_job_t *j = tg_job(w);
  if (s && j->nhold < (int)TC_ARRAY_LEN(j->hold)) j->hold[j->nhold++] = tg_saved_ref(s);
}

int tg_comp_end(tc_work_t *w, int rc) {
  tg_job_t *j = tg_job(w);
  if (rc) {
    /* Inner collectives already posted read or write this work's scratch: complete them before
     * the work (and its scratch) is undone. Their own errors do not replace rc. */
    for (int i = 0; i < j->nwait; i++) tc_wait_ptr(j->wait[i], 0.0, true);
    j->nwait = 0;
    release_holds(j);
    return tc_work_end(w, rc);
  }
  w->finish = comp_finish;
  return tc_work_end(w, tc_sched_poll(&w->sched, comp_poll, w, true));
}
