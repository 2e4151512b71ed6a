/* The large shared-memory reduce (TCOLL_ALGO reduce:shm_slices): each rank reduces its own slice
 * of every chunk, the root copies the others' slices out (../shm_slices.h). */
#include "../shm_slices.h"

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  return tc_shm_slices_build(w, c, TC_SLICES_REDUCE);
}

const tc_algo_t tc_reduce_shm_slices = {.name = "shm_slices",
                                        .layouts = TC_LAYOUT_CONTIG,
                                        .supported = tc_shm_slices_supported,
                                        .build = build,
                                        .fallback = "ring"};
