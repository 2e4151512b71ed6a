/* The work registry: pending output buffers -> their work.
 *
 * Two structures under one lock (DESIGN.md section 3), sharing their entries:
 * - a hash table keyed by buffer base address holds every pending output. The exact-base
 *   questions, most of them, need nothing else: a wait, test or query on a buffer's base finds its
 *   work in O(1), and the wait's pop removes the entry it found without a search;
 * - an ordered index beside it (treaps by address, one of the outputs and one of the inputs that
 *   running work still reads) answers what a hash cannot, in O(log n): which pending buffer
 *   contains a pointer (a wait on a view, once the hash missed), and whether a new output overlaps
 *   a pending output or a read input (TCOLL_ERR_BUSY). Inputs are recorded so that they are
 *   neither freed nor overwritten under MPI.
 * No entry ever moves: a post among n pending buffers costs a few O(log n) descents (its output's
 * insert finds the neighbours it must not overlap on the way), a removal O(1) expected, so a
 * post + wait among 10,000 pending buffers costs little more than among 10 (bench/registry-scale).
 * A post + wait with nothing else pending (a post-wait loop) searches nothing at all: its output
 * goes to its free home slot and, like its input, stands alone in its tree.
 *
 * Per call on the host path: posting takes the registry lock once (outputs keyed and inputs
 * recorded together: tc_registry_add_io), a wait at most twice (finding the work and becoming
 * its driver; popping the entry it found); the work itself takes no lock (see tc_work_claim). */
#ifndef TC_REGISTRY_H
#define TC_REGISTRY_H

#include "work.h"

/* Keys w under each of its buffers; TCOLL_ERR_BUSY (nothing keyed) if one overlaps a pending
 * buffer of other work, TCOLL_ERR_INVALID_ARGUMENT if two of w's own buffers overlap. */
int tc_registry_add(tc_work_t *w);
/* tc_registry_add and tc_registry_claim_inputs (from *next = 0) in one critical section: nothing
 * is recorded if the outputs are refused (*rc); otherwise as tc_registry_claim_inputs. */
tc_work_t *tc_registry_add_io(tc_work_t *w, const tcoll_tensor_t *in, int n, int *next, void **base,
                              int *rc);
/* For tc_work_begin_alone (work.h): tc_registry_quiet_lock takes the registry lock where nothing
 * is pending but entries of waited work (no post can conflict with anything: no TCOLL_ERR_BUSY,
 * no input to wait for) and returns true holding it; else false, holding nothing.
 * tc_registry_quiet_add_io then applies the waited entries' pops, keys w's one output and its one
 * input in and lets go of the lock. */
bool tc_registry_quiet_lock(void);
int tc_registry_quiet_add_io(tc_work_t *w, const tcoll_tensor_t *in);
/* Records that w reads [p, p + n) until it completes: such a buffer is not freed under MPI
 * (tcoll_tensor_free waits) and another collective may not write it (TCOLL_ERR_BUSY). */
int tc_registry_add_read(tc_work_t *w, const void *p, size_t n);
/* Records w's reads of in[*next..n) under one lock. Stops at an input overlapping a pending
 * output of other work and returns that work (referenced, *base its buffer, *next that input:
 * wait for it, then call again); NULL once all are recorded (*rc: whether recording worked). */
tc_work_t *tc_registry_claim_inputs(tc_work_t *w, const tcoll_tensor_t *in, int n, int *next,
                                    void **base, int *rc);
/* Waits (pops) every pending output overlapping [p, p + n); the first error met. */
int tc_wait_writers(const void *p, size_t n);
/* TCOLL_ERR_BUSY, naming `name` and the work, if [p, p + n) overlaps a pending output or an input
 * that running work still reads: for ops that write a buffer outside the registry (local and
 * multi-device ops). Checks only; holds nothing. */
int tc_registry_check_writable(const void *p, size_t n, const char *name);
/* Completes every work that reads any byte of [p, p + n). */
void tc_wait_readers(const void *p, size_t n);
/* Both (tcoll_tensor_free): pops every pending output overlapping [p, p + n) and completes every
 * work reading it, whatever their status; one critical section when there is none. */
void tc_wait_users(const void *p, size_t n);
/* Removes w's entries (w stays alive). */
void tc_registry_remove_entries(tc_work_t *w);
/* Removes whatever entries w still has (undo of a failed call); recycles w unless a waiter
 * still holds it. */
void tc_registry_remove_work(tc_work_t *w);
/* The pending work whose buffer overlaps [p, p + n) (n == 0: contains p), other than self;
 * the work is returned with a reference taken and *base set to its buffer. NULL if none. */
tc_work_t *tc_registry_hold(const void *p, size_t n, const tc_work_t *self, void **base);
/* Pops base's entry if it still belongs to w (the calling thread's current streams then wait for
 * its device outputs: an error if that fails), then drops the reference hold took. */
int tc_registry_release(tc_work_t *w, void *base, bool pop);

/* Up to max works not yet done, each with a reference taken (drop it with
 * tc_registry_release(w, NULL, false)). For the progress thread. */
int tc_registry_snapshot(tc_work_t **works, int max);
/* Describes up to max pending works into buf (for timeout and abort diagnostics). */
void tc_registry_describe_pending(char *buf, size_t len, int max);

/* Completes the work pending on p. seconds > 0 bounds the wait (TCOLL_ERR_TIMEOUT leaves it
 * pending); block == false tests once. TCOLL_SUCCESS if nothing is pending. */
int tc_wait_ptr(const void *p, double seconds, bool block);
/* Completes every pending work of comm. */
void tc_wait_comm(const tcoll_comm_t *comm);
/* Completes everything; the first error met. seconds > 0 bounds each wait (TCOLL_ERR_TIMEOUT
 * leaves the rest pending). */
int tc_wait_everything(double seconds);
size_t tc_registry_count(void);
/* Applies the pops that waits deferred (recycling their works): at finalize, before the pools go.
 */
void tc_registry_flush(void);
/* Logs the unwaited work (count, op, sequence numbers), as finalize does before completing it. */
void tc_registry_report_unwaited(void);
void tc_registry_cleanup(void);

/* Timeouts (wait.c). */
/* After a TCOLL_ERR_TIMEOUT (its message set): logs what is pending and dumps the flight
 * recorder (when loud, aborting or at INFO), and with TCOLL_ON_TIMEOUT=abort ends the job.
 * Returns TCOLL_ERR_TIMEOUT. */
int tc_timeout_diagnose(bool loud);

#endif
