/* all_reduce -> MPI_Iallreduce (in place on the output; chunked above the per-call limit), or a
 * composed algorithm: ring reduce_scatter, then a ring all-gather or MPI_Iallgatherv. */
#include "../argcheck.h"
#include "../sched/algorithms.h"
#include "../sched/select.h"
#include "../work/pipeline.h"
#include "../work/staging.h"
#include "../base/dtype.h"
#include "../tensor.h"
#include "post.h"

int tc_post_allreduce_composed(tc_work_t *w, const void *src, void *buf, int64_t n, tcoll_dtype_t d, MPI_Op op,
                               double premul, double divisor, tc_algo_t algo) {
  int p = w->comm->size, r = w->comm->rank, rc;
  tc_sched_t *s = &w->sched;
  if (premul != 1.0) { /* each rank's contribution is scaled first */
    if ((rc = tc_sched_scale(s, buf, src, n, d, premul, 1.0, true))) return rc;
    src = buf;
  }
  bool gatherv = algo == TC_ALGO_RING_ALLGATHER;
  size_t ring_bytes = (tc_ring_reduce_scatter_scratch(n, p, d) + 7) & ~(size_t)7; /* the arrays after it */
  char *scratch = tc_work_scratch(w, ring_bytes + (gatherv ? tc_allgatherv_scratch(p) : 0));
  if (!scratch) return TCOLL_ERR_NO_MEMORY;
  char *mine = (char *)buf + (size_t)tc_block_offset(n, p, r) * tc_dtype_size(d);
  rc = tc_build_ring_reduce_scatter(s, src, mine, n, d, op, scratch, 0, NULL);
  if (!rc && divisor != 1.0) /* each block is divided once, where it was reduced */
    rc = tc_sched_scale(s, mine, mine, tc_block_count(n, p, r), d, 1.0, divisor, true);
  if (rc) return rc;
  if (gatherv) return tc_build_allgatherv(s, buf, n, d, scratch + ring_bytes);
  return tc_build_ring_all_gather(s, buf, n, d, p);
}

/* Inline for the single call's post (out of line it costs 10 instructions per call); other
 * files call tc_allreduce_algo. */
static inline tc_algo_t allreduce_algo(int ranks, int64_t n, tcoll_dtype_t d, int redop, bool device) {
  tc_algo_query_t q = {.op = TC_OP_ALL_REDUCE, .bytes = (size_t)n * tc_dtype_size(d), .ranks = ranks,
                       .dtype = d, .redop = redop, .device = device};
  tc_algo_t algo = q.bytes == 0 ? TC_ALGO_MPI : tc_algo_choose(&q);
  /* Without large counts MPI_Iallgatherv takes int counts and displacements: beyond them the
   * ring gathers too. */
  if (algo == TC_ALGO_RING_ALLGATHER && !tc_allgatherv_fits(n, ranks)) algo = TC_ALGO_RING;
  return algo == TC_ALGO_AUTO ? TC_ALGO_MPI : algo;
}

tc_algo_t tc_allreduce_algo(int ranks, int64_t n, tcoll_dtype_t d, int redop, bool device) {
  return allreduce_algo(ranks, n, d, redop, device);
}

/* The composed algorithms run on host memory: device tensors are staged first. */
static int post_composed(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, bool inplace,
                         const tc_redop_t *op, tc_algo_t algo) {
  const void *src = NULL;
  void *buf;
  w->host_math = true; /* local reductions on the host: staging hands host memory */
  int rc = inplace ? tc_stage_inout(w, out, &buf) : tc_stage_in(w, in, &src);
  if (!rc && !inplace) rc = tc_stage_out(w, out, &buf);
  if (rc) return rc;
  return tc_post_allreduce_composed(w, inplace ? buf : src, buf, tcoll_tensor_numel(in), in->dtype,
                                    tc_mpi_op(op, in->dtype), op->kind == TC_REDOP_PREMUL_SUM ? op->scalar : 1.0,
                                    op->kind == TCOLL_AVG ? (double)w->comm->size : 1.0, algo);
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, bool inplace,
                const tc_redop_t *op) {
  int64_t n = tc_numel(in);
  tc_algo_t algo = allreduce_algo(w->comm->size, n, in->dtype, op->kind, in->device != TCOLL_HOST);
  tc_work_set_algo(w, algo);
  if (algo != TC_ALGO_MPI) return post_composed(w, in, out, inplace, op, algo);
  bool plain = op->kind != TC_REDOP_PREMUL_SUM && op->kind != TCOLL_AVG;
  if (in->device == TCOLL_HOST && plain) /* the common case: nothing staged, nothing computed here */
    return tc_post_allreduce(w, inplace ? MPI_IN_PLACE : in->data, out->data, n, in->dtype, tc_mpi_op(op, in->dtype));
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
  w->host_math = !plain;
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
