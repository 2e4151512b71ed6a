/* The completion calls: each first drives the program's routed calls among its requests (a
 * routed call waited for runs to its end in the waiting thread), then calls on to MPI. Where no
 * routed call is listed, one load, then MPI. */
#include "pending.h"

#include <sched.h>
#include <stdlib.h>

LAY_EXPORT int MPI_Wait(MPI_Request *request, MPI_Status *status) {
  if (!lay_any_pending()) return lay_next.Wait(request, status);
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = lay_finish_own(*request, &comm);
  int mrc = lay_next.Wait(request, status);
  return rc == TCOLL_SUCCESS ? mrc : lay_error(comm, rc, "MPI_Wait");
}

LAY_EXPORT int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
  if (lay_any_pending()) lay_advance_own(1, request);
  return lay_next.Test(request, flag, status);
}

LAY_EXPORT int MPI_Request_get_status(MPI_Request request, int *flag, MPI_Status *status) {
  if (lay_any_pending()) lay_advance_own(1, &request);
  return lay_next.Request_get_status(request, flag, status);
}

/* Whether the array holds a routed call that a receive of the layer's completes: on MPICH a
 * blocking wait does not see the progress thread complete it (see LAY_GREQUESTS), so the layer's
 * blocking waits poll instead. */
static bool needs_polling(int n, const MPI_Request *reqs) {
  if (!LAY_GREQUESTS || !lay_any_pending()) return false;
  bool found = false;
  pthread_mutex_lock(&lay_mu);
  for (int i = 0; i < n && !found; i++)
    for (entry_t *e = lay_pending; e && !found; e = e->next)
      found = reqs[i] != MPI_REQUEST_NULL && e->req == reqs[i] && !e->grequest;
  pthread_mutex_unlock(&lay_mu);
  return found;
}

/* Waits for every request by testing each in turn (MPI_Test: MPICH 4.0's MPI_Testall fails on its
 * own persistent collectives). */
static int wait_all_polling(int count, MPI_Request requests[], MPI_Status statuses[]) {
  char few[64], *done = count <= 64 ? few : calloc((size_t)count, 1);
  if (!done) return MPI_ERR_NO_MEM;
  int left = count, rc = MPI_SUCCESS;
  for (int i = 0; i < count; i++) { /* a completed persistent request stays, inactive */
    done[i] = requests[i] == MPI_REQUEST_NULL;
    left -= done[i];
  }
  while (left > 0) {
    lay_advance_own(count, requests);
    for (int i = 0; i < count; i++) {
      if (done[i]) continue;
      int flag = 0;
      MPI_Status *st = statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[i];
      int r = lay_next.Test(&requests[i], &flag, st);
      if (r != MPI_SUCCESS && rc == MPI_SUCCESS) rc = r;
      if (flag || r != MPI_SUCCESS) done[i] = 1, left--;
    }
    if (left > 0) sched_yield();
  }
  if (done != few) free(done);
  return rc;
}

LAY_EXPORT int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  if (needs_polling(count, requests) && !lay_all_own(count, requests))
    return wait_all_polling(count, requests, statuses);
  if (lay_any_pending() && count > 0) {
    if (lay_all_own(count, requests)) {
      MPI_Comm comm;
      for (int i = 0; i < count; i++)
        if (requests[i] != MPI_REQUEST_NULL) lay_finish_own(requests[i], &comm);
    } else {
      lay_advance_own(count, requests); /* progress.c's hook or thread completes the rest */
    }
  }
  return lay_next.Waitall(count, requests, statuses);
}

LAY_EXPORT int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[]) {
  if (lay_any_pending() && count > 0) lay_advance_own(count, requests);
  return lay_next.Testall(count, requests, flag, statuses);
}

LAY_EXPORT int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status) {
  if (needs_polling(count, requests)) {
    int flag = 0, rc;
    while ((rc = MPI_Testany(count, requests, index, &flag, status)) == MPI_SUCCESS && !flag)
      sched_yield();
    return rc;
  }
  if (lay_any_pending() && count > 0) lay_advance_own(count, requests);
  return lay_next.Waitany(count, requests, index, status);
}

LAY_EXPORT int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag,
                           MPI_Status *status) {
  if (lay_any_pending() && count > 0) lay_advance_own(count, requests);
  return lay_next.Testany(count, requests, index, flag, status);
}

LAY_EXPORT int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                            MPI_Status statuses[]) {
  if (needs_polling(incount, requests)) {
    int rc;
    while ((rc = MPI_Testsome(incount, requests, outcount, indices, statuses)) == MPI_SUCCESS &&
           *outcount == 0)
      sched_yield();
    return rc;
  }
  if (lay_any_pending() && incount > 0) lay_advance_own(incount, requests);
  return lay_next.Waitsome(incount, requests, outcount, indices, statuses);
}

LAY_EXPORT int MPI_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                            MPI_Status statuses[]) {
  if (lay_any_pending() && incount > 0) lay_advance_own(incount, requests);
  return lay_next.Testsome(incount, requests, outcount, indices, statuses);
}

/* A freed routed call still completes (progress.c finishes it); its handle is no longer
 * the program's, and MPI may give the value to another request. */
LAY_EXPORT int MPI_Request_free(MPI_Request *request) {
  lay_persistent_free(*request);
  if (!__atomic_load_n(&lay_pending, __ATOMIC_ACQUIRE)) return lay_next.Request_free(request);
  MPI_Request tell = MPI_REQUEST_NULL;
  pthread_mutex_lock(&lay_mu);
  for (entry_t *e = lay_pending; e && *request != MPI_REQUEST_NULL; e = e->next)
    if (e->req == *request) {
      e->req = MPI_REQUEST_NULL, e->freed = true;
      if (lay_take_telling(e)) tell = e->greq; /* done already: no thread will poll it */
    }
  pthread_mutex_unlock(&lay_mu);
  if (tell != MPI_REQUEST_NULL) PMPI_Grequest_complete(tell);
  return lay_next.Request_free(request);
}
