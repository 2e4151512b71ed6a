/* permute -> MPI_Ialltoallv with one non-empty send (to src_dst[me]) and one non-empty receive
 * (from the rank m with src_dst[m] == me). */
#include "../argcheck.h"
#include "../work/staging.h"
#include "post.h"

#include <string.h>

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, const int *src_dst) {
  int size = w->comm->size, me = w->comm->rank;
  int64_t *v = tc_work_scratch(w, 4 * (size_t)size * sizeof *v);
  if (!v) return TCOLL_ERR_NO_MEMORY;
  int64_t n = tcoll_tensor_numel(in);
  memset(v, 0, 4 * (size_t)size * sizeof *v);
  v[src_dst[me]] = n; /* send counts; all displacements stay 0 */
  for (int m = 0; m < size; m++)
    if (src_dst[m] == me) v[2 * size + m] = n; /* receive counts */
  const void *sbuf;
  void *rbuf;
  int rc = tc_stage_in(w, in, &sbuf);
  if (!rc) rc = tc_stage_out(w, out, &rbuf);
  if (rc || n == 0) return rc;
  return tc_post_alltoallv(w, sbuf, v, v + size, rbuf, v + 2 * size, v + 3 * size, in->dtype, 1);
}

int tcoll_permute(const tcoll_tensor_t *in, const int *src_dst, tcoll_comm_t *comm, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_permute");
  tcoll_comm_t *c = NULL;
  int rc = tc_check_permute(in, src_dst, comm, out, &c);
  if (rc) return tc_call_failed("permute", c, rc);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "permute", c, TC_SIG(.t = in)))) return rc;
  rc = tc_work_output(w, out, in->dtype, in->ndim, in->shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post(w, in, out, src_dst);
  return tc_work_end(w, rc);
}
