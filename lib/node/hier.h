/* Two levels for a communicator whose ranks span several nodes: each node's ranks share a segment
 * of their own, and one leader per node (its lowest rank in the communicator) talks to the other
 * nodes' leaders through MPI. The `hier` algorithms (lib/mpi/<op>/hier.c) run a node-local phase
 * on the segment, an MPI step among the leaders, and a node-local release.
 *
 * A node is what the MPI's shared split says, within the ranks that share this rank's node key
 * (window.h): so MPICH's pretend nodes (MPIR_CVAR_NUM_CLIQUES) are nodes here too. Made with the
 * communicator when its ranks are not on one node (segment.c's tc_node_attach), decided by every
 * rank together: where the MPI's groups are inconsistent (one rank's node does not list it, as Open
 * MPI's shared split over two network namespaces of one hostname), where some node's segment
 * cannot be made, or where TCOLL_SHM=0, every rank keeps the MPI paths. */
#ifndef TC_NODE_HIER_H
#define TC_NODE_HIER_H

#include "segment.h"

typedef struct tc_node_hier {
  int nodes;            /* how many */
  tc_node_seg_t *local; /* this node's segment; NULL where this rank is alone on its node */
  bool leader;          /* this rank is its node's leader (local rank 0) */
  MPI_Comm leaders;     /* the leaders, in communicator order; MPI_COMM_NULL off the leaders */
  size_t max_bytes;     /* the largest payload every node's slots hold (the same everywhere) */
  MPI_Comm node;        /* this node's ranks of the communicator (local's control traffic) */
  /* [p], by communicator rank q: the rank in leaders of q's node's leader, and q's rank on its
   * node (in local) */
  int *leader_of, *local_of;
} tc_node_hier_t;

/* The two levels of comm, or NULL (the same verdict on every rank); logs at INFO what it decided.
 * Collective on comm's control communicator. */
tc_node_hier_t *tc_node_hier_make(tcoll_comm_t *comm);
/* comm's two levels; NULL where it has none. */
static inline tc_node_hier_t *tc_node_hier_of(const tcoll_comm_t *comm) {
  return __atomic_load_n(&comm->shm, __ATOMIC_ACQUIRE) ? comm->hier : NULL;
}
/* Frees h (collective: comm's ranks free it together). */
void tc_node_hier_free(tc_node_hier_t *h);
/* Forgets h without the collective frees (a communicator that lost a rank). */
void tc_node_hier_drop(tc_node_hier_t *h);

#endif
