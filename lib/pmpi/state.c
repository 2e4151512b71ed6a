/* The layer's life: the load-time check, MPI_Init / MPI_Init_thread (MPI_THREAD_MULTIPLE only
 * where a progress thread drives routed calls, tcoll started on the program's MPI), MPI_Finalize
 * (routed calls completed, tcoll finalized before MPI), TCOLL_MPI, and the counts TCOLL_DEBUG=INFO
 * prints. */
#define _GNU_SOURCE
#include "layer.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool lay_on;
bool lay_nonblocking;
bool lay_mpi_persistent_wrong;

/* ------------------------------------------------------------------ the MPI it was built for */

#if defined(OPEN_MPI)
#define BUILT_FOR "Open MPI"
#define OWN_LIB "libmpi.so.40"
static const char *const other_libs[] = {"libmpich.so", "libmpi.so.12", "libmpich"};
#else
#define BUILT_FOR "MPICH"
#define OWN_LIB "libmpich.so"
static const char *const other_libs[] = {"libmpi.so.40", "libopen-pal", "libopen-rte"};
#endif

static int find_other(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  const char *base = lay_file_name(info->dlpi_name);
  for (size_t i = 0; i < sizeof other_libs / sizeof other_libs[0]; i++)
    if (!strncmp(base, other_libs[i], strlen(other_libs[i]))) {
      *(const char **)data = info->dlpi_name;
      return 1;
    }
  return 0;
}

lay_next_t lay_next;

static void find_next(void) {
#define LAY_FIND(f)                                                \
  lay_next.f = (__typeof__(&PMPI_##f))dlsym(RTLD_NEXT, "MPI_" #f); \
  if (!lay_next.f) lay_next.f = PMPI_##f;
  LAY_DEFINED(LAY_FIND)
#undef LAY_FIND
}

/* A program of another MPI than the layer's would call it with handles of another ABI: say so
 * and stop before its first MPI call, rather than crash inside it. */
__attribute__((constructor)) static void check_mpi(void) {
  find_next();
  const char *other = NULL;
  dl_iterate_phdr(find_other, &other);
  if (!other) return;
  fprintf(stderr,
          "libtcoll-mpi.so: this layer was built for %s (" OWN_LIB
          "), but the program also "
          "loads %s: it uses another MPI. Use the libtcoll-mpi.so built with the program's MPI "
          "(tcoll's MPI=mpich build for MPICH programs), or run without LD_PRELOAD.\n",
          BUILT_FOR, other);
  exit(1);
}

/* ------------------------------------------------------------------ counts */

static const char *const names[LAY_NUM_FNS] = {
    [LAY_ALLREDUCE] = "MPI_Allreduce",
    [LAY_IALLREDUCE] = "MPI_Iallreduce",
    [LAY_REDUCE] = "MPI_Reduce",
    [LAY_IREDUCE] = "MPI_Ireduce",
    [LAY_BCAST] = "MPI_Bcast",
    [LAY_IBCAST] = "MPI_Ibcast",
    [LAY_ALLGATHER] = "MPI_Allgather",
    [LAY_IALLGATHER] = "MPI_Iallgather",
    [LAY_ALLTOALL] = "MPI_Alltoall",
    [LAY_IALLTOALL] = "MPI_Ialltoall",
    [LAY_REDUCE_SCATTER_BLOCK] = "MPI_Reduce_scatter_block",
    [LAY_IREDUCE_SCATTER_BLOCK] = "MPI_Ireduce_scatter_block",
    [LAY_REDUCE_SCATTER] = "MPI_Reduce_scatter",
    [LAY_IREDUCE_SCATTER] = "MPI_Ireduce_scatter",
    [LAY_ALLREDUCE_INIT] = "MPI_Allreduce_init",
    [LAY_REDUCE_INIT] = "MPI_Reduce_init",
    [LAY_BCAST_INIT] = "MPI_Bcast_init",
    [LAY_ALLGATHER_INIT] = "MPI_Allgather_init",
    [LAY_ALLTOALL_INIT] = "MPI_Alltoall_init",
    [LAY_REDUCE_SCATTER_BLOCK_INIT] = "MPI_Reduce_scatter_block_init",
    [LAY_REDUCE_SCATTER_INIT] = "MPI_Reduce_scatter_init",
};

/* Routed calls by algorithm: a few names per function (the algorithms of one op). */
#define ALGOS 6
static struct {
  long passed;
  const char *algo[ALGOS];
  long routed[ALGOS];
  long staged; /* of those, calls on host mirrors of device buffers */
} counts[LAY_NUM_FNS];

const char *lay_fn_name(lay_fn_t fn) { return names[fn]; }

void lay_count(lay_fn_t fn, const char *algo, bool staged) {
  if (staged) __atomic_add_fetch(&counts[fn].staged, 1, __ATOMIC_RELAXED);
  if (!algo) {
    __atomic_add_fetch(&counts[fn].passed, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int i = 0; i < ALGOS; i++) {
    const char *none = NULL; /* the first call routed by an algorithm takes a free slot */
    if (!__atomic_load_n(&counts[fn].algo[i], __ATOMIC_ACQUIRE))
      __atomic_compare_exchange_n(&counts[fn].algo[i], &none, algo, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE);
    if (!strcmp(__atomic_load_n(&counts[fn].algo[i], __ATOMIC_ACQUIRE), algo)) {
      __atomic_add_fetch(&counts[fn].routed[i], 1, __ATOMIC_RELAXED);
      return;
    }
  }
}

static long routed_total(int fn) {
  long n = 0;
  for (int i = 0; i < ALGOS; i++) n += __atomic_load_n(&counts[fn].routed[i], __ATOMIC_RELAXED);
  return n;
}

/* For tests and tools (found with dlsym): how routed nonblocking calls progress in this process,
 * "hook" (MPI's progress loop), "thread", or "none" (they pass through). */
LAY_EXPORT const char *tcoll_mpi_layer_progress(void) {
  return lay_on ? lay_progress_name() : "none";
}

/* For tests and tools (found with dlsym): how many calls of the MPI function named so this
 * process routed to tcoll (routed != 0) or passed to PMPI (routed == 0); -1 for a name the layer
 * does not define. */
LAY_EXPORT long tcoll_mpi_layer_calls(const char *mpi_function_name, int routed) {
  for (int fn = 0; fn < LAY_NUM_FNS; fn++)
    if (mpi_function_name && !strcmp(names[fn], mpi_function_name))
      return routed ? routed_total(fn) : __atomic_load_n(&counts[fn].passed, __ATOMIC_RELAXED);
  return -1;
}

/* For tests and tools (found with dlsym): how many calls of the MPI function named so, routed or
 * passed, ran on host mirrors of device buffers (the MPI cannot read device memory); -1 for a name
 * the layer does not define. */
LAY_EXPORT long tcoll_mpi_layer_staged(const char *mpi_function_name) {
  for (int fn = 0; fn < LAY_NUM_FNS; fn++)
    if (mpi_function_name && !strcmp(names[fn], mpi_function_name))
      return __atomic_load_n(&counts[fn].staged, __ATOMIC_RELAXED);
  return -1;
}

/* TCOLL_DEBUG=INFO: one line per function this rank called. */
static void print_counts(void) {
  tcoll_config_t cfg;
  if (tcoll_get_config(&cfg) != TCOLL_SUCCESS || cfg.debug < TCOLL_LOG_INFO) return;
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int fn = 0; fn < LAY_NUM_FNS; fn++) {
    if (!counts[fn].passed && !routed_total(fn)) continue;
    char line[512];
    int at = snprintf(line, sizeof line, "tcoll-mpi [rank %d] %s: %ld routed", rank, names[fn],
                      routed_total(fn));
    for (int i = 0; i < ALGOS && counts[fn].algo[i] && at < (int)sizeof line; i++)
      at += snprintf(line + at, sizeof line - (size_t)at, "%s%s %ld", i ? ", " : " (",
                     counts[fn].algo[i], counts[fn].routed[i]);
    if (at < (int)sizeof line)
      at += snprintf(line + at, sizeof line - (size_t)at, "%s, %ld passed to MPI",
                     counts[fn].algo[0] ? ")" : "", counts[fn].passed);
    if (counts[fn].staged && at < (int)sizeof line)
      snprintf(line + at, sizeof line - (size_t)at, "; %ld on host copies of device buffers",
               counts[fn].staged);
    fprintf(stderr, "%s\n", line);
  }
  fprintf(stderr, "tcoll-mpi [rank %d] nonblocking calls progress: %s\n", rank,
          tcoll_mpi_layer_progress());
}

/* ------------------------------------------------------------------ init and finalize */

/* TCOLL_MPI: on unless off, 0, no or false. */
static int setting_on(void) {
  const char *v = getenv("TCOLL_MPI");
  if (!v || !*v) return 1;
  return !(strcasecmp(v, "off") == 0 || strcmp(v, "0") == 0 || strcasecmp(v, "no") == 0 ||
           strcasecmp(v, "false") == 0);
}

/* After MPI is up: every rank agrees on TCOLL_MPI, then tcoll starts on the program's MPI; the
 * ranks route where tcoll started on every one of them, and nonblocking calls where every one of
 * them can progress them. */
static void start(int provided, lay_progress_t how) {
  int mine = setting_on(), all = 0;
  if (PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS || !all)
    return;
  tcoll_layer_no_symmetric_heap();
  int started = LAY_TCOLL(tcoll_init(NULL, NULL)) == TCOLL_SUCCESS;
  if (!started)
    fprintf(stderr, "libtcoll-mpi.so: tcoll did not start (%s): every call goes to MPI\n",
            tcoll_last_error());
  int progress = started && lay_twins_init() == MPI_SUCCESS &&
                 (how == LAY_PROGRESS_HOOK || provided >= MPI_THREAD_MULTIPLE) &&
                 lay_requests_init(how, provided) == MPI_SUCCESS;
  int mine_too[3] = {started, progress, started && tcoll_layer_mpi_persistent_wrong()};
  int all_too[3] = {0, 0, 0};
  PMPI_Allreduce(mine_too, all_too, 3, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (started && !all_too[0]) { /* tcoll failed elsewhere: no rank routes */
    lay_requests_stop();
    LAY_TCOLL(tcoll_finalize());
  }
  lay_nonblocking = all_too[1];
  lay_mpi_persistent_wrong = all_too[2];
  lay_on = all_too[0];
  lay_stage_init();
}

/* The program gets the thread level it asked for; MPI_THREAD_MULTIPLE is asked for it only where
 * a progress thread will call MPI beside it. */
static int init_thread(int *argc, char ***argv, int required, int *provided, lay_progress_t how) {
  int got = MPI_THREAD_SINGLE, want = required;
  if (how == LAY_PROGRESS_THREAD && want < MPI_THREAD_MULTIPLE) want = MPI_THREAD_MULTIPLE;
  int rc = lay_next.Init_thread(argc, argv, want, &got);
  if (rc != MPI_SUCCESS) return rc;
  if (provided) *provided = got;
  start(got, how);
  return MPI_SUCCESS;
}

/* The layer's part of MPI_Finalize: routed calls completed, counts printed, progress stopped. */
static void stop_layer(void) {
  lay_requests_drain(NULL);
  print_counts();
  lay_requests_stop();
  lay_on = false;
  lay_stages = false;
}

/* Such a program may finalize MPI without the layer too (MPICH's mpi_f08 calls PMPI_Finalize): an
 * attribute on MPI_COMM_SELF, set after tcoll's own, stops the layer first thing in MPI_Finalize
 * (MPI deletes them in the reverse order of setting, while MPI still works); tcoll's attribute
 * then shuts tcoll down, told to expect it. */
static int stop_in_mpi_finalize(MPI_Comm comm, int key, void *value, void *extra) {
  (void)comm, (void)key, (void)value, (void)extra;
  if (lay_on) stop_layer();
  return MPI_SUCCESS;
}

static void finalize_with_mpi(void) {
  int key = MPI_KEYVAL_INVALID;
  if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, stop_in_mpi_finalize, &key, NULL) !=
      MPI_SUCCESS)
    return;
  if (PMPI_Comm_set_attr(MPI_COMM_SELF, key, NULL) == MPI_SUCCESS)
    tcoll_layer_expect_mpi_finalize();
  PMPI_Comm_free_keyval(&key); /* MPI frees it once the attribute is gone; the callback stays */
}

/* MPI_Init or MPI_Init_thread went through the layer (whether or not it started). */
static bool init_seen;

LAY_EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
  init_seen = true;
  if (!setting_on()) return lay_next.Init_thread(argc, argv, required, provided);
  return init_thread(argc, argv, required, provided, lay_progress_plan());
}

/* A program whose MPI started without the layer's MPI_Init (MPICH 4.0's mpi_f08 calls PMPI_Init,
 * then the C collectives): the layer starts in its first blocking collective on MPI_COMM_WORLD,
 * before that call. Every rank is in it, and it is the same call everywhere (MPI orders a
 * communicator's collectives alike on every rank; the world's nonblocking calls before it passed on
 * every rank). Tried once. */
bool lay_start_late(void) {
  static bool tried;
  if (init_seen || tried) return false;
  tried = true;
  int inited = 0, fin = 0;
  PMPI_Initialized(&inited);
  PMPI_Finalized(&fin);
  if (!inited || fin) return false;
  int got = MPI_THREAD_SINGLE;
  PMPI_Query_thread(&got);
  start(got, lay_progress_plan());
  if (lay_on) finalize_with_mpi();
  return lay_on;
}

LAY_EXPORT int MPI_Init(int *argc, char ***argv) {
  init_seen = true;
  if (!setting_on()) return lay_next.Init(argc, argv);
  lay_progress_t how = lay_progress_plan();
  int got = MPI_THREAD_SINGLE;
  if (how == LAY_PROGRESS_THREAD) return init_thread(argc, argv, MPI_THREAD_SINGLE, &got, how);
  int rc = lay_next.Init(argc, argv);
  if (rc != MPI_SUCCESS) return rc;
  PMPI_Query_thread(&got);
  start(got, how);
  return MPI_SUCCESS;
}

LAY_EXPORT int MPI_Finalize(void) {
  if (lay_on) {
    stop_layer();
    LAY_TCOLL(tcoll_finalize());
  }
  return lay_next.Finalize();
}
