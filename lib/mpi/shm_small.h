/* The small shared-memory protocol (lib/node/segment.h's lines and slots), behind the `shm`
 * algorithms of all_reduce, reduce and broadcast: one protocol, so that their calls interleave on
 * a communicator in any order.
 *
 * Call k (the communicator's k-th small shm call, of whatever op: collectives are posted in the
 * same order on every rank, so k is the same everywhere) uses parity k % 2. Each rank that
 * contributes (all_reduce, reduce: every rank; broadcast: the root) copies its input into its line
 * of that parity, after the word and its size, when it fits (48 bytes: one cache line carries
 * them all, one miss per peer), else into its slot of that parity, and its size into the line;
 * then every rank publishes k in its line's word and waits for what it reads: every peer's word
 * of that parity at least k (all_reduce; reduce at the root), the root's (broadcast elsewhere), or
 * nothing (reduce off the root, broadcast at the root: done once published). Then each rank takes
 * what it needs (all_reduce: every rank reduces the p inputs in rank order, ((x0 op x1) op x2
 * ...), the same bits everywhere; reduce: the root does; broadcast: every rank copies the root's),
 * and notes k as finished. A rank writes call k only once its call k - 1 finished and every peer
 * published k - 1 (implied where call k - 1 waited for every peer, else waited for first).
 *
 * Why nothing is overwritten while a peer reads it: a rank rewrites the line and slot of call k
 * at call k + 2, after it saw every peer publish k + 1, which each peer did only after its call k
 * finished, i.e. after it read call k. Words only grow (64-bit, never reset), so no
 * old value passes for a new one. doc/guide.md, "Shared memory", has the argument at length.
 *
 * The shm algorithms' calls (tc_shm_small_build) run at their post as far as they can go where
 * nothing is to be waited for first (the usual post-wait loop): give and publish there, and the
 * take too where what it reads is published already; only the rest becomes steps. */
#ifndef TC_MPI_SHM_SMALL_H
#define TC_MPI_SHM_SMALL_H

#include "algo.h"

#include "../node/heap.h"
#include "../node/segment.h"

typedef enum { TC_SHM_ALL_REDUCE, TC_SHM_REDUCE, TC_SHM_BROADCAST } tc_shm_kind_t;

/* Whether the call fits: at least 2 ranks, a segment (made with the communicator), a payload no
 * larger than a slot. The same on every rank. */
bool tc_shm_small_supported(const tc_algo_query_t *q);
/* Appends call c's steps (c->root: reduce's and broadcast's root; broadcast: c->src is the root's
 * input, c->dst every rank's output). Keeps its state in the work's private bytes. */
int tc_shm_small_build(tc_work_t *w, const tc_algo_call_t *c, tc_shm_kind_t kind);
/* The same on segment g, whose ranks are not the work's communicator's (one node's of it:
 * hier.h; c->root is g's rank). Calls on g are built in the same order on its ranks. */
int tc_shm_small_build_on(tc_work_t *w, tc_node_seg_t *g, const tc_algo_call_t *c,
                          tc_shm_kind_t kind);

/* ---- the protocol's calls, for builders of other collectives on it (shm_slices.c: a large
 * collective is a run of calls, a chunk each) ---- */

enum { TC_SHM_SEES_ALL = -1, TC_SHM_SEES_NONE = -2 };
typedef struct tc_shm_call {
  /* Writes this rank's line and slot of the call's parity (NULL: this rank gives nothing); runs
   * once this rank may (its previous call finished, every peer published the one before). */
  int (*give)(void *arg);
  /* Reads what the call sees once it is published; must note the call finished
   * (tc_shm_finish) whatever happens. */
  int (*take)(void *arg);
  void *arg;
  int sees; /* TC_SHM_SEES_ALL, TC_SHM_SEES_NONE or a rank: whose words take waits for */
} tc_shm_call_t;

/* Appends the steps of the communicator's next call (its number in *k, the same on every rank).
 * Calls share the two parities in turn, so a builder that adds several reserves their steps
 * first (TC_SHM_CALL_STEPS each): a failure half-way would leave the ranks' counts apart. */
#define TC_SHM_CALL_STEPS 7
int tc_shm_call_add(tc_sched_t *s, tc_node_seg_t *g, const tc_shm_call_t *call, uint64_t *k);
/* A run of calls, a chunk each (shm_slices.c, all_gather/shm.c): the builder's give(r, i, k) and
 * take(r, i, k) for call i of the run (number k). The run keeps its calls in step across ranks:
 * after a take fails the later ones still run, taking nothing, and the first error is the run's
 * result, reported by a last step once every call ran (the communicator's next calls stay in
 * step). Embed it first in the builder's job.
 *
 * Symmetric storage (../node/heap.h): where the builder names this rank's input or output as
 * storage its peers may read in place (shared[]), the run publishes where each lies in this
 * rank's part of the heap with every call (tc_shm_peer_shared reads it), and then, after its
 * last call, waits until every peer's DONE word says it finished that call: the work completes
 * only once no peer reads this rank's storage any more (the user may then change it). Every rank
 * publishes its DONE word after its last call, whether or not it shared anything. */
typedef struct tc_shm_share {
  const void *p; /* NULL: nothing shared */
  size_t bytes;
} tc_shm_share_t;
enum { TC_SHM_SHARED_IN, TC_SHM_SHARED_OUT, TC_SHM_SHARED };
typedef struct tc_shm_run {
  tc_node_seg_t *g;
  int (*give)(struct tc_shm_run *r, int64_t i, uint64_t k);
  int (*take)(struct tc_shm_run *r, int64_t i, uint64_t k);
  tc_shm_share_t shared[TC_SHM_SHARED]; /* what peers may read in place (the builder's) */
  uint64_t offset[TC_SHM_SHARED];       /* where that lies in the heap, TC_HEAP_NONE: not there */
  uint64_t k0;                          /* the first call's number (the others follow it) */
  int64_t gave, took;                   /* calls whose give, whose take ran (they run in order) */
  int rc;                               /* the first error */
} tc_shm_run_t;
/* Appends n calls of run r, call i seeing sees[i % period] (TC_SHM_SEES_*, or a rank), their
 * steps reserved first, then the DONE word's steps, then the step that reports the run's
 * result. */
int tc_shm_run_add(tc_sched_t *s, tc_shm_run_t *r, const int *sees, int period, int64_t n);
/* Whether rank q shared what (TC_SHM_SHARED_IN or _OUT) for call k, and where it lies in this
 * process's addresses (NULL: not shared; read it from q's slot). For a take of call k. */
const char *tc_shm_peer_shared(const tc_node_seg_t *g, int q, uint64_t k, int what);
/* Notes call k finished on this rank: its reads of the peers' lines and slots are done. */
static inline void tc_shm_finish(tc_node_seg_t *g, uint64_t k) {
  __atomic_store_n(&g->small_finished, k, __ATOMIC_RELEASE);
}
/* The bytes of the whole collective, published beside the word (give), and checked against
 * rank q's (take): ranks that disagree wrote an erroneous program (MPI reports it as truncation,
 * or not at all), and reading past a peer's bytes would take garbage for data. */
void tc_shm_give_bytes(tc_node_seg_t *g, uint64_t k, uint64_t bytes);
int tc_shm_check_bytes(const tc_node_seg_t *g, int q, uint64_t k, uint64_t mine);

#endif
