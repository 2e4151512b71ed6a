/* What the all-to-all family's files share: the choice of algorithm. */
#ifndef TC_MPI_ALL_TO_ALL_H
#define TC_MPI_ALL_TO_ALL_H

#include "../algo.h"

/* The algorithm of an all-to-all (op TC_OP_ALL_TO_ALL: all_to_all_single, permute,
 * shard_dim_all_to_all; TC_OP_ALL_TO_ALL_LIST: all_to_all, whose table rows differ because its
 * literal mapping packs the tensors), chosen without the bytes, which differ between ranks with
 * uneven blocks, so that every rank takes the same one. */
const tc_algo_t *tc_all_to_all_choose(tc_algo_op_t op, tcoll_comm_t *comm, tcoll_dtype_t d,
                                      bool device);

#endif
