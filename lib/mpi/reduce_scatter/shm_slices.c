/* The large shared-memory reduce_scatter (TCOLL_ALGO reduce_scatter:shm_slices), along any dim:
 * each rank copies its blocks for the others into its slot, a chunk at a time, and reduces its
 * own block from its input and the peers' slots (../shm_slices.h). */
#include "../shm_slices.h"

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  return tc_shm_slices_build(w, c, TC_SLICES_REDUCE_SCATTER);
}

const tc_algo_t tc_reduce_scatter_shm_slices = {.name = "shm_slices",
                                                .layouts = TC_LAYOUT_ANY,
                                                .supported = tc_shm_slices_supported,
                                                .build = build,
                                                .fallback = "ring"};
