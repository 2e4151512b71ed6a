/* Posting MPI_I* calls for a work, honouring the per-call element limit (TCOLL_MAX_COUNT).
 * Each returns TCOLL_ERR_MPI (with MPI's message) if MPI refuses a call; requests already
 * posted stay in the work. */
#ifndef TC_POST_H
#define TC_POST_H

#include "../comm.h"
#include "../work/work.h"
#include "../sched/mpi_glue.h"

/* Reductions cannot use derived datatypes with MPI's built-in ops, so counts above the limit
 * become several calls on consecutive pieces. sbuf may be MPI_IN_PLACE. */
int tc_post_allreduce(tc_work_t *w, const void *sbuf, void *rbuf, int64_t n, tcoll_dtype_t d, MPI_Op op);
int tc_post_reduce(tc_work_t *w, const void *sbuf, void *rbuf, int64_t n, tcoll_dtype_t d, MPI_Op op, int root);
/* sbuf holds size blocks of nper elements; rank r receives the reduced block r in rbuf. Blocks
 * above the limit are reduced piece by piece to each owner (MPI_Ireduce per root). */
int tc_post_reduce_scatter_block(tc_work_t *w, const void *sbuf, void *rbuf, int64_t nper, tcoll_dtype_t d,
                                 MPI_Op op);
int tc_post_bcast(tc_work_t *w, void *buf, int64_t n, tcoll_dtype_t d, int root);
/* Every rank contributes n elements of sbuf (MPI_IN_PLACE: its slot of rbuf already holds
 * them); rbuf receives size blocks of n. */
int tc_post_allgather(tc_work_t *w, const void *sbuf, void *rbuf, int64_t n, tcoll_dtype_t d);

/* All-to-all in units of `unit` elements: counts and displacements (int64, in units) per
 * peer. MPI_Ialltoallv when everything fits the limit, else MPI_Ialltoallw with one derived
 * datatype per peer (byte displacements of any size). The arrays are copied. */
int tc_post_alltoallv(tc_work_t *w, const void *sbuf, const int64_t *scounts, const int64_t *sdispls, void *rbuf,
                      const int64_t *rcounts, const int64_t *rdispls, tcoll_dtype_t d, int64_t unit);

/* acc[i] = x[i] (op) acc[i] on the host, with MPI's own op (so float16 / bfloat16 and every
 * reduce op work as in the collectives), chunked above the per-call limit. */
int tc_reduce_local(const void *x, void *acc, int64_t n, tcoll_dtype_t d, MPI_Op op);

/* Packs x (viewed as outer x size x block elements) into y as size x outer x block: the
 * rank-major order reduce_scatter needs along a dim other than 0. scale != 1 multiplies. */
void tc_pack_rank_major(void *y, const void *x, int64_t outer, int size, int64_t block, tcoll_dtype_t d,
                        double scale);

/* Checks an MPI return code. */
static inline int tc_mpi_ok(int rc, const char *call) { return rc == MPI_SUCCESS ? TCOLL_SUCCESS : tc_mpi_error(rc, call); }

#endif
