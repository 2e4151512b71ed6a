/* Two levels across nodes (see hier.h). */
#include "hier.h"

#include "../drive.h"
#include "../mpiglue/mpi_calls.h"
#include "window.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

/* The ranks of c sharing this rank's node key (the color: the lowest of them), a communicator of
 * their own in *same. */
static bool split_by_key(tcoll_comm_t *c, MPI_Comm *same) {
  uint64_t h = tc_node_key_hash(), *keys = malloc((size_t)c->size * sizeof *keys);
  int have = keys != NULL, color = c->rank;
  if (!tc_node_agree(c->ctrl, have) ||
      tc_mpi_allgather(&h, 1, MPI_UINT64_T, keys, 1, MPI_UINT64_T, c->ctrl, true) != MPI_SUCCESS) {
    free(keys);
    return false;
  }
  for (int r = c->size - 1; r >= 0; r--)
    if (keys[r] == h) color = r;
  free(keys);
  return tc_rendezvous(c->ctrl) == MPI_SUCCESS &&
         PMPI_Comm_split(c->ctrl, color, c->rank, same) == MPI_SUCCESS;
}

/* Whether the nodes every rank names are a partition of c: each rank's node (named by its lowest
 * rank) holds as many ranks as name it, and its lowest rank names it too. How many in *nodes. */
static bool partition(const int *ids, const int *sizes, int p, int *nodes) {
  *nodes = 0;
  for (int q = 0; q < p; q++) {
    int named = 0;
    for (int r = 0; r < p; r++) named += ids[r] == ids[q];
    if (ids[q] < 0 || ids[q] >= p || ids[ids[q]] != ids[q] || named != sizes[q]) return false;
    *nodes += ids[q] == q;
  }
  return true;
}

/* Each rank's node's leader among the leaders (split by rank: leaders in rank order) and its rank
 * on its node (split by rank too), from every rank's node id (its lowest rank). */
static bool place_ranks(tc_node_hier_t *h, const int *ids, int p) {
  h->leader_of = malloc((size_t)p * sizeof *h->leader_of);
  h->local_of = malloc((size_t)p * sizeof *h->local_of);
  if (!h->leader_of || !h->local_of) return false;
  for (int q = 0; q < p; q++) {
    h->leader_of[q] = h->local_of[q] = 0;
    for (int r = 0; r < ids[q]; r++) h->leader_of[q] += ids[r] == r;
    for (int r = 0; r < q; r++) h->local_of[q] += ids[r] == ids[q];
  }
  return true;
}

/* This rank's node: the MPI's shared split of the ranks with its key (MPICH's cliques make
 * several of one host), checked by every rank to be the same partition everywhere. */
static bool split_nodes(tcoll_comm_t *c, tc_node_hier_t *h, char *why, size_t len) {
  MPI_Comm same = MPI_COMM_NULL;
  int ok = split_by_key(c, &same);
  if (ok) PMPI_Comm_set_errhandler(same, MPI_ERRORS_RETURN);
  if (ok)
    ok = PMPI_Comm_split_type(same, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &h->node) ==
         MPI_SUCCESS;
  if (same != MPI_COMM_NULL) PMPI_Comm_free(&same);
  int mine[2] = {-1, 0}, *all = malloc((size_t)c->size * sizeof mine);
  if (ok) {
    PMPI_Comm_set_errhandler(h->node, MPI_ERRORS_RETURN);
    mine[0] = c->rank; /* the node's lowest rank of c: its rank 0 (split by c's rank) */
    ok = PMPI_Bcast(&mine[0], 1, MPI_INT, 0, h->node) == MPI_SUCCESS &&
         PMPI_Comm_size(h->node, &mine[1]) == MPI_SUCCESS;
  }
  if (!tc_node_agree(c->ctrl, ok && all != NULL)) {
    snprintf(why, len, "splitting it by node failed (or no memory)");
    free(all);
    return false;
  }
  ok = tc_mpi_allgather(mine, 2, MPI_INT, all, 2, MPI_INT, c->ctrl, true) == MPI_SUCCESS;
  int *ids = all, *sizes = malloc((size_t)c->size * sizeof *sizes);
  ok = ok && sizes;
  for (int q = 0; ok && q < c->size; q++) sizes[q] = all[2 * q + 1], ids[q] = all[2 * q];
  if (ok && !partition(ids, sizes, c->size, &h->nodes))
    ok = 0, snprintf(why, len, "the MPI's shared split gives groups that overlap");
  if (ok && h->nodes < 2) ok = 0, snprintf(why, len, "one node");
  if (ok && h->nodes == c->size) ok = 0, snprintf(why, len, "one rank per node: nothing to share");
  if (ok && !place_ranks(h, ids, c->size)) ok = 0, snprintf(why, len, "no memory");
  free(sizes);
  free(all);
  return tc_node_agree(c->ctrl, ok); /* (each checked every rank's: only memory differs) */
}

/* The node's segment (none for a rank alone on its node) and the largest payload all hold. */
static bool make_local(tcoll_comm_t *c, tc_node_hier_t *h, char *why, size_t len) {
  int n = 0, me = 0;
  PMPI_Comm_size(h->node, &n);
  PMPI_Comm_rank(h->node, &me);
  h->leader = me == 0;
  if (n > 1) h->local = tc_node_seg_make(h->node, n, me, why, len);
  if (!tc_node_agree(c->ctrl, n == 1 || h->local)) return false;
  /* (signed: MPICH 4.0.2's MPI_MIN on MPI_UNSIGNED_LONG_LONG compares as signed, and takes
   * ULLONG_MAX for the least) */
  long long mine = h->local ? (long long)h->local->slot_bytes : LLONG_MAX, least = 0;
  if (tc_mpi_allreduce(&mine, &least, 1, MPI_LONG_LONG, MPI_MIN, c->ctrl, true) != MPI_SUCCESS)
    return false;
  h->max_bytes = (size_t)least;
  return true;
}

static bool make_leaders(tcoll_comm_t *c, tc_node_hier_t *h) {
  int ok =
      tc_rendezvous(c->ctrl) == MPI_SUCCESS &&
      PMPI_Comm_split(c->ctrl, h->leader ? 0 : MPI_UNDEFINED, c->rank, &h->leaders) == MPI_SUCCESS;
  if (ok && h->leader) ok = PMPI_Comm_set_errhandler(h->leaders, MPI_ERRORS_RETURN) == MPI_SUCCESS;
  return tc_node_agree(c->ctrl, ok);
}

tc_node_hier_t *tc_node_hier_make(tcoll_comm_t *c) {
  char why[256] = "", label[TC_COMM_NAME_LEN + 16];
  tc_node_hier_t *h = calloc(1, sizeof *h);
  if (h) *h = (tc_node_hier_t){.leaders = MPI_COMM_NULL, .node = MPI_COMM_NULL};
  int ok = h && tc_set.shm;
  if (!ok) snprintf(why, sizeof why, h ? "TCOLL_SHM=0" : "no memory");
  if (!tc_node_agree(c->ctrl, ok) || !split_nodes(c, h, why, sizeof why) ||
      !make_local(c, h, why, sizeof why) || !make_leaders(c, h)) {
    tc_info("communicator %s: no two levels (%s)", tc_comm_label(c, label, sizeof label),
            why[0] ? why : "another rank could not make them");
    tc_node_hier_free(h);
    return NULL;
  }
  tc_info("communicator %s: two levels, %d nodes, %d ranks on this one; payloads up to %zu bytes",
          tc_comm_label(c, label, sizeof label), h->nodes, h->local ? h->local->p : 1,
          h->max_bytes);
  return h;
}

void tc_node_hier_drop(tc_node_hier_t *h) {
  if (!h) return;
  free(h->leader_of);
  free(h->local_of);
  free(h); /* (its segment's own memory stays: MPI frees the window at finalize) */
}

void tc_node_hier_free(tc_node_hier_t *h) {
  if (!h) return;
  tc_node_seg_free(h->local); /* (only this process's memory once MPI is finalized) */
  int fin = 0;
  PMPI_Finalized(&fin);
  if (!fin && h->leaders != MPI_COMM_NULL) PMPI_Comm_free(&h->leaders);
  if (!fin && h->node != MPI_COMM_NULL) PMPI_Comm_free(&h->node);
  tc_node_hier_drop(h);
}
