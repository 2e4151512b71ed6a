/* Device kernels of the CUDA backend (kernels.cu), callable from C. Asynchronous on stream. */
#ifndef TC_KERNELS_H
#define TC_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = src[i] * mul, or src[i] / div when div != 1. dtype: a tcoll_dtype_t value. */
int tc_cuda_scale(void *stream, void *dst, const void *src, int dtype, int64_t n, double mul, double div);
/* dst[i] += src[i]. */
int tc_cuda_add(void *stream, void *dst, const void *src, int dtype, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
