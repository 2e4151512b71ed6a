/* tcoll-bench: the all-to-all family. all_to_all_single (even splits) and all_to_all (the list
 * form, one tensor per peer) against the raw MPI_Ialltoall of the same bytes between contiguous
 * buffers; permute (a shift by one rank) against its literal call (MPI_Ialltoallv with one
 * non-empty block each way), and MPI_Irecv + MPI_Isend in the note (/p2p); shard_dim and
 * shard_dim_g1s0 against their literal call (MPI_Ialltoallv of strided slab datatypes), and the
 * raw MPI_Ialltoall of the same bytes in the note (/alltoall). */
#include "bench.h"

#include <stdlib.h>

/* --tune: the family's algorithms; all_to_all (the list) has a setting of its own. */
static const tune_set_t tune_all_to_all = {
    2, {"mpi", "scattered"}, {"all_to_all:mpi", "all_to_all:scattered"}};
static const tune_set_t tune_all_to_all_list = {
    2, {"mpi", "scattered"}, {"all_to_all_list:mpi", "all_to_all_list:scattered"}};

static void m_a2a_post(point_t *p) {
  int per = (int)(p->count / g_size);
  MP(MPI_Ialltoall(p->min, per, g_dt.mpi, p->mout, per, g_dt.mpi, g_mpi, &p->req));
}

/* Even splits: per elements to each peer; raw MPI's input and output. Returns per (0: the size
 * does not apply). */
static int64_t exchange_buffers(point_t *p, int64_t elems) {
  int64_t per = split_evenly(p, elems);
  if (per) raw_out(p, p->bytes);
  return per;
}

/* ------------------------------------------------------------------ all_to_all_single */

static void t_a2a_post(point_t *p) {
  TC(tcoll_all_to_all_single(&p->tin, NULL, NULL, g_tc, &p->tout));
}

static void t_a2a_alloc_post(point_t *p) {
  p->talloc = unallocated();
  TC(tcoll_all_to_all_single(&p->tin, NULL, NULL, g_tc, &p->talloc));
}

static bool setup_all_to_all_single(point_t *p, int64_t elems) {
  if (!exchange_buffers(p, elems)) return false;
  p->tin = tensor_on(g_dev, 1, p->count, 0);
  p->tout = tensor_on(g_dev, 1, p->count, 0);
  return true;
}

const op_desc_t op_all_to_all_single = {
    .name = "all_to_all_single",
    .tcoll = {t_a2a_post, t_wait_out},
    .mpi = {m_a2a_post, m_wait},
    .setup = setup_all_to_all_single,
    .alloc_post = t_a2a_alloc_post,
    .tune = &tune_all_to_all,
};

/* ------------------------------------------------------------------ all_to_all (list) */

static void t_a2a_list_post(point_t *p) { TC(tcoll_all_to_all(p->cin, g_tc, p->cout)); }
static void t_a2a_list_wait(point_t *p) {
  for (int i = 0; i < g_size; i++) TC(tcoll_wait(p->cout[i].data));
}

static bool setup_all_to_all_list(point_t *p, int64_t elems) {
  int64_t per = exchange_buffers(p, elems);
  if (!per) return false;
  for (int i = 0; i < g_size; i++) {
    p->cin[i] = tensor_on(g_dev, 1, per, 0);
    p->cout[i] = tensor_on(g_dev, 1, per, 0);
  }
  return true;
}

/* The pattern of one contiguous input (raw MPI's), piece i in cin[i]. */
static void fill_all_to_all_list(point_t *p) {
  int64_t per = p->count / g_size;
  fill_host(p->min, p->count);
  for (int i = 0; i < g_size; i++) {
    tcoll_tensor_t h =
        tcoll_tensor_make(p->min + (size_t)(i * per) * g_dt.size, g_dt.tc, 1, &per, TCOLL_HOST);
    TC(tcoll_tensor_copy(&p->cin[i], &h));
  }
}

static long check_all_to_all_list(point_t *p) {
  long bad = 0;
  for (int i = 0; i < g_size; i++)
    bad += diff_tensor(&p->cout[i], p->mout + (size_t)(i * (p->count / g_size)) * g_dt.size);
  return bad;
}

const op_desc_t op_all_to_all = {
    .name = "all_to_all",
    .tcoll = {t_a2a_list_post, t_a2a_list_wait},
    .mpi = {m_a2a_post, m_wait},
    .setup = setup_all_to_all_list,
    .fill = fill_all_to_all_list,
    .check = check_all_to_all_list,
    .tune = &tune_all_to_all_list,
};

/* ------------------------------------------------------------------ permute */

static void t_perm_post(point_t *p) {
  TC(tcoll_permute(&p->tin, p->pcounts + 2 * g_size, g_tc, &p->tout));
}
static void m_perm_post(point_t *p) {
  int *c = p->pcounts, *d = p->pdispls;
  MP(MPI_Ialltoallv(p->min, c, d, g_dt.mpi, p->mout, c + g_size, d, g_dt.mpi, g_mpi, &p->req));
}
static void m_perm_p2p_post(point_t *p) {
  MP(MPI_Irecv(p->scratch, (int)p->count, g_dt.mpi, p->from, 0, g_mpi, &p->reqs[0]));
  MP(MPI_Isend(p->min, (int)p->count, g_dt.mpi, p->to, 0, g_mpi, &p->reqs[1]));
}
static void m_wait2(point_t *p) { MP(MPI_Waitall(2, p->reqs, p->stats)); }

/* A shift: rank r sends all its elements to r + 1. */
static bool setup_permute(point_t *p, int64_t elems) {
  int n = g_size;
  if (!setup_whole_tensor(p, elems, 1.0, true)) return false;
  p->scratch = xmalloc(p->bytes);
  p->to = (g_rank + 1) % n;
  p->from = (g_rank + n - 1) % n;
  p->pcounts = calloc(3 * (size_t)n, sizeof *p->pcounts); /* send, receive counts; src_dst */
  p->pdispls = calloc((size_t)n, sizeof *p->pdispls);
  if (!p->pcounts || !p->pdispls) die("out of memory");
  p->pcounts[p->to] += (int)elems;
  p->pcounts[n + p->from] += (int)elems;
  for (int m = 0; m < n; m++) p->pcounts[2 * n + m] = (m + 1) % n;
  add_variant(p, m_perm_p2p_post, m_wait2);
  return true;
}

const op_desc_t op_permute = {
    .name = "permute",
    .tcoll = {t_perm_post, t_wait_out},
    .mpi = {m_perm_post, m_wait},
    .setup = setup_permute,
    .rows = {{"permute", 0, 1, {{"/p2p", 0, 2}}}},
    .tune = &tune_all_to_all,
};

/* ------------------------------------------------------------------ shard_dim_all_to_all */

/* [R, n C] sharded along dim 1, gathered along 0 into [n R, C] (shard_dim), or [n R, C] along 0
 * into [R, n C] (shard_dim_g1s0). */
static void t_shard_post(point_t *p) {
  bool g1 = p->op == OP_SHARD_G1;
  TC(tcoll_shard_dim_all_to_all(&p->tin, g1 ? 1 : 0, g1 ? 0 : 1, g_tc, &p->tout));
}
static void m_shard_post(point_t *p) {
  MP(MPI_Ialltoallv(p->min, p->ones, p->slabs, p->vec, p->mout, p->ones, p->slabs, p->rvec, g_mpi,
                    &p->req));
}
static void m_a2a_scratch_post(point_t *p) {
  int per = (int)(p->count / g_size);
  MP(MPI_Ialltoall(p->min, per, g_dt.mpi, p->scratch, per, g_dt.mpi, g_mpi, &p->req));
}

/* One slab per peer at displacement r (in slab extents), both ways. */
static void shard_counts(point_t *p) {
  int n = g_size;
  p->ones = calloc(2 * (size_t)n, sizeof *p->ones);
  if (!p->ones) die("out of memory");
  p->slabs = p->ones + n;
  for (int r = 0; r < n; r++) p->ones[r] = 1, p->slabs[r] = r;
}

/* per: the chunk each rank sends each peer, an [R, C] slab of the wide [R, n C] side (strided)
 * and of the tall [n R, C] side (contiguous). shard_dim sends from the wide side to the tall
 * one; shard_dim_g1s0 the reverse. */
static bool setup_shard(point_t *p, int64_t elems, bool from_tall) {
  int64_t per = exchange_buffers(p, elems), n = g_size;
  if (!per) return false;
  p->R = rows_for(per);
  p->C = per / p->R;
  p->scratch = xmalloc(p->bytes);
  int64_t wide[2] = {p->R, n * p->C}, tall[2] = {n * p->R, p->C};
  const int64_t *in = from_tall ? tall : wide, *out = from_tall ? wide : tall;
  p->tin = tensor_on(g_dev, 2, in[0], in[1]);
  p->tout = tensor_on(g_dev, 2, out[0], out[1]);
  p->vec = from_tall ? slab_type(1, per) : slab_type(p->R, p->C);
  p->rvec = from_tall ? slab_type(p->R, p->C) : slab_type(1, per);
  shard_counts(p);
  add_variant(p, m_a2a_scratch_post, m_wait);
  return true;
}

static bool setup_shard_dim(point_t *p, int64_t elems) { return setup_shard(p, elems, false); }
static bool setup_shard_dim_g1s0(point_t *p, int64_t elems) { return setup_shard(p, elems, true); }

const op_desc_t op_shard_dim = {
    .name = "shard_dim",
    .tcoll = {t_shard_post, t_wait_out},
    .mpi = {m_shard_post, m_wait},
    .setup = setup_shard_dim,
    .rows = {{"shard_dim", 0, 1, {{"/alltoall", 0, 2}}}},
    .tune = &tune_all_to_all,
};

const op_desc_t op_shard_dim_g1s0 = {
    .name = "shard_dim_g1s0",
    .tcoll = {t_shard_post, t_wait_out},
    .mpi = {m_shard_post, m_wait},
    .setup = setup_shard_dim_g1s0,
    .rows = {{"shard_dim_g1s0", 0, 1, {{"/alltoall", 0, 2}}}},
    .tune = &tune_all_to_all,
};
