/* gather -> MPI_Igather into scratch on dst, unpacked into the list at completion;
 * scatter -> MPI_Iscatter from the list packed into scratch on src. */
#include "../argcheck.h"
#include "../device/device.h"
#include "../work/staging.h"
#include "post.h"

static int post_gather(tc_work_t *w, const tcoll_tensor_t *in, tcoll_tensor_t *outs, int dst) {
  int size = w->comm->size;
  bool is_dst = w->comm->rank == dst;
  size_t nb = tcoll_tensor_nbytes(in);
  const void *sbuf;
  int rc = tc_stage_in(w, in, &sbuf);
  if (rc) return rc;
  char *all = NULL;
  if (is_dst) {
    if ((rc = tc_stage_scratch(w, (size_t)size * nb, in->device, (void **)&all))) return rc;
    for (int r = 0; r < size && !rc; r++)
      rc = tc_work_piece(w, outs[r].data, outs[r].device, all + (size_t)r * nb, nb);
    if (rc) return rc;
  }
  int64_t n = tcoll_tensor_numel(in);
  if (n == 0) return TCOLL_SUCCESS;
  tc_mpi_span_t s;
  if ((rc = tc_work_reserve(w, 1)) || (rc = tc_mpi_span(in->dtype, n, &s))) return rc;
  int mrc = tc_mpi_igather(sbuf, s.count, s.dt.type, all, s.count, s.dt.type, dst, w->comm->mpi,
                           tc_work_req(w));
  rc = tc_post_ok(w, mrc, TC_MPI_NAME("MPI_Igather", s.count));
  tc_mpi_span_put(&s);
  return rc;
}

int tcoll_gather(const tcoll_tensor_t *in, int dst, tcoll_comm_t *comm, tcoll_tensor_t *outs) {
  TC_ENTER("tcoll_gather");
  tcoll_comm_t *c = NULL;
  int rc = tc_check_gather(in, dst, comm, outs, &c);
  if (rc) return tc_call_failed("gather", c, rc);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "gather", c, TC_SIG(.t = in, .root = dst)))) return rc;
  if (c->rank == dst) {
    for (int r = 0; r < c->size && !rc; r++)
      rc = tc_work_output(w, &outs[r], in->dtype, in->ndim, in->shape, in->device);
  } else {
    /* No output here: the work is keyed under the input, so a pending input must be waited for
     * first (registering under it would be refused as busy while dst goes ahead). */
    rc = tc_work_inputs(w, in, 1);
    if (!rc) rc = tc_work_key(w, in->data, tcoll_tensor_nbytes(in));
  }
  if (!rc)
    rc = tc_work_register_inputs(w, in, c->rank == dst ? 1 : 0); /* off dst: waited for above */
  if (!rc) rc = post_gather(w, in, outs, dst);
  return tc_work_end(w, rc);
}

static int post_scatter(tc_work_t *w, const tcoll_tensor_t *ins, const tcoll_tensor_t *out,
                        int src) {
  int size = w->comm->size;
  size_t nb = tcoll_tensor_nbytes(out);
  void *rbuf;
  int rc = tc_stage_out(w, out, &rbuf);
  if (rc) return rc;
  char *all = NULL;
  if (w->comm->rank == src) {
    if ((rc = tc_stage_scratch(w, (size_t)size * nb, out->device, (void **)&all))) return rc;
    for (int r = 0; r < size && !rc; r++)
      rc = tc_stage_read(all + (size_t)r * nb, ins[r].data, ins[r].device, nb);
    if (rc) return rc;
  }
  int64_t n = tcoll_tensor_numel(out);
  if (n == 0) return TCOLL_SUCCESS;
  tc_mpi_span_t s;
  if ((rc = tc_work_reserve(w, 1)) || (rc = tc_mpi_span(out->dtype, n, &s))) return rc;
  int mrc = tc_mpi_iscatter(all, s.count, s.dt.type, rbuf, s.count, s.dt.type, src, w->comm->mpi,
                            tc_work_req(w));
  rc = tc_post_ok(w, mrc, TC_MPI_NAME("MPI_Iscatter", s.count));
  tc_mpi_span_put(&s);
  return rc;
}

int tcoll_scatter(const tcoll_tensor_t *ins, int src, tcoll_comm_t *comm, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_scatter");
  tcoll_comm_t *c = NULL;
  int rc = tc_check_scatter(ins, src, comm, out, &c);
  if (rc) return tc_call_failed("scatter", c, rc);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "scatter", c, TC_SIG(.t = out, .root = src)))) return rc;
  rc = tc_work_output(w, out, out->dtype, out->ndim, out->shape, out->device);
  if (!rc) rc = tc_work_register_inputs(w, ins, c->rank == src ? c->size : 0);
  if (!rc) rc = post_scatter(w, ins, out, src);
  return tc_work_end(w, rc);
}
