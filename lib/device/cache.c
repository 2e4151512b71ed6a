/* The size-class cache of host, pinned and device storage (see cache.h). */
#include "cache.h"

#include "../base/ptrmap.h"
#include "../base/scratch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_BYTES 256 /* class 0: every request up to this size */
#define MAX_SHIFT 48  /* classes up to 2^48 bytes; larger requests pass through uncached */
#define NCLASS (1 + 4 * (MAX_SHIFT - 8))
#define MAX_FENCES 8
#define NPLACES (TC_MAX_DEVICES + 2) /* pinned, host, devices */
#define NO_CLASS (-1)
#define READY_SCAN 4 /* free blocks of a class examined for completed fences */

typedef enum { FROM_MALLOC, FROM_HOST_ALLOC, FROM_DEVICE, FROM_HOST_SOURCE } origin_t;

/* One block of storage; the bookkeeping lives apart from it (device memory cannot hold it). */
typedef struct block {
  void *p;
  size_t size;    /* its class's size: what was allocated */
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
static tc_ptrmap_t live;         /* storage handed out: address -> block */
static block_t **lists[NPLACES]; /* per place (allocated on first use): NCLASS free lists */
static block_t *oldest, *newest; /* every free block, least recently freed first */
static bool enabled;             /* between tc_cache_init and tc_cache_fini */
static bool warned_pageable;     /* since tc_cache_init: pinned_or_warn */
static struct {
  size_t cached, cached_host, cached_pinned, cached_device, in_use, peak;
  uint64_t reused, allocated, freed;
} st;

/* Where pageable host blocks come from first (the symmetric heap: init installs it) */
static tc_host_source_t host_source;

void tc_cache_set_host_source(tc_host_source_t source) { host_source = source; }

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
  return place == TCOLL_HOST        ? &st.cached_host
         : place == TC_PLACE_PINNED ? &st.cached_pinned
                                    : &st.cached_device;
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
  if (newest)
    newest->newer = b;
  else
    oldest = b;
  newest = b;
  st.cached += b->size;
  *cached_of(b->place) += b->size;
}

static void list_unlink(block_t *b) {
  block_t **head = &lists[place_index(b->place)][b->cls];
  if (b->prev)
    b->prev->next = b->next;
  else
    *head = b->next;
  if (b->next) b->next->prev = b->prev;
  if (b->older)
    b->older->newer = b->newer;
  else
    oldest = b->newer;
  if (b->newer)
    b->newer->older = b->older;
  else
    newest = b->older;
  st.cached -= b->size;
  *cached_of(b->place) -= b->size;
}

/* TCOLL_SUCCESS when b's fences completed, TCOLL_IN_PROGRESS, or a query's error. */
static int fences_state(const block_t *b) {
  for (int i = 0; i < b->nfence; i++) {
    int q = tc_dev()->event_query(b->fence_dev[i], b->fence_ev[i]);
    if (q != TCOLL_SUCCESS) return q;
  }
  return TCOLL_SUCCESS;
}

/* A free block of the class at place: among the most recently freed few, the first whose fences
 * completed, else the most recent (its next owner waits for it); NULL if none. A fence whose
 * query failed makes its block the one taken, with the failure in *qrc: the allocation reports
 * it (on a GPU, an error of the work last queued on the block). */
static block_t *list_take(int place, int cls, int *qrc) {
  *qrc = TCOLL_SUCCESS;
  block_t **l = lists[place_index(place)];
  block_t *b = l && cls != NO_CLASS ? l[cls] : NULL;
  if (!b) return NULL;
  int seen = 0;
  for (block_t *c = b; c && seen < READY_SCAN; c = c->next, seen++) {
    int q = fences_state(c);
    if (q != TCOLL_IN_PROGRESS) {
      b = c;
      *qrc = q;
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

/* Waits for b's fences (its last owner's copies or kernels) and returns their events to the
 * pool. The first failure is returned (TCOLL_ERR_CUDA naming the call); the events after it are
 * not waited for. */
static int fences_wait(block_t *b) {
  int rc = TCOLL_SUCCESS;
  for (int i = 0; i < b->nfence; i++) {
    if (!rc) rc = tc_dev()->event_sync(b->fence_dev[i], b->fence_ev[i]);
    tc_dev_event_put(b->fence_dev[i], b->fence_ev[i]);
  }
  b->nfence = 0;
  return rc;
}

/* Failures of the backend while giving memory back: the first is kept for a caller that can
 * report it (tcoll_cache_release, an allocation); the others, and all of them where nobody can
 * be told (frees, finalize: f NULL), are logged. */
typedef struct failures {
  int rc;
  char msg[512];
} failures_t;

static void failed(failures_t *f, int rc) {
  if (!rc) return;
  if (f && !f->rc) {
    f->rc = rc;
    snprintf(f->msg, sizeof f->msg, "%s", tc_last_message());
  } else {
    tc_warn("%s (giving storage back to the system)", tc_last_message());
  }
}

static bool backend_current(const block_t *b) {
  return b->origin == FROM_MALLOC || b->origin == FROM_HOST_SOURCE || b->gen == tc_dev_generation();
}

/* Gives b's memory back (waiting for its fences first) and frees its bookkeeping. Backend memory
 * of a backend since shut down went with it. After a failed wait the memory is freed all the
 * same: cudaFree and cudaFreeHost wait for the device themselves. */
static void system_free(block_t *b, failures_t *f) {
  if (backend_current(b)) {
    failed(f, fences_wait(b));
    if (b->origin == FROM_MALLOC)
      free(b->p);
    else if (b->origin == FROM_HOST_SOURCE)
      host_source.free(b->p, b->size); /* (a source gone since: nothing to give back) */
    else if (b->origin == FROM_HOST_ALLOC)
      failed(f, tc_dev()->host_free(b->p));
    else
      failed(f, tc_dev()->free(b->place, b->p));
  }
  free(b);
}

static void free_chain(block_t *b, failures_t *f) {
  while (b) {
    block_t *next = b->next;
    system_free(b, f);
    b = next;
  }
}

static const char *place_name(int place) {
  return place == TCOLL_HOST ? "host" : place == TC_PLACE_PINNED ? "pinned host" : "device";
}

/* Counts the chained victims as given back (mu held). */
static void count_freed_locked(const block_t *victims) {
  for (const block_t *v = victims; v; v = v->next) st.freed++;
}

/* Unlinks every cached block of the host source (mu held), chained on *victims. */
static void evict_host_source_locked(block_t **victims) {
  for (block_t *b = oldest, *newer; b; b = newer) {
    newer = b->newer;
    if (b->origin != FROM_HOST_SOURCE) continue;
    list_unlink(b);
    b->next = *victims;
    *victims = b;
  }
}

/* size bytes from the host source (the symmetric heap); where it is full but the cache holds
 * free blocks of it (of other sizes), those go back to it first and it is asked again. */
static bool host_source_alloc(size_t size, void **p) {
  if (!host_source.alloc) return false;
  if (host_source.alloc(size, p)) return true;
  block_t *victims = NULL;
  pthread_mutex_lock(&mu);
  evict_host_source_locked(&victims);
  count_freed_locked(victims);
  pthread_mutex_unlock(&mu);
  if (!victims) return false;
  free_chain(victims, NULL);
  return host_source.alloc(size, p);
}

/* Whether the backend's page-locked allocation (rc) succeeded; where not, a warning: the block
 * comes from pageable memory instead. Copies between it and a device are then slower (CUDA copies
 * pageable memory through a bounce buffer of its own, synchronously) but correct, so that staging
 * and the layer's mirrors keep working where page-locked memory runs out (a locked-memory limit,
 * memory pressure); the block stays in the cache for its size class like a page-locked one. */
static bool pinned_or_warn(int rc, size_t size) {
  if (rc == TCOLL_SUCCESS) return true;
  /* one warning from tcoll_init to tcoll_finalize (a block per size class would repeat it), the
   * rest at INFO */
  bool first = !__atomic_exchange_n(&warned_pageable, true, __ATOMIC_RELAXED);
  tc_log(first ? TCOLL_LOG_WARN : TCOLL_LOG_INFO,
         "%s (%zu bytes of page-locked host memory for staging: using pageable memory, whose "
         "copies to and from devices are slower)",
         tc_last_message(), size);
  return false;
}

static int system_alloc(int place, int cls, size_t size, block_t **out) {
  block_t *b = calloc(1, sizeof *b);
  if (!b)
    return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate the record of a %zu-byte block", size);
  b->size = size;
  b->place = place;
  b->cls = cls;
  b->gen = tc_dev_generation();
  int rc = TCOLL_SUCCESS;
  if (place >= 0) {
    b->origin = FROM_DEVICE;
    rc = tc_dev_alloc(place, size, &b->p);
  } else if (place == TC_PLACE_PINNED && tc_dev()->host_alloc &&
             pinned_or_warn(tc_dev()->host_alloc(size, &b->p), size)) {
    b->origin = FROM_HOST_ALLOC;
  } else if (place == TCOLL_HOST && host_source_alloc(size, &b->p)) {
    b->origin = FROM_HOST_SOURCE;
  } else {
    b->origin = FROM_MALLOC;
    /* Large pageable blocks on their own pages: the kernel may back them with huge pages. */
    size_t align = size >= ((size_t)2 << 20) ? ((size_t)2 << 20) : 256;
    if (posix_memalign(&b->p, align, size)) {
      b->p = NULL;
      rc = tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %zu bytes of %s memory", size,
                    place_name(place));
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

/* Gives a lent block whose reuse failed with rc back to the system, and returns rc with its
 * message (a further failure while freeing is logged). */
static int drop_lent(block_t *b, int rc) {
  failures_t f = {.rc = rc};
  snprintf(f.msg, sizeof f.msg, "%s", tc_last_message());
  pthread_mutex_lock(&mu);
  tc_ptrmap_del(&live, (uintptr_t)b->p);
  st.in_use -= b->size;
  st.freed++;
  pthread_mutex_unlock(&mu);
  system_free(b, &f);
  return tc_error(rc, "%s", f.msg);
}

/* A cached block of the class, lent, its last owner's work done (waited for if not yet); *out
 * NULL if none is cached. A fence that cannot be queried or waited for is the caller's error. */
static int take_cached(int place, int cls, size_t size, block_t **out) {
  *out = NULL;
  int qrc, rc = TCOLL_SUCCESS;
  pthread_mutex_lock(&mu);
  block_t *b = list_take(place, cls, &qrc);
  if (b && (rc = lend_locked(b))) list_push(b);
  if (b && !rc) st.reused++;
  pthread_mutex_unlock(&mu);
  if (rc) return tc_error(rc, "cannot record a block of %zu bytes", size);
  if (!b) return TCOLL_SUCCESS;
  if (!qrc) qrc = fences_wait(b);
  if (qrc) return drop_lent(b, qrc);
  *out = b;
  return TCOLL_SUCCESS;
}

/* A new block from the system, lent. */
static int grow(int place, int cls, size_t size, size_t n, block_t **out) {
  block_t *b = NULL;
  int rc = system_alloc(place, cls, size, &b);
  if (rc) return rc;
  pthread_mutex_lock(&mu);
  rc = lend_locked(b);
  if (!rc) st.allocated++;
  size_t in_use = st.in_use, cached = st.cached;
  pthread_mutex_unlock(&mu);
  if (rc) {
    system_free(b, NULL);
    return tc_error(rc, "cannot record a block of %zu bytes", size);
  }
  tc_info(
      "cache: allocated %zu bytes of %s memory%s for %zu bytes; %zu bytes in use, %zu cached "
      "(limit %zu)",
      size, place_name(place), place >= 0 ? " on a device" : "", n, in_use, cached,
      tc_cfg.cache_bytes);
  *out = b;
  return TCOLL_SUCCESS;
}

int tc_cache_alloc(int place, size_t n, bool zero, void **p) {
  if (place < TC_PLACE_PINNED || place >= TC_MAX_DEVICES)
    return tc_error(TCOLL_ERR_INTERNAL, "no storage place %d", place);
  size_t size;
  int cls = class_of(n, &size);
  block_t *b = NULL;
  int rc = take_cached(place, cls, size, &b);
  if (!rc && !b) rc = grow(place, cls, size, n, &b);
  if (rc) return rc;
  if (zero && (rc = zero_fill(b, n))) return drop_lent(b, rc);
  *p = b->p;
  return TCOLL_SUCCESS;
}

static block_t *lookup(const void *p) {
  pthread_mutex_lock(&mu);
  block_t *b = tc_ptrmap_get(&live, (uintptr_t)p);
  pthread_mutex_unlock(&mu);
  return b;
}

/* Records an event on (dev, stream) as b's next fence; false if none could be had or recorded
 * (logged: a free tells nobody). */
static bool add_fence(block_t *b, int dev, void *stream) {
  void *ev = NULL;
  int rc = tc_dev_event_get(dev, &ev);
  if (!rc) rc = tc_dev()->event_record(dev, ev, stream);
  if (rc) {
    tc_warn("%s (fencing freed storage: waiting for its stream instead)", tc_last_message());
    if (ev) tc_dev_event_put(dev, ev);
    return false;
  }
  b->fence_dev[b->nfence] = dev;
  b->fence_ev[b->nfence++] = ev;
  return true;
}

/* Fences b on each (devs[i], streams[i]); where no event can be had, waits for the stream now
 * (its failure logged: the block's last uses may then still run, nobody can be told). */
static void fence(block_t *b, int n, const int *devs, void *const *streams) {
  for (int i = 0; i < n; i++) {
    if (b->nfence < MAX_FENCES && add_fence(b, devs[i], streams[i])) continue;
    if (tc_dev()->stream_sync(devs[i], streams[i]))
      tc_warn("%s (waiting for the stream of freed storage)", tc_last_message());
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
  if (enabled && backend_current(b) && b->cls != NO_CLASS && b->size <= tc_cfg.cache_bytes &&
      ensure_lists(b->place) == TCOLL_SUCCESS) {
    list_push(b);
    evict_locked(tc_cfg.cache_bytes, &victims);
  } else {
    b->next = victims;
    victims = b;
  }
  count_freed_locked(victims);
  pthread_mutex_unlock(&mu);
  free_chain(victims, NULL);
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
  free_chain(victims, NULL);
}

void tc_cache_init(void) {
  pthread_mutex_lock(&mu);
  enabled = true;
  __atomic_store_n(&warned_pageable, false, __ATOMIC_RELAXED);
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
  free_chain(victims, NULL); /* finalize goes on: failures are logged */
}

/* ------------------------------------------------------------------ public */

int tcoll_cache_release(void) {
  TC_ENTER("tcoll_cache_release");
  pthread_mutex_lock(&mu);
  block_t *victims = unlink_all_locked();
  pthread_mutex_unlock(&mu);
  failures_t f = {0};
  free_chain(victims, &f); /* every block goes back, the first failure is returned */
  tc_scratch_cleanup();
  return f.rc ? tc_error(f.rc, "%s", f.msg) : TCOLL_SUCCESS;
}

int tcoll_cache_info(tcoll_cache_info_t *info) {
  TC_ENTER("tcoll_cache_info");
  if (!info)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "info is NULL (expected a pointer to fill in)");
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
