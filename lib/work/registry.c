#include "registry.h"

#include "../base/lock.h"
#include "../comm.h"
#include "../tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A pending output buffer, or an input that pending work reads: a node of an ordered index (a
 * treap: a search tree by base, and a heap by random priorities, which keep it balanced with
 * high probability whatever order buffers come and go in: O(log n) per search, O(1) expected
 * restructuring per insert or removal), and for an output the value the hash table keeps under
 * its base. Nodes never move (slabs, below), so the table and the tree point at them, and the
 * lookup that found one removes it without searching again. One cache line each. */
typedef struct node {
  _Alignas(64) uintptr_t base, end; /* [base, end); a zero-byte buffer occupies one byte */
  uintptr_t
      maxend; /* the highest end in its subtree: overlap searches skip subtrees ending before */
  tc_work_t *work;
  struct node *kid[2]; /* lower and higher bases (kid[0] links the free list) */
  struct node *up;     /* NULL at the root */
  uint32_t prio;       /* >= its children's; drawn at each insert (draw_prio) */
  int k;               /* the buffer's index in work->bufs (reads: unused) */
} node_t;

static tc_lock_t reg_lock = TC_LOCK_INIT;

/* Every pending output, by base (disjoint: at most one contains a pointer, and the ones
 * overlapping a range are neighbours), and every input of pending work, by (base, work) (these
 * overlap: several works may read one buffer). */
static node_t *outputs, *reads;
static size_t reads_in_tree; /* nodes in reads */

static bool is_done(const tc_work_t *w) { return __atomic_load_n(&w->done, __ATOMIC_ACQUIRE); }

/* Multiplicative (Fibonacci) hashing: the top bits of x times 2^64 / phi depend on every bit of x
 * below them and spread consecutive or power-of-two-strided addresses evenly; callers take the
 * top bits. One multiply: it runs three times per post + wait. */
static inline uint64_t mix(uint64_t x) { return x * 0x9E3779B97F4A7C15ull; }

/* Treap priorities (registry lock held). Drawn afresh at every insert, not fixed per node: nodes
 * are reused last-freed-first, and a fixed high priority would move the one buffer of a post-wait
 * cycle among pending ones between the root and a leaf every time. */
static uint64_t prio_state;
static inline uint32_t draw_prio(void) { /* a 64-bit LCG's high half (Knuth's MMIX constants) */
  prio_state = prio_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(prio_state >> 32);
}

/* Nodes come from slabs that live until cleanup: no allocation per call in steady state, and a
 * node's address never changes. A spare node is a detached leaf (kid[1] and up NULL) linked
 * through kid[0]: taken, it is one already. */
typedef struct slab {
  struct slab *next;
  node_t nodes[];
} slab_t;
static slab_t *slabs;
static node_t *spare;
static size_t slab_size;

/* At least n spare nodes. */
static int reserve_nodes(size_t n) {
  size_t have = 0;
  for (node_t *x = spare; x && have < n; x = x->kid[0]) have++;
  while (have < n) {
    size_t m = slab_size ? 2 * slab_size : 64;
    if (m > 4096) m = 4096;
    slab_t *s =
        aligned_alloc(_Alignof(node_t), sizeof *s + m * sizeof(node_t)); /* a node a cache line */
    if (!s) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot grow the registry");
    s->next = slabs;
    slabs = s;
    slab_size = m;
    for (size_t i = m; i-- > 0;) {
      node_t *x = &s->nodes[i];
      *x = (node_t){.kid = {spare, NULL}, .prio = draw_prio()};
      spare = x;
    }
    have += m;
  }
  return TCOLL_SUCCESS;
}

/* A spare node (one is reserved) holding [b, e) of w. */
static inline node_t *take_node(uintptr_t b, uintptr_t e, tc_work_t *w, int k) {
  node_t *x = spare;
  spare = x->kid[0];
  x->kid[0] = NULL;
  x->base = b;
  x->end = x->maxend = e;
  x->work = w;
  x->k = k;
  return x;
}

/* Returns a detached leaf. */
static inline void put_node(node_t *x) {
  x->kid[0] = spare;
  spare = x;
}

/* ---- The ordered index: treaps with parent links ----
 * A node goes in where its priority stops the descent from the root, the subtree it displaces
 * split around its key below it (or, after every other key, by a climb from the last node:
 * tree_append); it leaves with its two subtrees zipped together in its place. Either walks the
 * links that rotations would (fewer than two expected), a few instructions a link. aug: the tree
 * keeps maxend (the reads, which overlap one another: their searches skip the subtrees that end
 * too early); the outputs are disjoint and need none. */

static inline uintptr_t max_end(const node_t *t) {
  uintptr_t m = t->end;
  if (t->kid[0] && t->kid[0]->maxend > m) m = t->kid[0]->maxend;
  if (t->kid[1] && t->kid[1]->maxend > m) m = t->kid[1]->maxend;
  return m;
}

/* Recomputes maxend from t up to stop (excluded), bottom-up. */
static void fix_maxend(node_t *t, const node_t *stop) {
  for (; t != stop; t = t->up) t->maxend = max_end(t);
}

/* Whether key (b, w) sorts at or after node t: equal keys (a work reading one buffer twice)
 * keep arrival order. */
static inline bool after(uintptr_t b, const tc_work_t *w, const node_t *t) {
  return b > t->base || (b == t->base && (uintptr_t)w >= (uintptr_t)t->work);
}

/* Inserts x, a detached leaf (take_node). near (or NULL) gets the nodes just before and just
 * after x, NULL where there is none: both lie on x's search path (the last ones the descent left
 * going higher and lower, or the last ones the split hung below x). */
static void tree_insert(node_t **root, node_t *x, bool aug, node_t **near) {
  uint32_t prio = x->prio = draw_prio();
  node_t *up = NULL, **at = root, *t, *lower = NULL, *higher = NULL;
  while ((t = *at) && t->prio >= prio) {
    if (aug && t->maxend < x->end) t->maxend = x->end;
    up = t;
    bool right = aug ? after(x->base, x->work, t) : x->base > t->base; /* outputs: bases differ */
    if (right)
      lower = t;
    else
      higher = t;
    at = &t->kid[right];
  }
  *at = x;
  x->up = up;
  if (!t) { /* a leaf */
    if (near) near[0] = lower, near[1] = higher;
    return;
  }
  node_t **lo = &x->kid[0], **hi = &x->kid[1], *lo_up = x, *hi_up = x;
  do { /* t's subtree split: what sorts before x hangs down x's left, the rest down its right */
    if (aug ? after(x->base, x->work, t) : x->base > t->base) {
      *lo = t;
      t->up = lo_up;
      lo_up = t;
      lo = &t->kid[1];
      t = t->kid[1];
    } else {
      *hi = t;
      t->up = hi_up;
      hi_up = t;
      hi = &t->kid[0];
      t = t->kid[0];
    }
  } while (t);
  *lo = *hi = NULL;
  if (near) near[0] = lo_up != x ? lo_up : lower, near[1] = hi_up != x ? hi_up : higher;
  if (aug) { /* the split nodes lost what went to the other side */
    fix_maxend(lo_up, x);
    fix_maxend(hi_up, x);
    x->maxend = max_end(x);
  }
}

/* Unlinks x (left a detached leaf): its subtrees zipped together by priority in its place. */
static __attribute__((noinline)) void tree_remove_slow(node_t **root, node_t *x, bool aug) {
  node_t *up = x->up, **at = up ? &up->kid[up->kid[1] == x] : root;
  node_t *lo = x->kid[0], *hi = x->kid[1], *zip = up;
  while (lo && hi) {
    if (lo->prio > hi->prio) {
      *at = lo;
      lo->up = zip;
      zip = lo;
      at = &lo->kid[1];
      lo = lo->kid[1];
    } else {
      *at = hi;
      hi->up = zip;
      zip = hi;
      at = &hi->kid[0];
      hi = hi->kid[0];
    }
  }
  node_t *rest = lo ? lo : hi;
  *at = rest;
  if (rest) rest->up = zip;
  x->kid[0] = x->kid[1] = x->up = NULL;
  if (!aug) return;
  fix_maxend(zip, up);      /* the zipped nodes gained the other side */
  for (; up; up = up->up) { /* x's ancestors lost x */
    uintptr_t m = max_end(up);
    if (m == up->maxend) break; /* and theirs stand */
    up->maxend = m;
  }
}

/* Unlinks x; the only node (a post-wait loop) inline. */
static inline void tree_remove(node_t **root, node_t *x, bool aug) {
  if (*root == x && !x->kid[0] && !x->kid[1])
    *root = NULL;
  else
    tree_remove_slow(root, x, aug);
}

/* Inserts x, whose key follows every key in the tree, below last (the tree's last node; NULL: the
 * tree is empty). It climbs the higher spine from its bottom instead of descending from the root:
 * what it climbs past becomes its lower subtree, intact. Buffers that come in address order (a
 * coalesced call's, mostly) go in at O(1) amortized each. */
static void tree_append(node_t **root, node_t *x, node_t *last, bool aug) {
  x->prio = draw_prio();
  node_t *below = NULL, *t = last;
  for (; t && t->prio < x->prio; t = t->up) below = t;
  x->kid[0] = below;
  if (below) below->up = x;
  x->up = t;
  if (t)
    t->kid[1] = x;
  else
    *root = x;
  if (!aug) return;
  x->maxend = max_end(x);
  for (; t && t->maxend < x->end; t = t->up) t->maxend = x->end; /* its ancestors' gained x */
}

static node_t *tree_last(node_t *t) {
  if (t)
    while (t->kid[1]) t = t->kid[1];
  return t;
}

static node_t *tree_first(node_t *t) {
  if (t)
    while (t->kid[0]) t = t->kid[0];
  return t;
}

static node_t *tree_next(node_t *t) {
  if (t->kid[1]) return tree_first(t->kid[1]);
  while (t->up && t->up->kid[1] == t) t = t->up;
  return t->up;
}

static node_t *tree_prev(node_t *t) {
  if (t->kid[0]) {
    for (t = t->kid[0]; t->kid[1];) t = t->kid[1];
    return t;
  }
  while (t->up && t->up->kid[0] == t) t = t->up;
  return t->up;
}

/* The lowest read overlapping [b, e) of work other than skip and not done, or NULL. Subtrees
 * that end at or before b are skipped whole, and so are the higher ones of a node starting at or
 * after e: a descent of O(depth), which only branches (recursing into the lower side) where that
 * side holds a read ending after b, plus the overlapping reads passed over. */
static node_t *find_read_overlap(node_t *t, uintptr_t b, uintptr_t e, const tc_work_t *skip) {
  while (t && t->maxend > b) {
    if (t->base >= e) { /* t and everything above it start too late */
      t = t->kid[0];
      continue;
    }
    node_t *low = t->kid[0];
    if (low && low->maxend > b) {
      node_t *x = find_read_overlap(low, b, e, skip);
      if (x) return x;
    }
    if (t->end > b && t->work != skip && !is_done(t->work)) return t;
    t = t->kid[1];
  }
  return NULL;
}

/* The last pending output starting before e, or NULL. */
static node_t *output_before(uintptr_t e) {
  node_t *best = NULL;
  for (node_t *t = outputs; t;) {
    if (t->base < e) best = t;
    t = t->kid[t->base < e];
  }
  return best;
}

/* The highest pending output of other work than skip overlapping [b, e), or NULL: outputs are
 * disjoint, so those overlapping a range are the ones before its end that end after its start. */
static node_t *output_overlap(uintptr_t b, uintptr_t e, const tc_work_t *skip) {
  for (node_t *x = output_before(e); x && x->end > b; x = tree_prev(x))
    if (x->work != skip) return x;
  return NULL;
}

/* The pending output containing p. */
static node_t *containing(uintptr_t p) {
  node_t *x = output_before(p + 1);
  return x && x->end > p ? x : NULL;
}

/* ---- The hash table: pending outputs by base ----
 * Open addressing with linear probing over a power-of-two number of slots, at most half full,
 * a slot keeping the key beside the node so that probing touches the table alone. Removal shifts
 * the entries behind the freed slot back (backward-shift deletion) rather than leaving a
 * tombstone: buffers come and go by the million, and tombstones would lengthen every probe until
 * a rehash; this way a lookup only ever passes live entries (expected under 1.5 at half load), a
 * miss stops at the first empty slot, and the table never needs cleaning. Grows at half full,
 * shrinks at a sixteenth, never below HASH_MIN slots (16 KiB): a call of many buffers (a coalesced
 * one) and its waits would otherwise grow and shrink the table every time. */
typedef struct slot {
  uintptr_t key;
  node_t *node; /* NULL: empty */
} slot_t;
/* Every table has one slot more, past the last, that is never empty: the slot after a removed
 * one is then tested without wrapping around (the guard sends that case to the full shift). */
static node_t guard;
static slot_t no_slots[3] = {[2] = {0, &guard}}; /* before the first output: lookups find nothing */
static slot_t *slots = no_slots;
static size_t nslots = 2, hash_shift = 63, nout; /* nout: pending outputs (filled slots) */
static size_t hash_high, hash_low;               /* grow above (0: no table yet), shrink below */

static inline size_t home_of(uintptr_t key) { return (size_t)(mix(key) >> hash_shift); }

/* The probe past a filled home slot that holds another key. */
static __attribute__((noinline)) slot_t *hash_probe(uintptr_t key, slot_t *s) {
  for (size_t i = (size_t)(s - slots);;) {
    i = (i + 1) & (nslots - 1);
    if (!slots[i].node) return NULL;
    if (slots[i].key == key) return &slots[i];
  }
}

/* The slot holding key, or NULL; a key at its home slot (the usual case at half load) inline. */
static inline slot_t *hash_find(uintptr_t key) {
  slot_t *s = &slots[home_of(key)];
  if (s->key == key && s->node) return s;
  return s->node ? hash_probe(key, s) : NULL;
}

/* Stores a key not in the table (room reserved). */
static void hash_put(uintptr_t key, node_t *x) {
  size_t i = home_of(key);
  while (slots[i].node) i = (i + 1) & (nslots - 1);
  slots[i] = (slot_t){key, x};
}

#define HASH_MIN 1024

/* Moves the entries to a table of n slots (a power of two, >= HASH_MIN); false if there is no
 * memory. */
static bool rehash(size_t n) {
  slot_t *fresh = calloc(n + 1, sizeof *fresh), *old = slots;
  if (!fresh) return false;
  fresh[n].node = &guard;
  size_t oldn = nslots, shift = 64;
  for (size_t c = n; c > 1; c >>= 1) shift--;
  slots = fresh;
  nslots = n;
  hash_shift = shift;
  hash_high = n / 2;
  hash_low = n > HASH_MIN ? n / 16 : 0;
  for (size_t i = 0; i < oldn; i++)
    if (old[i].node) hash_put(old[i].key, old[i].node);
  if (old != no_slots) free(old);
  return true;
}

/* Room for m more outputs: their nodes, then the table (so that a table means spare nodes: see
 * add_io_alone_locked). */
static int reserve_outputs(size_t m) {
  int rc = reserve_nodes(m);
  if (rc || nout + m <= hash_high) return rc;
  size_t n = nslots < HASH_MIN ? HASH_MIN : nslots;
  while (nout + m > n / 2) n *= 2;
  return rehash(n) ? TCOLL_SUCCESS : tc_error(TCOLL_ERR_NO_MEMORY, "cannot grow the registry");
}

/* Empties slot s, shifting back the entries of its probe run that may sit closer to home. */
static __attribute__((noinline)) void hash_remove_run(slot_t *s) {
  size_t i = (size_t)(s - slots), mask = nslots - 1;
  for (size_t j = (i + 1) & mask; slots[j].node; j = (j + 1) & mask) {
    size_t home = home_of(slots[j].key);
    if (((j - home) & mask) >= ((j - i) & mask)) { /* i lies on the way from its home to j */
      slots[i] = slots[j];
      i = j;
    }
  }
  slots[i].node = NULL;
}

/* Empties slot s; inline when the next slot is empty (no run behind it to shift). */
static inline void hash_remove(slot_t *s) {
  if (s[1].node)
    hash_remove_run(s); /* the last slot's next is the guard: the run wraps around */
  else
    s->node = NULL;
}

/* Removes the output in slot s from both structures (registry lock held). */
static inline void drop_output(slot_t *s) {
  node_t *x = s->node;
  hash_remove(s);
  if (outputs == x && !x->kid[0] && !x->kid[1]) { /* the only one (a post-wait loop) */
    outputs = NULL;
    nout = 0;
    put_node(x);
    return;
  }
  tree_remove_slow(&outputs, x, false);
  put_node(x);
  if (--nout < hash_low) rehash(nslots / 2); /* no memory: the larger table stays */
}

/* Keys [b, e) (buffer k of w) in both structures, unless it overlaps a pending output: the
 * insert's own descent finds its neighbours, the only outputs that could (room is reserved).
 * *last: the last output (NULL: none), kept by the caller as it keys; one that starts after it
 * is appended, its only neighbour being *last (buffers posted in address order: no descent). */
static inline bool key_output(tc_work_t *w, int k, uintptr_t b, uintptr_t e, node_t **last) {
  node_t *x = take_node(b, e, w, k);
  if (!*last || b > (*last)->base) {
    if (*last && (*last)->end > b) {
      put_node(x);
      return false;
    }
    tree_append(&outputs, x, *last, false);
    *last = x;
  } else {
    node_t *near[2];
    tree_insert(&outputs, x, false, near);
    if ((near[0] && near[0]->end > b) || (near[1] && near[1]->base < e)) {
      tree_remove(&outputs, x, false);
      put_node(x);
      return false;
    }
  }
  hash_put(b, x);
  nout++;
  return true;
}

/* ---- Reads ---- */

/* A work's reads: w->read_nodes (work.h: "to forget them fast") holds the node of each read it
 * recorded, as a uintptr_t, so that forgetting one is no search. */
static inline node_t *read_of(const tc_work_t *w, size_t k) { return (node_t *)w->read_nodes[k]; }

/* Forgets w's reads. */
static __attribute__((noinline)) void remove_reads_slow(tc_work_t *w) {
  /* Every read in the tree is w's (a coalesced call alone in flight): the tree goes whole, without
   * restructuring it node by node. */
  bool all = reads_in_tree == w->nread_nodes;
  for (size_t k = 0; k < w->nread_nodes; k++) {
    node_t *x = read_of(w, k);
    if (all)
      x->kid[0] = x->kid[1] = x->up = NULL;
    else
      tree_remove(&reads, x, true);
    put_node(x);
  }
  if (all) reads = NULL;
  reads_in_tree -= w->nread_nodes;
  w->nread_nodes = 0;
}

/* The common case inline: a call's one input, the only read. */
static inline void remove_reads_of(tc_work_t *w) {
  if (w->nread_nodes == 0) return;
  node_t *x = read_of(w, 0);
  if (w->nread_nodes == 1 && reads == x && !x->kid[0] && !x->kid[1]) {
    reads = NULL;
    put_node(x);
    reads_in_tree = 0;
    w->nread_nodes = 0;
    return;
  }
  remove_reads_slow(w);
}

/* A read of work still running that overlaps [b, e); reads of done work no longer count. */
static inline node_t *read_overlapping(uintptr_t b, uintptr_t e, const tc_work_t *self) {
  return find_read_overlap(reads, b, e, self);
}

/* Deferred pops. A wait that completed its work does not take the lock again to pop the entry
 * it found: it queues the buffer (lock-free: a push onto a list that only the registry lock's
 * holder takes, whole) and the next critical section of any thread pops it first, with the
 * reference the waiter held. Every lookup happens after that, so no one ever sees a popped
 * entry: one critical section per wait, and a post-wait cycle takes the lock twice. */
static tc_wbuf_t *pops;

static void sweep_locked(void);

/* The pops queued since the last critical section (registry lock held). */
static inline void apply_pops_locked(void) {
  if (__atomic_load_n(&pops, __ATOMIC_RELAXED)) sweep_locked();
}

static inline void lock_registry(void) {
  tc_lock(&reg_lock);
  apply_pops_locked();
}

static void unlock_registry(void) { tc_unlock(&reg_lock); }

/* Drops a reference (registry lock held); at zero, forgets the work's reads and recycles it. */
static void unref_locked(tc_work_t *w) {
  if (--w->refs > 0) return;
  remove_reads_of(w);
  tc_work_recycle(w);
}

/* Removes the output at base if it still belongs to w (it may have been popped, and the base
 * keyed again by other work, since it was found: the hash tells); whether it did. */
static inline bool unkey_output(const tc_work_t *w, uintptr_t base) {
  slot_t *s = hash_find(base);
  if (!s || s->node->work != w) return false;
  drop_output(s);
  return true;
}

/* Pops the output at base if it still belongs to w, with the reference it held, without the
 * ready-event wait (registry lock held). */
static inline void pop_entry_locked(tc_work_t *w, uintptr_t base) {
  if (unkey_output(w, base)) w->refs--;
}

static __attribute__((noinline)) void sweep_locked(
    void) { /* one call, out of every lock_registry */
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
  if (!__atomic_compare_exchange_n(&b->queued, &no, 1, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    return false;
  tc_wbuf_t *top = __atomic_load_n(&pops, __ATOMIC_RELAXED);
  do b->pop_next = top;
  while (!__atomic_compare_exchange_n(&pops, &top, b, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
  return true;
}

/* The output of other work than self overlapping [b, e), or NULL (registry lock held). */
static node_t *foreign_overlapping(uintptr_t b, uintptr_t e, const tc_work_t *self) {
  return output_overlap(b, e, self);
}

/* Any output overlapping [b, e), or NULL (registry lock held). */
static node_t *overlapping_any(uintptr_t b, uintptr_t e) { return foreign_overlapping(b, e, NULL); }

/* The pending output at p or containing it (a view): the hash answers a base, the ordered index
 * the rest. */
static inline node_t *output_at(uintptr_t p) {
  slot_t *s = hash_find(p);
  return s ? s->node : containing(p);
}

static void remove_entries_of(tc_work_t *w) {
  for (int k = 0; k < w->nbuf; k++) pop_entry_locked(w, (uintptr_t)w->bufs[k].base);
}

/* Why buffer k of w cannot be keyed (a pending output or a running input overlaps it), or 0. */
static int refuse_buffer(const tc_work_t *w, int k, uintptr_t b, uintptr_t e) {
  node_t *x = foreign_overlapping(b, e, w),
         *r = !x && w->bufs[k].written ? read_overlapping(b, e, w) : NULL;
  if (!x && !r) return TCOLL_SUCCESS;
  char what[160];
  tc_work_describe(x ? x->work : r->work, what, sizeof what);
  return tc_error(TCOLL_ERR_BUSY,
                  "output buffer %p (%zu bytes) overlaps %s: %s (wait for it first)",
                  w->bufs[k].base, w->bufs[k].nbytes,
                  x ? "a buffer with pending work" : "the input of pending work", what);
}

static inline uintptr_t end_of(const tc_wbuf_t *buf) {
  return (uintptr_t)buf->base + (buf->nbytes ? buf->nbytes : 1);
}

typedef struct span {
  uintptr_t base, end;
  int k;
} span_t;

static int cmp_span(const void *a, const void *b) {
  const span_t *x = a, *y = b;
  if (x->base != y->base) return (x->base > y->base) - (x->base < y->base);
  return (x->k > y->k) - (x->k < y->k);
}

/* Two of w's buffers overlap (seen at buffer seen): names the one the old merge of the call's
 * buffers by address met first, i.e. the first buffer, by base then index, that starts inside an
 * earlier one, as the lowest index at its base. */
static TC_COLD int same_call_overlap(const tc_work_t *w, int seen) {
  size_t m = (size_t)w->nbuf;
  span_t *v = malloc(m * sizeof *v);
  uintptr_t at = (uintptr_t)w->bufs[seen].base;
  if (v) {
    for (size_t k = 0; k < m; k++)
      v[k] = (span_t){(uintptr_t)w->bufs[k].base, end_of(&w->bufs[k]), (int)k};
    qsort(v, m, sizeof *v, cmp_span);
    for (size_t j = 1; j < m; j++)
      if (v[j].base < v[j - 1].end) {
        at = v[j].base;
        break;
      }
    free(v);
  }
  int k = 0;
  while (k < w->nbuf && (uintptr_t)w->bufs[k].base != at) k++;
  return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                  "output buffer %d (%p) overlaps another output of the same call", k, (void *)at);
}

/* Keys w under each of its buffers (registry lock held). Each is keyed as it passes, by an insert
 * that finds its neighbours on the way; one that overlaps a pending output (of other work: busy;
 * of its own: the call fails once no buffer is busy) or a running input is refused, and a refused
 * call keys nothing. O(m log n) for m buffers among n pending. */
static int add_outputs_locked(tc_work_t *w) {
  size_t m = (size_t)w->nbuf;
  if (m == 0) return TCOLL_SUCCESS;
  int rc = reserve_outputs(m);
  if (rc) return rc;
  int own = -1; /* the first buffer found overlapping one of the call's own */
  node_t *last = tree_last(outputs);
  for (int k = 0; k < (int)m && !rc; k++) {
    uintptr_t b = (uintptr_t)w->bufs[k].base, e = end_of(&w->bufs[k]);
    bool read = w->bufs[k].written && read_overlapping(b, e, w);
    if (!read && key_output(w, k, b, e, &last)) continue; /* the usual case */
    node_t *x = overlapping_any(b, e);
    if (x && x->work == w && own < 0) own = k; /* one of its own: other work may still overlap it */
    rc = refuse_buffer(w, k, b, e);
  }
  if (!rc && own >= 0) rc = same_call_overlap(w, own);
  if (rc) { /* unkeys what was keyed (no reference taken yet) */
    for (size_t k = 0; k < m; k++) unkey_output(w, (uintptr_t)w->bufs[k].base);
    return rc;
  }
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

/* Records that w reads [p, p + n), and notes its node in w (registry lock held). last (or NULL):
 * the last read, kept by a caller recording several; one that sorts after it is appended. */
static int add_read_locked(tc_work_t *w, uintptr_t p, size_t n, node_t **last) {
  if (w->nread_nodes == w->read_nodes_cap) {
    size_t cap = w->read_nodes_cap ? 2 * w->read_nodes_cap : 8;
    uintptr_t *q = realloc(w->read_nodes, cap * sizeof *q);
    if (!q) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot grow a work's list of inputs");
    w->read_nodes = q;
    w->read_nodes_cap = cap;
  }
  if (!spare && reserve_nodes(1))
    return tc_error(TCOLL_ERR_NO_MEMORY, "cannot grow the registry's input table");
  node_t *x = take_node(p, p + n, w, 0);
  if (last && (!*last || after(p, w, *last))) {
    tree_append(&reads, x, *last, true);
    *last = x;
  } else {
    tree_insert(&reads, x, true, NULL);
  }
  w->read_nodes[w->nread_nodes++] = (uintptr_t)x;
  reads_in_tree++;
  return TCOLL_SUCCESS;
}

int tc_registry_add_read(tc_work_t *w, const void *p, size_t n) {
  if (!p || !n) return TCOLL_SUCCESS;
  lock_registry();
  int rc = add_read_locked(w, (uintptr_t)p, n, NULL);
  unlock_registry();
  return rc;
}

/* Records w's reads of in[*next..n) (registry lock held); stops at an input overlapping a pending
 * output of other work and returns that work, referenced (see tc_registry_claim_inputs). others:
 * whether the index may hold outputs of other works (false: no search). */
static tc_work_t *claim_inputs_locked(tc_work_t *w, const tcoll_tensor_t *in, int n, int *next,
                                      void **base, int *rc, bool others) {
  tc_work_t *other = NULL;
  node_t *last = tree_last(reads);
  for (; *next < n && !other && !*rc; ++*next) {
    const tcoll_tensor_t *t = &in[*next];
    if (!t->data) continue;
    uintptr_t b = (uintptr_t)t->data;
    size_t nb = tc_nbytes(t);
    node_t *x = others ? foreign_overlapping(b, b + (nb ? nb : 1), w) : NULL;
    if (x) {
      other = x->work;
      other->refs++;
      *base = (void *)x->base;
      break; /* this input again once the caller waited for other */
    }
    if (nb) *rc = add_read_locked(w, b, nb, &last);
  }
  return other;
}

tc_work_t *tc_registry_claim_inputs(tc_work_t *w, const tcoll_tensor_t *in, int n, int *next,
                                    void **base, int *rc) {
  *rc = TCOLL_SUCCESS;
  lock_registry();
  tc_work_t *other = claim_inputs_locked(w, in, n, next, base, rc, true);
  unlock_registry();
  return other;
}

/* A call's one output and one input while nothing else is pending (a post-wait loop): nothing to
 * search, both trees empty (each node the whole tree, its priority the node's last draw), so is
 * the table (no tombstones: the output's home slot is free), and every node is spare: a table was
 * made after a slab (registry lock held; false: take the general path). */
static inline bool add_io_alone_locked(tc_work_t *w, const tcoll_tensor_t *in, int n) {
  if (outputs || reads || w->nbuf != 1 || n != 1 || !hash_high) return false;
  size_t nb = in->data ? tc_nbytes(in) : 0;
  if (nb && w->nread_nodes >= w->read_nodes_cap) return false;
  uintptr_t b = (uintptr_t)w->bufs[0].base;
  outputs = take_node(b, end_of(&w->bufs[0]), w, 0); /* a detached leaf: the whole tree */
  slots[home_of(b)] = (slot_t){b, outputs};
  nout = 1;
  w->refs++;
  if (nb) {
    uintptr_t p = (uintptr_t)in->data;
    reads = take_node(p, p + nb, w, 0);
    w->read_nodes[w->nread_nodes++] = (uintptr_t)reads;
    reads_in_tree = 1;
  }
  return true;
}

/* tc_registry_add_io's critical section. */
static inline __attribute__((always_inline)) tc_work_t *add_io_locked(tc_work_t *w,
                                                                      const tcoll_tensor_t *in,
                                                                      int n, int *next, void **base,
                                                                      int *rc) {
  *rc = TCOLL_SUCCESS;
  if (add_io_alone_locked(w, in, n)) {
    *next = n;
    return NULL;
  }
  *rc = add_outputs_locked(w);
  /* w's references are the outputs it just keyed (nobody else has seen it yet): when they are
   * all there are, no other work's pending output can be an input (the searches are skipped). */
  return *rc ? NULL : claim_inputs_locked(w, in, n, next, base, rc, nout > (size_t)w->refs);
}

tc_work_t *tc_registry_add_io(tc_work_t *w, const tcoll_tensor_t *in, int n, int *next, void **base,
                              int *rc) {
  lock_registry();
  tc_work_t *other = add_io_locked(w, in, n, next, base, rc);
  unlock_registry();
  return other;
}

/* ---- A post alone (work.h, tc_work_begin_alone) ---- */

/* Whether nothing is pending, entries of waited work aside: every output is queued for its pop and
 * belongs to work that the pop lets go of whole (no other reference: the key's and the waiter's),
 * and the only read is that work's. Then a new call can conflict with nothing, and once the pops
 * are applied both trees are empty (registry lock held). */
static bool quiet_locked(void) {
  if (!hash_high) return false; /* no table yet: the general path makes it */
  tc_wbuf_t *b = __atomic_load_n(&pops, __ATOMIC_ACQUIRE);
  if (!outputs) return !reads && !b;
  if (!b || b->pop_next || outputs->kid[0] || outputs->kid[1]) return false;
  tc_work_t *v = b->owner;
  if (outputs->work != v || outputs->base != (uintptr_t)b->base || v->refs != 2) return false;
  if (!reads) return true;
  return v->nread_nodes == 1 && reads == read_of(v, 0) && !reads->kid[0] && !reads->kid[1];
}

bool tc_registry_quiet_lock(void) {
  tc_lock(&reg_lock);
  if (quiet_locked()) return true;
  tc_unlock(&reg_lock);
  return false;
}

int tc_registry_quiet_add_io(tc_work_t *w, const tcoll_tensor_t *in) {
  apply_pops_locked(); /* then both trees are empty: add_io_alone_locked's case, nothing found */
  int next = 0, rc;
  void *base;
  add_io_locked(w, in, 1, &next, &base, &rc);
  unlock_registry();
  return rc;
}

/* Whether x is its work's first pending output by address (the work's other buffers, through the
 * hash: O(buffers of the work)). */
static bool first_of_work(const node_t *x) {
  const tc_work_t *w = x->work;
  for (int k = 0; k < w->nbuf; k++) {
    uintptr_t b = (uintptr_t)w->bufs[k].base;
    slot_t *s = b < x->base ? hash_find(b) : NULL;
    if (s && s->node->work == w) return false;
  }
  return true;
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
    node_t *r = read_overlapping(b, e, NULL);
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
  node_t *x = overlapping_any(b, e), *r = x ? NULL : read_overlapping(b, e, NULL);
  if (x || r) tc_work_describe(x ? x->work : r->work, what, sizeof what);
  unlock_registry();
  if (!x && !r) return TCOLL_SUCCESS;
  return tc_error(TCOLL_ERR_BUSY, "%s (%p, %zu bytes) is %s pending work: %s (wait for it first)",
                  name, p, n, x ? "the output of" : "an input still read by", what);
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
  slot_t *s = hash_find(b); /* a buffer starting at p overlaps [p, p + n) whatever n */
  node_t *x = s && s->node->work != self ? s->node : foreign_overlapping(b, b + (n ? n : 1), self);
  tc_work_t *w = x ? x->work : NULL;
  if (w) {
    w->refs++;
    *base = (void *)x->base;
  }
  unlock_registry();
  return w;
}

/* Pops the entry at base if it still belongs to w (the hash finds it), then drops the caller's
 * reference (registry lock held). */
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
  for (node_t *x = tree_first(outputs); x && n < max; x = tree_next(x)) {
    tc_work_t *w = x->work;
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
  for (node_t *x = tree_first(outputs); x && shown < max && off + 200 < len; x = tree_next(x)) {
    tc_work_t *w = x->work;
    if (!first_of_work(x)) continue;
    char what[180];
    off += (size_t)snprintf(buf + off, len - off, "%s%s%s", shown ? "; " : "",
                            tc_work_describe(w, what, sizeof what),
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
static TC_COLD int pop_done_locked(node_t *x) {
  tc_work_t *w = x->work;
  int status = w->status;
  char err[TC_WORK_ERR_LEN];
  if (status) memcpy(err, w->err, sizeof err);
  int ready = tc_work_ready_wait(w); /* device outputs: this thread's streams wait for them */
  drop_output(hash_find(x->base));
  unref_locked(w);
  unlock_registry();
  return status ? tc_error(status, "%s", err) : ready;
}

/* The start of a wait, in one critical section: finds the entry at p (the hash) or containing it
 * (a view: the ordered index). Work already complete (a coalesced work's second and later
 * buffers, or work the progress thread finished) is popped at once. Otherwise returns
 * TCOLL_IN_PROGRESS with the work held (*held, *base its entry) and *driving telling whether this
 * thread became its driver. TCOLL_SUCCESS if nothing is pending on p. */
static int begin_wait(const void *p, tc_work_t **held, uintptr_t *base, tc_wbuf_t **buf,
                      bool *driving) {
  uintptr_t b = (uintptr_t)p;
  lock_registry();
  node_t *x = output_at(b);
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
  tc_error(TCOLL_ERR_TIMEOUT,
           "%s did not complete within %g s (still pending; a later wait completes it)",
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
  if (!driving && block)
    driving = tc_work_claim(w, deadline); /* another thread drives it: after it */
  if (driving) {
    rc = tc_work_progress(w, block, deadline);
    tc_work_unclaim(w);
  } else {
    rc = block ? TCOLL_ERR_TIMEOUT : TCOLL_IN_PROGRESS;
  }
  if (rc == TCOLL_SUCCESS) {    /* the usual end, as below */
    rc = tc_work_ready_wait(w); /* device outputs: this thread's streams wait for them */
    if (defer_pop(buf)) return rc;
    tc_registry_release(w, NULL, false);
    return rc;
  }
  bool finished = rc != TCOLL_IN_PROGRESS && rc != TCOLL_ERR_TIMEOUT;
  if (rc == TCOLL_ERR_TIMEOUT) timed_out(w, seconds);
  rc = report_failure(w, rc);
  if (finished) {
    int ready = tc_work_ready_wait(w); /* device outputs: this thread's streams wait for them */
    if (rc == TCOLL_SUCCESS) rc = ready;
    if (defer_pop(buf))
      return rc; /* the entry found at the start, popped by the next critical section */
  }
  tc_registry_release(w, NULL, false);
  return rc;
}

void tc_wait_users(const void *p, size_t n) {
  uintptr_t b = (uintptr_t)p, e = b + (n ? n : 1);
  for (;;) {
    lock_registry();
    node_t *x = overlapping_any(b, e), *r = x ? NULL : read_overlapping(b, e, NULL);
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
  for (node_t *x = tree_first(outputs); x && !base; x = tree_next(x))
    if (!comm || x->work->comm == comm) base = (void *)x->base;
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
  size_t n = nout;
  unlock_registry();
  return n;
}

void tc_registry_report_unwaited(void) {
  lock_registry();
  size_t nwork = 0;
  char list[512] = "";
  size_t off = 0;
  for (node_t *x = tree_first(outputs); x; x = tree_next(x)) {
    tc_work_t *w = x->work;
    if (!first_of_work(x)) continue; /* count each work once, at its first entry */
    nwork++;
    if (off < sizeof list - 64)
      off += (size_t)snprintf(list + off, sizeof list - off, "%s%s #%llu", nwork > 1 ? ", " : "",
                              w->op, (unsigned long long)w->seq);
  }
  size_t nbuf = nout;
  unlock_registry();
  if (nbuf)
    tc_warn(
        "at finalize, %zu collective(s) on %zu buffer(s) were never waited: %s. Completing them "
        "now; call "
        "tcoll_wait on every output before using it.",
        nwork, nbuf, list);
}

void tc_registry_cleanup(void) {
  lock_registry();
  if (slots != no_slots) free(slots);
  slots = no_slots;
  nslots = 2;
  hash_shift = 63;
  nout = hash_high = hash_low = 0;
  outputs = reads = NULL;
  reads_in_tree = 0;
  while (slabs) {
    slab_t *s = slabs;
    slabs = s->next;
    free(s);
  }
  spare = NULL;
  slab_size = 0;
  unlock_registry();
}
