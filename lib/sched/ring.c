/* Ring reduce_scatter and ring all-gather (see algorithms.h): point-to-point steps between
 * neighbours, one round per step, a local reduction after each receive. */
#include "algorithms.h"

#include "../base/dtype.h"

static int mod(int a, int p) { return ((a % p) + p) % p; }

size_t tc_ring_reduce_scatter_scratch(int64_t n, int p, tcoll_dtype_t d) {
  return 2 * (size_t)tc_block_count(n, p, 0) * tc_dtype_size(d);
}

int tc_build_ring_reduce_scatter(tc_sched_t *s, const void *in, void *out, int64_t n, tcoll_dtype_t d, MPI_Op op,
                                 void *scratch, int tag0) {
  int p = s->comm->size, r = s->comm->rank;
  size_t es = tc_dtype_size(d);
  const char *x = in;
  char *mine = (char *)x + (size_t)tc_block_offset(n, p, r) * es;
  if (p == 1) return tc_sched_copy(s, out, in, (size_t)n * es, true);
  /* In place, out is this rank's own input block: its last message goes to scratch. */
  bool inplace = out == mine;
  char *bufs[2] = {scratch, (char *)scratch + (size_t)tc_block_count(n, p, 0) * es};
  int left = mod(r - 1, p), right = mod(r + 1, p), rc = 0;
  for (int step = 0; step < p - 1 && !rc; step++) {
    int bs = mod(r - step - 1, p), br = mod(r - step - 2, p);
    bool last = step == p - 2;
    const void *sbuf = step == 0 ? x + (size_t)tc_block_offset(n, p, bs) * es : bufs[(step - 1) % 2];
    char *rbuf = last && !inplace ? out : bufs[step % 2];
    rc = tc_sched_send(s, sbuf, tc_block_count(n, p, bs), d, right, tag0 + step, true);
    if (!rc) rc = tc_sched_recv(s, rbuf, tc_block_count(n, p, br), d, left, tag0 + step, false);
    if (rc) break;
    const char *own = x + (size_t)tc_block_offset(n, p, br) * es;
    int64_t cnt = tc_block_count(n, p, br);
    if (!last) rc = tc_sched_reduce(s, own, rbuf, cnt, d, op, true);        /* the partial goes on */
    else if (!inplace) rc = tc_sched_reduce(s, own, out, cnt, d, op, true); /* out = own (op) received */
    else rc = tc_sched_reduce(s, rbuf, out, cnt, d, op, true);              /* out (own) = received (op) own */
  }
  return rc;
}

int tc_build_ring_all_gather(tc_sched_t *s, void *buf, int64_t n, tcoll_dtype_t d, int tag0) {
  int p = s->comm->size, r = s->comm->rank;
  size_t es = tc_dtype_size(d);
  char *b = buf;
  int left = mod(r - 1, p), right = mod(r + 1, p), rc = 0;
  /* At step s a rank passes on the block it received at step s - 1 (its own at step 0). */
  for (int step = 0; step < p - 1 && !rc; step++) {
    int bs = mod(r - step, p), br = mod(r - step - 1, p);
    rc = tc_sched_send(s, b + (size_t)tc_block_offset(n, p, bs) * es, tc_block_count(n, p, bs), d, right, tag0 + step,
                       true);
    if (!rc)
      rc = tc_sched_recv(s, b + (size_t)tc_block_offset(n, p, br) * es, tc_block_count(n, p, br), d, left,
                         tag0 + step, false);
  }
  return rc;
}
