/* A mock CUDA runtime on host memory, for tests: the real CUDA backend (lib/cuda/cuda_device.c)
 * runs on it without a GPU, so that its error paths, device guards and context use are tested
 * in CI. It is linked into a test-only copy of libtcoll (test/mockcuda); the library that is
 * installed links NVIDIA's static runtime.
 *
 * What it models, strictly where tcoll's correctness depends on it:
 *   - devices (MOCK_CUDA_DEVICES, default 2) and a current device per thread; a thread that
 *     never chose one works on device 0;
 *   - primary contexts: a device gets one when cudaSetDevice makes it current or when a call
 *     that needs a context runs with it current (the GPU memory such a context costs is what
 *     item 2 and 3 of issue 15 are about);
 *   - device memory the host cannot touch: cudaMalloc returns an address mapped PROT_NONE (a
 *     second mapping of the same pages is what the mock's copies use), so host code that reads
 *     or writes device memory crashes as on a GPU;
 *   - streams and events bound to the device current at their creation; a call that queues on
 *     a stream must have the stream's device current (tcoll's guards always do), an event is
 *     recorded on a stream of its own device; a handle that was never created (or was
 *     destroyed) aborts with a message;
 *   - the last error (cudaGetLastError reads and clears it), error strings and names;
 *   - failures on demand: MOCK_CUDA_FAIL="call[:nth[:code]],..." makes the nth call of `call`
 *     (1-based, counted from the start; "*" for every call) fail with `code` (a cudaError_t,
 *     default 999, cudaErrorUnknown); test programs use mock_cuda_fail (mock_cudart.h).
 * Work is done at once, in the calling thread: a correct schedule of any stream order. */
#define _GNU_SOURCE 1
#include "mock_cudart.h"

#include <cuda_runtime_api.h>

#include <execinfo.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_DEV 64

/* ------------------------------------------------------------------ state */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int ndev = -1; /* read from MOCK_CUDA_DEVICES at first use */
static bool context[MAX_DEV];
static _Thread_local int thread_device = -1;
static _Thread_local cudaError_t last_error;
static long pageable_copies;

typedef struct region {
  char *base, *alias; /* device memory: base is PROT_NONE, alias the same pages readable */
  size_t len;
  int dev;
  bool pinned; /* page-locked host memory (base == alias) */
  struct region *next;
} region_t;
static region_t *regions;

struct CUstream_st {
  int dev;
  struct CUstream_st *next;
};
struct CUevent_st {
  int dev;
  struct CUevent_st *next;
};
static struct CUstream_st *streams;
static struct CUevent_st *events;

/* ------------------------------------------------------------------ failures on demand */

typedef struct plan {
  char call[48];
  long calls;
  long fail_at; /* 0: none; -1: every call; else the call number that fails */
  cudaError_t code;
} plan_t;
static plan_t plans[64];
static int nplans;

static plan_t *plan_of(const char *call) {
  for (int i = 0; i < nplans; i++)
    if (!strcmp(plans[i].call, call)) return &plans[i];
  if (nplans == (int)(sizeof plans / sizeof plans[0])) abort();
  plan_t *p = &plans[nplans++];
  snprintf(p->call, sizeof p->call, "%s", call);
  return p;
}

static void read_env_locked(void) {
  if (ndev >= 0) return;
  const char *n = getenv("MOCK_CUDA_DEVICES");
  ndev = n && *n ? atoi(n) : 2;
  if (ndev > MAX_DEV) ndev = MAX_DEV;
  const char *spec = getenv("MOCK_CUDA_FAIL");
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", spec ? spec : "");
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item;
       item = strtok_r(NULL, ",", &save)) {
    char *nth = strchr(item, ':'), *code = NULL;
    if (nth) {
      *nth++ = '\0';
      if ((code = strchr(nth, ':'))) *code++ = '\0';
    }
    plan_t *p = plan_of(item);
    p->fail_at = !nth ? 1 : !strcmp(nth, "*") ? -1 : atol(nth);
    p->code = code ? (cudaError_t)atoi(code) : cudaErrorUnknown;
  }
}

static cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

/* Every mocked call starts here: counts it, and fails it if that was asked for
 * (MOCK_CUDA_BACKTRACE=1 prints where, to find the code that handles the failure). */
static cudaError_t enter(const char *call) {
  pthread_mutex_lock(&mu);
  read_env_locked();
  plan_t *p = plan_of(call);
  p->calls++;
  cudaError_t e = p->fail_at == -1 || p->fail_at == p->calls ? p->code : cudaSuccess;
  pthread_mutex_unlock(&mu);
  if (e != cudaSuccess && getenv("MOCK_CUDA_BACKTRACE")) {
    void *frames[32];
    fprintf(stderr, "mock CUDA runtime: %s fails (%d) at:\n", call, (int)e);
    backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
  }
  return set_error(e);
}

#define ENTER(call)                   \
  do {                                \
    cudaError_t e_ = enter(call);     \
    if (e_ != cudaSuccess) return e_; \
  } while (0)

static void die(const char *fmt, const void *p) {
  fprintf(stderr, "mock CUDA runtime: ");
  fprintf(stderr, fmt, p);
  fprintf(stderr, "\n");
  abort();
}

/* ------------------------------------------------------------------ devices, contexts */

static int current_device(void) { return thread_device < 0 ? 0 : thread_device; }

/* The calling thread needs a context: its current device gets one if it has none. */
static void need_context(void) {
  pthread_mutex_lock(&mu);
  context[current_device()] = true;
  pthread_mutex_unlock(&mu);
}

cudaError_t cudaGetDeviceCount(int *count) {
  ENTER("cudaGetDeviceCount");
  if (ndev == 0) return set_error(cudaErrorNoDevice);
  *count = ndev;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  ENTER("cudaGetDevice");
  *device = current_device();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  ENTER("cudaSetDevice");
  if (device < 0 || device >= ndev) return set_error(cudaErrorInvalidDevice);
  thread_device = device;
  need_context(); /* as since CUDA 12: the primary context is made current at once */
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  ENTER("cudaDeviceSynchronize");
  need_context();
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
  ENTER("cudaDriverGetVersion");
  const char *d = getenv("MOCK_CUDA_DRIVER");
  *v = d && *d ? atoi(d) : CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
  ENTER("cudaRuntimeGetVersion");
  *v = CUDART_VERSION;
  return cudaSuccess;
}

/* cuDevicePrimaryCtxGetState, as the driver gives it through cudaGetDriverEntryPoint*. */
static int primary_ctx_state(int dev, unsigned *flags, int *active) {
  if (dev < 0 || dev >= ndev) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  pthread_mutex_lock(&mu);
  *flags = 0;
  *active = context[dev];
  pthread_mutex_unlock(&mu);
  return 0;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status) {
  (void)version;
  (void)flags;
  ENTER("cudaGetDriverEntryPointByVersion");
  bool known = !strcmp(symbol, "cuDevicePrimaryCtxGetState");
  *fn = known ? (void *)primary_ctx_state : NULL;
  if (status) *status = known ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

/* ------------------------------------------------------------------ errors */

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

static const struct {
  cudaError_t code;
  const char *name, *text;
} errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const char *cudaGetErrorName(cudaError_t e) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].code == e) return errors[i].name;
  return "cudaErrorMockUnnamed";
}

const char *cudaGetErrorString(cudaError_t e) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].code == e) return errors[i].text;
  return "unrecognized error code";
}

/* ------------------------------------------------------------------ memory */

/* The region holding [p, p + n) (mu held); NULL for memory the mock did not allocate. */
static region_t *region_of(const void *p, size_t n) {
  const char *c = p;
  for (region_t *r = regions; r; r = r->next)
    if (c >= r->base && c < r->base + r->len) return c + n <= r->base + r->len ? r : NULL;
  return NULL;
}

/* Where the mock itself reads or writes p: device memory through its readable mapping. */
static char *host_view(const void *p, size_t n, bool *device, bool *pinned) {
  pthread_mutex_lock(&mu);
  region_t *r = region_of(p, n ? n : 1);
  char *v = r ? r->alias + ((const char *)p - r->base) : (char *)p;
  *device = r && !r->pinned;
  *pinned = r && r->pinned;
  pthread_mutex_unlock(&mu);
  return v;
}

static void add_region(region_t *r) {
  pthread_mutex_lock(&mu);
  r->next = regions;
  regions = r;
  pthread_mutex_unlock(&mu);
}

/* Unlinks the region starting at p, or NULL. */
static region_t *take_region(const void *p, bool pinned) {
  pthread_mutex_lock(&mu);
  region_t *found = NULL;
  for (region_t **pp = &regions; *pp; pp = &(*pp)->next) {
    if ((*pp)->base == p && (*pp)->pinned == pinned) {
      found = *pp;
      *pp = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&mu);
  return found;
}

cudaError_t cudaMalloc(void **p, size_t n) {
  ENTER("cudaMalloc");
  need_context();
  size_t page = (size_t)sysconf(_SC_PAGESIZE), len = (n + page - 1) / page * page;
  int fd = memfd_create("mock-cuda-device-memory", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
    if (fd >= 0) close(fd);
    return set_error(cudaErrorMemoryAllocation);
  }
  char *base = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, 0);
  char *alias = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  region_t *r = malloc(sizeof *r);
  if (base == MAP_FAILED || alias == MAP_FAILED || !r) {
    if (base != MAP_FAILED) munmap(base, len);
    if (alias != MAP_FAILED) munmap(alias, len);
    free(r);
    return set_error(cudaErrorMemoryAllocation);
  }
  *r = (region_t){.base = base, .alias = alias, .len = len, .dev = current_device()};
  add_region(r);
  *p = base;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  ENTER("cudaFree");
  need_context();
  if (!p) return cudaSuccess;
  region_t *r = take_region(p, false);
  if (!r) return set_error(cudaErrorInvalidValue);
  munmap(r->base, r->len);
  munmap(r->alias, r->len);
  free(r);
  return cudaSuccess;
}

static cudaError_t host_alloc(void **p, size_t n) {
  need_context();
  region_t *r = malloc(sizeof *r);
  void *q = NULL;
  if (!r || posix_memalign(&q, 4096, n ? n : 1)) {
    free(r);
    return set_error(cudaErrorMemoryAllocation);
  }
  *r = (region_t){.base = q, .alias = q, .len = n ? n : 1, .dev = current_device(), .pinned = true};
  add_region(r);
  *p = q;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
  (void)flags; /* pinned memory here is every device's */
  ENTER("cudaHostAlloc");
  return host_alloc(p, n);
}

cudaError_t cudaMallocHost(void **p, size_t n) {
  ENTER("cudaMallocHost");
  return host_alloc(p, n);
}

cudaError_t cudaFreeHost(void *p) {
  ENTER("cudaFreeHost");
  need_context();
  region_t *r = take_region(p, true);
  if (!r) return set_error(cudaErrorInvalidValue);
  free(r->base);
  free(r);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
  ENTER("cudaPointerGetAttributes");
  memset(a, 0, sizeof *a);
  pthread_mutex_lock(&mu);
  region_t *r = region_of(p, 1);
  a->type = !r ? cudaMemoryTypeUnregistered : r->pinned ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  a->device = r ? r->dev : -2;
  a->devicePointer = r ? (void *)p : NULL;
  a->hostPointer = r && r->pinned ? (void *)p : NULL;
  pthread_mutex_unlock(&mu);
  return cudaSuccess;
}

/* ------------------------------------------------------------------ streams and events */

/* The device of stream s (NULL and the special handles: the current device's). */
static int stream_device(cudaStream_t s, const char *call) {
  if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread) return current_device();
  pthread_mutex_lock(&mu);
  struct CUstream_st *x = streams;
  while (x && x != s) x = x->next;
  pthread_mutex_unlock(&mu);
  if (!x) {
    char what[160];
    snprintf(what, sizeof what, "%s on stream %%p, which was never created or was destroyed", call);
    die(what, s);
  }
  return x->dev;
}

/* Queuing on a stream: its device must be current (tcoll's device guard makes it so). */
static cudaError_t queue_on(cudaStream_t s, const char *call) {
  if (stream_device(s, call) != current_device()) return set_error(cudaErrorInvalidResourceHandle);
  need_context();
  return cudaSuccess;
}

static struct CUevent_st *event_of(cudaEvent_t e, const char *call) {
  pthread_mutex_lock(&mu);
  struct CUevent_st *x = events;
  while (x && x != e) x = x->next;
  pthread_mutex_unlock(&mu);
  if (!x) {
    char what[160];
    snprintf(what, sizeof what, "%s on event %%p, which was never created or was destroyed", call);
    die(what, e);
  }
  return x;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
  (void)flags;
  ENTER("cudaStreamCreateWithFlags");
  need_context();
  struct CUstream_st *x = calloc(1, sizeof *x);
  if (!x) return set_error(cudaErrorMemoryAllocation);
  x->dev = current_device();
  pthread_mutex_lock(&mu);
  x->next = streams;
  streams = x;
  pthread_mutex_unlock(&mu);
  *s = x;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  ENTER("cudaStreamDestroy");
  stream_device(s, "cudaStreamDestroy");
  pthread_mutex_lock(&mu);
  for (struct CUstream_st **pp = &streams; *pp; pp = &(*pp)->next) {
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  }
  pthread_mutex_unlock(&mu);
  free(s);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  ENTER("cudaStreamSynchronize");
  stream_device(s, "cudaStreamSynchronize");
  need_context();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  (void)flags;
  ENTER("cudaStreamWaitEvent");
  event_of(e, "cudaStreamWaitEvent"); /* an event of any device may be waited for */
  return queue_on(s, "cudaStreamWaitEvent");
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
  (void)flags;
  ENTER("cudaEventCreateWithFlags");
  need_context();
  struct CUevent_st *x = calloc(1, sizeof *x);
  if (!x) return set_error(cudaErrorMemoryAllocation);
  x->dev = current_device();
  pthread_mutex_lock(&mu);
  x->next = events;
  events = x;
  pthread_mutex_unlock(&mu);
  *e = x;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  ENTER("cudaEventDestroy");
  event_of(e, "cudaEventDestroy");
  pthread_mutex_lock(&mu);
  for (struct CUevent_st **pp = &events; *pp; pp = &(*pp)->next) {
    if (*pp == e) {
      *pp = e->next;
      break;
    }
  }
  pthread_mutex_unlock(&mu);
  free(e);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  ENTER("cudaEventRecord");
  struct CUevent_st *x = event_of(e, "cudaEventRecord");
  if (stream_device(s, "cudaEventRecord") != x->dev)
    return set_error(cudaErrorInvalidResourceHandle);
  return queue_on(s, "cudaEventRecord");
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  ENTER("cudaEventSynchronize");
  event_of(e, "cudaEventSynchronize");
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  ENTER("cudaEventQuery");
  event_of(e, "cudaEventQuery");
  return cudaSuccess;
}

/* ------------------------------------------------------------------ copies */

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
  (void)kind; /* cudaMemcpyDefault: the addresses tell */
  ENTER("cudaMemcpyAsync");
  cudaError_t e = queue_on(s, "cudaMemcpyAsync");
  if (e != cudaSuccess) return e;
  bool ddev, dpin, sdev, spin;
  char *d = host_view(dst, n, &ddev, &dpin);
  const char *x = host_view(src, n, &sdev, &spin);
  if ((!ddev && !dpin) || (!sdev && !spin))
    __atomic_add_fetch(&pageable_copies, 1, __ATOMIC_RELAXED);
  memmove(d, x, n);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s) {
  ENTER("cudaMemsetAsync");
  cudaError_t e = queue_on(s, "cudaMemsetAsync");
  if (e != cudaSuccess) return e;
  bool dev, pinned;
  char *v = host_view(p, n, &dev, &pinned);
  if (!dev) return set_error(cudaErrorInvalidValue);
  memset(v, value, n);
  return cudaSuccess;
}

/* For the mock's kernels (mock_kernels.c): a launch on stream s with the checks of a launch (the
 * stream's device current), and device memory the kernel may touch, through the mock's view. */
cudaError_t mock_cuda_launch(cudaStream_t s) {
  ENTER("cudaLaunchKernel");
  return queue_on(s, "cudaLaunchKernel");
}

void *mock_cuda_device_view(const void *p, size_t n) {
  bool dev, pinned;
  char *v = host_view(p, n, &dev, &pinned);
  return dev ? v : NULL;
}

/* ------------------------------------------------------------------ test hooks */

void mock_cuda_fail(const char *call, int nth, int code) {
  pthread_mutex_lock(&mu);
  read_env_locked();
  plan_t *p = plan_of(call);
  p->fail_at = nth <= 0 ? -1 : p->calls + nth;
  p->code = (cudaError_t)code;
  pthread_mutex_unlock(&mu);
}

void mock_cuda_fail_none(void) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nplans; i++) plans[i].fail_at = 0;
  pthread_mutex_unlock(&mu);
}

long mock_cuda_calls(const char *call) {
  pthread_mutex_lock(&mu);
  long n = plan_of(call)->calls;
  pthread_mutex_unlock(&mu);
  return n;
}

unsigned mock_cuda_context_mask(void) {
  unsigned m = 0;
  pthread_mutex_lock(&mu);
  for (int d = 0; d < 32; d++) m |= context[d] ? 1u << d : 0;
  pthread_mutex_unlock(&mu);
  return m;
}

int mock_cuda_thread_device(void) { return thread_device; }

int mock_cuda_select(int dev) { return (int)cudaSetDevice(dev); }

long mock_cuda_pageable_copies(void) { return __atomic_load_n(&pageable_copies, __ATOMIC_RELAXED); }
