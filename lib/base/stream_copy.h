/* Copies whose destination bypasses the cache (non-temporal stores), for scattering runs into an
 * output larger than the cache: a run of a few KiB written with ordinary stores first reads
 * every destination line into the cache (read for ownership). On the CI machine 1 KiB runs
 * copied from a 256 KiB chunk in cache to every other KiB of an 8-32 MiB output took 1.4-2.4x a
 * contiguous memcpy of the same bytes with memcpy, 0.46-1.04x it streamed. Into an output that
 * fits in the cache, streaming is slower: it is for large outputs only. */
#ifndef TC_STREAM_COPY_H
#define TC_STREAM_COPY_H

#include <stddef.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h> /* _mm_stream_si128: also the reduction loops' (host_loops.c) */
#define TC_CAN_STREAM 1
#else
#define TC_CAN_STREAM 0
#endif

/* The output size from which scattering runs into it pays to stream (see mpi/all_gather/cma.c for
 * the measurements). */
#define TC_STREAM_OUT_MIN_BYTES ((size_t)8 << 20)

/* dst[0, n) = src[0, n), the destination streamed where the CPU offers it (x86-64: SSE2), else
 * memcpy. Any alignment. Call tc_stream_fence() before another thread or process may read dst. */
void tc_stream_copy(void *dst, const void *src, size_t n);
void tc_stream_fence(void);

#endif
