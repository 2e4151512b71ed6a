/* MPI calls with int64_t counts (see mpi_calls.h). Every _c call tcoll makes is here (but
 * MPI_Op_create_c, in mpi_glue.c): each function takes the int form within the per-call limit
 * and, where MPI has large counts, the _c form above it. Without large counts callers never pass
 * a count above the limit. */
#include "mpi_calls.h"

#include "../base/dtype.h"
#include "../base/stream_copy.h"
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

static bool reduce_native(const void *in, void *acc, int64_t n, tcoll_dtype_t d, MPI_Op op);

static int reduce_local1(const void *in, void *acc, int64_t n, MPI_Datatype dt, MPI_Op op) {
#if TC_MPI_LARGE_COUNT
  if (LARGE(n)) return PMPI_Reduce_local_c(in, acc, n, dt, op);
#endif
  return PMPI_Reduce_local(in, acc, (int)n, dt, op);
}

int tc_mpi_reduce_local(const void *in, void *acc, int64_t n, tcoll_dtype_t d, MPI_Op op,
                        const char **call) {
  if (reduce_native(in, acc, n, d, op)) return MPI_SUCCESS;
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

/* The loops of tc_mpi_reduce_into: z = x (op) y, z apart from x, y or z the same (accumulate).
 * Written with vectors of 16 bytes, two a step (GCC's and Clang's vector extensions: SSE2 on
 * x86-64, NEON elsewhere), since -O2's cheap vectorizer leaves the plain loop scalar under LTO:
 * one movss/addss/movss per float, 2.5x the time of the vector loop on 8 MiB (perf on
 * bench/heap-bench). Each vector goes from its register to memory: a 32-byte vector on plain
 * x86-64 went through the stack before every store, which made a 2-process reduce-scatter of
 * 16 MiB 0.88-0.91x a memcpy of the input where stores from registers take 0.66-0.77x (the CI
 * machine). The op and the streaming are decided once, outside the loop. The same single IEEE
 * operation per element, in any width.
 * stream: z written with non-temporal stores from its first 16-byte boundary on (x86-64 only; the
 * caller fences: base/stream_copy.h). */
#if TC_CAN_STREAM
#define STORE16(p, v, stream)                                 \
  do {                                                        \
    if (stream)                                               \
      _mm_stream_si128((__m128i *)(void *)(p), (__m128i)(v)); \
    else                                                      \
      memcpy((p), &(v), 16);                                  \
  } while (0)
#else
#define STORE16(p, v, stream) memcpy((p), &(v), 16)
#endif
/* What follows the op on each element in the same pass: nothing, or AVG's division (by the
 * divisor, or times its reciprocal where that is exact: tc_exact_reciprocal). */
enum { POST_NONE, POST_MUL, POST_DIV };
#define INTO_ONE(a, b, sum, post, s)                            \
  ((post) == POST_MUL   ? ((sum) ? (a) + (b) : (a) * (b)) * (s) \
   : (post) == POST_DIV ? ((sum) ? (a) + (b) : (a) * (b)) / (s) \
                        : ((sum) ? (a) + (b) : (a) * (b)))
#define INTO_LOOP(T, name, POSTS)                                                                 \
  typedef T name##_vec __attribute__((vector_size(16)));                                          \
  static inline __attribute__((always_inline)) void name##_steps(                                 \
      const T *x, const T *y, T *z, int64_t i, int64_t n, bool sum, bool stream, int post, T s) { \
    enum { W = 16 / sizeof(T) };                                                                  \
    name##_vec sv;                                                                                \
    for (int k = 0; k < W; k++) sv[k] = s;                                                        \
    for (name##_vec a0, a1, b0, b1; i + 2 * W <= n; i += 2 * W) {                                 \
      memcpy(&a0, x + i, 16);                                                                     \
      memcpy(&a1, x + i + W, 16);                                                                 \
      memcpy(&b0, y + i, 16);                                                                     \
      memcpy(&b1, y + i + W, 16);                                                                 \
      a0 = INTO_ONE(a0, b0, sum, post, sv);                                                       \
      a1 = INTO_ONE(a1, b1, sum, post, sv);                                                       \
      STORE16(z + i, a0, stream);                                                                 \
      STORE16(z + i + W, a1, stream);                                                             \
    }                                                                                             \
    for (; i < n; i++) z[i] = INTO_ONE(x[i], y[i], sum, post, s);                                 \
  }                                                                                               \
  static inline __attribute__((always_inline)) void name##_post(                                  \
      const T *x, const T *y, T *z, int64_t i, int64_t n, bool sum, bool stream, int post, T s) { \
    if (sum && stream)                                                                            \
      name##_steps(x, y, z, i, n, true, true, post, s);                                           \
    else if (sum)                                                                                 \
      name##_steps(x, y, z, i, n, true, false, post, s);                                          \
    else if (stream)                                                                              \
      name##_steps(x, y, z, i, n, false, true, post, s);                                          \
    else                                                                                          \
      name##_steps(x, y, z, i, n, false, false, post, s);                                         \
  }                                                                                               \
  static void name##_into(const T *x, const T *y, T *z, int64_t n, bool sum, bool stream,         \
                          int post, T s) {                                                        \
    int64_t i = 0;                                                                                \
    for (; stream && i < n && ((uintptr_t)(z + i) & 15); i++)                                     \
      z[i] = INTO_ONE(x[i], y[i], sum, post, s);                                                  \
    if ((POSTS) && post == POST_MUL)                                                              \
      name##_post(x, y, z, i, n, sum, stream, POST_MUL, s);                                       \
    else if ((POSTS) && post == POST_DIV)                                                         \
      name##_post(x, y, z, i, n, sum, stream, POST_DIV, s);                                       \
    else                                                                                          \
      name##_post(x, y, z, i, n, sum, stream, POST_NONE, s);                                      \
  }
/* POSTS: whether the type has AVG's division (the floats); the integers' loops have none. */
INTO_LOOP(float, f32, true)
INTO_LOOP(double, f64, true)
INTO_LOOP(uint32_t, u32, false)
INTO_LOOP(uint64_t, u64, false)

/* Sums and products of the common types in C at any count: MPICH's MPI_Reduce_local costs about
 * 80 ns a call whatever the count (Open MPI's 9), and its loops are scalar: a float32 sum took
 * 3.5-5x the time of these from 64 KiB to 1 MiB (Open MPI's AVX loops: the same time). The same
 * single IEEE operation per element as MPI's loops (x + y is y + x, bit for bit). */
static bool reduce_native(const void *in, void *acc, int64_t n, tcoll_dtype_t d, MPI_Op op) {
  bool sum = op == MPI_SUM;
  if (!sum && op != MPI_PROD) return false;
  switch (d) {
  case TCOLL_FLOAT32: f32_into(in, acc, acc, n, sum, false, POST_NONE, 1); return true;
  case TCOLL_FLOAT64: f64_into(in, acc, acc, n, sum, false, POST_NONE, 1); return true;
  case TCOLL_INT32: u32_into(in, acc, acc, n, sum, false, POST_NONE, 1); return true; /* wraps */
  case TCOLL_INT64: u64_into(in, acc, acc, n, sum, false, POST_NONE, 1); return true;
  default: return false;
  }
}

#define INTO(name, T) name##_into(a, b, dst, n, sum, stream, POST_NONE, 1)

static int reduce_into(const void *a, const void *b, void *dst, int64_t n, tcoll_dtype_t d,
                       MPI_Op op, bool stream, const char **call) {
  bool sum = op == MPI_SUM;
  if (sum || op == MPI_PROD) {
    switch (d) {
    case TCOLL_FLOAT32: INTO(f32, float); return MPI_SUCCESS;
    case TCOLL_FLOAT64: INTO(f64, double); return MPI_SUCCESS;
    case TCOLL_INT32: INTO(u32, uint32_t); return MPI_SUCCESS; /* wraps as MPI's does */
    case TCOLL_INT64: INTO(u64, uint64_t); return MPI_SUCCESS;
    default: break;
    }
  }
  if (dst != b) memcpy(dst, b, (size_t)n * tc_dtype_size(d));
  return tc_mpi_reduce_local(a, dst, n, d, op, call);
}

int tc_mpi_reduce_into(const void *a, const void *b, void *dst, int64_t n, tcoll_dtype_t d,
                       MPI_Op op, const char **call) {
  return reduce_into(a, b, dst, n, d, op, false, call);
}

int tc_mpi_reduce_streaming(const void *a, const void *b, void *dst, int64_t n, tcoll_dtype_t d,
                            MPI_Op op, const char **call) {
  return reduce_into(a, b, dst, n, d, op, TC_CAN_STREAM, call);
}

bool tc_mpi_reduce_divides(tcoll_dtype_t d, MPI_Op op) {
  return op == MPI_SUM && (d == TCOLL_FLOAT32 || d == TCOLL_FLOAT64);
}

void tc_mpi_reduce_divided(const void *a, const void *b, void *dst, int64_t n, tcoll_dtype_t d,
                           double divisor, bool stream) {
  int post = tc_exact_reciprocal(divisor) ? POST_MUL : POST_DIV;
  stream = stream && TC_CAN_STREAM;
  if (d == TCOLL_FLOAT64)
    f64_into(a, b, dst, n, true, stream, post, post == POST_MUL ? 1.0 / divisor : divisor);
  else
    f32_into(a, b, dst, n, true, stream, post,
             post == POST_MUL ? 1.0f / (float)divisor : (float)divisor);
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
