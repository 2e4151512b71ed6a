/* Profiling-interface wrappers: each counts one call, then calls the real MPI function. libtcoll
 * calls MPI's PMPI_* names (so that the drop-in layer, libtcoll-mpi.so, never sees tcoll's own
 * calls): the wrappers define those, and the executable's definitions take precedence over
 * libmpi's for libtcoll's calls; the next definition (libmpi's) is found with dlsym(RTLD_NEXT).
 * The test's own MPI_* calls are not counted. Where MPI has the MPI-4
 * large-count calls (MPICH 4), tcoll makes a count above TCOLL_MAX_COUNT one call of the _c
 * form: those are counted as well.
 *
 * Counts are process-wide (atomic: the progress thread posts schedule steps while the test's
 * thread waits), with a per-thread total beside them. tcoll's bootstrap service
 * (lib/bootstrap.c) works on a communicator of its own, and its first call there is the only
 * receive from MPI_ANY_SOURCE that tcoll posts: calls on the communicator of the latest such
 * receive are the service's and are not counted (they answer other ranks' rendezvous requests,
 * whatever the test does meanwhile). */
#include "mpi_count.h"

#include "harness.h"

#include "forward.h"

#include <mpi.h>

static long counts[T_MPI_NFN], service_calls;
static _Thread_local long thread_calls;
static MPI_Comm service; /* the bootstrap service's communicator, once service_known */
static int service_known;

static bool is_service(MPI_Comm c) {
  return __atomic_load_n(&service_known, __ATOMIC_ACQUIRE) &&
         c == __atomic_load_n(&service, __ATOMIC_RELAXED);
}

static void count(t_mpi_fn_t fn, MPI_Comm c) {
  if (is_service(c)) {
    __atomic_add_fetch(&service_calls, 1, __ATOMIC_RELAXED);
    return;
  }
  thread_calls++;
  __atomic_add_fetch(&counts[fn], 1, __ATOMIC_RELAXED);
}

long t_mpi_calls_of(t_mpi_fn_t fn) { return __atomic_load_n(&counts[fn], __ATOMIC_RELAXED); }
long t_mpi_calls(void) {
  long n = 0;
  for (int f = 0; f < T_MPI_NFN; f++) n += t_mpi_calls_of((t_mpi_fn_t)f);
  return n;
}
long t_mpi_calls_this_thread(void) { return thread_calls; }
long t_mpi_service_calls(void) { return __atomic_load_n(&service_calls, __ATOMIC_RELAXED); }

void t_mpi_window_open(t_mpi_window_t *w) {
  w->others_in_flight = tcoll_initialized() && tcoll_pending_count() > 0;
  w->mine = thread_calls;
  w->all = 0;
  for (int f = 0; f < T_MPI_NFN; f++) w->all += w->of[f] = t_mpi_calls_of((t_mpi_fn_t)f);
}

long t_mpi_window_calls(const t_mpi_window_t *w) {
  return w->others_in_flight ? thread_calls - w->mine : t_mpi_calls() - w->all;
}

long t_mpi_window_calls_of(const t_mpi_window_t *w, t_mpi_fn_t fn) {
  T_EXPECT(!w->others_in_flight, "MPI calls counted over a window that opened with %s",
           "work pending (other threads' calls cannot be told apart)");
  return t_mpi_calls_of(fn) - w->of[fn];
}

int PMPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype d, MPI_Op op, MPI_Comm c,
                    MPI_Request *q) {
  count(T_MPI_IALLREDUCE, c);
  FORWARD(PMPI_Iallreduce, s, r, n, d, op, c, q);
}
int PMPI_Ireduce(const void *s, void *r, int n, MPI_Datatype d, MPI_Op op, int root, MPI_Comm c,
                 MPI_Request *q) {
  count(T_MPI_IREDUCE, c);
  FORWARD(PMPI_Ireduce, s, r, n, d, op, root, c, q);
}
int PMPI_Ireduce_scatter_block(const void *s, void *r, int n, MPI_Datatype d, MPI_Op op, MPI_Comm c,
                               MPI_Request *q) {
  count(T_MPI_IREDUCE_SCATTER_BLOCK, c);
  FORWARD(PMPI_Ireduce_scatter_block, s, r, n, d, op, c, q);
}
int PMPI_Ibcast(void *b, int n, MPI_Datatype d, int root, MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IBCAST, c);
  FORWARD(PMPI_Ibcast, b, n, d, root, c, q);
}
int PMPI_Iallgather(const void *s, int sn, MPI_Datatype sd, void *r, int rn, MPI_Datatype rd,
                    MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IALLGATHER, c);
  FORWARD(PMPI_Iallgather, s, sn, sd, r, rn, rd, c, q);
}
int PMPI_Igather(const void *s, int sn, MPI_Datatype sd, void *r, int rn, MPI_Datatype rd, int root,
                 MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IGATHER, c);
  FORWARD(PMPI_Igather, s, sn, sd, r, rn, rd, root, c, q);
}
int PMPI_Iscatter(const void *s, int sn, MPI_Datatype sd, void *r, int rn, MPI_Datatype rd,
                  int root, MPI_Comm c, MPI_Request *q) {
  count(T_MPI_ISCATTER, c);
  FORWARD(PMPI_Iscatter, s, sn, sd, r, rn, rd, root, c, q);
}
int PMPI_Ialltoallv(const void *s, const int sc[], const int sdp[], MPI_Datatype sd, void *r,
                    const int rc[], const int rdp[], MPI_Datatype rd, MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IALLTOALLV, c);
  FORWARD(PMPI_Ialltoallv, s, sc, sdp, sd, r, rc, rdp, rd, c, q);
}
int PMPI_Ialltoallw(const void *s, const int sc[], const int sdp[], const MPI_Datatype sd[],
                    void *r, const int rc[], const int rdp[], const MPI_Datatype rd[], MPI_Comm c,
                    MPI_Request *q) {
  count(T_MPI_IALLTOALLW, c);
  FORWARD(PMPI_Ialltoallw, s, sc, sdp, sd, r, rc, rdp, rd, c, q);
}
int PMPI_Iallgatherv(const void *s, int sn, MPI_Datatype sd, void *r, const int rn[],
                     const int rdp[], MPI_Datatype rd, MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IALLGATHERV, c);
  FORWARD(PMPI_Iallgatherv, s, sn, sd, r, rn, rdp, rd, c, q);
}
int PMPI_Ialltoall(const void *s, int sn, MPI_Datatype sd, void *r, int rn, MPI_Datatype rd,
                   MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IALLTOALL, c);
  FORWARD(PMPI_Ialltoall, s, sn, sd, r, rn, rd, c, q);
}
int PMPI_Isend(const void *b, int n, MPI_Datatype d, int dst, int tag, MPI_Comm c, MPI_Request *q) {
  count(T_MPI_ISEND, c);
  FORWARD(PMPI_Isend, b, n, d, dst, tag, c, q);
}
int PMPI_Irecv(void *b, int n, MPI_Datatype d, int src, int tag, MPI_Comm c, MPI_Request *q) {
  if (src == MPI_ANY_SOURCE) { /* the bootstrap service's */
    __atomic_store_n(&service, c, __ATOMIC_RELAXED);
    __atomic_store_n(&service_known, 1, __ATOMIC_RELEASE);
  }
  count(T_MPI_IRECV, c);
  FORWARD(PMPI_Irecv, b, n, d, src, tag, c, q);
}
int PMPI_Send(const void *b, int n, MPI_Datatype d, int dst, int tag, MPI_Comm c) {
  count(T_MPI_SEND, c);
  FORWARD(PMPI_Send, b, n, d, dst, tag, c);
}
int PMPI_Recv(void *b, int n, MPI_Datatype d, int src, int tag, MPI_Comm c, MPI_Status *st) {
  count(T_MPI_RECV, c);
  FORWARD(PMPI_Recv, b, n, d, src, tag, c, st);
}
int PMPI_Allreduce(const void *s, void *r, int n, MPI_Datatype d, MPI_Op op, MPI_Comm c) {
  count(T_MPI_ALLREDUCE, c);
  FORWARD(PMPI_Allreduce, s, r, n, d, op, c);
}
int PMPI_Allgather(const void *s, int sn, MPI_Datatype sd, void *r, int rn, MPI_Datatype rd,
                   MPI_Comm c) {
  count(T_MPI_ALLGATHER, c);
  FORWARD(PMPI_Allgather, s, sn, sd, r, rn, rd, c);
}
int PMPI_Reduce(const void *s, void *r, int n, MPI_Datatype d, MPI_Op op, int root, MPI_Comm c) {
  count(T_MPI_REDUCE, c);
  FORWARD(PMPI_Reduce, s, r, n, d, op, root, c);
}
int PMPI_Reduce_scatter_block(const void *s, void *r, int n, MPI_Datatype d, MPI_Op op,
                              MPI_Comm c) {
  count(T_MPI_REDUCE_SCATTER_BLOCK, c);
  FORWARD(PMPI_Reduce_scatter_block, s, r, n, d, op, c);
}
int PMPI_Bcast(void *b, int n, MPI_Datatype d, int root, MPI_Comm c) {
  count(T_MPI_BCAST, c);
  FORWARD(PMPI_Bcast, b, n, d, root, c);
}
int PMPI_Barrier(MPI_Comm c) {
  count(T_MPI_BARRIER, c);
  FORWARD(PMPI_Barrier, c);
}
int PMPI_Comm_dup(MPI_Comm c, MPI_Comm *n) {
  count(T_MPI_COMM_DUP, c);
  FORWARD(PMPI_Comm_dup, c, n);
}
int PMPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm *n) {
  count(T_MPI_COMM_SPLIT, c);
  FORWARD(PMPI_Comm_split, c, color, key, n);
}
int PMPI_Comm_create_group(MPI_Comm c, MPI_Group g, int tag, MPI_Comm *n) {
  count(T_MPI_COMM_CREATE_GROUP, c);
  FORWARD(PMPI_Comm_create_group, c, g, tag, n);
}

#if MPI_VERSION >= 4
int PMPI_Iallreduce_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op op, MPI_Comm c,
                      MPI_Request *q) {
  count(T_MPI_IALLREDUCE, c);
  FORWARD(PMPI_Iallreduce_c, s, r, n, d, op, c, q);
}
int PMPI_Ireduce_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op op, int root,
                   MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IREDUCE, c);
  FORWARD(PMPI_Ireduce_c, s, r, n, d, op, root, c, q);
}
int PMPI_Ireduce_scatter_block_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op op,
                                 MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IREDUCE_SCATTER_BLOCK, c);
  FORWARD(PMPI_Ireduce_scatter_block_c, s, r, n, d, op, c, q);
}
int PMPI_Ibcast_c(void *b, MPI_Count n, MPI_Datatype d, int root, MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IBCAST, c);
  FORWARD(PMPI_Ibcast_c, b, n, d, root, c, q);
}
int PMPI_Iallgather_c(const void *s, MPI_Count sn, MPI_Datatype sd, void *r, MPI_Count rn,
                      MPI_Datatype rd, MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IALLGATHER, c);
  FORWARD(PMPI_Iallgather_c, s, sn, sd, r, rn, rd, c, q);
}
int PMPI_Iallgatherv_c(const void *s, MPI_Count sn, MPI_Datatype sd, void *r, const MPI_Count rn[],
                       const MPI_Aint rdp[], MPI_Datatype rd, MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IALLGATHERV, c);
  FORWARD(PMPI_Iallgatherv_c, s, sn, sd, r, rn, rdp, rd, c, q);
}
int PMPI_Igather_c(const void *s, MPI_Count sn, MPI_Datatype sd, void *r, MPI_Count rn,
                   MPI_Datatype rd, int root, MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IGATHER, c);
  FORWARD(PMPI_Igather_c, s, sn, sd, r, rn, rd, root, c, q);
}
int PMPI_Iscatter_c(const void *s, MPI_Count sn, MPI_Datatype sd, void *r, MPI_Count rn,
                    MPI_Datatype rd, int root, MPI_Comm c, MPI_Request *q) {
  count(T_MPI_ISCATTER, c);
  FORWARD(PMPI_Iscatter_c, s, sn, sd, r, rn, rd, root, c, q);
}
int PMPI_Ialltoall_c(const void *s, MPI_Count sn, MPI_Datatype sd, void *r, MPI_Count rn,
                     MPI_Datatype rd, MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IALLTOALL, c);
  FORWARD(PMPI_Ialltoall_c, s, sn, sd, r, rn, rd, c, q);
}
int PMPI_Ialltoallv_c(const void *s, const MPI_Count sc[], const MPI_Aint sdp[], MPI_Datatype sd,
                      void *r, const MPI_Count rc[], const MPI_Aint rdp[], MPI_Datatype rd,
                      MPI_Comm c, MPI_Request *q) {
  count(T_MPI_IALLTOALLV, c);
  FORWARD(PMPI_Ialltoallv_c, s, sc, sdp, sd, r, rc, rdp, rd, c, q);
}
int PMPI_Isend_c(const void *b, MPI_Count n, MPI_Datatype d, int dst, int tag, MPI_Comm c,
                 MPI_Request *q) {
  count(T_MPI_ISEND, c);
  FORWARD(PMPI_Isend_c, b, n, d, dst, tag, c, q);
}
int PMPI_Irecv_c(void *b, MPI_Count n, MPI_Datatype d, int src, int tag, MPI_Comm c,
                 MPI_Request *q) {
  count(T_MPI_IRECV, c);
  FORWARD(PMPI_Irecv_c, b, n, d, src, tag, c, q);
}
int PMPI_Allreduce_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op op, MPI_Comm c) {
  count(T_MPI_ALLREDUCE, c);
  FORWARD(PMPI_Allreduce_c, s, r, n, d, op, c);
}
int PMPI_Reduce_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op op, int root,
                  MPI_Comm c) {
  count(T_MPI_REDUCE, c);
  FORWARD(PMPI_Reduce_c, s, r, n, d, op, root, c);
}
int PMPI_Reduce_scatter_block_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op op,
                                MPI_Comm c) {
  count(T_MPI_REDUCE_SCATTER_BLOCK, c);
  FORWARD(PMPI_Reduce_scatter_block_c, s, r, n, d, op, c);
}
int PMPI_Allgather_c(const void *s, MPI_Count sn, MPI_Datatype sd, void *r, MPI_Count rn,
                     MPI_Datatype rd, MPI_Comm c) {
  count(T_MPI_ALLGATHER, c);
  FORWARD(PMPI_Allgather_c, s, sn, sd, r, rn, rd, c);
}
int PMPI_Bcast_c(void *b, MPI_Count n, MPI_Datatype d, int root, MPI_Comm c) {
  count(T_MPI_BCAST, c);
  FORWARD(PMPI_Bcast_c, b, n, d, root, c);
}
#endif
