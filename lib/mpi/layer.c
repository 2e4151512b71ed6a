/* The drop-in layer's verdict: the same choice the collectives make (their queries, host
 * buffers), asked before the call. */
#include "layer.h"

#include "algo.h"

#include "../base/dtype.h"

static const tc_algo_op_t table_of[TCOLL_LAYER_NUM_OPS] = {
    [TCOLL_LAYER_ALL_REDUCE] = TC_OP_ALL_REDUCE,
    [TCOLL_LAYER_REDUCE_SCATTER] = TC_OP_REDUCE_SCATTER,
    [TCOLL_LAYER_ALL_GATHER] = TC_OP_ALL_GATHER,
    [TCOLL_LAYER_BROADCAST] = TC_OP_BROADCAST,
    [TCOLL_LAYER_ALL_TO_ALL] = TC_OP_ALL_TO_ALL,
    [TCOLL_LAYER_REDUCE] = TC_OP_REDUCE};

const char *tcoll_layer_verdict(tcoll_layer_op_t op, tcoll_comm_t *comm, int64_t count,
                                tcoll_dtype_t dtype, int redop) {
  if ((unsigned)op >= TCOLL_LAYER_NUM_OPS || !comm || count < 0) return NULL;
  size_t bytes = (size_t)count * tc_dtype_size(dtype);
  if (op == TCOLL_LAYER_ALL_GATHER) bytes *= (size_t)comm->size; /* the output, as all_gather's */
  if (op == TCOLL_LAYER_ALL_TO_ALL) bytes = 0;                   /* chosen without bytes */
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
