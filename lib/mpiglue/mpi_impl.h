/* Which MPI implementation tcoll runs on (the algorithm table differs between them). */
#ifndef TC_MPI_IMPL_H
#define TC_MPI_IMPL_H

#include "../base/base.h"

typedef enum { TC_MPI_OTHER, TC_MPI_OPEN_MPI, TC_MPI_MPICH } tc_mpi_impl_t;

/* Reads MPI_Get_library_version once (after MPI_Init). */
void tc_mpi_impl_init(void);
tc_mpi_impl_t tc_mpi_impl(void);
/* MPICH before 4.1, whose own persistent collectives are wrong (stale results after the first
 * start; "Invalid communicator" in its schedules beside routed ones): the drop-in layer routes
 * them all there. */
bool tc_mpi_persistent_wrong(void);
const char *tc_mpi_impl_name(tc_mpi_impl_t impl);

#endif
