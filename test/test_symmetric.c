/* The symmetric heap (lib/node/heap.h): host storage tcoll allocates comes from this rank's part
 * of a node-shared window made at tcoll_init (TCOLL_SYMMETRIC_BYTES per rank, 64 MiB by default;
 * 0 or less than 64 KiB: none), and the shared-memory algorithms (shm_slices' all_reduce and
 * reduce_scatter, all_gather:shm) read a peer's input in place there instead of the peer copying
 * it into its slot of the segment (all_reduce: and write their reduced pieces into its output
 * there); a rank that shared storage completes only once every peer finished with it. Checked:
 *   - storage: host tensors from tcoll_tensor_alloc lie in a shared mapping of /proc/self/maps
 *     where the heap is on, in a private one where it is off (TCOLL_SYMMETRIC_BYTES=0: the -off
 *     runs), and in a private one where they do not fit (larger than the heap, or the heap full:
 *     the -tiny runs, TCOLL_SYMMETRIC_BYTES=1M), where collectives on them still give exact
 *     results;
 *   - in_place_read (the mechanism): rank 0 changes its input after posting and before rank 1
 *     posts; where the inputs lie in the heap every rank's result shows rank 0's new values (no
 *     copy was taken at the post), for reduce_scatter, all_reduce and all_gather;
 *   - done_wait: hundreds of calls of several chunks, each rank overwriting its input and output
 *     with garbage as soon as its wait returns, after a random delay before each post: no peer
 *     may still be reading them (a corrupted result on some rank shows it);
 *   - mixed: ranks with heap tensors and ranks with malloc'ed ones (and input and output of
 *     different kinds on one rank) in one call: all_reduce in place and out of place,
 *     reduce_scatter along dims 0 and 1, all_gather along dims 0 and 1; the algorithm reported;
 *   - views: inputs and outputs that start inside larger heap tensors, at offsets that differ
 *     from rank to rank; the storage around them untouched;
 *   - pushed: all_reduces of 9 MiB, whose ranks reduce their pieces straight into the peers'
 *     outputs in the heap: every rank's output there, some ranks' only, views at offsets that
 *     differ by rank; in place and out of place; SUM, AVG, MAX;
 *   - sub_communicator: communicators split from world (by parity, and world in reverse order),
 *     whose ranks are not the node's ranks, running the shm algorithms on heap tensors;
 *   - reuse: hundreds of allocations of many sizes freed and reused, collectives on some of them;
 *     tcoll_cache_info's in_use back where it started, and the heap whole again afterwards (a
 *     tensor of 3/4 of it still comes from it);
 *   - cached_blocks_go_back: the cache's free blocks of the heap go back to it when an allocation
 *     finds it full (without them, a tensor of 3/4 of the heap after two of 3/8 were freed);
 *   - mpi_settings_kept: the MPI control variable tcoll changes around its window allocations
 *     (MPICH's) has the program's value after tcoll_init and after a new communicator's segment.
 * Expected values are closed forms (small integers: float32 sums exact in any order). What is in
 * the heap is read from getenv("TCOLL_SYMMETRIC_BYTES") (and the room in /dev/shm, as the library
 * checks it), so that the -off and -tiny runs skip the assertions about the mechanism where the
 * tensors are not in the heap but keep every check of the results. Every test that sets the
 * algorithm puts back the setting it found. Host tensors only (no -dev runs). */
#include "algo_util.h"

#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define F32 TCOLL_FLOAT32
#define GARBAGE (-12345.0f)
#define TOKEN_TAG 7311 /* in_place_read's token, on MPI_COMM_WORLD */

#define SLICES "all_reduce:shm_slices,reduce_scatter:shm_slices"
#define ALL_SHM "all_reduce:shm_slices,reduce_scatter:shm_slices,all_gather:shm"

/* ---------------------------------------------------------------- the settings */

/* (as the library reads them) */

/* Each rank's part of the heap: TCOLL_SYMMETRIC_BYTES (64 MiB where unset), 0 below 64 KiB. */
static size_t sym_bytes(void) {
  size_t b = t_env_bytes("TCOLL_SYMMETRIC_BYTES", (size_t)64 << 20);
  return b < ((size_t)64 << 10) ? 0 : b;
}

/* The ranks of this node (every rank here: one machine). Collective the first time (t_suite). */
static int node_ranks(void) {
  static int n = 0;
  MPI_Comm node;
  if (n) return n;
  n = t_size;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t_rank, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_size(node, &n);
    MPI_Comm_free(&node);
  }
  return n;
}

/* Whether the heap must be there: asked for, peers on the node, and room in /dev/shm for the node's
 * parts with as much again to spare (the library's condition, lib/node/window.c; where the room is
 * short now the test does not insist). The same on every rank (decided by rank 0); collective the
 * first time (t_suite). */
static bool heap_expected(void) {
  static int known = -1;
  if (known >= 0) return known;
  int ranks = node_ranks(), on = sym_bytes() > 0 && ranks > 1; /* none for a rank alone */
  struct statvfs v;
  if (on && t_rank == 0 && statvfs("/dev/shm", &v) == 0) {
    unsigned long long avail = (unsigned long long)v.f_bavail * v.f_frsize;
    if (avail / 2 < (unsigned long long)ranks * sym_bytes()) {
      printf("symmetric: /dev/shm has %llu bytes free: the heap is not insisted on\n", avail);
      on = 0;
    }
  }
  MPI_Bcast(&on, 1, MPI_INT, 0, MPI_COMM_WORLD);
  known = on;
  return on;
}

/* Whether tensors of `bytes` in all, allocated once tcoll_cache_release() gave the cache's free
 * blocks back, must come from the heap: it is expected, and they take at most half of it (room
 * for the cache's size classes, up to 1/4 over a request). */
static bool heap_room(size_t bytes) { return heap_expected() && 2 * bytes <= sym_bytes(); }

static bool segments_on(void) {
  const char *on = getenv("TCOLL_SHM");
  return !(on && !strcmp(on, "0"));
}

/* A slot of the segment: the area (TCOLL_SHM_BYTES, 1 MiB where unset, in whole pages) less its
 * 256-byte header, halved, in whole 64-byte lines; 0 where too small for a segment. */
static size_t slot_bytes(void) {
  size_t b = t_env_bytes("TCOLL_SHM_BYTES", (size_t)1 << 20), pg = (size_t)sysconf(_SC_PAGESIZE);
  if (b < 256 + 2 * 4096) return 0;
  size_t area = (b + pg - 1) / pg * pg;
  return (area - 256) / 2 / 64 * 64;
}

/* Whether the shm algorithms run on a communicator of p ranks here. */
static bool shm_runs(int p) { return p >= 2 && segments_on() && slot_bytes() / (size_t)p >= 64; }
/* What forced shm_slices and all_gather:shm report on p ranks (their fallbacks elsewhere). */
static const char *slices_want(int p) { return shm_runs(p) ? "shm_slices" : "ring"; }
static const char *gather_want(int p) { return shm_runs(p) ? "shm" : "mpi"; }

static void expect_algo(const char *what, const char *got, const char *want) {
  T_EXPECT(got && !strcmp(got, want), "%s: tcoll_last_algorithm() is \"%s\" (expected \"%s\")",
           what, got ? got : "(null)", want);
}

/* ---------------------------------------------------------------- where storage lies */

/* The permissions of the mapping of /proc/self/maps that holds p: 's' (shared), 'p' (private),
 * or 0 where none does. */
static char mapping_kind(const void *p) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char line[4096], kind = 0;
  uintptr_t a = (uintptr_t)p;
  while (!kind && fgets(line, sizeof line, f)) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = "";
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && a >= lo && a < hi &&
        strlen(perms) >= 4)
      kind = perms[3];
    size_t len = strlen(line); /* the rest of an overlong line */
    while (len && line[len - 1] != '\n' && fgets(line, sizeof line, f)) len = strlen(line);
  }
  fclose(f);
  return kind;
}

static bool in_shared(const void *p) { return mapping_kind(p) == 's'; }

/* Whether every rank of world says yes. */
static bool all_ranks(bool mine) {
  int m = mine, all = 0;
  MPI_Allreduce(&m, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

/* Checks that p lies in the heap (shared: true) or outside it (false). Where this node has one
 * rank, the heap's window need not be shared memory (Open MPI 4.1 makes a window of one process
 * with malloc): there only private memory is checked. */
static void expect_place(const char *what, const void *p, bool shared) {
  if (shared && node_ranks() < 2) return;
  char k = mapping_kind(p);
  T_EXPECT(k == (shared ? 's' : 'p'),
           "%s: %p lies in a mapping with '%c' permissions (expected '%c': %s)", what, p,
           k ? k : '?', shared ? 's' : 'p', shared ? "in the symmetric heap" : "private memory");
}

/* ---------------------------------------------------------------- values */

/* Rank r's element i of call `salt`: r + 1 + (i + salt) % 7 (sums over any ranks exact). */
static float val(int r, int64_t i, int salt) { return (float)(r + 1 + (i + salt) % 7); }

/* The sum over the world ranks of a group. */
typedef struct grp {
  int n, ranks[64];
  int salt;
} grp_t;

static grp_t world_grp(int salt) {
  grp_t g = {.n = t_size, .salt = salt};
  for (int r = 0; r < t_size && r < 64; r++) g.ranks[r] = r;
  return g;
}
static double grp_sum(const grp_t *g, int64_t i) {
  double s = 0;
  for (int k = 0; k < g->n; k++) s += val(g->ranks[k], i, g->salt);
  return s;
}

/* Fills n floats of rank r's values. */
static void fill(float *p, int64_t n, int r, int salt) {
  for (int64_t i = 0; i < n; i++) p[i] = val(r, i, salt);
}
static void fill_value(float *p, int64_t n, float v) {
  for (int64_t i = 0; i < n; i++) p[i] = v;
}

/* Compares n floats with want(i) exactly; reports the first few; returns the mismatches. */
static int64_t check(const char *what, const float *got, int64_t n,
                     double (*want)(int64_t i, const void *ctx), const void *ctx) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double w = want(i, ctx);
    if ((double)got[i] != w && bad++ < 3)
      T_EXPECT(false, "%s: element %lld is %.9g, expected %.9g", what, (long long)i, (double)got[i],
               w);
  }
  T_EXPECT(bad <= 3, "%s: %lld of %lld elements differ", what, (long long)bad, (long long)n);
  return bad;
}

/* Expected values of the collectives on world-ordered or any group. */
static double want_sum(int64_t i, const void *ctx) { return grp_sum(ctx, i); }

/* reduce_scatter along dim 0 of a vector of p blocks of m: block b of the sum. */
typedef struct rs_ctx {
  const grp_t *g;
  int b;
  int64_t m;
} rs_ctx_t;
static double want_block(int64_t i, const void *ctx) {
  const rs_ctx_t *c = ctx;
  return grp_sum(c->g, (int64_t)c->b * c->m + i);
}

/* all_gather of `len` elements per rank along dim 0: element i is group member i / len's. */
typedef struct ag_ctx {
  const grp_t *g;
  int64_t len;
} ag_ctx_t;
static double want_gathered(int64_t i, const void *ctx) {
  const ag_ctx_t *c = ctx;
  return val(c->g->ranks[i / c->len], i % c->len, c->g->salt);
}

/* The same from the second block on. */
static double want_gathered_from1(int64_t i, const void *ctx) {
  const ag_ctx_t *c = ctx;
  return want_gathered(i + c->len, ctx);
}

/* ---------------------------------------------------------------- tensors */

/* A host tensor from tcoll (the heap where it fits) or from malloc (never the heap). */
static tcoll_tensor_t make_tensor(bool from_heap, int ndim, const int64_t *shape) {
  if (from_heap) return t_host(F32, ndim, shape);
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  void *p = malloc((size_t)(n ? n : 1) * sizeof(float));
  T_EXPECT(p != NULL, "malloc of %lld floats", (long long)n);
  return tcoll_tensor_make(p, F32, ndim, shape, TCOLL_HOST);
}
static void drop_tensor(tcoll_tensor_t *t, bool from_heap) {
  if (from_heap) {
    tcoll_tensor_free(t);
  } else {
    free(t->data);
    t->data = NULL;
  }
}

/* ---------------------------------------------------------------- 1. storage */

/* A small host tensor lies in the heap where it is on (at 1 rank, where the window may be private
 * memory, only its collectives are checked), in private memory where it is off; one larger than the
 * heap (the -tiny runs) or allocated once the heap is full comes from private memory and still
 * takes part in a collective with exact results. */
START_TEST(storage) {
  tcoll_cache_release(); /* the cache's free blocks back to the heap: its room is all free */
  bool heap = heap_expected();
  int64_t small[1] = {4096};
  tcoll_tensor_t t = t_host(F32, 1, small);
  expect_place("a 16 KiB tensor", t.data, heap);
  fill(t.data, small[0], t_rank, 0);
  for (int64_t i = 0; i < small[0]; i++)
    T_EXPECT(((float *)t.data)[i] == val(t_rank, i, 0), "the 16 KiB tensor's element %lld",
             (long long)i);
  tcoll_tensor_free(&t);

  /* 2 MiB: outside a heap smaller than that, inside the default one */
  size_t big_bytes = (size_t)2 << 20;
  bool fits = heap && sym_bytes() >= big_bytes;
  int64_t big[1] = {(int64_t)(big_bytes / sizeof(float))};
  t_save_algo();
  t_set_algo(SLICES);
  tcoll_tensor_t in = t_host(F32, 1, big), out = t_host(F32, 1, big);
  expect_place("a 2 MiB input", in.data, fits);
  /* (the output: in the heap where the two fit) */
  if (!fits || sym_bytes() >= 2 * big_bytes) expect_place("a 2 MiB output", out.data, fits);
  fill(in.data, big[0], t_rank, 1);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
  const char *got = tcoll_last_algorithm();
  T_OK(tcoll_wait(out.data));
  expect_algo("storage: all_reduce of 2 MiB", got, slices_want(t_size));
  grp_t g = world_grp(1);
  check("storage: all_reduce of 2 MiB", out.data, big[0], want_sum, &g);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);

  /* the heap full (a small one: at most 64 pieces of 1/8 of it): the rest from private memory;
   * an all_reduce of the last one from the heap on even ranks and the first one from private
   * memory on odd ranks */
  if (heap && node_ranks() >= 2 && sym_bytes() <= ((size_t)8 << 20)) {
    tcoll_cache_release();
    int64_t piece[1] = {(int64_t)(sym_bytes() / 8 / sizeof(float))};
    tcoll_tensor_t held[64];
    int n = 0;
    bool spilled = false;
    while (n < 64 && !spilled) {
      held[n] = t_host(F32, 1, piece);
      spilled = !in_shared(held[n].data);
      n++;
    }
    T_EXPECT(spilled && n >= 6, "the heap of %zu bytes: %d tensors of 1/8 of it, %s", sym_bytes(),
             n, spilled ? "then one from private memory" : "all in shared memory");
    tcoll_tensor_t *use = &held[n >= 2 && t_rank % 2 == 0 ? n - 2 : n - 1];
    tcoll_tensor_t res = t_empty();
    fill(use->data, piece[0], t_rank, 2);
    T_OK(tcoll_all_reduce(use, TCOLL_SUM, NULL, &res));
    T_OK(tcoll_wait(res.data));
    grp_t g2 = world_grp(2);
    check("storage: all_reduce from a full heap", res.data, piece[0], want_sum, &g2);
    tcoll_tensor_free(&res);
    for (int i = 0; i < n; i++) tcoll_tensor_free(&held[i]);
  }
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- 2. in_place_read */

/* Rank 0's changed input: 100 + i % 5. */
static float changed(int64_t i) { return (float)(100 + i % 5); }
/* The sum with rank 0's changed values (rank 0 itself reads its input once rank 1 posted). */
static double sum_changed(int64_t i) {
  double s = changed(i);
  for (int r = 1; r < t_size; r++) s += val(r, i, 0);
  return s;
}
static double sum_original(int64_t i) {
  double s = 0;
  for (int r = 0; r < t_size; r++) s += val(r, i, 0);
  return s;
}

/* One posted collective of the mechanism test: rank 0 changes its input (n floats) after the
 * post and before rank 1 posts (a token on world), every other rank posts at once. */
typedef enum { IP_REDUCE_SCATTER, IP_ALL_REDUCE, IP_ALL_GATHER } ip_kind_t;

static void in_place_case(ip_kind_t kind) {
  int p = t_size;
  const int64_t m = 3000; /* reduce_scatter: a block; the others: the input */
  int64_t n = kind == IP_REDUCE_SCATTER ? p * m : m;
  int64_t ishape[1] = {n}, oshape[1] = {kind == IP_REDUCE_SCATTER ? m
                                        : kind == IP_ALL_GATHER   ? p * m
                                                                  : m};
  const char *names[] = {"reduce_scatter:shm_slices", "all_reduce:shm_slices", "all_gather:shm"};
  char what[160];
  snprintf(what, sizeof what, "in_place_read: %s", names[kind]);
  tcoll_cache_release();
  tcoll_tensor_t in = t_host(F32, 1, ishape), out = t_host(F32, 1, oshape);
  fill(in.data, n, t_rank, 0);
  bool shared = in_shared(in.data) && in_shared(out.data);
  if (heap_room(tcoll_tensor_nbytes(&in) + tcoll_tensor_nbytes(&out))) {
    expect_place(what, in.data, true);
    expect_place(what, out.data, true);
  }
  bool mechanism = all_ranks(shared);
  if (t_rank == 1) MPI_Recv(NULL, 0, MPI_BYTE, 0, TOKEN_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  int rc = kind == IP_REDUCE_SCATTER ? tcoll_reduce_scatter(&in, TCOLL_SUM, 0, NULL, &out)
           : kind == IP_ALL_REDUCE   ? tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out)
                                     : tcoll_all_gather(&in, 0, NULL, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s", what, tcoll_last_error());
  const char *got = tcoll_last_algorithm();
  if (t_rank == 0) {
    /* Breaks the rule that an input stays unchanged while its call is pending, on purpose: it
     * shows whether the peers read it where it lies (after this) or a copy taken at the post. */
    for (int64_t i = 0; i < n; i++) ((float *)in.data)[i] = changed(i);
    MPI_Send(NULL, 0, MPI_BYTE, 1, TOKEN_TAG, MPI_COMM_WORLD);
  }
  T_OK(tcoll_wait(out.data));
  expect_algo(what, got, kind == IP_ALL_GATHER ? "shm" : "shm_slices");
  /* the output elements that depend on rank 0's input (all_gather: its block), and how many of
   * them show its changed values, how many its original ones */
  const float *o = out.data;
  int64_t with_changed = 0, with_original = 0, len = kind == IP_ALL_GATHER ? m : oshape[0];
  for (int64_t i = 0; i < len; i++) {
    int64_t x = kind == IP_REDUCE_SCATTER ? t_rank * m + i : i;
    bool reduced = kind != IP_ALL_GATHER;
    with_changed += o[i] == (reduced ? sum_changed(x) : changed(x));
    with_original += o[i] == (reduced ? sum_original(x) : val(0, x, 0));
  }
  if (mechanism) {
    T_EXPECT(with_changed == len,
             "%s: %lld of the %lld output elements that depend on rank 0's input show it as "
             "changed after the post (%lld its original values): the peers did not read it in "
             "place",
             what, (long long)with_changed, (long long)len, (long long)with_original);
  } else if (t_rank <= 1) {
    /* not asserted (the inputs are not all in the heap): what a copy taken at the post gives */
    printf(
        "%s (rank %d): tensors not all in the heap: of the %lld output elements that depend "
        "on rank 0's input, %lld show it changed after the post, %lld its original values\n",
        what, t_rank, (long long)len, (long long)with_changed, (long long)with_original);
  }
  /* the rest of the all_gather: the other ranks' blocks */
  if (kind == IP_ALL_GATHER) {
    grp_t g = world_grp(0);
    ag_ctx_t c = {&g, m};
    check(what, o + m, (p - 1) * m, want_gathered_from1, &c);
  }
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}

/* Where every rank's tensors lie in the heap, peers read rank 0's input in place: a change rank
 * 0 makes after its post, before rank 1 posts (and so before anyone can read a chunk: every
 * chunk waits for all ranks), shows in every rank's result. */
START_TEST(in_place_read) {
  if (t_size < 2 || !shm_runs(t_size)) return;
  tcoll_cache_release();
  t_save_algo();
  t_set_algo(ALL_SHM);
  in_place_case(IP_REDUCE_SCATTER);
  in_place_case(IP_ALL_REDUCE);
  in_place_case(IP_ALL_GATHER);
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- 3. done_wait */

/* The k-th of n elements in the order the peers read a rank's storage last: `blocks` equal
 * blocks (what is left over after them first), each from its end backwards, interleaved (the
 * last chunk of a call lies at the end of each block: all_reduce's vector blocks, reduce_scatter's
 * blocks, all_gather's input as one block). */
static int64_t spoil_index(int64_t n, int blocks, int64_t k) {
  int64_t len = n / blocks, rest = n - len * blocks;
  if (k < rest) return n - 1 - k;
  k -= rest;
  return (k % blocks) * len + (len - 1 - k / blocks);
}

/* Overwrites x with garbage in that order. */
static void spoil(float *x, int64_t n, int blocks) {
  for (int64_t k = 0; k < n; k++) x[spoil_index(n, blocks, k)] = GARBAGE;
}

/* Compares out with want and overwrites each element with garbage as soon as it is read, in the
 * same order; returns the mismatches (the first few reported). */
static int64_t check_and_spoil(const char *what, int it, float *out, int64_t n, int blocks,
                               double (*want)(int64_t i, const void *ctx), const void *ctx) {
  int64_t bad = 0;
  for (int64_t k = 0; k < n; k++) {
    int64_t i = spoil_index(n, blocks, k);
    double w = want(i, ctx);
    if ((double)out[i] != w && bad++ < 2)
      T_EXPECT(false, "%s: iteration %d: element %lld of %lld is %.9g, expected %.9g", what, it,
               (long long)i, (long long)n, (double)out[i], w);
    out[i] = GARBAGE;
  }
  return bad;
}

typedef enum { DW_ALL_REDUCE, DW_REDUCE_SCATTER, DW_ALL_GATHER } dw_kind_t;

/* `iters` calls of kind of about 3 MiB of input, or `least` bytes (all_gather: 2 slots of it on
 * each rank), whole chunks of the segment's 512 KiB slots (the last call reads as much as the
 * others), each after a random delay of up to 300 us; each rank overwrites its storage with garbage
 * as soon as its wait returns, what the peers read last first (all_reduce: the output, whose blocks
 * the last call reads; the others: the input): where a rank's wait returned before a peer finished
 * reading its storage, the peer's result has garbage in it. */
static void done_wait_loop(dw_kind_t kind, int iters, size_t least) {
  int p = t_size;
  const char *names[] = {"all_reduce:shm_slices", "reduce_scatter:shm_slices", "all_gather:shm"};
  char what[120];
  snprintf(what, sizeof what, "done_wait: %s", names[kind]);
  /* a piece: a chunk of one block (slot / p floats in whole lines); 6 of them a block */
  int64_t piece = (int64_t)(slot_bytes() / (size_t)p / 4 / 16 * 16);
  if (piece < 16) piece = 16;
  int64_t m = kind == DW_ALL_GATHER ? (int64_t)(2 * slot_bytes() / 4) : 6 * piece;
  if (m < 16) m = 16;
  /* at least `least` bytes of input, in whole pieces (from 8 MiB reduced pieces are written with
   * streaming stores, lib/mpi/shm_slices.c) */
  while ((size_t)(kind == DW_ALL_GATHER ? m : p * m) * 4 < least) m += piece;
  int64_t ishape[1] = {kind == DW_ALL_GATHER ? m : p * m};
  int64_t oshape[1] = {kind == DW_REDUCE_SCATTER ? m : p * m};
  tcoll_cache_release();
  tcoll_tensor_t in = t_host(F32, 1, ishape), out = t_host(F32, 1, oshape);
  bool shared = in_shared(in.data) && in_shared(out.data);
  if (heap_room(tcoll_tensor_nbytes(&in) + tcoll_tensor_nbytes(&out))) {
    expect_place(what, in.data, true);
    expect_place(what, out.data, true);
  }
  bool everywhere = all_ranks(shared);
  unsigned seed = 1234u + 977u * (unsigned)t_rank;
  int64_t bad = 0;
  grp_t g = world_grp(0);
  for (int it = 0; it < iters && bad == 0; it++) {
    g.salt = it;
    fill(in.data, ishape[0], t_rank, it);
    usleep((useconds_t)(rand_r(&seed) % 300));
    int rc = kind == DW_ALL_REDUCE       ? tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out)
             : kind == DW_REDUCE_SCATTER ? tcoll_reduce_scatter(&in, TCOLL_SUM, 0, NULL, &out)
                                         : tcoll_all_gather(&in, 0, NULL, &out);
    T_EXPECT(rc == TCOLL_SUCCESS, "%s: iteration %d: %s", what, it, tcoll_last_error());
    const char *got = tcoll_last_algorithm();
    if (it == 0) expect_algo(what, got, kind == DW_ALL_GATHER ? gather_want(p) : slices_want(p));
    T_OK(tcoll_wait(out.data));
    if (kind == DW_ALL_REDUCE) {
      bad += check_and_spoil(what, it, out.data, oshape[0], p, want_sum, &g);
      spoil(in.data, ishape[0], p);
    } else if (kind == DW_REDUCE_SCATTER) {
      spoil(in.data, ishape[0], p);
      rs_ctx_t c = {&g, t_rank, m};
      bad += check_and_spoil(what, it, out.data, oshape[0], 1, want_block, &c);
    } else {
      spoil(in.data, ishape[0], 1);
      ag_ctx_t c = {&g, m};
      bad += check_and_spoil(what, it, out.data, oshape[0], p, want_gathered, &c);
    }
    /* stop together once any rank saw a wrong result */
    int64_t any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    bad = any;
  }
  if (bad && t_rank == 0)
    printf("%s: a wrong result (tensors %s the heap on every rank)\n", what,
           everywhere ? "in" : "not all in");
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}

START_TEST(done_wait) {
  if (t_size < 2) return;
  tcoll_cache_release();
  t_save_algo();
  t_set_algo(ALL_SHM);
  done_wait_loop(DW_ALL_REDUCE, 200, 0);
  done_wait_loop(DW_ALL_REDUCE, 20, (size_t)9 << 20);
  done_wait_loop(DW_REDUCE_SCATTER, 200, 0);
  done_wait_loop(DW_REDUCE_SCATTER, 20, (size_t)9 << 20); /* (the output streamed) */
  done_wait_loop(DW_ALL_GATHER, 200, 0);
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- 4. mixed */

/* How a rank's tensors are made: both from the heap on even ranks and malloc on odd ones
 * (MIX_PARITY), or the input from one and the output from the other (MIX_SPLIT: even ranks' input
 * from the heap, odd ranks' output). */
typedef enum { MIX_PARITY, MIX_SPLIT } mix_t;
static bool in_heap_for(mix_t mix, bool input) {
  bool even = t_rank % 2 == 0;
  return mix == MIX_PARITY ? even : (input ? even : !even);
}

/* For 2-D results: the reduce_scatter along dim 1 of (rows, p * cols) and the all_gather along
 * dim 1 of (rows, cols). */
typedef struct d1_ctx {
  const grp_t *g;
  int64_t rows, cols; /* of the block (reduce_scatter) or of each rank's input (all_gather) */
  int b;              /* reduce_scatter: this rank's block */
} d1_ctx_t;
/* Output (rows, cols) element i of block b: input (row, b * cols + c) of width p * cols. */
static double want_rs_dim1(int64_t i, const void *ctx) {
  const d1_ctx_t *c = ctx;
  int64_t row = i / c->cols, col = i % c->cols;
  return grp_sum(c->g, row * c->g->n * c->cols + c->b * c->cols + col);
}
/* Output (rows, p * cols) element i: rank k's input (row, c) where k = col / cols. */
static double want_ag_dim1(int64_t i, const void *ctx) {
  const d1_ctx_t *c = ctx;
  int64_t width = c->g->n * c->cols, row = i / width, col = i % width;
  return val(c->g->ranks[col / c->cols], row * c->cols + col % c->cols, c->g->salt);
}

static void expect_places(const char *what, mix_t mix, const tcoll_tensor_t *in,
                          const tcoll_tensor_t *out) {
  /* (a malloc'ed tensor is always private; a heap one is shared where the heap holds it) */
  bool ih = in_heap_for(mix, true), oh = in_heap_for(mix, false);
  bool room = heap_room(tcoll_tensor_nbytes(in) + (out ? tcoll_tensor_nbytes(out) : 0));
  if (!ih || room) expect_place(what, in->data, ih);
  if (out && (!oh || room)) expect_place(what, out->data, oh);
}

static void mixed_run(mix_t mix) {
  int p = t_size;
  const char *mname = mix == MIX_PARITY ? "parity" : "split";
  int64_t piece = (int64_t)(slot_bytes() / (size_t)(p > 1 ? p : 2) / 4 / 16 * 16);
  if (piece < 16) piece = 16;
  int64_t C = p * piece; /* elements of one chunk of an all_reduce */
  char what[200];
  int salt = 0;

  /* all_reduce, out of place and in place (the input's kind), across chunk boundaries */
  for (int inplace = 0; inplace < 2; inplace++) {
    int64_t shape[1] = {2 * C + 3};
    grp_t g = world_grp(++salt);
    snprintf(what, sizeof what, "mixed (%s): all_reduce %s", mname,
             inplace ? "in place" : "out of place");
    bool ih = in_heap_for(mix, true), oh = in_heap_for(mix, false);
    tcoll_cache_release(); /* (the heap's room all free: expect_places) */
    tcoll_tensor_t in = make_tensor(ih, 1, shape);
    tcoll_tensor_t out = inplace ? in : make_tensor(oh, 1, shape);
    expect_places(what, mix, &in, inplace ? NULL : &out);
    fill(in.data, shape[0], t_rank, g.salt);
    T_OK(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out));
    expect_algo(what, tcoll_last_algorithm(), slices_want(p));
    T_OK(tcoll_wait(out.data));
    check(what, out.data, shape[0], want_sum, &g);
    if (!inplace) {
      grp_t mine = {.n = 1, .ranks = {t_rank}, .salt = g.salt};
      char w2[240];
      snprintf(w2, sizeof w2, "%s: input", what);
      check(w2, in.data, shape[0], want_sum, &mine);
      drop_tensor(&out, oh);
    }
    drop_tensor(&in, ih);
  }

  /* reduce_scatter along dim 0 (blocks of 2 pieces and 5 rows of one) and along dim 1 (7 rows) */
  for (int dim = 0; dim < 2; dim++) {
    int64_t rows = dim == 0 ? 2 * piece + 5 : 7, cols = dim == 0 ? 1 : (2 * piece) / 7 + 13;
    int64_t ishape[2] = {dim == 0 ? p * rows : rows, dim == 0 ? cols : p * cols},
            oshape[2] = {rows, cols};
    grp_t g = world_grp(++salt);
    snprintf(what, sizeof what, "mixed (%s): reduce_scatter along dim %d", mname, dim);
    bool ih = in_heap_for(mix, true), oh = in_heap_for(mix, false);
    tcoll_cache_release(); /* (the heap's room all free: expect_places) */
    tcoll_tensor_t in = make_tensor(ih, 2, ishape), out = make_tensor(oh, 2, oshape);
    expect_places(what, mix, &in, &out);
    fill(in.data, p * rows * cols, t_rank, g.salt);
    T_OK(tcoll_reduce_scatter(&in, TCOLL_SUM, dim, NULL, &out));
    expect_algo(what, tcoll_last_algorithm(), slices_want(p));
    T_OK(tcoll_wait(out.data));
    if (dim == 0) {
      rs_ctx_t c = {&g, t_rank, rows};
      check(what, out.data, rows, want_block, &c);
    } else {
      d1_ctx_t c = {&g, rows, cols, t_rank};
      check(what, out.data, rows * cols, want_rs_dim1, &c);
    }
    drop_tensor(&out, oh);
    drop_tensor(&in, ih);
  }

  /* all_gather along dim 0 (more than a slot per rank) and along dim 1 */
  for (int dim = 0; dim < 2; dim++) {
    int64_t rows = dim == 0 ? (int64_t)(slot_bytes() / 4 / 64) + 5 : 9,
            cols = dim == 0 ? 64 : (int64_t)(slot_bytes() / 4 / 9) + 11;
    int64_t ishape[2] = {rows, cols},
            oshape[2] = {dim == 0 ? p * rows : rows, dim == 0 ? cols : p * cols};
    grp_t g = world_grp(++salt);
    snprintf(what, sizeof what, "mixed (%s): all_gather along dim %d", mname, dim);
    bool ih = in_heap_for(mix, true), oh = in_heap_for(mix, false);
    tcoll_cache_release(); /* (the heap's room all free: expect_places) */
    tcoll_tensor_t in = make_tensor(ih, 2, ishape), out = make_tensor(oh, 2, oshape);
    expect_places(what, mix, &in, &out);
    fill(in.data, rows * cols, t_rank, g.salt);
    T_OK(tcoll_all_gather(&in, dim, NULL, &out));
    expect_algo(what, tcoll_last_algorithm(), gather_want(p));
    T_OK(tcoll_wait(out.data));
    if (dim == 0) {
      ag_ctx_t c = {&g, rows * cols};
      check(what, out.data, p * rows * cols, want_gathered, &c);
    } else {
      d1_ctx_t c = {&g, rows, cols, 0};
      check(what, out.data, p * rows * cols, want_ag_dim1, &c);
    }
    drop_tensor(&out, oh);
    drop_tensor(&in, ih);
  }
}

/* Heap tensors and malloc'ed ones in the same calls (at 1 rank: the fallbacks, same results). */
START_TEST(mixed) {
  tcoll_cache_release();
  t_save_algo();
  t_set_algo(ALL_SHM);
  mixed_run(MIX_PARITY);
  mixed_run(MIX_SPLIT);
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- 5. views */

#define GUARD (-7.0f)

/* Checks the guard elements of big around [off, off + n): unchanged. */
static void check_guard(const char *what, const float *big, int64_t total, int64_t off, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < total; i++)
    if ((i < off || i >= off + n) && big[i] != GUARD && bad++ < 2)
      T_EXPECT(false, "%s: element %lld around the view (at %lld, %lld long) is %.9g", what,
               (long long)i, (long long)off, (long long)n, (double)big[i]);
}

/* Inputs and outputs that start inside larger heap tensors, at offsets that differ by rank (and
 * from the heap's 256-byte alignment): all_reduce, reduce_scatter and all_gather, exact, the
 * elements around the output views unchanged. */
START_TEST(views) {
  tcoll_cache_release();
  t_save_algo();
  t_set_algo(ALL_SHM);
  int p = t_size;
  int64_t piece = (int64_t)(slot_bytes() / (size_t)(p > 1 ? p : 2) / 4 / 16 * 16);
  if (piece < 16) piece = 16;
  int64_t n = 2 * p * piece + 7; /* elements of the input view: 2 chunks of an all_reduce */
  int64_t ioff = 1000 + 37 * t_rank + 3, ooff = 517 + 61 * t_rank; /* elements */
  const char *ops[] = {"all_reduce", "reduce_scatter", "all_gather"};
  for (int op = 0; op < 3; op++) {
    char what[120];
    snprintf(what, sizeof what, "views: %s", ops[op]);
    int64_t m = op == 1 ? n / p : n; /* reduce_scatter: the block (the view is p blocks) */
    int64_t ilen = op == 1 ? p * m : n, olen = op == 0 ? n : op == 1 ? m : p * n;
    int64_t itotal = ioff + ilen + 300, ototal = ooff + olen + 300;
    int64_t ibs[1] = {itotal}, obs[1] = {ototal}, ishape[1] = {ilen}, oshape[1] = {olen};
    tcoll_cache_release();
    tcoll_tensor_t ibig = t_host(F32, 1, ibs), obig = t_host(F32, 1, obs);
    if (heap_room(tcoll_tensor_nbytes(&ibig) + tcoll_tensor_nbytes(&obig))) {
      expect_place(what, ibig.data, true);
      expect_place(what, obig.data, true);
    }
    fill_value(ibig.data, itotal, GUARD);
    fill_value(obig.data, ototal, GUARD);
    tcoll_tensor_t in = tcoll_tensor_make((float *)ibig.data + ioff, F32, 1, ishape, TCOLL_HOST);
    tcoll_tensor_t out = tcoll_tensor_make((float *)obig.data + ooff, F32, 1, oshape, TCOLL_HOST);
    grp_t g = world_grp(op + 3);
    fill(in.data, ilen, t_rank, g.salt);
    int rc = op == 0   ? tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out)
             : op == 1 ? tcoll_reduce_scatter(&in, TCOLL_SUM, 0, NULL, &out)
                       : tcoll_all_gather(&in, 0, NULL, &out);
    T_EXPECT(rc == TCOLL_SUCCESS, "%s: %s", what, tcoll_last_error());
    expect_algo(what, tcoll_last_algorithm(), op == 2 ? gather_want(p) : slices_want(p));
    T_OK(tcoll_wait(out.data));
    if (op == 0) {
      check(what, out.data, olen, want_sum, &g);
    } else if (op == 1) {
      rs_ctx_t c = {&g, t_rank, m};
      check(what, out.data, olen, want_block, &c);
    } else {
      ag_ctx_t c = {&g, n};
      check(what, out.data, olen, want_gathered, &c);
    }
    char w2[160];
    snprintf(w2, sizeof w2, "%s: output", what);
    check_guard(w2, obig.data, ototal, ooff, olen);
    snprintf(w2, sizeof w2, "%s: input", what);
    check_guard(w2, ibig.data, itotal, ioff, ilen);
    grp_t mine = {.n = 1, .ranks = {t_rank}, .salt = g.salt};
    check(w2, in.data, ilen, want_sum, &mine);
    tcoll_tensor_free(&obig);
    tcoll_tensor_free(&ibig);
  }
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- 5b. pushed */

/* All_reduces reduce each rank's piece straight into the outputs of the peers that have theirs in
 * the heap, which then copy nothing out; where every rank's input and output lie there, the first
 * call reduces a rank's whole block. At 9 MiB (streamed), every way a rank's tensors can lie: all
 * in the heap (out of place, in place), heap on even ranks and malloc'ed on odd ones (pushed to
 * some peers, copied out by others), every input in the heap but outputs only on even ranks (not
 * the whole block at once), output views at offsets that differ by rank (the pushes not streamed:
 * the outputs' alignments differ) with the storage around them untouched; SUM, AVG (the division
 * in the same pass) and MAX (no one-pass loop: the piece copied into the peers' outputs after it
 * is reduced). Exact: small integers, AVG divided once in float. */
typedef struct op_ctx {
  const grp_t *g;
  tcoll_redop_t op;
} op_ctx_t;
static double want_op(int64_t i, const void *ctx) {
  const op_ctx_t *c = ctx;
  if (c->op == TCOLL_MAX) return val(c->g->ranks[c->g->n - 1], i, c->g->salt); /* the largest */
  double sum = grp_sum(c->g, i);
  return c->op == TCOLL_AVG ? (double)((float)sum / (float)c->g->n) : sum;
}

typedef enum { PUSH_ALL_HEAP, PUSH_PARITY, PUSH_OUT_PARITY, PUSH_VIEWS } push_case_t;

static void pushed_case(push_case_t how, bool inplace, tcoll_redop_t op, int salt) {
  int64_t n = ((int64_t)9 << 20) / 4 + 5; /* 9 MiB and a tail */
  int64_t off = how == PUSH_VIEWS ? 517 + 61 * t_rank : 0, total = off + n + (off ? 300 : 0);
  bool heap = how != PUSH_PARITY || t_rank % 2 == 0;
  bool out_heap = heap && (how != PUSH_OUT_PARITY || t_rank % 2 == 0);
  char what[160];
  snprintf(what, sizeof what, "pushed: all_reduce (%s, %s, op %d)",
           how == PUSH_ALL_HEAP     ? "every rank's in the heap"
           : how == PUSH_PARITY     ? "heap on even ranks"
           : how == PUSH_OUT_PARITY ? "inputs in the heap, outputs on even ranks"
                                    : "views",
           inplace ? "in place" : "out of place", (int)op);
  int64_t tshape[1] = {total}, shape[1] = {n};
  tcoll_cache_release();
  tcoll_tensor_t in = make_tensor(heap, 1, shape);
  tcoll_tensor_t big = inplace ? in : make_tensor(out_heap, 1, tshape);
  if (out_heap && heap_room(tcoll_tensor_nbytes(&in) + (inplace ? 0 : tcoll_tensor_nbytes(&big))))
    expect_place(what, big.data, true);
  tcoll_tensor_t out =
      inplace ? in : tcoll_tensor_make((float *)big.data + off, F32, 1, shape, TCOLL_HOST);
  if (!inplace) fill_value(big.data, total, GUARD);
  grp_t g = world_grp(salt);
  fill(in.data, n, t_rank, g.salt);
  T_OK(tcoll_all_reduce(&in, op, NULL, &out));
  expect_algo(what, tcoll_last_algorithm(), slices_want(t_size));
  T_OK(tcoll_wait(out.data));
  op_ctx_t c = {&g, op};
  check(what, out.data, n, want_op, &c);
  if (!inplace) {
    char w2[200];
    snprintf(w2, sizeof w2, "%s: output", what);
    check_guard(w2, big.data, total, off, n);
    grp_t mine = {.n = 1, .ranks = {t_rank}, .salt = g.salt};
    snprintf(w2, sizeof w2, "%s: input", what);
    check(w2, in.data, n, want_sum, &mine);
    drop_tensor(&big, out_heap);
  }
  drop_tensor(&in, heap);
}

START_TEST(pushed) {
  tcoll_cache_release();
  t_save_algo();
  t_set_algo(SLICES);
  int salt = 40;
  for (int inplace = 0; inplace < 2; inplace++) {
    pushed_case(PUSH_ALL_HEAP, inplace, TCOLL_SUM, salt++);
    pushed_case(PUSH_PARITY, inplace, TCOLL_SUM, salt++);
  }
  pushed_case(PUSH_OUT_PARITY, false, TCOLL_SUM, salt++);
  pushed_case(PUSH_VIEWS, false, TCOLL_SUM, salt++);
  pushed_case(PUSH_ALL_HEAP, false, TCOLL_AVG, salt++);
  pushed_case(PUSH_ALL_HEAP, true, TCOLL_MAX, salt++);
  pushed_case(PUSH_VIEWS, false, TCOLL_MAX, salt++);
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- 6. sub_communicator */

/* One all_reduce (2 chunks and more) on comm, whose members are g's world ranks in its order,
 * and an all_gather (along dim 0, more than a slot per rank) where `gather`. */
static void sub_run(const char *label, tcoll_comm_t *comm, grp_t *g, bool gather) {
  int p = tcoll_comm_size(comm);
  char what[160];
  int64_t piece = (int64_t)(slot_bytes() / (size_t)(p > 1 ? p : 2) / 4 / 16 * 16);
  if (piece < 16) piece = 16;
  int64_t shape[1] = {2 * p * piece + 11};
  snprintf(what, sizeof what, "%s: all_reduce on %d ranks", label, p);
  tcoll_cache_release();
  tcoll_tensor_t in = t_host(F32, 1, shape), out = t_host(F32, 1, shape);
  if (heap_room(2 * tcoll_tensor_nbytes(&in))) expect_place(what, in.data, true);
  fill(in.data, shape[0], t_rank, g->salt);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, comm, &out));
  expect_algo(what, tcoll_last_algorithm(), slices_want(p));
  T_OK(tcoll_wait(out.data));
  check(what, out.data, shape[0], want_sum, g);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
  if (!gather) return;
  int64_t len = (int64_t)(slot_bytes() / 4) + 21, ishape[1] = {len}, oshape[1] = {p * len};
  snprintf(what, sizeof what, "%s: all_gather on %d ranks", label, p);
  in = t_host(F32, 1, ishape);
  out = t_host(F32, 1, oshape);
  fill(in.data, len, t_rank, g->salt);
  T_OK(tcoll_all_gather(&in, 0, comm, &out));
  expect_algo(what, tcoll_last_algorithm(), gather_want(p));
  T_OK(tcoll_wait(out.data));
  ag_ctx_t c = {g, len};
  check(what, out.data, p * len, want_gathered, &c);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
}

/* Communicators split from world (ranks by parity; world in reverse order): their ranks are not
 * the node's, the algorithms find each member's part of the heap all the same. */
START_TEST(sub_communicator) {
  if (t_size < 2) return;
  tcoll_cache_release();
  t_save_algo();
  t_set_algo(ALL_SHM);
  tcoll_comm_t *half = NULL, *rev = NULL;
  T_OK(tcoll_comm_split(NULL, t_rank % 2, t_rank, &half));
  T_OK(tcoll_comm_split(NULL, 0, t_size - 1 - t_rank, &rev));
  T_EXPECT(half && rev, "tcoll_comm_split gave no communicator");
  if (half && rev) {
    grp_t gh = {.salt = 5}, gr = {.n = t_size, .salt = 6};
    for (int r = t_rank % 2; r < t_size; r += 2) gh.ranks[gh.n++] = r;
    for (int k = 0; k < t_size; k++) gr.ranks[k] = t_size - 1 - k;
    T_EXPECT(tcoll_comm_size(half) == gh.n && tcoll_comm_rank(half) == t_rank / 2,
             "the parity split: rank %d of %d", tcoll_comm_rank(half), tcoll_comm_size(half));
    T_EXPECT(tcoll_comm_rank(rev) == t_size - 1 - t_rank, "the reversed split: rank %d",
             tcoll_comm_rank(rev));
    for (int round = 0; round < 2; round++) {
      sub_run("sub_communicator (parity)", half, &gh, true);
      sub_run("sub_communicator (reversed)", rev, &gr, true);
      gh.salt += 2;
      gr.salt += 2;
    }
  }
  if (half) T_OK(tcoll_comm_free(&half));
  if (rev) T_OK(tcoll_comm_free(&rev));
  t_restore_algo();
}
END_TEST

/* ---------------------------------------------------------------- 7. reuse */

#define LIVE 8

/* 300 rounds: a tensor of a size from a spread of 1 element to 300 K (the same on every rank)
 * allocated, kept among the last LIVE (freeing the oldest), an all_reduce on every fifth (its
 * output tcoll allocates); then everything freed and the cache released: in_use back where it
 * started, and (where the heap is on) a tensor of 3/4 of it comes from it again. */
START_TEST(reuse) {
  tcoll_cache_release();
  tcoll_cache_info_t i0;
  memset(&i0, 0, sizeof i0);
  T_OK(tcoll_cache_info(&i0));
  t_save_algo();
  t_set_algo(ALL_SHM);
  tcoll_tensor_t live[LIVE];
  for (int k = 0; k < LIVE; k++) live[k] = t_empty();
  int64_t calls = 0;
  for (int it = 0; it < 300; it++) {
    int64_t n = 1 + ((int64_t)it * 7919 * (it % 3 ? 1 : 37)) % 300000;
    int64_t shape[1] = {n};
    tcoll_tensor_t *slot = &live[it % LIVE];
    if (slot->data) tcoll_tensor_free(slot);
    *slot = t_host(F32, 1, shape);
    for (int64_t i = 0; i < n; i++)
      T_EXPECT(((float *)slot->data)[i] == 0.0f, "reuse %d: not zero-filled", it);
    if (it % 5) continue;
    grp_t g = world_grp(it);
    fill(slot->data, n, t_rank, it);
    tcoll_tensor_t out = t_empty();
    T_OK(tcoll_all_reduce(slot, TCOLL_SUM, NULL, &out));
    T_OK(tcoll_wait(out.data));
    char what[80];
    snprintf(what, sizeof what, "reuse %d: all_reduce of %lld", it, (long long)n);
    check(what, out.data, n, want_sum, &g);
    /* every other one in place too, on the output tcoll allocated */
    if (it % 10 == 0) {
      fill(out.data, n, t_rank, it);
      T_OK(tcoll_all_reduce(&out, TCOLL_SUM, NULL, &out));
      T_OK(tcoll_wait(out.data));
      snprintf(what, sizeof what, "reuse %d: in place all_reduce of %lld", it, (long long)n);
      check(what, out.data, n, want_sum, &g);
    }
    tcoll_tensor_free(&out);
    calls++;
  }
  for (int k = 0; k < LIVE; k++)
    if (live[k].data) tcoll_tensor_free(&live[k]);
  T_OK(tcoll_cache_release());
  tcoll_cache_info_t i1;
  memset(&i1, 0, sizeof i1);
  T_OK(tcoll_cache_info(&i1));
  T_EXPECT(i1.in_use == i0.in_use, "reuse: in_use %zu after freeing everything, %zu before",
           i1.in_use, i0.in_use);
  T_EXPECT(i1.cached == 0, "reuse: %zu bytes cached after tcoll_cache_release", i1.cached);
  T_EXPECT(calls == 60, "reuse: %lld collectives", (long long)calls);
  /* the heap's freed pieces merged again: 3/4 of it in one tensor */
  if (heap_expected()) {
    int64_t shape[1] = {(int64_t)(sym_bytes() / 4 * 3 / sizeof(float))};
    tcoll_tensor_t t = t_host(F32, 1, shape);
    expect_place("reuse: 3/4 of the heap in one tensor afterwards", t.data, true);
    tcoll_tensor_free(&t);
    tcoll_cache_release();
  }
  t_restore_algo();
}
END_TEST

/* Free blocks the cache keeps of the heap go back to it when the heap is full: two tensors of
 * 3/8 of it each, freed (cached, not given back), then one of 3/4: it fits only once they are
 * back, and must come from the heap without tcoll_cache_release. Local: no collective. */
START_TEST(cached_blocks_go_back) {
  if (!heap_expected()) return;
  T_OK(tcoll_cache_release());
  int64_t part[1] = {(int64_t)(sym_bytes() / 8 * 3 / sizeof(float))};
  tcoll_tensor_t a = t_host(F32, 1, part), b = t_host(F32, 1, part);
  expect_place("a 3/8 of the heap", a.data, true);
  expect_place("another 3/8 of the heap", b.data, true);
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&b);
  tcoll_cache_info_t i;
  memset(&i, 0, sizeof i);
  T_OK(tcoll_cache_info(&i));
  T_EXPECT(i.cached >= 2 * (size_t)part[0] * sizeof(float),
           "cached_blocks_go_back: %zu bytes cached after the frees (the test needs both kept)",
           i.cached);
  int64_t most[1] = {(int64_t)(sym_bytes() / 4 * 3 / sizeof(float))};
  tcoll_tensor_t t = t_host(F32, 1, most);
  expect_place("3/4 of the heap with its free blocks cached", t.data, true);
  tcoll_tensor_free(&t);
  T_OK(tcoll_cache_release());
}
END_TEST

/* ---------------------------------------------------------------- 9. mpi_settings_kept */

/* The program's own MPI settings survive tcoll's: around its window allocations tcoll turns
 * MPICH's search for addresses free on every rank off (MPIR_CVAR_SHM_SYMHEAP_RETRY, through the
 * MPI tool interface; lib/node/window.c) and puts the program's value back. tcoll_init (the heap)
 * left the value it found at start; a value the program then sets survives a new communicator's
 * first shared-memory collective (its segment is made then). Nothing to check on an MPI without
 * the variable (Open MPI). The tool interface stays initialized (as tcoll leaves it). */
START_TEST(mpi_settings_kept) {
  int provided, index, count = 0, found = -1, mine = 7, now = -1;
  MPI_T_cvar_handle h;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS ||
      MPI_T_cvar_get_index("MPIR_CVAR_SHM_SYMHEAP_RETRY", &index) != MPI_SUCCESS ||
      MPI_T_cvar_handle_alloc(index, NULL, &h, &count) != MPI_SUCCESS)
    return;
  const char *env = getenv("MPIR_CVAR_SHM_SYMHEAP_RETRY");
  int at_start = env ? atoi(env) : 100; /* MPICH's default */
  T_EXPECT(count == 1 && MPI_T_cvar_read(h, &found) == MPI_SUCCESS && found == at_start,
           "mpi_settings_kept: MPIR_CVAR_SHM_SYMHEAP_RETRY is %d after tcoll_init (expected %d)",
           found, at_start);
  T_EXPECT(MPI_T_cvar_write(h, &mine) == MPI_SUCCESS, "mpi_settings_kept: cannot set it");
  t_save_algo();
  t_set_algo(ALL_SHM);
  tcoll_comm_t *dup = NULL;
  T_OK(tcoll_comm_split(NULL, 0, t_rank, &dup));
  if (dup) {
    int64_t one[1] = {1};
    tcoll_tensor_t x = t_host(F32, 1, one);
    ((float *)x.data)[0] = 1.0f;
    T_OK(tcoll_all_reduce(&x, TCOLL_SUM, dup, &x));
    T_OK(tcoll_wait(x.data));
    T_EXPECT(((float *)x.data)[0] == (float)t_size, "mpi_settings_kept: all_reduce gave %g",
             ((float *)x.data)[0]);
    tcoll_tensor_free(&x);
    T_OK(tcoll_comm_free(&dup));
  }
  t_restore_algo();
  T_EXPECT(MPI_T_cvar_read(h, &now) == MPI_SUCCESS && now == mine,
           "mpi_settings_kept: MPIR_CVAR_SHM_SYMHEAP_RETRY is %d after a new communicator's "
           "first shared-memory collective, the program set %d",
           now, mine);
  MPI_T_cvar_write(h, &found);
  MPI_T_cvar_handle_free(&h);
}
END_TEST

Suite *t_suite(void) {
  /* (collective the first time: every rank, before any test) */
  node_ranks();
  heap_expected();
  Suite *s = suite_create("symmetric");
  TCase *tc = t_tcase("symmetric");
  tcase_add_test(tc, storage);
  tcase_add_test(tc, in_place_read);
  tcase_add_test(tc, done_wait);
  tcase_add_test(tc, mixed);
  tcase_add_test(tc, views);
  tcase_add_test(tc, pushed);
  tcase_add_test(tc, sub_communicator);
  tcase_add_test(tc, reuse);
  tcase_add_test(tc, cached_blocks_go_back);
  tcase_add_test(tc, mpi_settings_kept);
  suite_add_tcase(s, tc);
  return s;
}
