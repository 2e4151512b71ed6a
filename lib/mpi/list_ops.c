/* List forms with one tensor per rank: all_gather_list -> MPI_Iallgather into scratch,
 * unpacked at completion; reduce_scatter_list -> MPI_Ireduce_scatter_block from the list
 * packed into scratch; all_to_all -> MPI_Ialltoallv between packed scratch buffers, or the
 * scattered exchange (as all_to_all_single's): one MPI_Isend and one MPI_Irecv per peer
 * straight between the host tensors (device tensors still packed), the own block copied. */
#include "../argcheck.h"
#include "../device/device.h"
#include "../work/detail.h"
#include "../work/staging.h"
#include "../base/dtype.h"
#include "post.h"

static int post_all_gather_list(tc_work_t *w, const tcoll_tensor_t *in, tcoll_tensor_t *outs) {
  int size = w->comm->size;
  size_t nb = tcoll_tensor_nbytes(in);
  const void *sbuf;
  char *all = NULL;
  int rc = tc_stage_in(w, in, &sbuf);
  if (!rc) rc = tc_stage_scratch(w, (size_t)size * nb, in->device, (void **)&all);
  for (int r = 0; r < size && !rc; r++) rc = tc_work_piece(w, outs[r].data, outs[r].device, all + (size_t)r * nb, nb);
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
  for (int r = 0; r < c->size && !rc; r++) rc = tc_work_output(w, &outs[r], in->dtype, in->ndim, in->shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post_all_gather_list(w, in, outs);
  return tc_work_end(w, rc);
}

static int post_reduce_scatter_list(tc_work_t *w, const tcoll_tensor_t *ins, const tcoll_tensor_t *out,
                                    const tc_redop_t *op) {
  int size = w->comm->size;
  size_t nb = tcoll_tensor_nbytes(out);
  int64_t n = tcoll_tensor_numel(out);
  void *rbuf;
  w->host_math = op->kind == TCOLL_AVG; /* divides the output on the host */
  char *all = NULL;
  int rc = tc_stage_out(w, out, &rbuf);
  if (!rc) rc = tc_stage_scratch(w, (size_t)size * nb, out->device, (void **)&all);
  for (int r = 0; r < size && !rc; r++) rc = tc_stage_read(all + (size_t)r * nb, ins[r].data, ins[r].device, nb);
  if (rc) return rc;
  if (op->kind == TC_REDOP_PREMUL_SUM) tc_host_scale_copy(all, all, out->dtype, n * size, op->scalar);
  if (op->kind == TCOLL_AVG && (rc = tc_work_divide(w, rbuf, n, out->dtype, size))) return rc;
  return tc_post_reduce_scatter_block(w, all, rbuf, n, out->dtype, tc_mpi_op(op, out->dtype));
}

int tcoll_reduce_scatter_list(const tcoll_tensor_t *ins, tcoll_redop_t op, tcoll_comm_t *comm, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_reduce_scatter_list");
  tcoll_comm_t *c = NULL;
  tc_redop_t rop;
  int rc = tc_check_reduce_scatter_list(ins, op, comm, out, &c, &rop);
  if (rc) return tc_call_failed("reduce_scatter_list", c, rc);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "reduce_scatter_list", c, TC_SIG(.t = ins, .n = c->size, .op = &rop)))) return rc;
  rc = tc_work_output(w, out, ins[0].dtype, ins[0].ndim, ins[0].shape, ins[0].device);
  if (!rc) rc = tc_work_register_inputs(w, ins, c->size);
  if (!rc) rc = post_reduce_scatter_list(w, ins, out, &rop);
  return tc_work_end(w, rc);
}

/* Where peer p's block lies for MPI: in its packed buffer at displacement displ (device
 * tensors, staged), or in its own tensor (host tensors, pack NULL). */
static char *block_at(char *pack, const int64_t *displs, int p, size_t es, void *own) {
  return pack ? pack + (size_t)displs[p] * es : own;
}

/* The scattered exchange of the list form: each block travels from where it lies to where it
 * lands, one MPI_Isend and one MPI_Irecv per peer, all posted at once; the own block is copied.
 * v: sent counts and displacements, received counts and displacements (elements, size each).
 * Empty blocks move nothing, as in all_to_all_single: their peer's count is zero too. */
static int post_all_to_all_scattered(tc_work_t *w, const tcoll_tensor_t *ins, tcoll_tensor_t *outs, char *spack,
                                     char *rpack, const int64_t *v) {
  int size = w->comm->size, me = w->comm->rank, rc = TCOLL_SUCCESS;
  tcoll_dtype_t d = ins[0].dtype;
  size_t es = tc_dtype_size(d);
  const int64_t *sn = v, *sd = v + size, *rn = v + 2 * size, *rd = v + 3 * size;
  /* The own block never reaches MPI, which would refuse a receive shorter than its message: a
   * copy must not write past outs[me] instead. */
  if (sn[me] > rn[me])
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "ins[%d] has %lld elements but outs[%d] has %lld: rank %d's own block "
                    "does not fit", me, (long long)sn[me], me, (long long)rn[me], me);
  tc_sched_t *s = &w->sched;
  for (int k = 1; k < size && !rc; k++) {
    int from = (me - k + size) % size, to = (me + k) % size;
    if (rn[from]) rc = tc_sched_recv(s, block_at(rpack, rd, from, es, outs[from].data), rn[from], d, from, 0, false);
    if (!rc && sn[to])
      rc = tc_sched_send(s, block_at(spack, sd, to, es, ins[to].data), sn[to], d, to, 0, false);
  }
  if (!rc && sn[me])
    rc = tc_sched_copy(s, block_at(rpack, rd, me, es, outs[me].data), block_at(spack, sd, me, es, ins[me].data),
                       (size_t)sn[me] * es, false);
  return rc;
}

/* Device tensors are packed into pinned scratch (inputs read now, results copied back as
 * pieces); the literal call packs host tensors too, the scattered exchange does not. */
static int post_all_to_all(tc_work_t *w, const tcoll_tensor_t *ins, tcoll_tensor_t *outs) {
  int size = w->comm->size;
  tcoll_dtype_t d = ins[0].dtype;
  size_t es = tc_dtype_size(d);
  tc_algo_t algo = tc_all_to_all_algo(w, TC_OP_ALL_TO_ALL_LIST, d, ins[0].device != TCOLL_HOST);
  tc_work_set_algo(w, algo);
  int64_t *v = tc_work_scratch(w, 4 * (size_t)size * sizeof *v);
  if (!v) return TCOLL_ERR_NO_MEMORY;
  int64_t stotal = 0, rtotal = 0;
  for (int p = 0; p < size; p++) {
    v[p] = tcoll_tensor_numel(&ins[p]);
    v[size + p] = stotal;
    stotal += v[p];
    v[2 * size + p] = tcoll_tensor_numel(&outs[p]);
    v[3 * size + p] = rtotal;
    rtotal += v[2 * size + p];
  }
  /* With DETAIL a block that its peer does not expect is refused on every rank (else the
   * scattered exchange leaves it unmatched, and the literal call fails or hangs) */
  int rc = TCOLL_SUCCESS;
  if (tc_cfg.debug >= TCOLL_LOG_DETAIL && (rc = tc_detail_check_splits(w, v, v + 2 * size, true))) return rc;
  bool pack = algo == TC_ALGO_MPI || ins[0].device != TCOLL_HOST;
  char *sbuf = NULL, *rbuf = NULL;
  if (pack) rc = tc_stage_scratch(w, (size_t)stotal * es, ins[0].device, (void **)&sbuf);
  if (pack && !rc) rc = tc_stage_scratch(w, (size_t)rtotal * es, ins[0].device, (void **)&rbuf);
  for (int p = 0; pack && p < size && !rc; p++)
    rc = tc_stage_read(sbuf + (size_t)v[size + p] * es, ins[p].data, ins[p].device, (size_t)v[p] * es);
  for (int p = 0; pack && p < size && !rc; p++)
    rc = tc_work_piece(w, outs[p].data, outs[p].device, rbuf + (size_t)v[3 * size + p] * es,
                       (size_t)v[2 * size + p] * es);
  if (rc) return rc;
  if (algo == TC_ALGO_SCATTERED) return post_all_to_all_scattered(w, ins, outs, sbuf, rbuf, v);
  return tc_post_alltoallv(w, sbuf, v, v + size, rbuf, v + 2 * size, v + 3 * size, d, 1);
}

int tcoll_all_to_all(const tcoll_tensor_t *ins, tcoll_comm_t *comm, tcoll_tensor_t *outs) {
  TC_ENTER("tcoll_all_to_all");
  tcoll_comm_t *c = NULL;
  int rc = tc_check_all_to_all(ins, comm, outs, &c);
  if (rc) return tc_call_failed("all_to_all", c, rc);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "all_to_all", c, TC_SIG(.t = ins, .agree = TC_AGREE_DTYPE)))) return rc;
  for (int p = 0; p < c->size && !rc; p++)
    rc = tc_work_output(w, &outs[p], ins[0].dtype, outs[p].ndim, outs[p].shape, ins[0].device);
  if (!rc) rc = tc_work_register_inputs(w, ins, c->size);
  if (!rc) rc = post_all_to_all(w, ins, outs);
  return tc_work_end(w, rc);
}
