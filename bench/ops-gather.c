/* tcoll-bench: all_gather and reduce_scatter, along dim 0 and along dim 1. The dim-1 points
 * also time the dim-0 call on the same bytes (dim1/dim0 in the note), and all_gather_dim1 also
 * a contiguous MPI all_gather followed by a local interleave. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ all_gather */

static void t_allgather_post(point_t *p) { TC(tcoll_all_gather(&p->tin, 0, g_tc, &p->tout)); }
static void t_allgather_d1_post(point_t *p) { TC(tcoll_all_gather(&p->tin, 1, g_tc, &p->tout)); }
static void t_allgather_d0_post(point_t *p) { TC(tcoll_all_gather(&p->tin0, 0, g_tc, &p->tout0)); }
static void m_allgather_post(point_t *p) {
  MP(MPI_Iallgather(p->min, (int)p->count, g_dt.mpi, p->mout, (int)p->count, g_dt.mpi, g_mpi,
                    &p->req));
}
static void m_allgather_blocking(point_t *p) {
  MP(MPI_Allgather(p->min, (int)p->count, g_dt.mpi, p->mout, (int)p->count, g_dt.mpi, g_mpi));
}
/* Rank r's [R, C] block lands as columns r*C..(r+1)*C-1 of [R, n*C]: one strided datatype. */
static void m_allgather_d1_post(point_t *p) {
  MP(MPI_Iallgather(p->min, (int)p->count, g_dt.mpi, p->mout, 1, p->vec, g_mpi, &p->req));
}

/* The alternative a library could use: a contiguous all_gather into scratch, then a local
 * interleave (rank r's [R, C] block to columns r*C..). Measured to compare with the datatype. */
static void m_allgather_unpack_post(point_t *p) {
  MP(MPI_Iallgather(p->min, (int)p->count, g_dt.mpi, p->scratch, (int)p->count, g_dt.mpi, g_mpi,
                    &p->req));
}
static void m_allgather_unpack_wait(point_t *p) {
  MP(MPI_Wait(&p->req, MPI_STATUS_IGNORE));
  size_t C = (size_t)p->C, R = (size_t)p->R, row = C * (size_t)g_size;
  for (int r = 0; r < g_size; r++)
    for (size_t i = 0; i < R; i++)
      memcpy(p->mout2 + (i * row + (size_t)r * C) * g_dt.size,
             p->scratch + ((size_t)r * R + i) * C * g_dt.size, C * g_dt.size);
}

static void t_allgather_alloc_post(point_t *p) {
  p->talloc = unallocated();
  TC(tcoll_all_gather(&p->tin, p->op == OP_ALL_GATHER_D1 ? 1 : 0, g_tc, &p->talloc));
}

/* c = elems / n elements from each rank (count: one rank's input); S is the gathered output. */
static int64_t gather_buffers(point_t *p, int64_t elems) {
  int64_t c = elems / g_size;
  if (c < 1) return 0;
  set_size(p, c, c * g_size, ring_factor());
  raw_in(p, (size_t)c * g_dt.size);
  raw_out(p, p->bytes);
  return c;
}

static bool setup_all_gather(point_t *p, int64_t elems) {
  int64_t c = gather_buffers(p, elems);
  if (!c) return false;
  p->tin = tensor_on(g_dev, 1, c, 0);
  p->tout = tensor_on(g_dev, 1, c * g_size, 0);
  return true;
}

/* [R, C] from each rank into [R, n C], and the dim-0 call on the same bytes. */
static bool setup_all_gather_dim1(point_t *p, int64_t elems) {
  int64_t c = gather_buffers(p, elems), n = g_size;
  if (!c) return false;
  p->R = rows_for(c);
  p->C = c / p->R;
  p->tin = tensor_on(g_dev, 2, p->R, p->C);
  p->tout = tensor_on(g_dev, 2, p->R, p->C * n);
  p->tin0 = tensor_on(g_dev, 1, c, 0);
  p->tout0 = tensor_on(g_dev, 1, c * n, 0);
  p->vec = slab_type(p->R, p->C);
  p->mout2 = xmalloc(p->bytes);
  p->scratch = xmalloc(p->bytes);
  add_variant(p, t_allgather_d0_post, t_wait_out0);
  add_variant(p, m_allgather_unpack_post, m_allgather_unpack_wait);
  return true;
}

/* The dim-0 call against its closed form: rank r's pattern in block r. */
static long diff_gathered_dim0(point_t *p) {
  int64_t n = tcoll_tensor_numel(&p->tout0);
  char *ref = xmalloc((size_t)n * g_dt.size);
  for (int64_t j = 0; j < n; j++) store(ref, j, pattern((int)(j / p->count), j % p->count));
  long bad = diff_tensor(&p->tout0, ref);
  free(ref);
  return bad;
}

static long check_all_gather_dim1(point_t *p) {
  long bad = diff_tensor(&p->tout, p->mout);
  bad += diff_tensor(&p->tout, p->mout2);
  bad += diff_gathered_dim0(p);
  return bad;
}

static const tune_set_t tune_all_gather = {
    3,
    {"mpi", "cma", "shm"},
    {"all_gather:mpi", "all_gather:cma", "all_gather:shm"},
};

const op_desc_t op_all_gather = {
    .name = "all_gather",
    .blocking = m_allgather_blocking,
    .tcoll = {t_allgather_post, t_wait_out},
    .mpi = {m_allgather_post, m_wait},
    .setup = setup_all_gather,
    .alloc_post = t_allgather_alloc_post,
    .tune = &tune_all_gather,
};

const op_desc_t op_all_gather_dim1 = {
    .name = "all_gather_dim1",
    .tcoll = {t_allgather_d1_post, t_wait_out},
    .mpi = {m_allgather_d1_post, m_wait},
    .setup = setup_all_gather_dim1,
    .check = check_all_gather_dim1,
    .rows =
        {{"all_gather_dim1", 0, 1, {{"dim1/dim0", 0, 2}, {"mpi_contig+interleave/dim0", 3, 2}}}},
    .alloc_post = t_allgather_alloc_post,
};

/* ------------------------------------------------------------------ reduce_scatter */

static void t_rs_post(point_t *p) {
  TC(tcoll_reduce_scatter(&p->tin, TCOLL_SUM, 0, g_tc, &p->tout));
}
static void t_rs_d1_post(point_t *p) {
  TC(tcoll_reduce_scatter(&p->tin, TCOLL_SUM, 1, g_tc, &p->tout));
}
static void t_rs_d0_post(point_t *p) {
  TC(tcoll_reduce_scatter(&p->tin0, TCOLL_SUM, 0, g_tc, &p->tout0));
}
static void m_rs_post(point_t *p) {
  MP(MPI_Ireduce_scatter_block(p->min, p->mout, (int)(p->count / g_size), g_dt.mpi, MPI_SUM, g_mpi,
                               &p->req));
}
static void m_rs_blocking(point_t *p) {
  MP(MPI_Reduce_scatter_block(p->min, p->mout, (int)(p->count / g_size), g_dt.mpi, MPI_SUM, g_mpi));
}
/* MPI's reductions take no strided datatypes: pack [R, n*Cs] rank-major first, as a user must. */
static void m_rs_d1_post(point_t *p) {
  int64_t R = p->R, C = p->C, cs = C / g_size;
  for (int r = 0; r < g_size; r++)
    for (int64_t i = 0; i < R; i++)
      memcpy(p->scratch + ((size_t)r * (size_t)R + (size_t)i) * (size_t)cs * g_dt.size,
             p->min + ((size_t)i * (size_t)C + (size_t)r * (size_t)cs) * g_dt.size,
             (size_t)cs * g_dt.size);
  MP(MPI_Ireduce_scatter_block(p->scratch, p->mout, (int)(R * cs), g_dt.mpi, MPI_SUM, g_mpi,
                               &p->req));
}

static void t_rs_alloc_post(point_t *p) {
  p->talloc = unallocated();
  TC(tcoll_reduce_scatter(&p->tin, TCOLL_SUM, p->op == OP_REDUCE_SCATTER_D1 ? 1 : 0, g_tc,
                          &p->talloc));
}

/* S is the input of N = per n elements; each rank keeps per of them. */
static bool setup_reduce_scatter(point_t *p, int64_t elems) {
  int64_t per = split_evenly(p, elems);
  if (!per) return false;
  raw_out(p, (size_t)per * g_dt.size);
  p->tin = tensor_on(g_dev, 1, p->count, 0);
  p->tout = tensor_on(g_dev, 1, per, 0);
  return true;
}

/* [R, C] scattered along its columns into [R, C / n], and the dim-0 call on the same bytes. */
static bool setup_reduce_scatter_dim1(point_t *p, int64_t elems) {
  int64_t per = split_evenly(p, elems);
  if (!per) return false;
  int64_t N = p->count;
  raw_out(p, (size_t)per * g_dt.size);
  p->R = rows_for(per);
  p->C = N / p->R; /* a multiple of n */
  p->tin = tensor_on(g_dev, 2, p->R, p->C);
  p->tout = tensor_on(g_dev, 2, p->R, p->C / g_size);
  p->tin0 = tensor_on(g_dev, 1, N, 0);
  p->tout0 = tensor_on(g_dev, 1, per, 0);
  p->scratch = xmalloc(p->bytes);
  add_variant(p, t_rs_d0_post, t_wait_out0);
  return true;
}

/* The dim-0 call against its closed form: the sum of the ranks' patterns over this rank's
 * block. */
static long diff_scattered_dim0(point_t *p) {
  int64_t n = tcoll_tensor_numel(&p->tout0);
  char *ref = xmalloc((size_t)n * g_dt.size);
  for (int64_t j = 0; j < n; j++) {
    double s = 0;
    for (int r = 0; r < g_size; r++) s += pattern(r, g_rank * n + j);
    store(ref, j, s);
  }
  long bad = diff_tensor(&p->tout0, ref);
  free(ref);
  return bad;
}

static long check_reduce_scatter_dim1(point_t *p) {
  long bad = diff_tensor(&p->tout, p->mout);
  bad += diff_scattered_dim0(p);
  return bad;
}

static const tune_set_t tune_reduce_scatter = {
    4,
    {"mpi", "ring", "alltoall", "shm_slices"},
    {"reduce_scatter:mpi", "reduce_scatter:ring", "reduce_scatter:alltoall",
     "reduce_scatter:shm_slices"},
};

const op_desc_t op_reduce_scatter = {
    .name = "reduce_scatter",
    .blocking = m_rs_blocking,
    .tcoll = {t_rs_post, t_wait_out},
    .mpi = {m_rs_post, m_wait},
    .setup = setup_reduce_scatter,
    .alloc_post = t_rs_alloc_post,
    .tune = &tune_reduce_scatter,
};

const op_desc_t op_reduce_scatter_dim1 = {
    .name = "reduce_scatter_dim1",
    .tcoll = {t_rs_d1_post, t_wait_out},
    .mpi = {m_rs_d1_post, m_wait},
    .setup = setup_reduce_scatter_dim1,
    .check = check_reduce_scatter_dim1,
    .rows = {{"reduce_scatter_dim1", 0, 1, {{"dim1/dim0", 0, 2}}}},
    .alloc_post = t_rs_alloc_post,
};
