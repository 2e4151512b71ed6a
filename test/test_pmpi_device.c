/* test_pmpi_device: an MPI program whose collectives take device buffers, run with the drop-in
 * layer preloaded on an MPI that cannot read device memory (Debian's): the layer must stage them
 * through host memory, for calls it routes to tcoll and for calls it passes to MPI alike, and on
 * every rank alone (ranks with host buffers take the same route). Device memory comes from tcoll
 * (tcoll_tensor_alloc on device 0, the program's only use of tcoll besides copies): in CI the
 * mock CUDA runtime's, which the host cannot touch (any host access by the layer or MPI
 * crashes), on a GPU real device memory.
 *
 * Cases, each checked against closed forms of small integers, inputs checked untouched:
 *   1. every wrapped collective, blocking and nonblocking, MPI_INT, at counts 1, 1000 and 70000,
 *      with every buffer on the device, then with odd ranks on the host (placement per rank);
 *   2. in place: allreduce, allgather, reduce_scatter_block;
 *   3. a strided vector type (gaps on the device must stay as they were) with MPI_SUM and with a
 *      user op (which MPI runs on the host copies);
 *   4. progress: rank 0 blocks in MPI_Recv while rank 1 needs its part of a pending
 *      MPI_Iallreduce on device buffers;
 *   5. MPI-4: a persistent MPI_Allreduce_init started three times with new device inputs
 *      (routed where the communicator has a twin, passed to MPI at one rank);
 *   6. the layer's counts: every call with a device buffer on this rank ran on host copies
 *      (tcoll_mpi_layer_staged), where T_PMPI_STAGED=1 (none on an MPI that reads device
 *      memory itself).
 * Exits 77 where tcoll sees no device. */
#define _GNU_SOURCE
#include "tcoll.h"

#include <dlfcn.h>
#include <mpi.h>
#if defined(OPEN_MPI)
#include <mpi-ext.h>
#endif
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int me, np, failures;

static void fail(const char *label, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[rank %d] FAIL %s: ", me, label);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  if (++failures > 20) MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ---- buffers: on the device or the host, read and written through host arrays ---- */

typedef struct buf {
  tcoll_tensor_t t; /* device storage (data NULL on the host) */
  int *at;          /* what the MPI call gets */
  long n;
} buf_t;

static buf_t make(long n, bool device) {
  buf_t b = {.n = n};
  int64_t bytes = (int64_t)(n ? n : 1) * (int64_t)sizeof(int);
  if (device) {
    if (tcoll_tensor_alloc(&b.t, TCOLL_UINT8, 1, &bytes, 0) != TCOLL_SUCCESS) {
      fprintf(stderr, "tcoll_tensor_alloc on device 0: %s\n", tcoll_last_error());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    b.at = b.t.data;
  } else {
    b.at = malloc((size_t)bytes);
  }
  return b;
}

static void drop(buf_t *b) {
  if (b->t.data)
    tcoll_tensor_free(&b->t);
  else
    free(b->at);
}

static void copy(void *dst, int dst_dev, const void *src, int src_dev, long n) {
  int64_t bytes = n * (int64_t)sizeof(int);
  if (!bytes) return;
  tcoll_tensor_t d = tcoll_tensor_make(dst, TCOLL_UINT8, 1, &bytes, dst_dev);
  tcoll_tensor_t s = tcoll_tensor_make((void *)src, TCOLL_UINT8, 1, &bytes, src_dev);
  if (tcoll_tensor_copy(&d, &s) != TCOLL_SUCCESS) {
    fprintf(stderr, "tcoll_tensor_copy: %s\n", tcoll_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

static void put(buf_t *b, const int *host) {
  if (b->t.data)
    copy(b->at, 0, host, TCOLL_HOST, b->n);
  else
    memcpy(b->at, host, (size_t)b->n * sizeof(int));
}

static int *get(const buf_t *b) {
  int *h = malloc((size_t)(b->n ? b->n : 1) * sizeof(int));
  if (b->t.data)
    copy(h, TCOLL_HOST, b->at, 0, b->n);
  else
    memcpy(h, b->at, (size_t)b->n * sizeof(int));
  return h;
}

/* Fills b with f(i), or the byte pattern no result has where f is NULL. */
static void fill(buf_t *b, int (*f)(long i, long arg), long arg) {
  int *h = malloc((size_t)(b->n ? b->n : 1) * sizeof(int));
  for (long i = 0; i < b->n; i++) h[i] = f ? f(i, arg) : -7777;
  put(b, h);
  free(h);
}

static void expect(const char *label, const buf_t *b, long from, long n, int (*f)(long i, long arg),
                   long arg) {
  int *h = get(b);
  for (long i = 0; i < n; i++)
    if (h[from + i] != f(i, arg)) {
      fail(label, "element %ld is %d (expected %d)", from + i, h[from + i], f(i, arg));
      break;
    }
  free(h);
}

/* ---- closed forms ---- */

static int contribution(long i, long rank) { return (int)(rank + 1 + i % 7); }
static int reduced(long i, long p) { return (int)(p * (p + 1) / 2 + p * (i % 7)); }
static int broadcast_value(long i, long arg) { return (int)(3 * i + 1 + arg); }
static int gathered(long i, long rank) { return (int)(rank * 100000 + i); }
static int to_peer(long i, long rank) { return (int)(rank * 1000 + i); } /* block-relative */
static int scattered(long j, long rank) { return (int)(rank + j); }
static int scattered_sum(long i, long off) { return (int)(np * (np - 1) / 2 + np * (off + i)); }
static int untouched(long i, long arg) { return (void)i, (void)arg, -7777; }

/* ---- the calls ---- */

static long device_calls[16]; /* calls this rank made with a device buffer, per name below */
static const char *const names[16] = {"MPI_Allreduce",
                                      "MPI_Iallreduce",
                                      "MPI_Reduce",
                                      "MPI_Ireduce",
                                      "MPI_Bcast",
                                      "MPI_Ibcast",
                                      "MPI_Allgather",
                                      "MPI_Iallgather",
                                      "MPI_Alltoall",
                                      "MPI_Ialltoall",
                                      "MPI_Reduce_scatter_block",
                                      "MPI_Ireduce_scatter_block",
                                      "MPI_Reduce_scatter",
                                      "MPI_Ireduce_scatter",
                                      "MPI_Allreduce_init",
                                      NULL};

static void called(int fn, bool device) {
  if (device) device_calls[fn]++;
}

static void ok(const char *label, int rc) {
  if (rc != MPI_SUCCESS) fail(label, "MPI error %d", rc);
}

/* rc of a blocking call, or of a nonblocking one and its wait. */
static int done(int rc, MPI_Request *req) {
  if (rc != MPI_SUCCESS || !req) return rc;
  return MPI_Wait(req, MPI_STATUS_IGNORE);
}

static void reductions(long n, bool dev, bool nb, const char *where) {
  char label[96];
  MPI_Request req, *rq = nb ? &req : NULL;
  buf_t s = make(n, dev), r = make(n, dev);
  fill(&s, contribution, me);
  fill(&r, NULL, 0);
  snprintf(label, sizeof label, "%sallreduce n=%ld %s", nb ? "i" : "", n, where);
  ok(label, done(nb ? MPI_Iallreduce(s.at, r.at, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, rq)
                    : MPI_Allreduce(s.at, r.at, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
                 rq));
  called(nb, dev);
  expect(label, &r, 0, n, reduced, np);
  expect(label, &s, 0, n, contribution, me);

  int root = np - 1;
  fill(&r, NULL, 0);
  snprintf(label, sizeof label, "%sreduce n=%ld %s", nb ? "i" : "", n, where);
  ok(label, done(nb ? MPI_Ireduce(s.at, r.at, (int)n, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD, rq)
                    : MPI_Reduce(s.at, r.at, (int)n, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD),
                 rq));
  called(2 + nb, dev);
  if (me == root)
    expect(label, &r, 0, n, reduced, np);
  else
    expect(label, &r, 0, n, untouched, 0);
  drop(&s);
  drop(&r);
}

static void movements(long n, bool dev, bool nb, const char *where) {
  char label[96];
  MPI_Request req, *rq = nb ? &req : NULL;
  buf_t b = make(n, dev);
  if (me == 0)
    fill(&b, broadcast_value, n);
  else
    fill(&b, NULL, 0);
  snprintf(label, sizeof label, "%sbcast n=%ld %s", nb ? "i" : "", n, where);
  ok(label, done(nb ? MPI_Ibcast(b.at, (int)n, MPI_INT, 0, MPI_COMM_WORLD, rq)
                    : MPI_Bcast(b.at, (int)n, MPI_INT, 0, MPI_COMM_WORLD),
                 rq));
  called(4 + nb, dev);
  expect(label, &b, 0, n, broadcast_value, n);
  drop(&b);

  buf_t s = make(n, dev), r = make(n * np, dev);
  fill(&s, gathered, me);
  fill(&r, NULL, 0);
  snprintf(label, sizeof label, "%sallgather n=%ld %s", nb ? "i" : "", n, where);
  ok(label,
     done(nb ? MPI_Iallgather(s.at, (int)n, MPI_INT, r.at, (int)n, MPI_INT, MPI_COMM_WORLD, rq)
             : MPI_Allgather(s.at, (int)n, MPI_INT, r.at, (int)n, MPI_INT, MPI_COMM_WORLD),
          rq));
  called(6 + nb, dev);
  for (int q = 0; q < np; q++) expect(label, &r, q * n, n, gathered, q);
  expect(label, &s, 0, n, gathered, me);
  drop(&s);
  drop(&r);

  /* alltoall: block q of rank me's input is to_peer(i, me * 10 + q) */
  s = make(n * np, dev), r = make(n * np, dev);
  int *h = malloc((size_t)(n * np) * sizeof(int));
  for (int q = 0; q < np; q++)
    for (long i = 0; i < n; i++) h[q * n + i] = to_peer(i, me * 10 + q);
  put(&s, h);
  free(h);
  fill(&r, NULL, 0);
  snprintf(label, sizeof label, "%salltoall n=%ld %s", nb ? "i" : "", n, where);
  ok(label,
     done(nb ? MPI_Ialltoall(s.at, (int)n, MPI_INT, r.at, (int)n, MPI_INT, MPI_COMM_WORLD, rq)
             : MPI_Alltoall(s.at, (int)n, MPI_INT, r.at, (int)n, MPI_INT, MPI_COMM_WORLD),
          rq));
  called(8 + nb, dev);
  for (int q = 0; q < np; q++) expect(label, &r, q * n, n, to_peer, q * 10 + me);
  drop(&s);
  drop(&r);
}

static void reduce_scatters(long n, bool dev, bool nb, const char *where) {
  char label[96];
  MPI_Request req, *rq = nb ? &req : NULL;
  buf_t s = make(n * np, dev), r = make(n, dev);
  fill(&s, scattered, me);
  fill(&r, NULL, 0);
  snprintf(label, sizeof label, "%sreduce_scatter_block n=%ld %s", nb ? "i" : "", n, where);
  ok(label,
     done(nb ? MPI_Ireduce_scatter_block(s.at, r.at, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, rq)
             : MPI_Reduce_scatter_block(s.at, r.at, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
          rq));
  called(10 + nb, dev);
  expect(label, &r, 0, n, scattered_sum, me * n);
  drop(&s);
  drop(&r);

  int *counts = malloc((size_t)np * sizeof(int));
  long total = 0, off = 0;
  for (int q = 0; q < np; q++) {
    counts[q] = (int)n + q;
    if (q < me) off += counts[q];
    total += counts[q];
  }
  s = make(total, dev), r = make(counts[me], dev);
  fill(&s, scattered, me);
  fill(&r, NULL, 0);
  snprintf(label, sizeof label, "%sreduce_scatter n=%ld %s", nb ? "i" : "", n, where);
  ok(label, done(nb ? MPI_Ireduce_scatter(s.at, r.at, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD, rq)
                    : MPI_Reduce_scatter(s.at, r.at, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
                 rq));
  called(12 + nb, dev);
  expect(label, &r, 0, counts[me], scattered_sum, off);
  free(counts);
  drop(&s);
  drop(&r);
}

static void test_every_call(void) {
  const long sizes[] = {1, 1000, 70000};
  for (int placement = 0; placement < 2; placement++) {
    bool dev = placement == 0 || me % 2 == 0;
    const char *where = placement == 0 ? "(device)" : "(odd ranks on the host)";
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
      for (int nb = 0; nb < 2; nb++) {
        reductions(sizes[k], dev, nb, where);
        movements(sizes[k], dev, nb, where);
        reduce_scatters(sizes[k], dev, nb, where);
      }
  }
}

static void test_in_place(void) {
  const long n = 5000;
  buf_t r = make(n, true);
  fill(&r, contribution, me);
  ok("in-place allreduce",
     MPI_Allreduce(MPI_IN_PLACE, r.at, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  called(0, true);
  expect("in-place allreduce", &r, 0, n, reduced, np);
  drop(&r);

  r = make(n * np, true);
  int *h = malloc((size_t)(n * np) * sizeof(int));
  for (long i = 0; i < n * np; i++) h[i] = i / n == me ? gathered(i % n, me) : -7777;
  put(&r, h);
  free(h);
  ok("in-place allgather",
     MPI_Allgather(MPI_IN_PLACE, 0, MPI_INT, r.at, (int)n, MPI_INT, MPI_COMM_WORLD));
  called(6, true);
  for (int q = 0; q < np; q++) expect("in-place allgather", &r, q * n, n, gathered, q);
  drop(&r);

  r = make(n * np, true);
  fill(&r, scattered, me);
  ok("in-place reduce_scatter_block",
     MPI_Reduce_scatter_block(MPI_IN_PLACE, r.at, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  called(10, true);
  expect("in-place reduce_scatter_block", &r, 0, n, scattered_sum, me * n);
  drop(&r);
}

static long vec_n; /* ints in one element of the vector type, two apart */

/* A user op on the vector type: MPI calls it with the type itself, on the host copies. */
static void add_strided(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  for (long i = 0; i < *len * vec_n; i++) ((int *)inout)[2 * i] += ((int *)in)[2 * i];
}

static int strided_in(long i, long rank) { return i % 2 ? -7777 : contribution(i / 2, rank); }
static int strided_out(long i, long p) { return i % 2 ? -7777 : reduced(i / 2, p); }

/* One element of the vector type is n ints two apart: the odd ones are gaps. */
static void test_strided_type(void) {
  const long n = 3000;
  MPI_Datatype vec;
  MPI_Type_vector((int)n, 1, 2, MPI_INT, &vec);
  MPI_Type_commit(&vec);
  MPI_Op user;
  vec_n = n;
  MPI_Op_create(add_strided, 1, &user);
  MPI_Op ops[2] = {MPI_SUM, user};
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  for (int k = 0; k < 2; k++) {
    const char *label = k ? "strided vector, user op" : "strided vector, MPI_SUM";
    buf_t s = make(2 * n - 1, true), r = make(2 * n - 1, true);
    fill(&s, strided_in, me);
    fill(&r, NULL, 0);
    /* A predefined op on a derived type: Open MPI 4.1 refuses it (MPI_ERR_OP) where the call
     * reaches it; tcoll serves it where the layer routes it. */
    int rc = MPI_Allreduce(s.at, r.at, 1, vec, ops[k], comm);
    called(0, true);
    if (rc != MPI_SUCCESS && k == 0) {
      drop(&s);
      drop(&r);
      continue;
    }
    ok(label, rc);
    expect(label, &r, 0, 2 * n - 1, strided_out, np);
    expect(label, &s, 0, 2 * n - 1, strided_in, me);
    drop(&s);
    drop(&r);
  }
  MPI_Comm_free(&comm);
  MPI_Op_free(&user);
  MPI_Type_free(&vec);
}

/* Rank 0 posts, then receives what rank 1 sends only after its own wait returned. */
static void test_progress_while_blocked(void) {
  if (np < 2) return;
  const long n = 20000;
  buf_t s = make(n, true), r = make(n, true);
  fill(&s, contribution, me);
  fill(&r, NULL, 0);
  MPI_Request req;
  ok("progress", MPI_Iallreduce(s.at, r.at, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
  called(1, true);
  int token = 0;
  if (me == 0) {
    ok("progress recv", MPI_Recv(&token, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    ok("progress wait", MPI_Wait(&req, MPI_STATUS_IGNORE));
  } else {
    ok("progress wait", MPI_Wait(&req, MPI_STATUS_IGNORE));
    token = 42;
    if (me == 1) ok("progress send", MPI_Send(&token, 1, MPI_INT, 0, 5, MPI_COMM_WORLD));
  }
  if (me == 0 && token != 42) fail("progress", "token %d", token);
  expect("progress", &r, 0, n, reduced, np);
  drop(&s);
  drop(&r);
}

static void test_persistent(void) {
#if MPI_VERSION >= 4
  const long n = 4000;
  buf_t s = make(n, true), r = make(n, true);
  MPI_Request req;
  ok("persistent init",
     MPI_Allreduce_init(s.at, r.at, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
  for (int round = 0; round < 3; round++) {
    fill(&s, contribution, me + round * np); /* sum: reduced + round * np * np */
    fill(&r, NULL, 0);
    ok("persistent start", MPI_Start(&req));
    called(14, true);
    ok("persistent wait", MPI_Wait(&req, MPI_STATUS_IGNORE));
    int *h = get(&r);
    for (long i = 0; i < n; i++)
      if (h[i] != reduced(i, np) + round * np * np) {
        fail("persistent", "round %d element %ld is %d", round, i, h[i]);
        break;
      }
    free(h);
  }
  MPI_Request_free(&req);
  drop(&s);
  drop(&r);
#endif
}

/* Whether this MPI moves device memory itself (then nothing is staged). */
static bool mpi_reads_device_memory(void) {
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  return MPIX_Query_cuda_support() == 1;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
  int yes = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes) == MPI_SUCCESS && yes;
#else
  return false;
#endif
}

/* Every call this rank made with a device buffer ran on host copies, where the layer stages
 * (none on an MPI that reads device memory). */
static void check_staged(void) {
  const char *want = getenv("T_PMPI_STAGED");
  long (*staged)(const char *) =
      (long (*)(const char *))dlsym(RTLD_DEFAULT, "tcoll_mpi_layer_staged");
  if (!want || strcmp(want, "1")) return;
  if (!staged) {
    fail("staged", "the layer is not loaded (tcoll_mpi_layer_staged not found)");
    return;
  }
  bool aware = mpi_reads_device_memory();
  for (int fn = 0; names[fn]; fn++)
    if (aware ? staged(names[fn]) > 0
              : staged(names[fn]) != device_calls[fn] &&
                    !(staged(names[fn]) < 0 && !device_calls[fn]))
      fail("staged", "%s: %ld calls on host copies, %ld made with device buffers", names[fn],
           staged(names[fn]), device_calls[fn]);
}

int main(int argc, char **argv) {
  int got;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &got);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  int devices = tcoll_device_count(), fewest = 0;
  MPI_Allreduce(&devices, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (fewest < 1) {
    if (me == 0) printf("no device on some rank (tcoll_device_count): skipped\n");
    MPI_Finalize();
    return 77;
  }
  test_every_call();
  test_in_place();
  test_strided_type();
  test_progress_while_blocked();
  test_persistent();
  check_staged();
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0) printf("%s: %d failure(s) over %d ranks\n", all ? "FAILED" : "passed", all, np);
  MPI_Finalize();
  return all ? 1 : 0;
}
