/* The small shared-memory broadcast (TCOLL_ALGO broadcast:shm): the root publishes its input in
 * its node-shared area, every other rank copies it out (../shm_small.h). */
#include "../shm_small.h"

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  return tc_shm_small_build(w, c, TC_SHM_BROADCAST);
}

const tc_algo_t tc_broadcast_shm = {.name = "shm",
                                    .layouts = TC_LAYOUT_CONTIG,
                                    .supported = tc_shm_small_supported,
                                    .build = build};
