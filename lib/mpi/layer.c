/* The drop-in layer's verdict: the choice the collectives make (their queries, host buffers),
 * asked before the call, and routed only where the layer measured that choice beat the MPI call
 * the program made.
 *
 * tcoll's own tables compare its algorithms with MPI's nonblocking calls, the calls tcoll itself
 * would post. A program that calls MPI_Allreduce has Open MPI's blocking algorithms instead, which
 * are much faster for small messages than its nonblocking ones (libnbc): an 8-byte MPI_Allreduce
 * takes 0.50 us at 2 ranks on the 2-core CI machine, MPI_Iallreduce + MPI_Wait 1.09 us, the routed
 * call 0.67 us. So the layer keeps its own rows: where a routed call of that kind (blocking, or
 * nonblocking and persistent) beat the same call passed to MPI, by scripts/layer-bench (the
 * program's call with and without the layer, interleaved). Where no row says so, the call passes.
 * TCOLL_ALGO forcing an algorithm on the op routes every call it serves (the tests do). */
#include "layer.h"

#include "algo.h"

#include "../base/base.h"
#include "../base/dtype.h"

#include <pthread.h>

static const tc_algo_op_t table_of[TCOLL_LAYER_NUM_OPS] = {
    [TCOLL_LAYER_ALL_REDUCE] = TC_OP_ALL_REDUCE,
    [TCOLL_LAYER_REDUCE_SCATTER] = TC_OP_REDUCE_SCATTER,
    [TCOLL_LAYER_ALL_GATHER] = TC_OP_ALL_GATHER,
    [TCOLL_LAYER_BROADCAST] = TC_OP_BROADCAST,
    [TCOLL_LAYER_ALL_TO_ALL] = TC_OP_ALL_TO_ALL,
    [TCOLL_LAYER_REDUCE] = TC_OP_REDUCE};

typedef struct layer_row {
  tc_mpi_impl_t impl;
  int min_ranks, max_ranks;
  tcoll_layer_op_t op;
  bool blocking;
  size_t min_bytes, max_bytes; /* [min, max): the verdict's bytes (below) */
  const char *source;
} layer_row_t;

#define AR TCOLL_LAYER_ALL_REDUCE
#define RS TCOLL_LAYER_REDUCE_SCATTER
#define BC TCOLL_LAYER_BROADCAST
#define RD TCOLL_LAYER_REDUCE
#define AG TCOLL_LAYER_ALL_GATHER
#define AA TCOLL_LAYER_ALL_TO_ALL
#define ANY TC_ANY_SIZE
#define LB_OMPI_2 "scripts/layer-bench, 2-core CI machine, Open MPI 4.1, 2 ranks (issue 28)"
#define LB_MPICH_2 "scripts/layer-bench, 2-core CI machine, MPICH 4.0, 2 ranks (issue 28)"
/* Beyond 2 ranks nothing is measured through the layer yet: nonblocking calls follow tcoll's
 * table, which compares with the same (nonblocking) MPI call; blocking calls pass. */
#define TCOLL_TABLE "tcoll's table: measured against the nonblocking MPI call (lib/mpi/<op>/)"

static const layer_row_t rows[] = {
    /* Open MPI, 2 ranks: small blocking calls are Open MPI's best (8 B: allreduce 0.50 us,
     * reduce and broadcast 0.12-0.13 us); the routed ones win from 512 B. Two runs of 5 rounds
     * each; where they disagreed (nonblocking reduce_scatter, broadcast and reduce below 8 KiB:
     * 0.6-0.97x in one, 1.0-1.6x in the other) the call passes. */
    {TC_MPI_OPEN_MPI, 2, 2, AR, true, 512, ANY, LB_OMPI_2},
    {TC_MPI_OPEN_MPI, 2, 2, AR, false, 0, ANY, LB_OMPI_2},
    {TC_MPI_OPEN_MPI, 2, 2, RS, true, 8 * TC_KiB, ANY, LB_OMPI_2},
    {TC_MPI_OPEN_MPI, 2, 2, RS, false, 8 * TC_KiB, ANY, LB_OMPI_2},
    {TC_MPI_OPEN_MPI, 2, 2, BC, true, 512, ANY, LB_OMPI_2},
    {TC_MPI_OPEN_MPI, 2, 2, BC, false, 8 * TC_KiB, ANY, LB_OMPI_2},
    {TC_MPI_OPEN_MPI, 2, 2, RD, true, 512, 32 * TC_KiB, LB_OMPI_2},
    {TC_MPI_OPEN_MPI, 2, 2, RD, false, 8 * TC_KiB, ANY, LB_OMPI_2},
    /* MPICH, 2 ranks: blocking calls win where tcoll's table picks an algorithm (all_reduce
     * 0.53-0.91x, reduce 0.69x from 8 KiB, reduce_scatter from 32 KiB); nonblocking ones, which
     * the layer completes through a generalized request and its progress thread there, lose
     * (1.1-1.8x) but at 2 MiB (all_reduce 0.86x; reduce 0.03x: MPICH's own takes 15 ms) */
    {TC_MPI_MPICH, 2, 2, AR, true, 0, ANY, LB_MPICH_2},
    {TC_MPI_MPICH, 2, 2, AR, false, 2 * TC_MiB, ANY, LB_MPICH_2},
    {TC_MPI_MPICH, 2, 2, RS, true, 32 * TC_KiB, ANY, LB_MPICH_2},
    {TC_MPI_MPICH, 2, 2, RD, true, 8 * TC_KiB, ANY, LB_MPICH_2},
    {TC_MPI_MPICH, 2, 2, RD, false, 2 * TC_MiB, ANY, LB_MPICH_2},
    /* more ranks: nonblocking calls as tcoll's table says */
    {TC_MPI_OTHER, 3, INT_MAX, AR, false, 0, ANY, TCOLL_TABLE},
    {TC_MPI_OTHER, 3, INT_MAX, RS, false, 0, ANY, TCOLL_TABLE},
    {TC_MPI_OTHER, 3, INT_MAX, BC, false, 0, ANY, TCOLL_TABLE},
    {TC_MPI_OTHER, 3, INT_MAX, RD, false, 0, ANY, TCOLL_TABLE},
    {TC_MPI_OTHER, 3, INT_MAX, AG, false, 0, ANY, TCOLL_TABLE},
    {TC_MPI_OTHER, 3, INT_MAX, AA, false, 0, ANY, TCOLL_TABLE},
};

#define NROWS (sizeof rows / sizeof rows[0])

/* The rows of the MPI in use by op and kind (blocking or not), in the table's order: filled once,
 * after tcoll_init learnt the MPI, so that a call that passes scans only its own few rows. */
static struct {
  int n;
  const layer_row_t *row[NROWS];
} kind_rows[TCOLL_LAYER_NUM_OPS][2];
static pthread_once_t kinds_once = PTHREAD_ONCE_INIT;

static void fill_kinds(void) {
  tc_mpi_impl_t impl = tc_mpi_impl();
  for (size_t i = 0; i < NROWS; i++) {
    const layer_row_t *r = &rows[i];
    if (r->impl != impl && r->impl != TC_MPI_OTHER) continue;
    __typeof__(kind_rows[0][0]) *k = &kind_rows[r->op][r->blocking];
    k->row[k->n++] = r;
  }
}

/* Whether a row says a routed call of this kind beats MPI's (TC_MPI_OTHER: any MPI). */
static bool measured_faster(tcoll_layer_op_t op, bool blocking, int ranks, size_t bytes) {
  pthread_once(&kinds_once, fill_kinds);
  const __typeof__(kind_rows[0][0]) *k = &kind_rows[op][blocking];
  for (int i = 0; i < k->n; i++) {
    const layer_row_t *r = k->row[i];
    if (ranks >= r->min_ranks && ranks <= r->max_ranks && bytes >= r->min_bytes &&
        bytes < r->max_bytes)
      return true;
  }
  return false;
}

const char *tcoll_layer_verdict(tcoll_layer_op_t op, bool blocking, tcoll_comm_t *comm,
                                int64_t count, tcoll_dtype_t dtype, int redop) {
  if ((unsigned)op >= TCOLL_LAYER_NUM_OPS || !comm || count < 0) return NULL;
  size_t bytes = (size_t)count * tc_dtype_size(dtype);
  if (op == TCOLL_LAYER_ALL_GATHER) bytes *= (size_t)comm->size; /* the output, as all_gather's */
  if (!tc_algo_forced(table_of[op]) && !measured_faster(op, blocking, comm->size, bytes))
    return NULL;
  if (op == TCOLL_LAYER_ALL_TO_ALL) bytes = 0; /* chosen without bytes */
  tc_algo_query_t q = {.comm = comm,
                       .bytes = bytes,
                       .count = count,
                       .dtype = dtype,
                       .redop = redop,
                       .device = false,
                       .layout = TC_LAYOUT_CONTIG};
  const tc_algo_t *a = tc_algo_choose(table_of[op], &q);
  return tc_algo_is_literal(a) ? NULL : a->name;
}

bool tcoll_layer_internal_thread(void) { return tc_is_internal_thread(); }

void tcoll_layer_expect_mpi_finalize(void) { tc_g.mpi_finalize_expected = true; }
