/* tcoll-devinfo: what tcoll sees of this machine's devices, for the GPU bundle's runner (and
 * anyone asking). Run it with TCOLL_DEBUG=INFO for the init line with the driver and runtime
 * versions and MPI's CUDA-awareness. Exit status: 0, or 1 when tcoll cannot start (a GPU that
 * CUDA cannot use, for instance: the message says why). */
#include "tcoll.h"

#include <stdio.h>

int main(int argc, char **argv) {
  int rc = tcoll_init(&argc, &argv);
  if (rc != TCOLL_SUCCESS) {
    fprintf(stdout, "tcoll-devinfo: tcoll_init failed: %s\n", tcoll_last_error());
    return 1;
  }
  int rank = tcoll_comm_rank(tcoll_comm_world());
  if (rank == 0)
    printf(
        "tcoll-devinfo: tcoll %d.%d.%d%s, backend %s, %d device(s), device buffers of nonblocking "
        "collectives "
        "%s\n",
        TCOLL_VERSION_MAJOR, TCOLL_VERSION_MINOR, TCOLL_VERSION_PATCH, tcoll_version_suffix(),
        tcoll_device_backend(), tcoll_device_count(),
        tcoll_mpi_device_direct(1) ? "go to MPI directly" : "are staged");
  return tcoll_finalize() == TCOLL_SUCCESS ? 0 : 1;
}
