/* Counts of heap allocation calls (malloc, calloc, realloc, the aligned forms) and frees made
 * by the whole process, every thread and library included, since it started; and of the
 * allocation calls made directly by the code of one chosen shared library (the caller's return
 * address lies in that library's executable segment), so that a library's own allocations can
 * be told apart from those of the libraries it calls. */
#ifndef BENCH_ALLOC_COUNT_H
#define BENCH_ALLOC_COUNT_H

#include <stddef.h>

unsigned long long bench_alloc_count(void);
unsigned long long bench_free_count(void);
/* Allocation calls whose caller is in the library set by bench_alloc_watch. */
unsigned long long bench_alloc_count_watched(void);
/* Watches the loaded shared object whose path contains `name`; 0 if found, -1 if not. */
int bench_alloc_watch(const char *name);

#endif
