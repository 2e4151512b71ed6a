/* Ring reduce_scatter and ring all-gather (see ring.h): point-to-point steps between
 * neighbours, one round per step, a local reduction after each receive; and the blocks sent to
 * one rank, which makes the ring reduce_scatter a reduce. */
#include "ring.h"

#include "../base/dtype.h"
#include "cma.h"

static int mod(int a, int p) { return ((a % p) + p) % p; }

size_t tc_ring_reduce_scatter_scratch(int64_t n, int p, tcoll_dtype_t d) {
  return 2 * (size_t)tc_block_count(n, p, 0) * tc_dtype_size(d);
}

/* Where block b's first element is, and how its runs lie (contiguous: one run). */
typedef struct block_at {
  int64_t offset, count, runs, run, stride;
} block_at_t;

static block_at_t block_at(int64_t n, int p, int b, const tc_blocks_t *blocks) {
  if (!blocks || blocks->runs <= 1) {
    int64_t c = tc_block_count(n, p, b);
    return (block_at_t){tc_block_offset(n, p, b), c, 1, c, c};
  }
  return (block_at_t){b * blocks->run, blocks->runs * blocks->run, blocks->runs, blocks->run,
                      p * blocks->run};
}

/* At the last step, own runs shorter than this are packed a chunk at a time and reduced with one
 * MPI_Reduce_local per chunk rather than one per run: the call costs more than the copy of a short
 * run. Measured at 2 ranks along dim 1, both forms interleaved in one program: runs of 64 B
 * 0.5-0.9x the time of the run-by-run reduction (64 KiB-16 MiB inputs), 256 B 0.84-0.92x, 1
 * KiB 1.0-1.03x, 4 KiB 1.05-1.11x. */
#define PACK_RUN_MAX ((size_t)1 << 10)
/* Bytes packed and reduced at a time, into the same spare bytes: they stay in cache. */
#define PACK_CHUNK ((size_t)64 << 10)

/* acc = own (op) acc, own's runs packed into spare (PACK_CHUNK bytes or a block's, if less) a
 * chunk at a time. The first chunk is packed in the round of the block's receive, while the
 * message travels (spare is free from that round on). */
static int reduce_packed(tc_sched_t *s, const char *own, block_at_t b, char *acc, char *spare,
                         tcoll_dtype_t d, MPI_Op op) {
  size_t es = tc_dtype_size(d), run = (size_t)b.run * es;
  int64_t per = (int64_t)(PACK_CHUNK / run);
  int rc = TCOLL_SUCCESS;
  for (int64_t k = 0; k < b.runs && !rc; k += per) {
    int64_t n = b.runs - k < per ? b.runs - k : per;
    size_t at = (size_t)k * run;
    rc = tc_sched_pack_runs(s, spare, own + (size_t)(k * b.stride) * es, (size_t)b.stride * es, run,
                            n, k > 0);
    if (!rc) rc = tc_sched_reduce(s, spare, acc + at, n * b.run, d, op, true);
  }
  return rc;
}

int tc_build_ring_reduce_scatter(tc_sched_t *s, const void *in, void *out, int64_t n,
                                 tcoll_dtype_t d, MPI_Op op, void *scratch, int tag0,
                                 const tc_blocks_t *blocks) {
  int p = s->comm->size, r = s->comm->rank;
  size_t es = tc_dtype_size(d);
  const char *x = in;
  block_at_t me = block_at(n, p, r, blocks);
  char *mine = (char *)x + (size_t)me.offset * es;
  if (p == 1)
    return tc_sched_pack_runs(s, out, mine, (size_t)me.stride * es, (size_t)me.run * es, me.runs,
                              true);
  /* In place, out is this rank's own input block: its last message goes to scratch. */
  bool inplace = out == mine && me.runs == 1;
  char *bufs[2] = {scratch, (char *)scratch + (size_t)tc_block_count(n, p, 0) * es};
  int left = mod(r - 1, p), right = mod(r + 1, p), rc = 0;
  for (int step = 0; step < p - 1 && !rc; step++) {
    int bs = mod(r - step - 1, p), br = mod(r - step - 2, p);
    bool last = step == p - 2;
    block_at_t snd = block_at(n, p, bs, blocks), rcv = block_at(n, p, br, blocks);
    const void *sbuf = step == 0 ? x + (size_t)snd.offset * es : bufs[(step - 1) % 2];
    bool strided = step == 0 && snd.runs > 1,
         typed = strided && blocks->send_type != MPI_DATATYPE_NULL;
    bool pushed = strided && blocks->push;
    char *rbuf = last && !inplace ? out : bufs[step % 2];
    if (pushed) { /* written into the next rank's rbuf (spare: bufs[1], which step 0 does not
                     receive into) */
      tc_cma_push_args_t a = {sbuf,
                              (size_t)snd.run * es,
                              (size_t)snd.stride * es,
                              snd.runs,
                              d,
                              bufs[1],
                              rbuf,
                              rcv.count,
                              right,
                              left,
                              tag0,
                              tag0 + p - 1};
      rc = tc_build_cma_push(s, blocks->push, &a);
    } else {
      if (strided && !typed) { /* packed into the buffer step 0 does not receive into */
        rc = tc_sched_pack_runs(s, bufs[1], sbuf, (size_t)snd.stride * es, (size_t)snd.run * es,
                                snd.runs, true);
        sbuf = bufs[1];
      }
      if (!rc && typed)
        rc = tc_sched_send_typed(s, sbuf, 1, blocks->send_type, right, tag0 + step, true);
      else if (!rc)
        rc = tc_sched_send(s, sbuf, snd.count, d, right, tag0 + step, true);
      if (!rc) rc = tc_sched_recv(s, rbuf, rcv.count, d, left, tag0 + step, false);
    }
    if (rc) break;
    const char *own = x + (size_t)rcv.offset * es;
    char *acc = last ? out : rbuf;
    if (last && inplace) { /* out (own) = received (op) own */
      rc = tc_sched_reduce(s, rbuf, out, rcv.count, d, op, true);
    } else if (last && rcv.runs > 1 && (size_t)rcv.run * es < PACK_RUN_MAX) {
      rc = reduce_packed(s, own, rcv, acc, bufs[step % 2], d, op);
    } else { /* acc = own (op) acc, run by run */
      rc = tc_sched_reduce_runs(s, own, rcv.stride, acc, rcv.run, rcv.runs, d, op, true);
    }
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
    rc = tc_sched_send(s, b + (size_t)tc_block_offset(n, p, bs) * es, tc_block_count(n, p, bs), d,
                       right, tag0 + step, true);
    if (!rc)
      rc = tc_sched_recv(s, b + (size_t)tc_block_offset(n, p, br) * es, tc_block_count(n, p, br), d,
                         left, tag0 + step, false);
  }
  return rc;
}

int tc_build_blocks_to_root(tc_sched_t *s, void *buf, const void *mine, int64_t n, tcoll_dtype_t d,
                            int root, int tag0) {
  int p = s->comm->size, r = s->comm->rank;
  if (r != root) return tc_sched_send(s, mine, tc_block_count(n, p, r), d, root, tag0, true);
  size_t es = tc_dtype_size(d);
  int rc = TCOLL_SUCCESS;
  for (int q = 0, first = 1; q < p && !rc; q++) {
    if (q == root) continue;
    rc = tc_sched_recv(s, (char *)buf + (size_t)tc_block_offset(n, p, q) * es,
                       tc_block_count(n, p, q), d, q, tag0, first);
    first = 0;
  }
  return rc;
}
