/* all_to_all_single -> MPI_Ialltoallv in rows of dim 0 (MPI_Ialltoallw above the limits), or the
 * scattered exchange (scattered.c here). The all_to_all list and table serve permute and
 * shard_dim_all_to_all too. */
#include "../../argcheck.h"
#include "../../base/dtype.h"
#include "../../work/staging.h"
#include "../../work/detail.h"
#include "../../tensor.h"
#include "../algo.h"
#include "../post.h"
#include "all_to_all.h"

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

/* ------------------------------------------------------------------ algorithms and table */

extern const tc_algo_t tc_all_to_all_scattered;
static const tc_algo_t *const algos[] = {&tc_algo_literal, &tc_all_to_all_scattered};

/* MPICH 4.0's MPI_Ialltoallv is 1.2-1.5x its MPI_Ialltoall from 256 KiB at 2 ranks; the
 * scattered sends match MPI_Ialltoall there and beat it below. Ranks choose without the bytes,
 * which differ between ranks with uneven splits. The row serves all_to_all_single, permute and
 * shard_dim (tcoll over the raw call, medians of 3 runs, 8 B-16 MiB): all_to_all_single
 * 0.61-0.95x raw MPI_Ialltoall (literal 1.02-1.57x), permute 0.88-1.06x its raw MPI_Ialltoallv
 * (literal up to 1.58x), shard_dim 0.74-1.19x its raw strided MPI_Ialltoallv (literal up to
 * 1.52x). At 3-4 ranks the exchange also beat the literal calls in the same runs, but those runs
 * have more ranks than cores and their times are the scheduler's (milliseconds for 8 B); runs
 * forcing one algorithm each did not agree: no row there. On Open MPI all_to_all_single and
 * permute lose 5-20% from 2 MiB at 2 ranks and 10-40% from 128 KiB at 3-4: no row. */
static const tc_algo_row_t table[] = {
    {TC_MPI_MPICH, 2, 2, 0, TC_ANY_SIZE, 0, 0, "scattered",
     "tcoll-bench, MPICH 4.0, 2 ranks, 8 B-16 MiB, medians of 3 runs (doc/guide.md, Algorithms)"},
};

const tc_algo_list_t tc_all_to_all_algos = TC_ALGO_LIST("all_to_all", algos, table);

const tc_algo_t *tc_all_to_all_choose(tc_algo_op_t op, tcoll_comm_t *comm, tcoll_dtype_t d,
                                      bool device) {
  tc_algo_query_t q = {
      .comm = comm, .dtype = d, .redop = -1, .device = device, .layout = TC_LAYOUT_CONTIG};
  return tc_algo_choose(op, &q);
}

/* The blocks of rows: v holds sent counts and displacements, received counts and displacements
 * (rows, size each). */
typedef struct rows_at {
  const char *sbuf;
  char *rbuf;
  const int64_t *v;
  size_t row_bytes;
  int size;
} rows_at_t;

static void block_of(const tc_exchange_t *x, int p, bool recv, char **at, int64_t *count) {
  const rows_at_t *r = x->ctx;
  const int64_t *v = r->v + (recv ? 2 * r->size : 0);
  *at = (recv ? r->rbuf : (char *)r->sbuf) + (size_t)v[r->size + p] * r->row_bytes;
  *count = v[p];
}

static int post_scattered(tc_work_t *w, const tc_algo_t *a, const char *sbuf, char *rbuf,
                          const int64_t *v, tcoll_dtype_t d, int64_t row) {
  rows_at_t r = {sbuf, rbuf, v, (size_t)row * tc_dtype_size(d), w->comm->size};
  tc_exchange_t x = {
      block_of, &r, MPI_DATATYPE_NULL, MPI_DATATYPE_NULL, "input_split_sizes", "output_split_sizes",
      "rows"};
  tc_algo_call_t c = {.n = row, .dtype = d, .x = &x};
  return a->build(w, &c);
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out,
                const int64_t *osplits, const int64_t *isplits) {
  int size = w->comm->size;
  int64_t *v = tc_work_scratch(w, 4 * (size_t)size * sizeof *v);
  if (!v) return TCOLL_ERR_NO_MEMORY;
  layout(isplits, in->shape[0], size, v, v + size);
  layout(osplits, in->shape[0], size, v + 2 * size, v + 3 * size);
  int rc = TCOLL_SUCCESS;
  if (tc_cfg.debug >= TCOLL_LOG_DETAIL && (rc = tc_detail_check_splits(w, v, v + 2 * size, false)))
    return rc;
  const tc_algo_t *a =
      tc_all_to_all_choose(TC_OP_ALL_TO_ALL, w->comm, in->dtype, in->device != TCOLL_HOST);
  tc_work_set_algo(w, a->name);
  const void *sbuf;
  void *rbuf;
  w->host_math = a->build != NULL; /* the scattered exchange copies its own block on the host */
  rc = tc_stage_in(w, in, &sbuf);
  if (!rc) rc = tc_stage_out(w, out, &rbuf);
  if (rc) return rc;
  int64_t row = tc_shape_prod(in->shape, 1, in->ndim);
  /* Rows of zero elements, or rows of 2^63 bytes and more, which no rank can hold one of (every
   * rank's tensors are empty; the row is the same on all ranks): nothing moves. */
  if (row == 0 || row > INT64_MAX / (int64_t)tc_dtype_size(in->dtype)) return TCOLL_SUCCESS;
  if (a->build) return post_scattered(w, a, sbuf, rbuf, v, in->dtype, row);
  return tc_post_alltoallv(w, sbuf, v, v + size, rbuf, v + 2 * size, v + 3 * size, in->dtype, row);
}

int tcoll_all_to_all_single(const tcoll_tensor_t *in, const int64_t *output_split_sizes,
                            const int64_t *input_split_sizes, tcoll_comm_t *comm,
                            tcoll_tensor_t *out) {
  TC_ENTER("tcoll_all_to_all_single");
  tcoll_comm_t *c = NULL;
  int64_t rows;
  int rc =
      tc_check_all_to_all_single(in, output_split_sizes, input_split_sizes, comm, out, &c, &rows);
  if (rc) return tc_call_failed("all_to_all_single", c, rc);
  int64_t shape[TCOLL_MAX_DIMS];
  memcpy(shape, in->shape, sizeof shape);
  shape[0] = rows;
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "all_to_all_single", c, TC_SIG(.t = in, .agree = TC_AGREE_ROW))))
    return rc;
  rc = tc_work_output(w, out, in->dtype, in->ndim, shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post(w, in, out, output_split_sizes, input_split_sizes);
  return tc_work_end(w, rc);
}
