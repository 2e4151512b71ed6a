/* The large shared-memory reduce_scatter, all_reduce and reduce (see shm_slices.h). */
#include "shm_slices.h"

#include "../base/dtype.h"
#include "../base/host_loops.h"
#include "../base/redop.h"
#include "../base/stream_copy.h"
#include "shm_small.h"

#include <string.h>

/* From this input size the reduced piece is written with stores that bypass the cache where this
 * rank does not read it again (reduce_scatter's output; all_reduce's where it lies in the heap or
 * goes into peers' outputs, not where it is copied into the slot next): its lines then need not be
 * fetched first.
 * bench/heap-bench at 2 ranks (two runs, times over a memcpy of the input): all_reduce on heap
 * tensors 1.54-1.58x at 8 MiB (1.82-1.96x without), 1.42-1.45x at 32 MiB (1.51-1.65x);
 * reduce_scatter 0.82-0.92x at 16-32 MiB (0.85-0.96x); malloc'ed outputs unchanged; at 4 MiB
 * worse (all_reduce 2.3-2.6x against 2.2-2.4x), so not below. */
#define STREAM_MIN_BYTES ((size_t)8 << 20)

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
  bool divide_last; /* AVG: the last reduction divides in the same pass (tc_host_sum_divided) */
  bool stream;
  bool whole; /* the first call reduced this rank's whole block (all_in_heap) */
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

/* Elements [t0, t0 + len) of a block, walked as the spans that lie one after the other in the
 * input: [u, u + m) of the piece lies at input element at. One division for the first span, none
 * after (along dim 1, runs of 128 floats cost as much in index arithmetic as in copying). */
typedef struct span {
  int64_t u, m, at, left;
} span_t;

static span_t span_first(const slices_t *j, int b, int64_t t0, int64_t len) {
  span_t s = {.u = 0, .at = src_index(j, b, t0), .left = len, .m = len};
  if (!j->vector && j->runs > 1) {
    int64_t in_run = j->run - t0 % j->run;
    if (in_run < len) s.m = in_run;
  }
  return s;
}

/* The span after s (left <= 0 past the last): a block's runs lie p runs apart. */
static span_t span_after(const slices_t *j, const span_t *s) {
  span_t t = {.u = s->u + s->m, .left = s->left - s->m};
  t.at = s->at + s->m + (int64_t)(j->g->p - 1) * j->run;
  t.m = t.left < j->run ? t.left : j->run;
  return t;
}

/* The next span (false past the last). */
static bool span_next(const slices_t *j, span_t *s) {
  *s = span_after(j, s);
  return s->left > 0;
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

/* Along a dim other than 0 a span ends at its run, and the next starts a run away, often on
 * another page: the processor's prefetchers start cold there. So before each span its successor's
 * first PREFETCH_BYTES of the strided operands are asked for, to arrive while this one is reduced.
 * reduce_scatter along dim 1 at 2 ranks, tcoll-bench (two runs, times over dim 0's): 1.05-1.08x at
 * 256 KiB (1.25-1.29x without), 1.23-1.36x at 1 MiB (1.56-1.57x), 1.56-1.65x at 4 MiB
 * (1.88-2.00x); 2 and 4 KiB did about as well, 512 B only at 256 KiB. Where the input is not
 * read in place (TCOLL_SYMMETRIC_BYTES=0) its copy into the slot does the same for runs copied
 * directly: 1.26-1.33x at 4 MiB (1.55-1.59x); for the short runs packed through the bounce buffer
 * it cost 10% at 64 KiB, so not there. */
#define PREFETCH_BYTES ((size_t)2 << 10)

static void prefetch_next(const slices_t *j, const span_t *s, const char *a, const char *b) {
  if (j->runs == 1 || s->left <= s->m) return;
  span_t t = span_after(j, s);
  size_t at = (size_t)t.at * j->es, n = (size_t)t.m * j->es;
  for (size_t o = 0; o < n && o < PREFETCH_BYTES; o += TC_NODE_LINE) {
    if (a) __builtin_prefetch(a + at + o);
    if (b) __builtin_prefetch(b + at + o);
  }
}

/* Stores into a slot cost far more than a long memcpy into it: a peer read those lines one call
 * ago, and glibc's memcpy from 8 KiB on (rep movsb) writes whole lines without asking for them
 * first; plain vector stores of 32 B took 2.7x its time at 64 KiB (2 ranks, the CI machine).
 * Spans shorter than DIRECT_MIN_BYTES are packed in a bounce buffer on the stack, in cache, which
 * goes into the slot with one memcpy whenever it fills. Along dim 1 at 2 ranks that took 0.55x the
 * time for runs of 2 KiB and less (reduce_scatter of 64 KiB-1 MiB: 1.14-1.38x dim 0's time,
 * 2.0-2.5x before); runs of 4 and 8 KiB (4 and 16 MiB) took 1.05-1.1x as long as direct copies. */
#define BOUNCE_BYTES ((size_t)16 << 10)
#define DIRECT_MIN_BYTES ((size_t)4 << 10)

/* Rank b's elements [t0, t0 + len) into `to`, the piece in this rank's slot. */
static void give_piece(const slices_t *j, int b, int64_t t0, int64_t len, char *to) {
  char bounce[BOUNCE_BYTES];
  /* held bytes of bounce go to to + at: the spans packed so far, one after the other there */
  size_t es = j->es, held = 0, at = 0, run_bytes = (size_t)j->run * es;
  span_t s = span_first(j, b, t0, len);
  do {
    if (run_bytes >= DIRECT_MIN_BYTES) prefetch_next(j, &s, j->src, NULL); /* (below: a loss) */
    const char *from = j->src + (size_t)s.at * es;
    size_t n = (size_t)s.m * es;
    bool direct = n >= DIRECT_MIN_BYTES;
    if (held && (direct || held + n > BOUNCE_BYTES)) {
      memcpy(to + at, bounce, held);
      held = 0;
    }
    if (direct) {
      memcpy(to + (size_t)s.u * es, from, n);
      continue;
    }
    if (!held) at = (size_t)s.u * es;
    memcpy(bounce + held, from, n);
    held += n;
  } while (span_next(j, &s));
  if (held) memcpy(to + at, bounce, held);
}

/* This rank's pieces for the others (reduce-scatter calls; an all-gather call's piece was put
 * in place by the take before). None where the peers read this rank's input in place. */
static int give(tc_shm_run_t *r, int64_t i, uint64_t k) {
  slices_t *j = (slices_t *)r;
  tc_shm_give_bytes(j->g, k, total_bytes(j));
  if (call_gathers(j, i) || r->offset[TC_SHM_SHARED_IN] != TC_HEAP_NONE) return TCOLL_SUCCESS;
  int64_t c = call_chunk(j, i), t0 = c * j->piece;
  for (int b = 0; b < j->g->p; b++) {
    if (b == j->g->me) continue;
    int64_t len = chunk_len(j, b, c);
    if (len) give_piece(j, b, t0, len, piece_of(j, j->g->me, k, b));
  }
  return TCOLL_SUCCESS;
}

/* acc[u, u + m) (op)= peer q's elements of this rank's piece of call k's chunk, span by span;
 * the first peer's are combined with this rank's own input instead (acc = own (op) theirs). They
 * lie in q's input where that is in the symmetric heap, else in q's slot. */
static int reduce_peer(slices_t *j, uint64_t k, int q, bool first, bool last, bool stream,
                       int64_t t0, int64_t len, char *acc) {
  size_t es = j->es;
  const char *in = tc_shm_peer_shared(j->g, q, k, TC_SHM_SHARED_IN);
  const char *slot = piece_of(j, q, k, j->g->me);
  const char *call = "MPI_Reduce_local";
  span_t s = span_first(j, j->g->me, t0, len);
  do {
    prefetch_next(j, &s, in, first ? j->src : NULL); /* (the slot's pieces are contiguous) */
    const char *theirs = in ? in + (size_t)s.at * es : slot + (size_t)s.u * es;
    char *to = acc + (size_t)s.u * es;
    const char *mine = first ? j->src + (size_t)s.at * es : to;
    if (last && j->divide_last) {
      tc_host_sum_divided(theirs, mine, to, s.m, j->dtype, j->divisor, stream);
      continue;
    }
    int rc = stream ? tc_mpi_reduce_streaming(theirs, mine, to, s.m, j->dtype, j->op, &call)
                    : tc_mpi_reduce_into(theirs, mine, to, s.m, j->dtype, j->op, &call);
    if (rc != MPI_SUCCESS) return tc_mpi_error(rc, call);
  } while (span_next(j, &s));
  return TCOLL_SUCCESS;
}

/* Sums and products of the common dtypes: acc = this rank's elements, then op each peer's in rank
 * order, in one pass span by span (tc_host_combine_all_to), where one call per peer read and wrote
 * acc p - 1 times: the same operations in the same order, so the same bits (an output may be an
 * input, in place: each vector is read before it is written). The result goes into the nout
 * outputs outs[] (this rank's first). False where it does not apply (nothing written): more than
 * FUSED_MAX ranks, other ops or dtypes. */
#define FUSED_MAX 64
static bool reduce_fused(slices_t *j, uint64_t k, int64_t t0, int64_t len, char *const *outs,
                         int nout, bool stream) {
  int p = j->g->p, me = j->g->me;
  bool prod;
  if (p > FUSED_MAX || !tc_mpi_op_host(j->op, &prod)) return false;
  const char *in[FUSED_MAX], *slot[FUSED_MAX];
  char *at[FUSED_MAX];
  void *zs[FUSED_MAX];
  for (int q = 0; q < p; q++) {
    in[q] = q == me ? j->src : tc_shm_peer_shared(j->g, q, k, TC_SHM_SHARED_IN);
    slot[q] = piece_of(j, q, k, me);
  }
  size_t es = j->es;
  span_t s = span_first(j, me, t0, len);
  do {
    for (int q = 0, x = 1; q < p; q++) { /* own first, then the peers in rank order */
      if (in[q]) prefetch_next(j, &s, in[q], NULL);
      at[q == me ? 0 : x++] =
          (char *)(in[q] ? in[q] + (size_t)s.at * es : slot[q] + (size_t)s.u * es);
    }
    for (int o = 0; o < nout; o++) zs[o] = outs[o] + (size_t)s.u * es;
    if (!tc_host_combine_all_to(at, 0, p, zs, nout, s.m, j->dtype, prod, j->divisor, stream))
      return false; /* (at the first span: the dtype, the same for all) */
  } while (span_next(j, &s));
  return true;
}

/* All_reduce: a rank reduces its piece straight into the outputs of the peers that have theirs in
 * the heap (one pass: reading the inputs, writing every rank's copy of the piece, as much traffic
 * as a memcpy of the input), and those peers copy nothing out in the gather call (its word says
 * the pieces are there). bench/heap-bench at 2 ranks, medians of three runs alternated with the
 * peers reading each reduced piece from its owner's output (from 8 MiB before) or slot: 16 MiB
 * 1.24-1.25x a memcpy of the input (1.40-1.47x), 4 MiB 172-181 us (232-269), 1 MiB 38-43 us
 * (70), 256 KiB 12.1-12.8 us (13.8-14.0). Up to FUSED_MAX ranks (outs[] is that long). */
static bool pushes(const slices_t *j) {
  return j->kind == TC_SLICES_ALL_REDUCE && j->g->p <= FUSED_MAX;
}

/* Where the piece at t0 goes in each peer's output that lies in the heap (outs[]); how many. */
static int push_targets(const slices_t *j, uint64_t k, int64_t t0, char **outs) {
  int n = 0;
  size_t at = (size_t)(dst_at(j, j->g->me, t0) - j->dst);
  for (int q = 0; q < j->g->p && pushes(j); q++) {
    const char *out = q == j->g->me ? NULL : tc_shm_peer_shared(j->g, q, k, TC_SHM_SHARED_OUT);
    if (out) outs[n++] = (char *)out + at;
  }
  return n;
}

/* This rank's piece of call k's chunk (elements [t0, t0 + len) of its block), reduced in rank
 * order (own (op) the first peer's, then (op) each further peer's, whatever the timing) into the
 * output (and the outputs it pushes into), and into its slot of the next call, the gather call,
 * whose parity every peer is done reading (they published this call): all_reduce copies it there
 * where peers read it from the slot, reduce off the root reduces straight into it (it has no
 * output), the root keeps it. (Streaming the output through a bounce buffer in cache, as a memcpy
 * of 16 MiB does, took 1.15-1.4x the time on the CI machine.) */
static int reduce_piece(slices_t *j, uint64_t k, int64_t t0, int64_t len) {
  int me = j->g->me, first = me == 0 ? 1 : 0;
  char *slot = piece_of(j, me, k + 1, me), *outs[FUSED_MAX];
  outs[0] = j->kind == TC_SLICES_REDUCE && me != j->root ? slot : dst_at(j, me, t0);
  char *acc = outs[0];
  int nout = 1 + push_targets(j, k, t0, outs + 1);
  int last = me == j->g->p - 1 ? me - 1 : j->g->p - 1;
  bool out_shared = j->calls.offset[TC_SHM_SHARED_OUT] != TC_HEAP_NONE;
  bool streams = j->stream && (j->kind == TC_SLICES_REDUCE_SCATTER || out_shared || nout > 1);
  bool fused =
      (nout > 1 || (j->g->p >= 3 && !streams)) && reduce_fused(j, k, t0, len, outs, nout, streams);
  for (int q = first; !fused && q < j->g->p; q++) {
    bool stream = streams && q == last;
    int rc =
        q == me ? TCOLL_SUCCESS : reduce_peer(j, k, q, q == first, q == last, stream, t0, len, acc);
    if (rc) return rc;
  }
  if (streams) tc_stream_fence();
  if (j->divisor != 1.0 && !j->divide_last && !fused)
    tc_host_divide(acc, j->dtype, len, j->divisor);
  for (int o = 1; o < nout && !fused; o++) memcpy(outs[o], acc, (size_t)len * j->es);
  /* (peers read an output in the heap in place, or were given the piece) */
  if (j->kind == TC_SLICES_ALL_REDUCE && !out_shared) memcpy(slot, acc, (size_t)len * j->es);
  return TCOLL_SUCCESS;
}

/* Whether every rank's input (all_reduce: and output) lies in the heap, as call k's words say: then
 * nothing goes through the slots, and the first call reduces this rank's whole block at once
 * (straight into the outputs), the calls after it only keeping the ranks in step: one pass over
 * the inputs rather than a chunk per call, each waiting for the slowest rank. Every rank reads the
 * same words, so all decide alike. */
static bool all_in_heap(const slices_t *j, uint64_t k) {
  if (j->kind == TC_SLICES_REDUCE) return false; /* (off the root, the piece goes to a slot) */
  bool out = j->kind == TC_SLICES_ALL_REDUCE;
  if (out && !pushes(j)) return false;
  for (int q = 0; q < j->g->p; q++)
    if (!tc_shm_peer_shared(j->g, q, k, TC_SHM_SHARED_IN) ||
        (out && !tc_shm_peer_shared(j->g, q, k, TC_SHM_SHARED_OUT)))
      return false;
  return true;
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
  if (i == 0) j->whole = all_in_heap(j, k);
  if (j->whole) {
    int64_t len = block_len(j, me);
    return i == 0 && len ? reduce_piece(j, k, 0, len) : TCOLL_SUCCESS;
  }
  int64_t c = call_chunk(j, i), t0 = c * j->piece;
  if (!gathers) {
    int64_t len = chunk_len(j, me, c);
    return len ? reduce_piece(j, k, t0, len) : TCOLL_SUCCESS;
  }
  if (pushes(j) && j->calls.offset[TC_SHM_SHARED_OUT] != TC_HEAP_NONE)
    return TCOLL_SUCCESS; /* every peer reduced its piece into this output */
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
  j->divide_last = j->divisor != 1.0 && tc_mpi_reduce_divides(c->dtype, c->op);
  j->stream = in_bytes >= STREAM_MIN_BYTES && (j->divisor == 1.0 || j->divide_last) &&
              kind != TC_SLICES_REDUCE;
  j->calls.shared[TC_SHM_SHARED_IN] = (tc_shm_share_t){c->src, in_bytes};
  if (kind == TC_SLICES_ALL_REDUCE) /* (pushes: the peers write their pieces into it) */
    j->calls.shared[TC_SHM_SHARED_OUT] = (tc_shm_share_t){c->dst, in_bytes};
  int64_t chunks = (block_len(j, 0) + j->piece - 1) / j->piece;
  /* Reduce-scatter calls see every peer; gather calls too, but reduce's off the root see none */
  bool sees_all = kind != TC_SLICES_REDUCE || g->me == j->root;
  const int sees[2] = {TC_SHM_SEES_ALL, sees_all ? TC_SHM_SEES_ALL : TC_SHM_SEES_NONE};
  return j->vector ? tc_shm_run_add(&w->sched, &j->calls, sees, 2, 2 * chunks)
                   : tc_shm_run_add(&w->sched, &j->calls, sees, 1, chunks);
}
