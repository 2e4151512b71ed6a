/* tc_lock_t (lib/base/lock.h), the registry's lock: mutual exclusion under contention, through
 * both the spin and the sleeping path, and a free lock after every release. Built with
 * lib/base/lock.c alone, no MPI. */
#include "../lib/base/lock.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

#define THREADS 4
#define ROUNDS 200000

static tc_lock_t lock = TC_LOCK_INIT;
static long counter; /* plain: only the lock orders the increments */
static int inside;   /* threads inside the critical section now */
static int overlaps;

static void *hammer(void *arg) {
  long id = (long)arg;
  for (long i = 0; i < ROUNDS; i++) {
    tc_lock(&lock);
    if (__atomic_add_fetch(&inside, 1, __ATOMIC_RELAXED) != 1)
      __atomic_add_fetch(&overlaps, 1, __ATOMIC_RELAXED);
    counter++;
    /* now and then hold it long enough that the others give up spinning and sleep */
    if ((i + id) % 5000 == 0) nanosleep(&(struct timespec){0, 200000}, NULL);
    __atomic_sub_fetch(&inside, 1, __ATOMIC_RELAXED);
    tc_unlock(&lock);
  }
  return NULL;
}

int main(void) {
  pthread_t t[THREADS];
  for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, hammer, (void *)i);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  int bad = 0;
  if (counter != (long)THREADS * ROUNDS)
    bad = printf("counter %ld, expected %ld\n", counter, (long)THREADS * ROUNDS);
  if (overlaps) bad = printf("%d critical sections overlapped\n", overlaps);
  if (lock.state != 0)
    bad = printf("lock state %d after the last release, expected 0 (free)\n", lock.state);
  tc_lock(&lock); /* free: taken at once */
  if (lock.state != 1) bad = printf("uncontended lock state %d, expected 1\n", lock.state);
  tc_unlock(&lock);
  if (!bad) printf("tc_lock: %d threads x %d rounds, no overlap\n", THREADS, ROUNDS);
  return bad ? 1 : 0;
}
