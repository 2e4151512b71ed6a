/* Cross-memory attach (cma: process_vm_readv / process_vm_writev between the ranks of one
 * host): the cma all_gather forced and chosen by the table, exact for every dtype, shape and
 * gather dim; the per-communicator probe (TCOLL_CMA=0 at a communicator's first eligible call
 * falls back to the MPI path there only; the probe runs inside a post and drives what is in
 * flight meanwhile); reads and writes that fail half-way (TCOLL_CMA_FAULT): the failed read's
 * message, the ring reduce_scatter's push falling back to MPI. Where cross-memory attach does
 * not work here, forced cma takes the MPI call with the same results.
 *
 * Every test sets the algorithm it needs and puts back the setting it found (TCOLL_ALGO in the
 * environment changes nothing here: the suite is not among test/meson.build's algo_suites). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* process_vm_readv */
#endif
#include "algo_util.h"
#include "reduce_common.h"

#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

/* Whether this machine lets one process read another's memory (cross-memory attach), as
 * scripts/cma-probe.c asks: a child reads its parent. Where it does not, forced cma falls back
 * to the MPI call (tcoll_last_algorithm "mpi"), with the same results. */
static bool cma_works(void) {
  static int known;
  if (known) return known > 0;
  static char word[16] = "tcoll-cma-test";
  pid_t parent = getpid(), child = fork();
  if (child == 0) {
    char got[sizeof word] = {0};
    struct iovec l = {got, sizeof got}, r = {word, sizeof word};
    ssize_t n = process_vm_readv(parent, &l, 1, &r, 1, 0);
    _exit(n == (ssize_t)sizeof got && !memcmp(got, word, sizeof got) ? 0 : 1);
  }
  int st = 0;
  int ok = child > 0 && waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  int all = ok;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  known = all ? 1 : -1;
  return all;
}

/* Rank r's input element i: small integers, exact in every dtype (bool: their parity). */
typedef struct ag_ctx {
  int rank;
  tcoll_dtype_t d;
  int64_t outer, len, inner; /* the input along the gather dim */
  int size;
} ag_ctx_t;
static double ag_value(int r, int64_t i, tcoll_dtype_t d) {
  int64_t v = (r * 37 + i * 11 + 5) % 97;
  return d == TCOLL_BOOL ? (double)(v & 1) : (double)v;
}
static double ag_in(int64_t i, void *p) {
  ag_ctx_t *c = p;
  return ag_value(c->rank, i, c->d);
}
/* Output element i: outer row o, position k along the gathered dim (rank k / len's element
 * k % len), inner position e. */
static double ag_out(int64_t i, void *p) {
  ag_ctx_t *c = p;
  int64_t glen = c->len * c->size, e = i % c->inner, k = i / c->inner % glen;
  int64_t o = i / c->inner / glen;
  return ag_value((int)(k / c->len), (o * c->len + k % c->len) * c->inner + e, c->d);
}

/* One all_gather along dim of a host tensor of shape on comm (NULL: world), checked against the
 * closed form; the algorithm it ran must be `want`. out_keep: the output is handed back (else
 * freed). */
static void ag_case(tcoll_comm_t *comm, const char *want, tcoll_dtype_t d, int ndim,
                    const int64_t *shape, int dim, int variant, tcoll_tensor_t *out_keep) {
  int size = comm ? tcoll_comm_size(comm) : t_size, rank = comm ? tcoll_comm_rank(comm) : t_rank;
  char what[256];
  int len = snprintf(what, sizeof what, "cma: all_gather %s [", tcoll_dtype_name(d));
  for (int i = 0; i < ndim; i++)
    len += snprintf(what + len, sizeof what - (size_t)len, "%s%lld", i ? "," : "",
                    (long long)shape[i]);
  snprintf(what + len, sizeof what - (size_t)len, "] along dim %d (%s) on %d ranks", dim,
           variant == 0   ? "out of place"
           : variant == 1 ? "allocating"
                          : "in place",
           size);
  ag_ctx_t c = {rank, d, 1, shape[dim], 1, size};
  for (int i = 0; i < dim; i++) c.outer *= shape[i];
  for (int i = dim + 1; i < ndim; i++) c.inner *= shape[i];
  int64_t oshape[TCOLL_MAX_DIMS];
  memcpy(oshape, shape, (size_t)ndim * sizeof *shape);
  oshape[dim] *= size;
  tcoll_tensor_t in, out;
  if (variant == 2) { /* in place: in is this rank's slice of out (dim 0) */
    out = t_host(d, ndim, oshape);
    in = out;
    memcpy(in.shape, shape, (size_t)ndim * sizeof *shape);
    in.data = (char *)out.data + (size_t)rank * (size_t)(c.len * c.inner) * tcoll_dtype_size(d);
  } else {
    in = t_host(d, ndim, shape);
    out = variant == 1 ? t_empty() : t_host(d, ndim, oshape);
  }
  t_set_all(&in, ag_in, &c);
  T_OK(tcoll_all_gather(&in, dim, comm, &out));
  const char *got = tcoll_last_algorithm();
  T_EXPECT(got && !strcmp(got, want), "%s: tcoll_last_algorithm() is \"%s\" (expected \"%s\")",
           what, got ? got : "(null)", want);
  T_OK(tcoll_wait(out.data));
  t_check_all(what, &out, ag_out, &c, 0);
  if (variant != 2) {
    char w2[300];
    snprintf(w2, sizeof w2, "%s: input", what);
    t_check_all(w2, &in, ag_in, &c, 0);
    tcoll_tensor_free(&in);
  }
  if (out_keep)
    *out_keep = out;
  else
    tcoll_tensor_free(&out);
}

static const struct {
  int ndim;
  int64_t shape[3];
  int dim;
} AG_SHAPES[] = {
    {2, {3, 5}, 1},    {2, {4, 7}, 1},    {3, {2, 3, 5}, 1},    {3, {2, 3, 5}, 2},
    {3, {3, 1, 4}, 2}, {3, {5, 2, 1}, 1}, {2, {1, 6}, 1},       {2, {5, 2}, 0},
    {1, {9}, 0},       {2, {2500, 3}, 1}, {3, {7, 1300, 1}, 2}, {2, {3, 2048}, 1},
    {3, {2, 0, 3}, 1},
};
static const tcoll_dtype_t AG_DTYPES[] = {TCOLL_FLOAT32, TCOLL_FLOAT64, TCOLL_INT32,    TCOLL_INT64,
                                          TCOLL_UINT8,   TCOLL_FLOAT16, TCOLL_BFLOAT16, TCOLL_BOOL};

/* Forced cma: dims 1 and 2 of 2-D and 3-D tensors (runs of one element up to 8 KiB, more rows
 * than one process_vm_readv takes), dim 0, empty tensors, every dtype, out of place, allocating
 * and (dim 0) in place. An empty tensor takes the MPI call. */
START_TEST(forced_cma) {
  t_save_algo();
  t_set_algo("all_gather:cma");
  const char *want = cma_works() ? "cma" : "mpi";
  for (size_t s = 0; s < T_LEN(AG_SHAPES); s++) {
    int64_t n = 1;
    for (int i = 0; i < AG_SHAPES[s].ndim; i++) n *= AG_SHAPES[s].shape[i];
    for (size_t d = 0; d < T_LEN(AG_DTYPES); d++) {
      /* every dtype on some shapes */
      if (d != s % T_LEN(AG_DTYPES) && d != 0 && AG_SHAPES[s].shape[0] != 3) continue;
      ag_case(NULL, n ? want : "mpi", AG_DTYPES[d], AG_SHAPES[s].ndim, AG_SHAPES[s].shape,
              AG_SHAPES[s].dim, (int)(s + d) % 2, NULL);
    }
  }
  int64_t s2[2] = {6, 5};
  ag_case(NULL, want, TCOLL_INT16, 2, s2, 0, 2, NULL);
  ag_case(NULL, want, TCOLL_FLOAT32, 2, s2, 0, 2, NULL);
  /* Outputs of 8 MiB and more along a dim other than 0 are streamed through a bounce chunk (from
   * 2 ranks here): runs of 520 B (not a multiple of 16: unaligned stores' heads and tails) and of
   * 7 B. */
  int64_t big[2] = {16384, 130}, bytes7[2] = {1200000, 7};
  ag_case(NULL, want, TCOLL_FLOAT32, 2, big, 1, 0, NULL);
  ag_case(NULL, want, TCOLL_UINT8, 2, bytes7, 1, 1, NULL);
  t_restore_algo();
}
END_TEST

/* With TCOLL_CMA=0 at a communicator's first cma-eligible call, forced cma falls back to the MPI
 * path on it (tcoll_last_algorithm "mpi"), with the same bits as cma on the world communicator;
 * the world communicator, probed before, keeps cma. */
START_TEST(cma_fallback) {
  t_save_algo();
  t_set_algo("all_gather:cma");
  const char *want = cma_works() ? "cma" : "mpi";
  int64_t shape[3] = {3, 4, 5};
  for (int dim = 1; dim < 3; dim++) {
    tcoll_tensor_t a, b;
    ag_case(NULL, want, TCOLL_FLOAT32, 3, shape, dim, 0, &a);
    setenv("TCOLL_CMA", "0", 1);
    tcoll_comm_t *dup = NULL;
    T_OK(tcoll_comm_split(tcoll_comm_world(), 0, t_rank, &dup));
    ag_case(dup, "mpi", TCOLL_FLOAT32, 3, shape, dim, 0, &b);
    unsetenv("TCOLL_CMA");
    ag_case(NULL, want, TCOLL_FLOAT32, 3, shape, dim, 1, NULL); /* the world's probe stays */
    ag_case(dup, "mpi", TCOLL_FLOAT32, 3, shape, dim, 1, NULL); /* and dup's */
    size_t nb = tcoll_tensor_nbytes(&a);
    T_EXPECT(nb == tcoll_tensor_nbytes(&b) && !memcmp(a.data, b.data, nb),
             "cma fallback along dim %d: the MPI path's bits differ from cma's", dim);
    tcoll_tensor_free(&a);
    tcoll_tensor_free(&b);
    T_OK(tcoll_comm_free(&dup));
  }
  t_restore_algo();
}
END_TEST

/* A failed read (TCOLL_CMA_FAULT=ERRNO on rank 0: its reads stop half-way) fails rank 0's wait
 * with TCOLL_ERR_UNSUPPORTED (EPERM, EACCES) naming the peer, errno and the bytes read; the other
 * ranks complete (they read rank 0's input fine), and the next call on the communicator works
 * everywhere. An all_gather of [rows, cols] float32 along dim 1; `read`: the bytes of the
 * message. */
static void read_fails_case(int64_t rows, int64_t cols, const char *err, const char *read) {
  int64_t shape[2] = {rows, cols};
  ag_ctx_t c = {t_rank, TCOLL_FLOAT32, rows, cols, 1, t_size};
  tcoll_tensor_t in = t_host(TCOLL_FLOAT32, 2, shape), out = t_empty();
  t_set_all(&in, ag_in, &c);
  if (t_rank == 0) setenv("TCOLL_CMA_FAULT", err, 1);
  T_OK(tcoll_all_gather(&in, 1, NULL, &out));
  unsetenv("TCOLL_CMA_FAULT");
  if (t_rank == 0) {
    int rc = tcoll_wait(out.data);
    char peer[32], errno_is[32];
    snprintf(peer, sizeof peer, "rank %d", 1 % t_size);
    snprintf(errno_is, sizeof errno_is, "errno %s", err);
    T_EXPECT(rc == TCOLL_ERR_UNSUPPORTED,
             "a failed read of [%lld, %lld]: tcoll_wait returned %s "
             "(expected TCOLL_ERR_UNSUPPORTED): %s",
             (long long)rows, (long long)cols, tcoll_status_string(rc), tcoll_last_error());
    const char *m = tcoll_last_error();
    T_EXPECT(t_contains(m, "process_vm_readv") && t_contains(m, peer) && t_contains(m, errno_is) &&
                 t_contains(m, read),
             "a failed read: message \"%s\" lacks the call, \"%s\", \"%s\" or \"%s\"", m, peer,
             errno_is, read);
  } else
    T_OK(tcoll_wait(out.data));
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&in);
  ag_case(NULL, "cma", TCOLL_FLOAT32, 2, shape, 1, 0, NULL);
}

/* Straight into the output (one local iovec per run), and through the bounce chunk (an output of
 * 8 MiB and more: the reads stop at the chunk that reaches past half of each peer's input). */
START_TEST(cma_read_fails) {
  if (t_size < 2 || !cma_works()) return;
  t_save_algo();
  t_set_algo("all_gather:cma");
  read_fails_case(64, 256, "1", "after 32768 of 65536 bytes");
  read_fails_case(128, 16384, "13", "after 4194304 of 8388608 bytes");
  t_restore_algo();
}
END_TEST

typedef struct push_call {
  int64_t shape[2];
  bool info; /* at INFO */
} push_call_t;

/* A ring reduce_scatter of host tensors (the push serves those only) along dim 1, optionally at
 * INFO, checked against the closed form. */
static void push_call(void *arg) {
  const push_call_t *pc = arg;
  rc_t c = rc_world(TCOLL_FLOAT32, K_SUM, 1);
  tcoll_tensor_t in = t_host(TCOLL_FLOAT32, 2, pc->shape), out = t_empty();
  t_set_all(&in, rc_fill, &c);
  if (pc->info) t_set_debug(TCOLL_LOG_INFO);
  T_OK(tcoll_reduce_scatter(&in, TCOLL_SUM, 1, NULL, &out));
  T_OK(tcoll_wait(out.data));
  if (pc->info) t_set_debug(TCOLL_LOG_WARN);
  rc_scatter(&c, pc->shape, 2, 1, t_rank);
  t_check_all(pc->info ? "ring reduce_scatter along dim 1, rank 0's push failing"
                       : "ring reduce_scatter along dim 1",
              &out, rc_want, &c, 0);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

/* The ring reduce_scatter along a dim other than 0 writes its first block into the next rank's
 * buffer (runs of 1 KiB and more); where that write fails (TCOLL_CMA_FAULT on rank 0: half-way,
 * after the first of two process_vm_writev calls), the block goes through MPI instead: rank 0
 * says so at INFO and every rank gets the exact result. */
START_TEST(cma_push_fails) {
  if (t_size < 2 || !cma_works()) return;
  t_save_algo();
  t_set_algo("reduce_scatter:ring");
  tcoll_config_t cfg;
  T_OK(tcoll_get_config(&cfg));
  push_call_t pc = {{2000, 260 * (int64_t)t_size}, true}; /* runs of 1040 B, 2000 rows */
  if (t_rank == 0) setenv("TCOLL_CMA_FAULT", "1", 1);
  const char *text = t_capture_stderr(push_call, &pc);
  unsetenv("TCOLL_CMA_FAULT");
  if (t_rank == 0) {
    T_EXPECT(t_contains(text, "process_vm_writev into rank 1's buffer") &&
                 t_contains(text, "errno 1") &&
                 t_contains(text, "after 1040000 of 2080000 bytes") &&
                 t_contains(text, "through MPI instead"),
             "a failed push: no INFO line naming the call, the peer, errno 1, the bytes written "
             "and the fallback; got:\n%s",
             text);
  } else {
    T_EXPECT(!t_contains(text, "process_vm_writev"), "rank %d logged a failed push:\n%s", t_rank,
             text);
  }
  t_set_debug(cfg.debug);
  pc.info = false;
  push_call(&pc); /* and without the fault */
  t_restore_algo();
}
END_TEST

/* A communicator's cross-memory attach probe (a collective) runs inside the post of its first
 * all_gather or ring reduce_scatter that would use it. Rank 0 posts a ring reduce_scatter along
 * dim 0 and then that call without waiting, the other ranks wait for the first before posting the
 * second: beyond 2 ranks the first one's later steps are started by whoever waits on rank 0, so
 * the probe must drive them while it waits for its peers (it used to block: a hang here). */
static void probe_in_post_case(bool gather) {
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_split(tcoll_comm_world(), 0, t_rank, &c));
  rc_t cb = rc_world(TCOLL_FLOAT32, K_SUM, 1);
  int64_t sb[2] = {4, 300 * (int64_t)t_size};
  tcoll_tensor_t b = t_host(TCOLL_FLOAT32, 2, sb), rb = t_empty(); /* host: what probes */
  t_set_all(&b, rc_fill, &cb);
  t_pending_t pr;
  t_pending_ring(&pr, c);
  t_set_algo("reduce_scatter:ring,all_gather:cma");
  T_OK(gather ? tcoll_all_gather(&b, 1, c, &rb) : tcoll_reduce_scatter(&b, TCOLL_SUM, 1, c, &rb));
  t_pending_ring_done(&pr, "the reduce_scatter posted before the probe");
  T_OK(tcoll_wait(rb.data));
  if (!gather) {
    rc_scatter(&cb, sb, 2, 1, t_rank);
    t_check_all("the reduce_scatter that probed", &rb, rc_want, &cb, 0);
  }
  tcoll_tensor_free(&b);
  tcoll_tensor_free(&rb);
  T_OK(tcoll_comm_free(&c));
}

START_TEST(cma_probe_inside_post) {
  t_save_algo();
  t_set_algo("reduce_scatter:ring,all_gather:cma");
  probe_in_post_case(false);
  probe_in_post_case(true);
  t_restore_algo();
}
END_TEST

/* The table's choice (TCOLL_ALGO=auto): on Open MPI at 2 ranks from 8 KiB and at 3-4 ranks from
 * 1 MiB, on MPICH at 2 ranks from 32 KiB, an all_gather of host tensors along a dim other than
 * 0 with runs of 512 B or more takes cma (where cross-memory attach works); dim 0, shorter runs,
 * smaller outputs and other rank counts take the MPI call. Except at 2 ranks where the world has
 * a node-shared segment (TCOLL_SHM not 0): there the shared-memory all_gather ("shm") takes every
 * host all_gather first. Same closed-form results either way. */
START_TEST(cma_table) {
  t_save_algo();
  t_set_algo("auto");
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  bool ompi = strstr(v, "Open MPI") != NULL, mpich = !ompi && strstr(v, "MPICH") != NULL;
  bool cma = cma_works() && (ompi || mpich);
  int64_t big[2] = {64, 256};                       /* 64 KiB per rank, runs of 1 KiB */
  int64_t large[2] = {16, 65536 / (int64_t)t_size}; /* ~4 MiB output, runs of 256 KiB / size */
  int64_t narrow[3] = {256, 16, 4};                 /* runs of 256 B */
  int64_t small[2] = {4, 128};                      /* 2 KiB per rank */
  const char *segments = getenv("TCOLL_SHM");
  bool shm = (ompi || mpich) && t_size == 2 && !(segments && !strcmp(segments, "0"));
  const char *other = shm ? "shm" : "mpi"; /* where cma does not apply */
  ag_case(NULL,
          shm                  ? "shm"
          : cma && t_size == 2 ? "cma"
                               : "mpi",
          TCOLL_FLOAT32, 2, big, 1, 0, NULL);
  bool large_cma = cma && t_size >= 2 && t_size <= (ompi ? 4 : 2);
  ag_case(NULL, shm ? "shm" : large_cma ? "cma" : "mpi", TCOLL_FLOAT32, 2, large, 1, 1, NULL);
  ag_case(NULL, other, TCOLL_FLOAT32, 2, big, 0, 0, NULL);
  ag_case(NULL, other, TCOLL_FLOAT32, 3, narrow, 1, 0, NULL);
  ag_case(NULL, other, TCOLL_FLOAT32, 2, small, 1, 0, NULL);
  t_restore_algo();
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("cma");
  TCase *tc = t_tcase("cma");
  tcase_add_test(tc, forced_cma);
  tcase_add_test(tc, cma_fallback);
  tcase_add_test(tc, cma_read_fails);
  tcase_add_test(tc, cma_push_fails);
  tcase_add_test(tc, cma_probe_inside_post);
  tcase_add_test(tc, cma_table);
  suite_add_tcase(s, tc);
  return s;
}
