/* The pieces of the two-level algorithms (`hier`: all_reduce/hier.c, broadcast/hier.c,
 * reduce/hier.c) on a communicator spanning several nodes (../node/hier.h): a phase on each
 * node's segment through the small protocol (shm_small.h), a step among the node leaders through
 * MPI, in that order on every rank. */
#ifndef TC_MPI_HIER_H
#define TC_MPI_HIER_H

#include "shm_small.h"

#include "../node/hier.h"

/* Whether the call fits: two levels, an element every node's slots hold, and few enough chunks
 * for a schedule. The same on every rank. */
bool tc_hier_supported(const tc_algo_query_t *q);

/* Builds call c as a run of chunks of at most max_bytes each, one after the other (each chunk's
 * phases complete on a node before the next chunk's start there; the leaders' step of one chunk
 * overlaps nothing of the next's): chunk(w, part, at, arg) builds part, c's elements [at, at +
 * part->n) (src and dst moved there; NULL stays NULL). Reserves the steps first, so that no rank
 * stops half-way for memory where the others go on. */
typedef int (*tc_hier_chunk_fn)(tc_work_t *w, const tc_algo_call_t *part, int64_t at, void *arg);
int tc_hier_build_chunked(tc_work_t *w, const tc_algo_call_t *c, tc_hier_chunk_fn chunk, void *arg);

/* A phase on this rank's node: kind (TC_SHM_REDUCE, TC_SHM_BROADCAST) with c->root a rank of the
 * node (local numbering). On a node of one rank (no segment): its src to its dst (scaled by
 * c->premul for a reduce), where they differ. */
int tc_hier_node_phase(tc_work_t *w, const tc_node_hier_t *h, const tc_algo_call_t *c,
                       tc_shm_kind_t kind);

/* The leaders' step (leaders only: others add nothing): what (TC_COLL_ALLREDUCE, _BCAST,
 * _REDUCE) on buf in place, root a rank of the leaders' communicator. */
int tc_hier_leaders_step(tc_sched_t *s, const tc_node_hier_t *h, tc_coll_kind_t what, void *buf,
                         const tc_algo_call_t *c, int root);

#endif
