/* Counts the MPI calls that communicate or create communicators, through the MPI profiling
 * interface: a test program linked with mpi_count.c sees every such call libtcoll makes, so it
 * can check that a refused call "starts no communication". */
#ifndef T_MPI_COUNT_H
#define T_MPI_COUNT_H

/* MPI calls made so far by this process that post or perform communication (nonblocking and
 * blocking collectives, point-to-point) or create a communicator. */
long t_mpi_calls(void);
/* The same, made by the calling thread only (not by tcoll's background threads, such as the
 * bootstrap thread that answers rendezvous requests). */
long t_mpi_calls_this_thread(void);

#endif
