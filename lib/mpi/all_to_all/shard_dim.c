/* shard_dim_all_to_all -> MPI_Ialltoallv with strided datatypes on both sides: chunk j of the
 * input along shard_dim goes to rank j, and rank i's chunk lands as the i-th slab of the output
 * along gather_dim, with no packing. Or the scattered exchange (all_to_all's algorithm): the same
 * slabs, one MPI_Isend and one MPI_Irecv of one slab datatype per rank, all posted at once (the
 * own slab too: a message to itself, which lets MPI copy between the two strided layouts). */
#include "../../argcheck.h"
#include "../../base/dtype.h"
#include "../../work/staging.h"
#include "../../tensor.h"
#include "../post.h"
#include "all_to_all.h"

#include <string.h>

/* Slab p of a tensor of `shape` along dim (each slab `len` wide): one datatype whose extent is
 * a slab, so that displacement p selects slab p. */
static int slab_type(tcoll_dtype_t d, const int64_t *shape, int ndim, int dim, int64_t len,
                     int parts, tc_mpi_type_t *t) {
  tc_dimview_t v = tc_dimview(shape, ndim, dim);
  int64_t block = len * v.inner;
  return tc_mpi_vector(d, v.outer, block, block * parts, block, t);
}

/* Slab p of each side as the exchange of an all-to-all, one slab datatype a side (held by the work
 * until the steps are posted). */
typedef struct slabs_at {
  const char *sbuf;
  char *rbuf;
  size_t sslab, rslab;
} slabs_at_t;

static void block_of(const tc_exchange_t *x, int p, bool recv, char **at, int64_t *count) {
  const slabs_at_t *sl = x->ctx;
  *at = recv ? sl->rbuf + (size_t)p * sl->rslab : (char *)sl->sbuf + (size_t)p * sl->sslab;
  *count = 1;
}

static int post_scattered(tc_work_t *w, const tc_algo_t *a, const char *sbuf, char *rbuf,
                          tc_mpi_type_t *st, tc_mpi_type_t *rt, size_t sslab, size_t rslab) {
  MPI_Datatype s_type = st->type, r_type = rt->type;
  int rc = tc_work_hold_type(w, st);
  if (rc) {
    tc_mpi_type_put(rt);
    return rc;
  }
  if ((rc = tc_work_hold_type(w, rt))) return rc;
  slabs_at_t sl = {sbuf, rbuf, sslab, rslab};
  tc_exchange_t x = {block_of, &sl, s_type, r_type, "in", "out", "slabs"};
  tc_algo_call_t c = {.n = 1, .dtype = TCOLL_UINT8, .x = &x};
  return a->build(w, &c);
}

static int post_alltoallv(tc_work_t *w, const void *sbuf, void *rbuf, tc_mpi_type_t *st,
                          tc_mpi_type_t *rt) {
  int size = w->comm->size;
  int *v = tc_work_scratch(w, 4 * (size_t)size * sizeof *v);
  int rc = v ? tc_work_reserve(w, 1) : TCOLL_ERR_NO_MEMORY;
  for (int p = 0; v && p < size; p++) {
    v[p] = v[2 * size + p] = 1;        /* counts */
    v[size + p] = v[3 * size + p] = p; /* displacements, in slabs */
  }
  if (!rc)
    rc = tc_post_ok(w,
                    PMPI_Ialltoallv(sbuf, v, v + size, st->type, rbuf, v + 2 * size, v + 3 * size,
                                    rt->type, w->comm->mpi, tc_work_req(w)),
                    "MPI_Ialltoallv");
  tc_mpi_type_put(st);
  tc_mpi_type_put(rt);
  return rc;
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int gdim,
                int sdim) {
  int size = w->comm->size;
  const tc_algo_t *a =
      tc_all_to_all_choose(TC_OP_ALL_TO_ALL, w->comm, in->dtype, in->device != TCOLL_HOST);
  tc_work_set_algo(w, a->name);
  const void *sbuf;
  void *rbuf;
  w->host_math = a->build != NULL; /* staged whole, as all_to_all_single's */
  int rc = tc_stage_in(w, in, &sbuf);
  if (!rc) rc = tc_stage_out(w, out, &rbuf);
  if (rc || tcoll_tensor_numel(in) == 0) return rc;
  tc_mpi_type_t st, rt;
  int64_t slen = in->shape[sdim] / size, glen = out->shape[gdim] / size;
  if ((rc = slab_type(in->dtype, in->shape, in->ndim, sdim, slen, size, &st))) return rc;
  if ((rc = slab_type(in->dtype, out->shape, out->ndim, gdim, glen, size, &rt))) {
    tc_mpi_type_put(&st);
    return rc;
  }
  if (!a->build) return post_alltoallv(w, sbuf, rbuf, &st, &rt);
  size_t es = tc_dtype_size(in->dtype);
  size_t sslab = (size_t)(slen * tc_dimview(in->shape, in->ndim, sdim).inner) * es;
  size_t rslab = (size_t)(glen * tc_dimview(out->shape, out->ndim, gdim).inner) * es;
  return post_scattered(w, a, sbuf, rbuf, &st, &rt, sslab, rslab);
}

int tcoll_shard_dim_all_to_all(const tcoll_tensor_t *in, int gather_dim, int shard_dim,
                               tcoll_comm_t *comm, tcoll_tensor_t *out) {
  TC_ENTER("tcoll_shard_dim_all_to_all");
  tcoll_comm_t *c = NULL;
  int gdim, sdim;
  int rc = tc_check_shard_dim_all_to_all(in, gather_dim, shard_dim, comm, out, &c, &gdim, &sdim);
  if (rc) return tc_call_failed("shard_dim_all_to_all", c, rc);
  int64_t shape[TCOLL_MAX_DIMS];
  memcpy(shape, in->shape, sizeof shape);
  shape[sdim] /= c->size;
  shape[gdim] *= c->size;
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "shard_dim_all_to_all", c,
                          TC_SIG(.t = in, .dim = gdim * TCOLL_MAX_DIMS + sdim))))
    return rc;
  rc = tc_work_output(w, out, in->dtype, in->ndim, shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post(w, in, out, gdim, sdim);
  return tc_work_end(w, rc);
}
