#include "progress.h"

#include "registry.h"

#include <time.h>

#define BATCH 64

static pthread_t thread;
static bool running;
static volatile int stop_requested;

static void nap(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

static void *loop(void *arg) {
  TC_UNUSED(arg);
  tc_enter("tcoll progress thread");
  tc_mark_internal_thread();
  tc_work_t *batch[BATCH];
  while (!__atomic_load_n(&stop_requested, __ATOMIC_ACQUIRE)) {
    int n = tc_registry_snapshot(batch, BATCH);
    for (int i = 0; i < n; i++) {
      tc_work_t *w = batch[i];
      /* A waiter driving the work completes it itself: never block on it here. */
      if (tc_work_try_claim(w)) {
        tc_work_progress(w, false, 0.0);
        tc_work_unclaim(w);
      }
      tc_registry_release(w, NULL, false);
    }
    /* Short naps while work is pending keep MPI moving; longer ones when idle cost nothing. */
    nap(n ? 20 * 1000 : 500 * 1000);
  }
  return NULL;
}

int tc_progress_start(void) {
  if (!tc_cfg.progress_thread || running) return TCOLL_SUCCESS;
  if (tc_g.thread_level < MPI_THREAD_MULTIPLE) {
    tc_warn(
        "TCOLL_PROGRESS=thread needs MPI_THREAD_MULTIPLE but MPI provides level %d: running "
        "without a "
        "progress thread (collectives advance in tcoll_wait / tcoll_test)",
        tc_g.thread_level);
    return TCOLL_SUCCESS;
  }
  __atomic_store_n(&stop_requested, 0, __ATOMIC_RELEASE);
  if (pthread_create(&thread, NULL, loop, NULL))
    return tc_error(TCOLL_ERR_INTERNAL, "cannot start the progress thread");
  running = true;
  return TCOLL_SUCCESS;
}

void tc_progress_stop(void) {
  if (!running) return;
  __atomic_store_n(&stop_requested, 1, __ATOMIC_RELEASE);
  pthread_join(thread, NULL);
  running = false;
}

bool tc_progress_running(void) { return running; }
