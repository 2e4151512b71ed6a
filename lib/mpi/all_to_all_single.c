/* all_to_all_single -> MPI_Ialltoallv in rows of dim 0 (MPI_Ialltoallw above the limits). */
#include "../argcheck.h"
#include "../base/dtype.h"
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

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, const int64_t *osplits,
                const int64_t *isplits) {
  int size = w->comm->size;
  int64_t *v = tc_work_scratch(w, 4 * (size_t)size * sizeof *v);
  if (!v) return TCOLL_ERR_NO_MEMORY;
  layout(isplits, in->shape[0], size, v, v + size);
  layout(osplits, in->shape[0], size, v + 2 * size, v + 3 * size);
  int rc = TCOLL_SUCCESS;
  if (tc_cfg.debug >= TCOLL_LOG_DETAIL && (rc = tc_detail_check_splits(w, v, v + 2 * size))) return rc;
  const void *sbuf;
  void *rbuf;
  rc = tc_stage_in(w, in, &sbuf);
  if (!rc) rc = tc_stage_out(w, out, &rbuf);
  if (rc) return rc;
  int64_t row = tc_shape_prod(in->shape, 1, in->ndim);
  /* Rows of zero elements, or rows of 2^63 bytes and more, which no rank can hold one of (every
   * rank's tensors are empty; the row is the same on all ranks): nothing moves. */
  if (row == 0 || row > INT64_MAX / (int64_t)tc_dtype_size(in->dtype)) return TCOLL_SUCCESS;
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
