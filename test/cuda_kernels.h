/* Kernels the GPU suite launches itself (cuda_kernels.cu): work on the caller's stream that tcoll
 * must order its reads after. The test's own CUDA runtime launches them; streams come from
 * tcoll_stream_create (one driver context per device, shared by both runtimes). */
#ifndef T_CUDA_KERNELS_H
#define T_CUDA_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether this process's own runtime sees a GPU (not on the mock runtime's CI runs). */
int t_cuda_usable(void);
/* On stream: a single thread spins for about `ms` milliseconds, then x[i] = scale * (i % 7 + 1)
 * for i < n (float32). Returns 0 or the launch's cudaError_t. */
int t_cuda_spin_then_fill(void *stream, float *x, int64_t n, float scale, int ms);

#ifdef __cplusplus
}
#endif

#endif
