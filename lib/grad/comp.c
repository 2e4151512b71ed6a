/* The gradient module's composite works (see grad.h): a tg_job inside a composite work
 * (work/composite.h), its outputs' host buffers and the saved tensors it holds. */
#include "grad.h"

#include <string.h>

_Static_assert(sizeof(tg_job_t) <= TC_COMP_CTX_BYTES, "a tg_job fits in a composite");

static int release_holds(void *ctx) {
  tg_job_t *j = ctx;
  for (int i = 0; i < j->nhold; i++) tg_saved_put(j->hold[i]);
  j->nhold = 0;
  return TCOLL_SUCCESS;
}

static int run_fin(void *ctx) {
  tg_job_t *j = ctx;
  return j->fin ? j->fin(j) : TCOLL_SUCCESS;
}

int tg_comp_begin(tc_comp_t **out, const char *op, tcoll_comm_t *comm, int nout, int nwait) {
  tc_comp_t *w;
  void *ctx;
  int rc = tc_comp_begin(&w, op, comm, nwait, &ctx);
  if (rc) return rc;
  tg_job_t *j = ctx;
  j->nout = nout;
  j->res = tc_comp_scratch(w, (size_t)(nout > 0 ? nout : 1) * sizeof *j->res);
  if (!j->res) return tc_comp_end(w, TCOLL_ERR_NO_MEMORY, NULL, NULL);
  memset(j->res, 0, (size_t)(nout > 0 ? nout : 1) * sizeof *j->res);
  *out = w;
  return TCOLL_SUCCESS;
}

int tg_comp_output(tc_comp_t *w, int k, tcoll_tensor_t *out, const tcoll_tensor_t *desc,
                   bool written) {
  void *host;
  int rc = tc_comp_output(w, k, out, desc, written, &host);
  if (!rc && written) tg_job(w)->res[k] = host;
  return rc;
}

void tg_comp_hold(tc_comp_t *w, tg_saved_t *s) {
  tg_job_t *j = tg_job(w);
  if (s && j->nhold < (int)TC_ARRAY_LEN(j->hold)) j->hold[j->nhold++] = tg_saved_ref(s);
}

int tg_comp_end(tc_comp_t *w, int rc) { return tc_comp_end(w, rc, run_fin, release_holds); }
