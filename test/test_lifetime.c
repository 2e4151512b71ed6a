/* Library lifetime, one scenario per run (argv[1]); its own main, since the point is who
 * initializes and finalizes MPI (the harness's expectations, test/harness.h, without its main).
 * Each rank checks on its own and exits non-zero on a failure (MPI may be finalized by then, so
 * nothing is summed across ranks).
 *
 *   owned     tcoll_init before MPI: tcoll initializes MPI and its last tcoll_finalize
 *             finalizes it; reference counting; the thread level; TCOLL_ERR_STATE before
 *             tcoll_init and after tcoll_finalize
 *   embedded  the host program initializes MPI (MPI_THREAD_FUNNELED): tcoll_finalize leaves
 *             MPI usable for the host's own calls; tcoll starts again afterwards
 *   unwaited  tcoll_finalize with unwaited work completes it and reports it on stderr
 *   mpi-first the host calls MPI_Finalize while tcoll is initialized, with work pending
 *   badenv    malformed TCOLL_* variables make tcoll_init fail naming the variable; a later
 *             tcoll_init still owns (and finalizes) the MPI that the failed one started
 *   device    device work across sessions: init and finalize twice (and nested), each session
 *             posting staged and pipelined collectives on a user stream that the user destroys
 *             before waiting; runs on emulated devices, on the GPU with T_GPU=1
 *   cache     finalize gives back the storage cache (host, device, pinned); storage freed after
 *             finalize is not cached; the cache works again after a restart */
#define _GNU_SOURCE 1
#include "harness.h"

#include "gpu_probe.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* This rank and the world's size, once MPI runs (for the harness's messages). */
static void mpi_ids(void) {
  MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &t_size);
}

static int mpi_initialized(void) {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag;
}
static int mpi_finalized(void) {
  int flag = 0;
  MPI_Finalized(&flag);
  return flag;
}

/* all_reduce SUM of (rank + 1) * (i + 1) over 5 int32 elements into a caller-owned buffer. */
static void post_sum(tcoll_comm_t *comm, int32_t *inbuf, int32_t *outbuf) {
  int64_t shape[1] = {5};
  for (int i = 0; i < 5; i++) inbuf[i] = (t_rank + 1) * (i + 1);
  tcoll_tensor_t in = tcoll_tensor_make(inbuf, TCOLL_INT32, 1, shape, TCOLL_HOST);
  tcoll_tensor_t out = tcoll_tensor_make(outbuf, TCOLL_INT32, 1, shape, TCOLL_HOST);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, comm, &out));
}
static void check_sum(const int32_t *outbuf, int size, const char *what) {
  for (int i = 0; i < 5; i++)
    T_EXPECT(outbuf[i] == size * (size + 1) / 2 * (i + 1), "%s: element %d is %d", what, i,
             outbuf[i]);
}
static void sum_now(tcoll_comm_t *comm, int size, const char *what) {
  int32_t in[5], out[5];
  post_sum(comm, in, out);
  T_OK(tcoll_wait(out));
  check_sum(out, size, what);
}

/* Every kind of call refuses to run without tcoll initialized. */
static void expect_not_initialized(const char *when) {
  T_EXPECT(tcoll_initialized() == 0, "%s: tcoll_initialized() is 1", when);
  T_EXPECT(tcoll_comm_world() == NULL, "%s: tcoll_comm_world() is not NULL", when);
  int32_t buf[4] = {0}, obuf[4] = {0};
  int64_t shape[1] = {4};
  tcoll_tensor_t in = tcoll_tensor_make(buf, TCOLL_INT32, 1, shape, TCOLL_HOST);
  tcoll_tensor_t out = tcoll_tensor_make(obuf, TCOLL_INT32, 1, shape, TCOLL_HOST), none = out;
  none.data = NULL;
  tcoll_comm_t *c = NULL;
  tcoll_mesh_t *m = NULL;
  int dims[1] = {1}, ranks[1] = {0};
  T_FAILS(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &out), TCOLL_ERR_STATE, "not initialized");
  T_FAILS(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &none), TCOLL_ERR_STATE, "not initialized");
  T_EXPECT(none.data == NULL, "%s: a refused call allocated its output", when);
  T_FAILS(tcoll_broadcast(&in, 0, NULL, &out), TCOLL_ERR_STATE, "not initialized");
  T_FAILS(tcoll_all_gather(&in, 0, NULL, &none), TCOLL_ERR_STATE, "not initialized");
  T_FAILS(tcoll_reduce_scatter(&in, TCOLL_SUM, 0, NULL, &none), TCOLL_ERR_STATE, "not initialized");
  T_FAILS(tcoll_all_to_all_single(&in, NULL, NULL, NULL, &none), TCOLL_ERR_STATE,
          "not initialized");
  T_FAILS(tcoll_all_reduce_coalesced(&in, 1, TCOLL_SUM, NULL, &none), TCOLL_ERR_STATE,
          "not initialized");
  T_FAILS(tcoll_comm_split(NULL, 0, 0, &c), TCOLL_ERR_STATE, "not initialized");
  T_FAILS(tcoll_comm_from_mpi(MPI_COMM_WORLD, &c), TCOLL_ERR_STATE, "not initialized");
  T_FAILS(tcoll_comm_from_ranks(NULL, ranks, 1, "", &c), TCOLL_ERR_STATE, "not initialized");
  T_FAILS(tcoll_comm_from_rank_groups(NULL, ranks, 1, 1, "", &c), TCOLL_ERR_STATE,
          "not initialized");
  T_FAILS(tcoll_mesh_create(NULL, 1, dims, &m), TCOLL_ERR_STATE, "not initialized");
  T_FAILS(tcoll_comm_set_name(NULL, "x"), TCOLL_ERR_STATE, "not initialized");
  T_FAILS(tcoll_finalize(), TCOLL_ERR_STATE, "not initialized");
  T_EXPECT(c == NULL && m == NULL, "%s: a refused call set its output", when);
  T_EXPECT(tcoll_pending_count() == 0, "%s: pending work", when);
  T_EXPECT(tcoll_comm_lookup("world") == NULL, "%s: lookup(\"world\") found a communicator", when);
}

/* ------------------------------------------------------------------ owned */

static int run_owned(int *argc, char ***argv) {
  T_EXPECT(!mpi_initialized(), "MPI is initialized before anything");
  expect_not_initialized("before tcoll_init");
  T_OK(tcoll_init(argc, argv));
  T_EXPECT(mpi_initialized() && !mpi_finalized(), "tcoll_init did not initialize MPI");
  T_EXPECT(tcoll_initialized() == 1, "tcoll_initialized() is 0 after tcoll_init");
  mpi_ids();
  int size = 0, provided = -1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Query_thread(&provided);
  T_EXPECT(tcoll_mpi_thread_level() == provided, "thread level %d, MPI says %d",
           tcoll_mpi_thread_level(), provided);
  T_EXPECT(provided == MPI_THREAD_MULTIPLE, "tcoll_init asked for MPI_THREAD_MULTIPLE and got %d",
           provided);
  sum_now(NULL, size, "after tcoll_init");
  /* Reference counted: a second init and its finalize leave everything up. */
  T_OK(tcoll_init(NULL, NULL));
  T_OK(tcoll_init(argc, argv));
  T_OK(tcoll_finalize());
  T_OK(tcoll_finalize());
  T_EXPECT(tcoll_initialized() == 1 && !mpi_finalized(), "an inner tcoll_finalize shut down");
  T_EXPECT(tcoll_comm_world() != NULL, "world gone after an inner finalize");
  sum_now(NULL, size, "after an inner tcoll_finalize");
  /* The last finalize finalizes MPI, which tcoll initialized. */
  T_OK(tcoll_finalize());
  T_EXPECT(mpi_finalized(), "the last tcoll_finalize did not finalize MPI");
  expect_not_initialized("after tcoll_finalize");
  T_FAILS(tcoll_init(argc, argv), TCOLL_ERR_STATE, "finalized");
  T_EXPECT(tcoll_initialized() == 0, "tcoll_init after MPI_Finalize initialized");
  return t_local_failures();
}

/* ------------------------------------------------------------------ embedded */

static int run_embedded(int *argc, char ***argv) {
  int provided = -1;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  mpi_ids();
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  expect_not_initialized("before tcoll_init (MPI initialized by the host)");
  /* A malformed variable first: the failed tcoll_init leaves the host's MPI alone. */
  setenv("TCOLL_MAX_COUNT", "abc", 1);
  T_FAILS(tcoll_init(NULL, NULL), TCOLL_ERR_INVALID_ARGUMENT, "TCOLL_MAX_COUNT");
  unsetenv("TCOLL_MAX_COUNT");
  T_EXPECT(!mpi_finalized(), "a failed tcoll_init finalized the host's MPI");
  expect_not_initialized("after a failed tcoll_init");

  T_OK(tcoll_init(NULL, NULL));
  T_EXPECT(tcoll_mpi_thread_level() == provided, "thread level %d, the host got %d",
           tcoll_mpi_thread_level(), provided);
  T_EXPECT(provided >= MPI_THREAD_FUNNELED, "MPI provided %d", provided);
  /* The host's own communicator, used by both. */
  MPI_Comm mine;
  MPI_Comm_split(MPI_COMM_WORLD, 0, size - t_rank, &mine);
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_from_mpi(mine, &c));
  sum_now(c, size, "over the host's communicator");
  int32_t in[5], out[5];
  post_sum(c, in, out); /* pending while the host communicates on its own */
  int one = 1, total = 0;
  MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, mine);
  T_EXPECT(total == size, "host allreduce gives %d", total);
  T_OK(tcoll_wait(out));
  check_sum(out, size, "tcoll work next to host work");
  /* Reference counting in the embedded case too. */
  T_OK(tcoll_init(NULL, NULL));
  T_OK(tcoll_finalize());
  T_EXPECT(tcoll_initialized() == 1, "an inner finalize shut tcoll down");
  T_OK(tcoll_finalize()); /* frees c too */
  T_EXPECT(mpi_initialized() && !mpi_finalized(), "tcoll_finalize finalized the host's MPI");
  expect_not_initialized("after tcoll_finalize (embedded)");
  /* The host keeps using MPI: world, its own communicator, a new one. */
  total = 0;
  MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  T_EXPECT(total == size, "host allreduce on MPI_COMM_WORLD after tcoll_finalize gives %d", total);
  total = 0;
  MPI_Allreduce(&t_rank, &total, 1, MPI_INT, MPI_SUM, mine);
  T_EXPECT(total == size * (size - 1) / 2, "host allreduce on its communicator gives %d", total);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Barrier(dup);
  MPI_Comm_free(&dup);
  /* And tcoll starts again. */
  T_OK(tcoll_init(argc, argv));
  T_EXPECT(tcoll_comm_world() != NULL && tcoll_comm_lookup("world") == tcoll_comm_world(),
           "world after a restart");
  sum_now(NULL, size, "after a restart");
  T_OK(tcoll_comm_from_mpi(mine, &c));
  sum_now(c, size, "host communicator after a restart");
  T_OK(tcoll_finalize());
  T_EXPECT(!mpi_finalized(), "the second tcoll_finalize finalized the host's MPI");
  MPI_Comm_free(&mine);
  MPI_Finalize();
  return t_local_failures();
}

/* ------------------------------------------------------------------ unwaited */

typedef struct {
  int rc;
} fin_t;
static void do_finalize(void *arg) { ((fin_t *)arg)->rc = tcoll_finalize(); }
static void do_mpi_finalize(void *arg) { ((fin_t *)arg)->rc = MPI_Finalize(); }

static int run_unwaited(int *argc, char ***argv) {
  T_OK(tcoll_init(argc, argv));
  mpi_ids();
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int32_t in1[5], out1[5], in2[5], out2[5];
  post_sum(NULL, in1, out1);
  post_sum(NULL, in2, out2);
  /* A coalesced work on two caller-owned buffers: one work, two buffers. */
  float cin[2][3], cout[2][3];
  int64_t shape[1] = {3};
  tcoll_tensor_t ci[2], co[2];
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 3; i++) cin[k][i] = (float)((k + 1) * (i + 1));
    ci[k] = tcoll_tensor_make(cin[k], TCOLL_FLOAT32, 1, shape, TCOLL_HOST);
    co[k] = tcoll_tensor_make(cout[k], TCOLL_FLOAT32, 1, shape, TCOLL_HOST);
  }
  T_OK(tcoll_all_reduce_coalesced(ci, 2, TCOLL_SUM, NULL, co));
  T_EXPECT(tcoll_pending_count() == 4, "pending count %zu before finalize", tcoll_pending_count());
  fin_t f = {-100};
  const char *err = t_capture_stderr(do_finalize, &f);
  T_EXPECT(f.rc == TCOLL_SUCCESS, "tcoll_finalize returned %s", tcoll_status_string(f.rc));
  T_EXPECT(strstr(err, "3 collective(s) on 4 buffer(s)") != NULL,
           "finalize did not report the count: \"%s\"", err);
  T_EXPECT(strstr(err, "never waited") != NULL, "finalize report: \"%s\"", err);
  T_EXPECT(strstr(err, "all_reduce #") != NULL && strstr(err, "all_reduce_coalesced #") != NULL,
           "finalize report does not name the ops with their sequence numbers: \"%s\"", err);
  T_EXPECT(mpi_finalized(), "tcoll_finalize did not finalize MPI");
  /* The unwaited work was completed before MPI went away. */
  check_sum(out1, size, "first unwaited all_reduce");
  check_sum(out2, size, "second unwaited all_reduce");
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 3; i++)
      T_EXPECT(cout[k][i] == (float)(size * (k + 1) * (i + 1)),
               "unwaited coalesced out[%d][%d] is %g", k, i, cout[k][i]);
  expect_not_initialized("after finalize with unwaited work");
  return t_local_failures();
}

/* ------------------------------------------------------------------ mpi-first */

static int run_mpi_first(int *argc, char ***argv) {
  int provided;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  mpi_ids();
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  T_OK(tcoll_init(argc, argv));
  int32_t in[5], out[5];
  post_sum(NULL, in, out);
  fin_t f = {-100};
  const char *err = t_capture_stderr(do_mpi_finalize, &f);
  T_EXPECT(f.rc == MPI_SUCCESS, "MPI_Finalize returned %d", f.rc);
  T_EXPECT(strstr(err, "1 collective(s) on 1 buffer(s)") != NULL,
           "no report of the unwaited work: \"%s\"", err);
  T_EXPECT(strstr(err, "MPI_Finalize was called before tcoll_finalize") != NULL,
           "no warning: \"%s\"", err);
  check_sum(out, size, "work pending at MPI_Finalize");
  T_EXPECT(tcoll_initialized() == 0, "tcoll still initialized after MPI_Finalize");
  T_EXPECT(tcoll_comm_world() == NULL, "world still there after MPI_Finalize");
  int32_t in2[5], out2[5] = {0};
  int64_t shape[1] = {5};
  tcoll_tensor_t a = tcoll_tensor_make(in2, TCOLL_INT32, 1, shape, TCOLL_HOST);
  tcoll_tensor_t b = tcoll_tensor_make(out2, TCOLL_INT32, 1, shape, TCOLL_HOST);
  T_FAILS(tcoll_all_reduce(&a, TCOLL_SUM, NULL, &b), TCOLL_ERR_STATE, "not initialized");
  (void)tcoll_finalize(); /* harmless either way: nothing left to do */
  T_FAILS(tcoll_init(argc, argv), TCOLL_ERR_STATE, "finalized");
  return t_local_failures();
}

/* ------------------------------------------------------------------ badenv */

static int run_badenv(int *argc, char ***argv) {
  static const struct {
    const char *var, *value;
  } bad[] = {
      {"TCOLL_MAX_COUNT", "abc"},
      {"TCOLL_MAX_COUNT", "0"},
      {"TCOLL_MAX_COUNT", "-5"},
      {"TCOLL_MAX_COUNT", "12abc"},
      {"TCOLL_MAX_COUNT", "99999999999"},
      {"TCOLL_DEBUG", "loud"},
      {"TCOLL_TIMEOUT", "-1"},
      {"TCOLL_TIMEOUT", "soon"},
      {"TCOLL_TIMEOUT", "nan"},
      {"TCOLL_TIMEOUT", "inf"},
      {"TCOLL_ON_TIMEOUT", "maybe"},
      {"TCOLL_CUDA_AWARE", "2"},
      {"TCOLL_PROGRESS", "yes"},
      {"TCOLL_STAGING_CHUNK", "1"},
      {"TCOLL_STAGING_CHUNK", "4k"},
      {"TCOLL_FAKE_DEVICES", "-1"},
      {"TCOLL_FAKE_DEVICES", "65"},
      {"TCOLL_FAKE_DEVICES", "two"},
      {"TCOLL_WAIT", "spin"},
      {"TCOLL_CACHE_BYTES", "lots"},
      {"TCOLL_CACHE_BYTES", "-1"},
      {"TCOLL_CACHE_BYTES", "1X"},
      {"TCOLL_CACHE_BYTES", "2 G"},
      {"TCOLL_CACHE_BYTES", "99999999999T"},
      {"TCOLL_ALGO", "all_reduce:nope"},
      {"TCOLL_ALGO", "bogus"},
      {"TCOLL_ALGO", "reduce_scatter:ring_allgather"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv(bad[i].var, bad[i].value, 1);
    int rc = tcoll_init(argc, argv);
    T_EXPECT(rc == TCOLL_ERR_INVALID_ARGUMENT, "%s=%s: tcoll_init returned %s", bad[i].var,
             bad[i].value, tcoll_status_string(rc));
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", bad[i].value);
    T_EXPECT(strstr(tcoll_last_error(), bad[i].var) && strstr(tcoll_last_error(), quoted),
             "%s=%s: message \"%s\" does not name the variable and its value", bad[i].var,
             bad[i].value, tcoll_last_error());
    T_EXPECT(tcoll_initialized() == 0, "%s=%s: tcoll is initialized after a failed tcoll_init",
             bad[i].var, bad[i].value);
    if (rc == TCOLL_SUCCESS) tcoll_finalize();
    unsetenv(bad[i].var);
    if (t_rank < 0 && mpi_initialized()) mpi_ids();
  }
  char longpath[700];
  memset(longpath, 'p', sizeof longpath);
  longpath[0] = '/';
  longpath[sizeof longpath - 1] = '\0';
  setenv("TCOLL_TRACE", longpath, 1);
  T_FAILS(tcoll_init(argc, argv), TCOLL_ERR_INVALID_ARGUMENT, "TCOLL_TRACE");
  unsetenv("TCOLL_TRACE");
  /* Valid values, names in any case, are accepted and show in the configuration. */
  static const char *good[][2] = {{"TCOLL_DEBUG", "warn"},         {"TCOLL_MAX_COUNT", "1000"},
                                  {"TCOLL_TIMEOUT", "2.5"},        {"TCOLL_ON_TIMEOUT", "RETURN"},
                                  {"TCOLL_STAGING_CHUNK", "4096"}, {"TCOLL_CUDA_AWARE", "Auto"},
                                  {"TCOLL_PROGRESS", "none"},      {"TCOLL_FAKE_DEVICES", "0"},
                                  {"TCOLL_CACHE_BYTES", "64MiB"}};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) setenv(good[i][0], good[i][1], 1);
  T_OK(tcoll_init(argc, argv));
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) unsetenv(good[i][0]);
  tcoll_config_t cfg;
  T_OK(tcoll_get_config(&cfg));
  T_EXPECT(cfg.max_count == 1000, "TCOLL_MAX_COUNT=1000 gave max_count %lld",
           (long long)cfg.max_count);
  T_EXPECT(cfg.cache_bytes == (size_t)64 << 20, "TCOLL_CACHE_BYTES=64MiB gave cache_bytes %zu",
           cfg.cache_bytes);
  T_EXPECT(cfg.timeout == 2.5 && cfg.debug == TCOLL_LOG_WARN && cfg.abort_on_timeout == 0 &&
               cfg.staging_chunk == 4096 && cfg.cuda_aware == -1 && cfg.progress_thread == 0 &&
               cfg.fake_devices == 0,
           "configuration from the environment: timeout %g debug %d abort %d chunk %zu cuda_aware "
           "%d progress %d "
           "fake %d",
           cfg.timeout, (int)cfg.debug, cfg.abort_on_timeout, cfg.staging_chunk, cfg.cuda_aware,
           cfg.progress_thread, cfg.fake_devices);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sum_now(NULL, size, "after failed starts");
  /* tcoll started MPI (in the first, failed tcoll_init): it still finalizes it. */
  T_OK(tcoll_finalize());
  T_EXPECT(mpi_finalized(), "tcoll_finalize did not finalize the MPI that tcoll_init initialized");
  if (!mpi_finalized()) MPI_Finalize();
  return t_local_failures();
}

/* ------------------------------------------------------------------ device */

static void fill_device(tcoll_tensor_t *t, int64_t n) {
  int64_t shape[1] = {n};
  tcoll_tensor_t h = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, shape, TCOLL_HOST);
  T_OK(tcoll_tensor_alloc(&h, TCOLL_FLOAT32, 1, shape, TCOLL_HOST));
  for (int64_t i = 0; i < n; i++) ((float *)h.data)[i] = (float)((t_rank + 1) * (i % 9 + 1));
  T_OK(tcoll_tensor_alloc(t, TCOLL_FLOAT32, 1, shape, 0));
  T_OK(tcoll_tensor_copy(t, &h));
  tcoll_tensor_free(&h);
}

static void check_device_sum(const tcoll_tensor_t *t, int size, const char *what) {
  int64_t n = tcoll_tensor_numel(t);
  tcoll_tensor_t h = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 1, t->shape, TCOLL_HOST);
  T_OK(tcoll_tensor_alloc(&h, TCOLL_FLOAT32, 1, t->shape, TCOLL_HOST));
  T_OK(tcoll_tensor_copy(&h, t));
  int bad = 0;
  for (int64_t i = 0; i < n && h.data; i++)
    bad += ((float *)h.data)[i] != (float)(size * (size + 1) / 2 * (i % 9 + 1));
  T_EXPECT(bad == 0, "%s: %d of %lld elements wrong", what, bad, (long long)n);
  tcoll_tensor_free(&h);
}

/* One session's device work: a whole-buffer and a pipelined all_reduce posted on a user stream,
 * which the user destroys before waiting (its queued work is done first; the outputs are then
 * ordered on the default stream), then a coalesced call on the default stream. */
static void device_session(int size, int session) {
  tcoll_config_t cfg;
  T_OK(tcoll_get_config(&cfg));
  cfg.staging_chunk = 4096;
  T_OK(tcoll_set_config(&cfg));
  void *s = NULL;
  T_OK(tcoll_stream_create(0, &s));
  T_OK(tcoll_set_stream(0, s));
  tcoll_tensor_t a, b, y = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 0, NULL, 0), z = y;
  fill_device(&a, 100);
  fill_device(&b, 5000); /* 20000 bytes: pipelined in 4096-byte chunks */
  T_OK(tcoll_all_reduce(&a, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_all_reduce(&b, TCOLL_SUM, NULL, &z));
  T_OK(tcoll_stream_destroy(0, s));
  T_EXPECT(tcoll_get_stream(0) == NULL, "session %d: the destroyed stream is still current",
           session);
  T_OK(tcoll_wait(y.data));
  T_OK(tcoll_wait(z.data));
  char what[64];
  snprintf(what, sizeof what, "session %d, whole buffer", session);
  check_device_sum(&y, size, what);
  snprintf(what, sizeof what, "session %d, pipelined", session);
  check_device_sum(&z, size, what);
  tcoll_tensor_t two[2] = {a, b}, out[2] = {y, z};
  T_OK(tcoll_all_reduce_coalesced(two, 2, TCOLL_SUM, NULL, out)); /* into the same outputs again */
  T_OK(tcoll_wait_all());
  snprintf(what, sizeof what, "session %d, coalesced", session);
  check_device_sum(&out[1], size, what);
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&b);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&z);
}

static int run_device(int *argc, char ***argv) {
  bool visible = t_gpu_prepare();
  int provided, size;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  mpi_ids();
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int session = 1; session <= 2; session++) {
    T_OK(tcoll_init(argc, argv));
    int verdict = t_gpu_verdict(tcoll_device_backend(), visible, t_rank);
    if (verdict || tcoll_device_count() == 0) {
      if (!verdict && t_rank == 0)
        printf("no device (backend %s): nothing to run\n", tcoll_device_backend());
      tcoll_finalize();
      MPI_Finalize();
      return verdict == 1 ? 1 : 0; /* a skip reads as a pass here: the GPU setups run it too */
    }
    if (session == 2) T_OK(tcoll_init(argc, argv)); /* nested: the inner finalize keeps tcoll up */
    device_session(size, session);
    if (session == 2) {
      T_OK(tcoll_finalize());
      T_EXPECT(tcoll_initialized(), "the inner tcoll_finalize shut tcoll down");
      device_session(size, 3);
    }
    T_OK(tcoll_finalize());
    T_EXPECT(!tcoll_initialized(), "session %d: still initialized", session);
  }
  MPI_Finalize();
  return t_local_failures();
}

/* ------------------------------------------------------------------ cache */

static tcoll_cache_info_t cache_info(void) {
  tcoll_cache_info_t i;
  memset(&i, 0, sizeof i);
  T_OK(tcoll_cache_info(&i));
  return i;
}

static void alloc_odd_size(void *arg) {
  (void)arg;
  int64_t n = 777777; /* a size class nothing else here uses: the cache grows */
  tcoll_tensor_t t;
  T_OK(tcoll_tensor_alloc(&t, TCOLL_UINT8, 1, &n, TCOLL_HOST));
  tcoll_tensor_free(&t);
}

/* Host and device storage (emulated devices) and staging's pinned buffers are cached while tcoll
 * runs, and given back at finalize; storage still held then is freed by tcoll_tensor_free after
 * finalize, without being cached, and the cache works again after a restart. With
 * TCOLL_DEBUG=INFO, growing the cache is logged. */
static int run_cache(int *argc, char ***argv) {
  int provided = -1;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  mpi_ids();
  setenv("TCOLL_FAKE_DEVICES", "1", 1);
  T_OK(tcoll_init(NULL, NULL));
  int64_t n = (int64_t)1 << 16;
  tcoll_tensor_t h, d, kept, y = tcoll_tensor_make(NULL, TCOLL_FLOAT32, 0, NULL, TCOLL_HOST);
  T_OK(tcoll_tensor_alloc(&h, TCOLL_FLOAT32, 1, &n, TCOLL_HOST));
  T_OK(tcoll_tensor_alloc(&d, TCOLL_FLOAT32, 1, &n, 0));
  T_OK(tcoll_tensor_alloc(&kept, TCOLL_FLOAT32, 1, &n, TCOLL_HOST));
  T_OK(tcoll_all_reduce(&d, TCOLL_SUM, NULL, &y)); /* staged: pinned buffers */
  T_OK(tcoll_wait(y.data));
  T_OK(tcoll_device_synchronize(0));
  tcoll_tensor_free(&h);
  tcoll_tensor_free(&d);
  tcoll_tensor_free(&y);
  tcoll_cache_info_t before = cache_info();
  T_EXPECT(before.cached_host > 0 && before.cached_device > 0 && before.cached_pinned > 0,
           "cached before finalize: host %zu, device %zu, pinned %zu (expected each > 0)",
           before.cached_host, before.cached_device, before.cached_pinned);
  T_OK(tcoll_finalize());
  tcoll_cache_info_t after = cache_info();
  T_EXPECT(after.cached == 0 && after.cached_host == 0 && after.cached_device == 0 &&
               after.cached_pinned == 0,
           "after tcoll_finalize the cache holds %zu bytes (host %zu, device %zu, pinned %zu)",
           after.cached, after.cached_host, after.cached_device, after.cached_pinned);
  T_EXPECT(after.freed >= before.freed + 3, "finalize gave back %llu blocks (expected at least 3)",
           (unsigned long long)(after.freed - before.freed));
  T_EXPECT(after.in_use == before.in_use, "in use changed at finalize: %zu -> %zu", before.in_use,
           after.in_use);
  tcoll_tensor_free(&kept); /* after finalize: back to the system, not cached */
  tcoll_cache_info_t freed = cache_info();
  T_EXPECT(kept.data == NULL && freed.cached == 0 && freed.in_use < after.in_use,
           "a tensor freed after finalize: cached %zu, in use %zu -> %zu", freed.cached,
           after.in_use, freed.in_use);
  T_OK(tcoll_cache_release()); /* harmless while tcoll is down */
  /* Started again, the cache works again; at INFO it says when it grows. */
  setenv("TCOLL_DEBUG", "INFO", 1);
  T_OK(tcoll_init(NULL, NULL));
  unsetenv("TCOLL_DEBUG");
  const char *log = t_capture_stderr(alloc_odd_size, NULL);
  T_EXPECT(strstr(log, "cache: allocated") && strstr(log, "host memory for 777777 bytes"),
           "growing the cache was not logged at INFO: \"%s\"", log);
  T_OK(tcoll_tensor_alloc(&h, TCOLL_FLOAT32, 1, &n, TCOLL_HOST));
  void *p = h.data;
  tcoll_tensor_free(&h);
  T_OK(tcoll_tensor_alloc(&h, TCOLL_FLOAT32, 1, &n, TCOLL_HOST));
  T_EXPECT(h.data == p, "after a restart, a freed block was not reused");
  tcoll_tensor_free(&h);
  T_OK(tcoll_finalize());
  T_EXPECT(cache_info().cached == 0, "the second finalize left %zu bytes cached",
           cache_info().cached);
  unsetenv("TCOLL_FAKE_DEVICES");
  MPI_Finalize();
  return t_local_failures();
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  int bad;
  if (!strcmp(mode, "owned"))
    bad = run_owned(&argc, &argv);
  else if (!strcmp(mode, "embedded"))
    bad = run_embedded(&argc, &argv);
  else if (!strcmp(mode, "unwaited"))
    bad = run_unwaited(&argc, &argv);
  else if (!strcmp(mode, "mpi-first"))
    bad = run_mpi_first(&argc, &argv);
  else if (!strcmp(mode, "badenv"))
    bad = run_badenv(&argc, &argv);
  else if (!strcmp(mode, "device"))
    bad = run_device(&argc, &argv);
  else if (!strcmp(mode, "cache"))
    bad = run_cache(&argc, &argv);
  else {
    fprintf(stderr, "usage: %s owned|embedded|unwaited|mpi-first|badenv|device|cache\n", argv[0]);
    return 2;
  }
  if (t_rank <= 0)
    printf("test_lifetime %s: %s (%d failure(s) on rank %d)\n", mode, bad ? "FAILED" : "passed",
           bad, t_rank);
  return bad ? 1 : 0;
}
