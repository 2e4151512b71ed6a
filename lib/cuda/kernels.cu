// Element-wise kernels for the CUDA backend: AVG / PREMUL_SUM scaling and local reduce-add.
// float16 and bfloat16 compute in float, as the host path does.
#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

// Values of tcoll_dtype_t (kept in step with tcoll.h, which is C only).
enum { BOOL_, INT8_, UINT8_, INT16_, INT32_, INT64_, F16_, BF16_, F32_, F64_ };

template <typename T> struct acc { typedef T type; };
template <> struct acc<__half> { typedef float type; };
template <> struct acc<__nv_bfloat16> { typedef float type; };

template <typename T> __device__ typename acc<T>::type up(T x) { return x; }
template <> __device__ float up<__half>(__half x) { return __half2float(x); }
template <> __device__ float up<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ T down(typename acc<T>::type x) { return (T)x; }
template <> __device__ __half down<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __nv_bfloat16 down<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T>
__global__ void scale_kernel(T *dst, const T *src, int64_t n, double mul, double div) {
  typedef typename acc<T>::type A;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    A v = up(src[i]);
    dst[i] = down<T>(div != 1.0 ? (A)(v / (A)div) : (A)(v * (A)mul));
  }
}

template <typename T> __global__ void add_kernel(T *dst, const T *src, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = down<T>(up(dst[i]) + up(src[i]));
}

__global__ void add_bool_kernel(unsigned char *dst, const unsigned char *src, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = dst[i] || src[i];
}

unsigned grid_for(int64_t n) {
  int64_t blocks = (n + 255) / 256;
  return (unsigned)(blocks > 4096 ? 4096 : (blocks < 1 ? 1 : blocks));
}

template <typename T> int launch_scale(cudaStream_t s, void *d, const void *x, int64_t n, double mul, double div) {
  scale_kernel<T><<<grid_for(n), 256, 0, s>>>((T *)d, (const T *)x, n, mul, div);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

template <typename T> int launch_add(cudaStream_t s, void *d, const void *x, int64_t n) {
  add_kernel<T><<<grid_for(n), 256, 0, s>>>((T *)d, (const T *)x, n);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

}  // namespace

extern "C" int tc_cuda_scale(void *stream, void *dst, const void *src, int dtype, int64_t n, double mul, double div) {
  if (n == 0) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  switch (dtype) {
  case F16_: return launch_scale<__half>(s, dst, src, n, mul, div);
  case BF16_: return launch_scale<__nv_bfloat16>(s, dst, src, n, mul, div);
  case F32_: return launch_scale<float>(s, dst, src, n, mul, div);
  case F64_: return launch_scale<double>(s, dst, src, n, mul, div);
  default: return -1;
  }
}

extern "C" int tc_cuda_add(void *stream, void *dst, const void *src, int dtype, int64_t n) {
  if (n == 0) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  switch (dtype) {
  case BOOL_:
    add_bool_kernel<<<grid_for(n), 256, 0, s>>>((unsigned char *)dst, (const unsigned char *)src, n);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
  case INT8_: return launch_add<signed char>(s, dst, src, n);
  case UINT8_: return launch_add<unsigned char>(s, dst, src, n);
  case INT16_: return launch_add<short>(s, dst, src, n);
  case INT32_: return launch_add<int>(s, dst, src, n);
  case INT64_: return launch_add<long long>(s, dst, src, n);
  case F16_: return launch_add<__half>(s, dst, src, n);
  case BF16_: return launch_add<__nv_bfloat16>(s, dst, src, n);
  case F32_: return launch_add<float>(s, dst, src, n);
  case F64_: return launch_add<double>(s, dst, src, n);
  default: return -1;
  }
}
