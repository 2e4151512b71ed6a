/* Mutex lock calls (lock and trylock) made directly by one chosen shared library's code. */
#ifndef BENCH_LOCK_COUNT_H
#define BENCH_LOCK_COUNT_H

/* Watches the loaded shared object whose path contains `name`; 0 if found, -1 if not. */
int bench_lock_watch(const char *name);
/* Lock calls whose caller is in the watched library, since the process started. */
unsigned long long bench_lock_count_watched(void);

#endif
