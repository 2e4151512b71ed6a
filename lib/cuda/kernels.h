/* Device kernels of the CUDA backend (kernels.cu), callable from C. Asynchronous on stream. */
#ifndef TC_KERNELS_H
#define TC_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] += src[i] (bool: logical or; float16 / bfloat16 computed in float), on the current
 * device. dtype: a tcoll_dtype_t value. Returns the launch's cudaError_t (0: queued). */
int tc_cuda_add(void *stream, void *dst, const void *src, int dtype, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
