/* Routed nonblocking calls as real MPI requests: the entries of the calls in flight, how the
 * program's request learns of a call's completion (pending.h). What drives them while the program
 * blocks elsewhere in MPI is progress.c's.
 *
 * The program's request completes when tcoll completes the call, whichever thread sees it, so
 * every completion call accepts it, in any array, mixed with the program's point-to-point
 * requests, also where it bypasses the layer (MPICH's mpi_f08 calls PMPI_Wait itself). (A plain
 * generalized request, MPI_Grequest_start, never completes inside MPI_Waitall on either MPI.) The
 * collective has to progress while the program blocks anywhere in MPI (rank 0 posts, then
 * receives a message rank 1 sends only after its own wait): MPI's progress loop or a progress
 * thread tests pending calls (progress.c), and the layer's completion calls (waits.c) drive the
 * program's own requests at once. A
 * failed collective reaches the program as an error of its wait: through the communicator's error
 * handler where it waits through the layer; as MPI_ERR_TRUNCATE (a receive entry: one byte sent
 * to the empty receive) or the generalized request's MPI_ERR_OTHER where it bypasses it. */
#include "pending.h"

#include <sched.h>
#include <stdlib.h>

pthread_mutex_t lay_mu = PTHREAD_MUTEX_INITIALIZER;
entry_t *lay_pending;
MPI_Comm lay_self_comm = MPI_COMM_NULL;
static int next_tag, tag_limit = 32767;

int lay_take_tag(void) {
  pthread_mutex_lock(&lay_mu);
  int tag = next_tag;
  next_tag = next_tag >= tag_limit ? 0 : next_tag + 1;
  pthread_mutex_unlock(&lay_mu);
  return tag;
}

static void unlink_entry(entry_t *e) {
  entry_t **at = &lay_pending;
  while (*at != e) at = &(*at)->next;
  __atomic_store_n(at, e->next, __ATOMIC_RELEASE); /* any_pending reads the head unlocked */
}

bool lay_take_telling(entry_t *e) {
  bool tell = e->grequest && e->done && !e->told;
  if (tell) e->told = true;
  return tell;
}

/* A receive
 * entry: the layer's send completes it, and the entry goes. A grequest entry: marked done; the
 * waiting thread's poll function completes it (here only where the program freed its request,
 * so that no thread waits on it), and MPI's free function unlinks it, unless MPI ran that
 * already (released): then it goes here. */
void lay_complete(entry_t *e, int rc) {
  rc = lay_finish(&e->call, rc);
  if (!e->grequest) {
    char byte = 0;
    PMPI_Send(&byte, rc == TCOLL_SUCCESS ? 0 : 1, MPI_BYTE, 0, e->tag, lay_self_comm);
  }
  /* Once done is set and the lock let go, a grequest entry belongs to the thread that waits on
   * it: it may complete the request and MPI free the entry (greq_free) before this thread reads
   * another field, so what this thread needs afterwards is read under the lock. */
  pthread_mutex_lock(&lay_mu);
  bool grequest = e->grequest, ours = !grequest || e->released;
  MPI_Request greq = e->greq;
  e->done = true, e->rc = rc, e->claimed = false;
  bool tell = e->freed && lay_take_telling(e);
  if (ours) unlink_entry(e);
  pthread_mutex_unlock(&lay_mu);
  if (tell) PMPI_Grequest_complete(greq); /* MPI still holds it until then, released or not */
  if (ours) free(e);
}

#if LAY_GREQUESTS
static int greq_query(void *state, MPI_Status *status) {
  entry_t *e = state;
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  return e->rc == TCOLL_SUCCESS ? MPI_SUCCESS : MPI_ERR_OTHER;
}

/* MPI is done with the request. MPICH 4.0 calls this in MPI_Request_free even while the call is
 * pending: the entry then stays, so that the collective is still driven to its end (its copies
 * freed, tcoll's work completed), and lay_complete frees it. */
static int greq_free(void *state) {
  entry_t *e = state;
  pthread_mutex_lock(&lay_mu);
  bool early = !e->done;
  if (early)
    e->released = true;
  else
    unlink_entry(e);
  pthread_mutex_unlock(&lay_mu);
  if (!early) free(e);
  return MPI_SUCCESS;
}

static int greq_cancel(void *state, int complete_) { /* cancelling a collective is erroneous */
  (void)state, (void)complete_;
  return MPI_SUCCESS;
}

/* Called by MPI in the thread that waits or tests: completes the request once tcoll is done. */
static int greq_poll(void *state, MPI_Status *status) {
  (void)status;
  entry_t *e = state;
  pthread_mutex_lock(&lay_mu);
  bool tell = lay_take_telling(e);
  pthread_mutex_unlock(&lay_mu);
  if (tell) PMPI_Grequest_complete(e->greq);
  return MPI_SUCCESS;
}

static int greq_wait(int n, void **states, double timeout, MPI_Status *status) {
  (void)timeout;
  for (int i = 0; i < n; i++) greq_poll(states[i], status);
  return MPI_SUCCESS;
}
#endif

int lay_make_request(entry_t *e) {
#if LAY_GREQUESTS
  if (!e->call.persistent) {
    e->grequest = true;
    int rc =
        PMPIX_Grequest_start(greq_query, greq_free, greq_cancel, greq_poll, greq_wait, e, &e->greq);
    e->req = e->greq;
    return rc;
  }
#endif
  e->tag = lay_take_tag();
  return PMPI_Irecv(NULL, 0, MPI_BYTE, 0, e->tag, lay_self_comm, &e->req);
}

void lay_unclaim(entry_t *e) {
  pthread_mutex_lock(&lay_mu);
  e->claimed = false;
  pthread_mutex_unlock(&lay_mu);
}

entry_t *lay_claim_on(const tcoll_comm_t *twin, uint64_t posted_before, bool *busy) {
  pthread_mutex_lock(&lay_mu);
  entry_t *e = lay_pending;
  *busy = false;
  for (; e; e = e->next) {
    if ((twin && e->call.twin != twin) || e->done || e->posted_ns >= posted_before) continue;
    if (!e->claimed) break;
    *busy = true;
  }
  if (e) e->claimed = true;
  pthread_mutex_unlock(&lay_mu);
  return e;
}

/* A staged call passed to MPI (device.c) waits on MPI's request (an error reached the
 * communicator's error handler in MPI already); a routed one on tcoll's work. */
static int call_done(lay_call_t *c, bool wait) {
  if (c->inner == MPI_REQUEST_NULL)
    return LAY_TCOLL(wait ? tcoll_wait(c->key) : tcoll_test(c->key));
  int flag = 1;
  int rc = wait ? PMPI_Wait(&c->inner, MPI_STATUS_IGNORE)
                : PMPI_Test(&c->inner, &flag, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return TCOLL_ERR_MPI;
  return flag ? TCOLL_SUCCESS : TCOLL_IN_PROGRESS;
}

int lay_call_wait(lay_call_t *c) { return call_done(c, true); }

/* Drives a claimed entry to its end in this thread. Returns tcoll's result. */
static int drive_to_end(entry_t *e) {
  int rc = call_done(&e->call, true);
  lay_complete(e, rc);
  return rc;
}

bool lay_test_claimed(entry_t *e) {
  int rc = call_done(&e->call, false);
  if (rc == TCOLL_IN_PROGRESS) return false;
  lay_complete(e, rc);
  return true;
}

void lay_requests_drain(const tcoll_comm_t *twin) {
  for (;;) {
    bool busy;
    entry_t *e = lay_claim_on(twin, UINT64_MAX, &busy);
    if (e)
      drive_to_end(e);
    else if (busy)
      sched_yield();
    else
      return;
  }
}

int lay_requests_init(lay_progress_t how, int thread_level) {
  int rc = PMPI_Comm_dup(MPI_COMM_SELF, &lay_self_comm);
  if (rc != MPI_SUCCESS) return rc;
  PMPI_Comm_set_errhandler(lay_self_comm, MPI_ERRORS_RETURN);
  int *ub, found = 0;
  if (PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found) == MPI_SUCCESS && found)
    tag_limit = *ub;
  return lay_progress_start(how, thread_level);
}

void lay_requests_stop(void) {
  lay_progress_stop();
  if (lay_self_comm != MPI_COMM_NULL) PMPI_Comm_free(&lay_self_comm);
}

void lay_enlist(entry_t *e) {
  e->posted_ns = lay_progress_ages() ? lay_now_ns() : 0; /* a clock read only where it is used */
  pthread_mutex_lock(&lay_mu);
  e->next = lay_pending;
  __atomic_store_n(&lay_pending, e, __ATOMIC_RELEASE);
  lay_progress_posted();
  pthread_mutex_unlock(&lay_mu);
  lay_progress_listed();
}

int lay_run_nonblocking(lay_call_t *c, MPI_Request *request) {
  entry_t *e = calloc(1, sizeof *e);
  if (!e) return lay_error(c->comm, TCOLL_ERR_NO_MEMORY, lay_fn_name(c->fn));
  int rc = lay_post(c);
  if (rc != TCOLL_SUCCESS) {
    lay_finish(c, rc);
    free(e);
    return lay_error(c->comm, rc, lay_fn_name(c->fn));
  }
  e->call = *c;
  int mrc = lay_make_request(e);
  if (mrc != MPI_SUCCESS) { /* the collective is posted on every rank: finish it here */
    lay_finish(&e->call, LAY_TCOLL(tcoll_wait(e->call.key)));
    free(e);
    PMPI_Comm_call_errhandler(c->comm, mrc);
    return mrc;
  }
  *request = e->req;
  lay_count(c->fn, c->algo, c->stage.n > 0);
  lay_enlist(e);
  return MPI_SUCCESS;
}

/* Where no way drives calls while the program blocks elsewhere (lay_nonblocking), or no request
 * of the layer's can be made, the call completes here, and the program gets a request that is
 * complete already (a receive from MPI_PROC_NULL). */
static int pass_staged_now(lay_stage_t *s, lay_fn_t fn, MPI_Comm comm, MPI_Request inner,
                           MPI_Request *request) {
  int rc = lay_pass_staged(s, fn, comm, PMPI_Wait(&inner, MPI_STATUS_IGNORE));
  if (rc != MPI_SUCCESS) return rc;
  return PMPI_Irecv(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, comm, request);
}

int lay_pass_staged_nonblocking(lay_stage_t *s, lay_fn_t fn, MPI_Comm comm, int rc,
                                MPI_Request inner, MPI_Request *request) {
  if (rc != MPI_SUCCESS) return lay_pass_staged(s, fn, comm, rc);
  entry_t *e = lay_nonblocking ? calloc(1, sizeof *e) : NULL;
  if (!e) return pass_staged_now(s, fn, comm, inner, request);
  e->call = (lay_call_t){.fn = fn, .comm = comm, .stage = *s, .inner = inner};
  if (lay_make_request(e) != MPI_SUCCESS) {
    free(e);
    return pass_staged_now(s, fn, comm, inner, request);
  }
  *request = e->req;
  lay_count(fn, NULL, true);
  lay_enlist(e);
  return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ the program's requests */

/* The program waits for one request: if it is a routed call, drive it to its end here (and, for
 * a grequest entry, complete the request: this is the waiting thread). Returns tcoll's result
 * (TCOLL_SUCCESS where the request is not ours) and its communicator. */
int lay_finish_own(MPI_Request req, MPI_Comm *comm) {
  if (req == MPI_REQUEST_NULL) return TCOLL_SUCCESS; /* freed routed calls hold that value */
  int rc = TCOLL_SUCCESS;
  for (;;) {
    pthread_mutex_lock(&lay_mu);
    entry_t *e = lay_pending;
    while (e && e->req != req) e = e->next;
    if (!e) {
      pthread_mutex_unlock(&lay_mu);
      return rc;
    }
    *comm = e->call.comm;
    if (e->done) { /* a grequest entry */
      bool tell = lay_take_telling(e);
      MPI_Request greq = e->greq;
      rc = e->rc;
      pthread_mutex_unlock(&lay_mu);
      if (tell) PMPI_Grequest_complete(greq);
      return rc;
    }
    bool mine = !e->claimed;
    if (mine) e->claimed = true;
    pthread_mutex_unlock(&lay_mu);
    if (mine)
      rc = drive_to_end(e);
    else /* another thread tests it: it completes it or lets go */
      sched_yield();
  }
}

/* Advances each of the program's requests that is a routed call once (completing those done;
 * a done grequest entry is completed here, in the thread that tests: MPICH does not poll a
 * generalized request in every test call). */
void lay_advance_own(int n, const MPI_Request *reqs) {
  for (int i = 0; i < n; i++) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    pthread_mutex_lock(&lay_mu);
    entry_t *e = lay_pending;
    while (e && e->req != reqs[i]) e = e->next;
    bool mine = e && !e->claimed && !e->done, grequest = e && e->grequest;
    if (mine) e->claimed = true;
    pthread_mutex_unlock(&lay_mu);
    if (mine && !lay_test_claimed(e)) lay_unclaim(e); /* a receive entry completed is freed */
    if (!grequest) continue;
    /* A grequest entry stays listed until MPI frees it, which needs this thread's test first. */
    pthread_mutex_lock(&lay_mu);
    bool tell = lay_take_telling(e);
    MPI_Request greq = e->greq;
    pthread_mutex_unlock(&lay_mu);
    if (tell) PMPI_Grequest_complete(greq);
  }
}

/* Whether every non-null request of the array is a routed call. */
bool lay_all_own(int n, const MPI_Request *reqs) {
  pthread_mutex_lock(&lay_mu);
  bool all = true;
  for (int i = 0; i < n && all; i++) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    entry_t *e = lay_pending;
    while (e && e->req != reqs[i]) e = e->next;
    all = e != NULL;
  }
  pthread_mutex_unlock(&lay_mu);
  return all;
}
