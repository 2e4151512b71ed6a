/* Coalesced collectives: one collective per dtype present for any number of tensors. Inputs are
 * packed into one scratch buffer, results unpacked into each output at completion.
 *   all_reduce_coalesced     -> MPI_Iallreduce (from the packed buffer into a second one), or the
 *                               composed algorithm an all_reduce of the group's bytes would take
 *   all_gather_coalesced     -> MPI_Iallgather of the packed bytes
 *   reduce_scatter_coalesced -> MPI_Ireduce_scatter_block of the rank-major packed buffer, or the
 *                               composed algorithm a reduce_scatter of those bytes would take */
#include "../argcheck.h"
#include "../device/device.h"
#include "../work/staging.h"
#include "../base/dtype.h"
#include "../base/host_loops.h"
#include "../tensor.h"
#include "algo.h"
#include "post.h"

#include <stdlib.h>
#include <string.h>

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Elements of each dtype over the tensors (the per-dtype group sizes), in one pass. */
static void group_numels(const tcoll_tensor_t *t, int n, int64_t numel[TCOLL_NUM_DTYPES]) {
  memset(numel, 0, TCOLL_NUM_DTYPES * sizeof *numel);
  for (int i = 0; i < n; i++) numel[t[i].dtype] += tcoll_tensor_numel(&t[i]);
}

/* Bytes of the packed groups, each split into `parts` and aligned. */
static size_t packed_bytes(const int64_t numel[TCOLL_NUM_DTYPES], int parts) {
  size_t total = 0;
  for (int d = 0; d < TCOLL_NUM_DTYPES; d++)
    if (numel[d]) total += align64((size_t)numel[d] * tc_dtype_size(d) / parts);
  return total;
}

/* The device of a call's tensors (all on one, checked), for its packed buffers. */
static int device_of(const tcoll_tensor_t *in, int n) { return n > 0 ? in[0].device : TCOLL_HOST; }

/* Output i's shape: like the input, gathered along dim 0, or scattered along dims[i]. */
typedef enum { SAME, GATHERED, SCATTERED } out_shape_t;

/* Prepares and registers the outputs and waits for pending inputs: common to the three ops. */
static int begin(tc_work_t *w, const tcoll_tensor_t *in, int n, tcoll_tensor_t *out,
                 out_shape_t how, const int *dims) {
  int rc = TCOLL_SUCCESS;
  int64_t shape[TCOLL_MAX_DIMS];
  for (int i = 0; i < n && !rc; i++) {
    memcpy(shape, in[i].shape, sizeof shape);
    if (how == GATHERED) shape[0] *= w->comm->size;
    if (how == SCATTERED) shape[dims[i]] /= w->comm->size;
    rc = tc_work_output(w, &out[i], in[i].dtype, in[i].ndim, shape, in[i].device);
  }
  if (!rc) rc = tc_work_register_inputs(w, in, n);
  return rc;
}

/* The call's algorithm, for logs and tcoll_last_algorithm: the first composed group's, else the
 * literal mapping's. */
static void name_call(tc_work_t *w, const tc_algo_t *a, bool *named) {
  if (*named) return;
  tc_work_set_algo(w, a->name);
  *named = a->build != NULL;
}

/* ------------------------------------------------------------------ all_reduce */

/* One dtype group, packed in send (host memory: device tensors are packed into pinned buffers):
 * the algorithm an all_reduce of the group's bytes would take. */
static int post_group_all_reduce(tc_work_t *w, char *send, char *recv, int64_t total,
                                 tcoll_dtype_t d, const tc_redop_t *op, bool device, bool *named) {
  tc_algo_query_t q = {.comm = w->comm,
                       .bytes = (size_t)total * tc_dtype_size(d),
                       .count = total,
                       .dtype = d,
                       .redop = op->kind,
                       .device = device,
                       .layout = TC_LAYOUT_CONTIG};
  const tc_algo_t *a = tc_algo_choose(TC_OP_ALL_REDUCE, &q);
  name_call(w, a, named);
  if (a->build) {
    tc_algo_call_t c = {.src = send,
                        .dst = recv,
                        .n = total,
                        .dtype = d,
                        .op = tc_mpi_op(op, d),
                        .premul = tc_redop_premul(op),
                        .divisor = tc_redop_divisor(op, w->comm->size),
                        .staged = device};
    return a->build(w, &c);
  }
  if (op->kind == TC_REDOP_PREMUL_SUM) tc_host_scale_copy(send, send, d, total, op->scalar);
  int rc = op->kind == TCOLL_AVG ? tc_work_divide(w, recv, total, d, w->comm->size) : TCOLL_SUCCESS;
  return rc ? rc : tc_post_allreduce(w, send, recv, total, d, tc_mpi_op(op, d));
}

/* Out of place (send half, receive half of one scratch block): this Open MPI's in-place
 * Iallreduce is about 25% slower at 64 KiB on 2 ranks (measured). */
static int post_all_reduce(tc_work_t *w, const tcoll_tensor_t *in, int n, const tcoll_tensor_t *out,
                           const tc_redop_t *op) {
  int64_t numel[TCOLL_NUM_DTYPES];
  group_numels(in, n, numel);
  size_t half = packed_bytes(numel, 1);
  char *send;
  int rc = tc_stage_scratch(w, 2 * half, device_of(in, n), (void **)&send);
  if (rc) return rc;
  char *recv = send + half;
  bool device = device_of(in, n) != TCOLL_HOST, named = false;
  for (int d = 0; d < TCOLL_NUM_DTYPES && !rc; d++) {
    int64_t total = numel[d];
    if (total == 0) continue;
    size_t es = tc_dtype_size(d), pos = 0;
    for (int i = 0; i < n && !rc; i++) {
      if (in[i].dtype != (tcoll_dtype_t)d) continue;
      size_t nb = tcoll_tensor_nbytes(&in[i]);
      rc = tc_stage_read(send + pos, in[i].data, in[i].device, nb);
      if (!rc) rc = tc_work_piece(w, out[i].data, out[i].device, recv + pos, nb);
      pos += nb;
    }
    if (rc) break;
    rc = post_group_all_reduce(w, send, recv, total, d, op, device, &named);
    send += align64((size_t)total * es);
    recv += align64((size_t)total * es);
  }
  return rc;
}

int tcoll_all_reduce_coalesced(const tcoll_tensor_t *in, int n, tcoll_redop_t op,
                               tcoll_comm_t *comm, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_all_reduce_coalesced");
  tcoll_comm_t *c = NULL;
  tc_redop_t rop;
  int rc = tc_check_all_reduce_coalesced(in, n, op, comm, out, &c, &rop);
  if (rc) return tc_call_failed("all_reduce_coalesced", c, rc);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "all_reduce_coalesced", c, TC_SIG(.t = in, .n = n, .op = &rop))))
    return rc;
  rc = begin(w, in, n, out, SAME, NULL);
  if (!rc) rc = post_all_reduce(w, in, n, out, &rop);
  return tc_work_end(w, rc);
}

/* ------------------------------------------------------------------ all_gather */

static int post_all_gather(tc_work_t *w, const tcoll_tensor_t *in, int n,
                           const tcoll_tensor_t *out) {
  int size = w->comm->size;
  size_t total = 0;
  for (int i = 0; i < n; i++) total += tcoll_tensor_nbytes(&in[i]);
  char *send, *recv;
  int rc = tc_stage_scratch(w, total, device_of(in, n), (void **)&send);
  if (!rc) rc = tc_stage_scratch(w, total * (size_t)size, device_of(in, n), (void **)&recv);
  if (rc) return rc;
  size_t pos = 0;
  for (int i = 0; i < n && !rc; i++) {
    size_t nb = tcoll_tensor_nbytes(&in[i]);
    rc = tc_stage_read(send + pos, in[i].data, in[i].device, nb);
    for (int r = 0; r < size && !rc; r++)
      rc = tc_work_piece(w, (char *)out[i].data + (size_t)r * nb, out[i].device,
                         recv + (size_t)r * total + pos, nb);
    pos += nb;
  }
  /* Data movement only: the packed tensors travel as bytes, whatever their dtypes. */
  if (!rc) rc = tc_post_allgather(w, send, recv, (int64_t)total, TCOLL_UINT8);
  return rc;
}

int tcoll_all_gather_coalesced(const tcoll_tensor_t *in, int n, tcoll_comm_t *comm,
                               tcoll_tensor_t *out) {
  TC_ENTER("tcoll_all_gather_coalesced");
  tcoll_comm_t *c = NULL;
  int rc = tc_check_all_gather_coalesced(in, n, comm, out, &c);
  if (rc) return tc_call_failed("all_gather_coalesced", c, rc);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "all_gather_coalesced", c, TC_SIG(.t = in, .n = n)))) return rc;
  rc = begin(w, in, n, out, GATHERED, NULL);
  if (!rc) rc = post_all_gather(w, in, n, out);
  return tc_work_end(w, rc);
}

/* ------------------------------------------------------------------ reduce_scatter */

/* Copies rank r's slab of x along dim (x is outer x len x inner, slabs len/size wide) to y. */
static void copy_slab(char *y, const char *x, tc_dimview_t v, int r, int size, tcoll_dtype_t d,
                      double scale) {
  size_t es = tc_dtype_size(d);
  int64_t block = v.len / size * v.inner;
  for (int64_t o = 0; o < v.outer; o++) {
    const char *src =
        x + ((size_t)o * (size_t)v.len * (size_t)v.inner + (size_t)r * (size_t)block) * es;
    char *dst = y + (size_t)o * (size_t)block * es;
    if (scale == 1.0)
      memcpy(dst, src, (size_t)block * es);
    else
      tc_host_scale_copy(dst, src, d, block, scale);
  }
}

/* One dtype group, packed rank-major in send (host memory, scaled already for premul_sum): the
 * algorithm a reduce_scatter of the group's bytes would take. */
static int post_group_reduce_scatter(tc_work_t *w, char *send, char *recv, int64_t per_rank,
                                     tcoll_dtype_t d, const tc_redop_t *op, bool device,
                                     bool *named) {
  int size = w->comm->size;
  tc_algo_query_t q = {.comm = w->comm,
                       .bytes = (size_t)(per_rank * size) * tc_dtype_size(d),
                       .count = per_rank * size,
                       .dtype = d,
                       .redop = op->kind,
                       .device = device,
                       .layout = TC_LAYOUT_CONTIG};
  const tc_algo_t *a = tc_algo_choose(TC_OP_REDUCE_SCATTER, &q);
  name_call(w, a, named);
  double divisor = tc_redop_divisor(op, size);
  if (a->build) { /* premul_sum was applied while packing */
    tc_algo_call_t c = {.src = send,
                        .dst = recv,
                        .n = per_rank,
                        .dtype = d,
                        .op = tc_mpi_op(op, d),
                        .premul = 1.0,
                        .divisor = divisor,
                        .staged = device};
    return a->build(w, &c);
  }
  int rc = divisor != 1.0 ? tc_work_divide(w, recv, per_rank, d, size) : TCOLL_SUCCESS;
  return rc ? rc : tc_post_reduce_scatter_block(w, send, recv, per_rank, d, tc_mpi_op(op, d));
}

static int post_reduce_scatter(tc_work_t *w, const tcoll_tensor_t *in, int n,
                               const tcoll_tensor_t *out, const int *dims, const tc_redop_t *op) {
  int size = w->comm->size;
  double scale = op->kind == TC_REDOP_PREMUL_SUM ? op->scalar : 1.0;
  int64_t numel[TCOLL_NUM_DTYPES];
  group_numels(in, n, numel);
  /* Inputs are packed slab by slab on the host: a device input is staged even where MPI would
   * take device pointers (host code must never read device memory). */
  w->host_math = true;
  bool device = device_of(in, n) != TCOLL_HOST, named = false;
  char *send, *recv;
  int rc = tc_stage_scratch(w, packed_bytes(numel, 1), device_of(in, n), (void **)&send);
  if (!rc) rc = tc_stage_scratch(w, packed_bytes(numel, size), device_of(in, n), (void **)&recv);
  if (rc) return rc;
  for (int d = 0; d < TCOLL_NUM_DTYPES && !rc; d++) {
    int64_t per_rank = numel[d] / size;
    if (per_rank == 0) continue;
    size_t es = tc_dtype_size(d), pos = 0; /* this tensor's offset inside one rank's block */
    for (int i = 0; i < n && !rc; i++) {
      if (in[i].dtype != (tcoll_dtype_t)d) continue;
      const void *x;
      if ((rc = tc_stage_in(w, &in[i], &x))) break;
      tc_dimview_t v = tc_dimview(in[i].shape, in[i].ndim, dims[i]);
      size_t nb = tcoll_tensor_nbytes(&out[i]);
      for (int r = 0; r < size; r++)
        copy_slab(send + (size_t)r * (size_t)per_rank * es + pos, x, v, r, size, d, scale);
      rc = tc_work_piece(w, out[i].data, out[i].device, recv + pos, nb);
      pos += nb;
    }
    if (!rc) rc = post_group_reduce_scatter(w, send, recv, per_rank, d, op, device, &named);
    send += align64((size_t)per_rank * size * es);
    recv += align64((size_t)per_rank * es);
  }
  return rc;
}

int tcoll_reduce_scatter_coalesced(const tcoll_tensor_t *in, int n, tcoll_redop_t op,
                                   const int *scatter_dims, tcoll_comm_t *comm,
                                   tcoll_tensor_t *out) {
  TC_ENTER("tcoll_reduce_scatter_coalesced");
  tcoll_comm_t *c = NULL;
  tc_redop_t rop;
  int dims_small[16], *dims = n <= 16 ? dims_small : malloc((size_t)n * sizeof *dims);
  if (!dims) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %d dims", n);
  int rc = tc_check_reduce_scatter_coalesced(in, n, op, scatter_dims, comm, out, &c, &rop, dims);
  if (rc)
    rc = tc_call_failed("reduce_scatter_coalesced", c, rc);
  else if (n > 0) {
    tc_work_t *w;
    if (!(rc = tc_work_begin(&w, "reduce_scatter_coalesced", c,
                             TC_SIG(.t = in, .n = n, .op = &rop)))) {
      rc = begin(w, in, n, out, SCATTERED, dims);
      if (!rc) rc = post_reduce_scatter(w, in, n, out, dims, &rop);
      rc = tc_work_end(w, rc);
    }
  }
  if (dims != dims_small) free(dims);
  return rc;
}
