/* The shared-memory all_gather (TCOLL_ALGO all_gather:shm), along any dim, host tensors: a run of
 * the small protocol's calls (../shm_small.h), a chunk each. Call c: every rank copies bytes
 * [c S, (c + 1) S) of its input (contiguous whatever the dim) into its slot (S bytes) and
 * publishes; once every peer published, every rank copies each peer's chunk from the peer's slot
 * straight into its places in the output (along a dim other than 0: one run per outer row, the
 * same code as dim 0 with more rows: place.h), and its own chunk from its input. One copy in and
 * one strided copy out per byte, so dim != 0 costs what dim 0 costs (an input from the symmetric
 * heap is not copied in: peers read it where it lies, shm_small.h); outputs from 8 MiB along
 * a dim other than 0 are written with streaming stores (as cma.c's). It needs no cross-memory
 * attach (containers forbid it) and no MPI call. */
#include "../shm_small.h"
#include "place.h"

#include <limits.h>
#include <string.h>

typedef struct gather {
  tc_shm_run_t calls; /* first: the run's callbacks get it */
  tc_node_seg_t *g;
  const char *in;
  tc_gather_out_t out;
  size_t total; /* bytes of each rank's block */
} gather_t;

static size_t chunk_at(const gather_t *j, int64_t i) { return (size_t)i * j->g->slot_bytes; }
static size_t chunk_len(const gather_t *j, int64_t i) {
  size_t left = j->total - chunk_at(j, i);
  return left < j->g->slot_bytes ? left : j->g->slot_bytes;
}

static int give(tc_shm_run_t *r, int64_t i, uint64_t k) {
  gather_t *j = (gather_t *)r;
  tc_shm_give_bytes(j->g, k, j->total);
  if (r->offset[TC_SHM_SHARED_IN] != TC_HEAP_NONE) return TCOLL_SUCCESS; /* read in place */
  memcpy(tc_node_slot(j->g, j->g->me, (int)(k & 1)), j->in + chunk_at(j, i), chunk_len(j, i));
  return TCOLL_SUCCESS;
}

static int take(tc_shm_run_t *r, int64_t i, uint64_t k) {
  gather_t *j = (gather_t *)r;
  size_t f0 = chunk_at(j, i), f1 = f0 + chunk_len(j, i);
  for (int q = 0; q < j->g->p; q++) {
    int rc = q == j->g->me ? TCOLL_SUCCESS : tc_shm_check_bytes(j->g, q, k, j->total);
    if (rc) return rc;
  }
  /* starting with the next rank, so that ranks read different peers at a time */
  for (int d = 1; d < j->g->p; d++) {
    int q = (j->g->me + d) % j->g->p;
    const char *in = tc_shm_peer_shared(j->g, q, k, TC_SHM_SHARED_IN);
    tc_gather_place(&j->out, q, in ? in + f0 : tc_node_slot(j->g, q, (int)(k & 1)), f0, f1);
  }
  tc_gather_place(&j->out, j->g->me, j->in + f0, f0, f1);
  if (j->out.stream) tc_stream_fence(); /* the output is the user's once the work completes */
  return TCOLL_SUCCESS;
}

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  tc_node_seg_t *g = w->comm->node;
  gather_t *j = tc_work_small(w, sizeof *j);
  if (!j) return TCOLL_ERR_NO_MEMORY;
  *j = (gather_t){.calls = {.g = g, .give = give, .take = take},
                  .g = g,
                  .in = c->src,
                  .out = {c->dst, c->run, g->p, tc_gather_streamed(c->run, c->outer, g->p)},
                  .total = c->run * (size_t)c->outer};
  j->calls.shared[TC_SHM_SHARED_IN] = (tc_shm_share_t){c->src, j->total};
  int64_t calls = (int64_t)((j->total + g->slot_bytes - 1) / g->slot_bytes);
  const int sees[1] = {TC_SHM_SEES_ALL};
  return tc_shm_run_add(&w->sched, &j->calls, sees, 1, calls);
}

/* Host tensors (it is built on the tensors themselves), at least 2 ranks with a segment, and few
 * enough chunks for a schedule (steps are counted in int). */
static bool supported(const tc_algo_query_t *q) {
  if (q->count <= 0 || q->device || q->comm->size < 2) return false;
  tc_node_seg_t *g = tc_node_of(q->comm);
  return g && q->bytes / (size_t)g->p / g->slot_bytes < (size_t)INT_MAX / (2 * TC_SHM_CALL_STEPS);
}

const tc_algo_t tc_all_gather_shm = {
    .name = "shm", .layouts = TC_LAYOUT_ANY, .supported = supported, .build = build};
