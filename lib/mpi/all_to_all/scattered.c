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
static int own_block(tc_sched_t *s, const tc_exchange_t *x, int me, int64_t unit, tcoll_dtype_t d) {
  char *src, *dst;
  int64_t sn, rn;
  x->block(x, me, false, &src, &sn);
  x->block(x, me, true, &dst, &rn);
  if (sn > rn)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "%s[%d] is %lld %s but %s[%d] is %lld: rank %d's own block does not fit",
                    x->sname, me, (long long)sn, x->units, x->rname, me, (long long)rn, me);
  return sn ? tc_sched_copy(s, dst, src, (size_t)(sn * unit) * tc_dtype_size(d), false)
            : TCOLL_SUCCESS;
}

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  const tc_exchange_t *x = c->x;
  int size = w->comm->size, me = w->comm->rank, rc = TCOLL_SUCCESS;
  bool typed = x->stype != MPI_DATATYPE_NULL;
  int64_t unit = c->n; /* elements per count */
  tc_sched_t *s = &w->sched;
  for (int k = typed ? 0 : 1; k < size && !rc; k++) {
    int from = (me - k + size) % size, to = (me + k) % size;
    char *at;
    int64_t n;
    x->block(x, from, true, &at, &n);
    if (typed)
      rc = tc_sched_recv_typed(s, at, n, x->rtype, from, 0, false);
    else if (n)
      rc = tc_sched_recv(s, at, n * unit, c->dtype, from, 0, false);
    if (rc) break;
    x->block(x, to, false, &at, &n);
    if (typed)
      rc = tc_sched_send_typed(s, at, n, x->stype, to, 0, false);
    else if (n)
      rc = tc_sched_send(s, at, n * unit, c->dtype, to, 0, false);
  }
  return rc || typed ? rc : own_block(s, x, me, unit, c->dtype);
}

const tc_algo_t tc_all_to_all_scattered = {
    .name = "scattered", .layouts = TC_LAYOUT_ANY, .build = build};
