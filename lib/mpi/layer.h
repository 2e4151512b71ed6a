/* The drop-in layer's one internal header (lib/pmpi, libtcoll-mpi.so): what tcoll's table would
 * run a call with, so that the layer routes to tcoll only the calls where tcoll's algorithm beats
 * the MPI call, and passes the others to PMPI_* untouched. Includes only the public header: the
 * layer sees nothing else of the library. Not installed; not a public API. */
#ifndef TC_MPI_LAYER_H
#define TC_MPI_LAYER_H

#include "tcoll.h"

#include <stdbool.h>
#include <stdint.h>

/* The collectives the layer can route (the ops of tcoll's tables). */
typedef enum {
  TCOLL_LAYER_ALL_REDUCE,
  TCOLL_LAYER_REDUCE_SCATTER,
  TCOLL_LAYER_ALL_GATHER,
  TCOLL_LAYER_BROADCAST,
  TCOLL_LAYER_ALL_TO_ALL,
  TCOLL_LAYER_REDUCE,
  TCOLL_LAYER_NUM_OPS
} tcoll_layer_op_t;

/* The algorithm (its tcoll_last_algorithm() name) that tcoll's table, or TCOLL_ALGO, picks for a
 * call of op on comm with host buffers, where the layer measured such a call (blocking: the
 * program's blocking call; else its nonblocking or persistent one) beating MPI's; or NULL: the
 * call passes to MPI (layer.c's rows; TCOLL_ALGO forcing an algorithm on op routes regardless).
 * count: elements of dtype in all_reduce's, reduce's and broadcast's vector, reduce_scatter's
 * input, all_gather's own block, all_to_all's block. redop: -1 for ops without one. The same on
 * every rank for the same arguments; it may make a collective call on comm (a probe the first time
 * an algorithm asks): every rank of comm must ask. */
TCOLL_API const char *tcoll_layer_verdict(tcoll_layer_op_t op, bool blocking, tcoll_comm_t *comm,
                                          int64_t count, tcoll_dtype_t dtype, int redop);

/* What tcoll's table (or TCOLL_ALGO) picks for such a call whatever the layer measured, "mpi" (the
 * literal mapping onto one nonblocking MPI call) included: for calls the layer routes because the
 * MPI's own form is wrong (MPICH 4.0's persistent collectives). Else as tcoll_layer_verdict. */
TCOLL_API const char *tcoll_layer_algorithm(tcoll_layer_op_t op, tcoll_comm_t *comm, int64_t count,
                                            tcoll_dtype_t dtype, int redop);

/* Whether the running MPI's own persistent collectives are wrong (MPICH before 4.1): the layer then
 * routes every persistent call tcoll serves (tcoll_layer_algorithm). Valid after tcoll_init. */
TCOLL_API bool tcoll_layer_mpi_persistent_wrong(void);

/* The program's MPI_Finalize may reach MPI without the layer (MPICH's mpi_f08 calls
 * PMPI_Finalize): tcoll then shuts down inside it without a warning. */
TCOLL_API void tcoll_layer_expect_mpi_finalize(void);
/* Before tcoll_init: no symmetric heap (the layer moves programs' own buffers, never storage
 * tcoll allocates; the heap would only take memory). */
TCOLL_API void tcoll_layer_no_symmetric_heap(void);

/* Where an MPI program's buffer p lives: a device ordinal (device memory, which an MPI that is not
 * CUDA-aware cannot read: the layer stages it through host memory), or TCOLL_HOST (host or
 * managed memory, or no device backend). Never creates a device context (in a process where no
 * device has one, no buffer can be device memory); one load where tcoll has no devices. */
TCOLL_API int tcoll_layer_pointer_device(const void *p);

/* At least bytes of page-locked host memory for a host mirror of a device buffer (tcoll's staging
 * pool: copies to and from devices run at full speed, and no allocation in steady state; pageable
 * memory with a warning where no page-locked memory can be had), or NULL where no memory can be
 * had at all; tcoll_layer_host_put returns it once nothing uses it. */
TCOLL_API void *tcoll_layer_host_get(size_t bytes);
TCOLL_API void tcoll_layer_host_put(void *p);

/* Whether the calling thread is one of tcoll's own (its progress or bootstrap thread). The layer's
 * hook in MPI's progress loop runs inside any MPI call, theirs too, and must not enter tcoll
 * there. */
TCOLL_API bool tcoll_layer_internal_thread(void);

/* Whether each rank on this node has a core for itself and one for a helper thread (the ranks
 * the launcher says share the node against the cores this process may use). */
TCOLL_API bool tcoll_layer_spare_core(void);

#endif
