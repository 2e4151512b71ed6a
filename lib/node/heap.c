/* The symmetric heap (see heap.h). */
#include "heap.h"

#include "../mpiglue/mpi_calls.h"
#include "window.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define ALIGN 256
/* The smallest part worth a heap. */
#define MIN_PART ((size_t)64 << 10)

typedef struct span {
  size_t off, len;
} span_t;

static struct {
  MPI_Comm node; /* MPI_COMM_NULL: no heap */
  MPI_Win win;
  int p, me;
  size_t bytes; /* each rank's part */
  char **parts; /* [p]: every rank's part, in this process's addresses */
  uint64_t id;  /* the same on the node's ranks, drawn by its rank 0 (0: none) */
  bool open;    /* handing out storage (a window kept past finalize is not, until reopened) */
  /* this rank's free spans, by offset, never adjacent (merged when freed) */
  pthread_mutex_t mu;
  span_t *free;
  int nfree, cap;
  size_t in_use;
  size_t populated; /* bytes of this rank's part faulted in (from its start) */
} heap = {.node = MPI_COMM_NULL, .win = MPI_WIN_NULL, .mu = PTHREAD_MUTEX_INITIALIZER};

/* ---------------------------------------------------------------- the window */

static bool agree(bool ok) {
  int mine = ok, all = 0;
  return PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, heap.node) == MPI_SUCCESS && all;
}

static uint64_t draw_id(void) {
  uint64_t id = 0;
  if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
    id = ((uint64_t)getpid() << 32) ^ (uint64_t)(tc_now() * 1e9);
  return id ? id : 1;
}

/* The part every rank of the node takes: the smallest TCOLL_SYMMETRIC_BYTES, in pages. */
static size_t agree_bytes(void) {
  unsigned long long mine = tc_g.no_symmetric_heap ? 0 : tc_set.sym_bytes, least = 0;
  if (PMPI_Allreduce(&mine, &least, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, heap.node) != MPI_SUCCESS)
    return 0;
  size_t pg = tc_node_page_size();
  return least < MIN_PART ? 0 : ((size_t)least + pg - 1) / pg * pg;
}

static void forget(void) {
  free(heap.parts);
  free(heap.free);
  heap.parts = NULL;
  heap.free = NULL;
  heap.nfree = heap.cap = 0;
  heap.in_use = heap.populated = 0;
  heap.id = 0;
  heap.open = false;
}

static bool map_parts(char *why, size_t len) {
  heap.parts = calloc((size_t)heap.p, sizeof *heap.parts);
  heap.free = malloc(sizeof *heap.free);
  bool ok = heap.parts && heap.free;
  for (int r = 0; ok && r < heap.p; r++)
    ok = (heap.parts[r] = tc_node_win_piece(heap.win, r, heap.bytes)) != NULL;
  if (!ok) snprintf(why, len, "MPI_Win_shared_query did not give every rank's part (or no memory)");
  return ok;
}

/* Every step agreed by the node's ranks before the next; false (and why) where any refused. */
static bool make(char *why, size_t len) {
  if (!(heap.bytes = agree_bytes())) {
    snprintf(why, len, "TCOLL_SYMMETRIC_BYTES below %zu on some rank, or the drop-in layer",
             MIN_PART);
    return false;
  }
  if (!agree(tc_node_room_for((size_t)heap.p * heap.bytes, why, len))) return false;
  if (!agree(tc_node_win_allocate(heap.node, heap.bytes, &heap.win, why, len))) {
    /* a window some rank lacks cannot be freed (collective): it stays until MPI_Finalize */
    heap.win = MPI_WIN_NULL;
    return false;
  }
  if (!agree(map_parts(why, len))) {
    PMPI_Win_free(&heap.win);
    forget();
    return false;
  }
  heap.id = draw_id();
  PMPI_Bcast(&heap.id, 1, MPI_UINT64_T, 0, heap.node);
  heap.free[0] = (span_t){0, heap.bytes};
  heap.nfree = heap.cap = 1;
  return true;
}

/* The communicator of this rank's node, or MPI_COMM_NULL (the same verdict on every rank). Its
 * ranks are those with this rank's node key (an FNV-1a hash of it, gathered over MPI_COMM_WORLD:
 * MPI_Comm_split by it), then the MPI's shared split of them must keep them all: the shared split
 * of the world alone can give overlapping groups that no collective may use (Open MPI over two
 * network namespaces of one host, tcoll's test of two hosts). */
static MPI_Comm node_comm(char *why, size_t len) {
  uint64_t h = tc_node_key_hash();
  int n = tc_g.world_size, color = tc_g.world_rank, have, all = 0;
  uint64_t *keys = malloc((size_t)n * sizeof *keys);
  have = keys != NULL;
  if (PMPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS || !all ||
      PMPI_Allgather(&h, 1, MPI_UINT64_T, keys, 1, MPI_UINT64_T, MPI_COMM_WORLD) != MPI_SUCCESS) {
    free(keys);
    snprintf(why, len, "no memory, or MPI_Allgather failed");
    return MPI_COMM_NULL;
  }
  for (int r = n - 1; r >= 0; r--)
    if (keys[r] == h) color = r; /* the node's lowest world rank */
  free(keys);
  MPI_Comm same = MPI_COMM_NULL, node = MPI_COMM_NULL;
  int ok = PMPI_Comm_split(MPI_COMM_WORLD, color, tc_g.world_rank, &same) == MPI_SUCCESS;
  /* (errors come back: the window is refused where the MPI has no shared one, osc pt2pt) */
  if (ok) PMPI_Comm_set_errhandler(same, MPI_ERRORS_RETURN);
  int want = 0, got = 0;
  if (ok)
    ok = PMPI_Comm_split_type(same, MPI_COMM_TYPE_SHARED, tc_g.world_rank, MPI_INFO_NULL, &node) ==
         MPI_SUCCESS;
  if (ok) PMPI_Comm_size(same, &want), PMPI_Comm_size(node, &got);
  int mine = ok && want == got;
  all = 0;
  if (same != MPI_COMM_NULL) PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, same);
  if (same != MPI_COMM_NULL) PMPI_Comm_free(&same);
  if (all) return node;
  snprintf(why, len, "MPI's shared split does not keep the %d ranks named like this node's", want);
  if (node != MPI_COMM_NULL) PMPI_Comm_free(&node);
  return MPI_COMM_NULL;
}

void tc_heap_open(void) {
  if (heap.win != MPI_WIN_NULL) { /* kept at the last finalize: every rank kept it */
    heap.open = true;
    tc_info("symmetric heap: the one kept at the last finalize serves again");
    return;
  }
  char why[256] = "";
  if ((heap.node = node_comm(why, sizeof why)) == MPI_COMM_NULL) {
    tc_info("symmetric heap: none (%s)", why);
    return;
  }
  PMPI_Comm_size(heap.node, &heap.p);
  PMPI_Comm_rank(heap.node, &heap.me);
  if (heap.p == 1) { /* no peer could read it: only memory and time (a page fault per page) */
    tc_info("symmetric heap: none (one rank on this node)");
    PMPI_Comm_free(&heap.node);
    heap.node = MPI_COMM_NULL;
    return;
  }
  if (make(why, sizeof why)) {
    heap.open = true;
    tc_info("symmetric heap: %zu bytes per rank, %d ranks on this node", heap.bytes, heap.p);
    return;
  }
  tc_info("symmetric heap: none (%s); tensors tcoll allocates come from ordinary memory",
          why[0] ? why : "another rank could not make it");
  PMPI_Comm_free(&heap.node);
  heap.node = MPI_COMM_NULL;
}

void tc_heap_close(void) {
  if (heap.node == MPI_COMM_NULL) return;
  int fin = 0;
  PMPI_Finalized(&fin);
  pthread_mutex_lock(&heap.mu);
  bool idle = heap.in_use == 0;
  heap.open = false;
  pthread_mutex_unlock(&heap.mu);
  if (fin) return; /* MPI freed its windows already */
  if (heap.win != MPI_WIN_NULL && !agree(idle)) {
    tc_info("symmetric heap kept: storage from it is still in use (valid until MPI_Finalize)");
    return;
  }
  if (heap.win != MPI_WIN_NULL) PMPI_Win_free(&heap.win);
  PMPI_Comm_free(&heap.node);
  forget();
}

/* ---------------------------------------------------------------- handing out */

/* Faults this rank's part in up to end, first touched here (its NUMA node), before any of it is
 * handed out: where the tmpfs cannot hold it (EFAULT, where a touch would raise SIGBUS) the
 * allocation fails instead. Pages are populated as the part is first used, so that a heap nobody
 * uses costs no memory and no time at tcoll_init. */
static bool populate_to(size_t end) {
  if (end <= heap.populated) return true;
  size_t pg = tc_node_page_size(), to = (end + pg - 1) / pg * pg;
  if (to > heap.bytes) to = heap.bytes;
  char why[160];
  if (!tc_node_populate(heap.parts[heap.me] + heap.populated, to - heap.populated, why,
                        sizeof why)) {
    tc_info("symmetric heap: %s; ordinary memory instead", why);
    return false;
  }
  heap.populated = to;
  return true;
}

bool tc_heap_alloc(size_t n, void **p) {
  size_t need = (n ? n + ALIGN - 1 : ALIGN) / ALIGN * ALIGN;
  bool got = false;
  pthread_mutex_lock(&heap.mu);
  for (int i = 0; heap.open && i < heap.nfree && !got; i++) {
    span_t *s = &heap.free[i];
    if (s->len < need) continue;
    if (!populate_to(s->off + need)) break;
    *p = heap.parts[heap.me] + s->off;
    s->off += need;
    s->len -= need;
    if (s->len == 0) memmove(s, s + 1, (size_t)(heap.nfree-- - i - 1) * sizeof *s);
    heap.in_use += need;
    got = true;
  }
  pthread_mutex_unlock(&heap.mu);
  return got;
}

/* Inserts [off, off + len) at i, merged with its neighbours; false without memory. */
static bool insert_span(int i, size_t off, size_t len) {
  span_t *prev = i > 0 ? &heap.free[i - 1] : NULL, *next = i < heap.nfree ? &heap.free[i] : NULL;
  bool left = prev && prev->off + prev->len == off, right = next && off + len == next->off;
  if (left && right) {
    prev->len += len + next->len;
    memmove(next, next + 1, (size_t)(heap.nfree-- - i - 1) * sizeof *next);
  } else if (left) {
    prev->len += len;
  } else if (right) {
    next->off = off;
    next->len += len;
  } else {
    if (heap.nfree == heap.cap) {
      span_t *more = realloc(heap.free, (size_t)heap.cap * 2 * sizeof *more);
      if (!more) return false; /* the span is lost to this heap, nothing worse */
      heap.free = more;
      heap.cap *= 2;
    }
    memmove(&heap.free[i + 1], &heap.free[i], (size_t)(heap.nfree - i) * sizeof *heap.free);
    heap.free[i] = (span_t){off, len};
    heap.nfree++;
  }
  return true;
}

bool tc_heap_free(void *p, size_t n) {
  pthread_mutex_lock(&heap.mu);
  uint64_t off = heap.parts ? tc_heap_offset(p, n) : TC_HEAP_NONE;
  if (off != TC_HEAP_NONE) {
    size_t len = (n ? n + ALIGN - 1 : ALIGN) / ALIGN * ALIGN;
    int i = 0;
    while (i < heap.nfree && heap.free[i].off < off) i++;
    insert_span(i, (size_t)off, len);
    heap.in_use -= len;
  }
  pthread_mutex_unlock(&heap.mu);
  return off != TC_HEAP_NONE;
}

uint64_t tc_heap_offset(const void *p, size_t n) {
  const char *part = heap.parts ? heap.parts[heap.me] : NULL, *c = p;
  if (!part || c < part || c > part + heap.bytes || n > (size_t)(part + heap.bytes - c))
    return TC_HEAP_NONE;
  return (uint64_t)(c - part);
}

/* ---------------------------------------------------------------- a communicator's view */

bool tc_heap_parts(tcoll_comm_t *c, char **parts) {
  uint64_t mine[2] = {heap.open ? heap.id : 0, (uint64_t)heap.me};
  uint64_t *all = malloc((size_t)c->size * sizeof mine);
  int have = all != NULL && parts != NULL, every = 0;
  if (tc_mpi_allreduce(&have, &every, 1, MPI_INT, MPI_MIN, c->ctrl, true) != MPI_SUCCESS ||
      !every) {
    free(all);
    return false;
  }
  bool ok =
      tc_mpi_allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, c->ctrl, true) == MPI_SUCCESS;
  for (int q = 0; ok && q < c->size; q++)
    ok = all[2 * q] != 0 && all[2 * q] == mine[0] && all[2 * q + 1] < (uint64_t)heap.p;
  for (int q = 0; ok && q < c->size; q++) parts[q] = heap.parts[all[2 * q + 1]];
  free(all);
  return ok; /* the same on every rank: each saw every rank's id */
}
