/* Blocks of an all_gather into place (see place.h). */
#include "place.h"

#include <string.h>

void tc_gather_place(const tc_gather_out_t *o, int p, const char *src, size_t f0, size_t f1) {
  size_t stride = o->run * (size_t)o->size;
  for (size_t f = f0; f < f1;) {
    size_t col = f % o->run, len = o->run - col < f1 - f ? o->run - col : f1 - f;
    char *dst = o->out + f / o->run * stride + (size_t)p * o->run + col;
    if (o->stream)
      tc_stream_copy(dst, src + (f - f0), len);
    else if (dst != src + (f - f0)) /* in place: the rank's own block is there already */
      memcpy(dst, src + (f - f0), len);
    f += len;
  }
}
