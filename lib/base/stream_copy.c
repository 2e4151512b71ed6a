/* Streaming copies (see stream_copy.h). */
#include "stream_copy.h"

#include <stdint.h>
#include <string.h>

#if TC_CAN_STREAM

/* dst[0, 32) = v[0, 32) with non-temporal stores; dst 16-byte aligned. */
static inline void stream_store32(void *dst, const void *v) {
  __m128i lo, hi;
  memcpy(&lo, v, 16);
  memcpy(&hi, (const char *)v + 16, 16);
  _mm_stream_si128((__m128i *)dst, lo);
  _mm_stream_si128((__m128i *)dst + 1, hi);
}

void tc_stream_copy(void *dst, const void *src, size_t n) {
  char *d = dst;
  const char *s = src;
  size_t head = (16 - ((uintptr_t)d & 15)) & 15; /* the stores take aligned addresses */
  if (n < head + 64) {
    memcpy(d, s, n);
    return;
  }
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    stream_store32(d, s);
    stream_store32(d + 32, s + 32);
  }
  memcpy(d, s, n);
}

void tc_stream_fence(void) { _mm_sfence(); }

#else

void tc_stream_copy(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
void tc_stream_fence(void) {}

#endif
