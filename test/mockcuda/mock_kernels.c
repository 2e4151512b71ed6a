/* The CUDA backend's kernels (lib/cuda/kernels.h) for the mock runtime: launched with the checks
 * of a real launch (a failure on demand as "cudaLaunchKernel", the stream's device current),
 * computed on the host through the mock's view of device memory with the library's own host
 * math (the real kernels run in the GPU suites). */
#include "../../lib/base/dtype.h"
#include "../../lib/base/host_loops.h"
#include "../../lib/cuda/kernels.h"

#include <cuda_runtime_api.h>

cudaError_t mock_cuda_launch(cudaStream_t s);
void *mock_cuda_device_view(const void *p, size_t n);

int tc_cuda_add(void *stream, void *dst, const void *src, int dtype, int64_t n) {
  if (n == 0) return cudaSuccess;
  cudaError_t e = mock_cuda_launch((cudaStream_t)stream);
  if (e != cudaSuccess) {
    /* as kernels.cu does: a launch's error is read (and cleared) right after it */
    cudaGetLastError();
    return e;
  }
  if (dtype < 0 || dtype >= TCOLL_NUM_DTYPES) return cudaErrorInvalidValue;
  size_t nb = (size_t)n * tc_dtype_size((tcoll_dtype_t)dtype);
  void *d = mock_cuda_device_view(dst, nb);
  const void *x = mock_cuda_device_view(src, nb);
  if (!d || !x) return cudaErrorIllegalAddress; /* a kernel reading host memory faults */
  tc_host_add(d, x, (tcoll_dtype_t)dtype, n);
  return cudaSuccess;
}
