/* The layer's routed calls in flight (requests.c), shared by the completion calls (waits.c) and
 * the persistent calls (persistent.c). Not part of the layer's interface (layer.h). */
#ifndef TC_PMPI_PENDING_H
#define TC_PMPI_PENDING_H

#include "layer.h"

#include <pthread.h>
#include <time.h>

/* How the program's request learns that its call completed. A receive the layer satisfies with
 * its own send (Open MPI; persistent calls everywhere), or on MPICH a generalized request whose
 * poll function completes it: MPICH 4.0's MPI_Wait does not see a receive that another thread's
 * send to this process completed (it waits forever; a test loop sees it), so there the progress
 * thread only marks a call done and the waiting thread's poll function completes the request. */
#if defined(MPICH_VERSION)
#define LAY_GREQUESTS 1
#else
#define LAY_GREQUESTS 0
#endif

typedef struct entry {
  struct entry *next;
  lay_call_t call;
  MPI_Request req;  /* the request the program holds (MPI_REQUEST_NULL once it freed it) */
  MPI_Request greq; /* the generalized request (grequest entries) */
  int tag;
  bool grequest; /* completed through greq; listed until MPI frees it and it is done */
  bool claimed;  /* a thread is driving it: others leave it alone */
  bool done;     /* grequest entries: tcoll completed it with rc */
  bool told;     /* grequest entries: MPI_Grequest_complete called */
  bool freed;    /* the program freed its request */
  bool released; /* grequest entries: MPI ran the free function before the call was done (MPICH
                    does in MPI_Request_free): the entry stays listed; lay_complete frees it */
  int rc;
  uint64_t posted_ns; /* when it was listed (CLOCK_MONOTONIC); 0 where ages go unused */
} entry_t;

/* Every entry, under lay_mu (the head is also read unlocked: lay_any_pending). */
extern pthread_mutex_t lay_mu;
extern entry_t *lay_pending;
/* The private duplicate of MPI_COMM_SELF of the layer's receives. */
extern MPI_Comm lay_self_comm;

/* Whether any routed call is listed (not done yet, or a grequest entry not yet completed in MPI):
 * one load on every completion call of the program. */
static inline bool lay_any_pending(void) {
  return __atomic_load_n(&lay_pending, __ATOMIC_ACQUIRE) != NULL;
}
/* A tag for a receive of the layer's, unique among those pending (it wraps after MPI_TAG_UB). */
int lay_take_tag(void);
/* Under lay_mu: whether this thread is the one to call MPI_Grequest_complete on a done entry. */
bool lay_take_telling(entry_t *e);
/* Lists a new entry (its request made) and tells the progress of it (progress.c). */
void lay_enlist(entry_t *e);
/* Claims the first pending entry on twin (any twin where NULL), listed before posted_before
 * (CLOCK_MONOTONIC ns), that no thread drives; *busy: some are driven elsewhere. */
entry_t *lay_claim_on(const tcoll_comm_t *twin, uint64_t posted_before, bool *busy);
/* Lets a claimed entry go. */
void lay_unclaim(entry_t *e);
/* Ends a claimed entry whose collective finished with rc: unpacks, then tells MPI. */
void lay_complete(entry_t *e, int rc);
/* Waits for a posted call to its end in this thread: tcoll's work, or MPI's request of a staged
 * call passed to MPI. Returns a tcoll code. */
int lay_call_wait(lay_call_t *c);
/* Tests a claimed entry once: completes it (true) if tcoll is done, else leaves it claimed. */
bool lay_test_claimed(entry_t *e);

static inline uint64_t lay_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* progress.c: whether calls are told apart by age (the thread leaves young ones alone): only
 * then does a listed call note when it was posted. */
bool lay_progress_ages(void);
/* progress.c: under lay_mu, a call was just listed (wakes a sleeping progress thread). */
void lay_progress_posted(void);
/* progress.c: a call was listed (not under lay_mu): the hook is registered at the first. */
void lay_progress_listed(void);
/* After MPI_Init: starts what drives routed calls while the program blocks elsewhere in MPI. */
int lay_progress_start(lay_progress_t how, int thread_level);
void lay_progress_stop(void);
/* The program's request for e (a receive, or a grequest on MPICH for a nonpersistent call). */
int lay_make_request(entry_t *e);

/* The program waits for req: if it is a routed call, drives it to its end in this thread (a
 * grequest entry is completed in MPI here). Returns tcoll's result (TCOLL_SUCCESS where req is
 * not a routed call) and its communicator. */
int lay_finish_own(MPI_Request req, MPI_Comm *comm);
/* Advances each of the program's requests that is a routed call once. */
void lay_advance_own(int n, const MPI_Request *reqs);
/* Whether every non-null request of the array is a routed call. */
bool lay_all_own(int n, const MPI_Request *reqs);

/* A persistent request freed by the program: its plan goes (completed first if active). */
void lay_persistent_free(MPI_Request req);

#endif
