/* Which MPI implementation this is, from its library version string. The MPICH family (Intel
 * MPI, MVAPICH, Cray MPICH) names MPICH in it. */
#include "mpi_impl.h"

#include <stdio.h>
#include <string.h>

static tc_mpi_impl_t impl = TC_MPI_OTHER;
static bool persistent_wrong;

/* MPICH 4.0 (MPICH 3 has no persistent collectives; its derivatives name their own versions). */
static bool mpich_before_4_1(const char *ver) {
  const char *at = strstr(ver, "MPICH Version:");
  int major = 0, minor = 0;
  if (!at || sscanf(at + strlen("MPICH Version:"), " %d.%d", &major, &minor) != 2) return false;
  return major == 4 && minor < 1;
}

void tc_mpi_impl_init(void) {
  char ver[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0;
  impl = TC_MPI_OTHER;
  persistent_wrong = false;
  if (PMPI_Get_library_version(ver, &len) != MPI_SUCCESS) return;
  persistent_wrong = mpich_before_4_1(ver);
  if (strstr(ver, "Open MPI"))
    impl = TC_MPI_OPEN_MPI;
  else if (strstr(ver, "MPICH") || strstr(ver, "Intel(R) MPI") || strstr(ver, "MVAPICH"))
    impl = TC_MPI_MPICH;
}

tc_mpi_impl_t tc_mpi_impl(void) { return impl; }

bool tc_mpi_persistent_wrong(void) { return persistent_wrong; }

const char *tc_mpi_impl_name(tc_mpi_impl_t i) {
  switch (i) {
  case TC_MPI_OPEN_MPI: return "Open MPI";
  case TC_MPI_MPICH: return "MPICH";
  default: return "other MPI";
  }
}
