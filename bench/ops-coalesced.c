/* tcoll-bench: coalesced, one point of tcoll_all_reduce_coalesced over 64 x 256 elements, and
 * three rows from it. coalesced: against raw MPI (pack, one MPI_Iallreduce, unpack), and in the
 * note against one raw MPI_Iallreduce of the same total bytes from one contiguous buffer
 * (coalesced/one_raw: the target). separate64: 64 tcoll_all_reduce calls, all posted then all
 * waited, against 64 MPI_Iallreduce + MPI_Waitall. separate64-each: the naive loop that waits
 * each call before posting the next, on both sides. */
#include "bench.h"

#include <string.h>

enum { V_COAL, V_COAL_MPI, V_SEP, V_SEP_MPI, V_EACH, V_EACH_MPI, V_ONE_RAW };

static void t_coal_post(point_t *p) {
  TC(tcoll_all_reduce_coalesced(p->cin, COAL_N, TCOLL_SUM, g_tc, p->cout));
}
static void t_coal_wait(point_t *p) {
  for (int i = 0; i < COAL_N; i++) TC(tcoll_wait(p->cout[i].data));
}
static void m_coal_post(point_t *p) {
  for (int i = 0; i < COAL_N; i++)
    memcpy(p->scratch + i * COAL_NUMEL * g_dt.size, p->mcin[i], COAL_NUMEL * g_dt.size);
  MP(MPI_Iallreduce(MPI_IN_PLACE, p->scratch, COAL_N * COAL_NUMEL, g_dt.mpi, MPI_SUM, g_mpi,
                    &p->req));
}
static void m_coal_wait(point_t *p) {
  MP(MPI_Wait(&p->req, MPI_STATUS_IGNORE));
  for (int i = 0; i < COAL_N; i++)
    memcpy(p->mcout[i], p->scratch + i * COAL_NUMEL * g_dt.size, COAL_NUMEL * g_dt.size);
}

/* All 64 posted, then all waited (MPI overlaps them). */
static void t_sep_post(point_t *p) {
  for (int i = 0; i < COAL_N; i++) TC(tcoll_all_reduce(&p->cin[i], TCOLL_SUM, g_tc, &p->sout[i]));
}
static void t_sep_wait(point_t *p) {
  for (int i = 0; i < COAL_N; i++) TC(tcoll_wait(p->sout[i].data));
}
static void m_sep_post(point_t *p) {
  for (int i = 0; i < COAL_N; i++)
    MP(MPI_Iallreduce(p->mcin[i], p->msout[i], COAL_NUMEL, g_dt.mpi, MPI_SUM, g_mpi, &p->reqs[i]));
}
static void m_sep_wait(point_t *p) { MP(MPI_Waitall(COAL_N, p->reqs, p->stats)); }

/* The naive loop: each all_reduce waited before the next is posted. */
static void t_each_post(point_t *p) {
  for (int i = 0; i < COAL_N; i++) {
    TC(tcoll_all_reduce(&p->cin[i], TCOLL_SUM, g_tc, &p->sout[i]));
    TC(tcoll_wait(p->sout[i].data));
  }
}
static void m_each_post(point_t *p) {
  for (int i = 0; i < COAL_N; i++) {
    MP(MPI_Iallreduce(p->mcin[i], p->msout[i], COAL_NUMEL, g_dt.mpi, MPI_SUM, g_mpi, &p->reqs[i]));
    MP(MPI_Wait(&p->reqs[i], MPI_STATUS_IGNORE));
  }
}

/* What the coalesced call is measured against: one raw MPI_Iallreduce of the same total bytes,
 * between two contiguous buffers (no packing), as the plain all_reduce row does. */
static void m_one_post(point_t *p) {
  MP(MPI_Iallreduce(p->mone, p->mone + p->bytes, COAL_N * COAL_NUMEL, g_dt.mpi, MPI_SUM, g_mpi,
                    &p->req));
}

static bool setup_coalesced(point_t *p, int64_t elems) {
  (void)elems; /* one size */
  set_size(p, (int64_t)COAL_N * COAL_NUMEL, (int64_t)COAL_N * COAL_NUMEL, 2.0 * ring_factor());
  p->scratch = xmalloc(p->bytes);
  for (int i = 0; i < COAL_N; i++) {
    p->cin[i] = tensor_on(g_dev, 1, COAL_NUMEL, 0);
    p->cout[i] = tensor_on(g_dev, 1, COAL_NUMEL, 0);
    p->sout[i] = tensor_on(g_dev, 1, COAL_NUMEL, 0);
    p->mcin[i] = xmalloc(COAL_NUMEL * g_dt.size);
    p->mcout[i] = xmalloc(COAL_NUMEL * g_dt.size);
    p->msout[i] = xmalloc(COAL_NUMEL * g_dt.size);
  }
  add_variant(p, t_sep_post, t_sep_wait);
  add_variant(p, m_sep_post, m_sep_wait);
  add_variant(p, t_each_post, no_wait);
  add_variant(p, m_each_post, no_wait);
  p->mone = xmalloc(2 * p->bytes);
  add_variant(p, m_one_post, m_wait);
  return true;
}

/* Every rank its own pattern in every tensor. */
static void fill_coalesced(point_t *p) {
  for (int i = 0; i < COAL_N; i++) {
    fill_tensor(&p->cin[i]);
    fill_host(p->mcin[i], COAL_NUMEL);
  }
}

static long check_coalesced(point_t *p) {
  long bad = 0;
  for (int i = 0; i < COAL_N; i++) {
    bad += diff_tensor(&p->cout[i], p->mcout[i]);
    bad += diff_tensor(&p->sout[i], p->msout[i]);
  }
  return bad;
}

const op_desc_t op_coalesced = {
    .name = "coalesced",
    .tcoll = {t_coal_post, t_coal_wait},
    .mpi = {m_coal_post, m_coal_wait},
    .setup = setup_coalesced,
    .fill = fill_coalesced,
    .check = check_coalesced,
    .rows =
        {
            {"coalesced",
             V_COAL,
             V_COAL_MPI,
             {{"speedup", V_SEP, V_COAL},
              {"speedup vs waited each", V_EACH, V_COAL},
              {"coalesced/one_raw", V_COAL, V_ONE_RAW}}},
            /* what the transport itself allows */
            {"separate64", V_SEP, V_SEP_MPI, {{"raw MPI separate/packed", V_SEP_MPI, V_COAL_MPI}}},
            {"separate64-each", V_EACH, V_EACH_MPI},
        },
    /* The point mixes one 64-output work with bursts of 64 one-output works: tcoll's work pool
     * hands out its works last-in first-out and each grows its tables on first use of 64
     * outputs, so reaching the steady state takes about as many rounds as the burst is long. */
    .min_warmup = 2 * COAL_N,
    .one_size = true,
    .no_memcpy = true,
};
