/* tcoll-bench: tcoll's collectives against raw MPI, side by side in one run.
 *
 *   tcoll-mpiexec -n 2 tcoll-bench [--ops LIST] [--dtype T] [--min SIZE] [--max SIZE] [--step F]
 *                            [--iters N] [--min-iters N] [--time SEC] [--warmup N] [--csv FILE]
 *                            [--device] [--alloc] [--grad] [--tune] [--no-overlap] [--no-check]
 *                            [--repeat N]
 *
 * For each op and size the bench alternates iterations of the tcoll call (post + wait) and of
 * the raw MPI code that does the same thing (MPI_I* + MPI_Wait on host buffers), so that noise
 * on a shared machine hits both. Each iteration is timed on every rank; the time of an
 * iteration is the slowest rank's, and a point reports the median over iterations. The order
 * of the variants flips every iteration (ABBA) so that neither always runs first (the memcpy
 * of the %-of-memcpy column opens every iteration, outside the flipping: see variant_at in
 * timing.c). The ratio is the median over iterations of tcoll's time over the adjacent MPI
 * iteration's: on a loaded machine times are bimodal (a rank that loses its core makes a round
 * slow), which moves the medians of the two variants independently but mostly moves both
 * members of a pair together.
 *
 * Columns: the median times, the ratio (tcoll / MPI) and their difference, algbw = S / t, busbw =
 * algbw * factor with nccl-tests' S and factors (doc/PERFORMANCE.md there): all_reduce 2(n-1)/n,
 * all_gather and reduce_scatter (n-1)/n with S the whole gathered / scattered array, all_to_all
 * (n-1)/n, broadcast 1. The overlap columns follow OSU's osu_iallreduce: post, compute for about
 * the pure communication time, wait; overlap = 100 * (1 - (t_total - t_compute) / t_pure),
 * clamped to [0, 100]. Allocation columns count heap allocation calls per call in the timed
 * window: made by the whole process (tcoll, MPI, glibc, every thread) for tcoll and for raw MPI
 * (MPI's nonblocking collectives allocate too), and made by libtcoll's own code ("own": the
 * caller's address lies in libtcoll; see alloc_count.c). mcp_t / mcp_m: a memcpy of the bytes each
 * rank must move (S x the busbw factor), timed in the same rounds on every rank at once, in
 * percent of tcoll's / MPI's time: how close each comes to the machine's limit. algorithm: what
 * tcoll chose for the call (tcoll_last_algorithm; doc/guide.md, "Algorithms").
 *
 * --tune times all_reduce, reduce_scatter, reduce and the all-to-all family again under each
 * algorithm, forced through the config's algo field (as TCOLL_ALGO does), notes each one's time
 * over raw MPI's, and prints at the end the table of the best algorithm by size that it measured.
 *
 * Extra cases: all_gather and reduce_scatter along dim 1 also time the dim-0 call on the same
 * bytes (dim1/dim0), and all_gather_dim1 also a contiguous MPI all_gather followed by a local
 * interleave; coalesced times tcoll_all_reduce_coalesced of 64 x 256 elements against raw MPI
 * (pack, one MPI_Iallreduce, unpack), against one raw MPI_Iallreduce of the same total bytes from
 * one contiguous buffer (coalesced/one_raw: the target), and 64 separate tcoll_all_reduce calls
 * (all posted, then all waited) against 64 MPI_Iallreduce + MPI_Waitall. reduce goes to rank 0
 * (results compared there only). The all-to-all family: all_to_all (the list form, one tensor per
 * peer) against the raw MPI_Ialltoall of the same bytes between contiguous buffers, as
 * all_to_all_single; permute (a shift by one rank) against its literal call (MPI_Ialltoallv with
 * one non-empty block each way), and MPI_Irecv + MPI_Isend in the note (/p2p); shard_dim
 * ([R, n C] sharded along dim 1, gathered along 0) and shard_dim_g1s0 (the reverse) against their
 * literal call (MPI_Ialltoallv of strided slab datatypes), and the raw MPI_Ialltoall of the same
 * bytes in the note (/alltoall).
 *
 * --alloc adds to every op with one output a variant whose output tcoll allocates (data == NULL,
 * freed after the wait): alloc/prealloc in the note. grad_all_reduce (--grad, or in --ops) times
 * the differentiable all_reduce forward + backward, outputs allocated by tcoll, against one raw
 * MPI_Iallreduce (the ratio column), one plain tcoll_all_reduce (grad/plain: the target) and two
 * (grad/two_plain: what forward + backward communicate).
 *
 * --repeat N runs the whole sweep N times and reports, per point, the median over the sweeps of
 * each column: on a shared machine whose speed drifts over minutes, one sweep can land in a slow
 * spell that the per-point medians do not remove.
 *
 * --device puts tcoll's tensors on a device (TCOLL_FAKE_DEVICES=N emulates one; with CUDA the
 * rank's node-local index modulo the device count) and compares with raw MPI on host buffers:
 * the ratio then shows what staging costs.
 *
 * The files: bench.h (the shared types), args.c (the command line and --help), common.c (the
 * run's world, small helpers), data.c (the inputs' pattern, comparisons), point.c (a point: its
 * set-up, the variants every op may have, the check), ops-reduce.c, ops-gather.c,
 * ops-alltoall.c and ops-coalesced.c (each op's descriptor: its tcoll call, the raw MPI code
 * doing the same, the variants of its note), timing.c (the timed and overlap rounds), sweep.c
 * (the sizes, --repeat), report.c (the table, the CSV, --tune's table), targets.c (the
 * verdicts), alloc_count.c (the allocation counts); this file: main and the run's preamble. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "bench.h"

#include "alloc_count.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The MPI library and the transport settings in force (the user's environment variables of Open
 * MPI's transports and collectives, MPICH, UCX, libfabric and tcoll; not those mpiexec sets for
 * its own bookkeeping): what makes one run's MPI numbers comparable with another's. */
static void print_transport(void) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  version[strcspn(version, "\n,")] = '\0';
  printf("# MPI: %s\n# transport settings:", version);
  extern char **environ;
  static const char *const prefixes[] = {
      "OMPI_MCA_btl",  "OMPI_MCA_pml",  "OMPI_MCA_mtl",
      "OMPI_MCA_coll", "OMPI_MCA_mpi_", "OMPI_MCA_rmaps_base_oversubscribe",
      "OMPI_MCA_osc",  "MPIR_CVAR_",    "MPICH_",
      "UCX_",          "FI_",           "TCOLL_"};
  bool single_copy_set = false;
  for (char **e = environ; *e; e++)
    for (size_t k = 0; k < sizeof prefixes / sizeof *prefixes; k++)
      if (!strncmp(*e, prefixes[k], strlen(prefixes[k])) && strncmp(*e, "TCOLL_OUTPUT_TTY", 16) &&
          strncmp(*e, "OMPI_MCA_mpi_oversubscribe", 26)) {
        printf(" %s", *e);
        single_copy_set |= !strncmp(*e, "OMPI_MCA_btl_vader_single_copy_mechanism", 40);
      }
  if (strstr(version, "Open MPI") && !single_copy_set)
    printf(" (vader single copy: the default, cma)");
  printf("\n");
}

/* What the run measures and how to read its columns, then the table's header (rank 0). */
static void print_preamble(const tcoll_config_t *cfg, bool watching) {
  int thread_level = tcoll_mpi_thread_level();
  if (g_rank != 0) return;
  int v = tcoll_version(); /* MAJOR * 10000 + MINOR * 100 + PATCH */
  printf(
      "# tcoll-bench: tcoll %d.%d.%d%s, %d ranks, %s sum, %s buffers%s%s; raw MPI on host "
      "buffers\n",
      v / 10000, v / 100 % 100, v % 100, tcoll_version_suffix(), g_size, g_dt.name,
      opt.device ? "device" : "host", opt.device ? " on backend " : "",
      opt.device ? tcoll_device_backend() : "");
  print_transport();
  printf(
      "# TCOLL_PROGRESS=%s, MPI thread level %d; times: median over iterations of the slowest "
      "rank; tcoll and MPI iterations alternate\n",
      cfg->progress_thread ? "thread" : "none", thread_level);
  printf(
      "# ratio: median over iterations of tcoll time / time of the adjacent raw-MPI iteration; "
      "ovh_us: difference of the medians\n");
  printf(
      "# size: nccl-tests' S (all_gather: gathered output; reduce_scatter: input); busbw = "
      "algbw x 2(n-1)/n all_reduce, (n-1)/n all_gather/reduce_scatter/all_to_all, 1 "
      "broadcast\n");
  printf(
      "# ovl: OSU-style overlap of post / compute / wait; alloc_t / alloc_m: heap allocations "
      "per call, whole process (MPI's included); own: those made by libtcoll's own code\n");
  if (!watching)
    printf("# (libtcoll not found among the loaded objects: the own column stays 0)\n");
  if (opt.repeat > 1)
    printf(
        "# --repeat %d: every column is the median over %d sweeps of that point (own: the "
        "largest; iters and wrong: the sum)\n",
        opt.repeat, opt.repeat);
  print_header();
}

/* --device: the rank's node-local index modulo the device count. */
static int device_of_rank(void) {
  int ndev = tcoll_device_count();
  if (ndev < 1)
    die("--device: no device (backend %s); set TCOLL_FAKE_DEVICES=1 to emulate one",
        tcoll_device_backend());
  MPI_Comm node;
  int local = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  return local % ndev;
}

/* BENCH_MPI_THREAD: MPI initialized here, at the level a plain program asks for (the blocking
 * column then times the call such a program has), before tcoll_init; whether it was. */
static bool init_mpi_first(int *argc, char ***argv) {
  static const char *const names[] = {"single", "funneled", "serialized", "multiple"};
  static const int levels[] = {MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED, MPI_THREAD_SERIALIZED,
                               MPI_THREAD_MULTIPLE};
  const char *want = getenv("BENCH_MPI_THREAD");
  if (!want || !*want) return false;
  for (int i = 0; i < 4; i++) {
    if (strcmp(want, names[i])) continue;
    int provided = 0;
    MP(MPI_Init_thread(argc, argv, levels[i], &provided));
    return true;
  }
  fprintf(stderr,
          "tcoll-bench: BENCH_MPI_THREAD=%s (expected single, funneled, serialized or "
          "multiple)\n",
          want);
  exit(2);
}

int main(int argc, char **argv) {
  bool mpi_here = init_mpi_first(&argc, &argv);
  TC(tcoll_init(&argc, &argv));
  bool watching = bench_alloc_watch("libtcoll") == 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MP(MPI_Comm_dup(MPI_COMM_WORLD, &g_mpi));
  g_tc = tcoll_comm_world();
  parse_args(argc, argv);
  if (opt.device) g_dev = device_of_rank();
  if (opt.csv && g_rank == 0) csv_open(opt.csv);
  tcoll_config_t cfg;
  TC(tcoll_get_config(&cfg));
  algo_set_base(cfg.algo);
  print_preamble(&cfg, watching);

  double t_start = now();
  run_sweeps();
  report_targets();
  if (opt.tune) report_tune();
  if (g_rank == 0) printf("# %d points in %.1f s\n", g_nrows, now() - t_start);
  long wrong = rows_wrong();
  csv_close();
  rows_free();
  MPI_Comm_free(&g_mpi);
  int rc = tcoll_finalize();
  if (mpi_here) MPI_Finalize();
  return rc == TCOLL_SUCCESS && wrong == 0 ? 0 : 1;
}
