/* MPI calls with int64_t counts: the int form when a count fits the per-call limit, the MPI-4 _c
 * form above it (mpi_glue.h decides; TC_MPI_NAME names the call made, for errors). Above the
 * limit only where tc_mpi_one_call() says so: without large-count calls, callers split or use
 * derived datatypes first. Each returns MPI's code. */
#ifndef TC_MPI_CALLS_H
#define TC_MPI_CALLS_H

#include "mpi_glue.h"

/* The larger of a send and a receive count: a two-count call takes the _c form if either
 * exceeds the limit. */
static inline int64_t tc_mpi_max2(int64_t a, int64_t b) { return a > b ? a : b; }

/* nonblocking collectives */
int tc_mpi_iallreduce(const void *sbuf, void *rbuf, int64_t n, MPI_Datatype dt, MPI_Op op,
                      MPI_Comm comm, MPI_Request *req);
int tc_mpi_ireduce(const void *sbuf, void *rbuf, int64_t n, MPI_Datatype dt, MPI_Op op, int root,
                   MPI_Comm comm, MPI_Request *req);
int tc_mpi_ireduce_scatter_block(const void *sbuf, void *rbuf, int64_t n, MPI_Datatype dt,
                                 MPI_Op op, MPI_Comm comm, MPI_Request *req);
int tc_mpi_ibcast(void *buf, int64_t n, MPI_Datatype dt, int root, MPI_Comm comm, MPI_Request *req);
int tc_mpi_iallgather(const void *sbuf, int64_t sn, MPI_Datatype sdt, void *rbuf, int64_t rn,
                      MPI_Datatype rdt, MPI_Comm comm, MPI_Request *req);
int tc_mpi_igather(const void *sbuf, int64_t sn, MPI_Datatype sdt, void *rbuf, int64_t rn,
                   MPI_Datatype rdt, int root, MPI_Comm comm, MPI_Request *req);
int tc_mpi_iscatter(const void *sbuf, int64_t sn, MPI_Datatype sdt, void *rbuf, int64_t rn,
                    MPI_Datatype rdt, int root, MPI_Comm comm, MPI_Request *req);
int tc_mpi_ialltoall(const void *sbuf, int64_t n, MPI_Datatype dt, void *rbuf, MPI_Comm comm,
                     MPI_Request *req);
/* The _c forms of the vector calls, for callers whose int arrays would not hold the counts
 * (only where tc_mpi_large_count(); elsewhere MPI_ERR_OTHER). The arrays live until the call
 * completes. */
int tc_mpi_iallgatherv_c(const void *sbuf, MPI_Count sn, MPI_Datatype dt, void *rbuf,
                         const MPI_Count *rcounts, const MPI_Aint *rdispls, MPI_Comm comm,
                         MPI_Request *req);
int tc_mpi_ialltoallv_c(const void *sbuf, const MPI_Count *scounts, const MPI_Aint *sdispls,
                        void *rbuf, const MPI_Count *rcounts, const MPI_Aint *rdispls,
                        MPI_Datatype dt, MPI_Comm comm, MPI_Request *req);

/* point-to-point */
int tc_mpi_isend(const void *buf, int64_t n, MPI_Datatype dt, int peer, int tag, MPI_Comm comm,
                 MPI_Request *req);
int tc_mpi_irecv(void *buf, int64_t n, MPI_Datatype dt, int peer, int tag, MPI_Comm comm,
                 MPI_Request *req);

/* Whether op is a sum or a product (*prod) that C computes (base/host_loops.h: for the common
 * dtypes) rather than MPI_Reduce_local. */
static inline bool tc_mpi_op_host(MPI_Op op, bool *prod) {
  *prod = op == MPI_PROD;
  return op == MPI_SUM || op == MPI_PROD;
}
/* local: acc[i] = in[i] (op) acc[i] for n elements of dtype d: sums and products of float32/64 and
 * int32/64 in C, the rest with MPI_Reduce_local, in pieces where one call cannot carry them;
 * *call: the call that failed. */
int tc_mpi_reduce_local(const void *in, void *acc, int64_t n, tcoll_dtype_t d, MPI_Op op,
                        const char **call);
/* dst[i] = a[i] (op) b[i] in one pass where C does it (sums and products of float32/64 and
 * int32/64), else b copied to dst and a reduced onto it; dst may be b, never a. */
int tc_mpi_reduce_into(const void *a, const void *b, void *dst, int64_t n, tcoll_dtype_t d,
                       MPI_Op op, const char **call);
/* The same with stores that bypass the cache where the machine has them (x86-64): for large
 * outputs that this core does not read again soon, whose lines then need not be read in first.
 * They are weakly ordered: tc_stream_fence() (base/stream_copy.h) before anything tells another
 * thread or rank they are there. */
int tc_mpi_reduce_streaming(const void *a, const void *b, void *dst, int64_t n, tcoll_dtype_t d,
                            MPI_Op op, const char **call);
/* Whether (d, op) is a sum that base/host_loops.h's tc_host_sum_divided divides in its pass
 * (float32 and float64). */
bool tc_mpi_reduce_divides(tcoll_dtype_t d, MPI_Op op);

/* blocking collectives (the multi-buffer ops, the cma probe). A blocking call waits inside MPI,
 * where no schedule is driven, so a peer that joins it only after waiting for an earlier
 * collective whose later steps this rank starts (a ring beyond 2 ranks) would wait forever.
 * drive: the nonblocking form instead, waited for driving every schedule (tc_wait_driving,
 * drive.h). Every rank must pass the same drive: a blocking collective does not match a nonblocking
 * one. */
int tc_mpi_allreduce(const void *sbuf, void *rbuf, int64_t n, MPI_Datatype dt, MPI_Op op,
                     MPI_Comm comm, bool drive);
int tc_mpi_reduce(const void *sbuf, void *rbuf, int64_t n, MPI_Datatype dt, MPI_Op op, int root,
                  MPI_Comm comm, bool drive);
int tc_mpi_bcast(void *buf, int64_t n, MPI_Datatype dt, int root, MPI_Comm comm, bool drive);
int tc_mpi_allgather(const void *sbuf, int64_t sn, MPI_Datatype sdt, void *rbuf, int64_t rn,
                     MPI_Datatype rdt, MPI_Comm comm, bool drive);

#endif
