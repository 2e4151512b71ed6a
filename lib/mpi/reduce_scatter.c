/* reduce_scatter -> MPI_Ireduce_scatter_block, or a composed algorithm (ring: along any dim;
 * Ialltoall + rank-ordered reduction: along dim 0).
 * For the literal mapping along a dim other than 0, rank r's slab of the input is strided, and MPI's built-in ops take no
 * strided datatypes. Rather than packing the whole input rank-major first (an extra pass over
 * it), each slab travels to its owner through MPI_Ialltoallv with a strided datatype (the same
 * traffic as the reduce_scatter itself), and the owner reduces the slabs it received with
 * MPI_Reduce_local at completion. premul_sum, which scales each contribution first, packs (the
 * scaling pass doubles as the packing), and so do small inputs, where building the strided
 * datatypes costs more than the packing pass (SLABS_MIN_BYTES). Large host inputs go through the
 * host pipeline instead: chunk by chunk, packed in cache and reduced with
 * MPI_Ireduce_scatter_block straight into the output (HOST_PIPE_MIN_BYTES). */
#include "../argcheck.h"
#include "../sched/algorithms.h"
#include "../sched/cma.h"
#include "../sched/select.h"
#include "../work/pipeline.h"
#include "../work/staging.h"
#include "../base/dtype.h"
#include "../tensor.h"
#include "post.h"

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
    int rc = tc_reduce_local(s->recv + (size_t)r * (size_t)s->n * es, s->out, s->n, s->dtype, s->op);
    if (rc) return rc;
  }
  if (s->divisor != 1.0) tc_host_divide(s->out, s->dtype, s->n, s->divisor);
  return TCOLL_SUCCESS;
}

static int post_slabs(tc_work_t *w, const void *sbuf, void *rbuf, const tcoll_tensor_t *in, tc_dimview_t v,
                      const tc_redop_t *op) {
  int size = w->comm->size;
  int64_t nper = tcoll_tensor_numel(in) / size, block = v.len / size * v.inner;
  slabs_t *s = TC_WORK_PRIV(w, slabs_t);
  *s = (slabs_t){.recv = tc_work_scratch(w, tcoll_tensor_nbytes(in)), .out = rbuf, .n = nper, .dtype = in->dtype,
                 .op = tc_mpi_op(op, in->dtype), .size = size,
                 .divisor = op->kind == TCOLL_AVG ? (double)size : 1.0};
  int *cd = tc_work_scratch(w, 4 * (size_t)size * sizeof *cd); /* MPI reads these until completion */
  if (!s->recv || !cd) return TCOLL_ERR_NO_MEMORY;
  for (int p = 0; p < size; p++) {
    cd[p] = cd[2 * size + p] = 1;      /* one slab to and from every rank */
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
                    MPI_Ialltoallv(sbuf, cd, cd + size, st.type, s->recv, cd + 2 * size, cd + 3 * size, rt.type,
                                   w->comm->mpi, tc_work_req(w)),
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

/* Along a dim other than 0 with runs of this many bytes and more, the ring's first block of a
 * host tensor is pushed into the next rank's buffer with process_vm_writev (sched/cma.h) where
 * every rank is on one node and cross-memory attach works: one copy where packing and MPI's
 * transfer make two. Shorter runs cost the kernel more per run than the packing pass saves.
 * Device tensors keep the packing path: their staging buffers are pinned memory, which the
 * driver may map where the kernel cannot pin pages for another process. */
#define PUSH_MIN_RUN_BYTES ((size_t)1 << 10)
/* Up to this block size the ring's first message along a dim other than 0 leaves through a
 * strided datatype (MPI packs it on the way); above it the block is packed first (measured with
 * tcoll-bench at 2 ranks: the datatype was faster for small blocks, slower from a few MiB). */
#ifndef TYPED_SEND_MAX_BYTES
#define TYPED_SEND_MAX_BYTES (256 << 10)
#endif

int tc_post_reduce_scatter_composed(tc_work_t *w, const void *src, void *dst, int64_t nper, tcoll_dtype_t d, MPI_Op op,
                                    double divisor, tc_algo_t algo, const tc_blocks_t *blocks) {
  int p = w->comm->size, rc;
  bool a2a = algo == TC_ALGO_ALLTOALL;
  size_t bytes = a2a ? tc_alltoall_reduce_scatter_scratch(nper, p, d) : tc_ring_reduce_scatter_scratch(nper * p, p, d);
  void *scratch = tc_work_scratch(w, bytes);
  if (!scratch) return TCOLL_ERR_NO_MEMORY;
  tc_sched_t *s = &w->sched;
  rc = a2a ? tc_build_alltoall_reduce_scatter(s, src, dst, nper, d, op, scratch)
           : tc_build_ring_reduce_scatter(s, src, dst, nper * p, d, op, scratch, 0, blocks);
  if (!rc && divisor != 1.0) rc = tc_sched_scale(s, dst, dst, nper, d, 1.0, divisor, true);
  return rc;
}

/* The ring serves every dim (its blocks interleaved along a dim other than 0); the all-to-all
 * form serves contiguous blocks only: along other dims the slabs below are the same exchange,
 * strided. */
tc_algo_t tc_reduce_scatter_algo(int ranks, int64_t n, tcoll_dtype_t d, int redop, bool device,
                                 bool contiguous) {
  if (n == 0) return TC_ALGO_MPI;
  tc_algo_query_t q = {.op = TC_OP_REDUCE_SCATTER, .bytes = (size_t)n * tc_dtype_size(d), .ranks = ranks,
                       .dtype = d, .redop = redop, .device = device};
  tc_algo_t algo = tc_algo_choose(&q);
  /* Along a dim other than 0 the all-to-all exchange is the slabs' (the MPI path below), up to
   * the host pipeline's size; from there the pipeline's chunked MPI_Ireduce_scatter_block lost to
   * the ring where the table picks the all-to-all form (Open MPI, 4 ranks, 1-4 MiB: the ring
   * 0.3-0.9x the time of the MPI path along dim 1, three runs interleaving both). */
  if (!contiguous && algo == TC_ALGO_ALLTOALL && !device && q.bytes >= HOST_PIPE_MIN_BYTES &&
      tc_algo_forced[TC_OP_REDUCE_SCATTER] == TC_ALGO_AUTO)
    algo = TC_ALGO_RING;
  if (!contiguous && algo != TC_ALGO_RING) return TC_ALGO_MPI;
  /* One MPI_Ialltoall block per rank must fit the per-call limit or go in MPI_Ialltoall_c;
   * beyond that (no large counts) the ring goes on. */
  if (algo == TC_ALGO_ALLTOALL && !tc_alltoall_fits(n / ranks)) algo = TC_ALGO_RING;
  return algo == TC_ALGO_AUTO ? TC_ALGO_MPI : algo;
}

/* The composed algorithms run on host memory (device tensors are staged first), premul_sum's
 * scaling as a step of its own. Along a dim other than 0 the ring's blocks are interleaved. */
static int post_composed(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, const tc_redop_t *op,
                         tc_algo_t algo, tc_dimview_t v) {
  int p = w->comm->size;
  int64_t nper = tcoll_tensor_numel(in) / p, n = nper * p;
  const void *src;
  void *dst;
  w->host_math = true; /* local reductions on the host: staging hands host memory */
  int rc = tc_stage_in(w, in, &src);
  if (!rc) rc = tc_stage_out(w, out, &dst);
  if (rc) return rc;
  if (op->kind == TC_REDOP_PREMUL_SUM) { /* each rank's contribution is scaled first */
    void *scaled = tc_work_scratch(w, tcoll_tensor_nbytes(in));
    if (!scaled || (rc = tc_sched_scale(&w->sched, scaled, src, n, in->dtype, op->scalar, 1.0, true)))
      return scaled ? rc : TCOLL_ERR_NO_MEMORY;
    src = scaled;
  }
  tc_blocks_t blocks = {v.outer, v.len / p * v.inner, MPI_DATATYPE_NULL, NULL}; /* rank r's block: outer runs */
  bool strided = algo == TC_ALGO_RING && v.outer > 1 && p > 1;
  size_t es = tc_dtype_size(in->dtype);
  if (strided && in->device == TCOLL_HOST && (size_t)blocks.run * es >= PUSH_MIN_RUN_BYTES && tc_cma_usable(w->comm)) {
    if (!(blocks.push = tc_work_scratch(w, tc_cma_push_scratch()))) return TCOLL_ERR_NO_MEMORY;
  } else if (strided && (size_t)nper * es <= TYPED_SEND_MAX_BYTES && tc_mpi_one_call(nper)) {
    /* One message each way: a receive split at the per-call limit would not match one send. */
    tc_mpi_type_t t;
    if ((rc = tc_mpi_vector(in->dtype, v.outer, blocks.run, p * blocks.run, blocks.run, &t))) return rc;
    if ((rc = tc_work_hold_type(w, &t))) return rc;
    blocks.send_type = t.type;
  }
  return tc_post_reduce_scatter_composed(w, src, dst, nper, in->dtype, tc_mpi_op(op, in->dtype),
                                         op->kind == TCOLL_AVG ? (double)p : 1.0, algo, &blocks);
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int dim, const tc_redop_t *op) {
  int size = w->comm->size;
  int64_t nper = tcoll_tensor_numel(in) / size;
  tc_dimview_t v = tc_dimview(in->shape, in->ndim, dim);
  tc_algo_t algo = tc_reduce_scatter_algo(size, tcoll_tensor_numel(in), in->dtype, op->kind, in->device != TCOLL_HOST,
                                          v.outer == 1);
  tc_work_set_algo(w, algo);
  if (algo != TC_ALGO_MPI) return post_composed(w, in, out, op, algo, v);
  /* Rank r's piece of the input: runs of len / size * inner elements, len * inner apart. */
  int64_t run = v.outer == 1 ? nper : v.len / size * v.inner;
  if (tc_pipe_wanted(in, TC_PIPE_REDUCE_SCATTER, nper, run, size) || host_chunked(in, v)) {
    tc_pipe_desc_t d = {.kind = TC_PIPE_REDUCE_SCATTER, .device = in->device, .dtype = in->dtype,
                        .mpi_dtype = tc_mpi_dtype(in->dtype), .mpi_op = tc_mpi_op(op, in->dtype),
                        .premul = op->kind == TC_REDOP_PREMUL_SUM ? op->scalar : 1.0,
                        .divisor = op->kind == TCOLL_AVG ? (double)size : 1.0, .in = in->data,
                        .out = out->data, .n = nper, .run = run,
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

int tcoll_reduce_scatter(const tcoll_tensor_t *in, tcoll_redop_t op, int scatter_dim, tcoll_comm_t *comm,
                         tcoll_tensor_t *out) {
  TC_ENTER("tcoll_reduce_scatter");
  tcoll_comm_t *c = NULL;
  tc_redop_t rop;
  int dim;
  int rc = tc_check_reduce_scatter(in, op, scatter_dim, comm, out, &c, &rop, &dim);
  if (rc) return tc_call_failed("reduce_scatter", c, rc);
  int64_t shape[TCOLL_MAX_DIMS];
  tc_reduce_scatter_shape(in, dim, c->size, shape);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "reduce_scatter", c, TC_SIG(.t = in, .op = &rop, .dim = dim)))) return rc;
  rc = tc_work_output(w, out, in->dtype, in->ndim, shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post(w, in, out, dim, &rop);
  return tc_work_end(w, rc);
}

int tcoll_reduce_scatter_shape(const tcoll_tensor_t *in, int scatter_dim, int group_size, int64_t *shape) {
  TC_ENTER("tcoll_reduce_scatter_shape");
  int rc = tc_check_tensor_desc(in, "in"), dim;
  if (rc) return rc;
  if (group_size < 1) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "group_size is %d (expected >= 1)", group_size);
  if (!shape) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "shape is NULL (expected room for %d sizes)", in->ndim);
  if ((rc = tc_check_dim(scatter_dim, in->ndim, "scatter_dim", &dim))) return rc;
  return tc_reduce_scatter_shape(in, dim, group_size, shape);
}
