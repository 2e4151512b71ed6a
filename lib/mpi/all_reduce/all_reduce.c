/* all_reduce -> MPI_Iallreduce (in place on the output; chunked above the per-call limit), or a
 * composed algorithm (ring.c here): ring reduce_scatter, then a ring all-gather or
 * MPI_Iallgatherv. */
#include "../../argcheck.h"
#include "../../work/pipeline.h"
#include "../../work/staging.h"
#include "../../base/dtype.h"
#include "../../base/host_loops.h"
#include "../../tensor.h"
#include "../algo.h"
#include "../post.h"

/* ------------------------------------------------------------------ algorithms and table */

extern const tc_algo_t tc_all_reduce_ring, tc_all_reduce_ring_allgather, tc_all_reduce_shm,
    tc_all_reduce_shm_slices, tc_all_reduce_hier;
static const tc_algo_t *const algos[] = {
    &tc_algo_literal,   &tc_all_reduce_ring,       &tc_all_reduce_ring_allgather,
    &tc_all_reduce_shm, &tc_all_reduce_shm_slices, &tc_all_reduce_hier};

#define TUNE_CI "tcoll-bench --tune, 2-core CI machine (doc/guide.md, Algorithms)"
/* libnbc's all_reduce (Open MPI 4.1): fine for small messages, slow for large ones. Beyond 4
 * ranks only the large-message rows apply (a ring moves the fewest bytes per rank at any rank
 * count): at 8 and 16 ranks with a core each, the ring took 0.57-0.88x MPI's time from 2 MiB
 * and lost below 1 MiB (1.1-1.9x); other counts above 4 are not measured. MPICH 4.0: faster than
 * Open MPI, and still slower than the ring for large messages; its 3- and 4-rank runs here have
 * more ranks than cores, where MPICH's waits spin: only the large-message rows, which won by the
 * same margin there as at 2 ranks. */
/* 4 ranks with a core each: the ring 0.74-0.75x raw MPI at 8 and 16 MiB (MPI's path 0.88-0.93),
 * a tie at 512 KiB */
#define TUNE_4R                                                                                   \
  "tcoll-bench --tune-algorithms (GPU bundle --scale), the GPU machine's 16-core host, Open MPI " \
  "without single copy, 4 ranks (2026-11-28, issue 26's note)"
#define TUNE_SHM "tcoll-bench, 2-core CI machine and the 16-core host of the GPU machine (issue 26)"
/* At 2 ranks, against the ring (times over raw MPI's, tcoll-bench --tune-algorithms --repeat 3 on
 * a quiet CI machine, 2026-11-28): Open MPI with single copy, shm 0.27-0.39x at 16-64 KiB (slices
 * 0.33-0.47, ring 0.88-1.08), a tie at 256 KiB, shm_slices 0.44-0.49x from 256 KiB to 16 MiB (ring
 * 0.55-0.64); without single copy shm_slices 0.65-0.69x from 1 MiB (ring 0.73-0.77). MPICH:
 * shm_slices 0.41-0.46x from 64 KiB (ring 0.61-0.87), 0.77x at 16 KiB (shm 0.89). Beyond 2
 * ranks not measured (the CI machine has 2 cores): the ring's rows stay. */
#define TUNE_SLICES "tcoll-bench --tune-algorithms, 2-core CI machine, 2 ranks (issue 26)"
static const tc_algo_row_t table[] = {
    {TC_MPI_OPEN_MPI, 2, INT_MAX, 0, 16 * TC_KiB, TC_WHERE_HIER, 0, "hier", TC_TUNE_HIER},
    {TC_MPI_MPICH, 2, INT_MAX, 0, 16 * TC_KiB, TC_WHERE_HIER, 0, "hier", TC_TUNE_HIER},
    {TC_MPI_OPEN_MPI, 2, INT_MAX, 0, 16 * TC_KiB, 0, 0, "shm", TUNE_SHM},
    {TC_MPI_MPICH, 2, INT_MAX, 0, 16 * TC_KiB, 0, 0, "shm", TUNE_SHM},
    {TC_MPI_OPEN_MPI, 2, 2, 16 * TC_KiB, 256 * TC_KiB, TC_WHERE_SHM, 0, "shm", TUNE_SLICES},
    {TC_MPI_OPEN_MPI, 2, 2, 256 * TC_KiB, TC_ANY_SIZE, TC_WHERE_SHM, 0, "shm_slices", TUNE_SLICES},
    {TC_MPI_MPICH, 2, 2, 16 * TC_KiB, TC_ANY_SIZE, TC_WHERE_SHM, 0, "shm_slices", TUNE_SLICES},
    {TC_MPI_OPEN_MPI, 2, 2, 32 * TC_KiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
    {TC_MPI_OPEN_MPI, 3, 3, 512 * TC_KiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
    {TC_MPI_OPEN_MPI, 8, 16, 2 * TC_MiB, TC_ANY_SIZE, 0, 0, "ring", TC_TUNE_16CORES},
    {TC_MPI_OPEN_MPI, 4, 4, 8 * TC_MiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_4R},
    {TC_MPI_OPEN_MPI, 4, INT_MAX, 16 * TC_MiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
    {TC_MPI_MPICH, 2, 2, 128 * TC_KiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
    {TC_MPI_MPICH, 3, INT_MAX, 8 * TC_MiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
};

const tc_algo_list_t tc_all_reduce_algos = TC_ALGO_LIST("all_reduce", algos, table);

/* ------------------------------------------------------------------ posting */

/* The composed algorithms run on host memory: device tensors are staged first. */
static int post_composed(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out,
                         bool inplace, const tc_redop_t *op, const tc_algo_t *a) {
  const void *src = in->data;
  void *buf = out->data;
  w->host_math = true; /* local reductions on the host: staging hands host memory */
  int rc = TCOLL_SUCCESS;
  if (in->device != TCOLL_HOST) {
    rc = inplace ? tc_stage_inout(w, out, &buf) : tc_stage_in(w, in, &src);
    if (!rc && !inplace) rc = tc_stage_out(w, out, &buf);
    if (rc) return rc;
  }
  tc_algo_call_t c = {.src = inplace ? buf : src,
                      .dst = buf,
                      .n = tcoll_tensor_numel(in),
                      .dtype = in->dtype,
                      .op = tc_mpi_op(op, in->dtype),
                      .premul = tc_redop_premul(op),
                      .divisor = tc_redop_divisor(op, w->comm->size),
                      .staged = in->device != TCOLL_HOST};
  return a->build(w, &c);
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, bool inplace,
                const tc_redop_t *op) {
  int64_t n = tc_numel(in);
  tc_algo_query_t q = {.comm = w->comm,
                       .bytes = (size_t)n * tc_dtype_size(in->dtype),
                       .count = n,
                       .dtype = in->dtype,
                       .redop = op->kind,
                       .device = in->device != TCOLL_HOST,
                       .layout = TC_LAYOUT_CONTIG};
  const tc_algo_t *a = tc_algo_choose(TC_OP_ALL_REDUCE, &q);
  tc_work_set_algo(w, a->name);
  if (a->build) return post_composed(w, in, out, inplace, op, a);
  bool plain = op->kind != TC_REDOP_PREMUL_SUM && op->kind != TCOLL_AVG;
  if (in->device == TCOLL_HOST &&
      plain) /* the common case: nothing staged, nothing computed here */
    return tc_post_allreduce(w, inplace ? MPI_IN_PLACE : in->data, out->data, n, in->dtype,
                             tc_mpi_op(op, in->dtype));
  if (tc_pipe_wanted(in, TC_PIPE_ALL_REDUCE, n, n, w->comm->size)) {
    tc_pipe_desc_t d = {.kind = TC_PIPE_ALL_REDUCE,
                        .device = in->device,
                        .dtype = in->dtype,
                        .mpi_dtype = tc_mpi_dtype(in->dtype),
                        .mpi_op = tc_mpi_op(op, in->dtype),
                        .premul = tc_redop_premul(op),
                        .divisor = tc_redop_divisor(op, w->comm->size),
                        .in = in->data,
                        .out = out->data,
                        .inplace = inplace,
                        .n = n,
                        .run = n,
                        .stride = n};
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
  if (op->kind == TCOLL_AVG && (rc = tc_work_divide(w, rbuf, n, in->dtype, w->comm->size)))
    return rc;
  return tc_post_allreduce(w, sbuf, rbuf, n, in->dtype, tc_mpi_op(op, in->dtype));
}

int tcoll_all_reduce(const tcoll_tensor_t *in, tcoll_redop_t op, tcoll_comm_t *comm,
                     tcoll_tensor_t *out) {
  TC_ENTER("tcoll_all_reduce");
  tcoll_comm_t *c = NULL;
  tc_redop_t rop;
  int rc = tc_check_all_reduce(in, op, comm, out, &c, &rop);
  if (rc) return tc_call_failed("all_reduce", c, rc);
  bool inplace = out->data && out->data == in->data;
  tc_work_t *w;
  const tc_sig_t *sig = TC_SIG(.t = in, .op = &rop);
  if ((rc = tc_work_begin_alone(&w, "all_reduce", c, sig, out, in)) == TC_NOT_ALONE) {
    if ((rc = tc_work_begin(&w, "all_reduce", c, sig))) return rc;
    rc = tc_work_output(w, out, in->dtype, in->ndim, in->shape, in->device);
    if (!rc) rc = tc_work_register_inputs(w, in, 1);
  }
  if (!rc) rc = post(w, in, out, inplace, &rop);
  return tc_work_end(w, rc);
}
