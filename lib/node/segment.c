/* Node-shared segments (see segment.h). */
#include "segment.h"

#include "../base/cores.h"
#include "../drive.h"
#include "../mpiglue/mpi_calls.h"
#include "../mpiglue/mpi_impl.h"
#include "heap.h"
#include "hier.h"
#include "window.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The smallest area worth a segment: the header and two 4 KiB slots. */
#define MIN_AREA (TC_NODE_HEADER + 2 * 4096)

/* Polls that spin before a wait yields, where every rank of the node has a core of its own. */
#define SPIN_POLLS 20000

/* The ranks a segment is made for: a communicator's, or one node's ranks of it (hier.c). */
typedef struct group {
  MPI_Comm ctrl; /* control traffic among them */
  int size, rank;
  tcoll_comm_t *comm; /* where the symmetric heap's view is made; NULL: none */
} group_t;

/* Every rank's verdict, over the group's control communicator (window.h). */
static int agree(const group_t *c, int ok) { return tc_node_agree(c->ctrl, ok); }

/* The area every rank asks for: the smallest TCOLL_SHM_BYTES of any rank, in pages. */
static size_t agree_area(const group_t *c) {
  unsigned long long mine = tc_set.shm ? (unsigned long long)tc_set.shm_bytes : 0, least = 0;
  if (tc_mpi_allreduce(&mine, &least, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, c->ctrl, true) !=
      MPI_SUCCESS)
    return 0;
  size_t pg = tc_node_page_size();
  if (least < MIN_AREA) return 0;
  return ((size_t)least + pg - 1) / pg * pg;
}

/* Whether every rank runs on this rank's node (the same answer everywhere: every rank sees every
 * key). A collective on comm's control communicator. */
static bool one_node(const group_t *c, char *why, size_t len) {
  tc_node_key_t mine, *all = calloc((size_t)c->size, sizeof *all);
  int ok = all != NULL;
  if (!agree(c, ok)) {
    free(all);
    snprintf(why, len, "no memory");
    return false;
  }
  tc_node_key(&mine);
  if (tc_mpi_allgather(&mine, (int64_t)sizeof mine, MPI_BYTE, all, (int64_t)sizeof mine, MPI_BYTE,
                       c->ctrl, true) != MPI_SUCCESS)
    ok = 0, snprintf(why, len, "exchanging node names failed");
  for (int r = 0; ok && r < c->size; r++)
    if (strcmp(all[r].text, all[0].text))
      ok = 0, snprintf(why, len, "rank %d runs on node %.80s, rank 0 on %.80s", r, all[r].text,
                       all[0].text);
  free(all);
  return agree(c, ok);
}

/* This rank's processes per node against its cores: the launchers say how many share the node. */
static bool node_oversubscribed(int node_ranks) {
  return tc_node_local_ranks(node_ranks) > tc_usable_cores();
}

/* Faults this rank's area in (window.h) and zeroes its header: the words start at 0 (a new
 * tmpfs page is zero anyway). */
static bool populate(char *area, size_t bytes, char *why, size_t len) {
  if (!tc_node_populate(area, bytes, why, len)) return false;
  memset(area, 0, TC_NODE_HEADER);
  return true;
}

/* The window: every rank's area, in this process's addresses (aligned to a cache line: the
 * offset of a rank's piece within its page is the same in every process). */
static bool map_areas(tc_node_seg_t *s) {
  for (int r = 0; r < s->p; r++)
    if (!(s->areas[r] = tc_node_win_piece(s->win, r, s->area))) return false;
  s->peers = calloc((size_t)TC_NODE_LINES * (size_t)s->p, sizeof *s->peers);
  if (!s->peers) return false;
  for (int line = 0; line < TC_NODE_LINES; line++)
    for (int q = 0; q < s->p; q++)
      if (q != s->me) s->peers[line * s->p + q] = tc_node_word(s, q, line);
  return true;
}

/* This process's memory of s (the window, MPI's, is not touched). */
static void drop(tc_node_seg_t *s) {
  free(s->heap);
  free(s->peers);
  free(s->areas);
  free(s);
}

static void free_seg(tc_node_seg_t *s) {
  if (!s) return;
  if (s->win != MPI_WIN_NULL) PMPI_Win_free(&s->win);
  if (s->node != MPI_COMM_NULL) PMPI_Comm_free(&s->node);
  drop(s);
}

/* The segment every rank agreed on, or NULL (why says this rank's reason; *several: because its
 * ranks are on several nodes, the same on every rank). Every rank makes the same calls whatever it
 * finds, each step agreed before the next. */
static tc_node_seg_t *make(const group_t *c, char *why, size_t len, bool *several) {
  size_t area = agree_area(c);
  if (!area) {
    if (!tc_set.shm)
      snprintf(why, len, "TCOLL_SHM=0");
    else if (tc_set.shm_bytes < MIN_AREA)
      snprintf(why, len, "TCOLL_SHM_BYTES=%zu, below %d", tc_set.shm_bytes, MIN_AREA);
    else
      snprintf(why, len, "another rank has TCOLL_SHM=0 or TCOLL_SHM_BYTES below %d", MIN_AREA);
    return NULL;
  }
  tc_node_seg_t *s = calloc(1, sizeof *s);
  char **areas = calloc((size_t)c->size, sizeof *areas);
  int ok = s && areas;
  if (s)
    *s = (tc_node_seg_t){.p = c->size,
                         .me = c->rank,
                         .area = area,
                         .areas = areas,
                         .node = MPI_COMM_NULL,
                         .win = MPI_WIN_NULL};
  else
    free(areas);
  if (!ok) snprintf(why, len, "no memory");
  if (!agree(c, ok)) {
    free_seg(s);
    return NULL;
  }
  if (!one_node(c, why, len)) {
    *several = true; /* (or no memory for the keys: hier.c's own checks say which) */
    free_seg(s);
    return NULL;
  }
  /* One node: the split keeps every rank, in comm's order. */
  int n = 0;
  ok = tc_rendezvous(c->ctrl) == MPI_SUCCESS &&
       PMPI_Comm_split_type(c->ctrl, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &s->node) ==
           MPI_SUCCESS &&
       PMPI_Comm_size(s->node, &n) == MPI_SUCCESS && n == c->size;
  if (!ok) snprintf(why, len, "its ranks are not all on one node (%d of %d here)", n, c->size);
  if (!agree(c, ok)) { /* a shared split smaller than the keys say: MPICH's cliques */
    *several = true;
    free_seg(s);
    return NULL;
  }
  ok = tc_node_room_for((size_t)c->size * area, why, len);
  if (!agree(c, ok)) {
    free_seg(s);
    return NULL;
  }
  ok = tc_rendezvous(c->ctrl) == MPI_SUCCESS &&
       tc_node_win_allocate(s->node, s->area, &s->win, why, len);
  if (!agree(c, ok)) {
    /* a window some rank lacks cannot be freed (collective): it stays until finalize */
    if (s->win != MPI_WIN_NULL) tc_info("a shared window is left allocated: %s", why);
    s->win = MPI_WIN_NULL;
    free_seg(s);
    return NULL;
  }
  ok = map_areas(s);
  if (!ok)
    snprintf(why, len, "MPI_Win_shared_query did not give every rank's piece (or no memory)");
  if (ok) ok = populate(s->areas[s->me], area, why, len);
  if (!agree(c, ok)) {
    tc_rendezvous(s->node);
    free_seg(s);
    return NULL;
  }
  s->slot_bytes = (area - TC_NODE_HEADER) / 2 / TC_NODE_LINE * TC_NODE_LINE;
  s->heap = c->comm ? calloc((size_t)c->size, sizeof *s->heap) : NULL;
  if (c->comm && !tc_heap_parts(c->comm, s->heap)) { /* the same verdict on every rank */
    free(s->heap);
    s->heap = NULL;
  }
  return s;
}

/* Spin rather than yield in waits where every rank of the node has a core of its own; where they
 * have not, a test that finds its work in progress yields too (drive.h). */
static void choose_spin(const tc_node_seg_t *s) {
  bool crowded = node_oversubscribed(s->p);
  if (!tc_cfg.wait_yield && !crowded) tc_set_spin(SPIN_POLLS);
  if (crowded) tc_set_test_yield(true);
}

tc_node_seg_t *tc_node_seg_make(MPI_Comm ctrl, int size, int rank, char *why, size_t len) {
  group_t grp = {.ctrl = ctrl, .size = size, .rank = rank, .comm = NULL};
  bool several = false;
  tc_node_seg_t *s = make(&grp, why, len, &several);
  if (s) choose_spin(s);
  return s;
}

void tc_node_attach(tcoll_comm_t *c) {
  if (__atomic_load_n(&c->shm, __ATOMIC_ACQUIRE)) return;
  char why[256] = "", label[TC_COMM_NAME_LEN + 16];
  tc_node_seg_t *s = NULL;
  bool several = false;
  if (c->size == 1)
    snprintf(why, sizeof why, "one rank");
  else
    s = make(&(group_t){.ctrl = c->ctrl, .size = c->size, .rank = c->rank, .comm = c}, why,
             sizeof why, &several);
  tc_comm_label(c, label, sizeof label);
  if (s) {
    choose_spin(s);
    tc_info("communicator %s: a node-shared segment of %zu bytes per rank (%d ranks)%s", label,
            s->area, s->p, s->heap ? ", the symmetric heap mapped" : "");
  } else {
    tc_info("communicator %s: no node-shared segment (%s); its collectives take the MPI paths",
            label, why[0] ? why : "another rank could not make it");
  }
  c->node = s;
  if (several) c->hier = tc_node_hier_make(c); /* collective: several is the same everywhere */
  __atomic_store_n(&c->shm, s ? 1 : -1, __ATOMIC_RELEASE);
}

void tc_node_seg_free(tc_node_seg_t *s) {
  if (!s) return;
  int fin = 0;
  PMPI_Finalized(&fin);
  if (fin) { /* MPI freed its windows already */
    drop(s);
    return;
  }
  /* Every rank frees the window together (a blocking collective): none may still need this one
   * to drive a schedule before it gets here. On the node communicator, whose traffic is this
   * room's alone (the control one may hold an abandoned DETAIL exchange). */
  tc_rendezvous(s->node);
  free_seg(s);
}

void tc_node_release(tcoll_comm_t *c) {
  tc_node_seg_t *s = c->node;
  struct tc_node_hier *h = c->hier;
  c->node = NULL;
  c->hier = NULL;
  c->shm = 0;
  /* A communicator a DETAIL check found a rank missing from is unusable, and that rank may never
   * free it: the windows stay until finalize (MPI frees them there). */
  if (__atomic_load_n(&c->detail_timed_out, __ATOMIC_ACQUIRE)) {
    if (s || h) tc_info("a node-shared segment stays allocated: its communicator lost a rank");
    if (s) drop(s);
    tc_node_hier_drop(h);
    return;
  }
  tc_node_seg_free(s);
  tc_node_hier_free(h);
}
