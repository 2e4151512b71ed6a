/* reduce_scatter -> MPI_Ireduce_scatter_block, or a composed algorithm (ring.c here: along any
 * dim; alltoall.c: Ialltoall + rank-ordered reduction, along dim 0).
 * For the literal mapping along a dim other than 0, rank r's slab of the input is strided, and
 * MPI's built-in ops take no strided datatypes. Rather than packing the whole input rank-major
 * first (an extra pass over it), each slab travels to its owner through MPI_Ialltoallv with a
 * strided datatype (the same traffic as the reduce_scatter itself), and the owner reduces the slabs
 * it received with MPI_Reduce_local at completion. premul_sum, which scales each contribution
 * first, packs (the scaling pass doubles as the packing), and so do small inputs, where building
 * the strided datatypes costs more than the packing pass (SLABS_MIN_BYTES). Large host inputs go
 * through the host pipeline instead: chunk by chunk, packed in cache and reduced with
 * MPI_Ireduce_scatter_block straight into the output (HOST_PIPE_MIN_BYTES). */
#include "../../argcheck.h"
#include "../../work/pipeline.h"
#include "../../work/staging.h"
#include "../../base/dtype.h"
#include "../../base/host_loops.h"
#include "../../tensor.h"
#include "../algo.h"
#include "../post.h"

#include <string.h>

/* Completion of the slab exchange: out = slab 0 (op) slab 1 (op) ... in rank order. */
typedef struct slabs {
  char *recv; /* size slabs of n elements */
  void *out;
  int64_t n;
  tcoll_dtype_t dtype;
  MPI_Op op;
  int size;
  double divisor; /* AVG */
} slabs_t;
TC_PRIV_FITS(slabs_t);

static int reduce_slabs(tc_work_t *w) {
  slabs_t *s = TC_WORK_PRIV(w, slabs_t);
  size_t es = tc_dtype_size(s->dtype);
  memcpy(s->out, s->recv, (size_t)s->n * es);
  for (int r = 1; r < s->size; r++) {
    int rc =
        tc_reduce_local(s->recv + (size_t)r * (size_t)s->n * es, s->out, s->n, s->dtype, s->op);
    if (rc) return rc;
  }
  if (s->divisor != 1.0) tc_host_divide(s->out, s->dtype, s->n, s->divisor);
  return TCOLL_SUCCESS;
}

static int post_slabs(tc_work_t *w, const void *sbuf, void *rbuf, const tcoll_tensor_t *in,
                      tc_dimview_t v, const tc_redop_t *op) {
  int size = w->comm->size;
  int64_t nper = tcoll_tensor_numel(in) / size, block = v.len / size * v.inner;
  slabs_t *s = TC_WORK_PRIV(w, slabs_t);
  *s = (slabs_t){.recv = tc_work_scratch(w, tcoll_tensor_nbytes(in)),
                 .out = rbuf,
                 .n = nper,
                 .dtype = in->dtype,
                 .op = tc_mpi_op(op, in->dtype),
                 .size = size,
                 .divisor = op->kind == TCOLL_AVG ? (double)size : 1.0};
  int *cd =
      tc_work_scratch(w, 4 * (size_t)size * sizeof *cd); /* MPI reads these until completion */
  if (!s->recv || !cd) return TCOLL_ERR_NO_MEMORY;
  for (int p = 0; p < size; p++) {
    cd[p] = cd[2 * size + p] = 1;        /* one slab to and from every rank */
    cd[size + p] = cd[3 * size + p] = p; /* displacements, in slabs */
  }
  w->finish = reduce_slabs;
  tc_mpi_type_t st, rt;
  int rc = tc_mpi_vector(in->dtype, v.outer, block, block * size, block, &st);
  if (rc) return rc;
  if ((rc = tc_mpi_contig(in->dtype, nper, &rt))) {
    tc_mpi_type_put(&st);
    return rc;
  }
  rc = tc_work_reserve(w, 1);
  if (!rc)
    rc = tc_post_ok(w,
                    PMPI_Ialltoallv(sbuf, cd, cd + size, st.type, s->recv, cd + 2 * size,
                                    cd + 3 * size, rt.type, w->comm->mpi, tc_work_req(w)),
                    "MPI_Ialltoallv");
  tc_mpi_type_put(&st);
  tc_mpi_type_put(&rt);
  return rc;
}

/* Below this input size packing rank-major and reducing with MPI_Ireduce_scatter_block is
 * faster than the slabs (measured with tcoll-bench at 2 ranks: slabs 1.2x dim 0 at 32-256 B,
 * 0.8x from 4 KiB). */
#define SLABS_MIN_BYTES (4 << 10)
/* From this input size a host input goes through the host pipeline: each chunk is packed
 * rank-major while the chunk's MPI_Ireduce_scatter_block of the one before is in flight. */
#define HOST_PIPE_MIN_BYTES (1 << 20)

static bool host_chunked(const tcoll_tensor_t *in, tc_dimview_t v) {
  return in->device == TCOLL_HOST && v.outer > 1 && tcoll_tensor_nbytes(in) >= HOST_PIPE_MIN_BYTES;
}

/* ------------------------------------------------------------------ algorithms and table */

extern const tc_algo_t tc_reduce_scatter_ring, tc_reduce_scatter_alltoall,
    tc_reduce_scatter_shm_slices;
static const tc_algo_t *const algos[] = {&tc_algo_literal, &tc_reduce_scatter_ring,
                                         &tc_reduce_scatter_alltoall,
                                         &tc_reduce_scatter_shm_slices};

#define TUNE_CI "tcoll-bench --tune, 2-core CI machine (doc/guide.md, Algorithms)"
#define DIM1_4R                                                                                 \
  "tcoll-bench along dim 1, Open MPI, 4 ranks, 1-4 MiB: the ring 0.3-0.9x the time of the MPI " \
  "path, three "                                                                                \
  "runs interleaving both"
/* Open MPI 4.1's MPI_Ireduce_scatter_block reduces everything onto rank 0 and scatters. Along a
 * dim other than 0 the all-to-all exchange is the literal mapping's slabs; from the host
 * pipeline's size on, that pipeline's chunked MPI_Ireduce_scatter_block lost to the ring where
 * the table picks the all-to-all form (DIM1_4R). At 8 and 16 ranks with a core each, the
 * all-to-all form took 0.50-0.79x MPI's time from 32 KiB to 512 KiB and the ring 0.35-0.42x at
 * 2 MiB, 0.23-0.28x at 16 MiB. MPICH 4.0: faster than Open MPI, and still
 * slower than the ring; beyond 2 ranks only the large-message rows (its oversubscribed runs here
 * spin). */
/* The shared-memory reduce_scatter at 2 ranks (times over raw MPI's, tcoll-bench
 * --tune-algorithms --repeat 3, quiet CI machine). Open MPI, 2026-12-02 (after the span walker
 * and the bounce buffer): shm_slices 0.16-0.20x from 16 KiB to 4 MiB with single copy (ring
 * 0.30-0.62), 0.21-0.24x without (ring 0.45-0.59); along dim 1, forced, 3.5 against 12.5 us at
 * 64 KiB, 11 against 24-32 at 256 KiB, 38-41 against 86-97 at 1 MiB. (On 2026-11-28 the ring was
 * ahead from 256 KiB to 1 MiB, 0.34-0.37x against 0.39-0.47.) MPICH: shm_slices 0.30-0.71x at
 * every size from 4 KiB (ring 0.41-0.86). Beyond 2 ranks not measured. */
#define TUNE_SLICES "tcoll-bench --tune-algorithms, 2-core CI machine, 2 ranks (issue 26)"
static const tc_algo_row_t table[] = {
    {TC_MPI_OPEN_MPI, 2, 2, 0, TC_ANY_SIZE, TC_WHERE_SHM, 0, "shm_slices", TUNE_SLICES},
    {TC_MPI_MPICH, 2, 2, 0, TC_ANY_SIZE, TC_WHERE_SHM, 0, "shm_slices", TUNE_SLICES},
    {TC_MPI_OPEN_MPI, 2, 2, 0, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
    {TC_MPI_OPEN_MPI, 3, 3, 8 * TC_KiB, 512 * TC_KiB, 0, 0, "alltoall", TUNE_CI},
    {TC_MPI_OPEN_MPI, 3, 3, 512 * TC_KiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
    {TC_MPI_OPEN_MPI, 4, 4, 8 * TC_KiB, 4 * TC_MiB, 0, 0, "alltoall", TUNE_CI},
    {TC_MPI_OPEN_MPI, 4, 4, HOST_PIPE_MIN_BYTES, 4 * TC_MiB, TC_WHERE_HOST | TC_WHERE_STRIDED, 0,
     "ring", DIM1_4R},
    {TC_MPI_OPEN_MPI, 8, 16, 32 * TC_KiB, TC_MiB, 0, 0, "alltoall", TC_TUNE_16CORES},
    {TC_MPI_OPEN_MPI, 8, 16, TC_MiB, TC_ANY_SIZE, 0, 0, "ring", TC_TUNE_16CORES},
    {TC_MPI_OPEN_MPI, 4, INT_MAX, 4 * TC_MiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
    {TC_MPI_MPICH, 2, 2, 0, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
    {TC_MPI_MPICH, 3, INT_MAX, 8 * TC_MiB, TC_ANY_SIZE, 0, 0, "ring", TUNE_CI},
};

const tc_algo_list_t tc_reduce_scatter_algos = TC_ALGO_LIST("reduce_scatter", algos, table);

/* The composed algorithms run on host memory (device tensors are staged first). Along a dim
 * other than 0 the ring's blocks are interleaved. */
static int post_composed(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out,
                         const tc_redop_t *op, const tc_algo_t *a, tc_dimview_t v) {
  int p = w->comm->size;
  const void *src;
  void *dst;
  w->host_math = true; /* local reductions on the host: staging hands host memory */
  int rc = tc_stage_in(w, in, &src);
  if (!rc) rc = tc_stage_out(w, out, &dst);
  if (rc) return rc;
  tc_blocks_t blocks = {v.outer, v.len / p * v.inner, MPI_DATATYPE_NULL,
                        NULL}; /* rank r's block: outer runs */
  tc_algo_call_t c = {.src = src,
                      .dst = dst,
                      .n = tcoll_tensor_numel(in) / p,
                      .dtype = in->dtype,
                      .op = tc_mpi_op(op, in->dtype),
                      .premul = tc_redop_premul(op),
                      .divisor = tc_redop_divisor(op, p),
                      .staged = in->device != TCOLL_HOST,
                      .blocks = &blocks};
  return a->build(w, &c);
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int dim,
                const tc_redop_t *op) {
  int size = w->comm->size;
  int64_t nper = tcoll_tensor_numel(in) / size;
  tc_dimview_t v = tc_dimview(in->shape, in->ndim, dim);
  tc_algo_query_t q = {.comm = w->comm,
                       .bytes = tcoll_tensor_nbytes(in),
                       .count = tcoll_tensor_numel(in),
                       .dtype = in->dtype,
                       .redop = op->kind,
                       .device = in->device != TCOLL_HOST,
                       .layout = v.outer == 1 ? TC_LAYOUT_CONTIG : TC_LAYOUT_STRIDED,
                       .run = (size_t)(v.len / size * v.inner) * tc_dtype_size(in->dtype)};
  const tc_algo_t *a = tc_algo_choose(TC_OP_REDUCE_SCATTER, &q);
  tc_work_set_algo(w, a->name);
  if (a->build) return post_composed(w, in, out, op, a, v);
  /* Rank r's piece of the input: runs of len / size * inner elements, len * inner apart. */
  int64_t run = v.outer == 1 ? nper : v.len / size * v.inner;
  if (tc_pipe_wanted(in, TC_PIPE_REDUCE_SCATTER, nper, run, size) || host_chunked(in, v)) {
    tc_pipe_desc_t d = {.kind = TC_PIPE_REDUCE_SCATTER,
                        .device = in->device,
                        .dtype = in->dtype,
                        .mpi_dtype = tc_mpi_dtype(in->dtype),
                        .mpi_op = tc_mpi_op(op, in->dtype),
                        .premul = tc_redop_premul(op),
                        .divisor = tc_redop_divisor(op, size),
                        .in = in->data,
                        .out = out->data,
                        .n = nper,
                        .run = run,
                        .stride = v.outer == 1 ? nper * size : v.len * v.inner};
    return tc_pipe_start(w, &d);
  }
  const void *sbuf;
  void *rbuf;
  w->host_math = v.outer > 1 || op->kind == TC_REDOP_PREMUL_SUM || op->kind == TCOLL_AVG;
  int rc = tc_stage_in(w, in, &sbuf);
  if (!rc) rc = tc_stage_out(w, out, &rbuf);
  if (rc) return rc;
  double scale = op->kind == TC_REDOP_PREMUL_SUM ? op->scalar : 1.0;
  if (v.outer > 1 && scale == 1.0 && nper > 0 && tcoll_tensor_nbytes(in) >= SLABS_MIN_BYTES)
    return post_slabs(w, sbuf, rbuf, in, v, op);
  if (v.outer > 1 || scale != 1.0) {
    void *packed = tc_work_scratch(w, tcoll_tensor_nbytes(in));
    if (!packed) return TCOLL_ERR_NO_MEMORY;
    tc_pack_rank_major(packed, sbuf, v.outer, size, v.len / size * v.inner, in->dtype, scale);
    sbuf = packed;
  }
  if (op->kind == TCOLL_AVG && (rc = tc_work_divide(w, rbuf, nper, in->dtype, size))) return rc;
  return tc_post_reduce_scatter_block(w, sbuf, rbuf, nper, in->dtype, tc_mpi_op(op, in->dtype));
}

int tcoll_reduce_scatter(const tcoll_tensor_t *in, tcoll_redop_t op, int scatter_dim,
                         tcoll_comm_t *comm, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_reduce_scatter");
  tcoll_comm_t *c = NULL;
  tc_redop_t rop;
  int dim;
  int rc = tc_check_reduce_scatter(in, op, scatter_dim, comm, out, &c, &rop, &dim);
  if (rc) return tc_call_failed("reduce_scatter", c, rc);
  int64_t shape[TCOLL_MAX_DIMS];
  tc_reduce_scatter_shape(in, dim, c->size, shape);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "reduce_scatter", c, TC_SIG(.t = in, .op = &rop, .dim = dim))))
    return rc;
  rc = tc_work_output(w, out, in->dtype, in->ndim, shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post(w, in, out, dim, &rop);
  return tc_work_end(w, rc);
}

int tcoll_reduce_scatter_shape(const tcoll_tensor_t *in, int scatter_dim, int group_size,
                               int64_t *shape) {
  TC_ENTER("tcoll_reduce_scatter_shape");
  int rc = tc_check_tensor_desc(in, "in"), dim;
  if (rc) return rc;
  if (group_size < 1)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "group_size is %d (expected >= 1)", group_size);
  if (!shape)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "shape is NULL (expected room for %d sizes)",
                    in->ndim);
  if ((rc = tc_check_dim(scatter_dim, in->ndim, "scatter_dim", &dim))) return rc;
  return tc_reduce_scatter_shape(in, dim, group_size, shape);
}
