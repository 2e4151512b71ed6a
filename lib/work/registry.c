#include "registry.h"

#include "../comm.h"
#include "../base/ptrmap.h"
#include "../tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
  uintptr_t base, end; /* [base, end); a zero-byte buffer occupies one byte */
  tc_work_t *work;
} entry_t;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static tc_ptrmap_t by_base;  /* base -> work */
/* By base; entries never overlap. A double-ended array: ordered = ordered_buf + head, with free
 * room on both sides, so that removing or inserting near either end moves only the entries on
 * that side (waiting for many buffers in address order, or in reverse, stays linear). */
static entry_t *ordered_buf, *ordered;
static size_t head, nordered, ordered_cap;
/* Buffers that pending work reads (its inputs), until that work completes. Several works may
 * read one buffer, so these overlap: they are kept sorted by base, with the longest read's
 * length, so that the reads overlapping [b, e) all start in [b - longest, e). */
static entry_t *reads;
static size_t nreads, reads_cap, longest_read;
static size_t dead_reads; /* entries of forgotten reads (work NULL), dropped in bulk */

static bool is_done(const tc_work_t *w) { return __atomic_load_n(&w->done, __ATOMIC_ACQUIRE); }

/* First read whose base is > key (reads with equal bases stay in arrival order). */
static size_t reads_upper_bound(uintptr_t key) {
  size_t lo = 0, hi = nreads;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (reads[mid].base <= key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* A read of work still running that overlaps [b, e); reads of done work no longer count. */
static entry_t *read_overlapping(uintptr_t b, uintptr_t e, const tc_work_t *self) {
  uintptr_t from = b > longest_read ? b - longest_read : 0;
  for (size_t i = from ? reads_upper_bound(from - 1) : 0; i < nreads && reads[i].base < e; i++)
    if (reads[i].work && reads[i].work != self && reads[i].end > b && !is_done(reads[i].work)) return &reads[i];
  return NULL;
}

static int cmp_base(const void *a, const void *b) {
  uintptr_t x = ((const entry_t *)a)->base, y = ((const entry_t *)b)->base;
  return (x > y) - (x < y);
}

/* Sorts by base. One call's buffers are usually allocated one after another, so they come in
 * address order or in reverse: one pass, and no qsort (which allocates above 1 KiB). */
static void sort_by_base(entry_t *v, size_t m) {
  if (m < 2) return;
  size_t rising = 0, falling = 0;
  for (size_t i = 1; i < m; i++) {
    rising += v[i - 1].base <= v[i].base;
    falling += v[i - 1].base > v[i].base;
  }
  if (rising == m - 1) return;
  if (falling == m - 1) {
    for (size_t i = 0, j = m - 1; i < j; i++, j--) {
      entry_t t = v[i];
      v[i] = v[j];
      v[j] = t;
    }
    return;
  }
  qsort(v, m, sizeof *v, cmp_base);
}

/* Merges the m sorted entries at fresh into the na sorted entries at dst, giving dst[0, na + m),
 * from the back; fresh must not lie inside dst[0, na + m). Equal bases: fresh after dst's. */
static void merge_sorted(entry_t *dst, size_t na, const entry_t *fresh, size_t m) {
  size_t a = na, f = m, out = na + m;
  while (f > 0) {
    if (a > 0 && dst[a - 1].base > fresh[f - 1].base) dst[--out] = dst[--a];
    else dst[--out] = fresh[--f];
  }
}

/* Drops the forgotten reads, keeping the rest sorted; recomputes the longest. */
static void compact_reads(void) {
  size_t kept = 0, longest = 0;
  for (size_t i = 0; i < nreads; i++) {
    if (!reads[i].work) continue;
    reads[kept++] = reads[i];
    if (reads[i].end - reads[i].base > longest) longest = reads[i].end - reads[i].base;
  }
  nreads = kept;
  longest_read = longest;
  dead_reads = 0;
}

/* Forgets w's reads: each is found by its base (w keeps them) and marked dead; dead entries at
 * the end go at once (the common post-wait cycle leaves no trace), the others are dropped
 * together once they are half the table, so forgetting costs O(log n) amortized. Among reads of
 * one base the newest come last, so the search runs backwards from there. */
static void remove_reads_of(tc_work_t *w) {
  /* Mostly w's reads are the last entries (its inputs, the only ones or the highest addresses):
   * those and dead ones go from the end in one pass; the rest are searched by base below. */
  size_t popped = 0;
  for (; nreads > 0 && (reads[nreads - 1].work == w || !reads[nreads - 1].work); nreads--) {
    if (reads[nreads - 1].work) popped++;
    else dead_reads--;
  }
  for (size_t k = 0; k < w->nread_bases && popped < w->nread_bases; k++) {
    uintptr_t p = w->read_bases[k];
    for (size_t i = reads_upper_bound(p); i-- > 0 && reads[i].base == p;) {
      if (reads[i].work == w) {
        reads[i].work = NULL;
        dead_reads++;
        break;
      }
    }
  }
  w->nread_bases = 0;
  while (nreads > 0 && !reads[nreads - 1].work) {
    nreads--;
    dead_reads--;
  }
  if (nreads == 0) longest_read = 0;
  if (dead_reads > 32 && 2 * dead_reads > nreads) compact_reads();
}

/* Drops a reference (registry lock held); at zero, forgets the work's reads and recycles it. */
static void unref_locked(tc_work_t *w) {
  if (--w->refs > 0) return;
  remove_reads_of(w);
  tc_work_recycle(w);
}

/* First index whose base is >= key. */
static size_t lower_bound(uintptr_t key) {
  size_t lo = 0, hi = nordered;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (ordered[mid].base < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The entry overlapping [b, e), if any: since entries are disjoint and sorted, only the last
 * one starting before e can reach past b. */
static entry_t *overlapping(uintptr_t b, uintptr_t e) {
  size_t i = lower_bound(e);
  if (i == 0) return NULL;
  entry_t *x = &ordered[i - 1];
  return x->end > b ? x : NULL;
}

/* Room for `extra` more entries after the last one. */
static int reserve(size_t extra) {
  if (head + nordered + extra <= ordered_cap) return TCOLL_SUCCESS;
  if (head > 0) { /* reuse the room in front first */
    memmove(ordered_buf, ordered, nordered * sizeof *ordered);
    ordered = ordered_buf;
    head = 0;
  }
  if (nordered + extra > ordered_cap) {
    size_t cap = ordered_cap ? ordered_cap : 64;
    while (cap < nordered + extra) cap *= 2;
    entry_t *p = realloc(ordered_buf, cap * sizeof *p);
    if (!p) return TCOLL_ERR_NO_MEMORY;
    ordered_buf = ordered = p;
    ordered_cap = cap;
  }
  return TCOLL_SUCCESS;
}

/* Inserts x at index i (room reserved), moving the shorter side. */
static void insert_at(size_t i, entry_t x) {
  if (head > 0 && i < nordered / 2) {
    ordered--;
    head--;
    memmove(&ordered[0], &ordered[1], i * sizeof *ordered);
  } else {
    memmove(&ordered[i + 1], &ordered[i], (nordered - i) * sizeof *ordered);
  }
  ordered[i] = x;
  nordered++;
}

static void remove_at(size_t i) {
  tc_ptrmap_del(&by_base, ordered[i].base);
  if (i < nordered / 2) { /* the shorter side moves */
    memmove(&ordered[1], &ordered[0], i * sizeof *ordered);
    ordered++;
    head++;
  } else {
    memmove(&ordered[i], &ordered[i + 1], (nordered - i - 1) * sizeof *ordered);
  }
  if (--nordered == 0) {
    ordered = ordered_buf;
    head = 0;
  }
}

static void remove_entries_of(tc_work_t *w) {
  for (size_t i = nordered; i-- > 0;) {
    if (ordered[i].work == w) {
      remove_at(i);
      w->refs--;
    }
  }
}


/* Why buffer k of w cannot be keyed (a pending output or a running input overlaps it), or 0. */
static int refuse_buffer(const tc_work_t *w, int k, uintptr_t b, uintptr_t e) {
  entry_t *x = overlapping(b, e), *r = !x && w->bufs[k].written ? read_overlapping(b, e, w) : NULL;
  if (!x && !r) return TCOLL_SUCCESS;
  char what[160];
  tc_work_describe(x ? x->work : r->work, what, sizeof what);
  return tc_error(TCOLL_ERR_BUSY, "output buffer %p (%zu bytes) overlaps %s: %s (wait for it first)", w->bufs[k].base,
                  w->bufs[k].nbytes, x ? "a buffer with pending work" : "the input of pending work", what);
}

/* Keys w under each of its buffers. All are checked first, so that a refused call keys nothing;
 * several buffers are sorted and merged in one pass, so that keying n buffers below the pending
 * ones costs O(n log n), not O(n^2). */
int tc_registry_add(tc_work_t *w) {
  size_t m = (size_t)w->nbuf;
  pthread_mutex_lock(&reg_lock);
  int rc = reserve(2 * m) ? tc_error(TCOLL_ERR_NO_MEMORY, "cannot grow the registry") : TCOLL_SUCCESS;
  entry_t *fresh = &ordered[nordered + m]; /* scratch room: the merge fills [nordered, nordered + m) */
  for (size_t k = 0; k < m && !rc; k++) {
    uintptr_t b = (uintptr_t)w->bufs[k].base;
    uintptr_t e = b + (w->bufs[k].nbytes ? w->bufs[k].nbytes : 1);
    rc = refuse_buffer(w, (int)k, b, e);
    fresh[k] = (entry_t){b, e, w};
  }
  if (!rc && m > 1) {
    sort_by_base(fresh, m);
    for (size_t j = 1; j < m && !rc; j++) {
      if (fresh[j].base >= fresh[j - 1].end) continue;
      int k = 0;
      while (k < w->nbuf && (uintptr_t)w->bufs[k].base != fresh[j].base) k++;
      rc = tc_error(TCOLL_ERR_INVALID_ARGUMENT, "output buffer %d (%p) overlaps another output of the same call", k,
                    (void *)fresh[j].base);
    }
  }
  size_t put = 0;
  for (; put < m && !rc; put++)
    if ((rc = tc_ptrmap_put(&by_base, fresh[put].base, w))) rc = tc_error(rc, "cannot grow the registry");
  if (rc) {
    for (size_t j = 0; j + 1 < put; j++) tc_ptrmap_del(&by_base, fresh[j].base); /* the failed put stored nothing */
  } else if (m == 1) {
    insert_at(lower_bound(fresh[0].base), fresh[0]); /* near the front, the room there is used */
  } else {
    merge_sorted(ordered, nordered, fresh, m);
    nordered += m;
  }
  if (!rc) w->refs += (int)m;
  pthread_mutex_unlock(&reg_lock);
  return rc;
}

void tc_registry_remove_entries(tc_work_t *w) {
  pthread_mutex_lock(&reg_lock);
  remove_entries_of(w);
  remove_reads_of(w);
  pthread_mutex_unlock(&reg_lock);
}

/* The entry of other work overlapping [b, e), or NULL (registry lock held). */
static entry_t *foreign_overlapping(uintptr_t b, uintptr_t e, const tc_work_t *self) {
  for (size_t i = lower_bound(e); i-- > 0 && ordered[i].end > b;)
    if (ordered[i].work != self) return &ordered[i];
  return NULL;
}

/* Any entry overlapping [b, e), or NULL (registry lock held). */
static entry_t *overlapping_any(uintptr_t b, uintptr_t e) { return foreign_overlapping(b, e, NULL); }


static int grow_reads(size_t need) {
  if (need <= reads_cap) return TCOLL_SUCCESS;
  size_t cap = reads_cap ? reads_cap : 64;
  while (cap < need) cap *= 2;
  entry_t *q = realloc(reads, cap * sizeof *q);
  if (!q) return TCOLL_ERR_NO_MEMORY;
  reads = q;
  reads_cap = cap;
  return TCOLL_SUCCESS;
}

/* Appends a read after the sorted ones (settle_reads puts the new ones in place), and notes its
 * base in w. */
static int add_read_locked(tc_work_t *w, const void *p, size_t n) {
  if (w->nread_bases == w->read_bases_cap) {
    size_t cap = w->read_bases_cap ? 2 * w->read_bases_cap : 8;
    uintptr_t *q = realloc(w->read_bases, cap * sizeof *q);
    if (!q) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot grow a work's list of inputs");
    w->read_bases = q;
    w->read_bases_cap = cap;
  }
  if (grow_reads(nreads + 1)) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot grow the registry's input table");
  reads[nreads++] = (entry_t){(uintptr_t)p, (uintptr_t)p + n, w};
  w->read_bases[w->nread_bases++] = (uintptr_t)p;
  return TCOLL_SUCCESS;
}


/* Sorts the reads added after the first `sorted` and merges them into those: one call's inputs
 * cost O(n + m log m), wherever they lie in memory. */
static void settle_reads(size_t sorted) {
  size_t m = nreads - sorted;
  for (size_t i = sorted; i < nreads; i++)
    if (reads[i].end - reads[i].base > longest_read) longest_read = reads[i].end - reads[i].base;
  if (m > 1) sort_by_base(&reads[sorted], m);
  if (m == 0 || sorted == 0 || reads[sorted - 1].base <= reads[sorted].base) return; /* already in order */
  if (grow_reads(nreads + m)) { /* no room to merge: sort everything in place */
    qsort(reads, nreads, sizeof *reads, cmp_base);
    return;
  }
  entry_t *fresh = &reads[nreads]; /* the new reads, copied past the end, merge into place */
  memcpy(fresh, &reads[sorted], m * sizeof *reads);
  merge_sorted(reads, sorted, fresh, m);
}

int tc_registry_add_read(tc_work_t *w, const void *p, size_t n) {
  if (!p || !n) return TCOLL_SUCCESS;
  pthread_mutex_lock(&reg_lock);
  size_t sorted = nreads;
  int rc = add_read_locked(w, p, n);
  settle_reads(sorted);
  pthread_mutex_unlock(&reg_lock);
  return rc;
}

tc_work_t *tc_registry_claim_inputs(tc_work_t *w, const tcoll_tensor_t *in, int n, int *next, void **base,
                                     int *rc) {
  *rc = TCOLL_SUCCESS;
  tc_work_t *other = NULL;
  pthread_mutex_lock(&reg_lock);
  size_t sorted = nreads;
  for (; *next < n && !other && !*rc; ++*next) {
    const tcoll_tensor_t *t = &in[*next];
    if (!t->data) continue;
    uintptr_t b = (uintptr_t)t->data;
    size_t nb = tc_nbytes(t);
    entry_t *x = foreign_overlapping(b, b + (nb ? nb : 1), w);
    if (x) {
      other = x->work;
      other->refs++;
      *base = (void *)x->base;
      break; /* this input again once the caller waited for other */
    }
    if (nb) *rc = add_read_locked(w, t->data, nb);
  }
  settle_reads(sorted);
  pthread_mutex_unlock(&reg_lock);
  return other;
}

void tc_wait_readers(const void *p, size_t n) {
  uintptr_t b = (uintptr_t)p, e = b + (n ? n : 1);
  for (;;) {
    pthread_mutex_lock(&reg_lock);
    entry_t *r = read_overlapping(b, e, NULL);
    tc_work_t *w = r ? r->work : NULL;
    if (w) w->refs++;
    pthread_mutex_unlock(&reg_lock);
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    tc_work_progress(w, true, 0.0); /* completing it ends its reads; its result stays pending */
    pthread_mutex_unlock(&w->lock);
    tc_registry_release(w, NULL, false);
  }
}

int tc_wait_writers(const void *p, size_t n) {
  void *base;
  tc_work_t *w;
  while ((w = tc_registry_hold(p, n ? n : 1, NULL, &base))) {
    tc_registry_release(w, base, false);
    int rc = tc_wait_ptr(base, 0.0, true);
    if (rc) return rc;
  }
  return TCOLL_SUCCESS;
}

int tc_registry_check_writable(const void *p, size_t n, const char *name) {
  if (!p) return TCOLL_SUCCESS;
  uintptr_t b = (uintptr_t)p, e = b + (n ? n : 1);
  char what[160] = "";
  pthread_mutex_lock(&reg_lock);
  entry_t *x = overlapping_any(b, e), *r = x ? NULL : read_overlapping(b, e, NULL);
  if (x || r) tc_work_describe(x ? x->work : r->work, what, sizeof what);
  pthread_mutex_unlock(&reg_lock);
  if (!x && !r) return TCOLL_SUCCESS;
  return tc_error(TCOLL_ERR_BUSY, "%s (%p, %zu bytes) is %s pending work: %s (wait for it first)", name, p, n,
                  x ? "the output of" : "an input still read by", what);
}

void tc_registry_remove_work(tc_work_t *w) {
  pthread_mutex_lock(&reg_lock);
  remove_entries_of(w);
  remove_reads_of(w);
  if (w->refs == 0) tc_work_recycle(w);
  pthread_mutex_unlock(&reg_lock);
}

tc_work_t *tc_registry_hold(const void *p, size_t n, const tc_work_t *self, void **base) {
  uintptr_t b = (uintptr_t)p;
  pthread_mutex_lock(&reg_lock);
  tc_work_t *w = n == 0 ? tc_ptrmap_get(&by_base, b) : NULL;
  uintptr_t at = b;
  if (!w) {
    /* Entries overlapping [b, e) are consecutive, ending at the last one starting before e. */
    uintptr_t e = b + (n ? n : 1);
    for (size_t i = lower_bound(e); i-- > 0 && ordered[i].end > b;) {
      if (ordered[i].work != self) {
        w = ordered[i].work;
        at = ordered[i].base;
        break;
      }
    }
  }
  if (w == self) w = NULL;
  if (w) {
    w->refs++;
    *base = (void *)at;
  }
  pthread_mutex_unlock(&reg_lock);
  return w;
}

int tc_registry_release(tc_work_t *w, void *base, bool pop) {
  int rc = TCOLL_SUCCESS;
  pthread_mutex_lock(&reg_lock);
  if (pop && base && tc_ptrmap_get(&by_base, (uintptr_t)base) == w) {
    rc = tc_work_ready_wait(w); /* device outputs: this thread's streams wait for them */
    remove_at(lower_bound((uintptr_t)base));
    w->refs--;
  }
  unref_locked(w);
  pthread_mutex_unlock(&reg_lock);
  return rc;
}

int tc_registry_snapshot(tc_work_t **works, int max) {
  int n = 0;
  pthread_mutex_lock(&reg_lock);
  for (size_t i = 0; i < nordered && n < max; i++) {
    tc_work_t *w = ordered[i].work;
    bool seen = is_done(w);
    for (int k = 0; k < n && !seen; k++) seen = works[k] == w;
    if (seen) continue;
    w->refs++;
    works[n++] = w;
  }
  pthread_mutex_unlock(&reg_lock);
  return n;
}

void tc_registry_describe_pending(char *buf, size_t len, int max) {
  size_t off = 0;
  int shown = 0;
  buf[0] = '\0';
  pthread_mutex_lock(&reg_lock);
  for (size_t i = 0; i < nordered && shown < max && off + 200 < len; i++) {
    tc_work_t *w = ordered[i].work;
    bool first = true;
    for (size_t j = 0; j < i && first; j++) first = ordered[j].work != w;
    if (!first) continue;
    char what[180];
    off += (size_t)snprintf(buf + off, len - off, "%s%s%s", shown ? "; " : "", tc_work_describe(w, what, sizeof what),
                            is_done(w) ? " (complete, not yet waited)" : "");
    shown++;
  }
  pthread_mutex_unlock(&reg_lock);
}

static int report_failure(tc_work_t *w, int rc) {
  if (rc == TCOLL_SUCCESS || rc == TCOLL_IN_PROGRESS) return rc;
  if (rc == TCOLL_ERR_TIMEOUT) return rc; /* the message was set by the timeout path */
  return tc_error(rc, "%s", w->err);
}

/* Pops p's entry at once if its work is already complete (a coalesced work's second and later
 * buffers, or work the progress thread finished): one lock, no work lock. Otherwise returns
 * TCOLL_IN_PROGRESS with the work held (*held, *base its buffer) for the caller to advance. */
static int pop_if_done(const void *p, tc_work_t **held, void **base) {
  uintptr_t b = (uintptr_t)p;
  *held = NULL;
  pthread_mutex_lock(&reg_lock);
  tc_work_t *w = tc_ptrmap_get(&by_base, b);
  if (!w) {
    entry_t *x = overlapping(b, b + 1);
    if (x) {
      w = x->work;
      b = x->base;
    }
  }
  if (!w) {
    pthread_mutex_unlock(&reg_lock);
    return TCOLL_SUCCESS; /* nothing pending */
  }
  if (!is_done(w)) {
    w->refs++;
    *held = w;
    *base = (void *)b;
    pthread_mutex_unlock(&reg_lock);
    return TCOLL_IN_PROGRESS;
  }
  int status = w->status;
  char err[TC_WORK_ERR_LEN];
  if (status) memcpy(err, w->err, sizeof err);
  int ready = tc_work_ready_wait(w); /* device outputs: this thread's streams wait for them */
  remove_at(lower_bound(b));
  unref_locked(w);
  pthread_mutex_unlock(&reg_lock);
  return status ? tc_error(status, "%s", err) : ready;
}

int tc_wait_ptr(const void *p, double seconds, bool block) {
  if (!p) return TCOLL_SUCCESS;
  void *base = NULL;
  tc_work_t *w;
  int fast = pop_if_done(p, &w, &base);
  if (fast != TCOLL_IN_PROGRESS) return fast;
  double deadline = seconds > 0 ? tc_now() + seconds : 0.0;
  pthread_mutex_lock(&w->lock);
  int rc = tc_work_progress(w, block, deadline);
  pthread_mutex_unlock(&w->lock);
  bool finished = rc != TCOLL_IN_PROGRESS && rc != TCOLL_ERR_TIMEOUT;
  if (rc == TCOLL_ERR_TIMEOUT) {
    char what[160];
    tc_error(TCOLL_ERR_TIMEOUT, "%s did not complete within %g s (still pending; a later wait completes it)",
             tc_work_describe(w, what, sizeof what), seconds);
  }
  rc = report_failure(w, rc);
  int ready = tc_registry_release(w, base, finished);
  return rc ? rc : ready;
}

/* The base of some entry matching (comm == NULL: any), or NULL. */
static void *any_pending(const tcoll_comm_t *comm) {
  void *base = NULL;
  pthread_mutex_lock(&reg_lock);
  for (size_t i = 0; i < nordered && !base; i++)
    if (!comm || ordered[i].work->comm == comm) base = (void *)ordered[i].base;
  pthread_mutex_unlock(&reg_lock);
  return base;
}

void tc_wait_comm(const tcoll_comm_t *comm) {
  void *base;
  while ((base = any_pending(comm))) tc_wait_ptr(base, 0.0, true);
}

int tc_wait_everything(double seconds) {
  int first = TCOLL_SUCCESS;
  void *base;
  while ((base = any_pending(NULL))) {
    int rc = tc_wait_ptr(base, seconds, true);
    if (rc == TCOLL_ERR_TIMEOUT) return rc; /* that work stays pending, and so do the rest */
    if (rc && !first) first = rc;
  }
  return first;
}

size_t tc_registry_count(void) {
  pthread_mutex_lock(&reg_lock);
  size_t n = nordered;
  pthread_mutex_unlock(&reg_lock);
  return n;
}

void tc_registry_report_unwaited(void) {
  pthread_mutex_lock(&reg_lock);
  size_t nwork = 0;
  char list[512] = "";
  size_t off = 0;
  for (size_t i = 0; i < nordered; i++) {
    tc_work_t *w = ordered[i].work;
    bool first_of_work = true; /* count each work once, at its first entry */
    for (size_t j = 0; j < i; j++)
      if (ordered[j].work == w) first_of_work = false;
    if (!first_of_work) continue;
    nwork++;
    if (off < sizeof list - 64)
      off += (size_t)snprintf(list + off, sizeof list - off, "%s%s #%llu", nwork > 1 ? ", " : "", w->op,
                              (unsigned long long)w->seq);
  }
  size_t nbuf = nordered;
  pthread_mutex_unlock(&reg_lock);
  if (nbuf)
    tc_warn("at finalize, %zu collective(s) on %zu buffer(s) were never waited: %s. Completing them now; call "
            "tcoll_wait on every output before using it.",
            nwork, nbuf, list);
}

void tc_registry_cleanup(void) {
  pthread_mutex_lock(&reg_lock);
  tc_ptrmap_clear(&by_base);
  free(ordered_buf);
  ordered_buf = ordered = NULL;
  head = nordered = ordered_cap = 0;
  free(reads);
  reads = NULL;
  nreads = reads_cap = longest_read = dead_reads = 0;
  pthread_mutex_unlock(&reg_lock);
}
