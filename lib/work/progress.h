/* TCOLL_PROGRESS=thread: a thread that keeps testing pending work, so that posted collectives
 * advance (and complete) while the caller computes. MPI only advances nonblocking collectives
 * inside MPI calls; without this thread they advance in tcoll_wait / tcoll_test only. */
#ifndef TC_PROGRESS_H
#define TC_PROGRESS_H

#include "../base/base.h"

/* Starts the thread when configured; needs MPI_THREAD_MULTIPLE, else warns and runs without. */
int tc_progress_start(void);
void tc_progress_stop(void);
bool tc_progress_running(void);

#endif
