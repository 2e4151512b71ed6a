/* The device backend interface: everything above it is device-agnostic.
 *
 * Implementations: "cuda" (CUDA runtime, when built and a device exists) and "fake"
 * (TCOLL_FAKE_DEVICES=N: host memory standing in for N devices, copies done asynchronously on
 * a queue). With neither, the backend "none" serves zero devices.
 *
 * Streams are opaque (void *; NULL is the device's default stream). Events likewise. */
#ifndef TC_DEVICE_H
#define TC_DEVICE_H

#include "../core.h"

typedef struct tc_device_ops {
  const char *name;
  int (*init)(void);
  void (*fini)(void);
  int (*count)(void);
  /* Device memory, zero-filled by tc_dev_alloc via memset_async + sync. */
  int (*alloc)(int dev, size_t n, void **p);
  void (*free)(int dev, void *p);
  /* Page-locked host memory for staging. */
  int (*host_alloc)(size_t n, void **p);
  void (*host_free)(void *p);
  /* Asynchronous on `stream` of the device that owns it (dev >= 0); either side may be host. */
  int (*copy_async)(void *dst, const void *src, size_t n, int dev, void *stream);
  int (*memset_async)(void *p, int byte, size_t n, int dev, void *stream);
  int (*stream_create)(int dev, void **stream);
  void (*stream_destroy)(int dev, void *stream);
  int (*stream_sync)(int dev, void *stream);
  int (*event_create)(int dev, void **event);
  void (*event_destroy)(int dev, void *event);
  int (*event_record)(int dev, void *event, void *stream);
  int (*event_sync)(int dev, void *event);
  int (*event_query)(int dev, void *event); /* TCOLL_SUCCESS done, TCOLL_IN_PROGRESS, error */
  int (*stream_wait_event)(int dev, void *stream, void *event);
  /* Which device owns p: its ordinal, or TCOLL_HOST for host memory. */
  int (*pointer_device)(const void *p, int *dev);
  /* Kernels on device memory, asynchronous on stream. */
  int (*scale)(int dev, void *stream, void *dst, const void *src, tcoll_dtype_t dt, int64_t n,
               double mul, double div);
  int (*add)(int dev, void *stream, void *dst, const void *src, tcoll_dtype_t dt, int64_t n);
} tc_device_ops_t;

/* Chooses the backend at tcoll_init (TCOLL_FAKE_DEVICES, then CUDA, then none). */
int tc_dev_init(void);
void tc_dev_fini(void);
const tc_device_ops_t *tc_dev(void);
int tc_dev_count(void);

/* TCOLL_SUCCESS if device is TCOLL_HOST or an existing device; else an error naming argname. */
int tc_dev_check(int device, const char *argname);
/* Zero-filled memory on device (host: aligned calloc). */
int tc_dev_alloc(int device, size_t nbytes, void **p);
void tc_dev_free(int device, void *p);
/* Synchronous copy between any two places. */
int tc_dev_copy_sync(void *dst, int dst_dev, const void *src, int src_dev, size_t n);

/* Whether MPI may be handed device pointers of this backend directly. */
bool tc_dev_mpi_direct(void);

#endif
