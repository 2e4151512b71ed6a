/* reduce -> MPI_Ireduce (chunked above the per-call limit); out is written on dst only. */
#include "../argcheck.h"
#include "../work/staging.h"
#include "../base/dtype.h"
#include "post.h"

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int dst, const tc_redop_t *op) {
  int64_t n = tcoll_tensor_numel(in);
  bool is_dst = w->comm->rank == dst, premul = op->kind == TC_REDOP_PREMUL_SUM;
  const void *sbuf = MPI_IN_PLACE;
  void *rbuf = NULL;
  int rc;
  w->host_math = premul || op->kind == TCOLL_AVG;
  if (is_dst && out->data == in->data && !premul) {
    rc = tc_stage_inout(w, out, &rbuf);
  } else {
    rc = tc_stage_in(w, in, &sbuf);
    if (!rc && is_dst) rc = tc_stage_out(w, out, &rbuf);
  }
  if (rc) return rc;
  if (premul) { /* the scaled contribution goes in scratch: in and out stay as they are */
    void *scaled = tc_work_scratch(w, tcoll_tensor_nbytes(in));
    if (!scaled) return TCOLL_ERR_NO_MEMORY;
    tc_host_scale_copy(scaled, sbuf, in->dtype, n, op->scalar);
    sbuf = scaled;
  }
  if (is_dst && op->kind == TCOLL_AVG && (rc = tc_work_divide(w, rbuf, n, in->dtype, w->comm->size))) return rc;
  return tc_post_reduce(w, sbuf, rbuf, n, in->dtype, tc_mpi_op(op, in->dtype), dst);
}

int tcoll_reduce(const tcoll_tensor_t *in, int dst, tcoll_redop_t op, tcoll_comm_t *comm, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_reduce");
  tcoll_comm_t *c = NULL;
  tc_redop_t rop;
  int rc = tc_check_reduce(in, dst, op, comm, out, &c, &rop);
  if (rc) return tc_call_failed("reduce", c, rc);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "reduce", c, TC_SIG(.t = in, .root = dst, .op = &rop)))) return rc;
  /* Off dst the output is never written: one tcoll allocates holds zeros. */
  rc = c->rank == dst ? tc_work_output(w, out, in->dtype, in->ndim, in->shape, in->device)
                      : tc_work_output_zeroed(w, out, in->dtype, in->ndim, in->shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post(w, in, out, dst, &rop);
  return tc_work_end(w, rc);
}
