/* The public face of the registry: wait, test, wait_all, pending_count. */
#include "registry.h"

static int on_timeout(int rc) {
  if (rc == TCOLL_ERR_TIMEOUT && tc_cfg.abort_on_timeout) {
    tc_warn("%s; TCOLL_ON_TIMEOUT=abort: aborting the job", tcoll_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return rc;
}

int tcoll_wait(const void *buffer) {
  TC_ENTER("tcoll_wait");
  return on_timeout(tc_wait_ptr(buffer, tc_cfg.timeout, true));
}

int tcoll_wait_tensor(const tcoll_tensor_t *t) {
  TC_ENTER("tcoll_wait_tensor");
  if (!t) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "t is NULL (expected a tensor)");
  return on_timeout(tc_wait_ptr(t->data, tc_cfg.timeout, true));
}

int tcoll_wait_timeout(const void *buffer, double seconds) {
  TC_ENTER("tcoll_wait_timeout");
  if (seconds != seconds) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "seconds is NaN (expected a number)");
  return on_timeout(tc_wait_ptr(buffer, seconds > 0 ? seconds : 0.0, true));
}

int tcoll_test(const void *buffer) {
  TC_ENTER("tcoll_test");
  return tc_wait_ptr(buffer, 0.0, false);
}

int tcoll_wait_all(void) {
  TC_ENTER("tcoll_wait_all");
  return tc_wait_everything();
}

size_t tcoll_pending_count(void) { return tc_registry_count(); }
