/* The literal mappings' posting: MPI_I* calls for a work, honouring the per-call element limit
 * (TCOLL_MAX_COUNT): a count above it goes in one MPI-4 _c call where MPI has them (mpi_glue.h,
 * tc_mpi_one_call), else it is split or described with derived datatypes as said below. Each
 * returns TCOLL_ERR_MPI (with MPI's message, naming the call, _c or not) if MPI refuses a call;
 * requests already posted stay in the work. */
#ifndef TC_POST_H
#define TC_POST_H

#include "../comm.h"
#include "../work/work.h"
#include "../mpiglue/mpi_calls.h"

/* Reductions cannot use derived datatypes with MPI's built-in ops, so without large counts a
 * count above the limit becomes several calls on consecutive pieces. sbuf may be MPI_IN_PLACE. */
int tc_post_allreduce(tc_work_t *w, const void *sbuf, void *rbuf, int64_t n, tcoll_dtype_t d,
                      MPI_Op op);
int tc_post_reduce(tc_work_t *w, const void *sbuf, void *rbuf, int64_t n, tcoll_dtype_t d,
                   MPI_Op op, int root);
/* sbuf holds size blocks of nper elements; rank r receives the reduced block r in rbuf. Without
 * large counts, blocks above the limit are reduced piece by piece to each owner (MPI_Ireduce
 * per root). */
int tc_post_reduce_scatter_block(tc_work_t *w, const void *sbuf, void *rbuf, int64_t nper,
                                 tcoll_dtype_t d, MPI_Op op);
int tc_post_bcast(tc_work_t *w, void *buf, int64_t n, tcoll_dtype_t d, int root);
/* Every rank contributes n elements of sbuf (MPI_IN_PLACE: its slot of rbuf already holds
 * them); rbuf receives size blocks of n. */
int tc_post_allgather(tc_work_t *w, const void *sbuf, void *rbuf, int64_t n, tcoll_dtype_t d);

/* All-to-all in units of `unit` elements: counts and displacements (int64, in units) per
 * peer. MPI_Ialltoallv when the counts fit the limit and the displacements an int; else
 * MPI_Ialltoallv_c in elements where MPI has it (also for a unit above the limit), or
 * MPI_Ialltoallw with one derived datatype per peer (byte displacements of any size). The
 * arrays are copied. */
int tc_post_alltoallv(tc_work_t *w, const void *sbuf, const int64_t *scounts,
                      const int64_t *sdispls, void *rbuf, const int64_t *rcounts,
                      const int64_t *rdispls, tcoll_dtype_t d, int64_t unit);

/* acc[i] = x[i] (op) acc[i] on the host, with MPI's own op (so float16 / bfloat16 and every
 * reduce op work as in the collectives): one MPI_Reduce_local(_c), or pieces without large
 * counts. */
int tc_reduce_local(const void *x, void *acc, int64_t n, tcoll_dtype_t d, MPI_Op op);

/* Packs x (viewed as outer x size x block elements) into y as size x outer x block: the
 * rank-major order reduce_scatter needs along a dim other than 0. scale != 1 multiplies. */
void tc_pack_rank_major(void *y, const void *x, int64_t outer, int size, int64_t block,
                        tcoll_dtype_t d, double scale);

/* Checks the code of the call just posted into tc_work_req(w), and names its request after the
 * call (int or _c form), so that a failure found at completion names it too. */
static inline int tc_post_ok(tc_work_t *w, int rc, const char *call) {
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, call);
  tc_sched_name_posted(&w->sched, call);
  return TCOLL_SUCCESS;
}

#endif
