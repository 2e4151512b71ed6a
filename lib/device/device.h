/* The device backend interface: everything above it is device-agnostic.
 *
 * Implementations: "cuda" (CUDA runtime, when built and a device exists) and "fake"
 * (TCOLL_FAKE_DEVICES=N: host memory standing in for N devices, copies done asynchronously on
 * a queue). With neither, the backend "none" serves zero devices.
 *
 * Streams are opaque (void *; NULL is the device's default stream). Events likewise.
 *
 * Stream model (see tcoll.h, "streams"): every thread has a current stream per device
 * (tcoll_set_stream; NULL = default stream). Work tcoll does on a device is ordered after what
 * the caller queued on that stream before the call, and results on a device are ready for work
 * the waiter queues on its current stream after the wait. tcoll's own copies run on its own
 * streams (tc_dev_copy_streams), ordered against the caller's stream with events. */
#ifndef TC_DEVICE_H
#define TC_DEVICE_H

#include "../base/base.h"

#define TC_MAX_DEVICES 64
/* Memory the host and every device can use (CUDA managed memory): accepted as either. */
#define TC_DEV_MANAGED (-2)

typedef struct tc_device_ops {
  const char *name;
  /* Starts the backend: TCOLL_SUCCESS also when it finds no device (count() is then 0); an error
   * when it cannot start although it should (CUDA: a GPU is visible but the runtime fails). */
  int (*init)(void);
  void (*fini)(void);
  int (*count)(void);
  /* One line on the backend for logs: versions, or why there is no device. */
  void (*describe)(char *buf, size_t len);
  /* Devices this process touched through the backend since init (bit d: device d). Finalize
   * synchronizes only those: with CUDA, touching another device creates a context there. */
  uint64_t (*used_mask)(void);
  /* Device memory (uninitialized; the storage cache zero-fills where needed, on a stream). */
  int (*alloc)(int dev, size_t n, void **p);
  int (*free)(int dev, void *p);
  /* Page-locked host memory for staging. */
  int (*host_alloc)(size_t n, void **p);
  int (*host_free)(void *p);
  /* Asynchronous on `stream` of the device that owns it (dev >= 0); either side may be host. */
  int (*copy_async)(void *dst, const void *src, size_t n, int dev, void *stream);
  int (*memset_async)(void *p, int byte, size_t n, int dev, void *stream);
  int (*stream_create)(int dev, void **stream);
  int (*stream_destroy)(int dev, void *stream);
  int (*stream_sync)(int dev, void *stream);
  int (*event_create)(int dev, void **event);
  int (*event_destroy)(int dev, void *event);
  int (*event_record)(int dev, void *event, void *stream);
  int (*event_sync)(int dev, void *event);
  int (*event_query)(int dev, void *event); /* TCOLL_SUCCESS done, TCOLL_IN_PROGRESS, error */
  int (*stream_wait_event)(int dev, void *stream, void *event);
  /* Where p lives: a device ordinal, TCOLL_HOST, or TC_DEV_MANAGED. `near` is a device the
   * query may make current (one the caller uses anyway). */
  int (*pointer_device)(const void *p, int near, int *dev);
  /* A device that has a context now (the lowest), or -1 where none has: then no device memory
   * exists in this process and a query could only create a context. NULL: no contexts (fake). */
  int (*context_device)(void);
  /* dst[i] += src[i] on device memory, asynchronous on stream. */
  int (*add)(int dev, void *stream, void *dst, const void *src, tcoll_dtype_t dt, int64_t n);
  /* Waits for everything queued on any stream of dev. */
  int (*device_sync)(int dev);
} tc_device_ops_t;

/* Chooses the backend at tcoll_init (TCOLL_FAKE_DEVICES, then the hardware backend, then none).
 * hardware: the CUDA backend's ops where it is built (NULL: none), handed in by init.c so that
 * this room never calls up into lib/cuda. An error when CUDA is built and a GPU is visible but
 * the runtime cannot start (never a silent fallback). */
int tc_dev_init(const tc_device_ops_t *hardware);
/* Synchronizes the devices this process used, frees tcoll's streams and events, stops the
 * backend. */
void tc_dev_fini(void);
const tc_device_ops_t *tc_dev(void);
/* Changes whenever a backend starts or stops: memory of an older generation is gone with it. */
unsigned tc_dev_generation(void);
int tc_dev_count(void);
/* Whether this process touched dev through the backend (see used_mask). */
bool tc_dev_used(int dev);
/* "backend cuda, 2 device(s): CUDA driver 13.0, runtime 13.0", for logs. */
const char *tc_dev_describe(char *buf, size_t len);

/* TCOLL_SUCCESS if device is TCOLL_HOST or an existing device; else an error naming argname. */
int tc_dev_check(int device, const char *argname);
/* That p (argname->data) lives where argname->device says: TCOLL_ERR_INVALID_ARGUMENT
 * otherwise. Host pointers are checked once the process used a device (a query before could
 * create a CUDA context on a GPU this process never uses). */
int tc_dev_check_pointer_query(const void *p, int device, const char *argname);
/* Whether the backend can tell where a pointer lives (none cannot: nothing to check). */
extern bool tc_dev_queries_pointers;
/* Every call checks its tensors' pointers: without a backend that can tell, that is one load. */
static inline int tc_dev_check_pointer(const void *p, int device, const char *argname) {
  if (!p || !tc_dev_queries_pointers) return TCOLL_SUCCESS;
  return tc_dev_check_pointer_query(p, device, argname);
}
/* Where p lives for a caller that does not know (the drop-in layer, handed an MPI program's
 * buffer): a device ordinal, or TCOLL_HOST (host memory, managed memory, or a query that failed).
 * Creates no context: where no device has one, p cannot be device memory. */
int tc_dev_locate(const void *p);
/* Uninitialized memory on a device (dev >= 0), straight from the backend: tcoll's storage comes
 * from the cache (cache.h), which calls this when it grows. */
int tc_dev_alloc(int device, size_t nbytes, void **p);
/* A failure is logged (the callers free and cannot report). */
void tc_dev_free(int device, void *p);
/* Synchronous copy where at least one side is a device, ordered after the calling thread's
 * current streams of the devices involved (the copy runs on the source device's current
 * stream). */
int tc_dev_copy_sync(void *dst, int dst_dev, const void *src, int src_dev, size_t n);

/* ---- streams and events ---- */

/* The calling thread's current stream on dev (NULL: the default stream), and setting it. */
void *tc_dev_current_stream(int dev);
void tc_dev_set_current_stream(int dev, void *stream);
/* Waits on the host for what the calling thread queued on its current stream of dev. */
int tc_dev_sync_current(int dev);
/* tcoll's own streams on dev, created on first use: device-to-host and host-to-device staging
 * copies (two streams so that both directions overlap), and the background stream of the
 * single-process multi-device ops. */
int tc_dev_copy_streams(int dev, void **d2h, void **h2d);
int tc_dev_local_stream(int dev, void **bg);
/* Pooled events. An event taken from the pool is not being waited on by anything any more
 * (events are only handed out again once their last record completed). */
int tc_dev_event_get(int dev, void **ev);
void tc_dev_event_put(int dev, void *ev);
/* Makes `stream` of dev wait for what is queued on `after` of dev2 now (an event in between). */
int tc_dev_stream_after(int dev, void *stream, int dev2, void *after);

#endif
