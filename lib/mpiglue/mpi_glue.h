/* MPI datatypes and ops for tcoll dtypes and reduce ops, and the derived datatypes used for
 * counts above the per-call limit and for layouts along dims other than 0. */
#ifndef TC_MPI_GLUE_H
#define TC_MPI_GLUE_H

#include "../base/base.h"
#include "../base/redop.h"

int tc_mpi_glue_init(void);
void tc_mpi_glue_fini(void);

/* The MPI datatype of one element. */
MPI_Datatype tc_mpi_dtype(tcoll_dtype_t d);
/* The MPI op that computes `op` on dtype d (AVG and PREMUL_SUM map to a sum; the scaling is
 * done by the caller). float16 / bfloat16 use tcoll's own ops, accumulating in float. */
MPI_Op tc_mpi_op(const tc_redop_t *op, tcoll_dtype_t d);

/* The per-call element limit (TCOLL_MAX_COUNT, at most INT_MAX): the largest int count tcoll
 * passes to one MPI call. */
static inline int64_t tc_mpi_limit(void) { return tc_cfg.max_count; }

/* ---- large counts: the one place that decides ----
 *
 * MPI-4 has large-count forms of the calls (MPI_Iallreduce_c, ...: MPI_Count counts, MPI_Aint
 * displacements). Where MPI has them (MPICH 4), a count above the limit goes in ONE call of the
 * _c form (mpi_calls.h); where it has not (Open MPI 4.1 and 5.0 are MPI 3.1), it is split into
 * several calls or described with derived datatypes. Counts within the limit always take the
 * int form, so that what reaches MPI is the same on both for them. */
#if MPI_VERSION >= 4
#define TC_MPI_LARGE_COUNT 1
#else
#define TC_MPI_LARGE_COUNT 0
#endif
/* Whether this MPI has the _c calls. */
static inline bool tc_mpi_large_count(void) { return TC_MPI_LARGE_COUNT; }
/* Whether n fits an int count of one call. */
static inline bool tc_mpi_fits(int64_t n) { return n <= tc_mpi_limit(); }
/* Whether n elements go in one call: an int count within the limit, or a _c call above it. */
static inline bool tc_mpi_one_call(int64_t n) { return tc_mpi_fits(n) || tc_mpi_large_count(); }
/* Whether a call with count n takes the _c form. */
static inline bool tc_mpi_use_c(int64_t n) { return tc_mpi_large_count() && !tc_mpi_fits(n); }
/* Elements per call when n elements are split into consecutive pieces (n itself, or the limit). */
static inline int64_t tc_mpi_per_call(int64_t n) {
  return tc_mpi_one_call(n) && n > 0 ? n : tc_mpi_limit();
}
/* The name of the call that count n takes, for error messages: the literal fn, or its _c form. */
#define TC_MPI_NAME(fn, n) (tc_mpi_use_c(n) ? fn "_c" : fn)

/* A datatype from the cache; return it with tc_mpi_type_put once the MPI call is posted. */
typedef struct tc_mpi_type {
  MPI_Datatype type;
  int slot; /* cache slot, or -1 for an uncached type freed at put */
} tc_mpi_type_t;

/* n elements as one datatype (any n >= 1, built so that no count exceeds the limit). */
int tc_mpi_contig(tcoll_dtype_t d, int64_t n, tc_mpi_type_t *t);
/* nblocks blocks of `block` elements, `stride` elements apart, with an extent of `extent`
 * elements: one rank's slab of a tensor along a dim other than 0. */
int tc_mpi_vector(tcoll_dtype_t d, int64_t nblocks, int64_t block, int64_t stride, int64_t extent,
                  tc_mpi_type_t *t);
void tc_mpi_type_put(tc_mpi_type_t *t);

/* n elements as (count, datatype) for one MPI call: the basic type when one call carries n
 * (tc_mpi_one_call: a count above the limit then takes the _c form), else one element of a
 * contiguous derived type (caller puts it after posting). */
typedef struct tc_mpi_span {
  int64_t count;
  tc_mpi_type_t dt;
} tc_mpi_span_t;
int tc_mpi_span(tcoll_dtype_t d, int64_t n, tc_mpi_span_t *s);
void tc_mpi_span_put(tc_mpi_span_t *s);

/* MPI_Waitall / MPI_Testall for tcoll's own requests: an error comes back as a return code even
 * where Open MPI would raise it on MPI_COMM_WORLD (see mpi_errors.c). */
int tc_mpi_waitall(int n, MPI_Request *reqs);
int tc_mpi_testall(int n, MPI_Request *reqs, int *flag);
void tc_mpi_errors_init(void);
void tc_mpi_errors_fini(void);

#endif
