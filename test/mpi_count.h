/* Counts the MPI calls that communicate or create communicators, through the MPI profiling
 * interface: a test program linked with mpi_count.c sees every such call libtcoll makes, on
 * whichever thread makes it (the calling thread, or tcoll's progress thread driving a schedule
 * with TCOLL_PROGRESS=thread), so it can check that a refused call "starts no communication"
 * and which MPI calls a collective made.
 *
 * What else may call MPI in a test process: tcoll's progress thread moving other pending work,
 * and tcoll's bootstrap service (a thread of its own, started by tcoll_get_unique_id), which
 * answers rendezvous requests from other ranks at any time on a communicator of its own. The
 * service's calls are never counted (see mpi_count.c); the progress thread's are, so a count is
 * the call's own when nothing else was in flight: see t_mpi_window_open. */
#ifndef T_MPI_COUNT_H
#define T_MPI_COUNT_H

#include <stdbool.h>

/* The functions counted; the MPI-4 large-count (_c) form of each counts as that function. */
typedef enum t_mpi_fn {
  T_MPI_IALLREDUCE,
  T_MPI_IREDUCE,
  T_MPI_IREDUCE_SCATTER_BLOCK,
  T_MPI_IBCAST,
  T_MPI_IALLGATHER,
  T_MPI_IALLGATHERV,
  T_MPI_IGATHER,
  T_MPI_ISCATTER,
  T_MPI_IALLTOALL,
  T_MPI_IALLTOALLV,
  T_MPI_IALLTOALLW,
  T_MPI_ISEND,
  T_MPI_IRECV,
  T_MPI_SEND,
  T_MPI_RECV,
  T_MPI_ALLREDUCE,
  T_MPI_ALLGATHER,
  T_MPI_REDUCE,
  T_MPI_REDUCE_SCATTER_BLOCK,
  T_MPI_BCAST,
  T_MPI_BARRIER,
  T_MPI_COMM_DUP,
  T_MPI_COMM_SPLIT,
  T_MPI_COMM_CREATE_GROUP,
  T_MPI_NFN
} t_mpi_fn_t;

/* Calls made so far by every thread of this process (the bootstrap service's excluded). */
long t_mpi_calls(void);
/* The same, of one function. */
long t_mpi_calls_of(t_mpi_fn_t fn);
/* The same, made by the calling thread only. */
long t_mpi_calls_this_thread(void);
/* The bootstrap service's calls, left out of the counts above. */
long t_mpi_service_calls(void);

/* The calls attributable to what runs between t_mpi_window_open and t_mpi_window_calls: every
 * thread's where no work was pending at the open (then any call in the window is made for what
 * the test did in it, by whichever thread), else the calling thread's only (the progress thread
 * may be moving the pending work meanwhile). */
typedef struct t_mpi_window {
  bool others_in_flight; /* work was pending at the open */
  long all, mine;
  long of[T_MPI_NFN];
} t_mpi_window_t;
void t_mpi_window_open(t_mpi_window_t *w);
long t_mpi_window_calls(const t_mpi_window_t *w);
/* The calls of one function in the window, by every thread: the window must have opened with
 * nothing in flight (a test failure otherwise). */
long t_mpi_window_calls_of(const t_mpi_window_t *w, t_mpi_fn_t fn);

#endif
