/* A communicator's node-shared segment: memory every rank of the communicator maps, when they all
 * run on one node.
 *
 * Made from MPI_Win_allocate_shared (portable MPI-3) over MPI_Comm_split_type(SHARED) when the
 * communicator is made (a collective call every rank makes; init hooks it into tc_comm_wrap), not
 * at its first collective: a nonblocking post must not wait for its peers, and one that never
 * comes would hang it where no TCOLL_TIMEOUT reaches. Decided once by every rank together: where
 * it cannot be made (TCOLL_SHM=0 on any rank, ranks on several nodes, too little
 * room in /dev/shm, a refused or unpopulatable allocation) every rank learns so at the same call
 * and the communicator keeps its MPI paths. Freed with its communicator and at finalize.
 *
 * Each rank owns an area of TCOLL_SHM_BYTES (the smallest any rank asked for), first touched by
 * its owner (so it lies in the owner's NUMA memory): a header of single-writer words, each on a
 * cache line of its own, then two slots. Protocols on it (doc/guide.md, "Shared memory") use
 * monotonic 64-bit words that are never reset: the owner writes its slot, then publishes a word
 * with a release store; a reader acquires the word and only then reads the slot. */
#ifndef TC_NODE_SEGMENT_H
#define TC_NODE_SEGMENT_H

#include "../comm.h"

#include <stdint.h>

#define TC_NODE_LINE 64
/* The header's lines (an area's first bytes): each starts with a word its owner publishes. */
enum {
  TC_NODE_LINE_SMALL0, /* the small protocol's even calls: their number, and a tiny payload */
  TC_NODE_LINE_SMALL1, /* its odd calls */
  TC_NODE_LINE_DONE,   /* the last call whose reads of its peers' memory this rank finished (runs
                          of calls that read symmetric storage in place: ../mpi/shm_small.h) */
  TC_NODE_LINES
};
#define TC_NODE_HEADER 256 /* bytes before the slots (room for more lines) */

typedef struct tc_node_seg {
  int p, me;
  size_t area;       /* bytes each rank owns */
  size_t slot_bytes; /* bytes of each of an area's two slots */
  char **areas;      /* [p]: each rank's area, in this process's addresses */
  char **heap;       /* [p]: each rank's part of the symmetric heap (heap.h) in this process's
                        addresses; NULL where some rank of the communicator has none */
  uint64_t **peers;  /* [line * p + q]: rank q's word of line, NULL for this rank's own (what a
                        reader of every peer awaits at once: tc_sched_await_all) */
  /* The small protocol's state on this rank (its calls are built in the same order on every
   * rank: a collective's order on the communicator). */
  uint64_t small_calls;    /* small calls built so far */
  uint64_t small_finished; /* the last one whose reads of its peers' slots are done (a word) */
  bool small_last_saw_all; /* the last one built waits for every peer's number */
  MPI_Comm node;
  MPI_Win win;
} tc_node_seg_t;

/* Makes comm's segment, or decides it has none (the same on every rank), and logs at INFO what
 * it decided. Collective on comm: called as it is made (tc_comm_set_create). */
void tc_node_attach(tcoll_comm_t *comm);

/* comm's segment; NULL where it has none. */
static inline tc_node_seg_t *tc_node_of(const tcoll_comm_t *comm) {
  return __atomic_load_n(&comm->shm, __ATOMIC_ACQUIRE) > 0 ? comm->node : NULL;
}

/* A segment over the ranks of ctrl (one node's ranks of a communicator spanning several: hier.h),
 * without the symmetric heap's view; NULL where not made (the same on every rank; why: this
 * rank's reason). Collective on ctrl. */
tc_node_seg_t *tc_node_seg_make(MPI_Comm ctrl, int size, int rank, char *why, size_t len);
/* Frees it (collective: its ranks free it together). */
void tc_node_seg_free(tc_node_seg_t *s);

/* Frees comm's segment, if it has one (collective: comm's ranks free comm together). */
void tc_node_release(tcoll_comm_t *comm);

static inline char *tc_node_line(const tc_node_seg_t *s, int rank, int line) {
  return s->areas[rank] + (size_t)line * TC_NODE_LINE;
}
/* A line's word: its first 8 bytes (what the rest holds is the protocol's: ../mpi/shm_small.c). */
static inline uint64_t *tc_node_word(const tc_node_seg_t *s, int rank, int line) {
  return (uint64_t *)tc_node_line(s, rank, line);
}
/* Every peer's word of line, p entries (this rank's own NULL). */
static inline uint64_t *const *tc_node_peer_words(const tc_node_seg_t *s, int line) {
  return s->peers + (size_t)line * (size_t)s->p;
}
static inline char *tc_node_slot(const tc_node_seg_t *s, int rank, int k) {
  return s->areas[rank] + TC_NODE_HEADER + (size_t)k * s->slot_bytes;
}

#endif
