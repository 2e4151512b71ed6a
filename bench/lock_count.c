/* Counts of mutex lock calls made directly by the code of one chosen shared library (libtcoll),
 * for tcoll-percall. Like alloc_count.c for the allocation functions: the executable defines
 * pthread_mutex_lock / trylock itself, its definitions come first in the dynamic linker's lookup
 * order, and each one counts a call whose return address lies in the watched library's code,
 * then forwards to the next definition (glibc's), found with dlsym(RTLD_NEXT) at load time. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "lock_count.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

typedef int (*lock_fn)(pthread_mutex_t *m);
static lock_fn next_lock, next_trylock;

/* Before main and before any other thread: the first lock call may come from a constructor. */
__attribute__((constructor)) static void resolve_next(void) {
  next_lock = (lock_fn)dlsym(RTLD_NEXT, "pthread_mutex_lock");
  next_trylock = (lock_fn)dlsym(RTLD_NEXT, "pthread_mutex_trylock");
}

static unsigned long long n_locks;
static uintptr_t watch_lo, watch_hi;

static int find_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  const char *name = data;
  if (!info->dlpi_name || !strstr(info->dlpi_name, name)) return 0;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t b = info->dlpi_addr + ph->p_vaddr;
    if (b < lo) lo = b;
    if (b + ph->p_memsz > hi) hi = b + ph->p_memsz;
  }
  if (hi <= lo) return 0;
  watch_lo = lo;
  watch_hi = hi;
  return 1;
}

int bench_lock_watch(const char *name) {
  return dl_iterate_phdr(find_object, (void *)name) ? 0 : -1;
}

unsigned long long bench_lock_count_watched(void) {
  return __atomic_load_n(&n_locks, __ATOMIC_RELAXED);
}

static inline void count_lock(const void *caller) {
  uintptr_t ra = (uintptr_t)caller;
  if (ra >= watch_lo && ra < watch_hi) __atomic_add_fetch(&n_locks, 1, __ATOMIC_RELAXED);
}

int pthread_mutex_lock(pthread_mutex_t *m) {
  count_lock(__builtin_return_address(0));
  if (!next_lock) resolve_next();
  return next_lock(m);
}

int pthread_mutex_trylock(pthread_mutex_t *m) {
  count_lock(__builtin_return_address(0));
  if (!next_trylock) resolve_next();
  return next_trylock(m);
}
