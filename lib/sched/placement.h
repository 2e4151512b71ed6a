/* Placement: whether MPI is handed a device buffer directly or the data is staged through host
 * memory. Decided from what MPI says about device buffers (found at init) and TCOLL_CUDA_AWARE. */
#ifndef TC_PLACEMENT_H
#define TC_PLACEMENT_H

#include "../device/device.h"

/* Kinds of MPI call, as CUDA-aware MPIs differ in which take device buffers. */
typedef enum {
  TC_MPI_BLOCKING = 0,        /* blocking point-to-point and collectives */
  TC_MPI_NONBLOCKING_COLL = 1 /* MPI_I* collectives (what tcoll's functional collectives post) */
} tc_mpi_kind_t;

/* Asks MPI what it does with device buffers (after MPI_Init). */
void tc_placement_init(void);
/* Whether MPI may be handed device pointers of this backend directly for that kind of call:
 * TCOLL_CUDA_AWARE=0 never, =1 always (emulated devices included: their memory is host memory,
 * which tests the direct path); auto: the CUDA backend and MPIX_Query_cuda_support(), except
 * nonblocking collectives on Open MPI before 5 (which rejects device buffers there). */
bool tc_mpi_device_direct(tc_mpi_kind_t kind);
/* "MPI CUDA-aware: no (...); device buffers of nonblocking collectives: staged", for logs. */
const char *tc_placement_describe(char *buf, size_t len);

#endif
