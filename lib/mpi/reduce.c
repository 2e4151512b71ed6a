/* reduce -> MPI_Ireduce (chunked above the per-call limit), or the ring: a ring reduce_scatter,
 * then every block sent to dst. out is written on dst only. */
#include "../argcheck.h"
#include "../sched/select.h"
#include "../work/staging.h"
#include "../base/dtype.h"
#include "post.h"

tc_algo_t tc_reduce_algo(int ranks, int64_t n, tcoll_dtype_t d, int redop, bool device) {
  tc_algo_query_t q = {.op = TC_OP_REDUCE, .bytes = (size_t)n * tc_dtype_size(d), .ranks = ranks, .dtype = d,
                       .redop = redop, .device = device};
  tc_algo_t algo = q.bytes == 0 ? TC_ALGO_MPI : tc_algo_choose(&q);
  return algo == TC_ALGO_AUTO ? TC_ALGO_MPI : algo;
}

int tc_post_reduce_composed(tc_work_t *w, const void *src, void *buf, int64_t n, tcoll_dtype_t d, MPI_Op op,
                            double divisor, int dst) {
  int p = w->comm->size, r = w->comm->rank;
  bool is_dst = r == dst;
  size_t es = tc_dtype_size(d), ring_bytes = (tc_ring_reduce_scatter_scratch(n, p, d) + 7) & ~(size_t)7;
  size_t own = is_dst ? 0 : (size_t)tc_block_count(n, p, 0) * es;
  char *scratch = tc_work_scratch(w, ring_bytes + own);
  if (!scratch) return TCOLL_ERR_NO_MEMORY;
  char *mine = is_dst ? (char *)buf + (size_t)tc_block_offset(n, p, r) * es : scratch + ring_bytes;
  tc_sched_t *s = &w->sched;
  int rc = tc_build_ring_reduce_scatter(s, src, mine, n, d, op, scratch, 0, NULL);
  if (!rc && divisor != 1.0) /* each block is divided once, where it was reduced */
    rc = tc_sched_scale(s, mine, mine, tc_block_count(n, p, r), d, 1.0, divisor, true);
  return rc ? rc : tc_build_blocks_to_root(s, buf, mine, n, d, dst, p);
}

/* The ring on host memory: device tensors are staged first, premul_sum's scaled contribution
 * goes in scratch (in and out stay as they are). */
static int post_ring(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int dst, const tc_redop_t *op) {
  bool is_dst = w->comm->rank == dst, inplace = is_dst && out->data == in->data;
  int64_t n = tcoll_tensor_numel(in);
  const void *src = NULL;
  void *buf = NULL;
  w->host_math = true; /* local reductions on the host: staging hands host memory */
  int rc = inplace ? tc_stage_inout(w, out, &buf) : tc_stage_in(w, in, &src);
  if (!rc && is_dst && !inplace) rc = tc_stage_out(w, out, &buf);
  if (rc) return rc;
  if (inplace) src = buf;
  if (op->kind == TC_REDOP_PREMUL_SUM) {
    void *scaled = tc_work_scratch(w, tcoll_tensor_nbytes(in));
    if (!scaled) return TCOLL_ERR_NO_MEMORY;
    if ((rc = tc_sched_scale(&w->sched, scaled, src, n, in->dtype, op->scalar, 1.0, true))) return rc;
    src = scaled;
  }
  return tc_post_reduce_composed(w, src, buf, n, in->dtype, tc_mpi_op(op, in->dtype),
                                 op->kind == TCOLL_AVG ? (double)w->comm->size : 1.0, dst);
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int dst, const tc_redop_t *op) {
  int64_t n = tcoll_tensor_numel(in);
  tc_algo_t algo = tc_reduce_algo(w->comm->size, n, in->dtype, op->kind, in->device != TCOLL_HOST);
  tc_work_set_algo(w, algo);
  if (algo == TC_ALGO_RING) return post_ring(w, in, out, dst, op);
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
