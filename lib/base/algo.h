/* Algorithm names: which collectives have more than one way to run, what each way is called
 * in TCOLL_ALGO, and the override parsed from it. The choice itself is made per call in
 * sched/select.c. */
#ifndef TC_ALGO_H
#define TC_ALGO_H

#include "base.h"

/* The collectives whose algorithm can be chosen. */
typedef enum {
  TC_OP_ALL_REDUCE,
  TC_OP_REDUCE_SCATTER,
  TC_OP_ALL_GATHER,
  TC_OP_BROADCAST,
  TC_OP_ALL_TO_ALL,      /* all_to_all_single, permute, shard_dim_all_to_all */
  TC_OP_REDUCE,
  TC_OP_ALL_TO_ALL_LIST, /* all_to_all with a list of tensors: its literal mapping packs them */
  TC_NUM_ALGO_OPS
} tc_algo_op_t;

typedef enum {
  TC_ALGO_AUTO,           /* the table decides */
  TC_ALGO_MPI,            /* the literal mapping onto one MPI call (DESIGN.md section 3) */
  TC_ALGO_RING,           /* reduce_scatter: ring of sends and local reductions;
                             all_reduce: ring reduce_scatter + ring all-gather;
                             reduce: ring reduce_scatter + each block sent to the root */
  TC_ALGO_ALLTOALL,       /* reduce_scatter: MPI_Ialltoall + local reduction in rank order */
  TC_ALGO_RING_ALLGATHER, /* all_reduce: ring reduce_scatter + MPI_Iallgatherv */
  TC_ALGO_SCATTERED,      /* all_to_all_single, permute, shard_dim_all_to_all, all_to_all (list):
                             every block its own MPI_Isend / MPI_Irecv, all posted at once, this
                             rank's own block copied locally (shard_dim: sent to itself) */
  TC_ALGO_CMA,            /* all_gather of host tensors with every rank on one node: each rank
                             reads its peers' inputs straight into its output with
                             process_vm_readv (cross-memory attach; sched/cma.c) */
  TC_NUM_ALGOS
} tc_algo_t;

/* "all_reduce", "ring"... */
const char *tc_algo_op_name(tc_algo_op_t op);
const char *tc_algo_name(tc_algo_t algo);
/* Whether op can run algo (TC_ALGO_AUTO and TC_ALGO_MPI: every op). */
bool tc_algo_offered(tc_algo_op_t op, tc_algo_t algo);

/* The override per op from TCOLL_ALGO / tcoll_config_t.algo: TC_ALGO_AUTO where none. */
extern tc_algo_t tc_algo_forced[TC_NUM_ALGO_OPS];
/* Parses "auto", "mpi" or "op:algorithm,op:algorithm..." (also "mpi,reduce_scatter:ring": a
 * bare name applies to every op) into forced[]. what names the setting in messages. */
int tc_algo_parse(const char *spec, const char *what, tc_algo_t forced[TC_NUM_ALGO_OPS]);

#endif
