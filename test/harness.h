/* The shared test harness.
 *
 * Every suite runs under mpiexec at several rank counts. main() (harness_main.c) initializes MPI
 * itself, then tcoll, runs the suite in CK_NOFORK mode and sums failures over the ranks. A
 * program with a main of its own (one scenario per process: test_cudamock.c, test_lifetime.c)
 * uses the rest: the expectations, tensors and captured stderr below; it sets t_rank and t_size
 * once MPI runs, and decides its exit status from t_local_failures() (or t_verdict).
 *
 * A failed ck_assert would leave one rank's test early while the others wait in a collective,
 * so tests record failures with T_EXPECT (which never jumps) and the checked teardown
 * t_teardown() compares the failure count across ranks: every rank fails or passes together. */
#ifndef T_HARNESS_H
#define T_HARNESS_H

#include "tcoll.h"

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

extern int t_rank, t_size; /* in MPI_COMM_WORLD */

/* The suite a test program defines. */
Suite *t_suite(void);

void t_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define T_EXPECT(cond, ...)                                  \
  do {                                                       \
    if (!(cond)) t_fail_at(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
/* A tcoll call that must succeed. */
#define T_OK(call)                                                                            \
  do {                                                                                        \
    int t_rc_ = (call);                                                                       \
    T_EXPECT(t_rc_ == TCOLL_SUCCESS, "%s returned %s: %s", #call, tcoll_status_string(t_rc_), \
             tcoll_last_error());                                                             \
  } while (0)
/* A tcoll call that must fail with `status` and a message containing `needle`. */
#define T_FAILS(call, status, needle)                                                          \
  do {                                                                                         \
    int t_rc_ = (call);                                                                        \
    T_EXPECT(t_rc_ == (status), "%s returned %s (expected %s): %s", #call,                     \
             tcoll_status_string(t_rc_), tcoll_status_string(status), tcoll_last_error());     \
    T_EXPECT(t_contains(tcoll_last_error(), needle), "%s: message \"%s\" lacks \"%s\"", #call, \
             tcoll_last_error(), needle);                                                      \
  } while (0)

bool t_contains(const char *haystack, const char *needle);
/* Failures recorded by this rank so far in the current test. */
int t_local_failures(void);

/* Checked fixture: add with tcase_add_checked_fixture(tc, t_setup, t_teardown). */
void t_setup(void);
void t_teardown(void);
/* A TCase with the harness fixture and a timeout suited to oversubscribed MPI. */
TCase *t_tcase(const char *name);

/* ---- tensors ---- */

/* A host tensor of the given shape, allocated by tcoll. */
tcoll_tensor_t t_host(tcoll_dtype_t dt, int ndim, const int64_t *shape);
/* On device (when the suite runs with TCOLL_FAKE_DEVICES and T_DEVICE=1) or host. */
tcoll_tensor_t t_alloc(tcoll_dtype_t dt, int ndim, const int64_t *shape);
/* The device the suite puts tensors on: TCOLL_HOST, or 0 when T_DEVICE is set. */
int t_device(void);
/* Element access through a host copy (works for device tensors too). */
void t_set_all(tcoll_tensor_t *t, double (*f)(int64_t i, void *ctx), void *ctx);
/* Reads the whole tensor as doubles into vals (numel entries). */
void t_read(const tcoll_tensor_t *t, double *vals);
double t_get(const tcoll_tensor_t *t, int64_t i);
/* Counts elements where t differs from f(i) (exactly, or within tol); reports the first ones. */
int t_check_all(const char *what, const tcoll_tensor_t *t, double (*f)(int64_t i, void *ctx),
                void *ctx, double tol);
/* An unallocated descriptor (data NULL) for tcoll to fill in. */
tcoll_tensor_t t_empty(void);

/* ---- a collective left pending on rank 0 ---- */

/* For calls that must not stall behind a collective in flight: with TCOLL_ALGO forcing the ring
 * reduce_scatter, posts one on comm (3000 float32 elements per rank, element i = i % 7) that
 * every rank but 0 then waits for; rank 0 leaves it pending, so beyond 2 ranks its later steps
 * start only when something on rank 0 drives it. */
typedef struct t_pending {
  tcoll_tensor_t x, y;
  tcoll_config_t old; /* the configuration before */
} t_pending_t;
void t_pending_ring(t_pending_t *pr, tcoll_comm_t *comm);
/* Rank 0 waits for it too; every rank checks its block and restores the configuration. */
void t_pending_ring_done(t_pending_t *pr, const char *what);

/* ---- stderr ---- */

/* What the process writes to stderr (fd 2) from t_capture_begin to t_capture_end. */
typedef struct t_capture {
  int saved;
  FILE *file;
} t_capture_t;
t_capture_t t_capture_begin(void);
/* Puts stderr back; the text written meanwhile (at most len - 1 bytes) goes to buf. */
void t_capture_end(t_capture_t *c, char *buf, size_t len);
/* Runs fn(arg) with stderr captured; returns the text (static storage, overwritten by the next
 * call), also copied to stderr for the test log. */
const char *t_capture_stderr(void (*fn)(void *), void *arg);

/* ---- programs with a main of their own ---- */

/* The failures recorded on every rank of MPI_COMM_WORLD, summed; rank 0 prints
 * "NAME at N rank(s): passed" (or FAILED). Returns the exit status: 0, or 1 on a failure. */
int t_verdict(const char *name);

/* ---- heap ---- */

/* The calling thread's heap balance after tcoll's storage cache gave back what it keeps:
 * bytes it allocated minus bytes it freed (test/heap_count.c). Only differences of two
 * readings mean something; other threads' allocations never count. */
size_t t_heap_in_use(void);
/* The same balance, storage the cache keeps included. */
size_t t_heap_raw(void);
/* Whether t_heap_in_use() sees this thread's allocations and frees and ignores other threads'. */
bool t_heap_measurable(void);
/* The checker that owns the heap instead of test/heap_count.c (ASan, valgrind), NULL if none:
 * only then may t_heap_measurable() be false. */
const char *t_heap_checker(void);
/* Fails the test if the heap checks could not fail here without a checker to stand in. */
void t_heap_report(const char *suite);

#endif
