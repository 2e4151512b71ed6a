/* Which MPI implementation tcoll runs on (the algorithm table differs between them). */
#ifndef TC_MPI_IMPL_H
#define TC_MPI_IMPL_H

#include "../base/base.h"

typedef enum { TC_MPI_OTHER, TC_MPI_OPEN_MPI, TC_MPI_MPICH } tc_mpi_impl_t;

/* Reads MPI_Get_library_version once (after MPI_Init). */
void tc_mpi_impl_init(void);
tc_mpi_impl_t tc_mpi_impl(void);
const char *tc_mpi_impl_name(tc_mpi_impl_t impl);

#endif
