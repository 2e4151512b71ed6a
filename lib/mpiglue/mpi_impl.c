/* Which MPI implementation this is, from its library version string. The MPICH family (Intel
 * MPI, MVAPICH, Cray MPICH) names MPICH in it. */
#include "mpi_impl.h"

#include <string.h>

static tc_mpi_impl_t impl = TC_MPI_OTHER;

void tc_mpi_impl_init(void) {
  char ver[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0;
  impl = TC_MPI_OTHER;
  if (PMPI_Get_library_version(ver, &len) != MPI_SUCCESS) return;
  if (strstr(ver, "Open MPI"))
    impl = TC_MPI_OPEN_MPI;
  else if (strstr(ver, "MPICH") || strstr(ver, "Intel(R) MPI") || strstr(ver, "MVAPICH"))
    impl = TC_MPI_MPICH;
}

tc_mpi_impl_t tc_mpi_impl(void) { return impl; }

const char *tc_mpi_impl_name(tc_mpi_impl_t i) {
  switch (i) {
  case TC_MPI_OPEN_MPI: return "Open MPI";
  case TC_MPI_MPICH: return "MPICH";
  default: return "other MPI";
  }
}
