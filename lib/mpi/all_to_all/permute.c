/* permute -> MPI_Ialltoallv with one non-empty send (to src_dst[me]) and one non-empty receive
 * (from the rank m with src_dst[m] == me), or the scattered exchange (all_to_all's algorithm):
 * that one MPI_Isend and one MPI_Irecv, or a local copy where this rank sends to itself. */
#include "../../argcheck.h"
#include "../../base/dtype.h"
#include "../../work/staging.h"
#include "../post.h"
#include "all_to_all.h"

#include <string.h>

/* The rank whose input lands here: src_dst is a permutation (checked). */
static int source_of(const int *src_dst, int size, int me) {
  int m = 0;
  while (m < size - 1 && src_dst[m] != me) m++;
  return m;
}

/* That one send and one receive as the exchange of an all-to-all: every other count is zero. */
typedef struct pair {
  const void *sbuf;
  void *rbuf;
  int to, from;
} pair_t;

static void block_of(const tc_exchange_t *x, int p, bool recv, char **at, int64_t *count) {
  const pair_t *t = x->ctx;
  *at = recv ? t->rbuf : (char *)t->sbuf;
  *count = p == (recv ? t->from : t->to);
}

static int post_scattered(tc_work_t *w, const tc_algo_t *a, const void *sbuf, void *rbuf, int64_t n,
                          tcoll_dtype_t d, int to, int from) {
  pair_t t = {sbuf, rbuf, to, from};
  tc_exchange_t x = {block_of,  &t,        MPI_DATATYPE_NULL, MPI_DATATYPE_NULL,
                     "src_dst", "src_dst", "tensors"};
  tc_algo_call_t c = {.n = n, .dtype = d, .x = &x};
  return a->build(w, &c);
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out,
                const int *src_dst) {
  int size = w->comm->size, me = w->comm->rank;
  const tc_algo_t *a =
      tc_all_to_all_choose(TC_OP_ALL_TO_ALL, w->comm, in->dtype, in->device != TCOLL_HOST);
  tc_work_set_algo(w, a->name);
  int64_t n = tcoll_tensor_numel(in);
  const void *sbuf;
  void *rbuf;
  w->host_math = a->build != NULL; /* a fixed point is copied on the host (as all_to_all_single) */
  int rc = tc_stage_in(w, in, &sbuf);
  if (!rc) rc = tc_stage_out(w, out, &rbuf);
  if (rc || n == 0) return rc;
  if (a->build)
    return post_scattered(w, a, sbuf, rbuf, n, in->dtype, src_dst[me],
                          source_of(src_dst, size, me));
  int64_t *v = tc_work_scratch(w, 4 * (size_t)size * sizeof *v);
  if (!v) return TCOLL_ERR_NO_MEMORY;
  memset(v, 0, 4 * (size_t)size * sizeof *v);
  v[src_dst[me]] = n; /* send counts; all displacements stay 0 */
  for (int m = 0; m < size; m++)
    if (src_dst[m] == me) v[2 * size + m] = n; /* receive counts */
  return tc_post_alltoallv(w, sbuf, v, v + size, rbuf, v + 2 * size, v + 3 * size, in->dtype, 1);
}

int tcoll_permute(const tcoll_tensor_t *in, const int *src_dst, tcoll_comm_t *comm,
                  tcoll_tensor_t *out) {
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
