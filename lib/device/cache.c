/* The size-class cache of host, pinned and device storage (see cache.h). */
#include "cache.h"

#include "../base/ptrmap.h"
#include "../base/scratch.h"

#include <stdlib.h>
#include <string.h>

#define MIN_BYTES 256          /* class 0: every request up to this size */
#define MAX_SHIFT 48           /* classes up to 2^48 bytes; larger requests pass through uncached */
#define NCLASS (1 + 4 * (MAX_SHIFT - 8))
#define MAX_FENCES 8
#define NPLACES (TC_MAX_DEVICES + 2) /* pinned, host, devices */
#define NO_CLASS (-1)
#define READY_SCAN 4           /* free blocks of a class examined for completed fences */

typedef enum { FROM_MALLOC, FROM_HOST_ALLOC, FROM_DEVICE } origin_t;

/* One block of storage; the bookkeeping lives apart from it (device memory cannot hold it). */
typedef struct block {
  void *p;
  size_t size; /* its class's size: what was allocated */
  int place, cls; /* cls NO_CLASS: a request larger than any class, never cached */
  origin_t origin;
  unsigned gen; /* backend generation it was allocated under (backend memory) */
  int nfence;
  int fence_dev[MAX_FENCES];
  void *fence_ev[MAX_FENCES];
  struct block *next, *prev;   /* its class's free list, newest first */
  struct block *newer, *older; /* every free block, by when it was freed */
} block_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static tc_ptrmap_t live;              /* storage handed out: address -> block */
static block_t **lists[NPLACES];      /* per place (allocated on first use): NCLASS free lists */
static block_t *oldest, *newest;      /* every free block, least recently freed first */
static bool enabled;                  /* between tc_cache_init and tc_cache_fini */
static struct {
  size_t cached, cached_host, cached_pinned, cached_device, in_use, peak;
  uint64_t reused, allocated, freed;
} st;

static int place_index(int place) { return place + 2; }

/* The class of an n-byte request and its size: class 0 up to MIN_BYTES, then four classes per
 * power of two. NO_CLASS with *size n for what no class holds: such a request still goes to the
 * system, so that its failure is the system's (on a GPU: cudaMalloc's out of memory). */
static int class_of(size_t n, size_t *size) {
  if (n <= MIN_BYTES) {
    *size = MIN_BYTES;
    return 0;
  }
  int k = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^k < n <= 2^(k+1) */
  if (k >= MAX_SHIFT) {
    *size = n;
    return NO_CLASS;
  }
  size_t step = (size_t)1 << (k - 2), base = (size_t)1 << k;
  size_t q = (n - base + step - 1) / step; /* 1..4 */
  *size = base + q * step;
  return 1 + 4 * (k - 8) + (int)(q - 1);
}

static size_t *cached_of(int place) {
  return place == TCOLL_HOST ? &st.cached_host : place == TC_PLACE_PINNED ? &st.cached_pinned : &st.cached_device;
}

/* ------------------------------------------------------------------ free lists (mu held) */

static void list_push(block_t *b) {
  block_t **head = &lists[place_index(b->place)][b->cls];
  b->prev = NULL;
  b->next = *head;
  if (*head) (*head)->prev = b;
  *head = b;
  b->older = newest;
  b->newer = NULL;
  if (newest) newest->newer = b;
  else oldest = b;
  newest = b;
  st.cached += b->size;
  *cached_of(b->place) += b->size;
}

static void list_unlink(block_t *b) {
  block_t **head = &lists[place_index(b->place)][b->cls];
  if (b->prev) b->prev->next = b->next;
  else *head = b->next;
  if (b->next) b->next->prev = b->prev;
  if (b->older) b->older->newer = b->newer;
  else oldest = b->newer;
  if (b->newer) b->newer->older = b->older;
  else newest = b->older;
  st.cached -= b->size;
  *cached_of(b->place) -= b->size;
}

static bool fences_done(const block_t *b) {
  for (int i = 0; i < b->nfence; i++)
    if (tc_dev()->event_query(b->fence_dev[i], b->fence_ev[i]) == TCOLL_IN_PROGRESS) return false;
  return true;
}

/* A free block of the class at place: among the most recently freed few, the first whose fences
 * completed, else the most recent (its next owner waits for it); NULL if none. */
static block_t *list_take(int place, int cls) {
  block_t **l = lists[place_index(place)];
  block_t *b = l && cls != NO_CLASS ? l[cls] : NULL;
  if (!b) return NULL;
  int seen = 0;
  for (block_t *c = b; c && seen < READY_SCAN; c = c->next, seen++) {
    if (!c->nfence || fences_done(c)) {
      b = c;
      break;
    }
  }
  list_unlink(b);
  return b;
}

/* Unlinks the least recently freed blocks until the cache holds at most limit bytes; they are
 * chained on *victims (through next) for the caller to free outside the lock. */
static void evict_locked(size_t limit, block_t **victims) {
  while (st.cached > limit && oldest) {
    block_t *b = oldest;
    list_unlink(b);
    b->next = *victims;
    *victims = b;
  }
}

/* ------------------------------------------------------------------ the system's memory */

static void fences_drop(block_t *b, bool wait) {
  for (int i = 0; i < b->nfence; i++) {
    if (wait) tc_dev()->event_sync(b->fence_dev[i], b->fence_ev[i]);
    tc_dev_event_put(b->fence_dev[i], b->fence_ev[i]);
  }
  b->nfence = 0;
}

static bool backend_current(const block_t *b) { return b->origin == FROM_MALLOC || b->gen == tc_dev_generation(); }

/* Gives b's memory back (waiting for its fences first) and frees its bookkeeping. Backend memory
 * of a backend since shut down went with it. */
static void system_free(block_t *b) {
  if (backend_current(b)) {
    fences_drop(b, true);
    if (b->origin == FROM_MALLOC) free(b->p);
    else if (b->origin == FROM_HOST_ALLOC) tc_dev()->host_free(b->p);
    else tc_dev_free(b->place, b->p);
  }
  free(b);
}

static void free_chain(block_t *b) {
  while (b) {
    block_t *next = b->next;
    system_free(b);
    b = next;
  }
}

static const char *place_name(int place) {
  return place == TCOLL_HOST ? "host" : place == TC_PLACE_PINNED ? "pinned host" : "device";
}

static int system_alloc(int place, int cls, size_t size, block_t **out) {
  block_t *b = calloc(1, sizeof *b);
  if (!b) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate the record of a %zu-byte block", size);
  b->size = size;
  b->place = place;
  b->cls = cls;
  b->gen = tc_dev_generation();
  int rc = TCOLL_SUCCESS;
  if (place >= 0) {
    b->origin = FROM_DEVICE;
    rc = tc_dev_alloc(place, size, &b->p);
  } else if (place == TC_PLACE_PINNED && tc_dev()->host_alloc) {
    b->origin = FROM_HOST_ALLOC;
    rc = tc_dev()->host_alloc(size, &b->p);
  } else {
    b->origin = FROM_MALLOC;
    /* Large pageable blocks on their own pages: the kernel may back them with huge pages. */
    size_t align = size >= ((size_t)2 << 20) ? ((size_t)2 << 20) : 256;
    if (posix_memalign(&b->p, align, size)) {
      b->p = NULL;
      rc = tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %zu bytes of %s memory", size, place_name(place));
    }
  }
  if (rc) {
    free(b);
    return rc;
  }
  *out = b;
  return TCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ handing out, taking back */

/* Zeros, complete on return: whatever stream uses the block next sees them. On a device they
 * are written on tcoll's own h2d stream (never the legacy default stream, and not behind the
 * caller's queued work); the block's last owner is done with it (its fences were waited). */
static int zero_fill(block_t *b, size_t n) {
  if (n == 0) return TCOLL_SUCCESS;
  if (b->place < 0) {
    memset(b->p, 0, n);
    return TCOLL_SUCCESS;
  }
  void *d2h, *h2d;
  int rc = tc_dev_copy_streams(b->place, &d2h, &h2d);
  if (!rc) rc = tc_dev()->memset_async(b->p, 0, n, b->place, h2d);
  if (!rc) rc = tc_dev()->stream_sync(b->place, h2d);
  return rc;
}

/* Records b as handed out (mu held). */
static int lend_locked(block_t *b) {
  if (tc_ptrmap_put(&live, (uintptr_t)b->p, b)) return TCOLL_ERR_NO_MEMORY;
  st.in_use += b->size;
  if (st.in_use + st.cached > st.peak) st.peak = st.in_use + st.cached;
  return TCOLL_SUCCESS;
}

static int ensure_lists(int place) {
  block_t ***l = &lists[place_index(place)];
  if (!*l && !(*l = calloc(NCLASS, sizeof **l))) return TCOLL_ERR_NO_MEMORY;
  return TCOLL_SUCCESS;
}

int tc_cache_alloc(int place, size_t n, bool zero, void **p) {
  if (place < TC_PLACE_PINNED || place >= TC_MAX_DEVICES)
    return tc_error(TCOLL_ERR_INTERNAL, "no storage place %d", place);
  size_t size;
  int cls = class_of(n, &size);
  pthread_mutex_lock(&mu);
  block_t *b = list_take(place, cls);
  int rc = TCOLL_SUCCESS;
  if (b && (rc = lend_locked(b))) list_push(b);
  if (b && !rc) st.reused++;
  pthread_mutex_unlock(&mu);
  if (rc) return tc_error(rc, "cannot record a block of %zu bytes", size);
  if (b) {
    fences_drop(b, true); /* its last owner's copies or kernels are done: waits only if not yet */
  } else {
    if ((rc = system_alloc(place, cls, size, &b))) return rc;
    pthread_mutex_lock(&mu);
    rc = lend_locked(b);
    if (!rc) st.allocated++;
    size_t in_use = st.in_use, cached = st.cached;
    pthread_mutex_unlock(&mu);
    if (rc) {
      system_free(b);
      return tc_error(rc, "cannot record a block of %zu bytes", size);
    }
    tc_info("cache: allocated %zu bytes of %s memory%s for %zu bytes; %zu bytes in use, %zu cached (limit %zu)",
            size, place_name(place), place >= 0 ? " on a device" : "", n, in_use, cached, tc_cfg.cache_bytes);
  }
  if (zero && (rc = zero_fill(b, n))) {
    tc_cache_free(b->p);
    return rc;
  }
  *p = b->p;
  return TCOLL_SUCCESS;
}

/* Counts the chained victims as given back (mu held). */
static void count_freed_locked(const block_t *victims) {
  for (const block_t *v = victims; v; v = v->next) st.freed++;
}

static block_t *lookup(const void *p) {
  pthread_mutex_lock(&mu);
  block_t *b = tc_ptrmap_get(&live, (uintptr_t)p);
  pthread_mutex_unlock(&mu);
  return b;
}

/* Fences b on each (devs[i], streams[i]); where no event can be had, waits for the stream now. */
static void fence(block_t *b, int n, const int *devs, void *const *streams) {
  for (int i = 0; i < n; i++) {
    void *ev = NULL;
    bool ok = b->nfence < MAX_FENCES && tc_dev_event_get(devs[i], &ev) == TCOLL_SUCCESS;
    if (ok && tc_dev()->event_record(devs[i], ev, streams[i]) == TCOLL_SUCCESS) {
      b->fence_dev[b->nfence] = devs[i];
      b->fence_ev[b->nfence++] = ev;
    } else {
      if (ev) tc_dev_event_put(devs[i], ev);
      tc_dev()->stream_sync(devs[i], streams[i]);
    }
  }
}

/* Takes p back: cached, or given back to the system when caching is off, the block is above the
 * limit or its backend is gone; false if p is not handed-out storage. Backend storage is fenced
 * first, outside the lock: on (devs[i], streams[i]) when n > 0, else device storage on this
 * thread's current stream of its device, where its last uses were queued. Host storage takes
 * one lock. */
static bool give_back(void *p, int n, const int *devs, void *const *streams) {
  block_t *victims = NULL;
  pthread_mutex_lock(&mu);
  block_t *b = tc_ptrmap_del(&live, (uintptr_t)p);
  if (!b) {
    pthread_mutex_unlock(&mu);
    return false;
  }
  st.in_use -= b->size;
  if (backend_current(b) && (n > 0 || b->place >= 0)) {
    pthread_mutex_unlock(&mu); /* b is no one else's now: neither lent nor free */
    if (n > 0) {
      fence(b, n, devs, streams);
    } else {
      void *s = tc_dev_current_stream(b->place);
      fence(b, 1, &b->place, &s);
    }
    pthread_mutex_lock(&mu);
  }
  if (enabled && backend_current(b) && b->cls != NO_CLASS && b->size <= tc_cfg.cache_bytes && ensure_lists(b->place) == TCOLL_SUCCESS) {
    list_push(b);
    evict_locked(tc_cfg.cache_bytes, &victims);
  } else {
    b->next = victims;
    victims = b;
  }
  count_freed_locked(victims);
  pthread_mutex_unlock(&mu);
  free_chain(victims);
  return true;
}

bool tc_cache_free(void *p) { return p && give_back(p, 0, NULL, NULL); }

bool tc_cache_free_after(void *p, int n, const int *devs, void *const *streams) {
  return p && give_back(p, n, devs, streams);
}

bool tc_cache_owns(const void *p, int *place) {
  block_t *b = lookup(p);
  if (b && place) *place = b->place;
  return b != NULL;
}

/* Unlinks every free block (mu held) onto a chain for the caller to free. */
static block_t *unlink_all_locked(void) {
  block_t *victims = NULL;
  evict_locked(0, &victims);
  count_freed_locked(victims);
  return victims;
}

void tc_cache_trim(void) {
  block_t *victims = NULL;
  pthread_mutex_lock(&mu);
  evict_locked(tc_cfg.cache_bytes, &victims);
  count_freed_locked(victims);
  pthread_mutex_unlock(&mu);
  free_chain(victims);
}

void tc_cache_init(void) {
  pthread_mutex_lock(&mu);
  enabled = true;
  pthread_mutex_unlock(&mu);
}

void tc_cache_fini(void) {
  pthread_mutex_lock(&mu);
  enabled = false;
  block_t *victims = unlink_all_locked();
  for (int i = 0; i < NPLACES; i++) {
    free(lists[i]);
    lists[i] = NULL;
  }
  if (live.count == 0) tc_ptrmap_clear(&live);
  pthread_mutex_unlock(&mu);
  free_chain(victims);
}

/* ------------------------------------------------------------------ public */

int tcoll_cache_release(void) {
  TC_ENTER("tcoll_cache_release");
  pthread_mutex_lock(&mu);
  block_t *victims = unlink_all_locked();
  pthread_mutex_unlock(&mu);
  free_chain(victims);
  tc_scratch_cleanup();
  return TCOLL_SUCCESS;
}

int tcoll_cache_info(tcoll_cache_info_t *info) {
  TC_ENTER("tcoll_cache_info");
  if (!info) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "info is NULL (expected a pointer to fill in)");
  tc_cache_stats(info);
  return TCOLL_SUCCESS;
}

void tc_cache_stats(tcoll_cache_info_t *info) {
  pthread_mutex_lock(&mu);
  *info = (tcoll_cache_info_t){.limit = tc_cfg.cache_bytes,
                               .cached = st.cached,
                               .cached_host = st.cached_host,
                               .cached_pinned = st.cached_pinned,
                               .cached_device = st.cached_device,
                               .in_use = st.in_use,
                               .peak = st.peak,
                               .reused = st.reused,
                               .allocated = st.allocated,
                               .freed = st.freed};
  pthread_mutex_unlock(&mu);
}
