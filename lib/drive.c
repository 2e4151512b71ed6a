/* Waiting for MPI while every schedule moves (see drive.h). */
#include "drive.h"

#include "base/base.h"
#include "base/lock.h"

#include <sched.h>
#include <time.h>

static void (*drive_hook)(void);

void tc_set_drive(void (*drive)(void)) { drive_hook = drive; }

void tc_drive_all(void) {
  if (drive_hook) drive_hook();
}

static int spin_polls;

void tc_set_spin(int polls) { __atomic_store_n(&spin_polls, polls, __ATOMIC_RELAXED); }

TC_COLD void tc_poll_pause(int *polls) {
  int spin = __atomic_load_n(&spin_polls, __ATOMIC_RELAXED);
  if (*polls < spin) { /* a peer's store is a few hundred nanoseconds away: no system call */
    ++*polls;
    for (int i = 0; i < 4; i++) tc_cpu_relax();
    return;
  }
  if (tc_cfg.wait_yield && ++*polls > spin + 1000) {
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
    return;
  }
  sched_yield();
}

static bool test_yield;

void tc_set_test_yield(bool on) { __atomic_store_n(&test_yield, on, __ATOMIC_RELAXED); }

void tc_test_pause(void) {
  if (__atomic_load_n(&test_yield, __ATOMIC_RELAXED) || tc_cfg.wait_yield) sched_yield();
}

int tc_wait_driving(MPI_Request *req, double deadline) {
  for (int polls = 0;;) {
    int done = 0, rc = PMPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done || (deadline > 0 && tc_now() >= deadline)) return rc;
    tc_drive_all();
    tc_poll_pause(&polls);
  }
}

int tc_rendezvous(MPI_Comm comm) {
  MPI_Request req;
  int rc = PMPI_Ibarrier(comm, &req);
  return rc != MPI_SUCCESS ? rc : tc_wait_driving(&req, 0.0);
}
