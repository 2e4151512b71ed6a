/* all_to_all_single -> MPI_Ialltoallv in rows of dim 0 (MPI_Ialltoallw above the limits), or the
 * scattered exchange: one MPI_Isend and one MPI_Irecv per peer, all posted at once on the
 * schedule communicator, and this rank's own block copied locally. */
#include "../argcheck.h"
#include "../base/dtype.h"
#include "../sched/select.h"
#include "../work/staging.h"
#include "../work/detail.h"
#include "../tensor.h"
#include "post.h"

#include <string.h>

/* Displacements are prefix sums; even splits when sizes is NULL. */
static void layout(const int64_t *sizes, int64_t rows, int n, int64_t *counts, int64_t *displs) {
  int64_t off = 0;
  for (int p = 0; p < n; p++) {
    counts[p] = sizes ? sizes[p] : rows / n;
    displs[p] = off;
    off += counts[p];
  }
}

/* The blocks of rows: counts c[p] and displacements d[p] per peer, sent (s*) and received (r*).
 * Each peer's message is its own pair of steps, all in one round: they are posted when the
 * schedule starts. A block of no rows sends nothing, and its peer, whose count is the same,
 * expects nothing. */
static int post_scattered(tc_work_t *w, const char *sbuf, char *rbuf, const int64_t *sc, const int64_t *sd,
                          const int64_t *rc_, const int64_t *rd, tcoll_dtype_t d, int64_t row) {
  int size = w->comm->size, me = w->comm->rank, rc = TCOLL_SUCCESS;
  size_t rb = (size_t)row * tc_dtype_size(d);
  /* The own block never reaches MPI, which would refuse a receive shorter than its message: a
   * copy must not write past its rows instead. */
  if (sc[me] > rc_[me])
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "input_split_sizes[%d] is %lld but output_split_sizes[%d] is %lld: "
                    "rank %d's own block does not fit", me, (long long)sc[me], me, (long long)rc_[me], me);
  tc_sched_t *s = &w->sched;
  for (int k = 1; k < size && !rc; k++) {
    int from = (me - k + size) % size, to = (me + k) % size;
    if (rc_[from]) rc = tc_sched_recv(s, rbuf + (size_t)rd[from] * rb, rc_[from] * row, d, from, 0, false);
    if (!rc && sc[to]) rc = tc_sched_send(s, sbuf + (size_t)sd[to] * rb, sc[to] * row, d, to, 0, false);
  }
  if (!rc && sc[me])
    rc = tc_sched_copy(s, rbuf + (size_t)rd[me] * rb, sbuf + (size_t)sd[me] * rb, (size_t)sc[me] * rb, false);
  return rc;
}

/* The table's choice for this communicator: never by bytes, which differ between ranks whose
 * splits differ, so that every rank takes the same algorithm. */
tc_algo_t tc_all_to_all_algo(const tc_work_t *w, tc_algo_op_t op, tcoll_dtype_t d, bool device) {
  tc_algo_query_t q = {.op = op, .bytes = 0, .ranks = w->comm->size, .dtype = d, .redop = -1,
                       .device = device};
  tc_algo_t algo = tc_algo_choose(&q);
  return algo == TC_ALGO_AUTO ? TC_ALGO_MPI : algo;
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, const int64_t *osplits,
                const int64_t *isplits) {
  int size = w->comm->size;
  int64_t *v = tc_work_scratch(w, 4 * (size_t)size * sizeof *v);
  if (!v) return TCOLL_ERR_NO_MEMORY;
  layout(isplits, in->shape[0], size, v, v + size);
  layout(osplits, in->shape[0], size, v + 2 * size, v + 3 * size);
  int rc = TCOLL_SUCCESS;
  if (tc_cfg.debug >= TCOLL_LOG_DETAIL && (rc = tc_detail_check_splits(w, v, v + 2 * size, false))) return rc;
  tc_algo_t algo = tc_all_to_all_algo(w, TC_OP_ALL_TO_ALL, in->dtype, in->device != TCOLL_HOST);
  tc_work_set_algo(w, algo);
  const void *sbuf;
  void *rbuf;
  w->host_math = algo == TC_ALGO_SCATTERED; /* its own block is copied on the host */
  rc = tc_stage_in(w, in, &sbuf);
  if (!rc) rc = tc_stage_out(w, out, &rbuf);
  if (rc) return rc;
  int64_t row = tc_shape_prod(in->shape, 1, in->ndim);
  /* Rows of zero elements, or rows of 2^63 bytes and more, which no rank can hold one of (every
   * rank's tensors are empty; the row is the same on all ranks): nothing moves. */
  if (row == 0 || row > INT64_MAX / (int64_t)tc_dtype_size(in->dtype)) return TCOLL_SUCCESS;
  if (algo == TC_ALGO_SCATTERED)
    return post_scattered(w, sbuf, rbuf, v, v + size, v + 2 * size, v + 3 * size, in->dtype, row);
  return tc_post_alltoallv(w, sbuf, v, v + size, rbuf, v + 2 * size, v + 3 * size, in->dtype, row);
}

int tcoll_all_to_all_single(const tcoll_tensor_t *in, const int64_t *output_split_sizes,
                            const int64_t *input_split_sizes, tcoll_comm_t *comm, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_all_to_all_single");
  tcoll_comm_t *c = NULL;
  int64_t rows;
  int rc = tc_check_all_to_all_single(in, output_split_sizes, input_split_sizes, comm, out, &c, &rows);
  if (rc) return tc_call_failed("all_to_all_single", c, rc);
  int64_t shape[TCOLL_MAX_DIMS];
  memcpy(shape, in->shape, sizeof shape);
  shape[0] = rows;
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "all_to_all_single", c, TC_SIG(.t = in, .agree = TC_AGREE_ROW)))) return rc;
  rc = tc_work_output(w, out, in->dtype, in->ndim, shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post(w, in, out, output_split_sizes, input_split_sizes);
  return tc_work_end(w, rc);
}
