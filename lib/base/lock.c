/* The slow paths of tc_lock_t (lock.h). */
#include "lock.h"

#include <sched.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

static void sleep_while_held(tc_lock_t *l) {
  syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}
static void wake_one(tc_lock_t *l) {
  syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
#else
/* Without futexes a waiter yields its core and looks again; tc_lock_wake has nothing to do. */
static void sleep_while_held(tc_lock_t *l) {
  (void)l;
  sched_yield();
}
static void wake_one(tc_lock_t *l) { (void)l; }
#endif

/* Critical sections are a few hundred instructions: a short spin usually outlasts one, and
 * costs less than two system calls. */
#define SPINS 100

void tc_lock_contended(tc_lock_t *l) {
  for (int i = 0; i < SPINS; i++) {
    int free_ = 0;
    if (__atomic_load_n(&l->state, __ATOMIC_RELAXED) == 0 &&
        __atomic_compare_exchange_n(&l->state, &free_, 1, false, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED))
      return;
    tc_cpu_relax();
  }
  /* Mark it contended; whoever releases it then wakes a sleeper. Taking it this way leaves it
   * marked 2 even if no one else sleeps: one needless wake call at most. */
  while (__atomic_exchange_n(&l->state, 2, __ATOMIC_ACQUIRE) != 0) sleep_while_held(l);
}

void tc_lock_wake(tc_lock_t *l) { wake_one(l); }
