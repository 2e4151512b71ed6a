/* The NCCL-shaped API (seed 004): version, unique ids, tcoll_comm_init_rank at several rank
 * counts (all ranks, reordered ranks, subsets with and without the creator, two rendezvous at
 * once) and its errors (none may hang a member), and the multi-buffer ops over local buffers
 * (host in the plain run; devices 0, 1 and the host in -dev) with and without communicators,
 * with per-buffer streams, and their argument checks. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

/* A unique id made on world rank `creator`, sent to everyone. */
static tcoll_unique_id_t shared_id(int creator) {
  tcoll_unique_id_t id;
  memset(&id, 0, sizeof id);
  if (t_rank == creator) T_OK(tcoll_get_unique_id(&id));
  MPI_Bcast(id.bytes, TCOLL_UNIQUE_ID_BYTES, MPI_BYTE, creator, MPI_COMM_WORLD);
  return id;
}

/* The communicator works: sum of (rank + 1) over it, and its rank and size are right. */
static void check_comm(tcoll_comm_t *c, int rank, int nranks) {
  T_EXPECT(tcoll_comm_rank(c) == rank, "comm rank %d, expected %d", tcoll_comm_rank(c), rank);
  T_EXPECT(tcoll_comm_size(c) == nranks, "comm size %d, expected %d", tcoll_comm_size(c), nranks);
  int64_t one[1] = {1};
  tcoll_tensor_t x = t_host(TCOLL_INT64, 1, one), y = t_empty();
  ((int64_t *)x.data)[0] = rank + 1;
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, c, &y));
  T_OK(tcoll_wait(y.data));
  if (y.data)
    T_EXPECT(((int64_t *)y.data)[0] == (int64_t)nranks * (nranks + 1) / 2,
             "all_reduce on the new comm gives %lld", (long long)((int64_t *)y.data)[0]);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
}

/* ------------------------------------------------------------------ version, ids */

START_TEST(version) {
  T_EXPECT(tcoll_version() ==
               TCOLL_VERSION_MAJOR * 10000 + TCOLL_VERSION_MINOR * 100 + TCOLL_VERSION_PATCH,
           "tcoll_version() is %d", tcoll_version());
  T_EXPECT(tcoll_version_suffix() != NULL, "tcoll_version_suffix() is NULL");
}
END_TEST

START_TEST(init_all_ranks) {
  for (int creator = 0; creator < t_size; creator++) {
    tcoll_unique_id_t id = shared_id(creator);
    tcoll_comm_t *c = NULL;
    T_OK(tcoll_comm_init_rank(&c, t_size, id.bytes, sizeof id.bytes, t_rank));
    if (c) check_comm(c, t_rank, t_size);
    T_OK(tcoll_comm_free(&c));
    T_EXPECT(c == NULL, "tcoll_comm_free did not clear the pointer");
  }
  /* ranks in reverse order of the world ranks */
  tcoll_unique_id_t id = shared_id(t_size - 1);
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_init_rank(&c, t_size, id.bytes, sizeof id.bytes, t_size - 1 - t_rank));
  if (c) check_comm(c, t_size - 1 - t_rank, t_size);
  tcoll_comm_free(&c);
}
END_TEST

/* Members are world ranks 1..size-1; world rank 0 makes the id and does not join. */
START_TEST(init_creator_not_member) {
  if (t_size < 2) return;
  tcoll_unique_id_t id = shared_id(0);
  if (t_rank > 0) {
    tcoll_comm_t *c = NULL;
    T_OK(tcoll_comm_init_rank(&c, t_size - 1, id.bytes, sizeof id.bytes, t_rank - 1));
    if (c) check_comm(c, t_rank - 1, t_size - 1);
    tcoll_comm_free(&c);
  }
}
END_TEST

/* Two rendezvous at once: the even and the odd world ranks, each with its own creator (the
 * last member of the group), and every rank also joins a pair communicator made by rank 0. */
START_TEST(init_subsets) {
  int color = t_rank % 2, members = (t_size - color + 1) / 2, my = t_rank / 2;
  int creators[2] = {(members > 0 ? 2 * ((t_size + 1) / 2 - 1) : 0),
                     t_size > 1 ? 2 * (t_size / 2 - 1) + 1 : 0};
  tcoll_unique_id_t ids[2];
  for (int g = 0; g < 2; g++) ids[g] = g == 1 && t_size < 2 ? ids[0] : shared_id(creators[g]);
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_init_rank(&c, members, ids[color].bytes, TCOLL_UNIQUE_ID_BYTES, my));
  if (c) check_comm(c, my, members);
  tcoll_comm_free(&c);
  /* world ranks 0 and size-1 only (one of them when size is 1) */
  tcoll_unique_id_t pid = shared_id(0);
  if (t_rank == 0 || t_rank == t_size - 1) {
    int n = t_size > 1 ? 2 : 1, r = t_rank == 0 ? 0 : 1;
    T_OK(tcoll_comm_init_rank(&c, n, pid.bytes, TCOLL_UNIQUE_ID_BYTES, r));
    if (c) check_comm(c, r, n);
    tcoll_comm_free(&c);
  }
}
END_TEST

START_TEST(init_bad_ids) {
  tcoll_unique_id_t id = shared_id(0);
  tcoll_comm_t *c = NULL;
  T_FAILS(tcoll_comm_init_rank(&c, t_size, id.bytes, 127, t_rank), TCOLL_ERR_INVALID_ARGUMENT,
          "invalid unique_id (expected 128 bytes, got 127)");
  T_FAILS(tcoll_comm_init_rank(&c, t_size, id.bytes, 0, t_rank), TCOLL_ERR_INVALID_ARGUMENT,
          "got 0)");
  char zeros[TCOLL_UNIQUE_ID_BYTES] = {0};
  T_FAILS(tcoll_comm_init_rank(&c, t_size, zeros, sizeof zeros, t_rank), TCOLL_ERR_INVALID_ARGUMENT,
          "invalid unique_id");
  tcoll_unique_id_t bad = id;
  bad.bytes[30] ^= 0x5a; /* a tampered nonce */
  T_FAILS(tcoll_comm_init_rank(&c, t_size, bad.bytes, sizeof bad.bytes, t_rank),
          TCOLL_ERR_INVALID_ARGUMENT, "invalid unique_id");
  T_FAILS(tcoll_comm_init_rank(&c, t_size, NULL, TCOLL_UNIQUE_ID_BYTES, t_rank),
          TCOLL_ERR_INVALID_ARGUMENT, "id is NULL");
  T_EXPECT(c == NULL, "a failed init_rank set the communicator");
  T_FAILS(tcoll_get_unique_id(NULL), TCOLL_ERR_INVALID_ARGUMENT, "id is NULL");
  /* the untouched id still works afterwards */
  T_OK(tcoll_comm_init_rank(&c, t_size, id.bytes, sizeof id.bytes, t_rank));
  if (c) check_comm(c, t_rank, t_size);
  tcoll_comm_free(&c);
}
END_TEST

/* Bad ranks: every member fails, none hangs. */
START_TEST(init_bad_ranks) {
  tcoll_comm_t *c = NULL;
  /* the last member passes a rank out of range */
  tcoll_unique_id_t id = shared_id(0);
  int last = t_rank == t_size - 1;
  int rc = tcoll_comm_init_rank(&c, t_size, id.bytes, sizeof id.bytes, last ? t_size : t_rank);
  T_EXPECT(rc == TCOLL_ERR_INVALID_ARGUMENT, "rank out of range: %s", tcoll_status_string(rc));
  if (last)
    T_EXPECT(t_contains(tcoll_last_error(), "rank is"), "message: %s", tcoll_last_error());
  else
    T_EXPECT(t_contains(tcoll_last_error(), "with rank"), "message: %s", tcoll_last_error());
  T_EXPECT(c == NULL, "a failed init_rank set the communicator");
  /* nranks out of range */
  id = shared_id(t_size - 1);
  rc = tcoll_comm_init_rank(&c, t_rank == 0 ? t_size + 5 : t_size, id.bytes, sizeof id.bytes,
                            t_rank);
  T_EXPECT(rc == TCOLL_ERR_INVALID_ARGUMENT, "nranks out of range: %s", tcoll_status_string(rc));
  T_EXPECT(t_contains(tcoll_last_error(), "nranks"), "message: %s", tcoll_last_error());
  if (t_size >= 2) {
    /* duplicate rank: the last member claims rank 0 too */
    id = shared_id(0);
    rc = tcoll_comm_init_rank(&c, t_size, id.bytes, sizeof id.bytes, last ? 0 : t_rank);
    T_EXPECT(rc == TCOLL_ERR_INVALID_ARGUMENT, "duplicate rank: %s", tcoll_status_string(rc));
    T_EXPECT(t_contains(tcoll_last_error(), "duplicate rank 0"), "message: %s", tcoll_last_error());
  }
  if (t_size >= 3) {
    /* nranks disagreement that no subset can complete */
    id = shared_id(1);
    rc = tcoll_comm_init_rank(&c, last ? t_size - 1 : t_size, id.bytes, sizeof id.bytes,
                              last ? t_size - 2 : t_rank);
    T_EXPECT(rc == TCOLL_ERR_INVALID_ARGUMENT, "nranks disagreement: %s", tcoll_status_string(rc));
    T_EXPECT(t_contains(tcoll_last_error(), "disagree on nranks"), "message: %s",
             tcoll_last_error());
  }
  if (t_size >= 2) {
    /* one member more than nranks: the id is used up when it comes */
    id = shared_id(0);
    if (!last) {
      T_OK(tcoll_comm_init_rank(&c, t_size - 1, id.bytes, sizeof id.bytes, t_rank));
      if (c) check_comm(c, t_rank, t_size - 1);
      tcoll_comm_free(&c);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (last)
      T_FAILS(tcoll_comm_init_rank(&c, t_size - 1, id.bytes, sizeof id.bytes, 0),
              TCOLL_ERR_INVALID_ARGUMENT, "already used");
  }
  T_EXPECT(c == NULL, "a failed init_rank set the communicator");
}
END_TEST

/* With TCOLL_TIMEOUT set, a member that never comes fails the others after that long. */
START_TEST(init_timeout) {
  if (t_size < 2) return;
  tcoll_config_t cfg;
  T_OK(tcoll_get_config(&cfg));
  double saved = cfg.timeout;
  cfg.timeout = 1.0;
  T_OK(tcoll_set_config(&cfg));
  tcoll_unique_id_t id = shared_id(0);
  tcoll_comm_t *c = NULL;
  if (t_rank != t_size - 1) /* the last rank never joins */
    T_FAILS(tcoll_comm_init_rank(&c, t_size, id.bytes, sizeof id.bytes, t_rank),
            TCOLL_ERR_INVALID_ARGUMENT, "rendezvous timed out");
  T_EXPECT(c == NULL, "a failed init_rank set the communicator");
  cfg.timeout = saved;
  T_OK(tcoll_set_config(&cfg));
}
END_TEST

/* ------------------------------------------------------------------ multi ops */

typedef struct bufs {
  int n;
  int dev[3];
} bufs_t;

static bufs_t local_buffers(void) {
  bufs_t b = {1, {TCOLL_HOST, 0, 0}};
  if (t_device() != TCOLL_HOST && tcoll_device_count() > 1)
    b = (bufs_t){3, {0, 1, TCOLL_HOST}};
  else if (t_device() != TCOLL_HOST)
    b = (bufs_t){2, {0, TCOLL_HOST, 0}}; /* one GPU */
  return b;
}

static double gval(int g, int64_t i) { return (double)(g + 1) * (double)(i % 7 + 1); }

/* Buffer i of this process holds gval(global index, .). */
static void make_inputs(const bufs_t *b, int p, int64_t n_el, tcoll_dtype_t dt,
                        tcoll_tensor_t *in) {
  int64_t shape[1] = {n_el};
  for (int i = 0; i < b->n; i++) {
    in[i] = t_empty();
    T_OK(tcoll_tensor_alloc(&in[i], dt, 1, shape, b->dev[i]));
    double *v = malloc((size_t)n_el * sizeof *v);
    tcoll_tensor_t h = t_host(dt, 1, shape);
    for (int64_t k = 0; k < n_el; k++) v[k] = gval(p * b->n + i, k);
    for (int64_t k = 0; k < n_el; k++) {
      if (dt == TCOLL_FLOAT32)
        ((float *)h.data)[k] = (float)v[k];
      else if (dt == TCOLL_FLOAT64)
        ((double *)h.data)[k] = v[k];
      else
        ((int32_t *)h.data)[k] = (int32_t)v[k];
    }
    T_OK(tcoll_tensor_copy(&in[i], &h));
    tcoll_tensor_free(&h);
    free(v);
  }
}

typedef struct want {
  double scale;   /* times the pattern */
  int64_t period; /* gathered: block length */
} want_t;
static double scaled(int64_t i, void *c) { return ((want_t *)c)->scale * (double)(i % 7 + 1); }
static double gathered(int64_t i, void *c) {
  int64_t L = ((want_t *)c)->period;
  return gval((int)(i / L), i % L);
}

static void free_list(tcoll_tensor_t *t, int n) {
  for (int i = 0; i < n; i++) tcoll_tensor_free(&t[i]);
}

/* Forces TCOLL_ALGO to spec (NULL: back to *saved, which the first call fills). */
static void force_algo(const char *spec, tcoll_config_t *saved) {
  if (!spec) {
    T_OK(tcoll_set_config(saved));
    return;
  }
  T_OK(tcoll_get_config(saved));
  tcoll_config_t cfg = *saved;
  snprintf(cfg.algo, sizeof cfg.algo, "%s", spec);
  T_OK(tcoll_set_config(&cfg));
}

/* The processes' part is a work on the algorithm table where it picks a composed algorithm: the
 * ring when forced. */
static void expect_ring(const char *label, const char *op, tcoll_comm_t *c) {
  if (c)
    T_EXPECT(!strcmp(tcoll_last_algorithm(), "ring"), "%s %s with the ring forced ran \"%s\"",
             label, op, tcoll_last_algorithm());
}

/* comms: NULL (local only) or n entries of c. */
static void multi_all_ops(tcoll_comm_t *c, const char *label) {
  bufs_t b = local_buffers();
  int P = c ? tcoll_comm_size(c) : 1, p = c ? tcoll_comm_rank(c) : 0, T = b.n * P;
  tcoll_comm_t *cl[3] = {c, c, c};
  tcoll_comm_t *const *comms = c ? cl : NULL;
  double tri = (double)T * (T + 1) / 2;
  int64_t n_el = 7 * T * 3 + 7 * T; /* a multiple of T for reduce_scatter */
  tcoll_tensor_t in[3], out[3];
  char what[128];

  /* all_reduce SUM, AVG (out of place), MAX (in place) */
  tcoll_config_t saved;
  make_inputs(&b, p, n_el, TCOLL_FLOAT64, in);
  for (int i = 0; i < b.n; i++) out[i] = t_empty();
  force_algo("all_reduce:ring", &saved);
  T_OK(tcoll_multi_all_reduce(in, out, b.n, TCOLL_SUM, NULL, comms));
  expect_ring(label, "multi_all_reduce", c);
  force_algo(NULL, &saved);
  want_t w = {tri, 0};
  for (int i = 0; i < b.n; i++) {
    snprintf(what, sizeof what, "%s multi_all_reduce sum out[%d]", label, i);
    t_check_all(what, &out[i], scaled, &w, 0);
  }
  T_OK(tcoll_multi_all_reduce(in, out, b.n, TCOLL_AVG, NULL, comms));
  w.scale = tri / T;
  for (int i = 0; i < b.n; i++) t_check_all("multi_all_reduce avg", &out[i], scaled, &w, 1e-12);
  T_OK(tcoll_multi_all_reduce(in, in, b.n, TCOLL_MAX, NULL, comms));
  w.scale = T;
  for (int i = 0; i < b.n; i++) t_check_all("multi_all_reduce max in place", &in[i], scaled, &w, 0);
  free_list(in, b.n);
  free_list(out, b.n);

  /* reduce to every root; odd roots with 16 KiB per buffer, where MPICH 4.0's blocking
   * MPI_Reduce crashed on MPI_IN_PLACE at 3 or more ranks */
  for (int root = 0; root < T; root++) {
    make_inputs(&b, p, root % 2 ? 4096 : n_el, TCOLL_INT32, in);
    tcoll_tensor_t o = t_empty();
    if (root % 2 == 0) force_algo("reduce:ring", &saved);
    T_OK(tcoll_multi_reduce(in, b.n, &o, root, TCOLL_SUM, NULL, comms));
    if (root % 2 == 0) {
      expect_ring(label, "multi_reduce", c);
      force_algo(NULL, &saved);
    }
    if (root / b.n == p) {
      w.scale = tri;
      T_EXPECT(o.device == b.dev[root % b.n], "reduce output on %d", o.device);
      t_check_all("multi_reduce", &o, scaled, &w, 0);
    } else {
      T_EXPECT(o.data == NULL, "a non-root process got a reduce output");
    }
    tcoll_tensor_free(&o);
    free_list(in, b.n);
  }
  /* reduce without an output: into the root's own input */
  make_inputs(&b, p, n_el, TCOLL_INT32, in);
  T_OK(tcoll_multi_reduce(in, b.n, NULL, T - 1, TCOLL_SUM, NULL, comms));
  if ((T - 1) / b.n == p)
    t_check_all("multi_reduce into the root's input", &in[(T - 1) % b.n], scaled, &w, 0);
  free_list(in, b.n);

  /* broadcast from every root */
  for (int root = 0; root < T; root++) {
    make_inputs(&b, p, n_el, TCOLL_FLOAT32, in);
    T_OK(tcoll_multi_broadcast(in, b.n, root, NULL, comms));
    w.scale = root + 1;
    for (int i = 0; i < b.n; i++) t_check_all("multi_broadcast", &in[i], scaled, &w, 0);
    free_list(in, b.n);
  }

  /* all_gather: every output holds all T buffers in global order */
  make_inputs(&b, p, n_el, TCOLL_FLOAT32, in);
  for (int i = 0; i < b.n; i++) out[i] = t_empty();
  T_OK(tcoll_multi_all_gather(in, out, b.n, NULL, comms));
  want_t gw = {0, n_el};
  for (int i = 0; i < b.n; i++) {
    T_EXPECT(out[i].shape[0] == n_el * T, "all_gather out[%d] has %lld rows", i,
             (long long)out[i].shape[0]);
    t_check_all("multi_all_gather", &out[i], gathered, &gw, 0);
  }
  free_list(out, b.n);
  free_list(in, b.n);

  /* reduce_scatter: out[i] is block (p * n + i) of the sum */
  tcoll_redop_t ops[2] = {TCOLL_SUM, TCOLL_AVG};
  for (int k = 0; k < 2; k++) {
    make_inputs(&b, p, n_el, TCOLL_FLOAT64, in);
    for (int i = 0; i < b.n; i++) out[i] = t_empty();
    if (k == 0) force_algo("reduce_scatter:ring", &saved); /* the first op through the ring */
    T_OK(tcoll_multi_reduce_scatter(in, out, b.n, ops[k], NULL, comms));
    if (k == 0) {
      expect_ring(label, "multi_reduce_scatter", c);
      force_algo(NULL, &saved);
    }
    int64_t blk = n_el / T;
    for (int i = 0; i < b.n; i++) {
      int g = p * b.n + i;
      double *v = malloc((size_t)blk * sizeof *v);
      t_read(&out[i], v);
      int bad = 0;
      for (int64_t j = 0; j < blk; j++) {
        double want = tri * (double)((g * blk + j) % 7 + 1) / (k ? T : 1);
        bad += v[j] != want;
      }
      T_EXPECT(bad == 0, "%s multi_reduce_scatter op %d out[%d]: %d wrong", label, k, i, bad);
      free(v);
    }
    free_list(out, b.n);
    free_list(in, b.n);
  }
}

START_TEST(multi_local) { multi_all_ops(NULL, "local"); }
END_TEST

START_TEST(multi_world) { multi_all_ops(tcoll_comm_world(), "world"); }
END_TEST

/* Counts above the per-call limit (TCOLL_MAX_COUNT lowered to 7): one blocking _c call each
 * where MPI has the MPI-4 large-count calls (MPI_Allreduce_c, ...), pieces or derived datatypes
 * where it has not. */
START_TEST(multi_world_small_limit) {
  tcoll_config_t old, cfg;
  T_OK(tcoll_get_config(&old));
  cfg = old;
  cfg.max_count = 7;
  T_OK(tcoll_set_config(&cfg));
  multi_all_ops(tcoll_comm_world(), "world, max_count 7");
  T_OK(tcoll_set_config(&old));
}
END_TEST

START_TEST(multi_init_rank_comm) {
  tcoll_unique_id_t id = shared_id(t_size - 1);
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_init_rank(&c, t_size, id.bytes, sizeof id.bytes, t_size - 1 - t_rank));
  if (c) multi_all_ops(c, "init_rank");
  tcoll_comm_free(&c);
}
END_TEST

/* Per-buffer streams: inputs produced late on them, outputs read on them. */
START_TEST(multi_streams) {
  bufs_t b = local_buffers();
  if (b.n < 3) return; /* two devices and the host */
  void *s[3] = {NULL, NULL, NULL};
  T_OK(tcoll_stream_create(0, &s[0]));
  T_OK(tcoll_stream_create(1, &s[1]));
  int64_t n_el = 3000, one[1] = {16}, shape[1] = {n_el};
  tcoll_tensor_t host[3], in[3], out[3], back[3];
  tcoll_tensor_t bd = t_empty(), bh = t_host(TCOLL_FLOAT32, 1, one);
  T_OK(tcoll_tensor_alloc(&bd, TCOLL_FLOAT32, 1, one, 0));
  bufs_t hb = {3, {TCOLL_HOST, TCOLL_HOST, TCOLL_HOST}};
  make_inputs(&hb, t_rank, n_el, TCOLL_FLOAT32, host); /* the values, on the host */
  for (int i = 0; i < 3; i++) {
    in[i] = t_empty();
    T_OK(tcoll_tensor_alloc(&in[i], TCOLL_FLOAT32, 1, shape, b.dev[i]));
    back[i] = t_host(TCOLL_FLOAT32, 1, shape);
    out[i] = t_empty();
  }
  for (int k = 0; k < 30; k++) T_OK(tcoll_tensor_copy_async(&bd, &bh, s[0]));
  for (int i = 0; i < 2; i++) T_OK(tcoll_tensor_copy_async(&in[i], &host[i], s[i]));
  T_OK(tcoll_tensor_copy(&in[2], &host[2]));
  tcoll_comm_t *w = tcoll_comm_world(), *cl[3] = {w, w, w};
  T_OK(tcoll_multi_all_reduce(in, out, 3, TCOLL_SUM, s, cl));
  for (int i = 0; i < 2; i++) T_OK(tcoll_tensor_copy_async(&back[i], &out[i], s[i]));
  for (int i = 0; i < 2; i++) T_OK(tcoll_stream_synchronize(i, s[i]));
  T_OK(tcoll_tensor_copy(&back[2], &out[2]));
  int T = 3 * t_size;
  want_t want = {(double)T * (T + 1) / 2, 0};
  for (int i = 0; i < 3; i++)
    t_check_all("multi_all_reduce on streams", &back[i], scaled, &want, 0);
  free_list(host, 3);
  free_list(in, 3);
  free_list(out, 3);
  free_list(back, 3);
  tcoll_tensor_free(&bd);
  tcoll_tensor_free(&bh);
  T_OK(tcoll_stream_destroy(0, s[0]));
  T_OK(tcoll_stream_destroy(1, s[1]));
}
END_TEST

/* A multi op right after a collective whose later steps this rank starts (t_pending_ring: rank 0
 * leaves a ring reduce_scatter pending, the others wait for it first). Beyond 2 ranks the ring's
 * second step starts only when rank 0 drives it, so the multi ops' agreement must drive it while
 * it waits (a blocking one hung here). */
START_TEST(multi_after_pending) {
  tcoll_comm_t *w = tcoll_comm_world(), *cl[1] = {w};
  int64_t shape[1] = {1000};
  for (int op = 0; op < 3; op++) {
    tcoll_tensor_t in = t_host(TCOLL_FLOAT64, 1, shape), out = t_empty();
    for (int64_t i = 0; i < shape[0]; i++) ((double *)in.data)[i] = t_rank + 1.0;
    t_pending_t pr;
    t_pending_ring(&pr, w);
    double want = op == 1 ? 1.0 : (double)t_size * (t_size + 1) / 2;
    if (op == 0) T_OK(tcoll_multi_all_reduce(&in, &out, 1, TCOLL_SUM, NULL, cl));
    if (op == 1) T_OK(tcoll_multi_broadcast(&in, 1, 0, NULL, cl));
    if (op == 2) T_OK(tcoll_multi_reduce(&in, 1, NULL, 0, TCOLL_SUM, NULL, cl));
    t_pending_ring_done(&pr, "multi op after a pending ring");
    const double *got = op == 0 ? out.data : in.data;
    if (op != 2 || t_rank == 0)
      T_EXPECT(got && got[0] == want && got[999] == want,
               "multi op %d after a pending ring: %g (expected %g)", op, got ? got[0] : -1.0, want);
    tcoll_tensor_free(&in);
    tcoll_tensor_free(&out);
  }
}
END_TEST

/* tcoll_comm_init_rank right after a collective whose later steps this rank starts (as
 * multi_after_pending): its wait for the other members drives that collective. */
START_TEST(init_rank_after_pending) {
  tcoll_unique_id_t id = shared_id(0);
  t_pending_t pr;
  t_pending_ring(&pr, tcoll_comm_world());
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_init_rank(&c, t_size, id.bytes, sizeof id.bytes, t_rank));
  t_pending_ring_done(&pr, "init_rank after a pending ring");
  if (c) check_comm(c, t_rank, t_size);
  tcoll_comm_free(&c);
}
END_TEST

/* multi ops write outside the registry: outputs that pending work writes or still reads are
 * refused on every process, inputs that pending work writes are completed first. */
START_TEST(multi_pending) {
  bufs_t b = local_buffers();
  tcoll_tensor_t in[3] = {t_empty(), t_empty(), t_empty()}, y = t_empty(),
                 out[3] = {t_empty(), t_empty(), t_empty()};
  make_inputs(&b, t_rank, 14, TCOLL_FLOAT64, in);
  /* The pending all_reduce must still read in[0] during the checks below, whatever a progress
   * thread does (a completed work reads nothing): rank 0 posts it on a copy of the world
   * communicator, the others on the world, and neither half completes before the other group
   * posts its own (z, with in[0]'s values) after the checks. With one rank nothing holds it. */
  tcoll_comm_t *copy = NULL;
  T_OK(tcoll_comm_split(tcoll_comm_world(), 0, t_rank, &copy));
  tcoll_config_t cfg;
  T_OK(tcoll_get_config(&cfg));
  bool held = t_size > 1 || !cfg.progress_thread;
  T_OK(tcoll_all_reduce(&in[0], TCOLL_SUM, t_rank == 0 ? copy : NULL, &y)); /* reads in[0] */
  if (held) {
    T_FAILS(tcoll_multi_all_reduce(in, in, b.n, TCOLL_MAX, NULL, NULL), TCOLL_ERR_BUSY,
            "an input still read by");
    T_FAILS(tcoll_multi_all_reduce(in, in, b.n, TCOLL_MAX, NULL, NULL), TCOLL_ERR_BUSY, "out[0]");
    if (b.n > 1) /* in[0] is written: the root is the last buffer */
      T_FAILS(tcoll_multi_broadcast(in, b.n, b.n - 1, NULL, NULL), TCOLL_ERR_BUSY, "inout[0]");
  }
  tcoll_tensor_t busy_out[3] = {y, t_empty(), t_empty()};
  T_FAILS(tcoll_multi_all_reduce(in, busy_out, b.n, TCOLL_SUM, NULL, NULL), TCOLL_ERR_BUSY,
          "the output of");
  T_EXPECT(tcoll_pending_count() == 1, "failed calls changed the pending works (%d, expected 1)",
           (int)tcoll_pending_count());
  int64_t shape[1] = {14};
  tcoll_tensor_t z = t_host(TCOLL_FLOAT64, 1, shape), zy = t_empty();
  for (int64_t k = 0; k < 14; k++) ((double *)z.data)[k] = gval(t_rank * b.n, k);
  T_OK(tcoll_all_reduce(&z, TCOLL_SUM, t_rank == 0 ? NULL : copy, &zy));
  T_OK(tcoll_wait(zy.data));
  tcoll_tensor_free(&zy);
  tcoll_tensor_free(&z);
  /* y as an input: completed first. y = sum over ranks r of gval(r * n, .) */
  tcoll_tensor_t ins[3] = {y, in[1], in[2]};
  T_OK(tcoll_multi_all_reduce(ins, out, b.n, TCOLL_SUM, NULL, NULL));
  double s = 0;
  for (int r = 0; r < t_size; r++) s += r * b.n + 1;
  for (int i = 1; i < b.n; i++) s += t_rank * b.n + i + 1;
  want_t w = {s, 0};
  for (int i = 0; i < b.n; i++)
    t_check_all("multi_all_reduce of a pending output", &out[i], scaled, &w, 1e-9);
  T_EXPECT(tcoll_pending_count() == 0, "%d works pending after a multi op read their output",
           (int)tcoll_pending_count());
  free_list(out, b.n);
  tcoll_tensor_free(&y);
  free_list(in, b.n);
  tcoll_comm_free(&copy);
}
END_TEST

START_TEST(multi_errors) {
  bufs_t b = local_buffers();
  tcoll_tensor_t in[3], out[3] = {t_empty(), t_empty(), t_empty()};
  make_inputs(&b, t_rank, 14, TCOLL_FLOAT32, in);
  void *streams[3] = {NULL, NULL, NULL};
  tcoll_comm_t *w = tcoll_comm_world(), *cl[3] = {w, w, w};
  T_FAILS(tcoll_multi_all_reduce_v(in, b.n, out, b.n, TCOLL_SUM, streams, b.n + 1, NULL, 0),
          TCOLL_ERR_INVALID_ARGUMENT, "number of streams is not equal to number of inputs");
  T_FAILS(tcoll_multi_all_reduce_v(in, b.n, out, b.n, TCOLL_SUM, NULL, 0, cl, b.n + 1),
          TCOLL_ERR_INVALID_ARGUMENT, "number of communicators is not equal to number of inputs");
  T_FAILS(tcoll_multi_all_gather_v(in, b.n, out, b.n + 1, NULL, 0, NULL, 0),
          TCOLL_ERR_INVALID_ARGUMENT, "number of outputs is not equal to number of inputs");
  T_FAILS(tcoll_multi_broadcast(in, b.n, b.n, NULL, NULL), TCOLL_ERR_INVALID_ARGUMENT,
          "invalid root");
  T_FAILS(tcoll_multi_broadcast(in, b.n, -1, NULL, cl), TCOLL_ERR_INVALID_ARGUMENT, "invalid root");
  T_FAILS(tcoll_multi_reduce(in, b.n, NULL, b.n * t_size, TCOLL_SUM, NULL, cl),
          TCOLL_ERR_INVALID_ARGUMENT, "invalid root");
  tcoll_comm_t *holes[3] = {w, NULL, NULL};
  if (b.n > 1)
    T_FAILS(tcoll_multi_all_reduce(in, out, b.n, TCOLL_SUM, NULL, holes),
            TCOLL_ERR_INVALID_ARGUMENT, "number of communicators is not equal to number of inputs");
  T_FAILS(tcoll_multi_all_reduce(in, out, 0, TCOLL_SUM, NULL, NULL), TCOLL_ERR_INVALID_ARGUMENT,
          "n is 0");
  T_FAILS(tcoll_multi_reduce_scatter(in, out, b.n, TCOLL_BAND, NULL, NULL),
          TCOLL_ERR_INVALID_ARGUMENT, "op");
  /* one buffer per device */
  tcoll_tensor_t twice[2] = {in[0], in[0]};
  T_FAILS(tcoll_multi_all_reduce(twice, out, 2, TCOLL_SUM, NULL, NULL), TCOLL_ERR_INVALID_ARGUMENT,
          "expected one buffer per device");
  /* communicators with other members */
  if (t_size > 1 && b.n > 1) {
    tcoll_comm_t *half = NULL;
    T_OK(tcoll_comm_split(NULL, t_rank % 2, t_rank, &half));
    tcoll_comm_t *mixed[3] = {w, half, w};
    T_FAILS(tcoll_multi_all_reduce(in, out, b.n, TCOLL_SUM, NULL, mixed),
            TCOLL_ERR_INVALID_ARGUMENT, "does not have the same members");
    T_OK(tcoll_comm_free(&half));
  }
  /* a bad root on one process only: every process fails, none hangs */
  if (t_size > 1) {
    int rc = tcoll_multi_broadcast(in, b.n, t_rank == 0 ? -3 : 0, NULL, cl);
    T_EXPECT(rc == TCOLL_ERR_INVALID_ARGUMENT, "one bad root: %s", tcoll_status_string(rc));
    T_EXPECT(t_contains(tcoll_last_error(), t_rank == 0 ? "invalid root" : "world rank 0"),
             "message: %s", tcoll_last_error());
  }
  for (int i = 0; i < 3; i++) T_EXPECT(out[i].data == NULL, "a failed call allocated out[%d]", i);
  free_list(in, b.n);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("nccl");
  TCase *boot = t_tcase("bootstrap");
  tcase_add_test(boot, version);
  tcase_add_test(boot, init_all_ranks);
  tcase_add_test(boot, init_creator_not_member);
  tcase_add_test(boot, init_subsets);
  tcase_add_test(boot, init_bad_ids);
  tcase_add_test(boot, init_bad_ranks);
  tcase_add_test(boot, init_timeout);
  tcase_add_test(boot, init_rank_after_pending);
  suite_add_tcase(s, boot);
  TCase *multi = t_tcase("multi");
  tcase_add_test(multi, multi_local);
  tcase_add_test(multi, multi_world);
  tcase_add_test(multi, multi_world_small_limit);
  tcase_add_test(multi, multi_init_rank_comm);
  tcase_add_test(multi, multi_streams);
  tcase_add_test(multi, multi_pending);
  tcase_add_test(multi, multi_after_pending);
  tcase_add_test(multi, multi_errors);
  suite_add_tcase(s, multi);
  return s;
}
