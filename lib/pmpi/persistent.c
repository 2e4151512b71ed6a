/* Persistent collectives (MPI-4): a routed one is a plan kept from its initialization, posted
 * on tcoll at each MPI_Start / MPI_Startall; the program holds a persistent receive of the
 * layer's, started with it and satisfied by the layer's send when tcoll completes the call. A
 * passed one with device buffers (device.c) is kept the same way around MPI's own persistent
 * request on the host mirrors: each start copies the mirrors in and starts it, its completion
 * copies them back. */
#include "pending.h"

#include <stdlib.h>

/* A routed persistent call: its plan, and the persistent receive the program holds. */
typedef struct persist {
  struct persist *next;
  lay_call_t plan;
  MPI_Request req;
  int tag;
} persist_t;

static persist_t *persists; /* under lay_mu */
static long npersists;      /* read without the lock */

int lay_run_persistent(lay_call_t *c, MPI_Request *request) {
  persist_t *p = calloc(1, sizeof *p);
  if (!p) {
    free(c->scratch);
    lay_stage_free(&c->stage);
    return lay_error(c->comm, TCOLL_ERR_NO_MEMORY, lay_fn_name(c->fn));
  }
  p->plan = *c;
  p->tag = lay_take_tag();
  int rc = PMPI_Recv_init(NULL, 0, MPI_BYTE, 0, p->tag, lay_self_comm, &p->req);
  if (rc != MPI_SUCCESS) {
    free(c->scratch);
    lay_stage_free(&c->stage);
    if (c->inner != MPI_REQUEST_NULL) PMPI_Request_free(&c->inner);
    free(p);
    PMPI_Comm_call_errhandler(c->comm, rc);
    return rc;
  }
  *request = p->req;
  pthread_mutex_lock(&lay_mu);
  p->next = persists;
  persists = p;
  __atomic_add_fetch(&npersists, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&lay_mu);
  return MPI_SUCCESS;
}

static persist_t *find_persist(MPI_Request req) {
  if (!__atomic_load_n(&npersists, __ATOMIC_ACQUIRE) || req == MPI_REQUEST_NULL) return NULL;
  pthread_mutex_lock(&lay_mu);
  persist_t *p = persists;
  while (p && p->req != req) p = p->next;
  pthread_mutex_unlock(&lay_mu);
  return p;
}

int lay_pass_staged_persistent(lay_stage_t *s, lay_fn_t fn, MPI_Comm comm, int rc,
                               MPI_Request inner, MPI_Request *request) {
  if (rc != MPI_SUCCESS) return lay_pass_staged(s, fn, comm, rc);
  lay_call_t c = {.fn = fn, .comm = comm, .persistent = true, .stage = *s, .inner = inner};
  return lay_run_persistent(&c, request);
}

/* A staged call passed to MPI: its mirrors copied in, MPI's persistent request started. */
static int start_passed(lay_call_t *c) {
  int rc = lay_stage_in(&c->stage);
  if (rc != TCOLL_SUCCESS) return rc;
  return PMPI_Start(&c->inner) == MPI_SUCCESS ? TCOLL_SUCCESS : TCOLL_ERR_MPI;
}

/* One start: the plan posted on tcoll (its input packed again), the receive started, the call
 * lay_pending as any nonblocking one. */
static int start_persist(persist_t *p, MPI_Request *request) {
  entry_t *e = calloc(1, sizeof *e);
  if (!e) return lay_error(p->plan.comm, TCOLL_ERR_NO_MEMORY, lay_fn_name(p->plan.fn));
  e->call = p->plan;
  int rc = p->plan.inner != MPI_REQUEST_NULL ? start_passed(&e->call) : lay_post(&e->call);
  if (rc != TCOLL_SUCCESS) {
    lay_finish(&e->call, rc);
    free(e);
    return lay_error(p->plan.comm, rc, lay_fn_name(p->plan.fn));
  }
  e->tag = p->tag;
  e->req = p->req;
  int mrc = PMPI_Start(request);
  if (mrc != MPI_SUCCESS) { /* the collective is posted on every rank: finish it here */
    lay_finish(&e->call, lay_call_wait(&e->call));
    free(e);
    PMPI_Comm_call_errhandler(p->plan.comm, mrc);
    return mrc;
  }
  lay_count(p->plan.fn, p->plan.algo, p->plan.stage.n > 0);
  lay_enlist(e);
  return MPI_SUCCESS;
}

LAY_EXPORT int MPI_Start(MPI_Request *request) {
  persist_t *p = find_persist(*request);
  return p ? start_persist(p, request) : lay_next.Start(request);
}

LAY_EXPORT int MPI_Startall(int count, MPI_Request requests[]) {
  if (!__atomic_load_n(&npersists, __ATOMIC_ACQUIRE)) return lay_next.Startall(count, requests);
  /* The layer's one at a time, each run of the MPI's own in one MPI_Startall, in order. */
  for (int i = 0, run; i < count; i += run) {
    persist_t *p = find_persist(requests[i]);
    int rc;
    run = 1;
    if (p) {
      rc = start_persist(p, &requests[i]);
    } else {
      while (i + run < count && !find_persist(requests[i + run])) run++;
      rc = lay_next.Startall(run, &requests[i]);
    }
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

/* A persistent call freed while active completes first (its plan's buffers serve it). */
void lay_persistent_free(MPI_Request req) {
  persist_t *p = find_persist(req);
  if (!p) return;
  MPI_Comm comm;
  lay_finish_own(req, &comm);
  pthread_mutex_lock(&lay_mu);
  persist_t **at = &persists;
  while (*at != p) at = &(*at)->next;
  *at = p->next;
  __atomic_sub_fetch(&npersists, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&lay_mu);
  free(p->plan.scratch);
  lay_stage_free(&p->plan.stage);
  if (p->plan.inner != MPI_REQUEST_NULL) PMPI_Request_free(&p->plan.inner);
  free(p);
}
