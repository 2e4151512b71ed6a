/* all_gather -> MPI_Iallgather, or, for host tensors with every rank on one node, the cma
 * algorithm (cma.c here: each rank reads its peers' inputs into its output, one copy per byte
 * along any dim). Along a dim other than 0 a small output is gathered contiguously
 * and interleaved locally; a large host output goes through a host pipeline (one MPI_Iallgather
 * per chunk of rows, each chunk interleaved while in cache); a large output MPI reads on a
 * device is received through a strided datatype straight into place. */
#include "../../argcheck.h"
#include "../../base/dtype.h"
#include "../../work/pipeline.h"
#include "../../work/staging.h"
#include "../../tensor.h"
#include "../algo.h"
#include "../post.h"

#include <string.h>

/* Rank r's block of the output: outer runs of len*inner elements, size*len*inner apart. */
static int post_strided(tc_work_t *w, const void *sbuf, void *rbuf, const tcoll_tensor_t *in,
                        int dim) {
  tc_dimview_t v = tc_dimview(in->shape, in->ndim, dim);
  int64_t block = v.len * v.inner;
  tc_mpi_span_t send;
  tc_mpi_type_t recv;
  int rc = tc_work_reserve(w, 1);
  if (!rc) rc = tc_mpi_span(in->dtype, tcoll_tensor_numel(in), &send);
  if (rc) return rc;
  if ((rc = tc_mpi_vector(in->dtype, v.outer, block, block * w->comm->size, block, &recv))) {
    tc_mpi_span_put(&send);
    return rc;
  }
  int mrc = tc_mpi_iallgather(sbuf, send.count, send.dt.type, rbuf, 1, recv.type, w->comm->mpi,
                              tc_work_req(w));
  rc = tc_post_ok(w, mrc, TC_MPI_NAME("MPI_Iallgather", send.count));
  tc_mpi_type_put(&recv);
  tc_mpi_span_put(&send);
  return rc;
}

/* Below this output size a strided receive datatype costs more in MPI's datatype engine than
 * the copy it saves (measured with tcoll-bench at 2 ranks): such gathers go contiguous, then are
 * interleaved locally. Above it the strided datatype avoids the copy. Host outputs above one
 * host pipeline chunk take the host pipeline instead (host_chunked). */
#define INTERLEAVE_MAX_BYTES (512 << 10)

typedef struct interleave {
  const char *gathered; /* size blocks of outer x block elements, in rank order */
  char *out;
  int64_t outer;
  size_t block_bytes;
  int size;
} interleave_t;
TC_PRIV_FITS(interleave_t);

/* Writes the output in order, reading from the size gathered blocks. */
static int interleave(tc_work_t *w) {
  interleave_t *il = TC_WORK_PRIV(w, interleave_t);
  char *dst = il->out;
  for (int64_t o = 0; o < il->outer; o++)
    for (int r = 0; r < il->size; r++, dst += il->block_bytes)
      memcpy(dst, il->gathered + ((size_t)r * (size_t)il->outer + (size_t)o) * il->block_bytes,
             il->block_bytes);
  return TCOLL_SUCCESS;
}

static int post_interleaved(tc_work_t *w, const void *sbuf, void *rbuf, const tcoll_tensor_t *in,
                            int dim) {
  tc_dimview_t v = tc_dimview(in->shape, in->ndim, dim);
  size_t nb = tcoll_tensor_nbytes(in);
  char *gathered = tc_work_scratch(w, nb * (size_t)w->comm->size);
  if (!gathered) return TCOLL_ERR_NO_MEMORY;
  *TC_WORK_PRIV(w, interleave_t) = (interleave_t){
      gathered, rbuf, v.outer, (size_t)(v.len * v.inner) * tc_dtype_size(in->dtype), w->comm->size};
  w->finish = interleave;
  return tc_post_allgather(w, sbuf, gathered, tcoll_tensor_numel(in), in->dtype);
}

/* A host gather along a dim other than 0 whose output spans several host pipeline chunks: each
 * chunk is interleaved while the next one travels (measured at 2 ranks when Open MPI ran without
 * single-copy transfers: 0.8-1.05x dim 0 from 512 KiB, against 1.1-1.8x for one interleave of the
 * whole output or a strided datatype; with them dim 0 got faster: in runs where raw MPI runs at
 * its usual speed this is 1.7-1.8x dim 0 at 1 MiB, as one whole interleave is, and 1.1-1.4x from
 * 4 MiB, where one whole interleave is 1.5-2.1x). */
static bool host_chunked(const tcoll_tensor_t *in, const tcoll_tensor_t *out, int dim) {
  return in->device == TCOLL_HOST && dim > 0 && tc_shape_prod(in->shape, 0, dim) > 1 &&
         tcoll_tensor_nbytes(out) > TC_PIPE_HOST_CHUNK;
}

/* ------------------------------------------------------------------ algorithms and table */

extern const tc_algo_t tc_all_gather_cma, tc_all_gather_shm;
static const tc_algo_t *const algos[] = {&tc_algo_literal, &tc_all_gather_cma, &tc_all_gather_shm};

/* cma by output size, along a dim other than 0 with runs (one rank's part of an outer row) of at
 * least 512 B: each run is one iovec, and the kernel's cost per iovec ate the copy saved below
 * it (at 2 ranks on Open MPI, against today's dim-1 path in the same runs: 256 B runs 0.7-1.06x,
 * 512 B 0.7x, 1 KiB and more 0.4-0.7x; against MPI_Iallgather along dim 0, a stand-alone
 * prototype). Along dim 0 MPI's own single-copy transfer is as fast or faster (cma 1.0-1.4x it
 * at 2 ranks). Against today's dim-1 path, interleaved in one program (tcoll's all_gather timed
 * against raw MPI, medians of 3 runs under load): 2 ranks 0.4-0.85x at 64 KiB-64 MiB with runs
 * of 512 B-64 KiB (1.0-1.06x with 256 B runs at 1-4 MiB), 0.7x at 8 KiB, 1.9x at 1 KiB; 3 ranks
 * 0.46-0.89x from 1 MiB, 4 ranks 0.53-0.93x from 1 MiB with runs of 4 KiB and more (1.0-1.3x
 * below 1 MiB); below 8 KiB at 2 ranks 1.7-1.8x (8-32 KiB: 0.77-0.87x). MPICH 4.0 at 2 ranks:
 * 0.2-0.8x from 32 KiB to 64 MiB (256 B runs 0.34-0.77x), 1.6-2.2x below 32 KiB. Not measured
 * beyond 4 ranks, nor on MPICH beyond 2 (oversubscribed runs there are the scheduler's): no row
 * there. */
#define CMA_ROW(impl, lo, hi, min_bytes)                                                     \
  {                                                                                          \
    impl, lo, hi, min_bytes, TC_ANY_SIZE, TC_WHERE_HOST | TC_WHERE_STRIDED, 512, "cma",      \
        "tcoll-bench, all_gather along dim 1 against the dim-1 MPI path, 2-core CI machine " \
        "(doc/guide.md, "                                                                    \
        "Algorithms)"                                                                        \
  }
/* shm at 2 ranks, host tensors, every size (times over raw MPI's, tcoll-bench --tune-algorithms
 * --repeat 3, quiet CI machine, 2026-11-28): Open MPI 0.31-0.64x from 16 KiB to 4 MiB, 0.8-1.1x
 * at 16-64 MiB (cma the same), 1.0-1.1x below 4 KiB where tcoll's literal call is 1.4x; along dim
 * 1 with runs of 64 KiB 4-88 us where cma takes 10-160 (64 KiB-1 MiB outputs). MPICH 0.71-0.91x
 * to 4 KiB, 0.33-0.44x from 32 KiB to 2 MiB, 0.70-0.95x at 16-64 MiB. */
#define SHM_ROW(impl)                                                          \
  {                                                                            \
    impl, 2, 2, 0, TC_ANY_SIZE, TC_WHERE_HOST | TC_WHERE_SHM, 0, "shm",        \
        "tcoll-bench --tune-algorithms, 2-core CI machine, 2 ranks (issue 26)" \
  }
static const tc_algo_row_t table[] = {
    SHM_ROW(TC_MPI_OPEN_MPI),
    SHM_ROW(TC_MPI_MPICH),
    CMA_ROW(TC_MPI_OPEN_MPI, 2, 2, 8 * TC_KiB),
    CMA_ROW(TC_MPI_OPEN_MPI, 3, 4, 1 * TC_MiB),
    CMA_ROW(TC_MPI_MPICH, 2, 2, 32 * TC_KiB),
};

const tc_algo_list_t tc_all_gather_algos = TC_ALGO_LIST("all_gather", algos, table);

/* This rank's block as the cma algorithm sees it: outer runs of run bytes. */
static void cma_rows(const tcoll_tensor_t *in, int dim, size_t *run, int64_t *outer) {
  tc_dimview_t v = tc_dimview(in->shape, in->ndim, dim);
  size_t nb = tcoll_tensor_nbytes(in);
  if (dim == 0 || v.outer <= 1) {
    *run = nb;
    *outer = 1;
  } else {
    *run = (size_t)(v.len * v.inner) * tc_dtype_size(in->dtype);
    *outer = v.outer;
  }
}

/* The algorithm: every input here is the same on every rank, so every rank reaches the cma
 * probe (its supported) together. */
static const tc_algo_t *choose(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out,
                               size_t run, int64_t outer) {
  tc_algo_query_t q = {.comm = w->comm,
                       .bytes = tcoll_tensor_nbytes(out),
                       .count = tcoll_tensor_numel(in),
                       .dtype = in->dtype,
                       .redop = -1,
                       .device = in->device != TCOLL_HOST || out->device != TCOLL_HOST,
                       .layout = outer > 1 ? TC_LAYOUT_STRIDED : TC_LAYOUT_CONTIG,
                       .run = run};
  return tc_algo_choose(TC_OP_ALL_GATHER, &q);
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int dim,
                bool inplace) {
  int64_t n = tcoll_tensor_numel(in);
  size_t cma_run;
  int64_t cma_outer;
  cma_rows(in, dim, &cma_run, &cma_outer);
  const tc_algo_t *a = choose(w, in, out, cma_run, cma_outer);
  tc_work_set_algo(w, a->name);
  if (a->build) { /* on the host tensors themselves */
    tc_algo_call_t c = {
        .src = in->data, .dst = out->data, .dtype = in->dtype, .run = cma_run, .outer = cma_outer};
    return a->build(w, &c);
  }
  /* Rank r's block of the output: runs of len * inner elements, size runs apart. */
  tc_dimview_t v = tc_dimview(in->shape, in->ndim, dim);
  int64_t run = v.outer == 1 ? n : v.len * v.inner;
  if (tc_pipe_wanted(in, TC_PIPE_ALL_GATHER, n, run, w->comm->size) || host_chunked(in, out, dim)) {
    tc_pipe_desc_t d = {.kind = TC_PIPE_ALL_GATHER,
                        .device = in->device,
                        .dtype = in->dtype,
                        .mpi_dtype = tc_mpi_dtype(in->dtype),
                        .premul = 1.0,
                        .divisor = 1.0,
                        .in = in->data,
                        .out = out->data,
                        .inplace = inplace,
                        .n = n,
                        .run = run,
                        .stride = run * w->comm->size};
    return tc_pipe_start(w, &d);
  }
  const void *sbuf = MPI_IN_PLACE;
  void *rbuf;
  w->host_math =
      dim > 0 && v.outer > 1 && tcoll_tensor_nbytes(out) <= INTERLEAVE_MAX_BYTES; /* interleaves */
  int rc = inplace ? tc_stage_inout(w, out, &rbuf) : tc_stage_in(w, in, &sbuf);
  if (!rc && !inplace) rc = tc_stage_out(w, out, &rbuf);
  if (rc || n == 0) return rc;
  /* With all dims before `dim` of size 1 the blocks are contiguous: the plain form applies. */
  if (dim == 0 || tc_shape_prod(in->shape, 0, dim) == 1)
    return tc_post_allgather(w, sbuf, rbuf, n, in->dtype);
  if (tcoll_tensor_nbytes(out) <= INTERLEAVE_MAX_BYTES)
    return post_interleaved(w, sbuf, rbuf, in, dim);
  return post_strided(w, sbuf, rbuf, in, dim);
}

int tcoll_all_gather(const tcoll_tensor_t *in, int gather_dim, tcoll_comm_t *comm,
                     tcoll_tensor_t *out) {
  TC_ENTER("tcoll_all_gather");
  tcoll_comm_t *c = NULL;
  int dim;
  bool inplace;
  int rc = tc_check_all_gather(in, gather_dim, comm, out, &c, &dim, &inplace);
  if (rc) return tc_call_failed("all_gather", c, rc);
  int64_t shape[TCOLL_MAX_DIMS];
  tc_all_gather_shape(in, dim, c->size, shape);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "all_gather", c, TC_SIG(.t = in, .dim = dim)))) return rc;
  rc = tc_work_output(w, out, in->dtype, in->ndim, shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post(w, in, out, dim, inplace);
  return tc_work_end(w, rc);
}

int tcoll_all_gather_shape(const tcoll_tensor_t *in, int gather_dim, int group_size,
                           int64_t *shape) {
  TC_ENTER("tcoll_all_gather_shape");
  int rc = tc_check_tensor_desc(in, "in"), dim;
  if (rc) return rc;
  if (group_size < 1)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "group_size is %d (expected >= 1)", group_size);
  if (!shape)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "shape is NULL (expected room for %d sizes)",
                    in->ndim);
  if ((rc = tc_check_dim(gather_dim, in->ndim, "gather_dim", &dim))) return rc;
  return tc_all_gather_shape(in, dim, group_size, shape);
}
