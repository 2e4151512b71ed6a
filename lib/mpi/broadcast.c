/* broadcast -> MPI_Ibcast on the output (src first copies its input there). */
#include "../argcheck.h"
#include "../device/device.h"
#include "../work/pipeline.h"
#include "../work/staging.h"
#include "algo.h"
#include "post.h"

/* One way to run it: the literal mapping (TCOLL_ALGO broadcast:mpi). */
static const tc_algo_t *const algos[] = {&tc_algo_literal};
const tc_algo_list_t tc_broadcast_algos = {"broadcast", algos, 1, NULL, 0};

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int src) {
  int64_t n = tcoll_tensor_numel(in);
  if (tc_pipe_wanted(out, TC_PIPE_BROADCAST, n, n, w->comm->size)) {
    tc_pipe_desc_t d = {.kind = TC_PIPE_BROADCAST,
                        .device = out->device,
                        .dtype = in->dtype,
                        .mpi_dtype = tc_mpi_dtype(in->dtype),
                        .premul = 1.0,
                        .divisor = 1.0,
                        .root = src,
                        .in = in->data,
                        .out = out->data,
                        .inplace = out->data == in->data,
                        .n = n,
                        .run = n,
                        .stride = n};
    return tc_pipe_start(w, &d);
  }
  void *buf;
  bool is_src = w->comm->rank == src;
  int rc =
      is_src && out->data == in->data ? tc_stage_inout(w, out, &buf) : tc_stage_out(w, out, &buf);
  if (!rc && is_src && out->data != in->data)
    rc = tc_stage_read(buf, in->data, in->device, tcoll_tensor_nbytes(in));
  if (rc) return rc;
  return tc_post_bcast(w, buf, tcoll_tensor_numel(in), in->dtype, src);
}

int tcoll_broadcast(const tcoll_tensor_t *in, int src, tcoll_comm_t *comm, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_broadcast");
  tcoll_comm_t *c = NULL;
  int rc = tc_check_broadcast(in, src, comm, out, &c);
  if (rc) return tc_call_failed("broadcast", c, rc);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "broadcast", c, TC_SIG(.t = in, .root = src)))) return rc;
  rc = tc_work_output(w, out, in->dtype, in->ndim, in->shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post(w, in, out, src);
  return tc_work_end(w, rc);
}
