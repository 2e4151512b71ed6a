/* Page-locked host buffers (no allocation in steady state): staging copies between device and
 * host memory go through them. Buffers come from the device backend's host_alloc (plain aligned
 * memory when there is no backend), kept by the storage cache (cache.h) between uses. */
#ifndef TC_PINNED_H
#define TC_PINNED_H

#include "device.h"

/* At least n bytes of page-locked host memory (256-byte aligned at least), its content
 * undefined, into *p; where the backend cannot give it, pageable memory with a warning (copies
 * through it are slower, not wrong); TCOLL_ERR_NO_MEMORY if neither. */
int tc_pinned_get(size_t n, void **p);
/* Returns a buffer nothing uses any more. */
void tc_pinned_put(void *p);
/* Returns a buffer once what is queued now on each (devs[i], streams[i]) has completed:
 * copies from or to it may still be in flight (at most 8 streams; more are waited for). */
void tc_pinned_put_after(void *p, int n, const int *devs, void *const *streams);

#endif
