/* MPI control variables around tcoll's own calls (see mpi_cvar.h). Through PMPI_T_*, as every MPI
 * call of the library's.
 *
 * The tool interface is initialized once per process and never finalized: MPICH 4.0 forgets its
 * variables' names once its count of initializations is back to 0 (MPI_T_cvar_get_index then
 * fails with MPI_T_ERR_INVALID_NAME at every later initialization). */
#include "mpi_cvar.h"

#include <pthread.h>

static pthread_once_t tool_once = PTHREAD_ONCE_INIT;
static bool tool_on;

static void tool_init(void) {
  int provided;
  tool_on = PMPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS;
}

void tc_mpi_cvar_push(const char *name, int value, tc_mpi_cvar_t *c) {
  c->set = false;
  pthread_once(&tool_once, tool_init);
  int index, count = 0;
  if (!tool_on || PMPI_T_cvar_get_index(name, &index) != MPI_SUCCESS ||
      PMPI_T_cvar_handle_alloc(index, NULL, &c->handle, &count) != MPI_SUCCESS)
    return;
  if (count == 1 && PMPI_T_cvar_read(c->handle, &c->old) == MPI_SUCCESS &&
      PMPI_T_cvar_write(c->handle, &value) == MPI_SUCCESS) {
    c->set = true;
    return;
  }
  PMPI_T_cvar_handle_free(&c->handle);
}

void tc_mpi_cvar_pop(tc_mpi_cvar_t *c) {
  if (!c->set) return;
  PMPI_T_cvar_write(c->handle, &c->old);
  PMPI_T_cvar_handle_free(&c->handle);
  c->set = false;
}
