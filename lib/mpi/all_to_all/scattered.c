/* The scattered exchange (TCOLL_ALGO all_to_all:scattered, all_to_all_list:scattered), for every
 * all-to-all: each block travels from where it lies to where it lands in its own MPI_Isend /
 * MPI_Irecv, all posted at once on the schedule communicator, the receive from a rank before the
 * send to it; this rank's own block is copied locally, or, with datatypes (strided slabs), sent
 * to itself so that MPI copies between the two layouts. A block of nothing moves nothing: its
 * peer's count is zero too. */
#include "../algo.h"

#include "../../base/dtype.h"

/* The own block never reaches MPI, which would refuse a receive shorter than its message: a copy
 * must not write past its place instead. */
static int own_block_fits(const tc_exchange_t *x, int me) {
  if (x->scount[me] <= x->rcount[me]) return TCOLL_SUCCESS;
  return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "%s[%d] is %lld %s but %s[%d] is %lld: rank %d's own block does not fit",
                  x->sname, me, (long long)x->scount[me], x->units, x->rname, me, (long long)x->rcount[me], me);
}

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  const tc_exchange_t *x = c->x;
  int size = w->comm->size, me = w->comm->rank, rc = TCOLL_SUCCESS;
  bool typed = x->stype != MPI_DATATYPE_NULL;
  int64_t unit = c->n; /* elements per count */
  if (!typed && (rc = own_block_fits(x, me))) return rc;
  tc_sched_t *s = &w->sched;
  for (int k = typed ? 0 : 1; k < size && !rc; k++) {
    int from = (me - k + size) % size, to = (me + k) % size;
    if (typed) {
      rc = tc_sched_recv_typed(s, x->rptr[from], x->rcount[from], x->rtype, from, 0, false);
      if (!rc) rc = tc_sched_send_typed(s, x->sptr[to], x->scount[to], x->stype, to, 0, false);
      continue;
    }
    if (x->rcount[from]) rc = tc_sched_recv(s, x->rptr[from], x->rcount[from] * unit, c->dtype, from, 0, false);
    if (!rc && x->scount[to]) rc = tc_sched_send(s, x->sptr[to], x->scount[to] * unit, c->dtype, to, 0, false);
  }
  if (!typed && !rc && x->scount[me])
    rc = tc_sched_copy(s, x->rptr[me], x->sptr[me], (size_t)(x->scount[me] * unit) * tc_dtype_size(c->dtype), false);
  return rc;
}

const tc_algo_t tc_all_to_all_scattered = {.name = "scattered", .layouts = TC_LAYOUT_ANY, .build = build};
