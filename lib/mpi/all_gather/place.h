/* Where an all_gather's blocks land: rank p's block is `outer` rows of `run` bytes (dim 0: one
 * row), row r at r * run * size + p * run in the output. Shared by the algorithms that copy
 * blocks into place themselves (cma.c, shm.c). */
#ifndef TC_MPI_ALL_GATHER_PLACE_H
#define TC_MPI_ALL_GATHER_PLACE_H

#include "../../base/stream_copy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tc_gather_out {
  char *out;
  size_t run;
  int size;
  bool stream; /* written with streaming stores (base/stream_copy.h: the caller fences) */
} tc_gather_out_t;

/* Whether the output is written with streaming stores: along a dim other than 0 from
 * TC_STREAM_OUT_MIN_BYTES (ordinary stores of short runs into an output larger than the cache read
 * every line first). */
static inline bool tc_gather_streamed(size_t run, int64_t outer, int size) {
  return outer > 1 && run * (size_t)outer * (size_t)size >= TC_STREAM_OUT_MIN_BYTES;
}

/* Bytes [f0, f1) of rank p's block, at src, into their places. */
void tc_gather_place(const tc_gather_out_t *o, int p, const char *src, size_t f0, size_t f1);

#endif
