/* The collective entry points: each plans its call (routed to tcoll where every condition
 * holds) or passes it to PMPI_* untouched. A plan reads only what MPI requires to match across
 * ranks (count, type signature, op, root, communicator), so every rank plans alike:
 *   - the layer is on (and for nonblocking calls every rank has a way to progress them);
 *   - the communicator has its twin (made at its first blocking call: twins.c);
 *   - a count above 0, a type signature of one predefined type (types.c), a predefined op that
 *     tcoll applies to that type, a valid root;
 *   - tcoll's table picks one of its own algorithms for the call, and the layer measured such a
 *     call (blocking, or not) beating MPI's at that size (tcoll_layer_verdict, lib/mpi/layer.c),
 *     or it is a persistent call on an MPI whose own are wrong (lay_mpi_persistent_wrong):
 *     elsewhere the call goes to PMPI unchanged.
 * Buffers of a non-contiguous type, and in-place inputs that overlap the output, go through a
 * packed copy (the call's scratch); every other buffer is handed to tcoll as it is. Before any
 * of this, a rank's device buffers are replaced by host mirrors where the MPI cannot read them
 * (device.c): the plan, and a call passed to MPI, see host memory only. */
#include "layer.h"

#include <stdlib.h>
#include <string.h>

static tcoll_tensor_t vec(void *data, tcoll_dtype_t dtype, int64_t n) {
  int64_t shape[1] = {n};
  return tcoll_tensor_make(data, dtype, 1, shape, TCOLL_HOST);
}

/* The layer is on and comm has a twin. blocking: every rank is here, the twin may be made. */
static bool begin(lay_call_t *c, lay_fn_t fn, tcoll_layer_op_t op, MPI_Comm comm, bool blocking) {
  if (!lay_on && !(blocking && comm == MPI_COMM_WORLD && lay_start_late())) return false;
  if (!blocking && !lay_nonblocking) return false;
  c->twin = lay_twin(comm, blocking);
  if (!c->twin) return false;
  c->fn = fn, c->op = op, c->comm = comm, c->blocking = blocking;
  c->scratch = c->unpack_to = NULL;
  c->pack_from = c->copy = NULL;
  c->persistent = false;
  c->root = 0, c->redop = -1;
  c->stage.n = 0;
  c->inner = MPI_REQUEST_NULL;
  return true;
}

/* The algorithm that serves the call, or NULL: it passes to MPI. */
static const char *choose(const lay_call_t *c, int64_t n, tcoll_dtype_t dtype, int redop) {
  if (c->persistent && lay_mpi_persistent_wrong)
    return tcoll_layer_algorithm(c->op, c->twin, n, dtype, redop);
  return tcoll_layer_verdict(c->op, c->blocking, c->twin, n, dtype, redop);
}

/* Scratch of the call: bytes, owned by the call from here on. */
static char *scratch(lay_call_t *c, size_t bytes) {
  c->scratch = malloc(bytes ? bytes : 1);
  return c->scratch;
}

/* Where count elements of type t at buf lie for tcoll: at buf, or in dst, packed there when the
 * call is posted (lay_post). */
static void *input_at(lay_call_t *c, const void *buf, int count, MPI_Datatype t,
                      const lay_type_t *lt, char *dst) {
  if (lt->contiguous) return (char *)buf + lt->lb;
  c->pack_from = buf, c->pack_count = count, c->pack_type = t;
  return dst;
}

/* Where tcoll writes what belongs in count elements of type t at buf: there, or into dst and
 * unpacked at completion. */
static void *output_at(lay_call_t *c, void *buf, int count, MPI_Datatype t, const lay_type_t *lt,
                       char *dst) {
  if (lt->contiguous) return (char *)buf + lt->lb;
  c->unpack_to = buf, c->unpack_count = count, c->unpack_type = t;
  return dst;
}

/* A reduction's type and op as tcoll's; n: elements of count datatypes. */
static bool reduction(MPI_Datatype dt, int count, MPI_Op op, lay_type_t *lt, int *redop,
                      int64_t *n) {
  if (count <= 0 || !lay_type_of(dt, lt) || !lt->reducible) return false;
  *redop = lay_redop_of(op, lt->dtype);
  *n = (int64_t)count * lt->per_type;
  return *redop >= 0;
}

/* A movement's type as bytes: n bytes of count datatypes. */
static bool movement(MPI_Datatype dt, int count, lay_type_t *lt, int64_t *n) {
  if (count <= 0 || !lay_type_of(dt, lt)) return false;
  *n = (int64_t)count * lt->per_type * (int64_t)lt->elem;
  return true;
}

static bool valid_root(const lay_call_t *c, int root) {
  return root >= 0 && root < tcoll_comm_size(c->twin);
}

/* ------------------------------------------------------------------ plans */

/* all_reduce, and reduce with root >= 0 (off the root, the input is the registered buffer). */
static bool plan_reduction(lay_call_t *c, const void *s, void *r, int count, MPI_Datatype dt,
                           MPI_Op op, int root) {
  lay_type_t lt;
  int64_t n;
  if (!reduction(dt, count, op, &lt, &c->redop, &n)) return false;
  if (root >= 0 && !valid_root(c, root)) return false;
  c->algo = choose(c, n, lt.dtype, c->redop);
  if (!c->algo) return false;
  c->root = root < 0 ? 0 : root;
  bool out_here = root < 0 || tcoll_comm_rank(c->twin) == root;
  bool in_place = s == MPI_IN_PLACE && out_here;
  size_t bytes = (size_t)n * lt.elem;
  char *tmp = lt.contiguous ? NULL : scratch(c, 2 * bytes);
  if (!lt.contiguous && !tmp) return false;
  void *in, *out;
  if (in_place) {
    in = input_at(c, r, count, dt, &lt, tmp);
    out = output_at(c, r, count, dt, &lt, tmp);
  } else {
    in = input_at(c, s, count, dt, &lt, tmp);
    out = out_here ? output_at(c, r, count, dt, &lt, tmp + bytes) : in;
  }
  c->in = vec(in, lt.dtype, n);
  c->out = vec(out, lt.dtype, n);
  return true;
}

static bool plan_bcast(lay_call_t *c, void *buf, int count, MPI_Datatype dt, int root) {
  lay_type_t lt;
  int64_t n;
  if (!movement(dt, count, &lt, &n) || !valid_root(c, root)) return false;
  c->algo = choose(c, n, TCOLL_UINT8, -1);
  if (!c->algo) return false;
  c->root = root;
  char *tmp = lt.contiguous ? NULL : scratch(c, (size_t)n);
  if (!lt.contiguous && !tmp) return false;
  void *at = buf;
  if (tcoll_comm_rank(c->twin) == root)
    at = input_at(c, buf, count, dt, &lt, tmp);
  else
    at = output_at(c, buf, count, dt, &lt, tmp);
  c->in = c->out = vec(at, TCOLL_UINT8, n);
  return true;
}

static bool plan_allgather(lay_call_t *c, const void *s, int scount, MPI_Datatype stype, void *r,
                           int rcount, MPI_Datatype rtype) {
  lay_type_t rt, st;
  int64_t n, sn;
  if (!movement(rtype, rcount, &rt, &n)) return false;
  bool in_place = s == MPI_IN_PLACE;
  if (!in_place && (!movement(stype, scount, &st, &sn) || sn != n)) return false;
  c->algo = choose(c, n, TCOLL_UINT8, -1);
  if (!c->algo) return false;
  int p = tcoll_comm_size(c->twin), me = tcoll_comm_rank(c->twin);
  bool copy_in = in_place || !st.contiguous; /* in place: the block lies inside the output */
  size_t in_bytes = copy_in ? (size_t)n : 0, out_bytes = rt.contiguous ? 0 : (size_t)n * p;
  char *tmp = in_bytes + out_bytes ? scratch(c, in_bytes + out_bytes) : NULL;
  if (in_bytes + out_bytes && !tmp) return false;
  void *in;
  if (in_place) {
    MPI_Aint lb, extent;
    PMPI_Type_get_extent(rtype, &lb, &extent);
    const char *mine = (const char *)r + (MPI_Aint)me * rcount * extent;
    lay_type_t packed = rt;
    packed.contiguous = false; /* always copied out of the output */
    in = input_at(c, mine, rcount, rtype, &packed, tmp);
  } else {
    in = input_at(c, s, scount, stype, &st, tmp);
  }
  void *out = output_at(c, r, rcount * p, rtype, &rt, tmp + in_bytes);
  c->in = vec(in, TCOLL_UINT8, n);
  c->out = vec(out, TCOLL_UINT8, n * p);
  return true;
}

static bool plan_alltoall(lay_call_t *c, const void *s, int scount, MPI_Datatype stype, void *r,
                          int rcount, MPI_Datatype rtype) {
  lay_type_t rt, st;
  int64_t n, sn;
  if (s == MPI_IN_PLACE || !movement(rtype, rcount, &rt, &n) ||
      !movement(stype, scount, &st, &sn) || sn != n)
    return false;
  c->algo = choose(c, n, TCOLL_UINT8, -1);
  if (!c->algo) return false;
  int p = tcoll_comm_size(c->twin);
  size_t total = (size_t)n * p;
  size_t in_bytes = st.contiguous ? 0 : total, out_bytes = rt.contiguous ? 0 : total;
  char *tmp = in_bytes + out_bytes ? scratch(c, in_bytes + out_bytes) : NULL;
  if (in_bytes + out_bytes && !tmp) return false;
  void *in = input_at(c, s, scount * p, stype, &st, tmp);
  void *out = output_at(c, r, rcount * p, rtype, &rt, tmp + in_bytes);
  c->in = vec(in, TCOLL_UINT8, (int64_t)total);
  c->out = vec(out, TCOLL_UINT8, (int64_t)total);
  return true;
}

/* reduce_scatter with rcount elements to every rank. */
static bool plan_reduce_scatter(lay_call_t *c, const void *s, void *r, int rcount, MPI_Datatype dt,
                                MPI_Op op) {
  lay_type_t lt;
  int64_t n;
  int p = tcoll_comm_size(c->twin);
  if (!reduction(dt, rcount, op, &lt, &c->redop, &n)) return false;
  c->algo = choose(c, n * p, lt.dtype, c->redop);
  if (!c->algo) return false;
  bool in_place = s == MPI_IN_PLACE; /* the input is r, the output its first block */
  size_t block = (size_t)n * lt.elem;
  size_t in_bytes = in_place || !lt.contiguous ? block * p : 0;
  size_t out_bytes = lt.contiguous ? 0 : block;
  char *tmp = in_bytes + out_bytes ? scratch(c, in_bytes + out_bytes) : NULL;
  if (in_bytes + out_bytes && !tmp) return false;
  lay_type_t copied = lt;
  copied.contiguous = !in_place && lt.contiguous;
  void *in = input_at(c, in_place ? r : s, rcount * p, dt, &copied, tmp);
  void *out = output_at(c, r, rcount, dt, &lt, tmp + in_bytes);
  c->in = vec(in, lt.dtype, n * p);
  c->out = vec(out, lt.dtype, n);
  return true;
}

/* Equal counts make reduce_scatter the block form; unequal ones pass through. */
static int equal_counts(const lay_call_t *c, const int *counts) {
  int p = tcoll_comm_size(c->twin);
  for (int i = 1; i < p; i++)
    if (counts[i] != counts[0]) return -1;
  return counts[0];
}

/* ------------------------------------------------------------------ entry points */

/* A routed call, on the mirrors of its device buffers where st has some. */
static int run(lay_call_t *c, const lay_stage_t *st, MPI_Request *request) {
  c->stage = *st;
  return request ? lay_run_nonblocking(c, request) : lay_run_blocking(c);
}

#define PASS(fn, call)          \
  do {                          \
    lay_count(fn, NULL, false); \
    return call;                \
  } while (0)

/* A call passed to MPI: on the mirrors of its device buffers where st has some (staged), else
 * untouched. A nonblocking one posts `call` with &inner as its request (PASS_NB). */
#define PASS_STAGED(fn, st, staged, call)                                              \
  do {                                                                                 \
    if (!(staged)) PASS(fn, call);                                                     \
    int trc_ = lay_stage_in(&(st));                                                    \
    int rc_ = trc_ != TCOLL_SUCCESS ? lay_error(comm, trc_, lay_fn_name(fn)) : (call); \
    return lay_pass_staged(&(st), fn, comm, rc_);                                      \
  } while (0)
#define PASS_NB(fn, st, staged, call, staged_call)                                            \
  do {                                                                                        \
    if (!(staged)) PASS(fn, call);                                                            \
    MPI_Request inner = MPI_REQUEST_NULL;                                                     \
    int trc_ = lay_stage_in(&(st));                                                           \
    int rc_ = trc_ != TCOLL_SUCCESS ? lay_error(comm, trc_, lay_fn_name(fn)) : (staged_call); \
    return lay_pass_staged_nonblocking(&(st), fn, comm, rc_, inner, request);                 \
  } while (0)

LAY_EXPORT int MPI_Allreduce(const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op,
                             MPI_Comm comm) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_reduction(&st, &s, &r, count, dt, -1, comm);
  if (begin(&c, LAY_ALLREDUCE, TCOLL_LAYER_ALL_REDUCE, comm, true) &&
      plan_reduction(&c, s, r, count, dt, op, -1))
    return run(&c, &st, NULL);
  PASS_STAGED(LAY_ALLREDUCE, st, dev, lay_next.Allreduce(s, r, count, dt, op, comm));
}

LAY_EXPORT int MPI_Iallreduce(const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op,
                              MPI_Comm comm, MPI_Request *request) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_reduction(&st, &s, &r, count, dt, -1, comm);
  if (begin(&c, LAY_IALLREDUCE, TCOLL_LAYER_ALL_REDUCE, comm, false) &&
      plan_reduction(&c, s, r, count, dt, op, -1))
    return run(&c, &st, request);
  PASS_NB(LAY_IALLREDUCE, st, dev, lay_next.Iallreduce(s, r, count, dt, op, comm, request),
          lay_next.Iallreduce(s, r, count, dt, op, comm, &inner));
}

LAY_EXPORT int MPI_Reduce(const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op, int root,
                          MPI_Comm comm) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_reduction(&st, &s, &r, count, dt, root, comm);
  if (begin(&c, LAY_REDUCE, TCOLL_LAYER_REDUCE, comm, true) &&
      plan_reduction(&c, s, r, count, dt, op, root))
    return run(&c, &st, NULL);
  PASS_STAGED(LAY_REDUCE, st, dev, lay_next.Reduce(s, r, count, dt, op, root, comm));
}

LAY_EXPORT int MPI_Ireduce(const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op, int root,
                           MPI_Comm comm, MPI_Request *request) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_reduction(&st, &s, &r, count, dt, root, comm);
  if (begin(&c, LAY_IREDUCE, TCOLL_LAYER_REDUCE, comm, false) &&
      plan_reduction(&c, s, r, count, dt, op, root))
    return run(&c, &st, request);
  PASS_NB(LAY_IREDUCE, st, dev, lay_next.Ireduce(s, r, count, dt, op, root, comm, request),
          lay_next.Ireduce(s, r, count, dt, op, root, comm, &inner));
}

LAY_EXPORT int MPI_Bcast(void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_bcast(&st, &buf, count, dt, root, comm);
  if (begin(&c, LAY_BCAST, TCOLL_LAYER_BROADCAST, comm, true) &&
      plan_bcast(&c, buf, count, dt, root))
    return run(&c, &st, NULL);
  PASS_STAGED(LAY_BCAST, st, dev, lay_next.Bcast(buf, count, dt, root, comm));
}

LAY_EXPORT int MPI_Ibcast(void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm,
                          MPI_Request *request) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_bcast(&st, &buf, count, dt, root, comm);
  if (begin(&c, LAY_IBCAST, TCOLL_LAYER_BROADCAST, comm, false) &&
      plan_bcast(&c, buf, count, dt, root))
    return run(&c, &st, request);
  PASS_NB(LAY_IBCAST, st, dev, lay_next.Ibcast(buf, count, dt, root, comm, request),
          lay_next.Ibcast(buf, count, dt, root, comm, &inner));
}

LAY_EXPORT int MPI_Allgather(const void *s, int scount, MPI_Datatype stype, void *r, int rcount,
                             MPI_Datatype rtype, MPI_Comm comm) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_gather(&st, &s, scount, stype, &r, rcount, rtype, false, comm);
  if (begin(&c, LAY_ALLGATHER, TCOLL_LAYER_ALL_GATHER, comm, true) &&
      plan_allgather(&c, s, scount, stype, r, rcount, rtype))
    return run(&c, &st, NULL);
  PASS_STAGED(LAY_ALLGATHER, st, dev, lay_next.Allgather(s, scount, stype, r, rcount, rtype, comm));
}

LAY_EXPORT int MPI_Iallgather(const void *s, int scount, MPI_Datatype stype, void *r, int rcount,
                              MPI_Datatype rtype, MPI_Comm comm, MPI_Request *request) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_gather(&st, &s, scount, stype, &r, rcount, rtype, false, comm);
  if (begin(&c, LAY_IALLGATHER, TCOLL_LAYER_ALL_GATHER, comm, false) &&
      plan_allgather(&c, s, scount, stype, r, rcount, rtype))
    return run(&c, &st, request);
  PASS_NB(LAY_IALLGATHER, st, dev,
          lay_next.Iallgather(s, scount, stype, r, rcount, rtype, comm, request),
          lay_next.Iallgather(s, scount, stype, r, rcount, rtype, comm, &inner));
}

LAY_EXPORT int MPI_Alltoall(const void *s, int scount, MPI_Datatype stype, void *r, int rcount,
                            MPI_Datatype rtype, MPI_Comm comm) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_gather(&st, &s, scount, stype, &r, rcount, rtype, true, comm);
  if (begin(&c, LAY_ALLTOALL, TCOLL_LAYER_ALL_TO_ALL, comm, true) &&
      plan_alltoall(&c, s, scount, stype, r, rcount, rtype))
    return run(&c, &st, NULL);
  PASS_STAGED(LAY_ALLTOALL, st, dev, lay_next.Alltoall(s, scount, stype, r, rcount, rtype, comm));
}

LAY_EXPORT int MPI_Ialltoall(const void *s, int scount, MPI_Datatype stype, void *r, int rcount,
                             MPI_Datatype rtype, MPI_Comm comm, MPI_Request *request) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_gather(&st, &s, scount, stype, &r, rcount, rtype, true, comm);
  if (begin(&c, LAY_IALLTOALL, TCOLL_LAYER_ALL_TO_ALL, comm, false) &&
      plan_alltoall(&c, s, scount, stype, r, rcount, rtype))
    return run(&c, &st, request);
  PASS_NB(LAY_IALLTOALL, st, dev,
          lay_next.Ialltoall(s, scount, stype, r, rcount, rtype, comm, request),
          lay_next.Ialltoall(s, scount, stype, r, rcount, rtype, comm, &inner));
}

LAY_EXPORT int MPI_Reduce_scatter_block(const void *s, void *r, int rcount, MPI_Datatype dt,
                                        MPI_Op op, MPI_Comm comm) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_reduce_scatter(&st, &s, &r, NULL, rcount, dt, comm);
  if (begin(&c, LAY_REDUCE_SCATTER_BLOCK, TCOLL_LAYER_REDUCE_SCATTER, comm, true) &&
      plan_reduce_scatter(&c, s, r, rcount, dt, op))
    return run(&c, &st, NULL);
  PASS_STAGED(LAY_REDUCE_SCATTER_BLOCK, st, dev,
              lay_next.Reduce_scatter_block(s, r, rcount, dt, op, comm));
}

LAY_EXPORT int MPI_Ireduce_scatter_block(const void *s, void *r, int rcount, MPI_Datatype dt,
                                         MPI_Op op, MPI_Comm comm, MPI_Request *request) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_reduce_scatter(&st, &s, &r, NULL, rcount, dt, comm);
  if (begin(&c, LAY_IREDUCE_SCATTER_BLOCK, TCOLL_LAYER_REDUCE_SCATTER, comm, false) &&
      plan_reduce_scatter(&c, s, r, rcount, dt, op))
    return run(&c, &st, request);
  PASS_NB(LAY_IREDUCE_SCATTER_BLOCK, st, dev,
          lay_next.Ireduce_scatter_block(s, r, rcount, dt, op, comm, request),
          lay_next.Ireduce_scatter_block(s, r, rcount, dt, op, comm, &inner));
}

LAY_EXPORT int MPI_Reduce_scatter(const void *s, void *r, const int counts[], MPI_Datatype dt,
                                  MPI_Op op, MPI_Comm comm) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_reduce_scatter(&st, &s, &r, counts, -1, dt, comm);
  if (begin(&c, LAY_REDUCE_SCATTER, TCOLL_LAYER_REDUCE_SCATTER, comm, true) && counts &&
      equal_counts(&c, counts) > 0 && plan_reduce_scatter(&c, s, r, counts[0], dt, op))
    return run(&c, &st, NULL);
  PASS_STAGED(LAY_REDUCE_SCATTER, st, dev, lay_next.Reduce_scatter(s, r, counts, dt, op, comm));
}

LAY_EXPORT int MPI_Ireduce_scatter(const void *s, void *r, const int counts[], MPI_Datatype dt,
                                   MPI_Op op, MPI_Comm comm, MPI_Request *request) {
  lay_call_t c;
  lay_stage_t st;
  bool dev = lay_stage_reduce_scatter(&st, &s, &r, counts, -1, dt, comm);
  if (begin(&c, LAY_IREDUCE_SCATTER, TCOLL_LAYER_REDUCE_SCATTER, comm, false) && counts &&
      equal_counts(&c, counts) > 0 && plan_reduce_scatter(&c, s, r, counts[0], dt, op))
    return run(&c, &st, request);
  PASS_NB(LAY_IREDUCE_SCATTER, st, dev,
          lay_next.Ireduce_scatter(s, r, counts, dt, op, comm, request),
          lay_next.Ireduce_scatter(s, r, counts, dt, op, comm, &inner));
}

/* ------------------------------------------------------------------ persistent forms (MPI-4) */

#if MPI_VERSION >= 4
/* A persistent call is routed only on a communicator that already has its twin (as a nonblocking
 * one: its initialization makes no collective call of the layer's). A routed one is counted at
 * each start, a passed one at its initialization, or at each start where it runs on host mirrors
 * of its device buffers (hs, hr). `init` initializes MPI's own persistent call on hs, hr with
 * request req: the program's, or where hs, hr are mirrors, &inner, inside a persistent request of
 * the layer's that copies them in at each start and back at each completion. Where the layer has
 * no way to drive calls, `unstage` puts the program's buffers back and the call passes as it is. */
#define PERSISTENT(fn, op, staging, plan, unstage, init)                   \
  do {                                                                     \
    lay_call_t c;                                                          \
    lay_stage_t st;                                                        \
    bool dev = (staging);                                                  \
    if (begin(&c, fn, op, comm, false) && (c.persistent = true, plan)) {   \
      c.stage = st;                                                        \
      return lay_run_persistent(&c, request);                              \
    }                                                                      \
    if (dev && !lay_nonblocking) { /* no way to drive it: as it is */      \
      lay_stage_free(&st);                                                 \
      unstage;                                                             \
      dev = false;                                                         \
    }                                                                      \
    MPI_Request inner = MPI_REQUEST_NULL, *req = dev ? &inner : request;   \
    if (!dev) PASS(fn, init);                                              \
    int rc_ = (init);                                                      \
    return lay_pass_staged_persistent(&st, fn, comm, rc_, inner, request); \
  } while (0)

LAY_EXPORT int MPI_Allreduce_init(const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op,
                                  MPI_Comm comm, MPI_Info info, MPI_Request *request) {
  const void *hs = s;
  void *hr = r;
  PERSISTENT(LAY_ALLREDUCE_INIT, TCOLL_LAYER_ALL_REDUCE,
             lay_stage_reduction(&st, &hs, &hr, count, dt, -1, comm),
             plan_reduction(&c, hs, hr, count, dt, op, -1), (hs = s, hr = r),
             lay_next.Allreduce_init(hs, hr, count, dt, op, comm, info, req));
}

LAY_EXPORT int MPI_Reduce_init(const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op,
                               int root, MPI_Comm comm, MPI_Info info, MPI_Request *request) {
  const void *hs = s;
  void *hr = r;
  PERSISTENT(LAY_REDUCE_INIT, TCOLL_LAYER_REDUCE,
             lay_stage_reduction(&st, &hs, &hr, count, dt, root, comm),
             plan_reduction(&c, hs, hr, count, dt, op, root), (hs = s, hr = r),
             lay_next.Reduce_init(hs, hr, count, dt, op, root, comm, info, req));
}

LAY_EXPORT int MPI_Bcast_init(void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm,
                              MPI_Info info, MPI_Request *request) {
  void *hb = buf;
  PERSISTENT(LAY_BCAST_INIT, TCOLL_LAYER_BROADCAST,
             lay_stage_bcast(&st, &hb, count, dt, root, comm), plan_bcast(&c, hb, count, dt, root),
             (hb = buf), lay_next.Bcast_init(hb, count, dt, root, comm, info, req));
}

LAY_EXPORT int MPI_Allgather_init(const void *s, int scount, MPI_Datatype stype, void *r,
                                  int rcount, MPI_Datatype rtype, MPI_Comm comm, MPI_Info info,
                                  MPI_Request *request) {
  const void *hs = s;
  void *hr = r;
  PERSISTENT(LAY_ALLGATHER_INIT, TCOLL_LAYER_ALL_GATHER,
             lay_stage_gather(&st, &hs, scount, stype, &hr, rcount, rtype, false, comm),
             plan_allgather(&c, hs, scount, stype, hr, rcount, rtype), (hs = s, hr = r),
             lay_next.Allgather_init(hs, scount, stype, hr, rcount, rtype, comm, info, req));
}

LAY_EXPORT int MPI_Alltoall_init(const void *s, int scount, MPI_Datatype stype, void *r, int rcount,
                                 MPI_Datatype rtype, MPI_Comm comm, MPI_Info info,
                                 MPI_Request *request) {
  const void *hs = s;
  void *hr = r;
  PERSISTENT(LAY_ALLTOALL_INIT, TCOLL_LAYER_ALL_TO_ALL,
             lay_stage_gather(&st, &hs, scount, stype, &hr, rcount, rtype, true, comm),
             plan_alltoall(&c, hs, scount, stype, hr, rcount, rtype), (hs = s, hr = r),
             lay_next.Alltoall_init(hs, scount, stype, hr, rcount, rtype, comm, info, req));
}

LAY_EXPORT int MPI_Reduce_scatter_block_init(const void *s, void *r, int rcount, MPI_Datatype dt,
                                             MPI_Op op, MPI_Comm comm, MPI_Info info,
                                             MPI_Request *request) {
  const void *hs = s;
  void *hr = r;
  PERSISTENT(LAY_REDUCE_SCATTER_BLOCK_INIT, TCOLL_LAYER_REDUCE_SCATTER,
             lay_stage_reduce_scatter(&st, &hs, &hr, NULL, rcount, dt, comm),
             plan_reduce_scatter(&c, hs, hr, rcount, dt, op), (hs = s, hr = r),
             lay_next.Reduce_scatter_block_init(hs, hr, rcount, dt, op, comm, info, req));
}

LAY_EXPORT int MPI_Reduce_scatter_init(const void *s, void *r, const int counts[], MPI_Datatype dt,
                                       MPI_Op op, MPI_Comm comm, MPI_Info info,
                                       MPI_Request *request) {
  const void *hs = s;
  void *hr = r;
  PERSISTENT(
      LAY_REDUCE_SCATTER_INIT, TCOLL_LAYER_REDUCE_SCATTER,
      lay_stage_reduce_scatter(&st, &hs, &hr, counts, -1, dt, comm),
      counts && equal_counts(&c, counts) > 0 && plan_reduce_scatter(&c, hs, hr, counts[0], dt, op),
      (hs = s, hr = r), lay_next.Reduce_scatter_init(hs, hr, counts, dt, op, comm, info, req));
}
#endif
