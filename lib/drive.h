/* Waiting for MPI while every schedule moves. A schedule's later steps start only when some
 * wait, test or the progress thread drives it (sched/schedule.h), so a rank blocked inside MPI,
 * where nothing is driven, can hold up a peer that waits for one of its collectives; and if that
 * peer must get past the wait to join the very call this rank blocks in, neither moves again (a
 * ring beyond 2 ranks behind a communicator's creation, say). tcoll's own calls that wait for
 * their peers therefore wait here, driving every schedule, and the back-off between polls is the
 * engine's too. */
#ifndef TC_DRIVE_H
#define TC_DRIVE_H

#include <mpi.h>
#include <stdbool.h>

/* What drives every schedule in flight (init sets it: the schedule engine, above this room). */
void tc_set_drive(void (*drive)(void));
/* One pass of it (nothing before init). */
void tc_drive_all(void);
/* Between polls: yields the core; with TCOLL_WAIT=yield a long wait also sleeps a little, so that
 * oversubscribed ranks spinning inside MPI (MPICH's MPI_Wait) do not starve the ranks they wait
 * for. *polls counts the polls so far (start at 0). */
void tc_poll_pause(int *polls);
/* After a test (tcoll_test) that found its work still in progress: where this node's ranks
 * outnumber its cores (the node room says so: tc_set_test_yield) or TCOLL_WAIT=yield, yields the
 * core once, as Open MPI's progress does when idle (mpi_yield_when_idle). A program that polls
 * tcoll_test in a loop would otherwise keep the peers it waits for off the core for a whole time
 * slice per poll: 500 calls in flight, tested in a loop by 8 ranks on 2 cores, took 1.6 s (0.05 s
 * on the MPI paths, whose MPI_Test yields). */
void tc_test_pause(void);
void tc_set_test_yield(bool on);
/* The first `polls` pauses of a wait spin on the processor instead (0: none, the default). Set
 * by the node room where ranks share memory and each has a core of its own: the stores they wait
 * for arrive in well under a microsecond, and a yield per poll would cost more than that. */
void tc_set_spin(int polls);
/* Waits for req, a nonblocking call made for one that would block its caller, driving every
 * schedule meanwhile; MPI's error code. deadline (tc_now's clock, 0: none): returns MPI_SUCCESS
 * once it passed too, with *req still active (not MPI_REQUEST_NULL). */
int tc_wait_driving(MPI_Request *req, double deadline);
/* Every rank of comm gets here before any goes on (MPI_Ibarrier, waited for driving): before a
 * blocking collective call that every rank of comm makes, so that none of them then waits on
 * anything but the others in it. */
int tc_rendezvous(MPI_Comm comm);

#endif
