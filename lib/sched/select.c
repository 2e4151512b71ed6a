/* The algorithm table (see select.h). */
#include "select.h"

#include "mpi_impl.h"

/* A row applies to an op on an MPI, a range of ranks and of bytes [min, max). The first row
 * that applies wins; none: the literal MPI call. */
typedef struct row {
  tc_mpi_impl_t impl;
  tc_algo_op_t op;
  int min_ranks, max_ranks;
  size_t min_bytes, max_bytes;
  tc_algo_t algo;
} row_t;

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define ANY_SIZE ((size_t)-1)

static const row_t table[] = {
    /* Open MPI 4.1's MPI_Ireduce_scatter_block reduces everything onto rank 0 and scatters. */
    {TC_MPI_OPEN_MPI, TC_OP_REDUCE_SCATTER, 2, 2, 0, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_OPEN_MPI, TC_OP_REDUCE_SCATTER, 3, 4, 0, 4 * MiB, TC_ALGO_ALLTOALL},
    {TC_MPI_OPEN_MPI, TC_OP_REDUCE_SCATTER, 3, 4, 4 * MiB, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_OPEN_MPI, TC_OP_ALL_REDUCE, 2, 2, 0, ANY_SIZE, TC_ALGO_RING},
    {TC_MPI_OPEN_MPI, TC_OP_ALL_REDUCE, 3, 4, 16 * MiB, ANY_SIZE, TC_ALGO_RING_ALLGATHER},
};

static _Thread_local tc_algo_t last = TC_ALGO_MPI;

void tc_algo_note(tc_algo_t algo) { last = algo; }

const char *tcoll_last_algorithm(void) { return tc_algo_name(last); }

tc_algo_t tc_algo_choose(const tc_algo_query_t *q) {
  tc_algo_t forced = tc_algo_forced[q->op];
  if (forced != TC_ALGO_AUTO) return forced;
  if (q->ranks < 2) return TC_ALGO_MPI;
  tc_mpi_impl_t impl = tc_mpi_impl();
  for (size_t i = 0; i < TC_ARRAY_LEN(table); i++) {
    const row_t *r = &table[i];
    if (r->op == q->op && r->impl == impl && q->ranks >= r->min_ranks && q->ranks <= r->max_ranks &&
        q->bytes >= r->min_bytes && q->bytes < r->max_bytes)
      return r->algo;
  }
  return TC_ALGO_MPI;
}
