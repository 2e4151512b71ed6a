/* A mutex for the short critical sections on every call's path (the registry's): taking and
 * releasing it is one atomic instruction each when no other thread holds it, against about 90
 * instructions for a pthread_mutex_lock / unlock pair through the PLT (callgrind, glibc 2.36).
 * A thread that finds it held spins briefly, then sleeps in the kernel (a futex on Linux) until
 * the holder releases it: the three-state mutex of Drepper's "Futexes Are Tricky".
 * Not recursive; no condition variables wait on it. */
#ifndef TC_LOCK_H
#define TC_LOCK_H

#include <stdbool.h>

typedef struct tc_lock {
  int state; /* 0 free, 1 held, 2 held with possible sleepers */
} tc_lock_t;

#define TC_LOCK_INIT \
  { 0 }

void tc_lock_contended(tc_lock_t *l);
/* One pause of a spin: the processor's hint that this is a wait loop (it yields the pipeline to
 * a sibling hyperthread and saves power); nothing elsewhere. */
static inline void tc_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
void tc_lock_wake(tc_lock_t *l);

static inline void tc_lock(tc_lock_t *l) {
  int free_ = 0;
  if (!__atomic_compare_exchange_n(&l->state, &free_, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    tc_lock_contended(l);
}

static inline void tc_unlock(tc_lock_t *l) {
  if (__atomic_exchange_n(&l->state, 0, __ATOMIC_RELEASE) == 2) tc_lock_wake(l);
}

#endif
