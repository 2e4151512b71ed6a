/* Streaming copies (see stream_copy.h). */
#include "stream_copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>

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
    __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)),
            e = _mm_loadu_si128((const __m128i *)(s + 48));
    _mm_stream_si128((__m128i *)d, a);
    _mm_stream_si128((__m128i *)(d + 16), b);
    _mm_stream_si128((__m128i *)(d + 32), c);
    _mm_stream_si128((__m128i *)(d + 48), e);
  }
  memcpy(d, s, n);
}

void tc_stream_fence(void) { _mm_sfence(); }

#else

void tc_stream_copy(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
void tc_stream_fence(void) {}

#endif
