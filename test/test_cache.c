/* The storage cache: blocks come back (reuse), the limit holds (what is beyond it really goes
 * back to the system), tcoll_cache_release gives everything back, the zero-fill contract holds
 * with blocks that held garbage (tcoll_tensor_alloc zeros; an output tcoll allocates is written in
 * full; reduce off dst, gather off dst and the gradients of ranks that get none are zeros), many
 * threads allocate and free at once, and a device block is not handed out again while work queued
 * on it is still running. On host tensors, and on emulated devices in the -dev runs (T_DEVICE). */
#include "harness.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define F32 TCOLL_FLOAT32
#define POISON (-12345.0) /* a value no correct result here has */

static tcoll_cache_info_t info(void) {
  tcoll_cache_info_t i;
  memset(&i, 0, sizeof i);
  T_OK(tcoll_cache_info(&i));
  return i;
}

static double zero(int64_t i, void *ctx) {
  (void)i;
  (void)ctx;
  return 0.0;
}
static double poison(int64_t i, void *ctx) {
  (void)i;
  (void)ctx;
  return POISON;
}
static double ramp(int64_t i, void *ctx) { return (double)(i % 97) + *(const double *)ctx; }

/* rank r holds (r + 1) * (i % 7 + 1) */
static double rank_value(int64_t i, void *ctx) {
  return (*(const int *)ctx + 1) * (double)(i % 7 + 1);
}
static double sum_value(int64_t i, void *ctx) {
  (void)ctx;
  return t_size * (t_size + 1) / 2.0 * (double)(i % 7 + 1);
}

/* Frees k blocks of n floats on device dev that hold POISON into the cache (most recently freed
 * last): the next allocations of that size get them. Their addresses go to addrs. */
static void poison_blocks(int64_t n, int dev, int k, void **addrs) {
  tcoll_tensor_t t[16];
  for (int i = 0; i < k; i++) {
    t[i] = t_empty();
    T_OK(tcoll_tensor_alloc(&t[i], F32, 1, &n, dev));
    t_set_all(&t[i], poison, NULL);
    addrs[i] = t[i].data;
  }
  for (int i = k; i-- > 0;) tcoll_tensor_free(&t[i]);
}

static bool among(const void *p, void *const *addrs, int k) {
  for (int i = 0; i < k; i++)
    if (addrs[i] == p) return true;
  return false;
}

START_TEST(reuse) {
  tcoll_cache_release();
  int64_t n = 1000;
  tcoll_tensor_t a = t_alloc(F32, 1, &n);
  void *p = a.data;
  tcoll_tensor_free(&a);
  tcoll_cache_info_t i0 = info();
  T_EXPECT(i0.cached >= 4000, "a freed 4000-byte tensor is not cached (%zu bytes cached)",
           i0.cached);
  T_EXPECT(t_device() == TCOLL_HOST ? i0.cached_host >= 4000 : i0.cached_device >= 4000,
           "the block is not counted for its place (host %zu, device %zu)", i0.cached_host,
           i0.cached_device);
  tcoll_tensor_t b = t_alloc(F32, 1, &n);
  T_EXPECT(b.data == p, "the same size got %p, not the cached block %p", b.data, p);
  tcoll_cache_info_t i1 = info();
  T_EXPECT(i1.reused == i0.reused + 1 && i1.allocated == i0.allocated,
           "reused %llu -> %llu, allocated %llu -> %llu", (unsigned long long)i0.reused,
           (unsigned long long)i1.reused, (unsigned long long)i0.allocated,
           (unsigned long long)i1.allocated);
  tcoll_tensor_free(&b);
  /* Another size of the same class (4040 bytes: the class of 4096) gets it too. */
  int64_t m = 1010;
  tcoll_tensor_t c = t_alloc(F32, 1, &m);
  T_EXPECT(c.data == p, "a size of the same class got %p, not %p", c.data, p);
  T_EXPECT(t_check_all("reused block, tcoll_tensor_alloc", &c, zero, NULL, 0) == 0,
           "not zero-filled");
  /* A much larger one does not fit in it. */
  int64_t big = 100000;
  tcoll_tensor_t d = t_alloc(F32, 1, &big);
  T_EXPECT(d.data != p, "a 400 KB tensor got the 4 KB block");
  tcoll_tensor_free(&c);
  tcoll_tensor_free(&d);
  T_EXPECT(info().in_use == i0.in_use, "in_use %zu after freeing everything, %zu before",
           info().in_use, i0.in_use);
}
END_TEST

START_TEST(limit_respected) {
  tcoll_config_t cfg, saved;
  T_OK(tcoll_get_config(&saved));
  T_EXPECT(saved.cache_bytes == (size_t)1 << 30 || getenv("TCOLL_CACHE_BYTES"),
           "the default limit is %zu bytes (expected 1 GiB)", saved.cache_bytes);
  cfg = saved;
  cfg.cache_bytes = (size_t)1 << 20;
  T_OK(tcoll_set_config(&cfg));
  tcoll_cache_release();
  size_t h0 = t_heap_raw();
  tcoll_cache_info_t i0 = info();
  int64_t n = (int64_t)1 << 17; /* 512 KiB: a class of its own size */
  tcoll_tensor_t t[6];
  for (int k = 0; k < 6; k++) t[k] = t_alloc(F32, 1, &n);
  for (int k = 0; k < 6; k++) tcoll_tensor_free(&t[k]);
  tcoll_cache_info_t i1 = info();
  T_EXPECT(i1.cached <= cfg.cache_bytes, "the cache holds %zu bytes, over its limit %zu", i1.cached,
           cfg.cache_bytes);
  T_EXPECT(i1.cached == cfg.cache_bytes,
           "the cache holds %zu bytes, expected the limit %zu (two blocks)", i1.cached,
           cfg.cache_bytes);
  T_EXPECT(i1.freed >= i0.freed + 4, "%llu blocks given back beyond the limit, expected at least 4",
           (unsigned long long)(i1.freed - i0.freed));
  T_EXPECT(i1.limit == cfg.cache_bytes, "info.limit is %zu, expected %zu", i1.limit,
           cfg.cache_bytes);
  /* What went beyond the limit is back with the system (emulated device memory is host memory). */
  if (t_heap_measurable())
    T_EXPECT(t_heap_raw() <= h0 + cfg.cache_bytes + ((size_t)64 << 10),
             "the heap grew by %zu bytes with a limit of %zu", t_heap_raw() - h0, cfg.cache_bytes);
  /* A lower limit applies at once; a block larger than the limit is not kept at all. */
  cfg.cache_bytes = (size_t)256 << 10;
  T_OK(tcoll_set_config(&cfg));
  T_EXPECT(info().cached == 0, "%zu bytes cached after lowering the limit below every block",
           info().cached);
  tcoll_tensor_t e = t_alloc(F32, 1, &n);
  tcoll_tensor_free(&e);
  T_EXPECT(info().cached == 0, "a 512 KiB block was kept with a limit of 256 KiB");
  /* Limit 0: nothing is cached. */
  cfg.cache_bytes = 0;
  T_OK(tcoll_set_config(&cfg));
  int64_t small = 16;
  e = t_alloc(F32, 1, &small);
  tcoll_tensor_free(&e);
  T_EXPECT(info().cached == 0, "%zu bytes cached with a limit of 0", info().cached);
  T_OK(tcoll_set_config(&saved));
}
END_TEST

START_TEST(explicit_release) {
  tcoll_cache_release();
  size_t h0 = t_heap_raw();
  int64_t n = (int64_t)1 << 18;
  tcoll_tensor_t a = t_alloc(F32, 1, &n), b = t_alloc(F32, 1, &n);
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&b);
  tcoll_cache_info_t i0 = info();
  T_EXPECT(i0.cached >= 2 * (size_t)n * 4, "%zu bytes cached after freeing two 1 MiB tensors",
           i0.cached);
  T_OK(tcoll_cache_release());
  tcoll_cache_info_t i1 = info();
  T_EXPECT(i1.cached == 0 && i1.cached_host == 0 && i1.cached_pinned == 0 && i1.cached_device == 0,
           "after tcoll_cache_release: %zu cached (host %zu, pinned %zu, device %zu)", i1.cached,
           i1.cached_host, i1.cached_pinned, i1.cached_device);
  T_EXPECT(i1.freed >= i0.freed + 2,
           "tcoll_cache_release gave back %llu blocks, expected at least 2",
           (unsigned long long)(i1.freed - i0.freed));
  if (t_heap_measurable())
    T_EXPECT(t_heap_raw() <= h0 + ((size_t)64 << 10),
             "the heap is %zu bytes above where it was before", t_heap_raw() - h0);
  /* The next allocation grows the cache again. */
  tcoll_tensor_t c = t_alloc(F32, 1, &n);
  T_EXPECT(info().allocated == i1.allocated + 1,
           "an allocation after the release was not a new block");
  tcoll_tensor_free(&c);
  T_FAILS(tcoll_cache_info(NULL), TCOLL_ERR_INVALID_ARGUMENT, "info is NULL");
}
END_TEST

/* tcoll_tensor_alloc zero-fills even a block that held garbage. */
START_TEST(alloc_zeros) {
  tcoll_cache_release();
  int64_t n = 3000;
  void *addr;
  poison_blocks(n, t_device(), 1, &addr);
  tcoll_tensor_t t = t_alloc(F32, 1, &n);
  T_EXPECT(t.data == addr,
           "tcoll_tensor_alloc did not get the poisoned block (the test proves nothing)");
  T_EXPECT(t_check_all("tcoll_tensor_alloc over a poisoned block", &t, zero, NULL, 0) == 0,
           "not all zeros");
  tcoll_tensor_free(&t);
}
END_TEST

/* An all_reduce output tcoll allocates is written in full over garbage. */
START_TEST(all_reduce_output_written) {
  int64_t n = 5000;
  tcoll_tensor_t x = t_alloc(F32, 1, &n), y = t_empty();
  t_set_all(&x, rank_value, &t_rank);
  tcoll_cache_release();
  void *addr;
  poison_blocks(n, t_device(), 1, &addr);
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_wait(y.data));
  T_EXPECT(y.data == addr, "the output did not get the poisoned block (the test proves nothing)");
  T_EXPECT(t_check_all("all_reduce output over a poisoned block", &y, sum_value, NULL, 0) == 0,
           "wrong output");
  tcoll_tensor_free(&y);
  /* The same with a reused output of another collective: all_gather along dim 1. */
  int64_t shape[2] = {40, 25}, gshape[2] = {40, 25 * t_size};
  tcoll_tensor_t g = t_alloc(F32, 2, shape), out = t_empty();
  double base = t_rank * 1000.0;
  t_set_all(&g, ramp, &base);
  void *gaddr;
  poison_blocks(gshape[0] * gshape[1], t_device(), 1, &gaddr);
  T_OK(tcoll_all_gather(&g, 1, NULL, &out));
  T_OK(tcoll_wait(out.data));
  T_EXPECT(out.data == gaddr, "the all_gather output did not get the poisoned block");
  double *vals = malloc((size_t)(gshape[0] * gshape[1]) * sizeof *vals);
  t_read(&out, vals);
  int bad = 0;
  for (int64_t r = 0; r < gshape[0]; r++)
    for (int64_t c = 0; c < gshape[1]; c++) {
      int64_t src = c / 25, i = r * 25 + c % 25;
      bad += vals[r * gshape[1] + c] != (double)(i % 97) + src * 1000.0;
    }
  T_EXPECT(bad == 0, "%d elements of the all_gather output are wrong", bad);
  free(vals);
  tcoll_tensor_free(&out);
  tcoll_tensor_free(&g);
  tcoll_tensor_free(&x);
}
END_TEST

/* reduce's output off dst is never written: allocated by tcoll, it holds zeros. */
START_TEST(reduce_off_root_zeros) {
  int64_t n = 2000;
  tcoll_tensor_t x = t_alloc(F32, 1, &n), y = t_empty();
  t_set_all(&x, rank_value, &t_rank);
  tcoll_cache_release();
  void *addr;
  poison_blocks(n, t_device(), 1, &addr);
  int dst = t_size - 1;
  T_OK(tcoll_reduce(&x, dst, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_wait(y.data));
  T_EXPECT(y.data == addr, "the output did not get the poisoned block (the test proves nothing)");
  if (t_rank == dst)
    T_EXPECT(t_check_all("reduce on dst", &y, sum_value, NULL, 0) == 0, "wrong sums on dst");
  else
    T_EXPECT(t_check_all("reduce off dst", &y, zero, NULL, 0) == 0, "not zeros off dst");
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&x);
}
END_TEST

/* The gradient module's outputs that get no gradient, or no value, on a rank are zeros. */
START_TEST(grad_zero_outputs) {
  int64_t n = 1500;
  int root = 0;
  tcoll_tensor_t x = t_alloc(F32, 1, &n);
  t_set_all(&x, rank_value, &t_rank);
  void *addrs[16];
  int k = t_size < 16 ? t_size : 16;
  /* gather: ys off dst are zeros */
  tcoll_cache_release();
  poison_blocks(n, t_device(), k, addrs);
  tcoll_tensor_t ys[16];
  for (int i = 0; i < t_size; i++) ys[i] = t_empty();
  tcoll_grad_node_t *node = NULL;
  T_OK(tcoll_grad_gather(&x, root, NULL, ys, &node));
  for (int i = 0; i < t_size; i++) {
    T_OK(tcoll_wait(ys[i].data));
    T_EXPECT(among(ys[i].data, addrs, k),
             "ys[%d] did not get a poisoned block (the test proves nothing)", i);
    if (t_rank == root)
      T_EXPECT(t_check_all("gather on dst", &ys[i], rank_value, &i, 0) == 0, "wrong ys[%d]", i);
    else
      T_EXPECT(t_check_all("gather off dst", &ys[i], zero, NULL, 0) == 0,
               "ys[%d] not zeros off dst", i);
  }
  /* scatter backward (a gather to src): off src the grad inputs are zeros */
  tcoll_grad_node_t *sn = NULL;
  tcoll_tensor_t piece = tcoll_tensor_make(NULL, F32, 1, &n, t_device()), *sy = &piece;
  T_OK(tcoll_grad_scatter(t_rank == root ? ys : NULL, root, NULL, &piece, &sn));
  T_OK(tcoll_wait(piece.data));
  for (int i = 0; i < t_size; i++) tcoll_tensor_free(&ys[i]);
  tcoll_cache_release();
  poison_blocks(n, t_device(), k, addrs);
  tcoll_tensor_t gxs[16];
  for (int i = 0; i < t_size; i++) gxs[i] = t_empty();
  T_OK(tcoll_grad_backward(sn, sy, 1, gxs, t_size));
  for (int i = 0; i < t_size; i++) {
    T_OK(tcoll_wait(gxs[i].data));
    T_EXPECT(among(gxs[i].data, addrs, k), "grad_inputs[%d] did not get a poisoned block", i);
    if (t_rank != root)
      T_EXPECT(t_check_all("scatter backward off src", &gxs[i], zero, NULL, 0) == 0, "not zeros");
    tcoll_tensor_free(&gxs[i]);
  }
  tcoll_tensor_free(&piece);
  tcoll_grad_node_free(sn);
  tcoll_grad_node_free(node);
  /* broadcast backward: off src the grad input is zeros */
  tcoll_tensor_t y = t_empty(), gx = t_empty();
  T_OK(tcoll_grad_broadcast(&x, root, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  tcoll_cache_release();
  poison_blocks(n, t_device(), 1, addrs);
  T_OK(tcoll_grad_backward(node, &y, 1, &gx, 1));
  T_OK(tcoll_wait(gx.data));
  T_EXPECT(gx.data == addrs[0], "the grad input did not get the poisoned block");
  if (t_rank != root)
    T_EXPECT(t_check_all("broadcast backward off src", &gx, zero, NULL, 0) == 0, "not zeros");
  tcoll_tensor_free(&gx);
  tcoll_tensor_free(&y);
  tcoll_grad_node_free(node);
  /* reduce MAX: y off dst is left unchanged, zeros as allocated (on the host, the node's copies
   * of x and y take the first two poisoned blocks) */
  tcoll_cache_release();
  poison_blocks(n, t_device(), 3, addrs);
  T_OK(tcoll_grad_reduce(&x, root, TCOLL_MAX, NULL, &y, &node));
  T_OK(tcoll_wait(y.data));
  T_EXPECT(among(y.data, addrs, 3), "y did not get a poisoned block");
  int top = t_size - 1;
  if (t_rank != root)
    T_EXPECT(t_check_all("grad reduce MAX off dst", &y, zero, NULL, 0) == 0, "not zeros");
  else
    T_EXPECT(t_check_all("grad reduce MAX on dst", &y, rank_value, &top, 0) == 0, "wrong maximum");
  tcoll_tensor_free(&y);
  tcoll_grad_node_free(node);
  tcoll_tensor_free(&x);
}
END_TEST

/* ---- many threads ---- */

#define NTHREADS 4
#define ROUNDS 2000

typedef struct {
  int id, dev, bad;
} worker_t;

static void *churn(void *arg) {
  worker_t *w = arg;
  static const int64_t sizes[] = {2, 7, 64, 100, 1000, 4096, 20000};
  tcoll_tensor_t held[4];
  memset(held, 0, sizeof held);
  for (int r = 0; r < ROUNDS; r++) {
    int slot = r % 4;
    if (held[slot].data) {
      /* Nobody else wrote into a block this thread holds. */
      int32_t *v = held[slot].data;
      int64_t n = tcoll_tensor_numel(&held[slot]);
      if (v[0] != w->id * 1000003 + r - 4 || v[n - 1] != -(w->id + 1)) w->bad++;
      tcoll_tensor_free(&held[slot]);
    }
    int64_t n = sizes[(r * 7 + w->id) % 7];
    if (tcoll_tensor_alloc(&held[slot], TCOLL_INT32, 1, &n, TCOLL_HOST) != TCOLL_SUCCESS) {
      w->bad++;
      continue;
    }
    int32_t *v = held[slot].data;
    if (v[0] != 0 || v[n / 2] != 0 || v[n - 1] != 0) w->bad++; /* zero-filled */
    v[0] = w->id * 1000003 + r;
    v[n - 1] = -(w->id + 1);
    if (w->dev != TCOLL_HOST && r % 32 == 0) { /* device blocks too: fenced, recycled */
      tcoll_tensor_t d = t_empty();
      if (tcoll_tensor_alloc(&d, TCOLL_INT32, 1, &n, w->dev) != TCOLL_SUCCESS) w->bad++;
      tcoll_tensor_free(&d);
    }
  }
  for (int s = 0; s < 4; s++) tcoll_tensor_free(&held[s]);
  return NULL;
}

START_TEST(threads) {
  size_t in_use = info().in_use;
  pthread_t th[NTHREADS];
  worker_t w[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    w[i] = (worker_t){.id = i, .dev = t_device()};
    pthread_create(&th[i], NULL, churn, &w[i]);
  }
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < NTHREADS; i++)
    T_EXPECT(w[i].bad == 0, "thread %d saw %d wrong blocks", i, w[i].bad);
  T_EXPECT(info().in_use == in_use,
           "%zu bytes in use after the threads freed everything, %zu before", info().in_use,
           in_use);
}
END_TEST

/* ---- devices ---- */

/* Device blocks: staging keeps pinned blocks too, and a device block freed while a copy queued
 * on it is still running is not handed out (zero-filled on another stream) before that copy. */
START_TEST(device_blocks) {
  int dev = t_device();
  if (dev == TCOLL_HOST) return;
  int64_t n = (int64_t)1 << 16;
  tcoll_tensor_t x = t_alloc(F32, 1, &n), y = t_empty();
  t_set_all(&x, rank_value, &t_rank);
  tcoll_cache_release();
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y));
  T_OK(tcoll_wait(y.data));
  T_OK(tcoll_device_synchronize(dev));
  if (!tcoll_mpi_device_direct(1))
    T_EXPECT(info().cached_pinned > 0, "staging kept no pinned block in the cache");
  tcoll_tensor_free(&y);
  T_EXPECT(info().cached_device >= (size_t)n * 4, "the freed device output is not cached");

  tcoll_cache_release();
  double base = 0.5;
  tcoll_tensor_t a = t_alloc(F32, 1, &n), h = t_host(F32, 1, &n), pad = t_host(F32, 1, &n);
  t_set_all(&a, ramp, &base);
  void *s1, *s2, *addr = a.data;
  T_OK(tcoll_stream_create(dev, &s1));
  T_OK(tcoll_stream_create(dev, &s2));
  T_OK(tcoll_set_stream(dev, s1));
  /* Work queued ahead on s1 (slow with TCOLL_FAKE_DELAY_US), then the read of a. */
  tcoll_tensor_t scratch = t_alloc(F32, 1, &n);
  for (int i = 0; i < 4; i++) T_OK(tcoll_tensor_copy_async(&pad, &scratch, s1));
  T_OK(tcoll_tensor_copy_async(&h, &a, s1));
  tcoll_tensor_free(&a); /* its last use is on s1 */
  T_OK(tcoll_set_stream(dev, s2));
  tcoll_tensor_t b = t_alloc(F32, 1, &n); /* zeros written on s2 */
  T_EXPECT(b.data == addr, "the new tensor did not get the freed block (the test proves nothing)");
  T_OK(tcoll_stream_synchronize(dev, s1));
  T_OK(tcoll_stream_synchronize(dev, s2));
  T_EXPECT(t_check_all("copy of a freed block made on s1", &h, ramp, &base, 0) == 0,
           "the block was reused (zero-filled on s2) before the copy queued on s1 read it");
  T_EXPECT(t_check_all("the reused block", &b, zero, NULL, 0) == 0, "not zeros");
  T_OK(tcoll_set_stream(dev, NULL));
  tcoll_tensor_free(&b);
  tcoll_tensor_free(&scratch);
  T_OK(tcoll_stream_destroy(dev, s1));
  T_OK(tcoll_stream_destroy(dev, s2));
  tcoll_tensor_free(&h);
  tcoll_tensor_free(&pad);
  tcoll_tensor_free(&x);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("cache");
  TCase *tc = t_tcase("cache");
  tcase_add_test(tc, reuse);
  tcase_add_test(tc, limit_respected);
  tcase_add_test(tc, explicit_release);
  tcase_add_test(tc, alloc_zeros);
  tcase_add_test(tc, all_reduce_output_written);
  tcase_add_test(tc, reduce_off_root_zeros);
  tcase_add_test(tc, grad_zero_outputs);
  tcase_add_test(tc, threads);
  tcase_add_test(tc, device_blocks);
  suite_add_tcase(s, tc);
  return s;
}
