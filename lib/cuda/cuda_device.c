/* The CUDA runtime backend.
 *
 * Errors: every CUDA call that fails becomes TCOLL_ERR_CUDA with a message naming the call and
 * CUDA's own error string and name.
 *
 * Device guard: every call makes its device current on this thread for its duration and gives
 * the caller back its device afterwards, unless that device has no primary context: a thread
 * that never chose a device reports device 0, and making 0 current again would create a context
 * there (hundreds of MiB on a GPU that may belong to another rank). Such a thread keeps the
 * device tcoll used, as with PyTorch's device guards.
 *
 * Used devices: the backend remembers which devices it made current (each gets a context that
 * way) so that finalize synchronizes those only. Pinned host memory is allocated portable, with
 * one of them current (the first used), never with device 0 by default. */
#include "../device/device.h"

#include "../base/dtype.h"
#include "kernels.h"

#include <cuda_runtime.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Device nodes of NVIDIA GPUs: present when the kernel driver exposes a GPU to this process (in
 * a container too, when it was given one). The test build of the backend on a mock runtime
 * points this elsewhere. */
#ifndef TC_GPU_NODES
#define TC_GPU_NODES "/dev/nvidia[0-9]*"
#endif

static int ndev;
static uint64_t used; /* bit d: device d was made current (atomic) */
static int driver_version, runtime_version;
static char no_device_reason[200];

/* cuDevicePrimaryCtxGetState from the driver, through the runtime (libcuda is never linked:
 * the library must load on hosts without a driver). */
typedef int (*primary_ctx_state_fn)(int dev, unsigned *flags, int *active);
static primary_ctx_state_fn primary_ctx_state;

static int cuda_fail(cudaError_t e, const char *what) {
  cudaGetLastError(); /* not sticky: the next call must not report it again */
  return tc_error(TCOLL_ERR_CUDA, "%s failed: %s (%s)", what, cudaGetErrorString(e),
                  cudaGetErrorName(e));
}

#define CUDA_TRY(call, what)                           \
  do {                                                 \
    cudaError_t e_ = (call);                           \
    if (e_ != cudaSuccess) return cuda_fail(e_, what); \
  } while (0)

/* ------------------------------------------------------------------ the device guard */

static void mark_used(int dev) {
  if (dev >= 0 && dev < 64) __atomic_or_fetch(&used, (uint64_t)1 << dev, __ATOMIC_RELAXED);
}

static uint64_t cu_used_mask(void) { return __atomic_load_n(&used, __ATOMIC_RELAXED); }

/* The device pinned memory and pointer queries go through: the first one used, else 0. */
static int home_device(void) {
  uint64_t m = cu_used_mask();
  return m ? __builtin_ctzll(m) : 0;
}

/* Whether making dev current again costs nothing: its primary context exists. */
static bool has_context(int dev) {
  if (dev >= 0 && dev < 64 && (cu_used_mask() >> dev & 1u))
    return true; /* tcoll made it current, so it has one */
  unsigned flags = 0;
  int active = 0;
  return primary_ctx_state && primary_ctx_state(dev, &flags, &active) == 0 && active;
}

typedef struct dev_guard {
  int prev;
  bool restore;
} dev_guard_t;

static void guard_restore(dev_guard_t *g) {
  if (!g->restore) return;
  cudaError_t e = cudaSetDevice(g->prev);
  if (e != cudaSuccess) {
    cudaGetLastError();
    tc_warn("cudaSetDevice(%d) failed giving the caller back its device: %s (%s)", g->prev,
            cudaGetErrorString(e), cudaGetErrorName(e));
  }
}

static int guard_enter(int dev, dev_guard_t *g) {
  g->restore = false;
  int prev = 0;
  CUDA_TRY(cudaGetDevice(&prev), "cudaGetDevice");
  if (prev != dev) {
    bool back = has_context(prev); /* asked before dev is made current */
    CUDA_TRY(cudaSetDevice(dev), "cudaSetDevice");
    g->prev = prev;
    g->restore = back;
  }
  mark_used(dev);
  return TCOLL_SUCCESS;
}

/* Makes dev current until the end of the enclosing block, then gives the caller its device. */
#define USE(dev)                                                           \
  dev_guard_t guard_ __attribute__((cleanup(guard_restore))) = {0, false}; \
  do {                                                                     \
    int rc_ = guard_enter((dev), &guard_);                                 \
    if (rc_) return rc_;                                                   \
  } while (0)

/* ------------------------------------------------------------------ start, versions */

static bool gpu_visible(cudaError_t e, char *node, size_t len) {
  /* CUDA_VISIBLE_DEVICES may hide every GPU on purpose: then no device is no error. */
  if (e == cudaErrorNoDevice && getenv("CUDA_VISIBLE_DEVICES")) return false;
  const char *pattern = TC_GPU_NODES;
  glob_t g;
  if (!pattern || glob(pattern, 0, NULL, &g) != 0) return false;
  snprintf(node, len, "%s", g.gl_pathc ? g.gl_pathv[0] : pattern);
  globfree(&g);
  return true;
}

static void version_str(int v, char *buf, size_t len) {
  if (v <= 0)
    snprintf(buf, len, "none");
  else
    snprintf(buf, len, "%d.%d", v / 1000, v % 1000 / 10);
}

static void versions(char *buf, size_t len) {
  char d[16], r[16];
  version_str(driver_version, d, sizeof d);
  version_str(runtime_version, r, sizeof r);
  snprintf(buf, len, "CUDA driver %s, runtime %s", d, r);
}

static void find_primary_ctx_state(void) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn, 12000, cudaEnableDefault,
                                       &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess)
    primary_ctx_state = (primary_ctx_state_fn)fn;
  else
    cudaGetLastError(); /* without it, only devices tcoll used count as having a context */
}

static int cu_init(void) {
  ndev = 0;
  __atomic_store_n(&used, 0, __ATOMIC_RELAXED);
  no_device_reason[0] = '\0';
  driver_version = runtime_version = 0;
  if (cudaDriverGetVersion(&driver_version) != cudaSuccess) driver_version = 0;
  if (cudaRuntimeGetVersion(&runtime_version) != cudaSuccess) runtime_version = 0;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) {
    ndev = n;
    find_primary_ctx_state();
    return TCOLL_SUCCESS;
  }
  cudaGetLastError();
  char node[256], ver[64];
  versions(ver, sizeof ver);
  snprintf(no_device_reason, sizeof no_device_reason, "no GPU (cudaGetDeviceCount: %s, %s)",
           cudaGetErrorString(e), cudaGetErrorName(e));
  if (!gpu_visible(e, node, sizeof node))
    return TCOLL_SUCCESS; /* no GPU here: the backend serves none */
  /* DESIGN: a visible GPU that CUDA cannot use is an error, never a silent fallback. */
  return tc_error(TCOLL_ERR_CUDA,
                  "a GPU is visible (%s) but CUDA cannot start: cudaGetDeviceCount failed: %s "
                  "(%s); %s (a driver "
                  "older than the runtime needs: CUDA 13 needs driver >= 580.65)",
                  node, cudaGetErrorString(e), cudaGetErrorName(e), ver);
}

static void cu_fini(void) {
  ndev = 0;
  __atomic_store_n(&used, 0, __ATOMIC_RELAXED);
}

static int cu_count(void) { return ndev; }

static void cu_describe(char *buf, size_t len) {
  char ver[64];
  versions(ver, sizeof ver);
  if (no_device_reason[0])
    snprintf(buf, len, "%s; %s", no_device_reason, ver);
  else
    snprintf(buf, len, "%s", ver);
}

/* ------------------------------------------------------------------ memory */

static int cu_alloc(int dev, size_t n, void **p) {
  USE(dev);
  CUDA_TRY(cudaMalloc(p, n ? n : 1), "cudaMalloc");
  return TCOLL_SUCCESS;
}

static int cu_free(int dev, void *p) {
  if (!p) return TCOLL_SUCCESS;
  USE(dev);
  CUDA_TRY(cudaFree(p), "cudaFree");
  return TCOLL_SUCCESS;
}

/* Portable: pinned for every device's copies, whichever context allocated it. */
static int cu_host_alloc(size_t n, void **p) {
  USE(home_device());
  CUDA_TRY(cudaHostAlloc(p, n ? n : 1, cudaHostAllocPortable), "cudaHostAlloc");
  return TCOLL_SUCCESS;
}

static int cu_host_free(void *p) {
  if (!p) return TCOLL_SUCCESS;
  USE(home_device());
  CUDA_TRY(cudaFreeHost(p), "cudaFreeHost");
  return TCOLL_SUCCESS;
}

static int cu_pointer_device(const void *p, int near, int *dev) {
  USE(near);
  struct cudaPointerAttributes a;
  CUDA_TRY(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes");
  switch (a.type) {
  case cudaMemoryTypeDevice: *dev = a.device; break;
  case cudaMemoryTypeManaged: *dev = TC_DEV_MANAGED; break;
  default: *dev = TCOLL_HOST; break; /* cudaMemoryTypeHost (pinned) or unregistered */
  }
  return TCOLL_SUCCESS;
}

static int cu_context_device(void) {
  for (int d = 0; d < ndev && d < 64; d++)
    if (has_context(d)) return d;
  return -1;
}

/* ------------------------------------------------------------------ copies, streams, events */

static int cu_copy_async(void *dst, const void *src, size_t n, int dev, void *stream) {
  USE(dev);
  CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)stream),
           "cudaMemcpyAsync");
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
  CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  *stream = s;
  return TCOLL_SUCCESS;
}

static int cu_stream_destroy(int dev, void *stream) {
  if (!stream) return TCOLL_SUCCESS;
  USE(dev);
  CUDA_TRY(cudaStreamDestroy((cudaStream_t)stream), "cudaStreamDestroy");
  return TCOLL_SUCCESS;
}

static int cu_stream_sync(int dev, void *stream) {
  USE(dev);
  CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
  return TCOLL_SUCCESS;
}

static int cu_event_create(int dev, void **event) {
  USE(dev);
  cudaEvent_t e;
  CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  *event = e;
  return TCOLL_SUCCESS;
}

static int cu_event_destroy(int dev, void *event) {
  if (!event) return TCOLL_SUCCESS;
  USE(dev);
  CUDA_TRY(cudaEventDestroy((cudaEvent_t)event), "cudaEventDestroy");
  return TCOLL_SUCCESS;
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
  if (e == cudaErrorNotReady) {
    cudaGetLastError(); /* not an error: "not yet" */
    return TCOLL_IN_PROGRESS;
  }
  return cuda_fail(e, "cudaEventQuery");
}

static int cu_stream_wait_event(int dev, void *stream, void *event) {
  USE(dev);
  CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0), "cudaStreamWaitEvent");
  return TCOLL_SUCCESS;
}

static int cu_device_sync(int dev) {
  USE(dev);
  CUDA_TRY(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return TCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ kernels */

static int cu_add(int dev, void *stream, void *dst, const void *src, tcoll_dtype_t dt, int64_t n) {
  USE(dev);
  cudaError_t e = (cudaError_t)tc_cuda_add(stream, dst, src, (int)dt, n);
  if (e != cudaSuccess) {
    char what[96];
    snprintf(what, sizeof what, "the add kernel (%s, %lld elements)", tcoll_dtype_name(dt),
             (long long)n);
    return cuda_fail(e, what);
  }
  return TCOLL_SUCCESS;
}

const tc_device_ops_t tc_cuda_device_ops = {
    .name = "cuda",
    .init = cu_init,
    .fini = cu_fini,
    .count = cu_count,
    .describe = cu_describe,
    .used_mask = cu_used_mask,
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
    .context_device = cu_context_device,
    .add = cu_add,
    .device_sync = cu_device_sync,
};
