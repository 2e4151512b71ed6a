/* The cache of storage tcoll allocates: outputs and tensors on the host (pageable) or on a
 * device, and the page-locked host buffers staging goes through (pinned.h).
 *
 * Like PyTorch's caching allocators: freed storage is kept by size class, per place, and handed
 * out again, so that steady-state calls neither allocate nor fault fresh pages in. Classes are
 * four per power of two (a block is at most 25% larger than asked for) up to 2^48 bytes; a larger
 * request goes to the system as it is and back when freed. The free blocks held,
 * over every place, are bounded by tc_cfg.cache_bytes (TCOLL_CACHE_BYTES): freeing beyond it gives
 * the least recently freed blocks back to the system. Everything cached is given back by
 * tcoll_cache_release and at finalize.
 *
 * Device and pinned blocks carry fences: events after which nothing queued uses them any more.
 * A device block freed by a thread is fenced on that thread's current stream of the device (its
 * last uses are there); a pinned block returned with tc_cache_free_after on the streams given.
 * A block is handed out again only once its fences completed (the host waits for them if none of
 * the class is ready), so whatever stream its next owner uses, it never overlaps the last one.
 *
 * Thread-safe: one lock, held only for list and table updates (system allocations, frees, event
 * waits and the zero-fill run outside it). */
#ifndef TC_CACHE_H
#define TC_CACHE_H

#include "device.h"

/* Places besides device ordinals (>= 0): pageable host memory (TCOLL_HOST) and pinned memory. */
#define TC_PLACE_PINNED (-2)

/* Storage for n bytes (a block of at least max(n, 1)) at place (TCOLL_HOST, TC_PLACE_PINNED or a
 * device). zero: its first n bytes are zeros when this returns (on a device: written on tcoll's
 * own stream, and waited for). Otherwise its content is whatever its last owner left: for
 * storage the caller writes in full (or zeroes itself, asynchronously). Either way, nothing its
 * last owner queued still uses it. */
int tc_cache_alloc(int place, size_t n, bool zero, void **p);
/* Takes back storage from tc_cache_alloc; false if p is not such storage (nothing done). */
bool tc_cache_free(void *p);
/* Takes back storage whose asynchronous copies on (devs[i], streams[i]) may still be in flight. */
bool tc_cache_free_after(void *p, int n, const int *devs, void *const *streams);
/* Whether p is the start of storage handed out by the cache; *place gets its place. */
bool tc_cache_owns(const void *p, int *place);
/* Where pageable host blocks come from before malloc: alloc(n, &p) gives n bytes or returns false
 * (malloc then), free(p, n) takes back what alloc gave (false: not its own). The node room's
 * symmetric heap, installed by init, so that this room never calls up into that one. */
typedef struct tc_host_source {
  bool (*alloc)(size_t n, void **p);
  bool (*free)(void *p, size_t n);
} tc_host_source_t;
void tc_cache_set_host_source(tc_host_source_t source);
/* Gives back to the system the free blocks beyond the limit (after a lower limit was set). */
void tc_cache_trim(void);
/* tcoll_cache_info without naming a public call (for the flight recorder's dumps). */
void tc_cache_stats(tcoll_cache_info_t *info);
/* At tcoll_init: blocks freed from now on are cached. */
void tc_cache_init(void);
/* At finalize, before the device backend goes: gives back every free block; storage still in
 * use stays valid (host) and is given back to the system when freed. */
void tc_cache_fini(void);

#endif
