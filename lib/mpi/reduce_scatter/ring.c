/* The ring reduce_scatter (TCOLL_ALGO reduce_scatter:ring), along any dim: along a dim other than
 * 0 rank r's block is interleaved in the input, and the ring reads it in place; only its first
 * message needs the strided block gathered, which it sends through a strided datatype (small
 * blocks), packs, or pushes straight into the next rank's buffer (cma.h, host tensors). */
#include "../cma.h"
#include "../ring.h"

#include "../../base/dtype.h"

/* Along a dim other than 0 with runs of this many bytes and more, the ring's first block of a
 * host tensor is pushed into the next rank's buffer with process_vm_writev (cma.h) where every
 * rank is on one node and cross-memory attach works: one copy where packing and MPI's transfer
 * make two. Shorter runs cost the kernel more per run than the packing pass saves. Device
 * tensors keep the packing path: their staging buffers are pinned memory, which the driver may
 * map where the kernel cannot pin pages for another process. */
#define PUSH_MIN_RUN_BYTES ((size_t)1 << 10)
/* Up to this block size the ring's first message along a dim other than 0 leaves through a
 * strided datatype (MPI packs it on the way); above it the block is packed first (measured with
 * tcoll-bench at 2 ranks: the datatype was faster for small blocks, slower from a few MiB). */
#ifndef TYPED_SEND_MAX_BYTES
#define TYPED_SEND_MAX_BYTES (256 << 10)
#endif

/* How the first strided block leaves: pushed, through a datatype the work holds, or packed. */
static int first_send(tc_work_t *w, const tc_algo_call_t *c, tc_blocks_t *b) {
  int p = w->comm->size;
  size_t es = tc_dtype_size(c->dtype);
  if (!c->staged && (size_t)b->run * es >= PUSH_MIN_RUN_BYTES && tc_cma_usable(w->comm)) {
    b->push = tc_work_scratch(w, tc_cma_push_scratch());
    return b->push ? TCOLL_SUCCESS : TCOLL_ERR_NO_MEMORY;
  }
  if ((size_t)c->n * es > TYPED_SEND_MAX_BYTES || !tc_mpi_one_call(c->n)) return TCOLL_SUCCESS;
  /* One message each way: a receive split at the per-call limit would not match one send. */
  tc_mpi_type_t t;
  int rc = tc_mpi_vector(c->dtype, b->runs, b->run, p * b->run, b->run, &t);
  if (!rc) rc = tc_work_hold_type(w, &t);
  if (!rc) b->send_type = t.type;
  return rc;
}

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  int p = w->comm->size;
  const void *src;
  int rc = tc_algo_scaled_src(w, c, c->n * p, &src);
  if (rc) return rc;
  tc_blocks_t b = {1, c->n, MPI_DATATYPE_NULL, NULL};
  if (c->blocks) b = *c->blocks;
  if (b.runs > 1 && p > 1 && (rc = first_send(w, c, &b))) return rc;
  void *scratch = tc_work_scratch(w, tc_ring_reduce_scatter_scratch(c->n * p, p, c->dtype));
  if (!scratch) return TCOLL_ERR_NO_MEMORY;
  tc_sched_t *s = &w->sched;
  rc = tc_build_ring_reduce_scatter(s, src, c->dst, c->n * p, c->dtype, c->op, scratch, 0, &b);
  if (!rc && c->divisor != 1.0)
    rc = tc_sched_scale(s, c->dst, c->dst, c->n, c->dtype, 1.0, c->divisor, true);
  return rc;
}

static bool supported(const tc_algo_query_t *q) { return q->count > 0; }

const tc_algo_t tc_reduce_scatter_ring = {
    .name = "ring", .layouts = TC_LAYOUT_ANY, .supported = supported, .build = build};
