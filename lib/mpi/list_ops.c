/* List forms with one tensor per rank: all_gather_list -> MPI_Iallgather into scratch,
 * unpacked at completion; reduce_scatter_list -> MPI_Ireduce_scatter_block from the list
 * packed into scratch. (The list all_to_all is all_to_all/tensors.c.) */
#include "../argcheck.h"
#include "../device/device.h"
#include "../work/staging.h"
#include "../base/dtype.h"
#include "../base/host_loops.h"
#include "post.h"

static int post_all_gather_list(tc_work_t *w, const tcoll_tensor_t *in, tcoll_tensor_t *outs) {
  int size = w->comm->size;
  size_t nb = tcoll_tensor_nbytes(in);
  const void *sbuf;
  char *all = NULL;
  int rc = tc_stage_in(w, in, &sbuf);
  if (!rc) rc = tc_stage_scratch(w, (size_t)size * nb, in->device, (void **)&all);
  for (int r = 0; r < size && !rc; r++)
    rc = tc_work_piece(w, outs[r].data, outs[r].device, all + (size_t)r * nb, nb);
  if (!rc) rc = tc_post_allgather(w, sbuf, all, tcoll_tensor_numel(in), in->dtype);
  return rc;
}

int tcoll_all_gather_list(const tcoll_tensor_t *in, tcoll_comm_t *comm, tcoll_tensor_t *outs) {
  TC_ENTER("tcoll_all_gather_list");
  tcoll_comm_t *c = NULL;
  int rc = tc_check_all_gather_list(in, comm, outs, &c);
  if (rc) return tc_call_failed("all_gather_list", c, rc);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "all_gather_list", c, TC_SIG(.t = in)))) return rc;
  for (int r = 0; r < c->size && !rc; r++)
    rc = tc_work_output(w, &outs[r], in->dtype, in->ndim, in->shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post_all_gather_list(w, in, outs);
  return tc_work_end(w, rc);
}

static int post_reduce_scatter_list(tc_work_t *w, const tcoll_tensor_t *ins,
                                    const tcoll_tensor_t *out, const tc_redop_t *op) {
  int size = w->comm->size;
  size_t nb = tcoll_tensor_nbytes(out);
  int64_t n = tcoll_tensor_numel(out);
  void *rbuf;
  w->host_math = op->kind == TCOLL_AVG; /* divides the output on the host */
  char *all = NULL;
  int rc = tc_stage_out(w, out, &rbuf);
  if (!rc) rc = tc_stage_scratch(w, (size_t)size * nb, out->device, (void **)&all);
  for (int r = 0; r < size && !rc; r++)
    rc = tc_stage_read(all + (size_t)r * nb, ins[r].data, ins[r].device, nb);
  if (rc) return rc;
  if (op->kind == TC_REDOP_PREMUL_SUM)
    tc_host_scale_copy(all, all, out->dtype, n * size, op->scalar);
  if (op->kind == TCOLL_AVG && (rc = tc_work_divide(w, rbuf, n, out->dtype, size))) return rc;
  return tc_post_reduce_scatter_block(w, all, rbuf, n, out->dtype, tc_mpi_op(op, out->dtype));
}

int tcoll_reduce_scatter_list(const tcoll_tensor_t *ins, tcoll_redop_t op, tcoll_comm_t *comm,
                              tcoll_tensor_t *out) {
  TC_ENTER("tcoll_reduce_scatter_list");
  tcoll_comm_t *c = NULL;
  tc_redop_t rop;
  int rc = tc_check_reduce_scatter_list(ins, op, comm, out, &c, &rop);
  if (rc) return tc_call_failed("reduce_scatter_list", c, rc);
  tc_work_t *w;
  if ((rc =
           tc_work_begin(&w, "reduce_scatter_list", c, TC_SIG(.t = ins, .n = c->size, .op = &rop))))
    return rc;
  rc = tc_work_output(w, out, ins[0].dtype, ins[0].ndim, ins[0].shape, ins[0].device);
  if (!rc) rc = tc_work_register_inputs(w, ins, c->size);
  if (!rc) rc = post_reduce_scatter_list(w, ins, out, &rop);
  return tc_work_end(w, rc);
}
