/* MPI calls with int64_t counts (see mpi_calls.h). Every _c call tcoll makes is here (but
 * MPI_Op_create_c, in mpi_glue.c): each function takes the int form within the per-call limit
 * and, where MPI has large counts, the _c form above it. Without large counts callers never pass
 * a count above the limit. */
#include "mpi_calls.h"

#include "../base/dtype.h"
#include "../base/host_loops.h"
#include "../drive.h"

#include <string.h>

#define LARGE(n) tc_mpi_use_c(n)

/* ------------------------------------------------------------------ nonblocking collectives */

int tc_mpi_iallreduce(const void *sbuf, void *rbuf, int64_t n, MPI_Datatype dt, MPI_Op op,
                      MPI_Comm comm, MPI_Request *req) {
#if TC_MPI_LARGE_COUNT
  if (LARGE(n)) return PMPI_Iallreduce_c(sbuf, rbuf, n, dt, op, comm, req);
#endif
  return PMPI_Iallreduce(sbuf, rbuf, (int)n, dt, op, comm, req);
}

int tc_mpi_ireduce(const void *sbuf, void *rbuf, int64_t n, MPI_Datatype dt, MPI_Op op, int root,
                   MPI_Comm comm, MPI_Request *req) {
#if TC_MPI_LARGE_COUNT
  if (LARGE(n)) return PMPI_Ireduce_c(sbuf, rbuf, n, dt, op, root, comm, req);
#endif
  return PMPI_Ireduce(sbuf, rbuf, (int)n, dt, op, root, comm, req);
}

int tc_mpi_ireduce_scatter_block(const void *sbuf, void *rbuf, int64_t n, MPI_Datatype dt,
                                 MPI_Op op, MPI_Comm comm, MPI_Request *req) {
#if TC_MPI_LARGE_COUNT
  if (LARGE(n)) return PMPI_Ireduce_scatter_block_c(sbuf, rbuf, n, dt, op, comm, req);
#endif
  return PMPI_Ireduce_scatter_block(sbuf, rbuf, (int)n, dt, op, comm, req);
}

int tc_mpi_ibcast(void *buf, int64_t n, MPI_Datatype dt, int root, MPI_Comm comm,
                  MPI_Request *req) {
#if TC_MPI_LARGE_COUNT
  if (LARGE(n)) return PMPI_Ibcast_c(buf, n, dt, root, comm, req);
#endif
  return PMPI_Ibcast(buf, (int)n, dt, root, comm, req);
}

int tc_mpi_iallgather(const void *sbuf, int64_t sn, MPI_Datatype sdt, void *rbuf, int64_t rn,
                      MPI_Datatype rdt, MPI_Comm comm, MPI_Request *req) {
#if TC_MPI_LARGE_COUNT
  if (LARGE(tc_mpi_max2(sn, rn))) return PMPI_Iallgather_c(sbuf, sn, sdt, rbuf, rn, rdt, comm, req);
#endif
  return PMPI_Iallgather(sbuf, (int)sn, sdt, rbuf, (int)rn, rdt, comm, req);
}

int tc_mpi_igather(const void *sbuf, int64_t sn, MPI_Datatype sdt, void *rbuf, int64_t rn,
                   MPI_Datatype rdt, int root, MPI_Comm comm, MPI_Request *req) {
#if TC_MPI_LARGE_COUNT
  if (LARGE(tc_mpi_max2(sn, rn)))
    return PMPI_Igather_c(sbuf, sn, sdt, rbuf, rn, rdt, root, comm, req);
#endif
  return PMPI_Igather(sbuf, (int)sn, sdt, rbuf, (int)rn, rdt, root, comm, req);
}

int tc_mpi_iscatter(const void *sbuf, int64_t sn, MPI_Datatype sdt, void *rbuf, int64_t rn,
                    MPI_Datatype rdt, int root, MPI_Comm comm, MPI_Request *req) {
#if TC_MPI_LARGE_COUNT
  if (LARGE(tc_mpi_max2(sn, rn)))
    return PMPI_Iscatter_c(sbuf, sn, sdt, rbuf, rn, rdt, root, comm, req);
#endif
  return PMPI_Iscatter(sbuf, (int)sn, sdt, rbuf, (int)rn, rdt, root, comm, req);
}

int tc_mpi_ialltoall(const void *sbuf, int64_t n, MPI_Datatype dt, void *rbuf, MPI_Comm comm,
                     MPI_Request *req) {
#if TC_MPI_LARGE_COUNT
  if (LARGE(n)) return PMPI_Ialltoall_c(sbuf, n, dt, rbuf, n, dt, comm, req);
#endif
  return PMPI_Ialltoall(sbuf, (int)n, dt, rbuf, (int)n, dt, comm, req);
}

int tc_mpi_iallgatherv_c(const void *sbuf, MPI_Count sn, MPI_Datatype dt, void *rbuf,
                         const MPI_Count *rcounts, const MPI_Aint *rdispls, MPI_Comm comm,
                         MPI_Request *req) {
#if TC_MPI_LARGE_COUNT
  return PMPI_Iallgatherv_c(sbuf, sn, dt, rbuf, rcounts, rdispls, dt, comm, req);
#else
  TC_UNUSED(sbuf), TC_UNUSED(sn), TC_UNUSED(dt), TC_UNUSED(rbuf), TC_UNUSED(rcounts),
      TC_UNUSED(rdispls);
  TC_UNUSED(comm), TC_UNUSED(req);
  return MPI_ERR_OTHER;
#endif
}

int tc_mpi_ialltoallv_c(const void *sbuf, const MPI_Count *scounts, const MPI_Aint *sdispls,
                        void *rbuf, const MPI_Count *rcounts, const MPI_Aint *rdispls,
                        MPI_Datatype dt, MPI_Comm comm, MPI_Request *req) {
#if TC_MPI_LARGE_COUNT
  return PMPI_Ialltoallv_c(sbuf, scounts, sdispls, dt, rbuf, rcounts, rdispls, dt, comm, req);
#else
  TC_UNUSED(sbuf), TC_UNUSED(scounts), TC_UNUSED(sdispls), TC_UNUSED(rbuf), TC_UNUSED(rcounts);
  TC_UNUSED(rdispls), TC_UNUSED(dt), TC_UNUSED(comm), TC_UNUSED(req);
  return MPI_ERR_OTHER;
#endif
}

/* ------------------------------------------------------------------ point-to-point */

int tc_mpi_isend(const void *buf, int64_t n, MPI_Datatype dt, int peer, int tag, MPI_Comm comm,
                 MPI_Request *req) {
#if TC_MPI_LARGE_COUNT
  if (LARGE(n)) return PMPI_Isend_c(buf, n, dt, peer, tag, comm, req);
#endif
  return PMPI_Isend(buf, (int)n, dt, peer, tag, comm, req);
}

int tc_mpi_irecv(void *buf, int64_t n, MPI_Datatype dt, int peer, int tag, MPI_Comm comm,
                 MPI_Request *req) {
#if TC_MPI_LARGE_COUNT
  if (LARGE(n)) return PMPI_Irecv_c(buf, n, dt, peer, tag, comm, req);
#endif
  return PMPI_Irecv(buf, (int)n, dt, peer, tag, comm, req);
}

/* ------------------------------------------------------------------ local */

/* Sums and products of the common types in C (base/host_loops.h) at any count: MPICH's
 * MPI_Reduce_local costs about 80 ns a call whatever the count (Open MPI's 9), and its loops are
 * scalar: a float32 sum took 3.5-5x the time of these from 64 KiB to 1 MiB (Open MPI's AVX loops:
 * the same time). The same single IEEE operation per element as MPI's loops (x + y is y + x, bit
 * for bit). dst = a (op) b; false where C does not do it (nothing written). */
static bool reduce_native(const void *a, const void *b, void *dst, int64_t n, tcoll_dtype_t d,
                          MPI_Op op, bool stream) {
  bool prod;
  return tc_mpi_op_host(op, &prod) && tc_host_combine(a, b, dst, n, d, prod, stream);
}

static int reduce_local1(const void *in, void *acc, int64_t n, MPI_Datatype dt, MPI_Op op) {
#if TC_MPI_LARGE_COUNT
  if (LARGE(n)) return PMPI_Reduce_local_c(in, acc, n, dt, op);
#endif
  return PMPI_Reduce_local(in, acc, (int)n, dt, op);
}

/* acc = in (op) acc with MPI_Reduce_local, in pieces where one call cannot carry them. */
static int reduce_local_mpi(const void *in, void *acc, int64_t n, tcoll_dtype_t d, MPI_Op op,
                            const char **call) {
  size_t es = tc_dtype_size(d);
  int64_t per = tc_mpi_per_call(n);
  for (int64_t off = 0; off < n; off += per) {
    int64_t c = n - off < per ? n - off : per;
    int rc = reduce_local1((const char *)in + (size_t)off * es, (char *)acc + (size_t)off * es, c,
                           tc_mpi_dtype(d), op);
    if (rc != MPI_SUCCESS) {
      *call = TC_MPI_NAME("MPI_Reduce_local", c);
      return rc;
    }
  }
  return MPI_SUCCESS;
}

int tc_mpi_reduce_local(const void *in, void *acc, int64_t n, tcoll_dtype_t d, MPI_Op op,
                        const char **call) {
  if (reduce_native(in, acc, acc, n, d, op, false)) return MPI_SUCCESS;
  return reduce_local_mpi(in, acc, n, d, op, call);
}

static int reduce_into(const void *a, const void *b, void *dst, int64_t n, tcoll_dtype_t d,
                       MPI_Op op, bool stream, const char **call) {
  if (reduce_native(a, b, dst, n, d, op, stream)) return MPI_SUCCESS;
  if (dst != b) memcpy(dst, b, (size_t)n * tc_dtype_size(d));
  return reduce_local_mpi(a, dst, n, d, op, call);
}

int tc_mpi_reduce_into(const void *a, const void *b, void *dst, int64_t n, tcoll_dtype_t d,
                       MPI_Op op, const char **call) {
  return reduce_into(a, b, dst, n, d, op, false, call);
}

int tc_mpi_reduce_streaming(const void *a, const void *b, void *dst, int64_t n, tcoll_dtype_t d,
                            MPI_Op op, const char **call) {
  return reduce_into(a, b, dst, n, d, op, true, call);
}

bool tc_mpi_reduce_divides(tcoll_dtype_t d, MPI_Op op) {
  return op == MPI_SUM && (d == TCOLL_FLOAT32 || d == TCOLL_FLOAT64);
}

/* ------------------------------------------------------------------ blocking collectives */

static int drive_until(int posted, MPI_Request *req) {
  return posted != MPI_SUCCESS ? posted : tc_wait_driving(req, 0.0);
}

int tc_mpi_allreduce(const void *sbuf, void *rbuf, int64_t n, MPI_Datatype dt, MPI_Op op,
                     MPI_Comm comm, bool drive) {
  MPI_Request req;
  if (drive) return drive_until(tc_mpi_iallreduce(sbuf, rbuf, n, dt, op, comm, &req), &req);
#if TC_MPI_LARGE_COUNT
  if (LARGE(n)) return PMPI_Allreduce_c(sbuf, rbuf, n, dt, op, comm);
#endif
  return PMPI_Allreduce(sbuf, rbuf, (int)n, dt, op, comm);
}

int tc_mpi_reduce(const void *sbuf, void *rbuf, int64_t n, MPI_Datatype dt, MPI_Op op, int root,
                  MPI_Comm comm, bool drive) {
  MPI_Request req;
  if (drive) return drive_until(tc_mpi_ireduce(sbuf, rbuf, n, dt, op, root, comm, &req), &req);
#if TC_MPI_LARGE_COUNT
  if (LARGE(n)) return PMPI_Reduce_c(sbuf, rbuf, n, dt, op, root, comm);
#endif
  return PMPI_Reduce(sbuf, rbuf, (int)n, dt, op, root, comm);
}

int tc_mpi_bcast(void *buf, int64_t n, MPI_Datatype dt, int root, MPI_Comm comm, bool drive) {
  MPI_Request req;
  if (drive) return drive_until(tc_mpi_ibcast(buf, n, dt, root, comm, &req), &req);
#if TC_MPI_LARGE_COUNT
  if (LARGE(n)) return PMPI_Bcast_c(buf, n, dt, root, comm);
#endif
  return PMPI_Bcast(buf, (int)n, dt, root, comm);
}

int tc_mpi_allgather(const void *sbuf, int64_t sn, MPI_Datatype sdt, void *rbuf, int64_t rn,
                     MPI_Datatype rdt, MPI_Comm comm, bool drive) {
  MPI_Request req;
  if (drive) return drive_until(tc_mpi_iallgather(sbuf, sn, sdt, rbuf, rn, rdt, comm, &req), &req);
#if TC_MPI_LARGE_COUNT
  if (LARGE(tc_mpi_max2(sn, rn))) return PMPI_Allgather_c(sbuf, sn, sdt, rbuf, rn, rdt, comm);
#endif
  return PMPI_Allgather(sbuf, (int)sn, sdt, rbuf, (int)rn, rdt, comm);
}
