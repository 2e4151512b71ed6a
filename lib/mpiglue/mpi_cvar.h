/* An MPI control variable (the MPI tool interface, MPI_T) changed around some of tcoll's own calls
 * and put back after them. */
#ifndef TC_MPI_CVAR_H
#define TC_MPI_CVAR_H

#include "../base/base.h"

typedef struct tc_mpi_cvar {
  bool set; /* the variable was changed: tc_mpi_cvar_pop puts `old` back */
  MPI_T_cvar_handle handle;
  int old;
} tc_mpi_cvar_t;

/* Sets the integer variable `name` to value where this MPI has one of that name and lets it be
 * written now; else changes nothing. Either way *c is for tc_mpi_cvar_pop. */
void tc_mpi_cvar_push(const char *name, int value, tc_mpi_cvar_t *c);
void tc_mpi_cvar_pop(tc_mpi_cvar_t *c);

#endif
