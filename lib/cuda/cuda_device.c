/* The CUDA runtime backend. Every call makes its device current on this thread for its
 * duration and restores the caller's current device afterwards (a device guard). */
#include "../device/device.h"

#include "kernels.h"

#include <cuda_runtime.h>

static int ndev;

static int cuda_fail(cudaError_t e, const char *what) {
  return tc_error(TCOLL_ERR_CUDA, "%s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CUDA_TRY(call, what)                                                                     \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) return cuda_fail(e_, what);                                           \
  } while (0)

/* Makes dev current until the end of the enclosing block, then restores the caller's device. */
typedef struct dev_guard {
  int prev;
  bool changed;
} dev_guard_t;

static void guard_restore(dev_guard_t *g) {
  if (g->changed) cudaSetDevice(g->prev);
}

static int guard_enter(int dev, dev_guard_t *g) {
  g->changed = false;
  if (cudaGetDevice(&g->prev) != cudaSuccess) {
    cudaGetLastError();
    g->prev = -1;
  }
  if (g->prev == dev) return TCOLL_SUCCESS;
  CUDA_TRY(cudaSetDevice(dev), "cudaSetDevice");
  g->changed = g->prev >= 0;
  return TCOLL_SUCCESS;
}

#define USE(dev)                                                                                 \
  dev_guard_t guard_ __attribute__((cleanup(guard_restore))) = {-1, false};                      \
  do {                                                                                           \
    int rc_ = guard_enter((dev), &guard_);                                                       \
    if (rc_) return rc_;                                                                         \
  } while (0)
#define USE_VOID(dev)                                                                            \
  dev_guard_t guard_ __attribute__((cleanup(guard_restore))) = {-1, false};                      \
  if (guard_enter((dev), &guard_)) return

static int cu_init(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* no driver or no device: not an error, just no CUDA */
    n = 0;
  }
  ndev = n;
  return TCOLL_SUCCESS;
}

static void cu_fini(void) { ndev = 0; }
static int cu_count(void) { return ndev; }

static int cu_alloc(int dev, size_t n, void **p) {
  USE(dev);
  CUDA_TRY(cudaMalloc(p, n ? n : 1), "cudaMalloc");
  return TCOLL_SUCCESS;
}

static void cu_free(int dev, void *p) {
  if (!p) return;
  USE_VOID(dev);
  cudaFree(p);
}

static int cu_host_alloc(size_t n, void **p) {
  CUDA_TRY(cudaMallocHost(p, n ? n : 1), "cudaMallocHost");
  return TCOLL_SUCCESS;
}

static void cu_host_free(void *p) { cudaFreeHost(p); }

static int cu_copy_async(void *dst, const void *src, size_t n, int dev, void *stream) {
  USE(dev);
  CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)stream), "cudaMemcpyAsync");
  return TCOLL_SUCCESS;
}

static int cu_memset_async(void *p, int byte, size_t n, int dev, void *stream) {
  USE(dev);
  CUDA_TRY(cudaMemsetAsync(p, byte, n, (cudaStream_t)stream), "cudaMemsetAsync");
  return TCOLL_SUCCESS;
}

static int cu_stream_create(int dev, void **stream) {
  USE(dev);
  cudaStream_t s;
  CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  *stream = s;
  return TCOLL_SUCCESS;
}

static void cu_stream_destroy(int dev, void *stream) {
  if (!stream) return;
  USE_VOID(dev);
  cudaStreamDestroy((cudaStream_t)stream);
}

static int cu_stream_sync(int dev, void *stream) {
  USE(dev);
  CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
  return TCOLL_SUCCESS;
}

static int cu_event_create(int dev, void **event) {
  USE(dev);
  cudaEvent_t e;
  CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  *event = e;
  return TCOLL_SUCCESS;
}

static void cu_event_destroy(int dev, void *event) {
  if (!event) return;
  USE_VOID(dev);
  cudaEventDestroy((cudaEvent_t)event);
}

static int cu_event_record(int dev, void *event, void *stream) {
  USE(dev);
  CUDA_TRY(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream), "cudaEventRecord");
  return TCOLL_SUCCESS;
}

static int cu_event_sync(int dev, void *event) {
  USE(dev);
  CUDA_TRY(cudaEventSynchronize((cudaEvent_t)event), "cudaEventSynchronize");
  return TCOLL_SUCCESS;
}

static int cu_event_query(int dev, void *event) {
  USE(dev);
  cudaError_t e = cudaEventQuery((cudaEvent_t)event);
  if (e == cudaSuccess) return TCOLL_SUCCESS;
  if (e == cudaErrorNotReady) return TCOLL_IN_PROGRESS;
  return cuda_fail(e, "cudaEventQuery");
}

static int cu_stream_wait_event(int dev, void *stream, void *event) {
  USE(dev);
  CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0), "cudaStreamWaitEvent");
  return TCOLL_SUCCESS;
}

static int cu_pointer_device(const void *p, int *dev) {
  struct cudaPointerAttributes a;
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *dev = TCOLL_HOST;
    return TCOLL_SUCCESS;
  }
  *dev = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : TCOLL_HOST;
  return TCOLL_SUCCESS;
}

static int cu_scale(int dev, void *stream, void *dst, const void *src, tcoll_dtype_t dt, int64_t n, double mul,
                    double div) {
  USE(dev);
  if (tc_cuda_scale(stream, dst, src, (int)dt, n, mul, div))
    return tc_error(TCOLL_ERR_CUDA, "scale kernel launch failed (%s)", cudaGetErrorString(cudaGetLastError()));
  return TCOLL_SUCCESS;
}

static int cu_add(int dev, void *stream, void *dst, const void *src, tcoll_dtype_t dt, int64_t n) {
  USE(dev);
  if (tc_cuda_add(stream, dst, src, (int)dt, n))
    return tc_error(TCOLL_ERR_CUDA, "add kernel launch failed (%s)", cudaGetErrorString(cudaGetLastError()));
  return TCOLL_SUCCESS;
}

static int cu_device_sync(int dev) {
  USE(dev);
  CUDA_TRY(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return TCOLL_SUCCESS;
}

const tc_device_ops_t tc_cuda_device_ops = {
    .name = "cuda",
    .init = cu_init,
    .fini = cu_fini,
    .count = cu_count,
    .alloc = cu_alloc,
    .free = cu_free,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .copy_async = cu_copy_async,
    .memset_async = cu_memset_async,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_sync = cu_stream_sync,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_sync = cu_event_sync,
    .event_query = cu_event_query,
    .stream_wait_event = cu_stream_wait_event,
    .pointer_device = cu_pointer_device,
    .scale = cu_scale,
    .add = cu_add,
    .device_sync = cu_device_sync,
};
