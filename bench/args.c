/* tcoll-bench: the command line (options, --dtype, sizes with K/M/G suffixes) and --help. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

options_t opt = {.min_bytes = 8,
                 .max_bytes = (size_t)64 << 20,
                 .step = 2,
                 .max_iters = 1000,
                 .min_iters = 10,
                 .warmup = 5,
                 .repeat = 1,
                 .time_per_point = 0.25,
                 .overlap = true,
                 .check = true};

dtype_info_t g_dt;

static bool ops_named; /* --ops or --grad: only the ops named run, else all of them */

static size_t parse_size(const char *s) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0)
    die("bad size '%s' (expected a number with an optional K, M or G suffix)", s);
  size_t mul = 1;
  switch (*end) {
  case 'k':
  case 'K':
    mul = (size_t)1 << 10;
    end++;
    break;
  case 'm':
  case 'M':
    mul = (size_t)1 << 20;
    end++;
    break;
  case 'g':
  case 'G':
    mul = (size_t)1 << 30;
    end++;
    break;
  default: break;
  }
  if (*end == 'i') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) die("bad size '%s' (expected a number with an optional K, M or G suffix)", s);
  return (size_t)(v * (double)mul);
}

static void usage(void) {
  if (g_rank) return;
  printf(
      "usage: mpiexec -n N tcoll-bench [options]\n"
      "  --ops LIST      comma-separated ops (default all): ");
  for (int i = 0; i < NUM_OPS; i++) printf("%s%s", op_name(i), i + 1 < NUM_OPS ? "," : "\n");
  printf(
      "  --dtype T       element type: float32 (default), float64, int32, int64 (sums of small "
      "integers:\n"
      "                  exact in each, so results are compared bit for bit)\n"
      "  --min SIZE      smallest size in bytes (default 8; K, M, G suffixes)\n"
      "  --max SIZE      largest size (default 64M; always measured, also where --step jumps "
      "past it)\n"
      "  --step F        size factor between points (default 2)\n"
      "  --iters N       at most N timed iterations per variant and point (default 1000)\n"
      "  --min-iters N   at least N (default 10)\n"
      "  --time SEC      time budget of one point's timed loop (default 0.25)\n"
      "  --warmup N      untimed rounds before each point below 1 MiB (default 5; 2 above)\n"
      "  --csv FILE      also write the results as CSV (rank 0)\n"
      "  --device        tcoll on device buffers (TCOLL_FAKE_DEVICES=N emulates them) against "
      "MPI on host\n"
      "  --alloc         also time each op with outputs tcoll allocates (data == NULL, freed "
      "after the wait):\n"
      "                  the note's alloc/prealloc is that time over the preallocated call's\n"
      "  --grad          the grad_all_reduce op (same as adding it to --ops): differentiable "
      "all_reduce\n"
      "                  forward + backward, outputs allocated by tcoll, against one and two "
      "plain all_reduces\n"
      "  --tune          also time all_reduce, reduce_scatter, reduce and the all-to-all family "
      "under each\n"
      "                  algorithm (TCOLL_ALGO), note their times over raw MPI's, and print the "
      "table of the\n"
      "                  best algorithm by size at the end\n"
      "                  (--tune-algorithms: the same; Open MPI's mpiexec also reads --tune as "
      "its own option)\n"
      "  --no-overlap    skip the overlap measurement\n"
      "  --no-check      skip the comparison of the results with raw MPI's\n"
      "  --repeat N      run the whole sweep N times; report per point the median over the "
      "sweeps\n"
      "Environment: TCOLL_PROGRESS=thread, TCOLL_FAKE_DEVICES=N and the other TCOLL_* settings "
      "apply;\n"
      "BENCH_DUMP=FILE appends every timed iteration (rank 0, slowest-rank times in us) to "
      "FILE;\n"
      "BENCH_MPI_THREAD=single|funneled|serialized|multiple initializes MPI at that level before "
      "tcoll_init\n"
      "(default: tcoll_init's MPI_THREAD_MULTIPLE, under which Open MPI's blocking calls take "
      "locks: a plain\n"
      "program's MPI_Allreduce is faster under single).\n");
}

static bool set_dtype(const char *name) {
  if (!strcmp(name, "float32"))
    g_dt.tc = TCOLL_FLOAT32, g_dt.mpi = MPI_FLOAT;
  else if (!strcmp(name, "float64"))
    g_dt.tc = TCOLL_FLOAT64, g_dt.mpi = MPI_DOUBLE;
  else if (!strcmp(name, "int32"))
    g_dt.tc = TCOLL_INT32, g_dt.mpi = MPI_INT32_T;
  else if (!strcmp(name, "int64"))
    g_dt.tc = TCOLL_INT64, g_dt.mpi = MPI_INT64_T;
  else
    return false;
  g_dt.name = name;
  g_dt.size = tcoll_dtype_size(g_dt.tc);
  return true;
}

static void select_ops(const char *list) {
  char *copy = strdup(list), *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int k = 0;
    while (k < NUM_OPS && strcmp(tok, op_name(k))) k++;
    if (k == NUM_OPS) die("unknown op '%s' (see --help)", tok);
    opt.ops[k] = ops_named = true;
  }
  free(copy);
}

/* What an option does with its value (the kinds from ARG_OPS on take one). */
typedef enum {
  ARG_SET,   /* sets a bool */
  ARG_CLEAR, /* clears a bool */
  ARG_GRAD,  /* selects grad_all_reduce */
  ARG_HELP,  /* prints the usage and exits */
  ARG_OPS,   /* a list of ops */
  ARG_DTYPE, /* an element type */
  ARG_SIZE,  /* a size_t with a K, M or G suffix */
  ARG_INT,
  ARG_DOUBLE,
  ARG_STRING,
} arg_kind_t;

static const struct arg_spec {
  const char *name;
  arg_kind_t kind;
  void *target;
} args[] = {
    {"--ops", ARG_OPS, NULL},
    {"--dtype", ARG_DTYPE, NULL},
    {"--min", ARG_SIZE, &opt.min_bytes},
    {"--max", ARG_SIZE, &opt.max_bytes},
    {"--step", ARG_INT, &opt.step},
    {"--iters", ARG_INT, &opt.max_iters},
    {"--min-iters", ARG_INT, &opt.min_iters},
    {"--time", ARG_DOUBLE, &opt.time_per_point},
    {"--warmup", ARG_INT, &opt.warmup},
    {"--csv", ARG_STRING, &opt.csv},
    {"--device", ARG_SET, &opt.device},
    {"--alloc", ARG_SET, &opt.alloc},
    {"--tune", ARG_SET, &opt.tune},
    {"--tune-algorithms", ARG_SET, &opt.tune},
    {"--grad", ARG_GRAD, NULL},
    {"--no-overlap", ARG_CLEAR, &opt.overlap},
    {"--no-check", ARG_CLEAR, &opt.check},
    {"--repeat", ARG_INT, &opt.repeat},
    {"--help", ARG_HELP, NULL},
    {"-h", ARG_HELP, NULL},
};

static const struct arg_spec *find_arg(const char *name) {
  for (size_t k = 0; k < sizeof args / sizeof *args; k++)
    if (!strcmp(name, args[k].name)) return &args[k];
  die("unknown option '%s' (see --help)", name);
}

static void apply_arg(const struct arg_spec *a, const char *val) {
  switch (a->kind) {
  case ARG_SET: *(bool *)a->target = true; break;
  case ARG_CLEAR: *(bool *)a->target = false; break;
  case ARG_GRAD: opt.ops[OP_GRAD_ALL_REDUCE] = ops_named = true; break;
  case ARG_HELP:
    usage();
    tcoll_finalize();
    exit(0);
  case ARG_OPS: select_ops(val); break;
  case ARG_DTYPE:
    if (!set_dtype(val))
      die("unknown --dtype '%s' (expected float32, float64, int32 or int64)", val);
    break;
  case ARG_SIZE: *(size_t *)a->target = parse_size(val); break;
  case ARG_INT: *(int *)a->target = atoi(val); break;
  case ARG_DOUBLE: *(double *)a->target = atof(val); break;
  case ARG_STRING: *(const char **)a->target = val; break;
  }
}

/* Defaults for what was left out, limits for what was given; dies on what makes no sweep. */
static void settle_options(void) {
  if (!ops_named)
    for (int k = 0; k < NUM_OPS; k++) opt.ops[k] = true;
  if (opt.min_bytes < 1) opt.min_bytes = 1;
  if (opt.max_bytes < opt.min_bytes)
    die("--max (%zu) is below --min (%zu)", opt.max_bytes, opt.min_bytes);
  if (opt.step < 1) die("--step must be >= 1");
  if (opt.min_iters < 1) opt.min_iters = 1;
  if (opt.max_iters < opt.min_iters) opt.max_iters = opt.min_iters;
  if (opt.warmup < 0) opt.warmup = 0;
  if (opt.repeat < 1) die("--repeat must be >= 1");
}

void parse_args(int argc, char **argv) {
  set_dtype("float32");
  for (int i = 1; i < argc; i++) {
    const struct arg_spec *a = find_arg(argv[i]);
    const char *val = NULL;
    if (a->kind >= ARG_OPS) {
      if (i + 1 >= argc) die("%s needs a value", argv[i]);
      val = argv[++i];
    }
    apply_arg(a, val);
  }
  settle_options();
}
