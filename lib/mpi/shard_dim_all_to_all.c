/* shard_dim_all_to_all -> MPI_Ialltoallv with strided datatypes on both sides: chunk j of the
 * input along shard_dim goes to rank j, and rank i's chunk lands as the i-th slab of the output
 * along gather_dim, with no packing. */
#include "../argcheck.h"
#include "../work/staging.h"
#include "../tensor.h"
#include "post.h"

#include <string.h>

/* Slab p of a tensor of `shape` along dim (each slab `len` wide): one datatype whose extent is
 * a slab, so that displacement p selects slab p. */
static int slab_type(tcoll_dtype_t d, const int64_t *shape, int ndim, int dim, int64_t len, int parts,
                     tc_mpi_type_t *t) {
  tc_dimview_t v = tc_dimview(shape, ndim, dim);
  int64_t block = len * v.inner;
  return tc_mpi_vector(d, v.outer, block, block * parts, block, t);
}

static int post(tc_work_t *w, const tcoll_tensor_t *in, const tcoll_tensor_t *out, int gdim, int sdim) {
  int size = w->comm->size;
  int *v = tc_work_scratch(w, 4 * (size_t)size * sizeof *v);
  if (!v) return TCOLL_ERR_NO_MEMORY;
  for (int p = 0; p < size; p++) {
    v[p] = v[2 * size + p] = 1;      /* counts */
    v[size + p] = v[3 * size + p] = p; /* displacements, in slabs */
  }
  const void *sbuf;
  void *rbuf;
  int rc = tc_stage_in(w, in, &sbuf);
  if (!rc) rc = tc_stage_out(w, out, &rbuf);
  if (rc || tcoll_tensor_numel(in) == 0) return rc;
  tc_mpi_type_t st, rt;
  if ((rc = slab_type(in->dtype, in->shape, in->ndim, sdim, in->shape[sdim] / size, size, &st))) return rc;
  if ((rc = slab_type(in->dtype, out->shape, out->ndim, gdim, out->shape[gdim] / size, size, &rt))) {
    tc_mpi_type_put(&st);
    return rc;
  }
  rc = tc_work_reserve(w, 1);
  if (!rc)
    rc = tc_post_ok(w,
                    MPI_Ialltoallv(sbuf, v, v + size, st.type, rbuf, v + 2 * size, v + 3 * size, rt.type,
                                   w->comm->mpi, tc_work_req(w)),
                    "MPI_Ialltoallv");
  tc_mpi_type_put(&st);
  tc_mpi_type_put(&rt);
  return rc;
}

int tcoll_shard_dim_all_to_all(const tcoll_tensor_t *in, int gather_dim, int shard_dim, tcoll_comm_t *comm,
                               tcoll_tensor_t *out) {
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
  if ((rc = tc_work_begin(&w, "shard_dim_all_to_all", c, TC_SIG(.t = in, .dim = gdim * TCOLL_MAX_DIMS + sdim)))) return rc;
  rc = tc_work_output(w, out, in->dtype, in->ndim, shape, in->device);
  if (!rc) rc = tc_work_register_inputs(w, in, 1);
  if (!rc) rc = post(w, in, out, gdim, sdim);
  return tc_work_end(w, rc);
}
