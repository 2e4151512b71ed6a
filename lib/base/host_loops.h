/* Element-wise loops on host memory: sums and products of two buffers (the reductions' local
 * step), AVG's division, PREMUL_SUM's scaling, the host side of reduce_add. One loop shape for
 * all of them (host_loops.c): 16-byte vectors loaded and stored through registers, the operation
 * decided outside the loop. Each element gets the same single IEEE operation as the plain scalar
 * loop, so the bits never depend on the width. */
#ifndef TC_HOST_LOOPS_H
#define TC_HOST_LOOPS_H

#include "base.h"

/* z[i] = x[i] + y[i] (prod: x[i] * y[i]) for float32, float64, int32 and int64 (integers wrap, as
 * MPI's and CUDA's do); z may be x or y. False for other dtypes: nothing is written then.
 * stream: z is written with non-temporal stores where the machine has them (x86-64), for large
 * outputs this core does not read again soon; they are weakly ordered: tc_stream_fence()
 * (stream_copy.h) before another thread or process is told they are there. */
bool tc_host_combine(const void *x, const void *y, void *z, int64_t n, tcoll_dtype_t d, bool prod,
                     bool stream);
/* z[i] = (x[i] + y[i]) / divisor for float32 and float64 (AVG's last reduction in the same pass),
 * rounded as the sum and then tc_host_divide would round it: the same bits. Streamed as
 * tc_host_combine where stream. */
void tc_host_sum_divided(const void *x, const void *y, void *z, int64_t n, tcoll_dtype_t d,
                         double divisor, bool stream);
/* z[i] = ((x_0[i] op x_1[i]) op x_2[i]) ... op x_{m-1}[i], where x_q = bases[q] + off and op is +
 * (prod: *), then divided by divisor as tc_host_divide would (1: not; floats only), in one pass
 * over z: for float32, float64, int32 and int64; false for other dtypes (nothing written). The
 * small protocol's reduction of every rank's input in rank order (the same bits everywhere), as
 * x_q op z for q = 1, 2...: the order MPI_Reduce_local's (in, inout) gives. z apart from every
 * input, or x_0 itself (each vector is read before it is written); m >= 1. */
bool tc_host_combine_all(char *const *bases, size_t off, int m, void *z, int64_t n, tcoll_dtype_t d,
                         bool prod, double divisor);
/* The same result stored into each of nz outputs zs[0..nz) in the one pass (all_reduce's reduced
 * slice into every rank's output in the symmetric heap), each apart from every input or one of
 * them itself (each vector is read from every input before any is stored); streamed as
 * tc_host_combine where stream and the outputs share their alignment. */
bool tc_host_combine_all_to(char *const *bases, size_t off, int m, void *const *zs, int nz,
                            int64_t n, tcoll_dtype_t d, bool prod, double divisor, bool stream);
/* buf[i] /= divisor for floating dtypes: AVG divides after the sum, as a division (by a power of
 * two as a product with the exact reciprocal: the same bits). */
void tc_host_divide(void *buf, tcoll_dtype_t d, int64_t n, double divisor);
/* dst[i] = src[i] * s for floating dtypes; dst may equal src (float16/bfloat16 in float). */
void tc_host_scale_copy(void *dst, const void *src, tcoll_dtype_t d, int64_t n, double s);
/* dst[i] += src[i], any dtype (bool: logical or; float16/bfloat16 in float). */
void tc_host_add(void *dst, const void *src, tcoll_dtype_t d, int64_t n);

#endif
