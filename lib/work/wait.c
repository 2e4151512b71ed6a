/* The public face of the registry: wait, test, wait_all, pending_count. */
#include "../drive.h"
#include "registry.h"
#include "trace.h"

#include <stdio.h>
#include <time.h>

/* MPI_Abort kills every rank at once, and mpiexec may not forward what was still in flight: a
 * pause lets this rank's diagnosis, and those of ranks that timed out at the same moment, reach
 * the user first (as PyTorch's watchdog waits for the ranks' dumps before it kills). */
static void grace_before_abort(void) {
  fflush(NULL);
  struct timespec pause = {0, 300 * 1000 * 1000};
  nanosleep(&pause, NULL);
}

int tc_timeout_diagnose(bool loud) {
  loud = loud || tc_cfg.abort_on_timeout || tc_cfg.debug >= TCOLL_LOG_INFO;
  if (!loud) return TCOLL_ERR_TIMEOUT;
  char saved[1024], pending[2048];
  snprintf(saved, sizeof saved, "%s", tcoll_last_error());
  tc_registry_describe_pending(pending, sizeof pending, 8);
  tc_warn("%s", saved);
  tc_warn("pending on this rank: %s", pending[0] ? pending : "nothing");
  tc_trace_dump("timeout");
  if (tc_cfg.abort_on_timeout) {
    tc_warn("TCOLL_ON_TIMEOUT=abort: aborting the job");
    grace_before_abort();
    PMPI_Abort(MPI_COMM_WORLD, 1);
  }
  return TCOLL_ERR_TIMEOUT;
}

static int on_timeout(int rc, bool loud) {
  return rc == TCOLL_ERR_TIMEOUT ? tc_timeout_diagnose(loud) : rc;
}

int tcoll_wait(const void *buffer) {
  TC_ENTER("tcoll_wait");
  return on_timeout(tc_wait_ptr(buffer, tc_cfg.timeout, true), true);
}

int tcoll_wait_tensor(const tcoll_tensor_t *t) {
  TC_ENTER("tcoll_wait_tensor");
  if (!t) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "t is NULL (expected a tensor)");
  return on_timeout(tc_wait_ptr(t->data, tc_cfg.timeout, true), true);
}

int tcoll_wait_timeout(const void *buffer, double seconds) {
  TC_ENTER("tcoll_wait_timeout");
  if (seconds != seconds)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "seconds is NaN (expected a number)");
  return on_timeout(tc_wait_ptr(buffer, seconds > 0 ? seconds : 0.0, true), false);
}

int tcoll_test(const void *buffer) {
  TC_ENTER("tcoll_test");
  int rc = tc_wait_ptr(buffer, 0.0, false);
  if (rc == TCOLL_IN_PROGRESS) tc_test_pause();
  return rc;
}

int tcoll_query(const void *buffer) {
  TC_ENTER("tcoll_query");
  void *base;
  tc_work_t *w = buffer ? tc_registry_hold(buffer, 0, NULL, &base) : NULL;
  if (!w) return TCOLL_SUCCESS;
  bool done = __atomic_load_n(&w->done, __ATOMIC_ACQUIRE); /* set once its completion steps ran */
  tc_registry_release(w, base, false);
  return done ? TCOLL_SUCCESS : TCOLL_IN_PROGRESS;
}

int tcoll_wait_all(void) {
  TC_ENTER("tcoll_wait_all");
  return on_timeout(tc_wait_everything(tc_cfg.timeout), true);
}

size_t tcoll_pending_count(void) { return tc_registry_count(); }
