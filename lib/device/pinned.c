/* The pool of page-locked host buffers that staging copies go through (see pinned.h). */
#include "pinned.h"

#include <stdlib.h>
#include <string.h>

/* Pinned buffers, pooled by power-of-two size class (allocating page-locked memory is slow).
 * A buffer returned while asynchronous copies may still use it waits in `fenced` with one
 * event per stream involved, and joins the pool once those events completed. */
#define MIN_CLASS 12
#define MAX_CLASS 48
#define HEADER 256
#define KEEP 16
#define MAX_FENCES 8

typedef struct pinned {
  struct pinned *next;
  int cls;
  int nfence;
  int fence_dev[MAX_FENCES];
  void *fence_ev[MAX_FENCES];
} pinned_t;
_Static_assert(sizeof(pinned_t) <= HEADER, "pinned header fits");

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pinned_t *pool[MAX_CLASS + 1];
static int pool_n[MAX_CLASS + 1];
static pinned_t *fenced;

/* Page-locked memory from the backend; plain memory when there is no backend. */
static int host_alloc(size_t n, void **p) {
  if (tc_dev()->host_alloc) return tc_dev()->host_alloc(n, p);
  if (posix_memalign(p, HEADER, n)) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %zu bytes", n);
  return TCOLL_SUCCESS;
}

/* What nobody can be told about (a buffer going back, the pool at finalize) is logged. */
static void warn_failed(int rc) {
  if (rc) tc_warn("%s", tc_last_message());
}

static void host_free(void *p) {
  if (tc_dev()->host_free) warn_failed(tc_dev()->host_free(p));
  else free(p);
}

static pinned_t *header_of(void *p) { return (pinned_t *)((char *)p - HEADER); }

static bool fences_done(pinned_t *b) {
  for (int i = 0; i < b->nfence; i++)
    if (tc_dev()->event_query(b->fence_dev[i], b->fence_ev[i]) == TCOLL_IN_PROGRESS) return false;
  return true;
}

static void fences_drop(pinned_t *b, bool wait) {
  for (int i = 0; i < b->nfence; i++) {
    if (wait) warn_failed(tc_dev()->event_sync(b->fence_dev[i], b->fence_ev[i]));
    tc_dev_event_put(b->fence_dev[i], b->fence_ev[i]);
  }
  b->nfence = 0;
}

/* Into the pool, or freed when the class has enough (pool_mu held). */
static pinned_t *pool_add_locked(pinned_t *b) {
  if (pool_n[b->cls] < KEEP) {
    b->next = pool[b->cls];
    pool[b->cls] = b;
    pool_n[b->cls]++;
    return NULL;
  }
  return b; /* caller frees it outside the lock */
}

/* Moves fenced buffers whose copies completed into the pool (pool_mu held). */
static void reclaim_locked(pinned_t **to_free) {
  for (pinned_t **pp = &fenced; *pp;) {
    pinned_t *b = *pp;
    if (fences_done(b)) {
      *pp = b->next;
      fences_drop(b, false);
      pinned_t *x = pool_add_locked(b);
      if (x) {
        x->next = *to_free;
        *to_free = x;
      }
    } else {
      pp = &b->next;
    }
  }
}

static void free_list(pinned_t *b) {
  while (b) {
    pinned_t *next = b->next;
    host_free(b);
    b = next;
  }
}

int tc_pinned_get(size_t n, void **out) {
  int c = MIN_CLASS;
  while (c < MAX_CLASS && ((size_t)1 << c) < n) c++;
  pinned_t *to_free = NULL, *b = NULL, *wait_for = NULL;
  pthread_mutex_lock(&pool_mu);
  if (fenced) reclaim_locked(&to_free);
  b = pool[c];
  if (b) {
    pool[c] = b->next;
    pool_n[c]--;
  } else {
    /* A buffer of this class still in flight is soon free: better than allocating more. */
    for (pinned_t **pp = &fenced; *pp; pp = &(*pp)->next) {
      if ((*pp)->cls == c) {
        wait_for = *pp;
        *pp = wait_for->next;
        break;
      }
    }
  }
  pthread_mutex_unlock(&pool_mu);
  free_list(to_free);
  if (wait_for) {
    fences_drop(wait_for, true);
    b = wait_for;
  }
  if (!b) {
    void *p = NULL;
    int rc = host_alloc(HEADER + ((size_t)1 << c), &p);
    if (rc) return rc;
    b = p;
    b->cls = c;
  }
  b->nfence = 0;
  b->next = NULL;
  *out = (char *)b + HEADER;
  return TCOLL_SUCCESS;
}

void tc_pinned_put(void *p) {
  if (!p) return;
  pinned_t *b = header_of(p);
  pthread_mutex_lock(&pool_mu);
  b = pool_add_locked(b);
  pthread_mutex_unlock(&pool_mu);
  if (b) host_free(b);
}

void tc_pinned_put_after(void *p, int n, const int *devs, void *const *streams) {
  if (!p) return;
  pinned_t *b = header_of(p);
  b->nfence = 0;
  for (int i = 0; i < n; i++) {
    void *ev = NULL;
    int rc = b->nfence < MAX_FENCES ? tc_dev_event_get(devs[i], &ev) : TCOLL_IN_PROGRESS;
    if (!rc) rc = tc_dev()->event_record(devs[i], ev, streams[i]);
    if (!rc) {
      b->fence_dev[b->nfence] = devs[i];
      b->fence_ev[b->nfence++] = ev;
      continue;
    }
    if (rc != TCOLL_IN_PROGRESS) warn_failed(rc); /* a failed event: the wait below replaces it */
    if (ev) tc_dev_event_put(devs[i], ev);
    warn_failed(tc_dev()->stream_sync(devs[i], streams[i])); /* no event to spare: wait now */
  }
  if (b->nfence == 0) {
    tc_pinned_put(p);
    return;
  }
  pthread_mutex_lock(&pool_mu);
  b->next = fenced;
  fenced = b;
  pthread_mutex_unlock(&pool_mu);
}

void tc_pinned_cleanup(void) {
  pthread_mutex_lock(&pool_mu);
  pinned_t *f = fenced;
  fenced = NULL;
  pinned_t *all = NULL;
  for (int c = 0; c <= MAX_CLASS; c++) {
    while (pool[c]) {
      pinned_t *b = pool[c];
      pool[c] = b->next;
      b->next = all;
      all = b;
    }
    pool_n[c] = 0;
  }
  pthread_mutex_unlock(&pool_mu);
  while (f) {
    pinned_t *next = f->next;
    fences_drop(f, true);
    f->next = all;
    all = f;
    f = next;
  }
  free_list(all);
}
