/* PMPI wrappers: each counts one call, then calls the real MPI function. The executable's
 * definitions take precedence over libmpi's for libtcoll's calls too. Where MPI has the MPI-4
 * large-count calls (MPICH 4), tcoll makes a count above TCOLL_MAX_COUNT one call of the _c
 * form: those are counted as well. */
#include "mpi_count.h"

#include <mpi.h>

static long calls;
static _Thread_local long thread_calls;
long t_mpi_calls(void) { return __atomic_load_n(&calls, __ATOMIC_RELAXED); }
long t_mpi_calls_this_thread(void) { return thread_calls; }
#define COUNT() (thread_calls++, __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED))

int MPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype d, MPI_Op op, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Iallreduce(s, r, n, d, op, c, q);
}
int MPI_Ireduce(const void *s, void *r, int n, MPI_Datatype d, MPI_Op op, int root, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Ireduce(s, r, n, d, op, root, c, q);
}
int MPI_Ireduce_scatter_block(const void *s, void *r, int n, MPI_Datatype d, MPI_Op op, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Ireduce_scatter_block(s, r, n, d, op, c, q);
}
int MPI_Ibcast(void *b, int n, MPI_Datatype d, int root, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Ibcast(b, n, d, root, c, q);
}
int MPI_Iallgather(const void *s, int sn, MPI_Datatype sd, void *r, int rn, MPI_Datatype rd, MPI_Comm c,
                   MPI_Request *q) {
  COUNT();
  return PMPI_Iallgather(s, sn, sd, r, rn, rd, c, q);
}
int MPI_Igather(const void *s, int sn, MPI_Datatype sd, void *r, int rn, MPI_Datatype rd, int root, MPI_Comm c,
                MPI_Request *q) {
  COUNT();
  return PMPI_Igather(s, sn, sd, r, rn, rd, root, c, q);
}
int MPI_Iscatter(const void *s, int sn, MPI_Datatype sd, void *r, int rn, MPI_Datatype rd, int root, MPI_Comm c,
                 MPI_Request *q) {
  COUNT();
  return PMPI_Iscatter(s, sn, sd, r, rn, rd, root, c, q);
}
int MPI_Ialltoallv(const void *s, const int sc[], const int sdp[], MPI_Datatype sd, void *r, const int rc[],
                   const int rdp[], MPI_Datatype rd, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Ialltoallv(s, sc, sdp, sd, r, rc, rdp, rd, c, q);
}
int MPI_Ialltoallw(const void *s, const int sc[], const int sdp[], const MPI_Datatype sd[], void *r, const int rc[],
                   const int rdp[], const MPI_Datatype rd[], MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Ialltoallw(s, sc, sdp, sd, r, rc, rdp, rd, c, q);
}
int MPI_Iallgatherv(const void *s, int sn, MPI_Datatype sd, void *r, const int rn[], const int rdp[], MPI_Datatype rd,
                    MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Iallgatherv(s, sn, sd, r, rn, rdp, rd, c, q);
}
int MPI_Ialltoall(const void *s, int sn, MPI_Datatype sd, void *r, int rn, MPI_Datatype rd, MPI_Comm c,
                  MPI_Request *q) {
  COUNT();
  return PMPI_Ialltoall(s, sn, sd, r, rn, rd, c, q);
}
int MPI_Isend(const void *b, int n, MPI_Datatype d, int dst, int tag, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Isend(b, n, d, dst, tag, c, q);
}
int MPI_Irecv(void *b, int n, MPI_Datatype d, int src, int tag, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Irecv(b, n, d, src, tag, c, q);
}
int MPI_Send(const void *b, int n, MPI_Datatype d, int dst, int tag, MPI_Comm c) {
  COUNT();
  return PMPI_Send(b, n, d, dst, tag, c);
}
int MPI_Recv(void *b, int n, MPI_Datatype d, int src, int tag, MPI_Comm c, MPI_Status *st) {
  COUNT();
  return PMPI_Recv(b, n, d, src, tag, c, st);
}
int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype d, MPI_Op op, MPI_Comm c) {
  COUNT();
  return PMPI_Allreduce(s, r, n, d, op, c);
}
int MPI_Allgather(const void *s, int sn, MPI_Datatype sd, void *r, int rn, MPI_Datatype rd, MPI_Comm c) {
  COUNT();
  return PMPI_Allgather(s, sn, sd, r, rn, rd, c);
}
int MPI_Reduce(const void *s, void *r, int n, MPI_Datatype d, MPI_Op op, int root, MPI_Comm c) {
  COUNT();
  return PMPI_Reduce(s, r, n, d, op, root, c);
}
int MPI_Reduce_scatter_block(const void *s, void *r, int n, MPI_Datatype d, MPI_Op op, MPI_Comm c) {
  COUNT();
  return PMPI_Reduce_scatter_block(s, r, n, d, op, c);
}
int MPI_Bcast(void *b, int n, MPI_Datatype d, int root, MPI_Comm c) {
  COUNT();
  return PMPI_Bcast(b, n, d, root, c);
}
int MPI_Barrier(MPI_Comm c) {
  COUNT();
  return PMPI_Barrier(c);
}
int MPI_Comm_dup(MPI_Comm c, MPI_Comm *n) {
  COUNT();
  return PMPI_Comm_dup(c, n);
}
int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm *n) {
  COUNT();
  return PMPI_Comm_split(c, color, key, n);
}
int MPI_Comm_create_group(MPI_Comm c, MPI_Group g, int tag, MPI_Comm *n) {
  COUNT();
  return PMPI_Comm_create_group(c, g, tag, n);
}

#if MPI_VERSION >= 4
int MPI_Iallreduce_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op op, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Iallreduce_c(s, r, n, d, op, c, q);
}
int MPI_Ireduce_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op op, int root, MPI_Comm c,
                  MPI_Request *q) {
  COUNT();
  return PMPI_Ireduce_c(s, r, n, d, op, root, c, q);
}
int MPI_Ireduce_scatter_block_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op op, MPI_Comm c,
                                MPI_Request *q) {
  COUNT();
  return PMPI_Ireduce_scatter_block_c(s, r, n, d, op, c, q);
}
int MPI_Ibcast_c(void *b, MPI_Count n, MPI_Datatype d, int root, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Ibcast_c(b, n, d, root, c, q);
}
int MPI_Iallgather_c(const void *s, MPI_Count sn, MPI_Datatype sd, void *r, MPI_Count rn, MPI_Datatype rd, MPI_Comm c,
                     MPI_Request *q) {
  COUNT();
  return PMPI_Iallgather_c(s, sn, sd, r, rn, rd, c, q);
}
int MPI_Iallgatherv_c(const void *s, MPI_Count sn, MPI_Datatype sd, void *r, const MPI_Count rn[],
                      const MPI_Aint rdp[], MPI_Datatype rd, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Iallgatherv_c(s, sn, sd, r, rn, rdp, rd, c, q);
}
int MPI_Igather_c(const void *s, MPI_Count sn, MPI_Datatype sd, void *r, MPI_Count rn, MPI_Datatype rd, int root,
                  MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Igather_c(s, sn, sd, r, rn, rd, root, c, q);
}
int MPI_Iscatter_c(const void *s, MPI_Count sn, MPI_Datatype sd, void *r, MPI_Count rn, MPI_Datatype rd, int root,
                   MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Iscatter_c(s, sn, sd, r, rn, rd, root, c, q);
}
int MPI_Ialltoall_c(const void *s, MPI_Count sn, MPI_Datatype sd, void *r, MPI_Count rn, MPI_Datatype rd, MPI_Comm c,
                    MPI_Request *q) {
  COUNT();
  return PMPI_Ialltoall_c(s, sn, sd, r, rn, rd, c, q);
}
int MPI_Ialltoallv_c(const void *s, const MPI_Count sc[], const MPI_Aint sdp[], MPI_Datatype sd, void *r,
                     const MPI_Count rc[], const MPI_Aint rdp[], MPI_Datatype rd, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Ialltoallv_c(s, sc, sdp, sd, r, rc, rdp, rd, c, q);
}
int MPI_Isend_c(const void *b, MPI_Count n, MPI_Datatype d, int dst, int tag, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Isend_c(b, n, d, dst, tag, c, q);
}
int MPI_Irecv_c(void *b, MPI_Count n, MPI_Datatype d, int src, int tag, MPI_Comm c, MPI_Request *q) {
  COUNT();
  return PMPI_Irecv_c(b, n, d, src, tag, c, q);
}
int MPI_Allreduce_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op op, MPI_Comm c) {
  COUNT();
  return PMPI_Allreduce_c(s, r, n, d, op, c);
}
int MPI_Reduce_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op op, int root, MPI_Comm c) {
  COUNT();
  return PMPI_Reduce_c(s, r, n, d, op, root, c);
}
int MPI_Reduce_scatter_block_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op op, MPI_Comm c) {
  COUNT();
  return PMPI_Reduce_scatter_block_c(s, r, n, d, op, c);
}
int MPI_Allgather_c(const void *s, MPI_Count sn, MPI_Datatype sd, void *r, MPI_Count rn, MPI_Datatype rd, MPI_Comm c) {
  COUNT();
  return PMPI_Allgather_c(s, sn, sd, r, rn, rd, c);
}
int MPI_Bcast_c(void *b, MPI_Count n, MPI_Datatype d, int root, MPI_Comm c) {
  COUNT();
  return PMPI_Bcast_c(b, n, d, root, c);
}
#endif
