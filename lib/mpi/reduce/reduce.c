/* reduce -> MPI_Ireduce (chunked above the per-call limit), or the ring (ring.c here): a ring
 * reduce_scatter, then every block sent to dst; or small ones through node-shared memory
 * (shm.c). out is written on dst only. */
#include "../../argcheck.h"
#include "../../work/staging.h"
#include "../../base/dtype.h"
#include "../../base/host_loops.h"
#include "../algo.h"
#include "../post.h"

/* ------------------------------------------------------------------ algorithms and table */

extern const tc_algo_t tc_reduce_ring, tc_reduce_shm, tc_reduce_shm_slices, tc_reduce_hier;
static const tc_algo_t *const algos[] = {&tc_algo_literal, &tc_reduce_ring, &tc_reduce_shm,
                                         &tc_reduce_shm_slices, &tc_reduce_hier};

#define TUNE_CI "tcoll-bench --tune, 2-core CI machine (doc/guide.md, Algorithms)"
/* shm below 16 KiB (0.2-0.3x MPI_Ireduce from 64 B at 4-16 ranks on 16 cores), but not for the
 * smallest at 3 ranks and more: there libnbc's MPI_Ireduce of 8 bytes takes 1.9-4 us, shm's
 * 2.7-8.7 (16-core host, short runs; issue 26's note). libnbc's MPI_Ireduce (Open MPI 4.1):
 * 2.5-4x its own blocking MPI_Reduce at 2 ranks. MPICH 4.0:
 * only the large-message rows beyond 2 ranks (its oversubscribed runs here spin). */
#define TUNE_SHM "tcoll-bench, 2-core CI machine and the 16-core host of the GPU machine (issue 26)"
/* At 2 ranks where the communicator has a segment (times over raw MPI_Ireduce's, tcoll-bench
 * --tune-algorithms --repeat 3, quiet CI machine, 2026-11-28): shm 0.13-0.34x on Open MPI and
 * 0.39-0.62x on MPICH up to 256 KiB (the ring 0.27-2.3x), shm_slices 0.18-0.20x (Open MPI) and
 * 0.05-0.40x (MPICH) from 1 MiB (ring 0.06-0.85x); shm runs up to a slot (half the segment). */
#define TUNE_SLICES "tcoll-bench --tune-algorithms, 2-core CI machine, 2 ranks (issue 26)"
static const tc_algo_row_t table[] = {
    {TC_MPI_OPEN_MPI, 2, INT_MAX, 0, 16 * TC_KiB, TC_WHERE_HIER, 0, "hier", TC_TUNE_HIER},
    {TC_MPI_MPICH, 2, INT_MAX, 0, 16 * TC_KiB, TC_WHERE_HIER, 0, "hier", TC_TUNE_HIER},
    {TC_MPI_OPEN_MPI, 2, 2, 0, 16 * TC_KiB, 0, 0, "shm", TUNE_SHM},
    {TC_MPI_OPEN_MPI, 2, 2, 16 * TC_KiB, 512 * TC_KiB, TC_WHERE_SHM, 0, "shm", TUNE_SLICES},
    {TC_MPI_OPEN_MPI, 2, 2, 512 * TC_KiB, TC_ANY_SIZE, TC_WHERE_SHM, 0, "shm_slices", TUNE_SLICES},
    {TC_MPI_MPICH, 2, 2, 16 * TC_KiB, 512 * TC_KiB, TC_WHERE_SHM, 0, "shm", TUNE_SLICES},
    {TC_MPI_MPICH, 2, 2, 512 * TC_KiB, TC_ANY_SIZE, TC_WHERE_SHM, 0, "shm_slices", TUNE_SLICES},
    {TC_MPI_OPEN_MPI, 3, INT_MAX, 16, 16 * TC_KiB, 0, 0, "shm", TUNE_SHM},
    {TC_MPI_MPICH, 2, 2, 0, 16 * TC_KiB, 0, 0, "shm", TUNE_SHM},
    {TC_MPI_MPICH, 3, INT_MAX, 16, 16 * TC_KiB, 0, 0, "shm", TUNE_SHM},
    {TC_MPI_OPEN_MPI, 2, 2, 128 * TC_KiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
    {TC_MPI_OPEN_MPI, 3, 4, 512 * TC_KiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
    {TC_MPI_OPEN_MPI, 5, INT_MAX, 32 * TC_MiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
    {TC_MPI_MPICH, 2, 2, 32 * TC_KiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
    {TC_MPI_MPICH, 3, INT_MAX, 8 * TC_MiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
};

const tc_algo_list_t tc_reduce_algos = TC_ALGO_LIST("reduce", algos, table);

/* ------------------------------------------------------------------ posting */

/* The composed algorithms on host memory: device tensors are staged first; premul_sum's scaled
 * contribution goes in scratch (in and out stay as they are). */
static int post_composed(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int dst,
                         const tc_redop_t *op, const tc_algo_t *a) {
  bool is_dst = w->comm->rank == dst, inplace = is_dst && out->data == in->data;
  const void *src = NULL;
  void *buf = NULL;
  w->host_math = true; /* local reductions on the host: staging hands host memory */
  int rc = inplace ? tc_stage_inout(w, out, &buf) : tc_stage_in(w, in, &src);
  if (!rc && is_dst && !inplace) rc = tc_stage_out(w, out, &buf);
  if (rc) return rc;
  tc_algo_call_t c = {.src = inplace ? buf : src,
                      .dst = buf,
                      .n = tcoll_tensor_numel(in),
                      .dtype = in->dtype,
                      .op = tc_mpi_op(op, in->dtype),
                      .premul = tc_redop_premul(op),
                      .divisor = tc_redop_divisor(op, w->comm->size),
                      .root = dst,
                      .staged = in->device != TCOLL_HOST};
  return a->build(w, &c);
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int dst,
                const tc_redop_t *op) {
  int64_t n = tcoll_tensor_numel(in);
  tc_algo_query_t q = {.comm = w->comm,
                       .bytes = (size_t)n * tc_dtype_size(in->dtype),
                       .count = n,
                       .dtype = in->dtype,
                       .redop = op->kind,
                       .device = in->device != TCOLL_HOST,
                       .layout = TC_LAYOUT_CONTIG};
  const tc_algo_t *a = tc_algo_choose(TC_OP_REDUCE, &q);
  tc_work_set_algo(w, a->name);
  if (a->build) return post_composed(w, in, out, dst, op, a);
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
  if (is_dst && op->kind == TCOLL_AVG &&
      (rc = tc_work_divide(w, rbuf, n, in->dtype, w->comm->size)))
    return rc;
  return tc_post_reduce(w, sbuf, rbuf, n, in->dtype, tc_mpi_op(op, in->dtype), dst);
}

int tcoll_reduce(const tcoll_tensor_t *in, int dst, tcoll_redop_t op, tcoll_comm_t *comm,
                 tcoll_tensor_t *out) {
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
