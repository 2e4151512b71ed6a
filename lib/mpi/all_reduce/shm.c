/* The small shared-memory all_reduce (TCOLL_ALGO all_reduce:shm): every rank publishes its input
 * in its node-shared area and reduces all p inputs in rank order (../shm_small.h): the same bits
 * on every rank, no message. */
#include "../shm_small.h"

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  return tc_shm_small_build(w, c, TC_SHM_ALL_REDUCE);
}

const tc_algo_t tc_all_reduce_shm = {.name = "shm",
                                     .layouts = TC_LAYOUT_CONTIG,
                                     .supported = tc_shm_small_supported,
                                     .build = build};
