/* The checks every refused call gets in test_argcheck.c and test_badinput.c: its status, a
 * message holding the expected fragment, nothing left pending, no MPI call (test/mpi_count.h:
 * every thread's calls where nothing was pending, else the calling thread's) and, where that is
 * measurable, the heap in use unchanged (test/heap_count.c). */
#ifndef T_REFUSED_H
#define T_REFUSED_H

#include "harness.h"
#include "mpi_count.h"

/* What to check beyond status, message and pending work. */
enum { T_CK_HEAP = 1, T_CK_MPI = 2 };

typedef struct t_refusal {
  int flags;
  size_t pending, heap;
  t_mpi_window_t mpi;
} t_refusal_t;

/* Lets the emulated devices' copy queues finish (their workers free what they ran), so that the
 * heap in use moves only with the call under test. */
static inline void t_quiesce(void) {
  int nd = tcoll_initialized() ? tcoll_device_count() : 0;
  for (int d = 0; d < nd; d++) tcoll_device_synchronize(d);
}

/* Before the call: the heap is read last. */
static inline void t_refusal_open(t_refusal_t *r, int flags) {
  if (flags & T_CK_HEAP) t_quiesce();
  r->flags = flags;
  r->pending = tcoll_pending_count();
  t_mpi_window_open(&r->mpi);
  r->heap = t_heap_in_use();
}

/* A failure reported at file:line (the call's, not this header's). */
#define T_EXPECT_AT(file, line, cond, ...)           \
  do {                                               \
    if (!(cond)) t_fail_at(file, line, __VA_ARGS__); \
  } while (0)

/* After `call` (its text, for messages; made at file:line) returned rc where `status` was
 * expected: the heap is read first. A refused call that succeeded is waited for. */
static inline void t_refusal_close(t_refusal_t *r, const char *file, int line, const char *call,
                                   int rc, int status, const char *needle) {
  size_t heap = t_heap_in_use();
  long mpi = t_mpi_window_calls(&r->mpi);
  const char *m = tcoll_last_error();
  T_EXPECT_AT(file, line, rc == status, "%s returned %s (expected %s): %s", call,
              tcoll_status_string(rc), tcoll_status_string(status), m);
  if (status != TCOLL_SUCCESS)
    T_EXPECT_AT(file, line, t_contains(m, needle), "%s: message \"%s\" lacks \"%s\"", call, m,
                needle);
  size_t pending = tcoll_pending_count();
  T_EXPECT_AT(file, line, pending == r->pending, "%s left %ld buffer(s) pending", call,
              (long)pending - (long)r->pending);
  if (r->flags & T_CK_MPI) T_EXPECT_AT(file, line, mpi == 0, "%s made %ld MPI call(s)", call, mpi);
  if ((r->flags & T_CK_HEAP) && t_heap_measurable())
    T_EXPECT_AT(file, line, heap == r->heap, "%s: the heap in use changed by %ld bytes", call,
                (long)heap - (long)r->heap);
  if (rc == TCOLL_SUCCESS && status != TCOLL_SUCCESS) tcoll_wait_all();
}

/* One call that must return `status` with `needle` in the message; flags as above. */
#define T_CALL_REFUSED(flags, status, call, needle)                           \
  do {                                                                        \
    t_refusal_t t_r_;                                                         \
    t_refusal_open(&t_r_, flags);                                             \
    int t_rc_ = (call);                                                       \
    t_refusal_close(&t_r_, __FILE__, __LINE__, #call, t_rc_, status, needle); \
  } while (0)

#endif
