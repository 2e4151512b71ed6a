// Kernels for the GPU suite (cuda_kernels.h): a spin that keeps the caller's stream busy, then a
// fill of the collective's input, so that an input read before the stream reached the call sees
// zeros instead of the values.
#include "cuda_kernels.h"

#include <cuda_runtime.h>

namespace {

__global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void fill(float *x, int64_t n, float scale) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = scale * (float)(i % 7 + 1);
}

} // namespace

extern "C" int t_cuda_usable(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n > 0;
}

extern "C" int t_cuda_spin_then_fill(void *stream, float *x, int64_t n, float scale, int ms) {
  int khz = 0, dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
  if (e != cudaSuccess) return (int)e;
  cudaStream_t s = (cudaStream_t)stream;
  spin<<<1, 1, 0, s>>>((long long)khz * ms);
  if ((e = cudaGetLastError()) != cudaSuccess) return (int)e;
  int64_t blocks = (n + 255) / 256;
  fill<<<(unsigned)(blocks > 1024 ? 1024 : blocks < 1 ? 1 : blocks), 256, 0, s>>>(x, n, scale);
  return (int)cudaGetLastError();
}
