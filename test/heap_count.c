/* The heap in use by the calling thread, for the suites' "a refused call allocates nothing"
 * checks.
 *
 * Whole-process counters (mallinfo2) also see the threads of MPI and its transports (MPICH's
 * UCX progress, Open MPI's PMIx), which allocate whenever they like: a check around one call
 * then fails now and then for a reason that is not tcoll's. tcoll's argument checks run on the
 * caller's thread, so the checks count the bytes that the calling thread allocates and frees.
 *
 * The test executables define the C allocation functions (glibc's manual, "Replacing malloc"):
 * definitions in the executable come first in the dynamic linker's lookup order, so the calls
 * of libtcoll, MPI and glibc itself go through them. Each forwards to the next definition in
 * that order, found with dlsym(RTLD_NEXT): glibc's allocator, or valgrind's when it runs the
 * test, so that its checks keep working. Each thread keeps the sum of malloc_usable_size over
 * what it allocated minus what it freed.
 *
 * Under AddressSanitizer, whose allocator must see every call from the process's first
 * instruction on, nothing is replaced: the checks are skipped (t_heap_measurable() is false)
 * and LeakSanitizer reports leaks at exit instead. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "harness.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define T_HEAP_COUNTED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_HEAP_COUNTED 0
#endif
#endif
#ifndef T_HEAP_COUNTED
#define T_HEAP_COUNTED 1
#endif

#if T_HEAP_COUNTED
static void *(*next_malloc)(size_t);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static void (*next_free)(void *);
static void *(*next_memalign)(size_t, size_t);

/* This thread's allocated minus freed bytes. Initial-exec: the executable's own TLS, usable from
 * the first allocation of a thread on. */
static __thread long long thread_bytes __attribute__((tls_model("initial-exec")));

/* dlsym may allocate (its error state) before the next functions are known: those few early
 * allocations come from here and are never freed. */
static _Alignas(16) char early[8192];
static size_t early_used;
static bool in_early(const void *p) {
  return (const char *)p >= early && (const char *)p < early + sizeof early;
}

static void *early_alloc(size_t n) {
  size_t at = (__atomic_fetch_add(&early_used, (n + 15) & ~(size_t)15, __ATOMIC_RELAXED));
  if (at + n > sizeof early) return NULL;
  return early + at;
}

static bool resolve(void) {
  static __thread bool resolving;
  if (next_free) return true;
  if (resolving) return false;
  resolving = true;
  next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  next_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  next_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
  next_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
  void (*f)(void *) = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  resolving = false;
  if (!next_malloc || !next_calloc || !next_realloc || !next_memalign || !f) abort();
  __atomic_store_n(&next_free, f, __ATOMIC_RELEASE);
  return true;
}

static void *counted(void *p) {
  if (p) thread_bytes += (long long)malloc_usable_size(p);
  return p;
}

void *malloc(size_t n) { return resolve() ? counted(next_malloc(n)) : early_alloc(n); }

void *calloc(size_t n, size_t size) {
  if (resolve()) return counted(next_calloc(n, size));
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) return NULL;
  return early_alloc(total); /* static storage: already zero */
}

void free(void *p) {
  if (!p || in_early(p)) return;
  resolve();
  thread_bytes -= (long long)malloc_usable_size(p);
  next_free(p);
}

void *realloc(void *p, size_t n) {
  if (!resolve() || in_early(p)) { /* rare: move an early block to the real heap */
    void *q = resolve() ? malloc(n) : early_alloc(n);
    size_t room =
        p ? (size_t)(early + sizeof early - (const char *)p) : 0; /* the block's size is unknown */
    if (q && p) memcpy(q, p, n < room ? n : room);
    return q;
  }
  long long before = p ? (long long)malloc_usable_size(p) : 0;
  void *q = next_realloc(p, n);
  if (q)
    thread_bytes += (long long)malloc_usable_size(q) - before;
  else if (n == 0)
    thread_bytes -= before; /* realloc(p, 0) freed p */
  return q;
}

void *reallocarray(void *p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(p, total);
}

void *memalign(size_t alignment, size_t n) {
  return resolve() ? counted(next_memalign(alignment, n)) : NULL;
}
void *aligned_alloc(size_t alignment, size_t n) { return memalign(alignment, n); }
void *valloc(size_t n) { return memalign((size_t)sysconf(_SC_PAGESIZE), n); }

void *pvalloc(size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return memalign(page, (n + page - 1) & ~(page - 1));
}

int posix_memalign(void **out, size_t alignment, size_t n) {
  if (alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0) return EINVAL;
  void *p = memalign(alignment, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

/* A volatile read: the compiler takes malloc and free for functions that touch no program
 * variable, and would otherwise reuse a value read before them. */
size_t t_heap_raw(void) { return (size_t) * (volatile long long *)&thread_bytes; }

#else
size_t t_heap_raw(void) { return 0; }
bool t_heap_measurable(void) { return false; }
#endif

/* Storage tcoll keeps for reuse is not a leak: the cache gives it back first, so that what remains
 * is what calls still hold. */
size_t t_heap_in_use(void) {
  tcoll_cache_release();
  return t_heap_raw();
}

const char *t_heap_checker(void) {
  if (!T_HEAP_COUNTED)
    return "AddressSanitizer owns the heap (LeakSanitizer reports leaks at exit)";
  if (getenv("TCOLL_VALGRIND")) return "valgrind owns the heap (memcheck reports leaks at exit)";
  return NULL;
}

#if T_HEAP_COUNTED
/* Another thread allocates 4096 bytes while this one watches its own count. */
static int other_step; /* 1: allocate now; 2: done */
static void *allocate_elsewhere(void *arg) {
  (void)arg;
  while (__atomic_load_n(&other_step, __ATOMIC_ACQUIRE) != 1) sched_yield();
  void *volatile p = malloc(4096);
  __atomic_store_n(&other_step, 2, __ATOMIC_RELEASE);
  return p; /* freed by the watching thread */
}

static bool ignores_other_threads(void) {
  pthread_t th;
  other_step = 0;
  if (pthread_create(&th, NULL, allocate_elsewhere, NULL) != 0) return false;
  size_t h0 = t_heap_in_use(); /* after pthread_create, which allocates on this thread */
  __atomic_store_n(&other_step, 1, __ATOMIC_RELEASE);
  while (__atomic_load_n(&other_step, __ATOMIC_ACQUIRE) != 2) sched_yield();
  bool unchanged = t_heap_in_use() == h0;
  void *other = NULL;
  pthread_join(th, &other);
  free(other); /* another thread's block freed here: this thread's count goes down */
  return unchanged;
}

/* The counter must see this thread's allocations and frees, and nothing of other threads'. */
bool t_heap_measurable(void) {
  static int known = -1;
  if (known < 0) {
    size_t h0 = t_heap_in_use();
    char *volatile p = malloc(4096); /* volatile: the pair must not be optimized away */
    if (p) p[0] = 1;
    bool sees_own = t_heap_in_use() >= h0 + 4096;
    free(p);
    known = sees_own && t_heap_in_use() == h0 && ignores_other_threads();
  }
  return known;
}
#endif
