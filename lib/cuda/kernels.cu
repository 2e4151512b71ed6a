// Element-wise kernels of the CUDA backend: the local reduce-add of the single-process ops.
// float16 and bfloat16 compute in float and round to nearest even, as the host path does; a
// NaN stays a NaN (the conversion intrinsics give the canonical quiet NaN). Indices are 64-bit:
// a grid-stride loop covers any count with a grid of at most 4096 blocks.
#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

// Values of tcoll_dtype_t (kept in step with tcoll.h, which is C only).
enum { BOOL_, INT8_, UINT8_, INT16_, INT32_, INT64_, F16_, BF16_, F32_, F64_ };

template <typename T>
struct acc {
  typedef T type;
};
template <>
struct acc<__half> {
  typedef float type;
};
template <>
struct acc<__nv_bfloat16> {
  typedef float type;
};

template <typename T>
__device__ typename acc<T>::type up(T x) {
  return x;
}
template <>
__device__ float up<__half>(__half x) {
  return __half2float(x);
}
template <>
__device__ float up<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <typename T>
__device__ T down(typename acc<T>::type x) {
  return (T)x;
}
template <>
__device__ __half down<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __nv_bfloat16 down<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ int64_t first_index() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return (int64_t)gridDim.x * blockDim.x; }

template <typename T>
__global__ void add_kernel(T *dst, const T *src, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    dst[i] = down<T>(up(dst[i]) + up(src[i]));
}

__global__ void add_bool_kernel(unsigned char *dst, const unsigned char *src, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dst[i] = dst[i] || src[i];
}

unsigned grid_for(int64_t n) {
  int64_t blocks = (n + 255) / 256;
  return (unsigned)(blocks > 4096 ? 4096 : (blocks < 1 ? 1 : blocks));
}

// A launch reports its configuration errors through cudaGetLastError only: read it right
// after every launch, before any other runtime call can replace it.
template <typename T>
int launch_add(cudaStream_t s, void *d, const void *x, int64_t n) {
  add_kernel<T><<<grid_for(n), 256, 0, s>>>((T *)d, (const T *)x, n);
  return (int)cudaGetLastError();
}

int launch_add_bool(cudaStream_t s, void *d, const void *x, int64_t n) {
  add_bool_kernel<<<grid_for(n), 256, 0, s>>>((unsigned char *)d, (const unsigned char *)x, n);
  return (int)cudaGetLastError();
}

} // namespace

extern "C" int tc_cuda_add(void *stream, void *dst, const void *src, int dtype, int64_t n) {
  if (n == 0) return (int)cudaSuccess;
  cudaStream_t s = (cudaStream_t)stream;
  switch (dtype) {
  case BOOL_: return launch_add_bool(s, dst, src, n);
  case INT8_: return launch_add<signed char>(s, dst, src, n);
  case UINT8_: return launch_add<unsigned char>(s, dst, src, n);
  case INT16_: return launch_add<short>(s, dst, src, n);
  case INT32_: return launch_add<int>(s, dst, src, n);
  case INT64_: return launch_add<long long>(s, dst, src, n);
  case F16_: return launch_add<__half>(s, dst, src, n);
  case BF16_: return launch_add<__nv_bfloat16>(s, dst, src, n);
  case F32_: return launch_add<float>(s, dst, src, n);
  case F64_: return launch_add<double>(s, dst, src, n);
  default: return (int)cudaErrorInvalidValue;
  }
}
