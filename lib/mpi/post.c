#include "post.h"

#include "../comm.h"
#include "../base/dtype.h"
#include "../base/host_loops.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* MPI calls for n elements: one where one call carries them (tc_mpi_one_call), else one per
 * piece of at most the limit. */
static int64_t ncalls(int64_t n) {
  int64_t per = tc_mpi_per_call(n);
  return n == 0 ? 0 : (n + per - 1) / per;
}

static const void *at_const(const void *p, int64_t elems, size_t es) {
  return p == MPI_IN_PLACE ? p : (const char *)p + (size_t)elems * es;
}

/* Nothing, or one call per piece of at most the per-call limit. */
static TC_COLD int post_allreduce_pieces(tc_work_t *w, const void *sbuf, void *rbuf, int64_t n,
                                         tcoll_dtype_t d, MPI_Op op) {
  int64_t per = tc_mpi_per_call(n);
  size_t es = tc_dtype_size(d);
  int rc = tc_work_reserve(w, (int)ncalls(n));
  for (int64_t off = 0; off < n && !rc; off += per) {
    int64_t c = n - off < per ? n - off : per;
    int mrc = tc_mpi_iallreduce(at_const(sbuf, off, es), (char *)rbuf + (size_t)off * es, c,
                                tc_mpi_dtype(d), op, w->comm->mpi, tc_work_req(w));
    rc = tc_post_ok(w, mrc, TC_MPI_NAME("MPI_Iallreduce", c));
  }
  return rc;
}

int tc_post_allreduce(tc_work_t *w, const void *sbuf, void *rbuf, int64_t n, tcoll_dtype_t d,
                      MPI_Op op) {
  if (TC_UNLIKELY(n <= 0 || !tc_mpi_fits(n))) return post_allreduce_pieces(w, sbuf, rbuf, n, d, op);
  MPI_Request *req = tc_work_req(w); /* the common case: one int-count call */
  if (!req) return TCOLL_ERR_NO_MEMORY;
  int mrc = tc_mpi_iallreduce(sbuf, rbuf, n, tc_mpi_dtype(d), op, w->comm->mpi, req);
  return tc_post_ok(w, mrc, "MPI_Iallreduce");
}

int tc_post_reduce(tc_work_t *w, const void *sbuf, void *rbuf, int64_t n, tcoll_dtype_t d,
                   MPI_Op op, int root) {
  int64_t per = tc_mpi_per_call(n);
  size_t es = tc_dtype_size(d);
  bool is_root = w->comm->rank == root;
  int rc = tc_work_reserve(w, (int)ncalls(n));
  for (int64_t off = 0; off < n && !rc; off += per) {
    int64_t c = n - off < per ? n - off : per;
    void *r = is_root ? (char *)rbuf + (size_t)off * es : NULL;
    int mrc = tc_mpi_ireduce(at_const(sbuf, off, es), r, c, tc_mpi_dtype(d), op, root, w->comm->mpi,
                             tc_work_req(w));
    rc = tc_post_ok(w, mrc, TC_MPI_NAME("MPI_Ireduce", c));
  }
  return rc;
}

int tc_post_reduce_scatter_block(tc_work_t *w, const void *sbuf, void *rbuf, int64_t nper,
                                 tcoll_dtype_t d, MPI_Op op) {
  if (nper == 0) return TCOLL_SUCCESS;
  if (tc_mpi_one_call(nper)) {
    int rc = tc_work_reserve(w, 1);
    if (rc) return rc;
    rc = tc_mpi_ireduce_scatter_block(sbuf, rbuf, nper, tc_mpi_dtype(d), op, w->comm->mpi,
                                      tc_work_req(w));
    return tc_post_ok(w, rc, TC_MPI_NAME("MPI_Ireduce_scatter_block", nper));
  }
  /* Without large counts: the send blocks of one call must be contiguous and a reduction cannot
   * take a strided datatype, so each owner's block is reduced to it piece by piece. */
  int64_t L = tc_mpi_limit();
  int size = w->comm->size;
  size_t es = tc_dtype_size(d);
  int rc = tc_work_reserve(w, (int)(ncalls(nper) * size));
  for (int64_t off = 0; off < nper && !rc; off += L) {
    int64_t c = nper - off < L ? nper - off : L;
    for (int r = 0; r < size && !rc; r++) {
      const char *s = (const char *)sbuf + ((size_t)r * (size_t)nper + (size_t)off) * es;
      void *dst = r == w->comm->rank ? (char *)rbuf + (size_t)off * es : NULL;
      int mrc = tc_mpi_ireduce(s, dst, c, tc_mpi_dtype(d), op, r, w->comm->mpi, tc_work_req(w));
      rc = tc_post_ok(w, mrc, "MPI_Ireduce");
    }
  }
  return rc;
}

int tc_post_bcast(tc_work_t *w, void *buf, int64_t n, tcoll_dtype_t d, int root) {
  if (n == 0) return TCOLL_SUCCESS;
  tc_mpi_span_t s;
  int rc = tc_work_reserve(w, 1);
  if (!rc) rc = tc_mpi_span(d, n, &s);
  if (rc) return rc;
  rc = tc_mpi_ibcast(buf, s.count, s.dt.type, root, w->comm->mpi, tc_work_req(w));
  rc = tc_post_ok(w, rc, TC_MPI_NAME("MPI_Ibcast", s.count));
  tc_mpi_span_put(&s);
  return rc;
}

int tc_post_allgather(tc_work_t *w, const void *sbuf, void *rbuf, int64_t n, tcoll_dtype_t d) {
  if (n == 0) return TCOLL_SUCCESS;
  tc_mpi_span_t s;
  int rc = tc_work_reserve(w, 1);
  if (!rc) rc = tc_mpi_span(d, n, &s);
  if (rc) return rc;
  rc = tc_mpi_iallgather(sbuf, s.count, s.dt.type, rbuf, s.count, s.dt.type, w->comm->mpi,
                         tc_work_req(w));
  rc = tc_post_ok(w, rc, TC_MPI_NAME("MPI_Iallgather", s.count));
  tc_mpi_span_put(&s);
  return rc;
}

/* ------------------------------------------------------------------ all-to-all */

static bool fits(const int64_t *v, int n, int64_t limit) {
  for (int i = 0; i < n; i++)
    if (v[i] > limit) return false;
  return true;
}

/* Per-peer datatype: count units starting disp units into the buffer. */
static int peer_type(tcoll_dtype_t d, int64_t unit, int64_t count, int64_t disp, MPI_Datatype *t) {
  if (count == 0) return PMPI_Type_dup(MPI_BYTE, t);
  tc_mpi_type_t block;
  int rc = tc_mpi_contig(d, count * unit, &block);
  if (rc) return rc;
  int one = 1;
  MPI_Aint bytes = (MPI_Aint)(disp * unit) * (MPI_Aint)tc_dtype_size(d);
  rc = PMPI_Type_create_hindexed(1, &one, &bytes, block.type, t);
  if (rc == MPI_SUCCESS) rc = PMPI_Type_commit(t);
  tc_mpi_type_put(&block);
  return rc == MPI_SUCCESS ? TCOLL_SUCCESS : tc_mpi_error(rc, "building an all-to-all datatype");
}

static int post_alltoallw(tc_work_t *w, const void *sbuf, const int64_t *sc, const int64_t *sd,
                          void *rbuf, const int64_t *rc_, const int64_t *rd, tcoll_dtype_t d,
                          int64_t unit) {
  int size = w->comm->size;
  /* MPI reads these arrays until the call completes: they live in the work. The datatypes are
   * freed only then too: Open MPI 4.1 never frees those freed while an MPI_Ialltoallw using them
   * is in flight (a leak per call). */
  int *ints = tc_work_scratch(w, 4 * (size_t)size * sizeof(int));
  MPI_Datatype *types = malloc((2 * (size_t)size + 1) * sizeof *types);
  if (!ints || !types) {
    free(types);
    return TCOLL_ERR_NO_MEMORY;
  }
  int *scounts = ints, *sdispls = ints + size, *rcounts = ints + 2 * size,
      *rdispls = ints + 3 * size;
  MPI_Datatype *stypes = types, *rtypes = types + size;
  int rc = TCOLL_SUCCESS, built = 0;
  for (int p = 0; p < size && !rc; p++) {
    rc = peer_type(d, unit, sc[p], sd[p], &stypes[p]);
    if (!rc) rc = peer_type(d, unit, rc_[p], rd[p], &rtypes[p]);
    if (!rc) built = p + 1;
    scounts[p] = sc[p] ? 1 : 0;
    rcounts[p] = rc_[p] ? 1 : 0;
    sdispls[p] = rdispls[p] = 0;
  }
  if (!rc) rc = tc_work_reserve(w, 1);
  if (!rc)
    rc = tc_post_ok(w,
                    PMPI_Ialltoallw(sbuf, scounts, sdispls, stypes, rbuf, rcounts, rdispls, rtypes,
                                    w->comm->mpi, tc_work_req(w)),
                    "MPI_Ialltoallw");
  if (!rc) { /* all 2 * size built and in use: freed when the work is recycled */
    types[2 * size] = MPI_DATATYPE_NULL;
    if (tc_work_hold(w, types, TC_HELD_MPI_TYPES) == TCOLL_SUCCESS) return rc;
  }
  for (int p = 0; p < built; p++) { /* freeing types in use by a posted call is allowed by MPI */
    PMPI_Type_free(&stypes[p]);
    PMPI_Type_free(&rtypes[p]);
  }
  free(types);
  return rc;
}

/* Every count and displacement in elements, in one MPI_Ialltoallv_c (where MPI has it). */
static int post_alltoallv_c(tc_work_t *w, const void *sbuf, const int64_t *sc, const int64_t *sd,
                            void *rbuf, const int64_t *rc_, const int64_t *rd, tcoll_dtype_t d,
                            int64_t unit) {
  int size = w->comm->size;
  /* MPI reads these arrays until the call completes: they live in the work. */
  MPI_Count *counts = tc_work_scratch(w, 2 * (size_t)size * sizeof *counts);
  MPI_Aint *displs = tc_work_scratch(w, 2 * (size_t)size * sizeof *displs);
  if (!counts || !displs) return TCOLL_ERR_NO_MEMORY;
  for (int p = 0; p < size; p++) {
    counts[p] = sc[p] * unit;
    counts[size + p] = rc_[p] * unit;
    displs[p] = (MPI_Aint)(sd[p] * unit);
    displs[size + p] = (MPI_Aint)(rd[p] * unit);
  }
  int rc = tc_work_reserve(w, 1);
  if (rc) return rc;
  rc = tc_mpi_ialltoallv_c(sbuf, counts, displs, rbuf, counts + size, displs + size,
                           tc_mpi_dtype(d), w->comm->mpi, tc_work_req(w));
  return tc_post_ok(w, rc, "MPI_Ialltoallv_c");
}

/* Counts within the limit and displacements within an int: MPI_Ialltoallv in units. */
static int post_alltoallv_int(tc_work_t *w, const void *sbuf, const int64_t *sc, const int64_t *sd,
                              void *rbuf, const int64_t *rc_, const int64_t *rd, tcoll_dtype_t d,
                              int64_t unit) {
  int size = w->comm->size;
  int *ints = tc_work_scratch(w, 4 * (size_t)size * sizeof(int));
  if (!ints) return TCOLL_ERR_NO_MEMORY;
  int *scounts = ints, *sdispls = ints + size, *rcounts = ints + 2 * size,
      *rdispls = ints + 3 * size;
  for (int p = 0; p < size; p++) {
    scounts[p] = (int)sc[p];
    sdispls[p] = (int)sd[p];
    rcounts[p] = (int)rc_[p];
    rdispls[p] = (int)rd[p];
  }
  tc_mpi_span_t unit_type;
  int rc = tc_work_reserve(w, 1);
  if (!rc) rc = unit == 1 ? tc_mpi_span(d, 1, &unit_type) : tc_mpi_contig(d, unit, &unit_type.dt);
  if (rc) return rc;
  if (unit != 1) unit_type.count = 1;
  rc = PMPI_Ialltoallv(sbuf, scounts, sdispls, unit_type.dt.type, rbuf, rcounts, rdispls,
                       unit_type.dt.type, w->comm->mpi, tc_work_req(w));
  rc = tc_post_ok(w, rc, "MPI_Ialltoallv");
  tc_mpi_span_put(&unit_type);
  return rc;
}

int tc_post_alltoallv(tc_work_t *w, const void *sbuf, const int64_t *sc, const int64_t *sd,
                      void *rbuf, const int64_t *rc_, const int64_t *rd, tcoll_dtype_t d,
                      int64_t unit) {
  int size = w->comm->size;
  int64_t L = tc_mpi_limit();
  bool ints =
      fits(sc, size, L) && fits(rc_, size, L) && fits(sd, size, INT_MAX) && fits(rd, size, INT_MAX);
  /* With large counts a row above the limit is counted in elements too, not built as a type. */
  if (ints && (unit <= L || !tc_mpi_large_count()))
    return post_alltoallv_int(w, sbuf, sc, sd, rbuf, rc_, rd, d, unit);
  /* The _c and int forms are two bindings of one MPI procedure: ranks may take different ones,
   * as their counts differ. */
  if (tc_mpi_large_count()) return post_alltoallv_c(w, sbuf, sc, sd, rbuf, rc_, rd, d, unit);
  return post_alltoallw(w, sbuf, sc, sd, rbuf, rc_, rd, d, unit);
}

int tc_reduce_local(const void *x, void *acc, int64_t n, tcoll_dtype_t d, MPI_Op op) {
  const char *call = "MPI_Reduce_local";
  int rc = tc_mpi_reduce_local(x, acc, n, d, op, &call);
  return rc == MPI_SUCCESS ? TCOLL_SUCCESS : tc_mpi_error(rc, call);
}

/* ------------------------------------------------------------------ packing */

void tc_pack_rank_major(void *y, const void *x, int64_t outer, int size, int64_t block,
                        tcoll_dtype_t d, double scale) {
  size_t es = tc_dtype_size(d), bb = (size_t)block * es;
  for (int r = 0; r < size; r++) {
    for (int64_t o = 0; o < outer; o++) {
      char *dst = (char *)y + ((size_t)r * (size_t)outer + (size_t)o) * bb;
      const char *src = (const char *)x + ((size_t)o * (size_t)size + (size_t)r) * bb;
      if (scale == 1.0)
        memcpy(dst, src, bb);
      else
        tc_host_scale_copy(dst, src, d, block, scale);
    }
  }
}
