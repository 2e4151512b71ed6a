/* all_reduce -> MPI_Iallreduce (in place on the output; chunked above the per-call limit). */
#include "../argcheck.h"
#include "../work/pipeline.h"
#include "../work/staging.h"
#include "../base/dtype.h"
#include "post.h"

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, bool inplace,
                const tc_redop_t *op) {
  int64_t n = tcoll_tensor_numel(in);
  if (tc_pipe_wanted(in, TC_PIPE_ALL_REDUCE, n, n, w->comm->size)) {
    tc_pipe_desc_t d = {.kind = TC_PIPE_ALL_REDUCE, .device = in->device, .dtype = in->dtype,
                        .mpi_dtype = tc_mpi_dtype(in->dtype), .mpi_op = tc_mpi_op(op, in->dtype),
                        .premul = op->kind == TC_REDOP_PREMUL_SUM ? op->scalar : 1.0,
                        .divisor = op->kind == TCOLL_AVG ? (double)w->comm->size : 1.0,
                        .in = in->data, .out = out->data, .inplace = inplace, .n = n, .run = n, .stride = n};
    return tc_pipe_start(w, &d);
  }
  const void *sbuf = MPI_IN_PLACE;
  void *rbuf;
  w->host_math = op->kind == TC_REDOP_PREMUL_SUM || op->kind == TCOLL_AVG;
  int rc = inplace ? tc_stage_inout(w, out, &rbuf) : tc_stage_in(w, in, &sbuf);
  if (!rc && !inplace) rc = tc_stage_out(w, out, &rbuf);
  if (rc) return rc;
  if (op->kind == TC_REDOP_PREMUL_SUM) { /* each rank's contribution is scaled before the sum */
    tc_host_scale_copy(rbuf, inplace ? rbuf : sbuf, in->dtype, n, op->scalar);
    sbuf = MPI_IN_PLACE;
  }
  if (op->kind == TCOLL_AVG && (rc = tc_work_divide(w, rbuf, n, in->dtype, w->comm->size))) return rc;
  return tc_post_allreduce(w, sbuf, rbuf, n, in->dtype, tc_mpi_op(op, in->dtype));
}

int tcoll_all_reduce(const tcoll_tensor_t *in, tcoll_redop_t op, tcoll_comm_t *comm, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_all_reduce");
  tcoll_comm_t *c = NULL;
  tc_redop_t rop;
  int rc = tc_check_all_reduce(in, op, comm, out, &c, &rop);
  if (rc) return tc_call_failed("all_reduce", c, rc);
  bool inplace = out->data && out->data == in->data;
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "all_reduce", c, TC_SIG(.t = in, .op = &rop)))) return rc;
  rc = tc_work_output(w, out, in->dtype, in->ndim, in->shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post(w, in, out, inplace, &rop);
  return tc_work_end(w, rc);
}
