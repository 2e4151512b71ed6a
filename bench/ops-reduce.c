/* tcoll-bench: the ops on one whole tensor: all_reduce, reduce (to rank 0), broadcast (from rank
 * 0, in place on both sides), and grad_all_reduce (the differentiable all_reduce). */
#include "bench.h"

#include <stdlib.h>

static bool setup_all_reduce(point_t *p, int64_t elems) {
  return setup_whole_tensor(p, elems, 2.0 * ring_factor(), true);
}

static void t_allreduce_alloc_post(point_t *p) {
  p->talloc = unallocated();
  TC(tcoll_all_reduce(&p->tin, TCOLL_SUM, g_tc, &p->talloc));
}

static const tune_set_t tune_all_reduce = {
    6,
    {"mpi", "ring", "ring_allgather", "shm", "shm_slices", "hier"},
    {"all_reduce:mpi", "all_reduce:ring", "all_reduce:ring_allgather", "all_reduce:shm",
     "all_reduce:shm_slices", "all_reduce:hier"},
};

static void m_allreduce_blocking(point_t *p) {
  MP(MPI_Allreduce(p->min, p->mout, (int)p->count, g_dt.mpi, MPI_SUM, g_mpi));
}

const op_desc_t op_all_reduce = {
    .name = "all_reduce",
    .blocking = m_allreduce_blocking,
    .tcoll = {t_allreduce_post, t_wait_out},
    .mpi = {m_allreduce_post, m_wait},
    .setup = setup_all_reduce,
    .alloc_post = t_allreduce_alloc_post,
    .tune = &tune_all_reduce,
};

/* ------------------------------------------------------------------ reduce (to rank 0) */

static void t_reduce_post(point_t *p) { TC(tcoll_reduce(&p->tin, 0, TCOLL_SUM, g_tc, &p->tout)); }
static void m_reduce_post(point_t *p) {
  MP(MPI_Ireduce(p->min, p->mout, (int)p->count, g_dt.mpi, MPI_SUM, 0, g_mpi, &p->req));
}

static void m_reduce_blocking(point_t *p) {
  MP(MPI_Reduce(p->min, p->mout, (int)p->count, g_dt.mpi, MPI_SUM, 0, g_mpi));
}

static bool setup_reduce(point_t *p, int64_t elems) {
  return setup_whole_tensor(p, elems, 1.0, true);
}

/* The result is written on the root only. */
static long check_reduce(point_t *p) { return g_rank == 0 ? diff_tensor(&p->tout, p->mout) : 0; }

static const tune_set_t tune_reduce = {
    4,
    {"mpi", "ring", "shm", "shm_slices"},
    {"reduce:mpi", "reduce:ring", "reduce:shm", "reduce:shm_slices"},
};

const op_desc_t op_reduce = {
    .name = "reduce",
    .blocking = m_reduce_blocking,
    .tcoll = {t_reduce_post, t_wait_out},
    .mpi = {m_reduce_post, m_wait},
    .setup = setup_reduce,
    .check = check_reduce,
    .tune = &tune_reduce,
};

/* ------------------------------------------------------------------ broadcast */

static void t_bcast_post(point_t *p) { TC(tcoll_broadcast(&p->tin, 0, g_tc, &p->tin)); }
static void t_wait_in(point_t *p) { TC(tcoll_wait(p->tin.data)); }
static void m_bcast_post(point_t *p) {
  MP(MPI_Ibcast(p->min, (int)p->count, g_dt.mpi, 0, g_mpi, &p->req));
}

static void m_bcast_blocking(point_t *p) {
  MP(MPI_Bcast(p->min, (int)p->count, g_dt.mpi, 0, g_mpi));
}

static bool setup_broadcast(point_t *p, int64_t elems) {
  return setup_whole_tensor(p, elems, 1.0, false);
}

static long check_broadcast(point_t *p) { return diff_tensor(&p->tin, p->min); }

const op_desc_t op_broadcast = {
    .name = "broadcast",
    .blocking = m_bcast_blocking,
    .tcoll = {t_bcast_post, t_wait_in},
    .mpi = {m_bcast_post, m_wait},
    .setup = setup_broadcast,
    .check = check_broadcast,
};

/* ------------------------------------------------------------------ grad_all_reduce */

/* Forward + backward of the differentiable all_reduce, outputs allocated by tcoll (y, then the
 * gradient of x from g = y), against one raw MPI all_reduce (the ratio column), one plain tcoll
 * all_reduce (the target) and two (what forward + backward communicate). */
static void t_grad_post(point_t *p) {
  tcoll_grad_node_t *node;
  tcoll_tensor_t y = unallocated();
  p->tgrad = unallocated();
  TC(tcoll_grad_all_reduce(&p->tin, TCOLL_SUM, g_tc, &y, &node));
  TC(tcoll_wait(y.data));
  TC(tcoll_grad_backward(node, &y, 1, &p->tgrad, 1));
  tcoll_grad_node_free(node);
  TC(tcoll_wait(p->tgrad.data));
  tcoll_tensor_free(&y);
}
static void t_grad_wait(point_t *p) { tcoll_tensor_free(&p->tgrad); }
static void t_two_post(point_t *p) {
  TC(tcoll_all_reduce(&p->tin, TCOLL_SUM, g_tc, &p->tout));
  TC(tcoll_wait(p->tout.data));
  TC(tcoll_all_reduce(&p->tout, TCOLL_SUM, g_tc, &p->tout0));
}

static bool setup_grad(point_t *p, int64_t elems) {
  if (!setup_whole_tensor(p, elems, 2.0 * ring_factor(), true)) return false;
  p->tout0 = tensor_on(g_dev, 1, elems, 0);
  add_variant(p, t_allreduce_post, t_wait_out);
  add_variant(p, t_two_post, t_wait_out0);
  return true;
}

/* After the timing: one more forward + backward kept for the check (y = sum of x, grad =
 * size y). */
static long check_grad(point_t *p) {
  tcoll_grad_node_t *node;
  tcoll_tensor_t y = unallocated(), gx = unallocated();
  TC(tcoll_grad_all_reduce(&p->tin, TCOLL_SUM, g_tc, &y, &node));
  TC(tcoll_wait(y.data));
  TC(tcoll_grad_backward(node, &y, 1, &gx, 1));
  TC(tcoll_wait(gx.data));
  tcoll_grad_node_free(node);
  char *twice = xmalloc(p->bytes);
  for (int64_t i = 0; i < p->count; i++) store(twice, i, load(p->mout, i) * g_size);
  long bad = diff_tensor(&y, p->mout) + diff_tensor(&gx, twice);
  free(twice);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&gx);
  return bad;
}

const op_desc_t op_grad_all_reduce = {
    .name = "grad_all_reduce",
    .tcoll = {t_grad_post, t_grad_wait},
    .mpi = {m_allreduce_post, m_wait},
    .setup = setup_grad,
    .check = check_grad,
    .rows =
        {{"grad_all_reduce", 0, 1, {{"grad/plain", 0, 2}, {NULL, 0, 0}, {"grad/two_plain", 0, 3}}}},
    .no_memcpy = true,
};
