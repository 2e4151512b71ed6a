/* The small shared-memory reduce (TCOLL_ALGO reduce:shm): every rank publishes its input in its
 * node-shared area, the root reduces all p inputs in rank order (../shm_small.h). */
#include "../shm_small.h"

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  return tc_shm_small_build(w, c, TC_SHM_REDUCE);
}

const tc_algo_t tc_reduce_shm = {.name = "shm",
                                 .layouts = TC_LAYOUT_CONTIG,
                                 .supported = tc_shm_small_supported,
                                 .build = build};
