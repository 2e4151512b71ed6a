/* Placement of device buffers (see placement.h). */
#include "placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

/* What MPI says about device buffers, found at init. */
static int mpi_cuda_support; /* MPIX_Query_cuda_support() */
static int ompi_major;       /* Open MPI's major version, 0 for another MPI */

void tc_placement_init(void) {
  mpi_cuda_support = 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT) /* Open MPI's mpi-ext.h */
  mpi_cuda_support = MPIX_Query_cuda_support();
#elif defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 40000000 && defined(MPIX_GPU_SUPPORT_CUDA)
  mpi_cuda_support = MPIX_Query_cuda_support(); /* MPICH 4 (and its derivatives built on it) */
#endif
  ompi_major = 0;
  char ver[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (PMPI_Get_library_version(ver, &len) == MPI_SUCCESS) {
    const char *v = strstr(ver, "Open MPI v");
    if (v) ompi_major = atoi(v + strlen("Open MPI v"));
  }
}

bool tc_mpi_device_direct(tc_mpi_kind_t kind) {
  if (tc_dev_count() == 0 || tc_cfg.cuda_aware == 0) return false;
  if (tc_cfg.cuda_aware == 1) return true; /* the user knows their MPI */
  if (strcmp(tc_dev()->name, "cuda") != 0)
    return false; /* emulated devices: a non-CUDA-aware setup */
  if (!mpi_cuda_support) return false;
  /* Open MPI 4.x rejects device buffers in nonblocking collectives even when CUDA-aware. */
  if (kind == TC_MPI_NONBLOCKING_COLL && ompi_major > 0 && ompi_major < 5) return false;
  return true;
}

int tcoll_mpi_device_direct(int nonblocking_collective) {
  return tc_mpi_device_direct(nonblocking_collective ? TC_MPI_NONBLOCKING_COLL : TC_MPI_BLOCKING)
             ? 1
             : 0;
}

const char *tc_placement_describe(char *buf, size_t len) {
  const char *forced = tc_cfg.cuda_aware == 1   ? " (TCOLL_CUDA_AWARE=1)"
                       : tc_cfg.cuda_aware == 0 ? " (TCOLL_CUDA_AWARE=0)"
                                                : "";
  snprintf(buf, len,
           "MPI CUDA-aware: %s (MPIX_Query_cuda_support %d%s); device buffers of nonblocking "
           "collectives: %s%s",
           mpi_cuda_support ? "yes" : "no", mpi_cuda_support, ompi_major ? ", Open MPI" : "",
           tc_mpi_device_direct(TC_MPI_NONBLOCKING_COLL) ? "direct" : "staged", forced);
  return buf;
}
