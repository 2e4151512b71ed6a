/* Communicators: what the library keeps for each one. */
#ifndef TC_COMM_H
#define TC_COMM_H

#include "base/base.h"

#define TC_COMM_MAGIC 0x74636f6du /* "tcom": catches freed or foreign pointers */
#define TC_COMM_NAME_LEN 64

typedef enum {
  TC_COMM_WORLD,  /* owned by the library */
  TC_COMM_USER,   /* from_mpi, split, init_rank: freed by tcoll_comm_free */
  TC_COMM_CACHED, /* from rank lists: reference counted, shared by equal requests */
  TC_COMM_MESH    /* a mesh slice: freed with its mesh */
} tc_comm_kind_t;

struct tcoll_comm {
  uint32_t magic;
  tc_comm_kind_t kind;
  MPI_Comm mpi;   /* collectives; MPI_ERRORS_RETURN */
  MPI_Comm ctrl;  /* control traffic (checks, rendezvous), kept off the collective stream */
  MPI_Comm sched; /* the schedule engine's messages and late-posted collectives (sched/) */
  int rank, size;
  uint32_t id; /* process-local, for logs */
  char name[TC_COMM_NAME_LEN];
  uint64_t seq; /* collectives posted on this communicator (atomic) */
  /* the seq of a collective whose DETAIL check timed out (atomic; 0: none) */
  uint64_t detail_timed_out;
  int cma; /* whether every rank may read every other's memory with process_vm_readv
              (mpi/cma.h): 0 not probed yet, 1 yes, -1 no */
  /* the node-shared segment (lib/node): 0 not decided yet, 1 made (node), -1 none */
  int shm;
  struct tc_node_seg *node;
  /* where its ranks span several nodes and each node's ranks have a segment: the two levels
   * (lib/node/hier.h); NULL otherwise. Decided with shm. */
  struct tc_node_hier *hier;
  /* TC_COMM_CACHED: the request it answers, and how many holders it has. */
  const tcoll_comm_t *key_parent;
  int *key_ranks;
  int key_n;
  char *key_tag;
  int refcount;
  struct tcoll_comm *next; /* list of live communicators */
};

/* comm == NULL resolves to the world communicator; anything but a live communicator is an
 * error naming argname. */
int tc_comm_resolve_any(tcoll_comm_t *comm, const char *argname, tcoll_comm_t **out);
/* The same, with the world communicator (the usual argument, NULL) resolved where it is asked
 * for: every call resolves one. */
static inline int tc_comm_resolve(tcoll_comm_t *comm, const char *argname, tcoll_comm_t **out) {
  if (!comm && TC_LIKELY(tc_initialized())) {
    *out = tc_g.world;
    return TCOLL_SUCCESS;
  }
  return tc_comm_resolve_any(comm, argname, out);
}
/* Wraps an MPI communicator the library now owns (sets errors-return, dups a control comm). */
int tc_comm_wrap(MPI_Comm mpi, tc_comm_kind_t kind, tcoll_comm_t **out);
/* Completes the communicator's pending work, then frees it (no checks). */
void tc_comm_destroy(tcoll_comm_t *comm);
/* What completes a communicator's pending work before it is destroyed (init sets it). */
void tc_comm_set_drain(void (*drain)(const tcoll_comm_t *));
/* What makes a communicator's resources in rooms above this one as tc_comm_wrap makes it (init
 * sets it: collective, as the wrapping is). */
void tc_comm_set_create(void (*create)(tcoll_comm_t *));
/* What frees a communicator's resources in rooms above this one, after its work completed, before
 * its MPI communicators go (init sets it: collective, as the destruction is). */
void tc_comm_set_release(void (*release)(tcoll_comm_t *));
/* Next collective sequence number on comm (1-based). */
uint64_t tc_comm_next_seq(tcoll_comm_t *comm);
/* "'name'" or "#id" for messages. */
const char *tc_comm_label(const tcoll_comm_t *comm, char *buf, size_t len);
/* The same for a communicator known by its id, live or freed since (its last name). */
const char *tc_comm_label_of(uint32_t id, char *buf, size_t len);

/* Live communicator list (lookup, rank-list cache, finalize). */
void tc_comms_lock(void);
void tc_comms_unlock(void);
tcoll_comm_t *tc_comms_first(void); /* under tc_comms_lock */
void tc_comms_destroy_all(void);
/* Frees the meshes the user did not free, with their slices (at finalize, before the rest). */
void tc_meshes_destroy_all(void);

#endif
