/* NCCL-shaped multi-buffer ops (python_nccl.cpp's reduce / all_reduce / broadcast / all_gather /
 * reduce_scatter over per-device buffer lists): one buffer per local device, optional streams,
 * optional communicators. See tcoll.h for the semantics.
 *
 * Every buffer is copied to pinned host memory on its stream (the host waits: MPI needs the
 * data), reduced there with MPI_Reduce_local (every op and dtype, float16 / bfloat16 included),
 * combined across the processes on comms[0] by the algorithm the table picks for the bytes (a
 * work on the schedule engine, or MPI's blocking call for the literal mapping: see across), and
 * copied back to each device on its stream without waiting (the pinned memory returns to the
 * pool once those copies are done). With communicators, every process first joins one small
 * agreement allreduce, so that bad arguments on one process fail them all instead of leaving
 * the others waiting; it is nonblocking and drives the collectives in flight while it waits (see
 * agree). */
#include "../argcheck.h"
#include "../comm.h"
#include "../base/dtype.h"
#include "../base/host_loops.h"
#include "../mpiglue/mpi_calls.h"
#include "../mpi/algo.h"
#include "../mpi/post.h"
#include "../work/registry.h"
#include "../tensor.h"
#include "../device/device.h"
#include "../work/staging.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID(...) tc_error(TCOLL_ERR_INVALID_ARGUMENT, __VA_ARGS__)

typedef enum { M_ALL_REDUCE, M_REDUCE, M_BROADCAST, M_ALL_GATHER, M_REDUCE_SCATTER } mkind_t;

typedef struct mop {
  mkind_t kind;
  const char *name;
  const tcoll_tensor_t *in;
  int n;
  tcoll_tensor_t *out; /* n outputs (one for reduce) */
  int root;
  tcoll_redop_t op_handle;
  tc_redop_t op;
  void *const *streams;
  tcoll_comm_t *c; /* NULL: local only */
  int P, p;        /* processes, mine */
  void *stream[TC_MAX_DEVICES + 1];
} mop_t;

/* ------------------------------------------------------------------ checks */

static int check_lists(mop_t *m, int n_in, int n_out, bool has_out, void *const *streams,
                       int n_streams, tcoll_comm_t *const *comms, int n_comms, bool fixed_form) {
  int rc = tc_require_init();
  if (rc) return rc;
  m->c = NULL;
  m->P = 1;
  m->p = 0;
  /* The communicator first: with it, a failed check below is shared with the other processes. */
  if (comms && n_comms >= 1 && comms[0] &&
      tc_comm_resolve(comms[0], "comms[0]", &m->c) == TCOLL_SUCCESS) {
    m->P = m->c->size;
    m->p = m->c->rank;
  }
  if (n_in < 1) return INVALID("n is %d (expected at least one buffer)", n_in);
  if (!m->in) return INVALID("in is NULL (expected %d tensors)", n_in);
  if (has_out && n_out != n_in)
    return INVALID("number of outputs is not equal to number of inputs (%d outputs, %d inputs)",
                   n_out, n_in);
  if (streams && n_streams != n_in)
    return INVALID("number of streams is not equal to number of inputs (%d streams, %d inputs)",
                   n_streams, n_in);
  if (!comms) return TCOLL_SUCCESS;
  if (n_comms != n_in)
    return INVALID(
        "number of communicators is not equal to number of inputs (%d communicators, %d inputs)",
        n_comms, n_in);
  char nm[32];
  for (int i = 0; i < n_in; i++) {
    if (!comms[i])
      return INVALID(
          fixed_form
              ? "number of communicators is not equal to number of inputs (comms[%d] is NULL; "
                "expected %d communicators)"
              : "comms[%d] is NULL (expected %d communicators)",
          i, n_in);
    snprintf(nm, sizeof nm, "comms[%d]", i);
    tcoll_comm_t *c;
    if ((rc = tc_comm_resolve(comms[i], nm, &c))) return rc;
    if (i == 0) continue;
    int res = MPI_UNEQUAL;
    PMPI_Comm_compare(m->c->mpi, c->mpi, &res);
    if (res != MPI_IDENT && res != MPI_CONGRUENT)
      return INVALID(
          "comms[%d] does not have the same members as comms[0], in the same order (expected one "
          "set of "
          "processes)",
          i);
  }
  return TCOLL_SUCCESS;
}

static int check_buffers(mop_t *m) {
  char nm[32], a[96], b[96];
  int rc;
  bool seen_host = false;
  for (int i = 0; i < m->n; i++) {
    const tcoll_tensor_t *x = &m->in[i];
    snprintf(nm, sizeof nm, "in[%d]", i);
    if ((rc = tc_check_tensor(x, nm))) return rc;
    if (x->dtype != m->in[0].dtype)
      return INVALID("%s->dtype is %s but in[0]->dtype is %s (expected one dtype)", nm,
                     tcoll_dtype_name(x->dtype), tcoll_dtype_name(m->in[0].dtype));
    if (!tc_same_shape(x->ndim, x->shape, m->in[0].ndim, m->in[0].shape))
      return INVALID("%s->shape is %s but in[0]->shape is %s (expected one shape)", nm,
                     tc_shape_str(a, sizeof a, x->ndim, x->shape),
                     tc_shape_str(b, sizeof b, m->in[0].ndim, m->in[0].shape));
    for (int j = 0; j < i; j++)
      if (m->in[j].device == x->device)
        return INVALID("%s->device is %d, as in[%d]->device (expected one buffer per device)", nm,
                       x->device, j);
    if (x->device == TCOLL_HOST) seen_host = true;
    void *s = m->streams && m->streams[i] ? m->streams[i] : NULL;
    if (!s && x->device != TCOLL_HOST) s = tc_dev_current_stream(x->device);
    m->stream[i] = s;
  }
  TC_UNUSED(seen_host);
  if (m->kind == M_REDUCE || m->kind == M_ALL_REDUCE || m->kind == M_REDUCE_SCATTER)
    if ((rc = tc_redop_resolve(m->op_handle, m->in[0].dtype, "op", &m->op))) return rc;
  if (m->kind == M_REDUCE || m->kind == M_BROADCAST) {
    int total = m->n * m->P;
    if (m->root < 0 || m->root >= total)
      return INVALID(
          "invalid root (root is %d, expected a buffer in [0, %d): %d buffer(s) on each of %d "
          "process(es))",
          m->root, total, m->n, m->P);
  }
  if ((m->kind == M_ALL_GATHER || m->kind == M_REDUCE_SCATTER) && m->in[0].ndim < 1)
    return INVALID("in[0] is a 0-dim tensor (expected at least 1 dim: blocks are along dim 0)");
  int64_t gathered;
  if (m->kind == M_ALL_GATHER &&
      tc_mul_overflows(m->in[0].shape[0], (int64_t)m->n * m->P, &gathered))
    return INVALID("gathered dim 0 (%lld x %d buffers) overflows", (long long)m->in[0].shape[0],
                   m->n * m->P);
  if (m->kind == M_REDUCE_SCATTER && m->in[0].shape[0] % (m->n * m->P) != 0)
    return INVALID(
        "input dimension 0 (%lld) must be a multiple of the number of buffers %d (%d per process x "
        "%d)",
        (long long)m->in[0].shape[0], m->n * m->P, m->n, m->P);
  return TCOLL_SUCCESS;
}

static void out_shape(const mop_t *m, int64_t *shape) {
  memcpy(shape, m->in[0].shape, sizeof m->in[0].shape);
  if (m->kind == M_ALL_GATHER) shape[0] *= m->n * m->P;
  if (m->kind == M_REDUCE_SCATTER) shape[0] /= m->n * m->P;
}

static int check_outputs(mop_t *m) {
  int64_t shape[TCOLL_MAX_DIMS];
  out_shape(m, shape);
  char nm[32], in_nm[32];
  int rc;
  int nout = m->kind == M_REDUCE ? 1 : m->n;
  if (m->kind == M_BROADCAST) { /* every buffer but the root's is written */
    for (int i = 0; i < m->n; i++) {
      if (m->p * m->n + i == m->root) continue;
      snprintf(nm, sizeof nm, "inout[%d]", i);
      if ((rc = tc_registry_check_writable(m->in[i].data, tcoll_tensor_nbytes(&m->in[i]), nm)))
        return rc;
    }
    return TCOLL_SUCCESS;
  }
  if (m->kind == M_REDUCE && (m->p != m->root / m->n || !m->out))
    return TCOLL_SUCCESS; /* not written here */
  if (!m->out) return INVALID("out is NULL (expected %d tensors)", nout);
  for (int i = 0; i < nout; i++) {
    int dev = m->kind == M_REDUCE ? m->in[m->root % m->n].device : m->in[i].device;
    snprintf(nm, sizeof nm, m->kind == M_REDUCE ? "out" : "out[%d]", i);
    if ((rc = tc_check_output(&m->out[i], nm, m->in[0].dtype, m->in[0].ndim, shape, dev)))
      return rc;
    if (!m->out[i].data) continue;
    for (int j = 0; j < m->n; j++) {
      snprintf(in_nm, sizeof in_nm, "in[%d]", j);
      bool same_ok =
          (m->kind == M_ALL_REDUCE && i == j) || (m->kind == M_REDUCE && j == m->root % m->n);
      if ((rc = tc_check_disjoint(&m->out[i], nm, &m->in[j], in_nm, same_ok))) return rc;
    }
    /* multi ops write outside the registry: a pending or still-read output is refused */
    if ((rc = tc_registry_check_writable(m->out[i].data, tcoll_tensor_nbytes(&m->out[i]), nm)))
      return rc;
  }
  return TCOLL_SUCCESS;
}

/* Every process learns whether all passed the checks and agree on n, dtype and numel. The
 * agreement drives the schedules in flight while it waits (mpi_calls.h): a peer may join it only
 * after waiting for an earlier collective whose later steps this process starts. Once every
 * process has joined, each is inside this op and the blocking calls that follow cannot wait on
 * anything but each other. */
static int agree(mop_t *m, int local_rc) {
  if (!m->c) return local_rc;
  int64_t numel = local_rc ? -1 : tcoll_tensor_numel(&m->in[0]);
  int64_t v[8] = {local_rc ? 1 : 0,
                  m->n,
                  -m->n,
                  numel,
                  -numel,
                  local_rc ? -1 : (int64_t)m->in[0].dtype,
                  local_rc ? 1 : -(int64_t)m->in[0].dtype,
                  local_rc ? tc_g.world_rank : -1};
  int64_t r[8];
  int mrc = tc_mpi_allreduce(v, r, 8, MPI_INT64_T, MPI_MAX, m->c->ctrl, true);
  if (mrc != MPI_SUCCESS) return tc_mpi_error(mrc, "MPI_Iallreduce (argument agreement)");
  if (local_rc) return local_rc;
  if (r[0])
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "the arguments of world rank %lld were invalid (see its error); %s "
                    "started nothing",
                    (long long)r[7], m->name);
  if (r[1] != -r[2] || r[3] != -r[4] || r[5] != -r[6])
    return tc_error(TCOLL_ERR_MISMATCH,
                    "processes disagree: %lld..%lld buffers per process, %lld..%lld elements per "
                    "buffer, dtypes "
                    "%lld..%lld (expected the same on every process)",
                    (long long)-r[2], (long long)r[1], (long long)-r[4], (long long)r[3],
                    (long long)-r[6], (long long)r[5]);
  return TCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ data movement */

static int load(const mop_t *m, int i, char *dst) {
  const tcoll_tensor_t *x = &m->in[i];
  size_t nb = tcoll_tensor_nbytes(x);
  if (x->device == TCOLL_HOST) {
    memcpy(dst, x->data, nb);
    return TCOLL_SUCCESS;
  }
  return tc_dev()->copy_async(dst, x->data, nb, x->device, m->stream[i]);
}

static int loads_wait(const mop_t *m) {
  int rc = TCOLL_SUCCESS;
  for (int i = 0; i < m->n && !rc; i++)
    if (m->in[i].device != TCOLL_HOST) rc = tc_dev()->stream_sync(m->in[i].device, m->stream[i]);
  return rc;
}

/* Copies host src into buffer dst of local index i; device copies stay queued on its stream. */
static int store(const mop_t *m, int i, void *dst, int dev, const char *src, size_t nb, int *fdev,
                 void **fstream, int *nf) {
  if (dev == TCOLL_HOST) {
    if (dst != src) memcpy(dst, src, nb);
    return TCOLL_SUCCESS;
  }
  fdev[*nf] = dev;
  fstream[(*nf)++] = m->stream[i];
  return tc_dev()->copy_async(dst, src, nb, dev, m->stream[i]);
}

/* Blocking collectives on the host buffer: one call (its _c form above the per-call limit where
 * MPI has large counts), else chunked. */
static int x_allreduce(const mop_t *m, void *buf, int64_t count) {
  MPI_Datatype dt = tc_mpi_dtype(m->in[0].dtype);
  MPI_Op op = tc_mpi_op(&m->op, m->in[0].dtype);
  size_t es = tc_dtype_size(m->in[0].dtype);
  int64_t per = tc_mpi_per_call(count);
  for (int64_t off = 0; off < count; off += per) {
    int64_t c = count - off < per ? count - off : per;
    int rc =
        tc_mpi_allreduce(MPI_IN_PLACE, (char *)buf + (size_t)off * es, c, dt, op, m->c->mpi, false);
    if (rc != MPI_SUCCESS) return tc_mpi_error(rc, TC_MPI_NAME("MPI_Allreduce", c));
  }
  return TCOLL_SUCCESS;
}

/* The root reduces into recv, apart from its contribution in buf: MPICH 4.0's blocking
 * MPI_Reduce crashes on MPI_IN_PLACE at 3 or more ranks from a few KiB (a stand-alone test
 * segfaults at 3, 5, 6 and 7 ranks, 4 KiB and 400 KiB; its MPI_Ireduce does not). */
static int x_reduce(const mop_t *m, const void *buf, void *recv, int64_t count, int root) {
  MPI_Datatype dt = tc_mpi_dtype(m->in[0].dtype);
  MPI_Op op = tc_mpi_op(&m->op, m->in[0].dtype);
  size_t es = tc_dtype_size(m->in[0].dtype);
  int64_t per = tc_mpi_per_call(count);
  for (int64_t off = 0; off < count; off += per) {
    int64_t c = count - off < per ? count - off : per;
    const char *p = (const char *)buf + (size_t)off * es;
    char *r = m->p == root ? (char *)recv + (size_t)off * es : NULL;
    int rc = tc_mpi_reduce(p, r, c, dt, op, root, m->c->mpi, false);
    if (rc != MPI_SUCCESS) return tc_mpi_error(rc, TC_MPI_NAME("MPI_Reduce", c));
  }
  return TCOLL_SUCCESS;
}

static int x_bcast(const mop_t *m, void *buf, int64_t count, int root) {
  tc_mpi_span_t s;
  int rc = tc_mpi_span(m->in[0].dtype, count, &s);
  if (rc) return rc;
  rc = tc_mpi_bcast(buf, s.count, s.dt.type, root, m->c->mpi, false);
  tc_mpi_span_put(&s);
  return rc == MPI_SUCCESS ? TCOLL_SUCCESS : tc_mpi_error(rc, TC_MPI_NAME("MPI_Bcast", s.count));
}

static int x_allgather(const mop_t *m, void *buf, int64_t count) {
  tc_mpi_span_t s;
  int rc = tc_mpi_span(m->in[0].dtype, count, &s);
  if (rc) return rc;
  rc = tc_mpi_allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, s.count, s.dt.type, m->c->mpi,
                        false);
  tc_mpi_span_put(&s);
  return rc == MPI_SUCCESS ? TCOLL_SUCCESS
                           : tc_mpi_error(rc, TC_MPI_NAME("MPI_Allgather", s.count));
}

/* The algorithm of the processes' part, from the table (or TCOLL_ALGO) as for a single call on
 * host memory (the staging buffer): broadcast and the contiguous all_gather have one. */
static const tc_algo_t *across_algo(const mop_t *m, int64_t count) {
  static const int op_of[] = {[M_ALL_REDUCE] = TC_OP_ALL_REDUCE,
                              [M_REDUCE] = TC_OP_REDUCE,
                              [M_REDUCE_SCATTER] = TC_OP_REDUCE_SCATTER};
  if (m->kind != M_ALL_REDUCE && m->kind != M_REDUCE && m->kind != M_REDUCE_SCATTER)
    return &tc_algo_literal;
  tcoll_dtype_t d = m->in[0].dtype;
  tc_algo_query_t q = {.comm = m->c,
                       .bytes = (size_t)count * tc_dtype_size(d),
                       .count = count,
                       .dtype = d,
                       .redop = m->op.kind,
                       .layout = TC_LAYOUT_CONTIG};
  return tc_algo_choose((tc_algo_op_t)op_of[m->kind], &q);
}

/* The processes' part as a work on the schedule engine, like a single call's (keyed under the
 * staging buffer, which no one else sees, and waited for at once): the composed algorithm the
 * table picked, or for reduce_scatter also the MPI call. premul_sum and AVG are applied on the
 * host, before and after. */
static int run_across(const mop_t *m, const tc_algo_t *a, char *stage, size_t stage_bytes,
                      void *res, int64_t count, int root) {
  tcoll_dtype_t d = m->in[0].dtype;
  MPI_Op op = tc_mpi_op(&m->op, d);
  tc_work_t *w;
  int rc =
      tc_work_begin(&w, m->name + strlen("tcoll_"), m->c, TC_SIG(.t = &m->in[0], .op = &m->op));
  if (rc) return rc;
  tc_work_set_algo(w, a->name);
  rc = tc_work_key(w, stage, stage_bytes);
  if (!rc) rc = tc_work_register(w);
  tc_algo_call_t c = {.src = stage,
                      .dst = m->kind == M_ALL_REDUCE ? stage : res,
                      .n = count,
                      .dtype = d,
                      .op = op,
                      .premul = 1.0,
                      .divisor = 1.0,
                      .root = root};
  if (m->kind == M_REDUCE && m->p != root) c.dst = NULL;
  if (m->kind == M_REDUCE_SCATTER) c.n = count / m->P;
  if (!rc && a->build)
    rc = a->build(w, &c);
  else if (!rc)
    rc = tc_post_reduce_scatter_block(w, stage, res, count / m->P, d, op);
  rc = tc_work_end(w, rc);
  int waited = tc_wait_ptr(stage, 0.0, true); /* also what a failed post left in flight */
  return rc ? rc : waited;
}

/* Combines the processes' buffers on stage (stage_bytes: all of the staging buffer), count
 * elements per process: all_reduce, reduce and reduce_scatter start from the local buffers
 * reduced at its start, broadcast from the root's buffer there, all_gather from this process's
 * slot. all_reduce, broadcast and all_gather leave their result in stage, reduce in res on the
 * root process, reduce_scatter this process's block in res. Where the table keeps the literal
 * mapping, all_reduce, reduce, broadcast and all_gather call MPI's blocking collectives: the op
 * is blocking, and Open MPI's blocking calls are faster than the MPI_I* forms a work would post
 * (measured at 2 ranks: MPI_Reduce 2.3-4x, MPI_Allreduce 1.1-1.7x below the sizes where the ring
 * takes over; MPI_Iallgather inside the op 1.1-1.7x the blocking call, though 0.6-0.7x on its
 * own); Open MPI's blocking MPI_Reduce_scatter_block is as slow as its nonblocking form. */
static int across(const mop_t *m, char *stage, size_t stage_bytes, void *res, int64_t count,
                  int root) {
  const tc_algo_t *a = across_algo(m, count);
  if (a->build || m->kind == M_REDUCE_SCATTER)
    return run_across(m, a, stage, stage_bytes, res, count, root);
  tc_work_note_algo(a->name);
  switch (m->kind) {
  case M_ALL_REDUCE: return x_allreduce(m, stage, count);
  case M_REDUCE: return x_reduce(m, stage, res, count, root);
  case M_BROADCAST: return x_bcast(m, stage, count, root);
  default: return x_allgather(m, stage, count);
  }
}

/* Reduces the n staged inputs (stage + i * nb) into stage, with premul_sum scaling. */
static void local_reduce(const mop_t *m, char *stage, int64_t count, size_t nb) {
  if (m->op.kind == TC_REDOP_PREMUL_SUM)
    for (int i = 0; i < m->n; i++)
      tc_host_scale_copy(stage + (size_t)i * nb, stage + (size_t)i * nb, m->in[0].dtype, count,
                         m->op.scalar);
  MPI_Op op = tc_mpi_op(&m->op, m->in[0].dtype);
  for (int i = 1; i < m->n; i++)
    tc_reduce_local(stage + (size_t)i * nb, stage, count, m->in[0].dtype, op);
}

static int run(mop_t *m) {
  const tcoll_tensor_t *x0 = &m->in[0];
  size_t nb = tcoll_tensor_nbytes(x0), es = tc_dtype_size(x0->dtype);
  int64_t count = tcoll_tensor_numel(x0);
  int n = m->n, total = n * m->P;
  size_t bytes = nb * (size_t)n;
  if (m->kind == M_REDUCE) bytes += nb; /* the root's result, apart from its contribution */
  if (m->kind == M_BROADCAST) bytes = nb;
  if (m->kind == M_ALL_GATHER) bytes = nb * (size_t)total;
  if (m->kind == M_REDUCE_SCATTER) bytes = nb * (size_t)n + nb / (size_t)m->P;
  char *stage;
  int rc = tc_pinned_get(bytes ? bytes : 1, (void **)&stage);
  if (rc) return rc;
  int fdev[TC_MAX_DEVICES + 1];
  void *fstream[TC_MAX_DEVICES + 1];
  int nf = 0;
  int rproc = (m->kind == M_REDUCE || m->kind == M_BROADCAST) ? m->root / n : -1,
      rloc = m->root % n;
  bool is_root_proc = rproc == m->p;
  double avg = (double)total;

  switch (m->kind) {
  case M_ALL_REDUCE:
  case M_REDUCE:
    for (int i = 0; i < n && !rc; i++) rc = load(m, i, stage + (size_t)i * nb);
    if (!rc) rc = loads_wait(m);
    if (rc) break;
    local_reduce(m, stage, count, nb);
    char *res = stage;
    if (m->c && m->kind == M_REDUCE) res = stage + (size_t)n * nb;
    if (m->c) rc = across(m, stage, bytes, res, count, rproc);
    if (rc) break;
    if (m->kind == M_REDUCE && !is_root_proc) break;
    if (m->op.kind == TCOLL_AVG) tc_host_divide(res, x0->dtype, count, avg);
    if (m->kind == M_ALL_REDUCE) {
      for (int i = 0; i < n && !rc; i++)
        rc = store(m, i, m->out[i].data, m->in[i].device, res, nb, fdev, fstream, &nf);
    } else {
      void *dst = m->out ? m->out->data : m->in[rloc].data;
      rc = store(m, rloc, dst, m->in[rloc].device, res, nb, fdev, fstream, &nf);
    }
    break;
  case M_BROADCAST:
    if (is_root_proc) {
      rc = load(m, rloc, stage);
      if (!rc && m->in[rloc].device != TCOLL_HOST)
        rc = tc_dev()->stream_sync(m->in[rloc].device, m->stream[rloc]);
    }
    if (!rc && m->c) rc = across(m, stage, bytes, NULL, count, rproc);
    for (int i = 0; i < n && !rc; i++) {
      if (is_root_proc && i == rloc) continue;
      rc = store(m, i, m->in[i].data, m->in[i].device, stage, nb, fdev, fstream, &nf);
    }
    break;
  case M_ALL_GATHER: {
    char *mine = stage + (size_t)m->p * (size_t)n * nb;
    for (int i = 0; i < n && !rc; i++) rc = load(m, i, mine + (size_t)i * nb);
    if (!rc) rc = loads_wait(m);
    if (!rc && m->c) rc = across(m, stage, bytes, NULL, count * n, -1);
    for (int i = 0; i < n && !rc; i++)
      rc = store(m, i, m->out[i].data, m->in[i].device, stage, nb * (size_t)total, fdev, fstream,
                 &nf);
    break;
  }
  case M_REDUCE_SCATTER: {
    int64_t slab = count / total;
    size_t sb = (size_t)slab * es;
    for (int i = 0; i < n && !rc; i++) rc = load(m, i, stage + (size_t)i * nb);
    if (!rc) rc = loads_wait(m);
    if (rc) break;
    local_reduce(m, stage, count, nb);
    /* Process q gets blocks q*n .. q*n + n - 1: contiguous, so the reduced buffer is already
     * laid out as P blocks of n * slab elements. */
    char *mine = stage;
    if (m->c) {
      mine = stage + (size_t)n * nb;
      rc = across(m, stage, bytes, mine, slab * n * m->P, -1);
    } else {
      mine = stage;
    }
    if (rc) break;
    if (m->op.kind == TCOLL_AVG) tc_host_divide(mine, x0->dtype, slab * n, avg);
    for (int i = 0; i < n && !rc; i++)
      rc = store(m, i, m->out[i].data, m->in[i].device, mine + (size_t)i * sb, sb, fdev, fstream,
                 &nf);
    break;
  }
  }
  /* The copies back may still run: the buffer returns to the pool once they are done. */
  if (rc) {
    for (int i = 0; i < nf; i++) tc_dev()->stream_sync(fdev[i], fstream[i]);
    nf = 0;
  }
  tc_pinned_put_after(stage, nf, fdev, fstream);
  return rc;
}

/* ------------------------------------------------------------------ entry points */

static int execute(mop_t *m, int local_rc) {
  int rc = agree(m, local_rc);
  if (rc) return rc;
  /* Pending inputs complete first (in stream order for device buffers). */
  for (int i = 0; i < m->n && !rc; i++)
    if (m->in[i].data) rc = tc_wait_writers(m->in[i].data, tcoll_tensor_nbytes(&m->in[i]));
  if (rc) return rc;
  /* Outputs tcoll allocates (freed again if the op fails). */
  int64_t shape[TCOLL_MAX_DIMS];
  out_shape(m, shape);
  tcoll_tensor_t *made[TC_MAX_DEVICES + 1];
  int nmade = 0,
      nout = m->kind == M_ALL_REDUCE || m->kind == M_ALL_GATHER || m->kind == M_REDUCE_SCATTER
                 ? m->n
                 : 0;
  if (m->kind == M_REDUCE && m->out && m->p == m->root / m->n) nout = 1;
  for (int i = 0; i < nout && !rc; i++) {
    if (m->out[i].data) continue;
    int dev = m->kind == M_REDUCE ? m->in[m->root % m->n].device : m->in[i].device;
    m->out[i] = tcoll_tensor_make(NULL, m->in[0].dtype, m->in[0].ndim, shape, dev);
    if (!(rc = tc_tensor_storage(&m->out[i], false))) made[nmade++] = &m->out[i];
  }
  if (!rc) rc = run(m);
  if (rc)
    for (int i = 0; i < nmade; i++) tc_tensor_release(made[i]);
  return rc;
}

static int multi(mop_t *m, int n_out, bool has_out, void *const *streams, int n_streams,
                 tcoll_comm_t *const *comms, int n_comms, bool fixed) {
  m->streams = streams;
  int rc = check_lists(m, m->n, n_out, has_out, streams, n_streams, comms, n_comms, fixed);
  if (rc && !m->c) return rc; /* cannot tell the other processes */
  if (!rc) rc = check_buffers(m);
  if (!rc) rc = check_outputs(m);
  return execute(m, rc);
}

int tcoll_multi_all_reduce_v(const tcoll_tensor_t *in, int n_in, tcoll_tensor_t *out, int n_out,
                             tcoll_redop_t op, void *const *streams, int n_streams,
                             tcoll_comm_t *const *comms, int n_comms) {
  TC_ENTER("tcoll_multi_all_reduce");
  mop_t m = {.kind = M_ALL_REDUCE,
             .name = "tcoll_multi_all_reduce",
             .in = in,
             .n = n_in,
             .out = out,
             .op_handle = op};
  return multi(&m, n_out, true, streams, n_streams, comms, n_comms, false);
}

int tcoll_multi_reduce_v(const tcoll_tensor_t *in, int n_in, tcoll_tensor_t *out, int root,
                         tcoll_redop_t op, void *const *streams, int n_streams,
                         tcoll_comm_t *const *comms, int n_comms) {
  TC_ENTER("tcoll_multi_reduce");
  mop_t m = {.kind = M_REDUCE,
             .name = "tcoll_multi_reduce",
             .in = in,
             .n = n_in,
             .out = out,
             .root = root,
             .op_handle = op};
  return multi(&m, 1, false, streams, n_streams, comms, n_comms, false);
}

int tcoll_multi_broadcast_v(tcoll_tensor_t *inout, int n, int root, void *const *streams,
                            int n_streams, tcoll_comm_t *const *comms, int n_comms) {
  TC_ENTER("tcoll_multi_broadcast");
  mop_t m = {
      .kind = M_BROADCAST, .name = "tcoll_multi_broadcast", .in = inout, .n = n, .root = root};
  return multi(&m, n, false, streams, n_streams, comms, n_comms, false);
}

int tcoll_multi_all_gather_v(const tcoll_tensor_t *in, int n_in, tcoll_tensor_t *out, int n_out,
                             void *const *streams, int n_streams, tcoll_comm_t *const *comms,
                             int n_comms) {
  TC_ENTER("tcoll_multi_all_gather");
  mop_t m = {
      .kind = M_ALL_GATHER, .name = "tcoll_multi_all_gather", .in = in, .n = n_in, .out = out};
  return multi(&m, n_out, true, streams, n_streams, comms, n_comms, false);
}

int tcoll_multi_reduce_scatter_v(const tcoll_tensor_t *in, int n_in, tcoll_tensor_t *out, int n_out,
                                 tcoll_redop_t op, void *const *streams, int n_streams,
                                 tcoll_comm_t *const *comms, int n_comms) {
  TC_ENTER("tcoll_multi_reduce_scatter");
  mop_t m = {.kind = M_REDUCE_SCATTER,
             .name = "tcoll_multi_reduce_scatter",
             .in = in,
             .n = n_in,
             .out = out,
             .op_handle = op};
  return multi(&m, n_out, true, streams, n_streams, comms, n_comms, false);
}

int tcoll_multi_all_reduce(const tcoll_tensor_t *in, tcoll_tensor_t *out, int n, tcoll_redop_t op,
                           void *const *streams, tcoll_comm_t *const *comms) {
  TC_ENTER("tcoll_multi_all_reduce");
  mop_t m = {.kind = M_ALL_REDUCE,
             .name = "tcoll_multi_all_reduce",
             .in = in,
             .n = n,
             .out = out,
             .op_handle = op};
  return multi(&m, n, true, streams, n, comms, n, true);
}

int tcoll_multi_reduce(const tcoll_tensor_t *in, int n, tcoll_tensor_t *out, int root,
                       tcoll_redop_t op, void *const *streams, tcoll_comm_t *const *comms) {
  TC_ENTER("tcoll_multi_reduce");
  mop_t m = {.kind = M_REDUCE,
             .name = "tcoll_multi_reduce",
             .in = in,
             .n = n,
             .out = out,
             .root = root,
             .op_handle = op};
  return multi(&m, 1, false, streams, n, comms, n, true);
}

int tcoll_multi_broadcast(tcoll_tensor_t *inout, int n, int root, void *const *streams,
                          tcoll_comm_t *const *comms) {
  TC_ENTER("tcoll_multi_broadcast");
  mop_t m = {
      .kind = M_BROADCAST, .name = "tcoll_multi_broadcast", .in = inout, .n = n, .root = root};
  return multi(&m, n, false, streams, n, comms, n, true);
}

int tcoll_multi_all_gather(const tcoll_tensor_t *in, tcoll_tensor_t *out, int n,
                           void *const *streams, tcoll_comm_t *const *comms) {
  TC_ENTER("tcoll_multi_all_gather");
  mop_t m = {.kind = M_ALL_GATHER, .name = "tcoll_multi_all_gather", .in = in, .n = n, .out = out};
  return multi(&m, n, true, streams, n, comms, n, true);
}

int tcoll_multi_reduce_scatter(const tcoll_tensor_t *in, tcoll_tensor_t *out, int n,
                               tcoll_redop_t op, void *const *streams, tcoll_comm_t *const *comms) {
  TC_ENTER("tcoll_multi_reduce_scatter");
  mop_t m = {.kind = M_REDUCE_SCATTER,
             .name = "tcoll_multi_reduce_scatter",
             .in = in,
             .n = n,
             .out = out,
             .op_handle = op};
  return multi(&m, n, true, streams, n, comms, n, true);
}
