/* The real CUDA backend on the mock CUDA runtime (mockcuda/mock_cudart.c), one scenario per run
 * (argv[1]), at any number of ranks. Its own main: several scenarios start and stop tcoll many
 * times, and look at what the runtime saw (contexts, calls, copies) through mock_cudart.h.
 *
 *   init      cudaGetDeviceCount failing: an error naming CUDA's message and the versions when a
 *             GPU is visible, "no GPU" (backend none, said at TCOLL_DEBUG=INFO) when none is or
 *             CUDA_VISIBLE_DEVICES hides them; the INFO line of a working backend
 *   host      a rank that only uses host buffers creates no CUDA context, finalize included
 *   device1   a rank that only uses device 1 creates a context on device 1 only: the device
 *             guard, pinned memory and finalize leave device 0 alone
 *   guard     a thread's own device choice is given back after tcoll's calls on another device
 *   faults    each CUDA call of the backend fails, at many points of a round of device work
 *             (ending with tcoll_cache_release, where the cache's frees happen): every failure
 *             comes back as TCOLL_ERR_CUDA naming the call (or, where nobody can be told, a
 *             warning naming it), nothing crashes or hangs, the next round works
 *   copyback  a scatter's output copied back by a rank whose first tcoll stream cannot be
 *             created at that moment: the wait reports the failed call (the copy-backs' stream
 *             table used to be read uninitialized on that path); alone, rank 0 makes its
 *             streams with its inputs (a zero-fill), so there the allocation reports it
 *   reuse     a cached device block whose fence cannot be queried or waited for: the allocation
 *             that would reuse it fails naming the call, the block goes back to the system
 *   pinned    coalesced, list, gather / scatter, all_to_all and gradient staging copy through
 *             pinned memory only (no asynchronous copy touches pageable memory)
 *   nopinned  where cudaHostAlloc always fails, staging goes through pageable memory: right
 *             results, a warning
 *   aware     with TCOLL_CUDA_AWARE=1 the coalesced collectives still pack device tensors
 *             through host staging: host code never reads device memory (it would crash here)
 *
 * Each rank checks on its own (the harness's expectations, test/harness.h; this program has its own
 * main); failures are summed over the ranks at the end. */
#define _GNU_SOURCE 1
#include "harness.h"

#include "mockcuda/mock_cudart.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HAS(text, needle) \
  T_EXPECT(t_contains(text, needle), "\"%s\" lacks \"%s\"", (text), (needle))

enum { CUDA_ERROR_UNKNOWN = 999, CUDA_ERROR_INSUFFICIENT_DRIVER = 35, CUDA_ERROR_NO_DEVICE = 100 };

/* ------------------------------------------------------------------ helpers */

static double value(int who, int64_t i) { return (double)(who + 1) * (double)(i % 5 + 1); }

/* A float32 tensor on dev holding value(who, i). */
static int make(tcoll_tensor_t *t, int dev, int64_t n, int who) {
  int64_t shape[1] = {n};
  tcoll_tensor_t h = t_empty();
  int rc = tcoll_tensor_alloc(&h, TCOLL_FLOAT32, 1, shape, TCOLL_HOST);
  if (rc) return rc;
  for (int64_t i = 0; i < n; i++) ((float *)h.data)[i] = (float)value(who, i);
  *t = t_empty();
  rc = tcoll_tensor_alloc(t, TCOLL_FLOAT32, 1, shape, dev);
  if (!rc) rc = tcoll_tensor_copy(t, &h);
  tcoll_tensor_free(&h);
  return rc;
}

/* Elements of t that differ from scale * value(0, i); -1 if t cannot be read. */
static int64_t wrong(const tcoll_tensor_t *t, double scale) {
  int64_t n = tcoll_tensor_numel(t), bad = 0;
  tcoll_tensor_t h = t_empty();
  if (tcoll_tensor_alloc(&h, t->dtype, t->ndim, t->shape, TCOLL_HOST) || tcoll_tensor_copy(&h, t)) {
    tcoll_tensor_free(&h);
    return -1;
  }
  for (int64_t i = 0; i < n; i++) bad += ((float *)h.data)[i] != (float)(scale * value(0, i));
  tcoll_tensor_free(&h);
  return bad;
}

/* Sum over ranks r of (r + 1), the factor of a SUM of value(r, i). */
static double rank_sum(int ranks) { return (double)ranks * (ranks + 1) / 2; }

static void set_chunk(size_t bytes) {
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  c.staging_chunk = bytes;
  T_OK(tcoll_set_config(&c));
}

/* ------------------------------------------------------------------ init */

static int init_logged(char *log, size_t len) {
  setenv("TCOLL_DEBUG", "INFO", 1);
  t_capture_t c = t_capture_begin();
  int rc = tcoll_init(NULL, NULL);
  t_capture_end(&c, log, len);
  unsetenv("TCOLL_DEBUG");
  return rc;
}

static void scenario_init(void) {
  char log[8192], self[64];
  snprintf(self, sizeof self, "/proc/%d/exe", (int)getpid()); /* exists: a "GPU device node" */

  /* A visible GPU and a driver too old: an error with CUDA's message and the versions. */
  setenv("MOCK_CUDA_GPU_NODES", self, 1);
  mock_cuda_fail("cudaGetDeviceCount", 1, CUDA_ERROR_INSUFFICIENT_DRIVER);
  int rc = tcoll_init(NULL, NULL);
  T_EXPECT(rc == TCOLL_ERR_CUDA, "tcoll_init with a visible GPU and a failing runtime returned %s",
           tcoll_status_string(rc));
  HAS(tcoll_last_error(), "a GPU is visible (");
  HAS(tcoll_last_error(),
      "cudaGetDeviceCount failed: CUDA driver version is insufficient for CUDA runtime version "
      "(cudaErrorInsufficientDriver)");
  HAS(tcoll_last_error(), "CUDA driver 13.0, runtime 13.0");
  T_EXPECT(!tcoll_initialized(), "tcoll is initialized after a failed tcoll_init");

  /* The same failure without a visible GPU: no GPU, said at INFO. */
  unsetenv("MOCK_CUDA_GPU_NODES");
  mock_cuda_fail("cudaGetDeviceCount", 1, CUDA_ERROR_INSUFFICIENT_DRIVER);
  T_OK(init_logged(log, sizeof log));
  T_EXPECT(strcmp(tcoll_device_backend(), "none") == 0, "backend %s without a visible GPU",
           tcoll_device_backend());
  HAS(log,
      "INFO: devices: backend none, 0 device(s): no GPU (cudaGetDeviceCount: CUDA driver version "
      "is "
      "insufficient for CUDA runtime version, cudaErrorInsufficientDriver); CUDA driver 13.0, "
      "runtime 13.0");
  T_OK(tcoll_finalize());

  /* GPUs hidden on purpose with CUDA_VISIBLE_DEVICES: no device, no error. */
  setenv("MOCK_CUDA_GPU_NODES", self, 1);
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  mock_cuda_fail("cudaGetDeviceCount", 1, CUDA_ERROR_NO_DEVICE);
  T_OK(tcoll_init(NULL, NULL));
  T_EXPECT(strcmp(tcoll_device_backend(), "none") == 0, "backend %s with every GPU hidden",
           tcoll_device_backend());
  T_OK(tcoll_finalize());
  unsetenv("CUDA_VISIBLE_DEVICES");

  /* ...but a visible GPU that reports no device is an error. */
  mock_cuda_fail("cudaGetDeviceCount", 1, CUDA_ERROR_NO_DEVICE);
  rc = tcoll_init(NULL, NULL);
  T_EXPECT(rc == TCOLL_ERR_CUDA, "tcoll_init with a visible GPU and no device returned %s",
           tcoll_status_string(rc));
  HAS(tcoll_last_error(), "no CUDA-capable device is detected (cudaErrorNoDevice)");

  /* A working runtime: the INFO line names backend, devices, versions and CUDA-awareness. */
  T_OK(init_logged(log, sizeof log));
  T_EXPECT(strcmp(tcoll_device_backend(), "cuda") == 0 && tcoll_device_count() == 2,
           "backend %s with %d device(s)", tcoll_device_backend(), tcoll_device_count());
  HAS(log,
      "INFO: devices: backend cuda, 2 device(s): CUDA driver 13.0, runtime 13.0; MPI CUDA-aware: "
      "no");
  HAS(log, "device buffers of nonblocking collectives: staged");
  T_OK(tcoll_finalize());
  unsetenv("MOCK_CUDA_GPU_NODES");
}

/* ------------------------------------------------------------------ contexts */

/* A round of collectives on dev (or the host): whole-buffer, pipelined and coalesced. */
static void collectives_on(int dev) {
  set_chunk(4096);
  int64_t n = 3000; /* 12000 bytes: pipelined in 4096-byte chunks on a device */
  tcoll_tensor_t x, y = t_empty(), small[2], out[2] = {t_empty(), t_empty()};
  T_OK(make(&x, dev, n, t_rank));
  T_OK(make(&small[0], dev, 7, t_rank));
  T_OK(make(&small[1], dev, 9, t_rank));
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_all_reduce_coalesced(small, 2, TCOLL_SUM, NULL, out));
  T_OK(tcoll_wait_all());
  T_EXPECT(wrong(&y, rank_sum(t_size)) == 0, "all_reduce on device %d is wrong", dev);
  T_EXPECT(wrong(&out[1], rank_sum(t_size)) == 0, "all_reduce_coalesced on device %d is wrong",
           dev);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  for (int i = 0; i < 2; i++) {
    tcoll_tensor_free(&small[i]);
    tcoll_tensor_free(&out[i]);
  }
}

static void scenario_host(void) {
  T_OK(tcoll_init(NULL, NULL));
  T_EXPECT(strcmp(tcoll_device_backend(), "cuda") == 0, "backend %s", tcoll_device_backend());
  collectives_on(TCOLL_HOST);
  T_OK(tcoll_finalize());
  T_EXPECT(mock_cuda_context_mask() == 0, "a host-only rank created CUDA contexts (mask %#x)",
           mock_cuda_context_mask());
}

static void scenario_device1(void) {
  T_OK(tcoll_init(NULL, NULL));
  collectives_on(1);
  T_EXPECT(mock_cuda_context_mask() == 2u,
           "working on device 1 created contexts %#x (expected device 1's only)",
           mock_cuda_context_mask());
  T_OK(tcoll_finalize());
  T_EXPECT(mock_cuda_context_mask() == 2u,
           "after finalize: contexts %#x (expected device 1's only)", mock_cuda_context_mask());
  /* This thread had no device of its own: it keeps device 1 rather than make 0 current. */
  T_EXPECT(mock_cuda_thread_device() == 1, "the thread's device is %d", mock_cuda_thread_device());
}

static void scenario_guard(void) {
  T_OK(tcoll_init(NULL, NULL));
  T_EXPECT(mock_cuda_select(0) == 0, "cudaSetDevice(0) failed");
  collectives_on(1);
  T_EXPECT(mock_cuda_thread_device() == 0,
           "the thread chose device 0 but is on %d after tcoll's calls on device 1",
           mock_cuda_thread_device());
  T_OK(tcoll_finalize());
  T_EXPECT(mock_cuda_thread_device() == 0, "after finalize the thread is on device %d",
           mock_cuda_thread_device());
}

/* ------------------------------------------------------------------ faults */

/* The calls of lib/cuda/cuda_device.c that can fail (version queries and the entry point lookup
 * only degrade the log line; cudaGetDeviceCount is the init scenario's). */
static const char *const fallible[] = {
    "cudaGetDevice",
    "cudaSetDevice",
    "cudaMalloc",
    "cudaFree",
    "cudaHostAlloc",
    "cudaFreeHost",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "cudaStreamCreateWithFlags",
    "cudaStreamDestroy",
    "cudaStreamSynchronize",
    "cudaStreamWaitEvent",
    "cudaEventCreateWithFlags",
    "cudaEventDestroy",
    "cudaEventRecord",
    "cudaEventSynchronize",
    "cudaEventQuery",
    "cudaDeviceSynchronize",
    "cudaPointerGetAttributes",
    "cudaLaunchKernel",
};

typedef struct outcome {
  int status;
  char msg[1024];
} outcome_t;

static void note(outcome_t *o, int rc) {
  if (rc == TCOLL_SUCCESS || o->status != TCOLL_SUCCESS) return;
  o->status = rc;
  snprintf(o->msg, sizeof o->msg, "%s", tcoll_last_error());
}
#define STEP(call)                                   \
  do {                                               \
    if (o->status == TCOLL_SUCCESS) note(o, (call)); \
  } while (0)

/* Reading t back is part of the round: a failure there is the round's outcome. */
static void verify(outcome_t *o, const tcoll_tensor_t *t, double scale, const char *what) {
  if (o->status != TCOLL_SUCCESS) return;
  tcoll_tensor_t h = t_empty();
  STEP(tcoll_tensor_alloc(&h, t->dtype, t->ndim, t->shape, TCOLL_HOST));
  STEP(tcoll_tensor_copy(&h, t));
  int64_t bad = 0;
  for (int64_t i = 0; o->status == TCOLL_SUCCESS && i < tcoll_tensor_numel(t); i++)
    bad += ((float *)h.data)[i] != (float)(scale * value(0, i));
  T_EXPECT(bad == 0, "%s: %lld elements wrong", what, (long long)bad);
  tcoll_tensor_free(&h);
}

/* Device work on this rank's own communicator (a failure here never leaves another rank
 * waiting): tcoll's streams and events, a user stream, the staging pipeline, whole-buffer
 * copy-backs, coalesced pieces, the add kernel across both devices, device synchronization. */
static void round_of_work(tcoll_comm_t *mine, outcome_t *o) {
  int64_t n = 3000;
  tcoll_tensor_t x = t_empty(), x1 = t_empty(), y = t_empty(), z = t_empty(), sum = t_empty();
  tcoll_tensor_t small[2] = {t_empty(), t_empty()}, out[2] = {t_empty(), t_empty()};
  void *s = NULL;
  set_chunk(4096);
  STEP(make(&x, 0, n, 0));
  STEP(make(&x1, 1, n, 1));
  STEP(make(&small[0], 0, 5, 0));
  STEP(make(&small[1], 0, 11, 0));
  STEP(tcoll_stream_create(0, &s));
  STEP(tcoll_set_stream(0, s));
  STEP(tcoll_all_reduce(&x, TCOLL_SUM, mine, &y));                  /* pipelined */
  STEP(tcoll_broadcast(&small[0], 0, mine, &z));                    /* whole buffer, copy-back */
  STEP(tcoll_all_reduce_coalesced(small, 2, TCOLL_SUM, mine, out)); /* pieces */
  STEP(tcoll_wait(y.data));
  STEP(tcoll_wait(z.data));
  STEP(tcoll_wait(out[0].data));
  STEP(tcoll_wait(out[1].data));
  tcoll_tensor_t both[2] = {x, x1};
  STEP(tcoll_local_reduce_add_coalesced(both, 2, 1, 0, &sum)); /* add kernel on device 0 */
  STEP(tcoll_device_synchronize(0));
  verify(o, &y, 1.0, "all_reduce");
  verify(o, &z, 1.0, "broadcast");
  verify(o, &out[1], 1.0, "all_reduce_coalesced");
  verify(o, &sum, 3.0, "local reduce_add");
  tcoll_wait_all(); /* whatever is still pending after a failure */
  if (s) {
    STEP(tcoll_set_stream(0, NULL));
    STEP(tcoll_stream_destroy(0, s));
  }
  tcoll_tensor_t *all[] = {&x, &x1, &y, &z, &sum, &small[0], &small[1], &out[0], &out[1]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tcoll_tensor_free(all[i]);
  /* The storage cache keeps freed blocks: their cudaFree and cudaFreeHost (and the waits for
   * their fences) happen here, where a failure is the status, rather than at finalize. */
  STEP(tcoll_cache_release());
}

/* One round from tcoll_init to tcoll_finalize, with `call`'s nth next call failing (nth 0: no
 * failure). Returns how many times the round called it. */
static long one_case(const char *call, int nth, outcome_t *o, char *log, size_t len) {
  memset(o, 0, sizeof *o);
  T_OK(tcoll_init(NULL, NULL));
  tcoll_comm_t *mine = NULL;
  T_OK(tcoll_comm_split(tcoll_comm_world(), t_rank, 0, &mine));
  long before = mock_cuda_calls(call);
  if (nth > 0) mock_cuda_fail(call, nth, CUDA_ERROR_UNKNOWN);
  t_capture_t c = t_capture_begin();
  round_of_work(mine, o);
  T_OK(tcoll_comm_free(&mine));
  T_OK(tcoll_finalize());
  t_capture_end(&c, log, len);
  mock_cuda_fail_none();
  return mock_cuda_calls(call) - before;
}

/* A failure of `call` was told: as the status of a call, or where nobody could be told (frees,
 * destroys, giving a thread its device back, finalize) as a warning. */
static bool told(const char *call, const outcome_t *o, const char *log) {
  const char *name =
      strcmp(call, "cudaLaunchKernel") == 0 ? "the add kernel (float32, 3000 elements)" : call;
  if (o->status == TCOLL_ERR_CUDA && strstr(o->msg, name) &&
      strstr(o->msg, "unknown error (cudaErrorUnknown)"))
    return true;
  for (const char *l = log; (l = strstr(l, "WARN: ")); l++) {
    const char *end = strchr(l, '\n');
    size_t n = end ? (size_t)(end - l) : strlen(l);
    char line[1024];
    snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), l);
    if (strstr(line, name) && strstr(line, "unknown error (cudaErrorUnknown)")) return true;
  }
  return false;
}

static void scenario_faults(void) {
  static char log[1 << 16];
  outcome_t o;
  int cases = 0;
  const char *only =
      getenv("T_FAULT"); /* "call:nth": that case alone, its log on stderr (debugging) */
  if (only) {
    char call[64];
    int nth = 1;
    snprintf(call, sizeof call, "%s", only);
    char *colon = strchr(call, ':');
    if (colon) *colon = '\0', nth = atoi(colon + 1);
    one_case(call, nth, &o, log, sizeof log);
    fprintf(stderr, "%s:%d: %s \"%s\"\n%s", call, nth, tcoll_status_string(o.status), o.msg, log);
    return;
  }
  for (size_t k = 0; k < sizeof fallible / sizeof fallible[0]; k++) {
    const char *call = fallible[k];
    long uses = one_case(call, 0, &o, log, sizeof log); /* how often a clean round calls it */
    T_EXPECT(o.status == TCOLL_SUCCESS, "a clean round failed: %s", o.msg);
    T_EXPECT(uses > 0, "a round never calls %s: the case tests nothing", call);
    long step = uses > 12 ? uses / 12 : 1;
    for (long nth = 1; nth <= uses; nth += step, cases++) {
      one_case(call, (int)nth, &o, log, sizeof log);
      T_EXPECT(
          told(call, &o, log),
          "%s failing at its call %ld of %ld was not reported: status %s \"%s\"; stderr: %.600s",
          call, nth, uses, tcoll_status_string(o.status), o.msg, log);
    }
  }
  one_case("cudaMalloc", 0, &o, log, sizeof log); /* and everything works again */
  T_EXPECT(o.status == TCOLL_SUCCESS, "a clean round after the failures failed: %s", o.msg);
  if (t_rank == 0) printf("faults: %d injected failures per rank\n", cases);
}

/* ------------------------------------------------------------------ nopinned */

/* Where no page-locked memory can be had (every cudaHostAlloc fails, as under a locked-memory
 * limit), staging goes through pageable memory with a warning: the results are right and no call
 * fails. */
static void scenario_nopinned(void) {
  static char log[1 << 14];
  T_OK(tcoll_init(NULL, NULL));
  mock_cuda_fail("cudaHostAlloc", 0, 2 /* cudaErrorMemoryAllocation */);
  long before = mock_cuda_pageable_copies();
  t_capture_t c = t_capture_begin();
  collectives_on(0);
  t_capture_end(&c, log, sizeof log);
  T_EXPECT(mock_cuda_calls("cudaHostAlloc") > 0, "no page-locked allocation was asked for");
  T_EXPECT(mock_cuda_pageable_copies() > before,
           "no copy went through pageable memory: the case tests nothing");
  HAS(log, "cudaHostAlloc failed");
  HAS(log, "using pageable memory");
  mock_cuda_fail_none();
  T_OK(tcoll_finalize());
}

/* ------------------------------------------------------------------ copyback */

/* Alone, rank 0 is source and receiver, and making its inputs makes tcoll's streams (the
 * zero-fill of tcoll_tensor_alloc runs on one): the first stream creation failing is then that
 * allocation's error, and its scatter finds the streams made. */
static void first_stream_fails_at_alloc(void) {
  tcoll_tensor_t t = t_empty();
  mock_cuda_fail("cudaStreamCreateWithFlags", 1, CUDA_ERROR_UNKNOWN);
  int rc = make(&t, 0, 8, 0);
  mock_cuda_fail_none();
  T_EXPECT(rc == TCOLL_ERR_CUDA,
           "a device allocation whose zero-fill stream cannot be made gave %s",
           tcoll_status_string(rc));
  HAS(tcoll_last_error(), "cudaStreamCreateWithFlags failed: unknown error (cudaErrorUnknown)");
  T_EXPECT(t.data == NULL, "a failed allocation left data %p", t.data);
}

static void scenario_copyback(void) {
  T_OK(tcoll_init(NULL, NULL));
  int64_t n = 32;
  tcoll_tensor_t list[8];
  if (t_size == 1) first_stream_fails_at_alloc();
  for (int r = 0; r < t_size && t_rank == 0; r++) T_OK(make(&list[r], 0, n, r));
  int64_t piece[1] = {n};
  tcoll_tensor_t out = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, piece, 0);
  /* On a rank that only receives, nothing has made tcoll's streams yet (its output is not
   * zero-filled: the scatter writes all of it): the first is made by the copy-back at
   * completion. Rank 0 made them with its inputs. */
  bool fails = t_rank != 0;
  if (fails) mock_cuda_fail("cudaStreamCreateWithFlags", 1, CUDA_ERROR_UNKNOWN);
  int rc = tcoll_scatter(t_rank == 0 ? list : NULL, 0, NULL, &out);
  if (rc == TCOLL_SUCCESS) rc = tcoll_wait(out.data);
  if (fails) {
    T_EXPECT(rc == TCOLL_ERR_CUDA, "a failed stream creation gave %s", tcoll_status_string(rc));
    HAS(tcoll_last_error(), "cudaStreamCreateWithFlags failed: unknown error (cudaErrorUnknown)");
  } else {
    T_EXPECT(rc == TCOLL_SUCCESS, "the source's scatter failed: %s", tcoll_last_error());
  }
  mock_cuda_fail_none();
  tcoll_wait_all();
  T_OK(tcoll_scatter(t_rank == 0 ? list : NULL, 0, NULL, &out)); /* and it works again */
  T_OK(tcoll_wait(out.data));
  T_EXPECT(wrong(&out, (double)(t_rank + 1)) == 0, "the scatter after the failure is wrong");
  tcoll_tensor_free(&out);
  for (int r = 0; r < t_size && t_rank == 0; r++) tcoll_tensor_free(&list[r]);
  T_OK(tcoll_finalize());
}

/* ------------------------------------------------------------------ reuse */

/* A freed device block is cached with a fence on this thread's stream; `call` (cudaEventQuery or
 * cudaEventSynchronize) then fails on the allocation that would reuse it. */
static void reuse_fails(const char *call) {
  int64_t shape[1] = {1000};
  tcoll_tensor_t t = t_empty();
  T_OK(tcoll_tensor_alloc(&t, TCOLL_FLOAT32, 1, shape, 0));
  tcoll_tensor_free(&t);
  tcoll_cache_info_t before, after;
  T_OK(tcoll_cache_info(&before));
  mock_cuda_fail(call, 1, CUDA_ERROR_UNKNOWN);
  int rc = tcoll_tensor_alloc(&t, TCOLL_FLOAT32, 1, shape, 0);
  mock_cuda_fail_none();
  T_EXPECT(rc == TCOLL_ERR_CUDA, "reusing a block whose fence's %s fails gave %s", call,
           tcoll_status_string(rc));
  char want[128];
  snprintf(want, sizeof want, "%s failed: unknown error (cudaErrorUnknown)", call);
  HAS(tcoll_last_error(), want);
  T_EXPECT(t.data == NULL, "a failed allocation left data %p", t.data);
  T_OK(tcoll_cache_info(&after));
  T_EXPECT(after.freed == before.freed + 1 && after.cached_device < before.cached_device &&
               after.in_use == before.in_use,
           "the block was not given back: freed %llu -> %llu, cached on devices %zu -> %zu, in use "
           "%zu -> %zu",
           (unsigned long long)before.freed, (unsigned long long)after.freed, before.cached_device,
           after.cached_device, before.in_use, after.in_use);
  T_OK(tcoll_tensor_alloc(&t, TCOLL_FLOAT32, 1, shape, 0)); /* and the next allocation works */
  tcoll_tensor_free(&t);
}

static void scenario_reuse(void) {
  T_OK(tcoll_init(NULL, NULL));
  reuse_fails("cudaEventQuery");
  reuse_fails("cudaEventSynchronize");
  T_OK(tcoll_finalize());
}

/* ------------------------------------------------------------------ pinned */

static void scenario_pinned(void) {
  T_OK(tcoll_init(NULL, NULL));
  int64_t n = 64;
  tcoll_tensor_t a, b, list[8], outs[8], gl[8], one = t_empty(), all = t_empty(),
                                                pair[2] = {t_empty(), t_empty()};
  tcoll_tensor_t both[2];
  T_OK(make(&a, 0, n, t_rank));
  T_OK(make(&b, 0, n * t_size, t_rank));
  both[0] = a;
  both[1] = b;
  int64_t piece[1] = {n};
  for (int r = 0; r < t_size; r++) {
    T_OK(make(&list[r], 0, n, r));
    outs[r] = t_empty();
    gl[r] = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, piece, 0); /* all_to_all: shapes given */
  }
  long before = mock_cuda_pageable_copies();
  T_OK(tcoll_all_reduce_coalesced(both, 2, TCOLL_SUM, NULL, pair));
  T_OK(tcoll_wait_all());
  tcoll_tensor_free(&pair[0]);
  tcoll_tensor_free(&pair[1]);
  T_OK(tcoll_all_gather_coalesced(both, 2, NULL, pair));
  T_OK(tcoll_wait_all());
  tcoll_tensor_free(&pair[0]);
  tcoll_tensor_free(&pair[1]);
  int dims[2] = {0, 0};
  tcoll_tensor_t rsin[1] = {b}, rsout[1] = {t_empty()};
  T_OK(tcoll_reduce_scatter_coalesced(rsin, 1, TCOLL_SUM, dims, NULL, rsout));
  T_OK(tcoll_all_gather_list(&a, NULL, outs));
  T_OK(tcoll_reduce_scatter_list(list, TCOLL_SUM, NULL, &one));
  T_OK(tcoll_all_to_all(list, NULL, gl));
  T_OK(tcoll_wait_all());
  tcoll_tensor_free(&rsout[0]);
  for (int r = 0; r < t_size; r++) {
    tcoll_tensor_free(&outs[r]);
    tcoll_tensor_free(&gl[r]);
  }
  T_OK(tcoll_gather(&a, 0, NULL, t_rank == 0 ? outs : NULL));
  all = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, piece, 0);
  T_OK(tcoll_scatter(t_rank == 0 ? list : NULL, 0, NULL, &all));
  T_OK(tcoll_wait_all());
  tcoll_tensor_t gy[8];
  for (int r = 0; r < t_size; r++) gy[r] = t_empty();
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_all_gather(&a, NULL, gy, &node));
  T_OK(tcoll_wait_all());
  tcoll_tensor_t gx = t_empty();
  T_OK(tcoll_grad_backward(node, gy, t_size, &gx, 1));
  T_OK(tcoll_wait_all());
  long pageable = mock_cuda_pageable_copies() - before;
  T_EXPECT(pageable == 0,
           "%ld asynchronous copies between device and pageable host memory in staging", pageable);
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&gx);
  for (int r = 0; r < t_size; r++) {
    tcoll_tensor_free(&gy[r]);
    tcoll_tensor_free(&list[r]);
    if (t_rank == 0) tcoll_tensor_free(&outs[r]);
  }
  tcoll_tensor_free(&all);
  tcoll_tensor_free(&one);
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&b);
  T_OK(tcoll_finalize());
}

/* ------------------------------------------------------------------ aware */

static void scenario_aware(void) {
  setenv("TCOLL_CUDA_AWARE", "1", 1);
  T_OK(tcoll_init(NULL, NULL));
  T_EXPECT(tcoll_mpi_device_direct(1) == 1, "TCOLL_CUDA_AWARE=1 but device buffers are staged");
  int64_t n = 6 * t_size;
  tcoll_tensor_t x[2], r[2] = {t_empty(), t_empty()}, a[2] = {t_empty(), t_empty()},
                       g[2] = {t_empty(), t_empty()};
  T_OK(make(&x[0], 0, n, t_rank));
  T_OK(make(&x[1], 0, 2 * n, t_rank));
  int dims[2] = {0, 0};
  T_OK(tcoll_reduce_scatter_coalesced(x, 2, TCOLL_SUM, dims, NULL, r));
  T_OK(tcoll_all_reduce_coalesced(x, 2, TCOLL_SUM, NULL, a));
  T_OK(tcoll_all_gather_coalesced(x, 2, NULL, g));
  T_OK(tcoll_wait_all());
  /* reduce_scatter: this rank's slab of the sum; all_reduce: the sum; all_gather: rank blocks. */
  tcoll_tensor_t h = t_empty();
  int64_t shape[1] = {n / t_size};
  T_OK(tcoll_tensor_alloc(&h, TCOLL_FLOAT32, 1, shape, TCOLL_HOST));
  T_OK(tcoll_tensor_copy(&h, &r[0]));
  int bad = 0;
  for (int64_t i = 0; i < n / t_size; i++)
    bad += ((float *)h.data)[i] != (float)(rank_sum(t_size) * value(0, t_rank * (n / t_size) + i));
  T_EXPECT(bad == 0, "reduce_scatter_coalesced with TCOLL_CUDA_AWARE=1: %d wrong", bad);
  T_EXPECT(wrong(&a[1], rank_sum(t_size)) == 0,
           "all_reduce_coalesced with TCOLL_CUDA_AWARE=1 is wrong");
  tcoll_tensor_free(&h);
  for (int i = 0; i < 2; i++) {
    tcoll_tensor_free(&x[i]);
    tcoll_tensor_free(&r[i]);
    tcoll_tensor_free(&a[i]);
    tcoll_tensor_free(&g[i]);
  }
  T_OK(tcoll_finalize());
  unsetenv("TCOLL_CUDA_AWARE");
}

int main(int argc, char **argv) {
  const char *scenario = argc > 1 ? argv[1] : "";
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &t_size);
  if (!strcmp(scenario, "init"))
    scenario_init();
  else if (!strcmp(scenario, "host"))
    scenario_host();
  else if (!strcmp(scenario, "device1"))
    scenario_device1();
  else if (!strcmp(scenario, "guard"))
    scenario_guard();
  else if (!strcmp(scenario, "faults"))
    scenario_faults();
  else if (!strcmp(scenario, "pinned"))
    scenario_pinned();
  else if (!strcmp(scenario, "nopinned"))
    scenario_nopinned();
  else if (!strcmp(scenario, "reuse"))
    scenario_reuse();
  else if (!strcmp(scenario, "copyback"))
    scenario_copyback();
  else if (!strcmp(scenario, "aware"))
    scenario_aware();
  else
    T_EXPECT(0, "unknown scenario \"%s\"", scenario);
  char name[80];
  snprintf(name, sizeof name, "test_cudamock %s", scenario);
  int rc = t_verdict(name);
  MPI_Finalize();
  return rc;
}
