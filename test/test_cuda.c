/* Real-GPU checks (run with T_NEEDS_GPU=1: exits 77, skipped, without a CUDA device): the CUDA
 * backend under the staging pipeline, stream order with real CUDA streams and events, the CUDA
 * add kernel of the local ops (float16 / bfloat16 included), the multi-buffer ops on CUDA
 * streams, and MPI's CUDA-awareness as detected. Only the public API is used, so this builds
 * without the CUDA toolkit too. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

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
    T_EXPECT(tcoll_mpi_device_direct(1) == 0, "nonblocking collectives take device buffers on Open MPI 4.x");
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
    tcoll_tensor_t x = on(0, TCOLL_FLOAT32, n), y = t_empty(), g = t_empty(), r = t_empty(), b = t_empty();
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

/* Local reduce_add with the CUDA add kernel, float16 and bfloat16 included. */
START_TEST(local_kernels) {
  int nd = tcoll_device_count();
  tcoll_dtype_t dts[4] = {TCOLL_FLOAT32, TCOLL_FLOAT16, TCOLL_BFLOAT16, TCOLL_INT64};
  for (int k = 0; k < 4; k++) {
    int groups = nd > 1 ? 3 : 2;
    int where[3] = {0, nd > 1 ? 1 : TCOLL_HOST, TCOLL_HOST};
    tcoll_tensor_t in[3];
    for (int g = 0; g < groups; g++) {
      in[g] = on(where[g], dts[k], 1000);
      t_set_all(&in[g], mine, &g);
    }
    tcoll_tensor_t out = t_empty();
    T_OK(tcoll_local_reduce_add_coalesced(in, groups, 1, 0, &out));
    double tri = (double)groups * (groups + 1) / 2;
    t_check_all("cuda reduce_add", &out, times, &tri, 0);
    tcoll_tensor_free(&out);
    for (int g = 0; g < groups; g++) tcoll_tensor_free(&in[g]);
  }
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
  tcase_add_test(tc, multi_on_streams);
  suite_add_tcase(s, tc);
  return s;
}
