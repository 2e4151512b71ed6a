/* Real-GPU checks (run with T_NEEDS_GPU=1: exits 77, skipped, without a CUDA device; fails when
 * a GPU is visible but tcoll does not use it): the CUDA backend under the staging pipeline
 * (float16 / bfloat16 with PREMUL_SUM and AVG, gathers and scatters along dim 1, a lowered
 * TCOLL_MAX_COUNT), stream order with real CUDA streams and events (a busy stream: a spin kernel
 * then a kernel writing the input, queued right before the call), the CUDA add kernel of the
 * local ops in every dtype (NaN and infinities included, and more than 2^31 elements), the
 * multi-buffer ops on CUDA streams, and MPI's CUDA-awareness as detected. Apart from the test's
 * own kernels (cuda_kernels.cu, when built with CUDA) only the public API is used.
 *
 * The -mock variant runs it on the mock CUDA runtime: there the test's own kernels cannot run
 * (its runtime sees no GPU) and the 2^31-element case is left out (it needs 6 GiB of device
 * memory); everything else runs. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if T_HAVE_CUDA
#include "cuda_kernels.h"
#endif

static bool on_mock(void) { return getenv("MOCK_CUDA_DEVICES") != NULL; }

static size_t saved_chunk;

static void set_chunk(size_t bytes) {
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  saved_chunk = c.staging_chunk;
  c.staging_chunk = bytes;
  T_OK(tcoll_set_config(&c));
}

static void restore_chunk(void) {
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  c.staging_chunk = saved_chunk;
  T_OK(tcoll_set_config(&c));
}

static double val(int r, int64_t i) { return (double)(r + 1) * (double)(i % 7 + 1); }
static double mine(int64_t i, void *c) { return val(*(int *)c, i); }
static double summed(int64_t i, void *c) {
  (void)c;
  return (double)t_size * (t_size + 1) / 2 * (double)(i % 7 + 1);
}
static double times(int64_t i, void *c) { return *(double *)c * (double)(i % 7 + 1); }

static tcoll_tensor_t on(int dev, tcoll_dtype_t dt, int64_t n) {
  int64_t shape[1] = {n};
  tcoll_tensor_t t = t_empty();
  T_OK(tcoll_tensor_alloc(&t, dt, 1, shape, dev));
  return t;
}

START_TEST(backend) {
  T_EXPECT(strcmp(tcoll_device_backend(), "cuda") == 0, "backend is %s", tcoll_device_backend());
  T_EXPECT(tcoll_device_count() >= 1, "no CUDA device");
  const char *e = getenv("TCOLL_CUDA_AWARE");
  if (!e || strcmp(e, "1") != 0)
    T_EXPECT(tcoll_mpi_device_direct(1) == 0,
             "nonblocking collectives take device buffers on Open MPI 4.x");
}
END_TEST

/* Every pipelined op on device 0, many chunks, on the default and on a user stream. */
START_TEST(pipeline) {
  set_chunk(64 << 10);
  for (int use_stream = 0; use_stream < 2; use_stream++) {
    void *s = NULL;
    if (use_stream) {
      T_OK(tcoll_stream_create(0, &s));
      T_OK(tcoll_set_stream(0, s));
    }
    int64_t n = (1 << 20) + 3; /* 4 MiB of floats: 65 chunks */
    tcoll_tensor_t x = on(0, TCOLL_FLOAT32, n), y = t_empty(), g = t_empty(), r = t_empty(),
                   b = t_empty();
    t_set_all(&x, mine, &t_rank);
    T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
    T_OK(tcoll_broadcast(&x, 0, NULL, &b));
    T_OK(tcoll_all_gather(&x, 0, NULL, &g));
    T_OK(tcoll_wait(y.data));
    T_OK(tcoll_wait(b.data));
    T_OK(tcoll_wait(g.data));
    t_check_all("cuda all_reduce", &y, summed, NULL, 0);
    int root = 0;
    t_check_all("cuda broadcast", &b, mine, &root, 0);
    float *gv = malloc((size_t)(n * t_size) * sizeof *gv);
    tcoll_tensor_t gh = on(TCOLL_HOST, TCOLL_FLOAT32, n * t_size);
    T_OK(tcoll_tensor_copy(&gh, &g));
    memcpy(gv, gh.data, (size_t)(n * t_size) * sizeof *gv);
    int gbad = 0;
    for (int64_t i = 0; i < n * t_size; i++) gbad += gv[i] != (float)val((int)(i / n), i % n);
    T_EXPECT(gbad == 0, "cuda all_gather: %d wrong", gbad);
    free(gv);
    tcoll_tensor_free(&gh);
    tcoll_tensor_free(&g);
    int64_t m = (n / t_size) * t_size;
    tcoll_tensor_t big = on(0, TCOLL_FLOAT64, m);
    t_set_all(&big, mine, &t_rank);
    T_OK(tcoll_reduce_scatter(&big, TCOLL_AVG, 0, NULL, &r));
    T_OK(tcoll_wait(r.data));
    double *v = malloc((size_t)(m / t_size) * sizeof *v);
    t_read(&r, v);
    int bad = 0;
    for (int64_t i = 0; i < m / t_size; i++)
      bad += v[i] != (double)(t_size + 1) / 2 * (double)((t_rank * (m / t_size) + i) % 7 + 1);
    T_EXPECT(bad == 0, "cuda reduce_scatter AVG: %d wrong", bad);
    free(v);
    tcoll_tensor_free(&big);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&b);
    tcoll_tensor_free(&r);
    if (use_stream) {
      T_OK(tcoll_set_stream(0, NULL));
      T_OK(tcoll_stream_destroy(0, s));
    }
  }
  restore_chunk();
}
END_TEST

/* Input produced on a CUDA stream right before the call, result read on it right after. */
START_TEST(stream_order) {
  set_chunk(256 << 10);
  void *s = NULL;
  T_OK(tcoll_stream_create(0, &s));
  T_OK(tcoll_set_stream(0, s));
  int64_t n = 4 << 20;
  tcoll_tensor_t h = on(TCOLL_HOST, TCOLL_FLOAT32, n), d = on(0, TCOLL_FLOAT32, n), out = t_empty();
  tcoll_tensor_t back = on(TCOLL_HOST, TCOLL_FLOAT32, n), junk = on(0, TCOLL_FLOAT32, n);
  t_set_all(&h, mine, &t_rank);
  for (int k = 0; k < 20; k++) T_OK(tcoll_tensor_copy_async(&junk, &h, s)); /* keeps s busy */
  T_OK(tcoll_tensor_copy_async(&d, &h, s));
  T_OK(tcoll_all_reduce(&d, TCOLL_SUM, NULL, &out));
  T_OK(tcoll_wait(out.data));
  T_OK(tcoll_tensor_copy_async(&back, &out, s));
  T_OK(tcoll_stream_synchronize(0, s));
  t_check_all("cuda stream order", &back, summed, NULL, 0);
  T_OK(tcoll_set_stream(0, NULL));
  T_OK(tcoll_stream_destroy(0, s));
  tcoll_tensor_free(&h);
  tcoll_tensor_free(&d);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&back);
  tcoll_tensor_free(&junk);
  restore_chunk();
}
END_TEST

/* Local reduce_add with the CUDA add kernel in every dtype: sum over groups g of
 * (g + 1) * (i % 7 + 1) is exact in each (at most 42); bool adds as a logical or. */
static double one(int64_t i, void *c) {
  (void)i;
  (void)c;
  return 1.0;
}

START_TEST(local_kernels) {
  int nd = tcoll_device_count();
  for (int dt = 0; dt < 10; dt++) {
    int groups = nd > 1 ? 3 : 2;
    int where[3] = {0, nd > 1 ? 1 : TCOLL_HOST, TCOLL_HOST};
    tcoll_tensor_t in[3];
    for (int g = 0; g < groups; g++) {
      in[g] = on(where[g], (tcoll_dtype_t)dt, 1000);
      t_set_all(&in[g], mine, &g);
    }
    tcoll_tensor_t out = t_empty();
    T_OK(tcoll_local_reduce_add_coalesced(in, groups, 1, 0, &out));
    double tri = (double)groups * (groups + 1) / 2;
    char what[64];
    snprintf(what, sizeof what, "cuda reduce_add %s", tcoll_dtype_name((tcoll_dtype_t)dt));
    if (dt == TCOLL_BOOL)
      t_check_all(what, &out, one, NULL, 0);
    else
      t_check_all(what, &out, times, &tri, 0);
    tcoll_tensor_free(&out);
    for (int g = 0; g < groups; g++) tcoll_tensor_free(&in[g]);
  }
}
END_TEST

/* The kernel's float16 / bfloat16 rounding keeps NaN a NaN and infinities infinite. */
static double specials(int64_t i, void *c) {
  (void)c;
  return i == 0 ? NAN : i == 1 ? INFINITY : i == 2 ? -INFINITY : 1.0;
}
static double two_up(int64_t i, void *c) {
  (void)c;
  return (double)i + 2.0;
}

START_TEST(kernel_nan_inf) {
  tcoll_dtype_t dts[2] = {TCOLL_BFLOAT16, TCOLL_FLOAT16};
  for (int k = 0; k < 2; k++) {
    tcoll_tensor_t in[2] = {on(0, dts[k], 4), on(TCOLL_HOST, dts[k], 4)}, out = t_empty();
    t_set_all(&in[0], specials, NULL);
    t_set_all(&in[1], two_up, NULL);
    T_OK(tcoll_local_reduce_add_coalesced(in, 2, 1, 0, &out));
    double v[4];
    t_read(&out, v);
    T_EXPECT(isnan(v[0]) && isinf(v[1]) && v[1] > 0 && isinf(v[2]) && v[2] < 0 && v[3] == 6.0,
             "%s add kernel: NaN + 2, inf + 3, -inf + 4, 1 + 5 gave %g %g %g %g",
             tcoll_dtype_name(dts[k]), v[0], v[1], v[2], v[3]);
    tcoll_tensor_free(&out);
    tcoll_tensor_free(&in[0]);
    tcoll_tensor_free(&in[1]);
  }
}
END_TEST

/* More than 2^31 elements through the add kernel (64-bit indices), on rank 0 only (6 GiB of
 * device memory for the inputs, the output and the copy of the host group). uint8 elements:
 * (i % 100) + (i % 7) never wraps; checked against a pattern of period 700. */
START_TEST(kernel_beyond_2g) {
  if (t_rank != 0 || on_mock()) return;
  int64_t n = (INT64_C(1) << 31) + 1000;
  enum { PERIOD = 700, BLOCK = PERIOD * 1000 };
  unsigned char *pa = malloc(BLOCK), *pb = malloc(BLOCK), *ps = malloc(BLOCK);
  for (int i = 0; i < BLOCK; i++) {
    pa[i] = (unsigned char)(i % 100);
    pb[i] = (unsigned char)(i % 7);
    ps[i] = (unsigned char)(i % 100 + i % 7);
  }
  tcoll_tensor_t a = on(TCOLL_HOST, TCOLL_UINT8, n), b = on(TCOLL_HOST, TCOLL_UINT8, n);
  for (int64_t at = 0; at < n; at += BLOCK) {
    size_t len = (size_t)(n - at < BLOCK ? n - at : BLOCK);
    memcpy((char *)a.data + at, pa, len);
    memcpy((char *)b.data + at, pb, len);
  }
  tcoll_tensor_t da = on(0, TCOLL_UINT8, n), out = t_empty();
  T_OK(tcoll_tensor_copy(&da, &a));
  tcoll_tensor_t in[2] = {da, b};
  T_OK(tcoll_local_reduce_add_coalesced(in, 2, 1, 0, &out));
  T_OK(tcoll_tensor_copy(&a, &out)); /* the result, back on the host */
  int64_t bad_blocks = 0;
  for (int64_t at = 0; at < n; at += BLOCK) {
    size_t len = (size_t)(n - at < BLOCK ? n - at : BLOCK);
    bad_blocks += memcmp((char *)a.data + at, ps, len) != 0;
  }
  T_EXPECT(bad_blocks == 0, "add kernel over %lld uint8 elements: %lld blocks of %d wrong",
           (long long)n, (long long)bad_blocks, BLOCK);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&da);
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&b);
  free(pa);
  free(pb);
  free(ps);
}
END_TEST

/* The staging pipeline on float16 / bfloat16 with PREMUL_SUM and AVG (scaled and divided per
 * chunk on the host), and along dim 1; then with TCOLL_MAX_COUNT lowered below the chunk (each
 * chunk's MPI call is capped). Values (r + 1) * (i % 7 + 1) keep every result exact. */
static double scaled_sum(int64_t i, void *c) {
  return *(double *)c * (double)t_size * (t_size + 1) / 2 * (double)(i % 7 + 1);
}

static void half_precision_round(void) {
  int64_t n = 40000; /* 80000 bytes: 20 chunks of 4 KiB */
  tcoll_redop_t half;
  T_OK(tcoll_redop_create_premul_sum(0.5, &half));
  tcoll_dtype_t dts[2] = {TCOLL_FLOAT16, TCOLL_BFLOAT16};
  for (int k = 0; k < 2; k++) {
    tcoll_tensor_t x = on(0, dts[k], n), p = t_empty(), a = t_empty();
    t_set_all(&x, mine, &t_rank);
    T_OK(tcoll_all_reduce(&x, half, NULL, &p));
    T_OK(tcoll_all_reduce(&x, TCOLL_AVG, NULL, &a));
    T_OK(tcoll_wait(p.data));
    T_OK(tcoll_wait(a.data));
    double s_half = 0.5, s_avg = 1.0 / t_size;
    char what[64];
    snprintf(what, sizeof what, "pipelined premul_sum(0.5) %s", tcoll_dtype_name(dts[k]));
    t_check_all(what, &p, scaled_sum, &s_half, 0);
    snprintf(what, sizeof what, "pipelined AVG %s", tcoll_dtype_name(dts[k]));
    t_check_all(what, &a, scaled_sum, &s_avg, 0);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&p);
    tcoll_tensor_free(&a);
  }
  T_OK(tcoll_redop_destroy(half));
  /* all_gather and reduce_scatter along dim 1 of [4, 3000 * size]: runs of 3000 elements */
  int64_t cols = 3000, shape[2] = {4, cols}, big[2] = {4, cols * t_size};
  tcoll_tensor_t x = t_empty(), g = t_empty(), y = t_empty(), r = t_empty();
  T_OK(tcoll_tensor_alloc(&x, TCOLL_FLOAT32, 2, shape, 0));
  T_OK(tcoll_tensor_alloc(&y, TCOLL_FLOAT32, 2, big, 0));
  t_set_all(&x, mine, &t_rank);
  t_set_all(&y, mine, &t_rank);
  T_OK(tcoll_all_gather(&x, 1, NULL, &g));
  T_OK(tcoll_reduce_scatter(&y, TCOLL_SUM, 1, NULL, &r));
  T_OK(tcoll_wait(g.data));
  T_OK(tcoll_wait(r.data));
  double *gv = malloc((size_t)(4 * cols * t_size) * sizeof *gv),
         *rv = malloc((size_t)(4 * cols) * sizeof *rv);
  t_read(&g, gv);
  t_read(&r, rv);
  int gbad = 0, rbad = 0;
  for (int64_t row = 0; row < 4; row++)
    for (int64_t c = 0; c < cols * t_size; c++) /* block c / cols is rank c / cols's row */
      gbad += gv[row * cols * t_size + c] != val((int)(c / cols), row * cols + c % cols);
  for (int64_t row = 0; row < 4; row++)
    for (int64_t c = 0; c < cols; c++) /* this rank's columns of the sum */
      rbad += rv[row * cols + c] != summed(row * cols * t_size + t_rank * cols + c, NULL);
  T_EXPECT(gbad == 0, "pipelined all_gather along dim 1: %d wrong", gbad);
  T_EXPECT(rbad == 0, "pipelined reduce_scatter along dim 1: %d wrong", rbad);
  free(gv);
  free(rv);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&g);
  tcoll_tensor_free(&r);
}

START_TEST(pipeline_half_and_dim1) {
  set_chunk(4096);
  half_precision_round();
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  int64_t saved = c.max_count;
  c.max_count = 700; /* below a chunk of any dtype here */
  T_OK(tcoll_set_config(&c));
  half_precision_round();
  c.max_count = saved;
  T_OK(tcoll_set_config(&c));
  restore_chunk();
}
END_TEST

/* A busy stream: a spin kernel, then a kernel writing the input, queued on the caller's stream
 * right before the call; the collective must read the input after them (whole buffer,
 * pipelined, coalesced). Zeros would show an early read. */
START_TEST(busy_stream) {
#if T_HAVE_CUDA
  if (!t_cuda_usable()) {
    T_EXPECT(on_mock(), "this process's own CUDA runtime sees no GPU, but tcoll's does");
    return;
  }
  set_chunk(64 << 10);
  void *s = NULL;
  T_OK(tcoll_stream_create(0, &s));
  T_OK(tcoll_set_stream(0, s));
  int64_t sizes[2] = {1000, 300000}; /* whole buffer; 1.2 MB pipelined in 64 KiB chunks */
  for (int k = 0; k < 2; k++) {
    tcoll_tensor_t x = on(0, TCOLL_FLOAT32, sizes[k]), y = t_empty(), c[1] = {t_empty()};
    int e = t_cuda_spin_then_fill(s, x.data, sizes[k], (float)(t_rank + 1), 100);
    T_EXPECT(e == 0, "spin / fill kernel launch failed: error %d", e);
    T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
    T_OK(tcoll_wait(y.data));
    t_check_all("all_reduce of an input written by a kernel on a busy stream", &y, summed, NULL, 0);
    e = t_cuda_spin_then_fill(s, x.data, sizes[k], (float)(t_rank + 1), 100);
    T_EXPECT(e == 0, "spin / fill kernel launch failed: error %d", e);
    T_OK(tcoll_all_reduce_coalesced(&x, 1, TCOLL_SUM, NULL, c));
    T_OK(tcoll_wait(c[0].data));
    t_check_all("all_reduce_coalesced of an input written by a kernel on a busy stream", &c[0],
                summed, NULL, 0);
    tcoll_tensor_free(&x);
    tcoll_tensor_free(&y);
    tcoll_tensor_free(&c[0]);
  }
  T_OK(tcoll_set_stream(0, NULL));
  T_OK(tcoll_stream_destroy(0, s));
  restore_chunk();
#endif
}
END_TEST

START_TEST(multi_on_streams) {
  int nd = tcoll_device_count();
  int n = nd > 1 ? 2 : 1;
  void *s[2] = {NULL, NULL};
  tcoll_tensor_t in[2], out[2] = {t_empty(), t_empty()};
  for (int i = 0; i < n; i++) {
    T_OK(tcoll_stream_create(i, &s[i]));
    in[i] = on(i, TCOLL_FLOAT32, 5000);
    int g = t_rank * n + i;
    t_set_all(&in[i], mine, &g);
  }
  tcoll_comm_t *w = tcoll_comm_world(), *cl[2] = {w, w};
  T_OK(tcoll_multi_all_reduce(in, out, n, TCOLL_SUM, s, cl));
  for (int i = 0; i < n; i++) T_OK(tcoll_stream_synchronize(i, s[i]));
  double T = (double)n * t_size, tri = T * (T + 1) / 2;
  for (int i = 0; i < n; i++) t_check_all("cuda multi_all_reduce", &out[i], times, &tri, 0);
  for (int i = 0; i < n; i++) {
    tcoll_tensor_free(&in[i]);
    tcoll_tensor_free(&out[i]);
    T_OK(tcoll_stream_destroy(i, s[i]));
  }
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("cuda");
  TCase *tc = t_tcase("cuda");
  tcase_add_test(tc, backend);
  tcase_add_test(tc, pipeline);
  tcase_add_test(tc, stream_order);
  tcase_add_test(tc, local_kernels);
  tcase_add_test(tc, kernel_nan_inf);
  tcase_add_test(tc, kernel_beyond_2g);
  tcase_add_test(tc, pipeline_half_and_dim1);
  tcase_add_test(tc, busy_stream);
  tcase_add_test(tc, multi_on_streams);
  suite_add_tcase(s, tc);
  return s;
}
