/* The large shared-memory all_reduce (TCOLL_ALGO all_reduce:shm_slices): each rank reduces its
 * own slice of every chunk, then copies the others' slices out (../shm_slices.h). */
#include "../shm_slices.h"

static int build(tc_work_t *w, const tc_algo_call_t *c) {
  return tc_shm_slices_build(w, c, TC_SLICES_ALL_REDUCE);
}

const tc_algo_t tc_all_reduce_shm_slices = {.name = "shm_slices",
                                            .layouts = TC_LAYOUT_CONTIG,
                                            .supported = tc_shm_slices_supported,
                                            .build = build,
                                            .fallback = "ring"};
