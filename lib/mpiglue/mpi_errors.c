/* Open MPI 4.1 raises the errors of completed nonblocking-collective requests on
 * MPI_COMM_WORLD's error handler instead of the request's communicator (fixed upstream by
 * open-mpi/ompi#10460). With the default MPI_ERRORS_ARE_FATAL there, a truncation inside a
 * tcoll collective would abort the host program, whose communicators all return errors.
 *
 * So when MPI_COMM_WORLD has the default handler, tcoll installs one that behaves exactly like
 * it (message, then MPI_Abort) except while this thread is inside tcoll's own MPI_Wait* /
 * MPI_Test*: there the error returns to tcoll, which reports TCOLL_ERR_MPI. A handler the host
 * program set itself is left alone. */
#include "mpi_glue.h"

#include <stdio.h>
#include <stdlib.h>

static _Thread_local TC_TLS_HOT int completing; /* > 0 inside tcoll's own completion calls */
static MPI_Errhandler installed = MPI_ERRHANDLER_NULL;

static void world_errors(MPI_Comm *comm, int *code, ...) {
  if (completing) return; /* tcoll's caller gets the code back */
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  PMPI_Error_string(*code, msg, &len);
  fprintf(stderr, "[tcoll %d] MPI error on MPI_COMM_WORLD: %s (MPI_ERRORS_ARE_FATAL)\n",
          tc_g.world_rank, msg);
  PMPI_Abort(*comm, *code);
}

void tc_mpi_errors_init(void) {
  MPI_Errhandler current;
  if (PMPI_Comm_get_errhandler(MPI_COMM_WORLD, &current) != MPI_SUCCESS) return;
  bool is_default = current == MPI_ERRORS_ARE_FATAL;
  PMPI_Errhandler_free(&current);
  if (!is_default || installed != MPI_ERRHANDLER_NULL) return;
  if (PMPI_Comm_create_errhandler(world_errors, &installed) == MPI_SUCCESS)
    PMPI_Comm_set_errhandler(MPI_COMM_WORLD, installed);
}

void tc_mpi_errors_fini(void) {
  if (installed == MPI_ERRHANDLER_NULL) return;
  MPI_Errhandler current;
  if (PMPI_Comm_get_errhandler(MPI_COMM_WORLD, &current) == MPI_SUCCESS) {
    if (current == installed) PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    PMPI_Errhandler_free(&current);
  }
  PMPI_Errhandler_free(&installed);
}

/* MPI_ERR_IN_STATUS says little: the first failed request's own code says what happened. */
static int first_error(int rc, int n, const MPI_Status *st) {
  if (rc != MPI_ERR_IN_STATUS) return rc;
  for (int i = 0; i < n; i++)
    if (st[i].MPI_ERROR != MPI_SUCCESS && st[i].MPI_ERROR != MPI_ERR_PENDING)
      return st[i].MPI_ERROR;
  return rc;
}

#define SMALL 32 /* statuses on the stack for the usual few requests */

/* One request (the usual case): MPI_Wait / MPI_Test are much cheaper than their -all forms. */
static int wait_one(MPI_Request *req) {
  MPI_Status st;
  completing++;
  int rc = PMPI_Wait(req, &st);
  completing--;
  return rc == MPI_ERR_IN_STATUS ? st.MPI_ERROR : rc;
}

static int test_one(MPI_Request *req, int *flag) {
  MPI_Status st;
  completing++;
  int rc = PMPI_Test(req, flag, &st);
  completing--;
  return rc == MPI_ERR_IN_STATUS ? st.MPI_ERROR : rc;
}

/* Without room for the statuses (n > SMALL and no memory), the requests are completed one by
 * one rather than with MPI_STATUSES_IGNORE: that would lose the failed request's own code, and
 * MPICH's definition of it, (MPI_Status *)1, makes GCC 12 warn (-Wstringop-overflow). */
static int wait_each(int n, MPI_Request *reqs) {
  int first = MPI_SUCCESS;
  for (int i = 0; i < n; i++) {
    int rc = wait_one(&reqs[i]);
    if (first == MPI_SUCCESS) first = rc;
  }
  return first;
}

static int test_each(int n, MPI_Request *reqs, int *flag) {
  int first = MPI_SUCCESS;
  *flag = 1;
  for (int i = 0; i < n; i++) { /* a completed request becomes MPI_REQUEST_NULL: tested done */
    int done = 0, rc = test_one(&reqs[i], &done);
    if (first == MPI_SUCCESS) first = rc;
    if (!done) *flag = 0;
  }
  return first;
}

int tc_mpi_waitall(int n, MPI_Request *reqs) {
  if (n == 1) return wait_one(reqs);
  MPI_Status small[SMALL], *st = n <= SMALL ? small : malloc((size_t)n * sizeof *st);
  if (!st) return wait_each(n, reqs);
  completing++;
  int rc = PMPI_Waitall(n, reqs, st);
  completing--;
  rc = first_error(rc, n, st);
  if (st != small) free(st);
  return rc;
}

int tc_mpi_testall(int n, MPI_Request *reqs, int *flag) {
  if (n == 1) return test_one(reqs, flag);
  MPI_Status small[SMALL], *st = n <= SMALL ? small : malloc((size_t)n * sizeof *st);
  if (!st) return test_each(n, reqs, flag);
  completing++;
  int rc = PMPI_Testall(n, reqs, flag, st);
  completing--;
  rc = first_error(rc, n, st);
  if (st != small) free(st);
  return rc;
}
