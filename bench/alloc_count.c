/* Heap allocation counting for tcoll-bench.
 *
 * The bench executable defines the C allocation functions itself. Definitions in the
 * executable come first in the dynamic linker's lookup order, so every allocation made by
 * libtcoll, Open MPI or glibc in this process goes through them. Each one counts the call and
 * forwards to glibc's allocator (__libc_malloc and friends), so memory allocated here may be
 * freed by glibc and the other way round. glibc documents this form of replacement
 * ("Replacing malloc" in its manual): malloc, free, calloc and realloc are required; the
 * aligned forms are replaced too so that none bypasses the count.
 *
 * A call whose return address lies in the watched library's code (libtcoll) is also counted
 * as that library's own: calls to malloc go through the PLT by a jump, so the return address
 * is the instruction after the library's call. Allocations MPI makes on tcoll's behalf land in
 * MPI's code and are not counted as tcoll's own. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "alloc_count.h"

#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t alignment, size_t size);

static unsigned long long n_alloc, n_free, n_watched;
static uintptr_t watch_lo, watch_hi; /* [lo, hi): executable segments of the watched library */

static inline void count_alloc(const void *caller) {
  __atomic_add_fetch(&n_alloc, 1, __ATOMIC_RELAXED);
  uintptr_t ra = (uintptr_t)caller;
  if (ra >= watch_lo && ra < watch_hi) __atomic_add_fetch(&n_watched, 1, __ATOMIC_RELAXED);
}

unsigned long long bench_alloc_count(void) { return __atomic_load_n(&n_alloc, __ATOMIC_RELAXED); }
unsigned long long bench_free_count(void) { return __atomic_load_n(&n_free, __ATOMIC_RELAXED); }
unsigned long long bench_alloc_count_watched(void) {
  return __atomic_load_n(&n_watched, __ATOMIC_RELAXED);
}

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

int bench_alloc_watch(const char *name) {
  return dl_iterate_phdr(find_object, (void *)name) ? 0 : -1;
}

/* Each entry point records its own caller (the aligned forms share do_memalign). */
static void *do_memalign(size_t alignment, size_t size, const void *caller) {
  count_alloc(caller);
  return __libc_memalign(alignment, size);
}

void *malloc(size_t size) {
  count_alloc(__builtin_return_address(0));
  return __libc_malloc(size);
}

void *calloc(size_t n, size_t size) {
  count_alloc(__builtin_return_address(0));
  return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size) {
  count_alloc(__builtin_return_address(0));
  return __libc_realloc(p, size);
}

void *reallocarray(void *p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  count_alloc(__builtin_return_address(0));
  return __libc_realloc(p, total);
}

void free(void *p) {
  if (p) __atomic_add_fetch(&n_free, 1, __ATOMIC_RELAXED);
  __libc_free(p);
}

void *memalign(size_t alignment, size_t size) {
  return do_memalign(alignment, size, __builtin_return_address(0));
}

void *aligned_alloc(size_t alignment, size_t size) {
  return do_memalign(alignment, size, __builtin_return_address(0));
}

int posix_memalign(void **out, size_t alignment, size_t size) {
  if (alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0) return EINVAL;
  void *p = do_memalign(alignment, size, __builtin_return_address(0));
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

void *valloc(size_t size) {
  return do_memalign((size_t)sysconf(_SC_PAGESIZE), size, __builtin_return_address(0));
}

void *pvalloc(size_t size) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return do_memalign(page, (size + page - 1) & ~(page - 1), __builtin_return_address(0));
}
