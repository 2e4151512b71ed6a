/* Status strings and the thread-local last error. */
#include "base.h"

#include <stdio.h>
#include <string.h>

#define TC_ERRMSG_LEN 1024

static _Thread_local char last_error[TC_ERRMSG_LEN];
static _Thread_local char last_message[TC_ERRMSG_LEN]; /* the same without the "fn: " prefix */
static _Thread_local TC_TLS_HOT const char *current_fn = "tcoll";

const char *tcoll_status_string(int status) {
  switch (status) {
  case TCOLL_SUCCESS: return "TCOLL_SUCCESS";
  case TCOLL_IN_PROGRESS: return "TCOLL_IN_PROGRESS";
  case TCOLL_ERR_INVALID_ARGUMENT: return "TCOLL_ERR_INVALID_ARGUMENT";
  case TCOLL_ERR_BUSY: return "TCOLL_ERR_BUSY";
  case TCOLL_ERR_NO_MEMORY: return "TCOLL_ERR_NO_MEMORY";
  case TCOLL_ERR_MPI: return "TCOLL_ERR_MPI";
  case TCOLL_ERR_CUDA: return "TCOLL_ERR_CUDA";
  case TCOLL_ERR_UNSUPPORTED: return "TCOLL_ERR_UNSUPPORTED";
  case TCOLL_ERR_MISMATCH: return "TCOLL_ERR_MISMATCH";
  case TCOLL_ERR_TIMEOUT: return "TCOLL_ERR_TIMEOUT";
  case TCOLL_ERR_STATE: return "TCOLL_ERR_STATE";
  case TCOLL_ERR_INTERNAL: return "TCOLL_ERR_INTERNAL";
  default: return "TCOLL_ERR_UNKNOWN_STATUS";
  }
}

const char *tcoll_last_error(void) { return last_error; }

void tc_enter(const char *fn) { current_fn = fn; }
const char *tc_current_fn(void) { return current_fn; }

static _Thread_local bool internal_thread;
void tc_mark_internal_thread(void) { internal_thread = true; }
bool tc_is_internal_thread(void) { return internal_thread; }

int tc_error(int status, const char *fmt, ...) {
  char msg[TC_ERRMSG_LEN - 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(last_error, sizeof last_error, "%s: %s", current_fn, msg);
  snprintf(last_message, sizeof last_message, "%s", msg);
  tc_log(TCOLL_LOG_INFO, "%s failed (%s): %s", current_fn, tcoll_status_string(status), msg);
  return status;
}

void tc_restore_error(const char *saved) { snprintf(last_error, sizeof last_error, "%s", saved); }
const char *tc_last_message(void) { return last_message; }

int tc_mpi_error(int mpi_rc, const char *what) {
  char mpimsg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (PMPI_Error_string(mpi_rc, mpimsg, &len) != MPI_SUCCESS)
    snprintf(mpimsg, sizeof mpimsg, "MPI error code %d", mpi_rc);
  return tc_error(TCOLL_ERR_MPI, "%s failed: %s", what, mpimsg);
}
