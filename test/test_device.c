/* Device correctness: the staging pipeline (every pipelined op, sizes spanning many chunks,
 * odd sizes, in place, AVG and premul_sum, several pipelines waited in rank-dependent orders),
 * stream semantics (inputs and outputs ordered against the caller's stream; run with
 * TCOLL_FAKE_DELAY_US so that a missing order shows), CUDA-awareness, and device errors.
 *
 * Tensors are on device 0 in the -dev variants (host otherwise: the same closed forms then
 * check the host paths). A small staging chunk (4 KiB) makes modest tensors span many chunks. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 4096

static size_t saved_chunk;

static void small_chunks(void) {
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  saved_chunk = c.staging_chunk;
  c.staging_chunk = CHUNK;
  T_OK(tcoll_set_config(&c));
}

static void restore_chunks(void) {
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  c.staging_chunk = saved_chunk;
  T_OK(tcoll_set_config(&c));
}

static bool have_devices(void) { return t_device() != TCOLL_HOST; }

/* ------------------------------------------------------------------ closed forms */

typedef struct ctx {
  int rank;      /* whose data */
  int64_t off;   /* element offset */
  int64_t block; /* elements per rank block (gathers) */
  double scale;
} ctx_t;

/* Rank r's element i: (r + 1) * (i % 7 + 1), small integers exact in every dtype used. */
static double val(int r, int64_t i) { return (double)(r + 1) * (double)(i % 7 + 1); }
static double rank_val(int64_t i, void *c) {
  return val(((ctx_t *)c)->rank, i + ((ctx_t *)c)->off);
}
static double tri(void) { return (double)t_size * (t_size + 1) / 2.0; }
/* sum over ranks of val(r, i), times scale (premul / AVG) */
static double sum_val(int64_t i, void *c) {
  return tri() * (double)((i + ((ctx_t *)c)->off) % 7 + 1) * ((ctx_t *)c)->scale;
}
/* The same in int8, wrapped around (from 6 ranks on it leaves the type's range) */
static double sum_val_int8(int64_t i, void *c) {
  long w = ((long)sum_val(i, c) % 256 + 256) % 256;
  return (double)(w >= 128 ? w - 256 : w);
}
static double max_val(int64_t i, void *c) { return val(t_size - 1, i + ((ctx_t *)c)->off); }
/* all_gather along dim 0: block r of the output is rank r's input */
static double gathered0(int64_t i, void *c) {
  int64_t b = ((ctx_t *)c)->block;
  return val((int)(i / b), i % b);
}

static tcoll_tensor_t filled(tcoll_dtype_t dt, int ndim, const int64_t *shape, int rank) {
  tcoll_tensor_t t = t_alloc(dt, ndim, shape);
  ctx_t c = {rank, 0, 0, 1.0};
  t_set_all(&t, rank_val, &c);
  return t;
}

/* ------------------------------------------------------------------ all_reduce */

static void all_reduce_case(tcoll_dtype_t dt, int64_t n, tcoll_redop_t op, bool inplace) {
  int64_t shape[1] = {n};
  tcoll_tensor_t in = filled(dt, 1, shape, t_rank), out = t_empty();
  tcoll_tensor_t *o = inplace ? &in : &out;
  T_OK(tcoll_all_reduce(&in, op, NULL, o));
  T_OK(tcoll_wait(o->data));
  ctx_t c = {0, 0, 0, 1.0};
  char what[96];
  snprintf(what, sizeof what, "all_reduce %s n=%lld op=%d%s", tcoll_dtype_name(dt), (long long)n,
           op, inplace ? " in place" : "");
  if (op == TCOLL_MAX)
    t_check_all(what, o, max_val, &c, 0);
  else {
    c.scale = op == TCOLL_AVG ? 1.0 / t_size : 1.0;
    t_check_all(what, o, dt == TCOLL_INT8 ? sum_val_int8 : sum_val, &c, op == TCOLL_AVG ? 1e-6 : 0);
  }
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

START_TEST(pipe_all_reduce) {
  small_chunks();
  all_reduce_case(TCOLL_FLOAT32, 12345, TCOLL_SUM, false); /* 13 chunks, odd tail */
  all_reduce_case(TCOLL_FLOAT32, 100003, TCOLL_SUM, true); /* 98 chunks, in place */
  all_reduce_case(TCOLL_INT32, 4099, TCOLL_MAX, false);
  all_reduce_case(TCOLL_FLOAT64, 5001, TCOLL_AVG, false);
  all_reduce_case(TCOLL_FLOAT64, 5001, TCOLL_AVG, true);
  all_reduce_case(TCOLL_FLOAT16, 6007, TCOLL_SUM, false);
  all_reduce_case(TCOLL_BFLOAT16, 2049, TCOLL_SUM, true);
  all_reduce_case(TCOLL_INT8, 4096 * 3 + 1, TCOLL_SUM, false);
  all_reduce_case(TCOLL_FLOAT32, 1024, TCOLL_SUM, false); /* exactly one chunk: whole-buffer path */
  /* premul_sum: every contribution halved first */
  tcoll_redop_t half;
  T_OK(tcoll_redop_create_premul_sum(0.5, &half));
  int64_t shape[1] = {7777};
  tcoll_tensor_t in = filled(TCOLL_FLOAT32, 1, shape, t_rank), out = t_empty();
  T_OK(tcoll_all_reduce(&in, half, NULL, &out));
  T_OK(tcoll_wait(out.data));
  ctx_t c = {0, 0, 0, 0.5};
  t_check_all("all_reduce premul_sum(0.5)", &out, sum_val, &c, 0);
  T_OK(tcoll_all_reduce(&in, half, NULL, &in)); /* in place */
  T_OK(tcoll_wait(in.data));
  t_check_all("all_reduce premul_sum(0.5) in place", &in, sum_val, &c, 0);
  T_OK(tcoll_redop_destroy(half));
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  restore_chunks();
}
END_TEST

/* ------------------------------------------------------------------ broadcast */

static double root_val(int64_t i, void *c) { return val(((ctx_t *)c)->rank, i); }

START_TEST(pipe_broadcast) {
  small_chunks();
  int64_t shape[2] = {33, 301}; /* 9933 floats: 10 chunks */
  for (int root = 0; root < t_size; root++) {
    for (int inplace = 0; inplace < 2; inplace++) {
      tcoll_tensor_t in = filled(TCOLL_FLOAT32, 2, shape, t_rank), out = t_empty();
      tcoll_tensor_t *o = inplace ? &in : &out;
      T_OK(tcoll_broadcast(&in, root, NULL, o));
      T_OK(tcoll_wait(o->data));
      ctx_t c = {root, 0, 0, 1.0};
      t_check_all(inplace ? "broadcast in place" : "broadcast", o, root_val, &c, 0);
      if (!inplace)
        t_check_all("broadcast leaves in unchanged", &in, root_val, &(ctx_t){t_rank, 0, 0, 1.0}, 0);
      tcoll_tensor_free(&in);
      tcoll_tensor_free(&out);
    }
  }
  restore_chunks();
}
END_TEST

/* ------------------------------------------------------------------ all_gather */

typedef struct gctx {
  int ndim;
  int64_t in_shape[3];
  int dim;
} gctx_t;

/* Output element i of all_gather along g->dim: which rank's input, at which input index. */
static double gathered(int64_t i, void *c) {
  gctx_t *g = c;
  int64_t inner = 1;
  for (int d = g->dim + 1; d < g->ndim; d++) inner *= g->in_shape[d];
  int64_t len = g->in_shape[g->dim];
  int64_t outer_i = i / (len * t_size * inner), rest = i % (len * t_size * inner);
  int r = (int)(rest / (len * inner));
  int64_t within = rest % (len * inner);
  return val(r, outer_i * len * inner + within);
}

static void all_gather_case(int ndim, const int64_t *shape, int dim) {
  gctx_t g = {ndim, {0}, dim};
  memcpy(g.in_shape, shape, (size_t)ndim * sizeof *shape);
  tcoll_tensor_t in = filled(TCOLL_FLOAT32, ndim, shape, t_rank), out = t_empty();
  T_OK(tcoll_all_gather(&in, dim, NULL, &out));
  T_OK(tcoll_wait(out.data));
  char what[64];
  snprintf(what, sizeof what, "all_gather dim %d", dim);
  t_check_all(what, &out, gathered, &g, 0);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

START_TEST(pipe_all_gather) {
  small_chunks();
  int64_t s1[1] = {10007};
  all_gather_case(1, s1, 0);
  int64_t s2[2] = {3, 5001}; /* dim 1: runs of 5001 elements, pipelined with strided copies */
  all_gather_case(2, s2, 1);
  all_gather_case(2, s2, 0);
  int64_t s3[3] = {40, 3, 7}; /* dim 1: runs of 21 elements, too short: whole-buffer path */
  all_gather_case(3, s3, 1);
  /* in place: the input is this rank's block of the output */
  int64_t n = 3001, oshape[1] = {n * t_size};
  tcoll_tensor_t out = t_alloc(TCOLL_FLOAT32, 1, oshape);
  tcoll_tensor_t mine = out;
  mine.shape[0] = n;
  mine.data = (char *)out.data + (size_t)t_rank * (size_t)n * sizeof(float);
  ctx_t c = {t_rank, 0, 0, 1.0};
  t_set_all(&mine, rank_val, &c);
  T_OK(tcoll_all_gather(&mine, 0, NULL, &out));
  T_OK(tcoll_wait(out.data));
  ctx_t g = {0, 0, n, 1.0};
  t_check_all("all_gather in place", &out, gathered0, &g, 0);
  tcoll_tensor_free(&out);
  restore_chunks();
}
END_TEST

/* ------------------------------------------------------------------ reduce_scatter */

typedef struct rctx {
  int ndim;
  int64_t in_shape[3];
  int dim;
  double scale;
} rctx_t;

/* Output element i of reduce_scatter along dim on this rank: the input index it reduces. */
static double scattered(int64_t i, void *c) {
  rctx_t *g = c;
  int64_t inner = 1;
  for (int d = g->dim + 1; d < g->ndim; d++) inner *= g->in_shape[d];
  int64_t len = g->in_shape[g->dim], olen = len / t_size;
  int64_t o = i / (olen * inner), within = i % (olen * inner);
  int64_t src = o * len * inner + (int64_t)t_rank * olen * inner + within;
  return tri() * (double)(src % 7 + 1) * g->scale;
}

static void reduce_scatter_case(int ndim, const int64_t *shape, int dim, tcoll_redop_t op,
                                double scale) {
  rctx_t g = {ndim, {0}, dim, scale};
  memcpy(g.in_shape, shape, (size_t)ndim * sizeof *shape);
  tcoll_tensor_t in = filled(TCOLL_FLOAT64, ndim, shape, t_rank), out = t_empty();
  T_OK(tcoll_reduce_scatter(&in, op, dim, NULL, &out));
  T_OK(tcoll_wait(out.data));
  char what[64];
  snprintf(what, sizeof what, "reduce_scatter dim %d op %d", dim, op);
  t_check_all(what, &out, scattered, &g, 1e-12);
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

START_TEST(pipe_reduce_scatter) {
  small_chunks();
  int64_t s1[1] = {420 * 29};
  reduce_scatter_case(1, s1, 0, TCOLL_SUM, 1.0);
  reduce_scatter_case(1, s1, 0, TCOLL_AVG, 1.0 / t_size);
  int64_t s2[2] = {
      3, 420 * 15}; /* dim 1: runs of 420 * 15 / size elements (420: any size up to 7 divides it) */
  reduce_scatter_case(2, s2, 1, TCOLL_SUM, 1.0);
  tcoll_redop_t third;
  T_OK(tcoll_redop_create_premul_sum(0.25, &third));
  reduce_scatter_case(2, s2, 1, third, 0.25);
  T_OK(tcoll_redop_destroy(third));
  int64_t s3[2] = {420 * 9, 5};
  reduce_scatter_case(2, s3, 0, TCOLL_SUM, 1.0);
  restore_chunks();
}
END_TEST

/* ------------------------------------------------------------------ several pipelines */

/* Several pipelined collectives in flight, waited in an order that differs between ranks (and
 * one completed by polling): chunk MPI calls must still match across ranks. */
START_TEST(pipe_wait_orders) {
  small_chunks();
  enum { N = 4 };
  int64_t shape[1] = {9001};
  tcoll_tensor_t in[N], out[N];
  for (int k = 0; k < N; k++) {
    in[k] = filled(TCOLL_FLOAT32, 1, shape, t_rank + k);
    out[k] = t_empty();
  }
  T_OK(tcoll_all_reduce(&in[0], TCOLL_SUM, NULL, &out[0]));
  T_OK(tcoll_broadcast(&in[1], t_size - 1, NULL, &out[1]));
  T_OK(tcoll_all_gather(&in[2], 0, NULL, &out[2]));
  int64_t hshape[1] = {100};
  tcoll_tensor_t h = filled(TCOLL_FLOAT32, 1, hshape, t_rank), hout = t_empty();
  T_OK(tcoll_all_reduce(&h, TCOLL_SUM, NULL, &hout)); /* a small one in between */
  T_OK(tcoll_all_reduce(&in[3], TCOLL_SUM, NULL, &in[3]));
  int order[N];
  for (int k = 0; k < N; k++) order[k] = t_rank % 2 ? N - 1 - k : (k + t_rank) % N;
  /* The first one by polling. */
  tcoll_tensor_t *first = order[0] == 3 ? &in[3] : &out[order[0]];
  int rc, polls = 0;
  while ((rc = tcoll_test(first->data)) == TCOLL_IN_PROGRESS) polls++;
  T_EXPECT(rc == TCOLL_SUCCESS, "tcoll_test: %s", tcoll_last_error());
  for (int k = 1; k < N; k++) T_OK(tcoll_wait(order[k] == 3 ? in[3].data : out[order[k]].data));
  T_OK(tcoll_wait(hout.data));
  ctx_t c = {0, 0, 0, 1.0};
  /* in[k] holds val(rank + k): sums are tri() + size * k times the pattern */
  for (int k = 0; k < N; k++) {
    tcoll_tensor_t *t = k == 3 ? &in[3] : &out[k];
    int64_t n = tcoll_tensor_numel(t);
    double *v = malloc((size_t)n * sizeof *v);
    t_read(t, v);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 3; i++) {
      double want;
      if (k == 1)
        want = val(t_size - 1 + 1, i);
      else if (k == 2)
        want = val((int)(i / shape[0]) + 2, i % shape[0]);
      else
        want = (tri() + (double)t_size * k) * (double)(i % 7 + 1);
      if (v[i] != want) {
        bad++;
        T_EXPECT(false, "op %d element %lld is %g, expected %g", k, (long long)i, v[i], want);
      }
    }
    free(v);
  }
  t_check_all("small all_reduce", &hout, sum_val, &c, 0);
  for (int k = 0; k < N; k++) {
    tcoll_tensor_free(&in[k]);
    tcoll_tensor_free(&out[k]);
  }
  tcoll_tensor_free(&h);
  tcoll_tensor_free(&hout);
  restore_chunks();
}
END_TEST

/* Device pipelines and a host pipeline (a gather along dim 1) in flight together, waited in
 * opposite orders on odd and even ranks, the first with a timeout too short to finish: their
 * chunk calls share the engine's FIFO and must match across ranks whatever the order. */
START_TEST(pipe_mixed_orders) {
  small_chunks();
  int64_t shape[1] = {7001}, hshape[2] = {64, 1024};
  tcoll_tensor_t a = filled(TCOLL_FLOAT32, 1, shape, t_rank), ao = t_empty();
  tcoll_tensor_t h = t_host(TCOLL_FLOAT32, 2, hshape), ho = t_empty();
  ctx_t hc = {t_rank, 0, 0, 1.0};
  t_set_all(&h, rank_val, &hc);
  int64_t rshape[1] = {4096 * t_size};
  tcoll_tensor_t r = filled(TCOLL_FLOAT32, 1, rshape, t_rank), ro = t_empty();
  T_OK(tcoll_all_reduce(&a, TCOLL_SUM, NULL, &ao));
  T_OK(tcoll_all_gather(&h, 1, NULL, &ho));
  T_OK(tcoll_reduce_scatter(&r, TCOLL_SUM, 0, NULL, &ro));
  void *bufs[3] = {ao.data, ho.data, ro.data};
  int first = t_rank % 2 ? 2 : 0, step = t_rank % 2 ? -1 : 1;
  int rc = tcoll_wait_timeout(bufs[first], 1e-6);
  T_EXPECT(rc == TCOLL_SUCCESS || rc == TCOLL_ERR_TIMEOUT, "wait_timeout: %s",
           tcoll_status_string(rc));
  for (int k = 0; k < 3; k++) T_OK(tcoll_wait(bufs[first + step * k]));
  ctx_t c = {0, 0, 0, 1.0};
  t_check_all("all_reduce beside a host pipeline", &ao, sum_val, &c, 0);
  t_check_all("reduce_scatter beside a host pipeline", &ro, sum_val,
              &(ctx_t){0, 4096 * t_rank, 0, 1.0}, 0);
  int64_t n = tcoll_tensor_numel(&ho), row = 1024 * t_size;
  double *v = malloc((size_t)n * sizeof *v);
  t_read(&ho, v);
  for (int64_t i = 0; i < n; i++) {
    int64_t col = i % row;
    double want = val((int)(col / 1024), i / row * 1024 + col % 1024);
    if (v[i] != want) {
      T_EXPECT(false, "gather along dim 1: element %lld is %g, expected %g", (long long)i, v[i],
               want);
      break;
    }
  }
  free(v);
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&ao);
  tcoll_tensor_free(&h);
  tcoll_tensor_free(&ho);
  tcoll_tensor_free(&r);
  tcoll_tensor_free(&ro);
  restore_chunks();
}
END_TEST

/* A subcommunicator: pipelines on two communicators at once. */
START_TEST(pipe_subcomm) {
  small_chunks();
  tcoll_comm_t *half = NULL;
  T_OK(tcoll_comm_split(NULL, t_rank % 2, t_rank, &half));
  int hs = tcoll_comm_size(half), hr = tcoll_comm_rank(half);
  int64_t shape[1] = {5003};
  tcoll_tensor_t a = filled(TCOLL_FLOAT32, 1, shape, hr),
                 b = filled(TCOLL_FLOAT32, 1, shape, t_rank);
  tcoll_tensor_t ao = t_empty(), bo = t_empty();
  T_OK(tcoll_all_reduce(&a, TCOLL_SUM, half, &ao));
  T_OK(tcoll_all_reduce(&b, TCOLL_SUM, NULL, &bo));
  T_OK(tcoll_wait(bo.data));
  T_OK(tcoll_wait(ao.data));
  ctx_t c = {0, 0, 0, 1.0};
  t_check_all("all_reduce on world", &bo, sum_val, &c, 0);
  double *v = malloc((size_t)shape[0] * sizeof *v);
  t_read(&ao, v);
  for (int64_t i = 0; i < shape[0]; i++)
    if (v[i] != (double)hs * (hs + 1) / 2 * (double)(i % 7 + 1)) {
      T_EXPECT(false, "subcomm all_reduce element %lld is %g", (long long)i, v[i]);
      break;
    }
  free(v);
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&b);
  tcoll_tensor_free(&ao);
  tcoll_tensor_free(&bo);
  T_OK(tcoll_comm_free(&half));
  restore_chunks();
}
END_TEST

/* The same pipelined op many times: pooled buffers and events are reused correctly. */
START_TEST(pipe_repeat) {
  small_chunks();
  int64_t shape[1] = {3000};
  tcoll_tensor_t x = filled(TCOLL_FLOAT64, 1, shape, t_rank), y = t_empty();
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_wait(y.data));
  for (int it = 0; it < 20; it++) {
    /* y <- sum(y) / size keeps y fixed: ping-pong through the pipeline */
    T_OK(tcoll_all_reduce(&y, TCOLL_AVG, NULL, &y));
    T_OK(tcoll_wait(y.data));
  }
  ctx_t c = {0, 0, 0, 1.0};
  t_check_all("repeated all_reduce", &y, sum_val, &c, 0);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  restore_chunks();
}
END_TEST

/* A per-call element limit below the chunk: chunks shrink to it. */
START_TEST(pipe_max_count) {
  small_chunks();
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  int64_t saved = c.max_count;
  c.max_count = 300;
  T_OK(tcoll_set_config(&c));
  all_reduce_case(TCOLL_FLOAT32, 4001, TCOLL_SUM, false);
  int64_t s1[1] = {2003};
  all_gather_case(1, s1, 0);
  int64_t s2[1] = {420 * 6};
  reduce_scatter_case(1, s2, 0, TCOLL_SUM, 1.0);
  c.max_count = saved;
  T_OK(tcoll_set_config(&c));
  restore_chunks();
}
END_TEST

/* ------------------------------------------------------------------ stream semantics */

/* Keeps stream s of device 0 busy for a while (each queued op takes TCOLL_FAKE_DELAY_US). */
static void keep_busy(void *s, tcoll_tensor_t *scratch_dev, tcoll_tensor_t *scratch_host, int ops) {
  for (int k = 0; k < ops; k++) T_OK(tcoll_tensor_copy_async(scratch_dev, scratch_host, s));
}

static void stream_case(int64_t n) {
  void *s = NULL;
  T_OK(tcoll_stream_create(0, &s));
  T_OK(tcoll_set_stream(0, s));
  T_EXPECT(tcoll_get_stream(0) == s, "tcoll_get_stream does not return the stream set");
  int64_t shape[1] = {n}, one[1] = {64};
  tcoll_tensor_t host = t_host(TCOLL_FLOAT32, 1, shape), dev = t_alloc(TCOLL_FLOAT32, 1, shape);
  tcoll_tensor_t out = t_alloc(TCOLL_FLOAT32, 1, shape), back = t_host(TCOLL_FLOAT32, 1, shape);
  tcoll_tensor_t old = t_host(TCOLL_FLOAT32, 1, shape);
  tcoll_tensor_t bd = t_alloc(TCOLL_FLOAT32, 1, one), bh = t_host(TCOLL_FLOAT32, 1, one);
  ctx_t c = {t_rank, 0, 0, 1.0};
  t_set_all(&host, rank_val, &c);
  ctx_t minus = {0, 0, 0, 1.0};
  /* out holds -1s; a copy of it to `old` is queued on s before the collective (write after
   * read), the input is produced on s after a delay (read after write). */
  float *o = malloc((size_t)n * sizeof *o);
  for (int64_t i = 0; i < n; i++) o[i] = -1.0f;
  tcoll_tensor_t minus_host = tcoll_tensor_make(o, TCOLL_FLOAT32, 1, shape, TCOLL_HOST);
  T_OK(tcoll_tensor_copy(&out, &minus_host));
  keep_busy(s, &bd, &bh, 40);
  T_OK(tcoll_tensor_copy_async(&old, &out, s));
  keep_busy(s, &bd, &bh, 40);
  T_OK(tcoll_tensor_copy_async(&dev, &host, s));
  T_OK(tcoll_all_reduce(&dev, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait(out.data));
  /* Read the result in stream order, without any host synchronization by tcoll. */
  T_OK(tcoll_tensor_copy_async(&back, &out, s));
  T_OK(tcoll_stream_synchronize(0, s));
  t_check_all("result read on the caller's stream", &back, sum_val, &minus, 0);
  int bad = 0;
  for (int64_t i = 0; i < n; i++) bad += ((float *)old.data)[i] != -1.0f;
  T_EXPECT(bad == 0,
           "n=%lld: %d elements of out were overwritten before the caller's stream read them",
           (long long)n, bad);
  /* tcoll_wait made s wait: tcoll_tensor_copy (on the current stream) sees the result too. */
  t_check_all("result read with tcoll_tensor_copy", &out, sum_val, &minus, 0);
  /* broadcast: non-roots only write out (they read nothing first), so that write must wait
   * for the caller's stream by itself. */
  T_OK(tcoll_tensor_copy(&out, &minus_host));
  keep_busy(s, &bd, &bh, t_rank == 0 ? 0 : 80); /* the root is ready long before the others */
  T_OK(tcoll_tensor_copy_async(&old, &out, s));
  T_OK(tcoll_broadcast(&dev, 0, NULL, &out));
  T_OK(tcoll_wait(out.data));
  T_OK(tcoll_tensor_copy_async(&back, &out, s));
  T_OK(tcoll_stream_synchronize(0, s));
  ctx_t root = {0, 0, 0, 1.0};
  t_check_all("broadcast read on the caller's stream", &back, root_val, &root, 0);
  bad = 0;
  for (int64_t i = 0; i < n; i++) bad += ((float *)old.data)[i] != -1.0f;
  T_EXPECT(bad == 0,
           "n=%lld: broadcast overwrote %d elements of out before the caller's stream read them",
           (long long)n, bad);
  T_OK(tcoll_set_stream(0, NULL));
  T_OK(tcoll_stream_destroy(0, s));
  free(o);
  tcoll_tensor_free(&host);
  tcoll_tensor_free(&dev);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&back);
  tcoll_tensor_free(&old);
  tcoll_tensor_free(&bd);
  tcoll_tensor_free(&bh);
}

START_TEST(stream_order) {
  if (!have_devices()) return;
  small_chunks();
  stream_case(20011); /* pipelined */
  stream_case(100);   /* whole-buffer staging (or direct) */
  restore_chunks();
}
END_TEST

/* Outputs of one collective feed the next without host synchronization in between. */
START_TEST(stream_chain) {
  if (!have_devices()) return;
  small_chunks();
  int64_t shape[1] = {8191};
  tcoll_tensor_t x = filled(TCOLL_FLOAT32, 1, shape, t_rank), y = t_empty(), z = t_empty();
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_broadcast(&y, 0, NULL, &z)); /* y pending: waited first, then read in stream order */
  T_OK(tcoll_wait(z.data));
  ctx_t c = {0, 0, 0, 1.0};
  t_check_all("broadcast of an all_reduce result", &z, sum_val, &c, 0);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&z);
  restore_chunks();
}
END_TEST

/* ------------------------------------------------------------------ the other ops on devices */

/* Element i of rank r's tensor with a tag: (r + 1) * (i % 7 + 1) + 100 * tag. */
static double tv(int r, int64_t i, int tag) { return val(r, i) + 100.0 * tag; }
typedef struct ectx {
  int r, tag;
  int64_t off;
  double mul;
} ectx_t;
static double tagged(int64_t i, void *c) {
  ectx_t *e = c;
  return e->mul * tv(e->r, i + e->off, e->tag);
}
static double tagged_sum(int64_t i, void *c) {
  ectx_t *e = c;
  return tri() * (double)((i + e->off) % 7 + 1) + 100.0 * e->tag * t_size;
}
static tcoll_tensor_t tagged_tensor(tcoll_dtype_t dt, int ndim, const int64_t *shape, int r,
                                    int tag) {
  tcoll_tensor_t t = t_alloc(dt, ndim, shape);
  ectx_t e = {r, tag, 0, 1.0};
  t_set_all(&t, tagged, &e);
  return t;
}

START_TEST(other_ops) {
  int R = t_rank, S = t_size;
  /* all_reduce_coalesced (three dtypes), all_gather_coalesced, reduce_scatter_coalesced */
  int64_t a[1] = {5}, b[2] = {3, 4}, c[1] = {7};
  tcoll_tensor_t in[3] = {tagged_tensor(TCOLL_FLOAT32, 1, a, R, 0),
                          tagged_tensor(TCOLL_INT32, 2, b, R, 1),
                          tagged_tensor(TCOLL_FLOAT64, 1, c, R, 2)};
  tcoll_tensor_t out[3] = {t_empty(), t_empty(), t_empty()};
  T_OK(tcoll_all_reduce_coalesced(in, 3, TCOLL_SUM, NULL, out));
  for (int i = 0; i < 3; i++) {
    T_OK(tcoll_wait(out[i].data));
    ectx_t e = {0, i, 0, 1};
    t_check_all("all_reduce_coalesced", &out[i], tagged_sum, &e, 0);
    tcoll_tensor_free(&out[i]);
  }
  T_OK(tcoll_all_gather_coalesced(in, 3, NULL, out));
  for (int i = 0; i < 3; i++) {
    T_OK(tcoll_wait(out[i].data));
    int64_t per = tcoll_tensor_numel(&in[i]);
    double *v = malloc((size_t)(per * S) * sizeof *v);
    t_read(&out[i], v);
    int bad = 0;
    for (int64_t k = 0; k < per * S; k++) bad += v[k] != tv((int)(k / per), k % per, i);
    T_EXPECT(bad == 0, "all_gather_coalesced out[%d]: %d wrong", i, bad);
    free(v);
    tcoll_tensor_free(&out[i]);
  }
  for (int i = 0; i < 3; i++) tcoll_tensor_free(&in[i]);
  int64_t r0[2] = {2 * S, 3}, r1[2] = {3, 2 * S};
  tcoll_tensor_t rin[2] = {tagged_tensor(TCOLL_FLOAT64, 2, r0, R, 0),
                           tagged_tensor(TCOLL_FLOAT64, 2, r1, R, 0)};
  tcoll_tensor_t rout[2] = {t_empty(), t_empty()};
  int dims[2] = {0, 1};
  T_OK(tcoll_reduce_scatter_coalesced(rin, 2, TCOLL_SUM, dims, NULL, rout));
  for (int i = 0; i < 2; i++) {
    T_OK(tcoll_wait(rout[i].data));
    rctx_t g = {2, {rin[i].shape[0], rin[i].shape[1], 0}, dims[i], 1.0};
    t_check_all("reduce_scatter_coalesced", &rout[i], scattered, &g, 0);
    tcoll_tensor_free(&rout[i]);
    tcoll_tensor_free(&rin[i]);
  }

  /* all_to_all_single, permute, shard_dim_all_to_all */
  int64_t s2[2] = {2 * S, 3};
  tcoll_tensor_t x = tagged_tensor(TCOLL_FLOAT32, 2, s2, R, 0), y = t_empty();
  T_OK(tcoll_all_to_all_single(&x, NULL, NULL, NULL, &y));
  T_OK(tcoll_wait(y.data));
  double *v = malloc((size_t)(6 * S) * sizeof *v);
  t_read(&y, v);
  int bad = 0;
  for (int64_t k = 0; k < 6 * S; k++)
    bad += v[k] != tv((int)(k / 6), 6 * R + k % 6, 0); /* 2 rows of 3 from rank k/6 */
  T_EXPECT(bad == 0, "all_to_all_single: %d wrong", bad);
  tcoll_tensor_free(&y);
  int *sd = malloc((size_t)S * sizeof *sd);
  for (int m = 0; m < S; m++) sd[m] = (m + 1) % S;
  T_OK(tcoll_permute(&x, sd, NULL, &y));
  T_OK(tcoll_wait(y.data));
  ectx_t from = {(R - 1 + S) % S, 0, 0, 1};
  t_check_all("permute", &y, tagged, &from, 0);
  tcoll_tensor_free(&y);
  free(sd);
  tcoll_tensor_free(&x);
  int64_t s3[2] = {2, 2 * S};
  x = tagged_tensor(TCOLL_FLOAT32, 2, s3, R, 0);
  T_OK(tcoll_shard_dim_all_to_all(&x, 0, 1, NULL, &y));
  T_OK(tcoll_wait(y.data));
  t_read(&y, v); /* [2 * S, 2]: rows 2i, 2i+1 from rank i, its columns 2R, 2R+1 */
  bad = 0;
  for (int64_t k = 0; k < 4 * S; k++) {
    int64_t row = k / 2, col = k % 2;
    bad += v[k] != tv((int)(row / 2), (row % 2) * 2 * S + 2 * R + col, 0);
  }
  T_EXPECT(bad == 0, "shard_dim_all_to_all: %d wrong", bad);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&x);
  free(v);

  /* reduce (AVG), gather, scatter, all_gather_list, reduce_scatter_list, all_to_all */
  int64_t s1[1] = {9};
  x = tagged_tensor(TCOLL_FLOAT64, 1, s1, R, 0);
  y = t_empty();
  T_OK(tcoll_reduce(&x, S - 1, TCOLL_AVG, NULL, &y));
  T_OK(tcoll_wait(y.data));
  if (R == S - 1) {
    ctx_t avg = {0, 0, 0, 1.0 / S};
    t_check_all("reduce avg on dst", &y, sum_val, &avg, 1e-12);
  }
  tcoll_tensor_free(&y);
  tcoll_tensor_t *list = calloc((size_t)S, sizeof *list), *list2 = calloc((size_t)S, sizeof *list2);
  for (int j = 0; j < S; j++) list[j] = t_empty();
  T_OK(tcoll_gather(&x, 0, NULL, R == 0 ? list : NULL));
  T_OK(tcoll_wait(R == 0 ? list[0].data : x.data));
  for (int j = 0; j < S && R == 0; j++) {
    T_OK(tcoll_wait(list[j].data));
    ectx_t e = {j, 0, 0, 1};
    t_check_all("gather", &list[j], tagged, &e, 0);
  }
  for (int j = 0; j < S; j++) tcoll_tensor_free(&list[j]);
  for (int j = 0; j < S; j++)
    list2[j] = R == 0 ? tagged_tensor(TCOLL_FLOAT64, 1, s1, j, 3) : t_empty();
  y = t_empty();
  y.dtype = TCOLL_FLOAT64;
  y.ndim = 1;
  y.shape[0] = 9;
  y.device = t_device();
  T_OK(tcoll_scatter(list2, 0, NULL, &y));
  T_OK(tcoll_wait(y.data));
  ectx_t sc = {R, 3, 0, 1};
  t_check_all("scatter", &y, tagged, &sc, 0);
  tcoll_tensor_free(&y);
  for (int j = 0; j < S; j++) tcoll_tensor_free(&list2[j]);
  for (int j = 0; j < S; j++) list[j] = t_empty();
  T_OK(tcoll_all_gather_list(&x, NULL, list));
  for (int j = 0; j < S; j++) {
    T_OK(tcoll_wait(list[j].data));
    ectx_t e = {j, 0, 0, 1};
    t_check_all("all_gather_list", &list[j], tagged, &e, 0);
    tcoll_tensor_free(&list[j]);
  }
  for (int j = 0; j < S; j++) list2[j] = tagged_tensor(TCOLL_FLOAT64, 1, s1, R, j);
  y = t_empty();
  T_OK(tcoll_reduce_scatter_list(list2, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_wait(y.data));
  ectx_t rl = {0, R, 0, 1};
  t_check_all("reduce_scatter_list", &y, tagged_sum, &rl, 0);
  tcoll_tensor_free(&y);
  for (int j = 0; j < S; j++) tcoll_tensor_free(&list2[j]);
  for (int j = 0; j < S; j++) {
    int64_t sj[1] = {j + 1}, sr[1] = {R + 1};
    list2[j] = tagged_tensor(TCOLL_INT32, 1, sj, R, j); /* to rank j: j + 1 elements */
    list[j] = t_empty();
    list[j].dtype = TCOLL_INT32;
    list[j].ndim = 1;
    list[j].shape[0] = sr[0]; /* from rank j: R + 1 elements */
    list[j].device = t_device();
  }
  T_OK(tcoll_all_to_all(list2, NULL, list));
  for (int j = 0; j < S; j++) {
    T_OK(tcoll_wait(list[j].data));
    ectx_t e = {j, R, 0, 1};
    t_check_all("all_to_all", &list[j], tagged, &e, 0);
    tcoll_tensor_free(&list[j]);
    tcoll_tensor_free(&list2[j]);
  }
  free(list);
  free(list2);
  tcoll_tensor_free(&x);
}
END_TEST

/* ------------------------------------------------------------------ CUDA-awareness, errors */

START_TEST(cuda_aware_detection) {
  const char *e = getenv("TCOLL_CUDA_AWARE");
  int forced = e && !strcmp(e, "1"), off = e && !strcmp(e, "0");
  int nb = tcoll_mpi_device_direct(1), bl = tcoll_mpi_device_direct(0);
  if (tcoll_device_count() == 0) {
    T_EXPECT(nb == 0 && bl == 0, "no devices but direct = %d/%d", nb, bl);
  } else if (forced) {
    T_EXPECT(nb == 1 && bl == 1, "TCOLL_CUDA_AWARE=1 but direct = %d/%d", nb, bl);
  } else if (off || strcmp(tcoll_device_backend(), "fake") == 0) {
    T_EXPECT(nb == 0 && bl == 0, "emulated devices (or TCOLL_CUDA_AWARE=0) but direct = %d/%d", nb,
             bl);
  }
  /* Open MPI 4.x: never direct for nonblocking collectives unless forced. */
  if (!forced) T_EXPECT(nb == 0, "nonblocking collectives direct on Open MPI 4.x");
}
END_TEST

START_TEST(device_errors) {
  int64_t shape[1] = {8};
  float buf[8] = {0};
  int nd = tcoll_device_count();
  tcoll_tensor_t bad = tcoll_tensor_make(buf, TCOLL_FLOAT32, 1, shape, nd + 3), out = t_empty();
  char needle[64];
  snprintf(needle, sizeof needle, "in->device is %d", nd + 3);
  T_FAILS(tcoll_all_reduce(&bad, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, needle);
  T_FAILS(tcoll_broadcast(&bad, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, needle);
  T_EXPECT(out.data == NULL, "a failed call allocated its output");
  tcoll_tensor_t neg = tcoll_tensor_make(buf, TCOLL_FLOAT32, 1, shape, -5);
  T_FAILS(tcoll_all_gather(&neg, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT, "in->device is -5");
  if (nd == 0) {
    tcoll_tensor_t d0 = tcoll_tensor_make(buf, TCOLL_FLOAT32, 1, shape, 0);
    T_FAILS(tcoll_all_reduce(&d0, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
            "no device exists");
    tcoll_tensor_t t = t_empty();
    T_FAILS(tcoll_tensor_alloc(&t, TCOLL_FLOAT32, 1, shape, 0), TCOLL_ERR_INVALID_ARGUMENT,
            "no device exists");
    T_FAILS(tcoll_set_stream(0, NULL), TCOLL_ERR_INVALID_ARGUMENT, "no device exists");
  } else {
    /* an output on another device than the input */
    tcoll_tensor_t in = t_alloc(TCOLL_FLOAT32, 1, shape), o = t_empty();
    T_OK(tcoll_tensor_alloc(&o, TCOLL_FLOAT32, 1, shape, nd > 1 ? 1 : TCOLL_HOST));
    T_FAILS(tcoll_all_reduce(&in, TCOLL_SUM, NULL, &o), TCOLL_ERR_INVALID_ARGUMENT,
            "out->device is");
    tcoll_tensor_free(&in);
    tcoll_tensor_free(&o);
    T_FAILS(tcoll_set_stream(nd, NULL), TCOLL_ERR_INVALID_ARGUMENT, "does not exist");
  }
  T_FAILS(tcoll_set_stream(TCOLL_HOST, NULL), TCOLL_ERR_INVALID_ARGUMENT, "TCOLL_HOST");
  T_EXPECT(tcoll_pending_count() == 0, "failed calls left pending work");
}
END_TEST

/* A tensor's device field is checked against where its memory is (the backend's pointer query),
 * not trusted: host code would otherwise read device memory, or MPI be handed it. */
START_TEST(device_field_checked) {
  if (!have_devices()) return;
  int64_t shape[1] = {8};
  int nd = tcoll_device_count();
  tcoll_tensor_t d = t_alloc(TCOLL_FLOAT32, 1, shape), h = t_host(TCOLL_FLOAT32, 1, shape),
                 out = t_empty();
  tcoll_tensor_t lie = d;
  lie.device = TCOLL_HOST;
  T_FAILS(tcoll_all_reduce(&lie, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "in->device is -1 but in->data");
  T_FAILS(tcoll_all_reduce(&lie, TCOLL_SUM, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "is memory of device 0 (expected host memory)");
  lie = h;
  lie.device = 0;
  T_FAILS(tcoll_broadcast(&lie, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "in->device is 0 but in->data");
  T_FAILS(tcoll_broadcast(&lie, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
          "is host memory (expected memory of device 0)");
  tcoll_tensor_t wrong_out = d; /* a host call whose output is device memory said to be host */
  wrong_out.device = TCOLL_HOST;
  T_FAILS(tcoll_all_reduce(&h, TCOLL_SUM, NULL, &wrong_out), TCOLL_ERR_INVALID_ARGUMENT,
          "out->device is -1 but out->data");
  if (nd > 1) {
    lie = d;
    lie.device = 1;
    T_FAILS(tcoll_all_gather(&lie, 0, NULL, &out), TCOLL_ERR_INVALID_ARGUMENT,
            "is memory of device 0 (expected memory of device 1)");
  }
  tcoll_tensor_t view = d; /* a view into device memory is that device's memory */
  view.data = (float *)d.data + 2;
  view.shape[0] = 4;
  T_OK(tcoll_all_reduce(&view, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait(out.data));
  T_EXPECT(out.data == NULL || out.device == 0, "the output of a device view is on %d", out.device);
  T_EXPECT(tcoll_pending_count() == 0, "refused calls left pending work");
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&d);
  tcoll_tensor_free(&h);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("device");
  TCase *tc = t_tcase("pipeline");
  tcase_add_test(tc, pipe_all_reduce);
  tcase_add_test(tc, pipe_broadcast);
  tcase_add_test(tc, pipe_all_gather);
  tcase_add_test(tc, pipe_reduce_scatter);
  tcase_add_test(tc, pipe_wait_orders);
  tcase_add_test(tc, pipe_mixed_orders);
  tcase_add_test(tc, pipe_subcomm);
  tcase_add_test(tc, pipe_repeat);
  tcase_add_test(tc, pipe_max_count);
  suite_add_tcase(s, tc);
  TCase *st = t_tcase("streams");
  tcase_add_test(st, stream_order);
  tcase_add_test(st, stream_chain);
  tcase_add_test(st, other_ops);
  suite_add_tcase(s, st);
  TCase *er = t_tcase("errors");
  tcase_add_test(er, cuda_aware_detection);
  tcase_add_test(er, device_errors);
  tcase_add_test(er, device_field_checked);
  suite_add_tcase(s, er);
  return s;
}
