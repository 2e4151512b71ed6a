/* The large shared-memory reduce_scatter, all_reduce and reduce (see shm_slices.h). */
#include "shm_slices.h"

#include "../base/dtype.h"
#include "../base/redop.h"
#include "shm_small.h"

#include <string.h>

/* All_reduce outputs from this size on are read in place by the peers (from the heap) rather than
 * copied through the slots: at 8 and 16 MiB that took 0.68-0.80x the time, at 1-4 MiB 0.9-1.7x
 * (bench/heap-bench, 2 ranks, the CI machine; why the smaller ones lose is not understood). */
#define SHARE_OUT_MIN_BYTES ((size_t)8 << 20)

typedef struct slices {
  tc_shm_run_t calls; /* first: the run's callbacks get it */
  tc_node_seg_t *g;
  tc_slices_kind_t kind;
  /* all_reduce, reduce: the blocks of one vector (tc_block_count), and a gather call a chunk */
  bool vector;
  int root; /* reduce; -1 for the others */
  const char *src;
  char *dst;         /* reduce: NULL off the root */
  int64_t n;         /* all_reduce, reduce: the vector; reduce_scatter: one block */
  int64_t runs, run; /* reduce_scatter: a block is runs runs of run elements, p runs apart */
  int64_t piece;     /* elements of a piece: a chunk of one block */
  size_t es;
  tcoll_dtype_t dtype;
  MPI_Op op;
  double divisor;
} slices_t;

bool tc_shm_slices_supported(const tc_algo_query_t *q) {
  if (q->count <= 0 || q->comm->size < 2 || q->redop == TC_REDOP_PREMUL_SUM) return false;
  tc_node_seg_t *g = tc_node_of(q->comm);
  /* (a schedule's steps are counted in int: a chunk takes 2 calls of TC_SHM_CALL_STEPS at most) */
  return g && g->slot_bytes / (size_t)g->p >= TC_NODE_LINE &&
         q->bytes / g->slot_bytes < (size_t)INT_MAX / (4 * TC_SHM_CALL_STEPS);
}

/* ---- where a block's elements lie ---- */

static int64_t block_len(const slices_t *j, int b) {
  return j->vector ? tc_block_count(j->n, j->g->p, b) : j->n;
}

/* Element t of block b in the input. */
static int64_t src_index(const slices_t *j, int b, int64_t t) {
  if (j->vector) return tc_block_offset(j->n, j->g->p, b) + t;
  if (j->runs == 1) return (int64_t)b * j->n + t;
  return t / j->run * j->g->p * j->run + b * j->run + t % j->run;
}

/* How many elements from element t of a block on lie one after the other in the input (at most
 * left). */
static int64_t contiguous(const slices_t *j, int64_t t, int64_t left) {
  if (j->vector || j->runs == 1) return left;
  int64_t in_run = j->run - t % j->run;
  return in_run < left ? in_run : left;
}

/* Element t of block b in the output (reduce_scatter's holds this rank's block only). */
static char *dst_at(const slices_t *j, int b, int64_t t) {
  int64_t i = j->vector ? tc_block_offset(j->n, j->g->p, b) + t : t;
  return j->dst + (size_t)i * j->es;
}

/* Chunk c of block b: its first element, and how many it has (0 past the block's end). */
static int64_t chunk_len(const slices_t *j, int b, int64_t c) {
  int64_t left = block_len(j, b) - c * j->piece;
  return left <= 0 ? 0 : left < j->piece ? left : j->piece;
}

/* Rank q's piece b in its slot of call k. */
static char *piece_of(const slices_t *j, int q, uint64_t k, int b) {
  return tc_node_slot(j->g, q, (int)(k & 1)) + (size_t)b * (size_t)j->piece * j->es;
}

static uint64_t total_bytes(const slices_t *j) {
  return (uint64_t)(j->vector ? j->n : j->n * j->g->p) * j->es;
}

/* ---- the calls ---- */

/* Call i: its chunk, and whether it is a gather call (all_reduce, reduce). */
static int64_t call_chunk(const slices_t *j, int64_t i) { return j->vector ? i / 2 : i; }
static bool call_gathers(const slices_t *j, int64_t i) { return j->vector && (i & 1); }

/* This rank's pieces for the others (reduce-scatter calls; an all-gather call's piece was put
 * in place by the take before). None where the peers read this rank's input in place. */
static int give(tc_shm_run_t *r, int64_t i, uint64_t k) {
  slices_t *j = (slices_t *)r;
  tc_shm_give_bytes(j->g, k, total_bytes(j));
  if (call_gathers(j, i) || r->offset[TC_SHM_SHARED_IN] != TC_HEAP_NONE) return TCOLL_SUCCESS;
  int64_t c = call_chunk(j, i), t0 = c * j->piece;
  for (int b = 0; b < j->g->p; b++) {
    if (b == j->g->me) continue;
    char *to = piece_of(j, j->g->me, k, b);
    for (int64_t u = 0, len = chunk_len(j, b, c), m; u < len; u += m) {
      m = contiguous(j, t0 + u, len - u);
      memcpy(to + (size_t)u * j->es, j->src + (size_t)src_index(j, b, t0 + u) * j->es,
             (size_t)m * j->es);
    }
  }
  return TCOLL_SUCCESS;
}

/* Rank q's elements of this rank's piece of call k's chunk, from element t0 + u of the block on:
 * in q's input where it lies in the symmetric heap, else in q's slot. */
static const char *peer_piece(const slices_t *j, int q, uint64_t k, int64_t t0, int64_t u) {
  const char *in = tc_shm_peer_shared(j->g, q, k, TC_SHM_SHARED_IN);
  if (in) return in + (size_t)src_index(j, j->g->me, t0 + u) * j->es;
  return piece_of(j, q, k, j->g->me) + (size_t)u * j->es;
}

/* acc[0, m) = own[0, m) (op) the first peer's, then (op) each further peer's, in rank order:
 * element t0 + u of the piece on. */
static int reduce_run(slices_t *j, uint64_t k, int64_t t0, int64_t u, int64_t m, const char *own,
                      char *acc) {
  int me = j->g->me, first = me == 0 ? 1 : 0;
  const char *call = "MPI_Reduce_local";
  int rc = tc_mpi_reduce_into(peer_piece(j, first, k, t0, u), own, acc, m, j->dtype, j->op, &call);
  for (int q = first + 1; q < j->g->p && rc == MPI_SUCCESS; q++)
    if (q != me) /* (C's vector loop, as for the first peer) */
      rc = tc_mpi_reduce_into(peer_piece(j, q, k, t0, u), acc, acc, m, j->dtype, j->op, &call);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, call);
  if (j->divisor != 1.0) tc_host_divide(acc, j->dtype, m, j->divisor);
  return TCOLL_SUCCESS;
}

/* This rank's piece of call k's chunk (elements [t0, t0 + len) of its block), reduced into the
 * output, and into its slot of the next call, the gather call, whose parity every peer is done
 * reading (they published this call): all_reduce copies it there, reduce off the root reduces
 * straight into it (it has no output), the root keeps it. (Streaming the output through a bounce
 * buffer in cache, as a memcpy of 16 MiB does, took 1.15-1.4x the time on the CI machine.) */
static int reduce_piece(slices_t *j, uint64_t k, int64_t t0, int64_t len) {
  int me = j->g->me;
  bool to_slot = j->kind == TC_SLICES_REDUCE && me != j->root;
  char *slot = piece_of(j, me, k + 1, me);
  for (int64_t u = 0, m; u < len; u += m) {
    m = contiguous(j, t0 + u, len - u);
    char *acc = to_slot ? slot + (size_t)u * j->es : dst_at(j, me, t0 + u);
    int rc = reduce_run(j, k, t0, u, m, j->src + (size_t)src_index(j, me, t0 + u) * j->es, acc);
    if (rc) return rc;
  }
  /* (peers read an output in the heap in place) */
  if (j->kind == TC_SLICES_ALL_REDUCE && j->calls.offset[TC_SHM_SHARED_OUT] == TC_HEAP_NONE)
    memcpy(slot, dst_at(j, me, t0), (size_t)len * j->es);
  return TCOLL_SUCCESS;
}

/* Reduce-scatter call: this rank's piece of the chunk. Gather call: the peers' reduced pieces
 * copied out (reduce: by the root only). */
static int take(tc_shm_run_t *r, int64_t i, uint64_t k) {
  slices_t *j = (slices_t *)r;
  int me = j->g->me;
  bool gathers = call_gathers(j, i);
  if (gathers && j->kind == TC_SLICES_REDUCE && me != j->root) return TCOLL_SUCCESS;
  for (int q = 0; q < j->g->p; q++) {
    int rc = q == me ? TCOLL_SUCCESS : tc_shm_check_bytes(j->g, q, k, total_bytes(j));
    if (rc) return rc;
  }
  int64_t c = call_chunk(j, i), t0 = c * j->piece;
  if (!gathers) {
    int64_t len = chunk_len(j, me, c);
    return len ? reduce_piece(j, k, t0, len) : TCOLL_SUCCESS;
  }
  for (int q = 0; q < j->g->p; q++) {
    if (q == me) continue;
    const char *out = tc_shm_peer_shared(j->g, q, k, TC_SHM_SHARED_OUT);
    /* (q's output where it lies: the vector's block q there) */
    const char *from = out ? out + (size_t)(dst_at(j, q, t0) - j->dst) : piece_of(j, q, k, q);
    memcpy(dst_at(j, q, t0), from, (size_t)chunk_len(j, q, c) * j->es);
  }
  return TCOLL_SUCCESS;
}

int tc_shm_slices_build(tc_work_t *w, const tc_algo_call_t *c, tc_slices_kind_t kind) {
  tc_node_seg_t *g = w->comm->node;
  slices_t *j = tc_work_small(w, sizeof *j);
  if (!j) return TCOLL_ERR_NO_MEMORY;
  size_t es = tc_dtype_size(c->dtype), line = TC_NODE_LINE / es ? TC_NODE_LINE / es : 1;
  const tc_blocks_t *bl = kind == TC_SLICES_REDUCE_SCATTER ? c->blocks : NULL;
  *j = (slices_t){.calls = {.g = g, .give = give, .take = take},
                  .g = g,
                  .kind = kind,
                  .vector = kind != TC_SLICES_REDUCE_SCATTER,
                  .root = kind == TC_SLICES_REDUCE ? c->root : -1,
                  .src = c->src,
                  .dst = c->dst,
                  .n = c->n,
                  .runs = bl ? bl->runs : 1,
                  .run = bl ? bl->run : c->n,
                  .piece = (int64_t)(g->slot_bytes / (size_t)g->p / es / line * line),
                  .es = es,
                  .dtype = c->dtype,
                  .op = c->op,
                  .divisor = c->divisor};
  size_t in_bytes = (size_t)(j->vector ? j->n : j->n * g->p) * es;
  j->calls.shared[TC_SHM_SHARED_IN] = (tc_shm_share_t){c->src, in_bytes};
  if (kind == TC_SLICES_ALL_REDUCE && in_bytes >= SHARE_OUT_MIN_BYTES)
    j->calls.shared[TC_SHM_SHARED_OUT] = (tc_shm_share_t){c->dst, in_bytes};
  int64_t chunks = (block_len(j, 0) + j->piece - 1) / j->piece;
  /* Reduce-scatter calls see every peer; gather calls too, but reduce's off the root see none */
  bool sees_all = kind != TC_SLICES_REDUCE || g->me == j->root;
  const int sees[2] = {TC_SHM_SEES_ALL, sees_all ? TC_SHM_SEES_ALL : TC_SHM_SEES_NONE};
  return j->vector ? tc_shm_run_add(&w->sched, &j->calls, sees, 2, 2 * chunks)
                   : tc_shm_run_add(&w->sched, &j->calls, sees, 1, chunks);
}
