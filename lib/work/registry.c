#include "registry.h"

#include "../base/lock.h"
#include "../comm.h"
#include "../tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
  uintptr_t base, end; /* [base, end); a zero-byte buffer occupies one byte */
  tc_work_t *work;
  int k; /* the buffer's index in work->bufs (reads: unused) */
} entry_t;

static tc_lock_t reg_lock = TC_LOCK_INIT;
/* Every pending output, by base; entries never overlap, so one binary search answers every
 * lookup: the buffer starting at a base, the one containing a pointer, the ones overlapping a
 * range. A double-ended array: ordered = ordered_buf + head, with free
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

/* Deferred pops. A wait that completed its work does not take the lock again to pop the entry
 * it found: it queues the buffer (lock-free: a push onto a list that only the registry lock's
 * holder takes, whole) and the next critical section of any thread pops it first, with the
 * reference the waiter held. Every lookup happens after that, so no one ever sees a popped
 * entry: one critical section per wait, and a post-wait cycle takes the lock twice. */
static tc_wbuf_t *pops;

static void sweep_locked(void);

static inline void lock_registry(void) {
  tc_lock(&reg_lock);
  if (__atomic_load_n(&pops, __ATOMIC_RELAXED)) sweep_locked();
}

static void unlock_registry(void) { tc_unlock(&reg_lock); }

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
  if (nreads == 0) return NULL;
  uintptr_t from = b > longest_read ? b - longest_read : 0;
  for (size_t i = from ? reads_upper_bound(from - 1) : 0; i < nreads && reads[i].base < e; i++)
    if (reads[i].work && reads[i].work != self && reads[i].end > b && !is_done(reads[i].work)) return &reads[i];
  return NULL;
}

static int cmp_base(const void *a, const void *b) {
  uintptr_t x = ((const entry_t *)a)->base, y = ((const entry_t *)b)->base;
  return (x > y) - (x < y);
}

static void insertion_sort(entry_t *v, size_t m) {
  for (size_t i = 1; i < m; i++) {
    entry_t x = v[i];
    size_t k = i;
    for (; k > 0 && v[k - 1].base > x.base; k--) v[k] = v[k - 1];
    v[k] = x;
  }
}

/* Stable merge sort by base (equal bases keep their order); tmp: room for m / 2 entries. */
static void merge_sort(entry_t *v, size_t m, entry_t *tmp) {
  if (m <= 16) {
    insertion_sort(v, m);
    return;
  }
  size_t h = m / 2;
  merge_sort(v, h, tmp);
  merge_sort(v + h, m - h, tmp);
  if (v[h - 1].base <= v[h].base) return; /* the halves are already in order */
  memcpy(tmp, v, h * sizeof *v);
  size_t a = 0, b = h, o = 0;
  while (a < h && b < m) v[o++] = tmp[a].base <= v[b].base ? tmp[a++] : v[b++];
  while (a < h) v[o++] = tmp[a++];
}

/* Sorts by base, stably. One call's buffers are usually allocated one after another, so they come
 * in address order or in reverse: one pass. Otherwise a merge sort in tmp (room for m / 2
 * entries; NULL: qsort, which may allocate, for when no room could be had). */
static void sort_by_base(entry_t *v, size_t m, entry_t *tmp) {
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
  if (tmp) merge_sort(v, m, tmp);
  else qsort(v, m, sizeof *v, cmp_base);
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
static void remove_reads_slow(tc_work_t *w); /* the general case, below */
static inline void remove_reads_of(tc_work_t *w) {
  if (w->nread_bases == 0) return;
  if (w->nread_bases == 1 && reads[nreads - 1].work == w && dead_reads == 0) { /* a call's one input */
    w->nread_bases = 0;
    if (--nreads == 0) longest_read = 0;
    return;
  }
  remove_reads_slow(w);
}

static void remove_reads_slow(tc_work_t *w) {
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
static inline size_t lower_bound(uintptr_t key) {
  if (nordered == 1) return ordered[0].base < key; /* one pending buffer (a post-wait loop) */
  size_t lo = 0, hi = nordered;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (ordered[mid].base < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Moves n entries (none: no call, the common case of one pending buffer). */
static inline void move_entries(entry_t *to, const entry_t *from, size_t n) {
  if (n) memmove(to, from, n * sizeof *to);
}

/* Removes the entry at index i, moving the shorter side. */
static inline void remove_at(size_t i) {
  if (i < nordered / 2) { /* the shorter side moves */
    move_entries(&ordered[1], &ordered[0], i);
    ordered++;
    head++;
  } else {
    move_entries(&ordered[i], &ordered[i + 1], nordered - i - 1);
  }
  if (--nordered == 0) {
    ordered = ordered_buf;
    head = 0;
  }
}

/* Pops the entry at base if it still belongs to w (the index may have moved since it was found:
 * a binary search, no hash), without the ready-event wait (registry lock held). */
static inline void pop_entry_locked(tc_work_t *w, uintptr_t base) {
  size_t i = lower_bound(base);
  if (i < nordered && ordered[i].base == base && ordered[i].work == w) {
    remove_at(i);
    w->refs--;
  }
}

static __attribute__((noinline)) void sweep_locked(void) { /* one call, out of every lock_registry */
  tc_wbuf_t *b = __atomic_exchange_n(&pops, NULL, __ATOMIC_ACQUIRE);
  while (b) {
    tc_wbuf_t *next = b->pop_next; /* b goes with its work if this was its last reference */
    tc_work_t *w = b->owner;
    pop_entry_locked(w, (uintptr_t)b->base);
    unref_locked(w);
    b = next;
  }
}

/* Queues buffer b of w (held by the caller, whose reference goes with it) to be popped; false if
 * another waiter queued it already. The caller touches w no more. */
static bool defer_pop(tc_wbuf_t *b) {
  int no = 0;
  if (!__atomic_compare_exchange_n(&b->queued, &no, 1, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return false;
  tc_wbuf_t *top = __atomic_load_n(&pops, __ATOMIC_RELAXED);
  do b->pop_next = top;
  while (!__atomic_compare_exchange_n(&pops, &top, b, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
  return true;
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
    move_entries(&ordered[0], &ordered[1], i);
  } else {
    move_entries(&ordered[i + 1], &ordered[i], nordered - i);
  }
  ordered[i] = x;
  nordered++;
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

/* Keys w under each of its buffers (registry lock held). All are checked first, so that a refused
 * call keys nothing; several buffers are sorted and merged in one pass, so that keying n buffers
 * below the pending ones costs O(n log n), not O(n^2). */
static int add_outputs_locked(tc_work_t *w) {
  size_t m = (size_t)w->nbuf;
  if (m == 0) return TCOLL_SUCCESS;
  if (reserve(3 * m)) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot grow the registry");
  if (m == 1) { /* one search finds both its neighbours and its place */
    uintptr_t b = (uintptr_t)w->bufs[0].base, e = b + (w->bufs[0].nbytes ? w->bufs[0].nbytes : 1);
    size_t i = lower_bound(b);
    bool busy = (i > 0 && ordered[i - 1].end > b) || (i < nordered && ordered[i].base < e) ||
                (w->bufs[0].written && read_overlapping(b, e, w));
    if (busy) return refuse_buffer(w, 0, b, e);
    insert_at(i, (entry_t){b, e, w, 0}); /* near the front, the room there is used */
    w->refs++;
    return TCOLL_SUCCESS;
  }
  /* Scratch room: the merge fills [nordered, nordered + m); the sort uses what follows fresh. */
  entry_t *fresh = &ordered[nordered + m];
  int rc = TCOLL_SUCCESS;
  bool alone = nordered == 0 && nreads == 0; /* nothing pending to overlap: no searches */
  for (size_t k = 0; k < m && !rc; k++) {
    uintptr_t b = (uintptr_t)w->bufs[k].base;
    uintptr_t e = b + (w->bufs[k].nbytes ? w->bufs[k].nbytes : 1);
    if (!alone) rc = refuse_buffer(w, (int)k, b, e);
    fresh[k] = (entry_t){b, e, w, (int)k};
  }
  if (rc) return rc;
  sort_by_base(fresh, m, fresh + m);
  for (size_t j = 1; j < m; j++) {
    if (fresh[j].base >= fresh[j - 1].end) continue;
    int k = 0;
    while (k < w->nbuf && (uintptr_t)w->bufs[k].base != fresh[j].base) k++;
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "output buffer %d (%p) overlaps another output of the same call", k,
                    (void *)fresh[j].base);
  }
  merge_sorted(ordered, nordered, fresh, m);
  nordered += m;
  w->refs += (int)m;
  return TCOLL_SUCCESS;
}

int tc_registry_add(tc_work_t *w) {
  lock_registry();
  int rc = add_outputs_locked(w);
  unlock_registry();
  return rc;
}

void tc_registry_remove_entries(tc_work_t *w) {
  lock_registry();
  remove_entries_of(w);
  remove_reads_of(w);
  unlock_registry();
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
  reads[nreads++] = (entry_t){(uintptr_t)p, (uintptr_t)p + n, w, 0};
  w->read_bases[w->nread_bases++] = (uintptr_t)p;
  return TCOLL_SUCCESS;
}


/* One read of w, inserted in its place in the sorted table (after the reads of the same base). */
static int add_read_sorted_locked(tc_work_t *w, uintptr_t p, size_t n) {
  size_t at = nreads > 0 && reads[nreads - 1].base > p ? reads_upper_bound(p) : nreads;
  int rc = add_read_locked(w, (const void *)p, n);
  if (rc) return rc;
  if (at < nreads - 1) {
    entry_t x = reads[nreads - 1];
    memmove(&reads[at + 1], &reads[at], (nreads - 1 - at) * sizeof *reads);
    reads[at] = x;
  }
  if (n > longest_read) longest_read = n;
  return TCOLL_SUCCESS;
}

/* Sorts the reads added after the first `sorted` and merges them into those: one call's inputs
 * cost O(n + m log m), wherever they lie in memory. */
static void settle_reads(size_t sorted) {
  size_t m = nreads - sorted;
  if (m == 0) return;
  for (size_t i = sorted; i < nreads; i++)
    if (reads[i].end - reads[i].base > longest_read) longest_read = reads[i].end - reads[i].base;
  bool room = grow_reads(nreads + m) == TCOLL_SUCCESS; /* past the end: the sort's and the merge's scratch */
  if (m > 1) sort_by_base(&reads[sorted], m, room ? &reads[nreads] : NULL);
  if (sorted == 0 || reads[sorted - 1].base <= reads[sorted].base) return; /* already in order */
  if (!room) { /* no room to merge: sort everything in place */
    qsort(reads, nreads, sizeof *reads, cmp_base);
    return;
  }
  entry_t *fresh = &reads[nreads]; /* the new reads, copied past the end, merge into place */
  memcpy(fresh, &reads[sorted], m * sizeof *reads);
  merge_sorted(reads, sorted, fresh, m);
}

int tc_registry_add_read(tc_work_t *w, const void *p, size_t n) {
  if (!p || !n) return TCOLL_SUCCESS;
  lock_registry();
  size_t sorted = nreads;
  int rc = add_read_locked(w, p, n);
  settle_reads(sorted);
  unlock_registry();
  return rc;
}

/* Records w's reads of in[*next..n) (registry lock held); stops at an input overlapping a pending
 * output of other work and returns that work, referenced (see tc_registry_claim_inputs). others:
 * whether the index may hold entries of other works (false: no search). */
static tc_work_t *claim_inputs_locked(tc_work_t *w, const tcoll_tensor_t *in, int n, int *next, void **base, int *rc,
                                      bool others) {
  tc_work_t *other = NULL;
  if (n - *next == 1 && in[*next].data) { /* one input: straight into its place */
    uintptr_t b = (uintptr_t)in[*next].data;
    size_t nb = tc_nbytes(&in[*next]);
    entry_t *x = others ? foreign_overlapping(b, b + (nb ? nb : 1), w) : NULL;
    if (x) {
      other = x->work;
      other->refs++;
      *base = (void *)x->base;
      return other;
    }
    ++*next;
    if (nb) *rc = add_read_sorted_locked(w, b, nb);
    return NULL;
  }
  size_t sorted = nreads;
  for (; *next < n && !other && !*rc; ++*next) {
    const tcoll_tensor_t *t = &in[*next];
    if (!t->data) continue;
    uintptr_t b = (uintptr_t)t->data;
    size_t nb = tc_nbytes(t);
    entry_t *x = others ? foreign_overlapping(b, b + (nb ? nb : 1), w) : NULL;
    if (x) {
      other = x->work;
      other->refs++;
      *base = (void *)x->base;
      break; /* this input again once the caller waited for other */
    }
    if (nb) *rc = add_read_locked(w, t->data, nb);
  }
  settle_reads(sorted);
  return other;
}

tc_work_t *tc_registry_claim_inputs(tc_work_t *w, const tcoll_tensor_t *in, int n, int *next, void **base,
                                     int *rc) {
  *rc = TCOLL_SUCCESS;
  lock_registry();
  tc_work_t *other = claim_inputs_locked(w, in, n, next, base, rc, true);
  unlock_registry();
  return other;
}

/* A call's one output and one input while nothing else is pending (a post-wait loop): nothing to
 * search, both tables empty (registry lock held; false: take the general path). */
static bool add_io_alone_locked(tc_work_t *w, const tcoll_tensor_t *in, int n) {
  if (nordered || nreads || w->nbuf != 1 || n != 1 || ordered_cap == 0) return false; /* room: head is 0 */
  size_t nb = in->data ? tc_nbytes(in) : 0;
  if (nb && (w->nread_bases >= w->read_bases_cap || reads_cap == 0)) return false;
  uintptr_t b = (uintptr_t)w->bufs[0].base;
  ordered[0] = (entry_t){b, b + (w->bufs[0].nbytes ? w->bufs[0].nbytes : 1), w, 0};
  nordered = 1;
  w->refs++;
  if (nb) {
    reads[0] = (entry_t){(uintptr_t)in->data, (uintptr_t)in->data + nb, w, 0};
    nreads = 1;
    longest_read = nb;
    w->read_bases[w->nread_bases++] = (uintptr_t)in->data;
  }
  return true;
}

tc_work_t *tc_registry_add_io(tc_work_t *w, const tcoll_tensor_t *in, int n, int *next, void **base, int *rc) {
  tc_work_t *other = NULL;
  lock_registry();
  if (add_io_alone_locked(w, in, n)) {
    unlock_registry();
    *rc = TCOLL_SUCCESS;
    *next = n;
    return NULL;
  }
  *rc = add_outputs_locked(w);
  /* w's references are the entries it just keyed (nobody else has seen it yet): when they are
   * every entry, no other work's pending output can be an input (the searches are skipped). */
  if (!*rc) other = claim_inputs_locked(w, in, n, next, base, rc, nordered > (size_t)w->refs);
  unlock_registry();
  return other;
}

/* Completes w (held by the caller), once no other thread drives it; its entries stay. */
static void complete_held(tc_work_t *w) {
  tc_work_claim(w, 0.0);
  tc_work_progress(w, true, 0.0);
  tc_work_unclaim(w);
}

void tc_wait_readers(const void *p, size_t n) {
  uintptr_t b = (uintptr_t)p, e = b + (n ? n : 1);
  for (;;) {
    lock_registry();
    entry_t *r = read_overlapping(b, e, NULL);
    tc_work_t *w = r ? r->work : NULL;
    if (w) w->refs++;
    unlock_registry();
    if (!w) return;
    complete_held(w); /* completing it ends its reads; its result stays pending */
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
  lock_registry();
  entry_t *x = overlapping_any(b, e), *r = x ? NULL : read_overlapping(b, e, NULL);
  if (x || r) tc_work_describe(x ? x->work : r->work, what, sizeof what);
  unlock_registry();
  if (!x && !r) return TCOLL_SUCCESS;
  return tc_error(TCOLL_ERR_BUSY, "%s (%p, %zu bytes) is %s pending work: %s (wait for it first)", name, p, n,
                  x ? "the output of" : "an input still read by", what);
}

void tc_registry_remove_work(tc_work_t *w) {
  lock_registry();
  remove_entries_of(w);
  remove_reads_of(w);
  if (w->refs == 0) tc_work_recycle(w);
  unlock_registry();
}

tc_work_t *tc_registry_hold(const void *p, size_t n, const tc_work_t *self, void **base) {
  uintptr_t b = (uintptr_t)p;
  lock_registry();
  entry_t *x = foreign_overlapping(b, b + (n ? n : 1), self);
  tc_work_t *w = x ? x->work : NULL;
  if (w) {
    w->refs++;
    *base = (void *)x->base;
  }
  unlock_registry();
  return w;
}

/* Pops the entry at base if it still belongs to w (the index binary search finds it: it may have
 * moved since it was found), then drops the caller's reference (registry lock held). */
static int release_locked(tc_work_t *w, uintptr_t base, bool pop) {
  int rc = TCOLL_SUCCESS;
  if (pop && base) {
    rc = tc_work_ready_wait(w); /* device outputs: this thread's streams wait for them */
    pop_entry_locked(w, base);
  }
  unref_locked(w);
  return rc;
}

int tc_registry_release(tc_work_t *w, void *base, bool pop) {
  lock_registry();
  int rc = release_locked(w, (uintptr_t)base, pop);
  unlock_registry();
  return rc;
}

int tc_registry_snapshot(tc_work_t **works, int max) {
  int n = 0;
  lock_registry();
  for (size_t i = 0; i < nordered && n < max; i++) {
    tc_work_t *w = ordered[i].work;
    bool seen = is_done(w);
    for (int k = 0; k < n && !seen; k++) seen = works[k] == w;
    if (seen) continue;
    w->refs++;
    works[n++] = w;
  }
  unlock_registry();
  return n;
}

void tc_registry_describe_pending(char *buf, size_t len, int max) {
  size_t off = 0;
  int shown = 0;
  buf[0] = '\0';
  lock_registry();
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
  unlock_registry();
}

static int report_failure(tc_work_t *w, int rc) {
  if (rc == TCOLL_SUCCESS || rc == TCOLL_IN_PROGRESS) return rc;
  if (rc == TCOLL_ERR_TIMEOUT) return rc; /* the message was set by the timeout path */
  return tc_error(rc, "%s", w->err);
}

/* A wait's find, complete already: pops it and lets go of the lock (out of line: the usual wait
 * finds its work pending). */
static TC_COLD int pop_done_locked(entry_t *x) {
  tc_work_t *w = x->work;
  int status = w->status;
  char err[TC_WORK_ERR_LEN];
  if (status) memcpy(err, w->err, sizeof err);
  int ready = tc_work_ready_wait(w); /* device outputs: this thread's streams wait for them */
  remove_at((size_t)(x - ordered));
  unref_locked(w);
  unlock_registry();
  return status ? tc_error(status, "%s", err) : ready;
}

/* The start of a wait, in one critical section: finds the entry containing p. Work already
 * complete (a coalesced work's second and later buffers, or work the progress thread finished) is
 * popped at once. Otherwise returns TCOLL_IN_PROGRESS with the work held (*held, *base its entry)
 * and *driving telling whether this thread became its driver. TCOLL_SUCCESS if nothing is
 * pending on p. */
static int begin_wait(const void *p, tc_work_t **held, uintptr_t *base, tc_wbuf_t **buf, bool *driving) {
  uintptr_t b = (uintptr_t)p;
  lock_registry();
  entry_t *x = overlapping(b, b + 1);
  if (!x) {
    unlock_registry();
    return TCOLL_SUCCESS;
  }
  tc_work_t *w = x->work;
  if (!is_done(w)) {
    w->refs++;
    *held = w;
    *base = x->base;
    *buf = &w->bufs[x->k];
    *driving = tc_work_try_claim(w);
    unlock_registry();
    return TCOLL_IN_PROGRESS;
  }
  return pop_done_locked(x);
}

static TC_COLD void timed_out(const tc_work_t *w, double seconds) {
  char what[160];
  tc_error(TCOLL_ERR_TIMEOUT, "%s did not complete within %g s (still pending; a later wait completes it)",
           tc_work_describe(w, what, sizeof what), seconds);
}

int tc_wait_ptr(const void *p, double seconds, bool block) {
  if (!p) return TCOLL_SUCCESS;
  tc_work_t *w = NULL;
  uintptr_t base = 0;
  tc_wbuf_t *buf = NULL;
  bool driving = false;
  int rc = begin_wait(p, &w, &base, &buf, &driving);
  if (rc != TCOLL_IN_PROGRESS) return rc;
  double deadline = seconds > 0 ? tc_now() + seconds : 0.0;
  if (!driving && block) driving = tc_work_claim(w, deadline); /* another thread drives it: after it */
  if (driving) {
    rc = tc_work_progress(w, block, deadline);
    tc_work_unclaim(w);
  } else {
    rc = block ? TCOLL_ERR_TIMEOUT : TCOLL_IN_PROGRESS;
  }
  bool finished = rc != TCOLL_IN_PROGRESS && rc != TCOLL_ERR_TIMEOUT;
  if (rc == TCOLL_ERR_TIMEOUT) timed_out(w, seconds);
  rc = report_failure(w, rc);
  if (finished) {
    int ready = tc_work_ready_wait(w); /* device outputs: this thread's streams wait for them */
    if (rc == TCOLL_SUCCESS) rc = ready;
    if (defer_pop(buf)) return rc; /* the entry found at the start, popped by the next critical section */
  }
  tc_registry_release(w, NULL, false);
  return rc;
}

void tc_wait_users(const void *p, size_t n) {
  uintptr_t b = (uintptr_t)p, e = b + (n ? n : 1);
  for (;;) {
    lock_registry();
    entry_t *x = overlapping_any(b, e), *r = x ? NULL : read_overlapping(b, e, NULL);
    tc_work_t *w = x ? x->work : r ? r->work : NULL;
    uintptr_t at = x ? x->base : 0;
    if (w && !x) w->refs++;
    unlock_registry();
    if (!w) return;
    if (x) {
      tc_wait_ptr((void *)at, 0.0, true); /* pops it, whatever its status */
    } else {
      complete_held(w);
      tc_registry_release(w, NULL, false);
    }
  }
}

/* The base of some entry matching (comm == NULL: any), or NULL. */
static void *any_pending(const tcoll_comm_t *comm) {
  void *base = NULL;
  lock_registry();
  for (size_t i = 0; i < nordered && !base; i++)
    if (!comm || ordered[i].work->comm == comm) base = (void *)ordered[i].base;
  unlock_registry();
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

void tc_registry_flush(void) {
  lock_registry();
  unlock_registry();
}

size_t tc_registry_count(void) {
  lock_registry();
  size_t n = nordered;
  unlock_registry();
  return n;
}

void tc_registry_report_unwaited(void) {
  lock_registry();
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
  unlock_registry();
  if (nbuf)
    tc_warn("at finalize, %zu collective(s) on %zu buffer(s) were never waited: %s. Completing them now; call "
            "tcoll_wait on every output before using it.",
            nwork, nbuf, list);
}

void tc_registry_cleanup(void) {
  lock_registry();
  free(ordered_buf);
  ordered_buf = ordered = NULL;
  head = nordered = ordered_cap = 0;
  free(reads);
  reads = NULL;
  nreads = reads_cap = longest_read = dead_reads = 0;
  unlock_registry();
}
