/* broadcast -> MPI_Ibcast on the output (src first copies its input there), or small ones
 * through node-shared memory (shm.c here). */
#include "../../argcheck.h"
#include "../../device/device.h"
#include "../../work/pipeline.h"
#include "../../work/staging.h"
#include "../../base/dtype.h"
#include "../algo.h"
#include "../post.h"

extern const tc_algo_t tc_broadcast_shm, tc_broadcast_hier;
static const tc_algo_t *const algos[] = {&tc_algo_literal, &tc_broadcast_shm, &tc_broadcast_hier};

#define TUNE_SHM "tcoll-bench, 2-core CI machine and the 16-core host of the GPU machine (issue 26)"
/* At 2 ranks on Open MPI's default settings (no yield_when_idle), 2026-12-02, since small shm
 * calls run at their post: shm 0.32-0.45 us from 8 to 128 B (0.63-0.86x MPI_Ibcast's 0.49-0.54),
 * 0.58x at 512 B-1 KiB; tcoll's literal MPI_Ibcast 1.13-1.28x (two runs of forced algorithms).
 * (Before: MPI_Ibcast up to 128 B 0.80-0.90 us, shm 0.94-1.00, so shm only from 512 B.) */
#define TUNE_SHM_2 \
  "tcoll-bench, 2-core CI machine, 2 ranks, Open MPI without yield_when_idle (issue 28)"
static const tc_algo_row_t table[] = {
    {TC_MPI_OPEN_MPI, 2, INT_MAX, 0, 16 * TC_KiB, TC_WHERE_HIER, 0, "hier", TC_TUNE_HIER},
    {TC_MPI_MPICH, 2, INT_MAX, 0, 16 * TC_KiB, TC_WHERE_HIER, 0, "hier", TC_TUNE_HIER},
    {TC_MPI_OPEN_MPI, 2, 2, 0, 16 * TC_KiB, 0, 0, "shm", TUNE_SHM_2},
    {TC_MPI_OPEN_MPI, 3, INT_MAX, 0, 16 * TC_KiB, 0, 0, "shm", TUNE_SHM},
    {TC_MPI_MPICH, 2, INT_MAX, 0, 16 * TC_KiB, 0, 0, "shm", TUNE_SHM},
};

const tc_algo_list_t tc_broadcast_algos = TC_ALGO_LIST("broadcast", algos, table);

/* The composed algorithms on host memory: device tensors are staged first (src's input on src
 * only: elsewhere it is not read). */
static int post_composed(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int src,
                         const tc_algo_t *a) {
  bool is_src = w->comm->rank == src, inplace = out->data == in->data;
  const void *from = NULL;
  void *buf = NULL;
  w->host_math = true;
  int rc = is_src && inplace ? tc_stage_inout(w, out, &buf) : tc_stage_out(w, out, &buf);
  if (!rc && is_src && inplace) from = buf;
  if (!rc && is_src && !inplace) rc = tc_stage_in(w, in, &from);
  if (rc) return rc;
  tc_algo_call_t c = {.src = from,
                      .dst = buf,
                      .n = tcoll_tensor_numel(in),
                      .dtype = in->dtype,
                      .premul = 1.0,
                      .divisor = 1.0,
                      .root = src,
                      .staged = in->device != TCOLL_HOST};
  return a->build(w, &c);
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int src) {
  int64_t n = tcoll_tensor_numel(in);
  tc_algo_query_t q = {.comm = w->comm,
                       .bytes = (size_t)n * tc_dtype_size(in->dtype),
                       .count = n,
                       .dtype = in->dtype,
                       .redop = -1,
                       .device = in->device != TCOLL_HOST,
                       .layout = TC_LAYOUT_CONTIG};
  const tc_algo_t *a = tc_algo_choose(TC_OP_BROADCAST, &q);
  tc_work_set_algo(w, a->name);
  if (a->build) return post_composed(w, in, out, src, a);
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
