/* Single-process multi-device ops (seed 001: Broadcast, ReduceAddCoalesced, Scatter, Gather) on
 * 2 emulated devices plus the host: round trips, closed-form values, scalar gather, stream
 * order, bad arguments. Every rank runs them on its own (they involve no MPI). */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int devs[3] = {0, 1, TCOLL_HOST};

static tcoll_tensor_t on(int dev, tcoll_dtype_t dt, int ndim, const int64_t *shape) {
  tcoll_tensor_t t = t_empty();
  T_OK(tcoll_tensor_alloc(&t, dt, ndim, shape, dev));
  return t;
}

typedef struct pat {
  double a, b; /* a * (i % 5 + 1) + b */
} pat_t;
static double pattern(int64_t i, void *c) {
  return ((pat_t *)c)->a * (double)(i % 5 + 1) + ((pat_t *)c)->b;
}
static double iota(int64_t i, void *c) { return (double)i + (c ? *(double *)c : 0.0); }

static void free_all(tcoll_tensor_t *t, int n) {
  for (int i = 0; i < n; i++) tcoll_tensor_free(&t[i]);
}

/* ------------------------------------------------------------------ broadcast_coalesced */

START_TEST(broadcast_coalesced) {
  int64_t s0[2] = {5, 3}, s1[1] = {7}, s2[1] = {0};
  tcoll_tensor_t in[3] = {on(0, TCOLL_FLOAT32, 2, s0), on(TCOLL_HOST, TCOLL_INT32, 1, s1),
                          on(1, TCOLL_FLOAT64, 1, s2)};
  pat_t p[3] = {{1, 0.5}, {3, -2}, {1, 0}};
  for (int i = 0; i < 3; i++) t_set_all(&in[i], pattern, &p[i]);
  tcoll_tensor_t out[9];
  for (int k = 0; k < 9; k++) out[k] = t_empty();
  out[0] = in[0]; /* device 0 gets in[0] itself: left as it is */
  T_OK(tcoll_local_broadcast_coalesced(in, 3, devs, 3, out));
  for (int d = 0; d < 3; d++) {
    for (int i = 0; i < 3; i++) {
      tcoll_tensor_t *o = &out[d * 3 + i];
      T_EXPECT(o->device == devs[d], "out[%d] is on device %d, expected %d", d * 3 + i, o->device,
               devs[d]);
      T_EXPECT(o->dtype == in[i].dtype && o->ndim == in[i].ndim && o->shape[0] == in[i].shape[0],
               "out[%d] has the wrong dtype or shape", d * 3 + i);
      t_check_all("broadcast_coalesced", o, pattern, &p[i], 0);
    }
  }
  T_EXPECT(out[0].data == in[0].data, "out[0] (given as in[0]) was replaced");
  for (int k = 1; k < 9; k++) tcoll_tensor_free(&out[k]);
  free_all(in, 3);
}
END_TEST

/* ------------------------------------------------------------------ reduce_add_coalesced */

static void reduce_add_case(int destination, tcoll_dtype_t dt, bool inplace) {
  enum { ND = 3, N = 2 };
  int64_t sa[2] = {4, 6}, sb[1] = {1001};
  tcoll_tensor_t in[ND * N];
  for (int d = 0; d < ND; d++) {
    in[d * N + 0] = on(devs[d], dt, 2, sa);
    in[d * N + 1] = on(devs[d], TCOLL_INT64, 1, sb);
    for (int i = 0; i < N; i++) {
      pat_t p = {d + 1, 10.0 * i};
      t_set_all(&in[d * N + i], pattern, &p);
    }
  }
  tcoll_tensor_t out[N] = {t_empty(), t_empty()};
  int self = -1;
  if (inplace) { /* accumulate into the group on the destination */
    for (int d = 0; d < ND; d++)
      if (devs[d] == destination) self = d;
    out[0] = in[self * N + 0];
    out[1] = in[self * N + 1];
  }
  T_OK(tcoll_local_reduce_add_coalesced(in, ND, N, destination, out));
  for (int i = 0; i < N; i++) {
    pat_t want = {1 + 2 + 3, 30.0 * i}; /* sum over d of (d + 1) * (j % 5 + 1) + 10 i */
    T_EXPECT(out[i].device == destination, "out[%d] on device %d, expected %d", i, out[i].device,
             destination);
    char what[80];
    snprintf(what, sizeof what, "reduce_add to %d (%s)%s", destination,
             tcoll_dtype_name(out[i].dtype), inplace ? " in place" : "");
    t_check_all(what, &out[i], pattern, &want, 0);
  }
  if (!inplace) free_all(out, N);
  free_all(in, ND * N);
}

START_TEST(reduce_add_coalesced) {
  for (int k = 0; k < 3; k++) {
    reduce_add_case(devs[k], TCOLL_FLOAT32, false);
    reduce_add_case(devs[k], TCOLL_FLOAT16, false);
    reduce_add_case(devs[k], TCOLL_FLOAT64, true);
  }
}
END_TEST

/* Every dtype through the add (the CUDA add kernel with a device destination, host math with the
 * host): sum over groups d of (d + 1) * (i % 5 + 1) is exact in each; bool adds as a logical or. */
START_TEST(reduce_add_every_dtype) {
  int64_t shape[1] = {1001};
  for (int dt = 0; dt < 10; dt++) {
    for (int k = 0; k < 3; k += 2) { /* destination device 0, then the host */
      tcoll_tensor_t in[3];
      for (int d = 0; d < 3; d++) {
        in[d] = on(devs[d], (tcoll_dtype_t)dt, 1, shape);
        pat_t p = {d + 1, 0};
        t_set_all(&in[d], pattern, &p);
      }
      tcoll_tensor_t out = t_empty();
      T_OK(tcoll_local_reduce_add_coalesced(in, 3, 1, devs[k], &out));
      pat_t want = {dt == TCOLL_BOOL ? 0 : 6, dt == TCOLL_BOOL ? 1 : 0};
      char what[80];
      snprintf(what, sizeof what, "reduce_add of %s to %d", tcoll_dtype_name((tcoll_dtype_t)dt),
               devs[k]);
      t_check_all(what, &out, pattern, &want, 0);
      tcoll_tensor_free(&out);
      free_all(in, 3);
    }
  }
}
END_TEST

/* bfloat16 and float16 sums keep NaN a NaN and infinity infinite (a rounding that carried into
 * the exponent would turn a NaN into an infinity). */
static double specials(int64_t i, void *c) {
  double x = *(double *)c;
  return i == 0 ? NAN : i == 1 ? INFINITY : i == 2 ? -INFINITY : x;
}

START_TEST(reduce_add_nan_inf) {
  tcoll_dtype_t dts[2] = {TCOLL_BFLOAT16, TCOLL_FLOAT16};
  int64_t shape[1] = {4};
  for (int k = 0; k < 2; k++) {
    for (int dst = 0; dst < 3; dst += 2) {
      double one = 1.0, two = 2.0;
      tcoll_tensor_t in[2] = {on(devs[dst], dts[k], 1, shape), on(devs[1], dts[k], 1, shape)};
      t_set_all(&in[0], specials, &one);
      t_set_all(&in[1], iota, &two); /* 2, 3, 4, 5 */
      tcoll_tensor_t out = t_empty();
      T_OK(tcoll_local_reduce_add_coalesced(in, 2, 1, devs[dst], &out));
      double v[4];
      t_read(&out, v);
      T_EXPECT(isnan(v[0]), "%s on %d: NaN + 2 = %g", tcoll_dtype_name(dts[k]), devs[dst], v[0]);
      T_EXPECT(isinf(v[1]) && v[1] > 0, "%s on %d: inf + 3 = %g", tcoll_dtype_name(dts[k]),
               devs[dst], v[1]);
      T_EXPECT(isinf(v[2]) && v[2] < 0, "%s on %d: -inf + 4 = %g", tcoll_dtype_name(dts[k]),
               devs[dst], v[2]);
      T_EXPECT(v[3] == 6.0, "%s on %d: 1 + 5 = %g", tcoll_dtype_name(dts[k]), devs[dst], v[3]);
      tcoll_tensor_free(&out);
      free_all(in, 2);
    }
  }
}
END_TEST

/* ------------------------------------------------------------------ scatter / gather */

typedef struct slab {
  int64_t cols_full, cols, start; /* a [rows, cols] slab of a [rows, cols_full] iota */
} slab_t;
static double slab_val(int64_t i, void *c) {
  slab_t *s = c;
  return (double)((i / s->cols) * s->cols_full + s->start + i % s->cols);
}

START_TEST(scatter_gather_dim0) {
  int64_t shape[2] = {10, 4};
  tcoll_tensor_t x = on(TCOLL_HOST, TCOLL_FLOAT32, 2, shape);
  t_set_all(&x, iota, NULL);
  tcoll_tensor_t parts[3] = {t_empty(), t_empty(), t_empty()};
  T_OK(tcoll_local_scatter(&x, devs, 3, NULL, 0, parts)); /* torch.chunk: 4, 4, 2 rows */
  int64_t rows[3] = {4, 4, 2}, start = 0;
  for (int i = 0; i < 3; i++) {
    T_EXPECT(parts[i].shape[0] == rows[i] && parts[i].shape[1] == 4 && parts[i].device == devs[i],
             "part %d: shape [%lld, %lld] on %d, expected [%lld, 4] on %d", i,
             (long long)parts[i].shape[0], (long long)parts[i].shape[1], parts[i].device,
             (long long)rows[i], devs[i]);
    double off = (double)(start * 4);
    t_check_all("scatter dim 0", &parts[i], iota, &off, 0);
    start += rows[i];
  }
  /* back together on every target */
  for (int k = 0; k < 3; k++) {
    tcoll_tensor_t y = t_empty();
    T_OK(tcoll_local_gather(parts, 3, 0, devs[k], &y));
    T_EXPECT(y.device == devs[k] && y.shape[0] == 10 && y.shape[1] == 4,
             "gather dim 0: wrong placement or shape");
    t_check_all("gather dim 0 round trip", &y, iota, NULL, 0);
    tcoll_tensor_free(&y);
  }
  /* explicit chunk sizes, with an empty one, from a device */
  tcoll_tensor_t xd = on(1, TCOLL_FLOAT32, 2, shape);
  T_OK(tcoll_tensor_copy(&xd, &x));
  tcoll_tensor_t q[3] = {t_empty(), t_empty(), t_empty()};
  int64_t sizes[3] = {0, 7, 3};
  T_OK(tcoll_local_scatter(&xd, devs, 3, sizes, 0, q));
  T_EXPECT(q[0].shape[0] == 0 && q[1].shape[0] == 7 && q[2].shape[0] == 3,
           "chunk_sizes not honoured");
  double off = 28;
  t_check_all("scatter with chunk_sizes", &q[2], iota, &off, 0);
  free_all(q, 3);
  tcoll_tensor_free(&xd);
  free_all(parts, 3);
  tcoll_tensor_free(&x);
}
END_TEST

START_TEST(scatter_gather_dim1) {
  int64_t shape[3] = {3, 10, 2};
  tcoll_tensor_t x = on(0, TCOLL_INT32, 3, shape);
  t_set_all(&x, iota, NULL);
  tcoll_tensor_t parts[3] = {t_empty(), t_empty(), t_empty()};
  int64_t sizes[3] = {3, 0, 7};
  int order[3] = {1, TCOLL_HOST, 0};
  T_OK(tcoll_local_scatter(&x, order, 3, sizes, -2, parts));
  int64_t start = 0;
  for (int i = 0; i < 3; i++) {
    T_EXPECT(parts[i].shape[1] == sizes[i] && parts[i].device == order[i],
             "dim 1 part %d misplaced", i);
    slab_t s = {20, sizes[i] * 2, start * 2};
    t_check_all("scatter dim 1", &parts[i], slab_val, &s, 0);
    start += sizes[i];
  }
  tcoll_tensor_t y = t_empty();
  T_OK(tcoll_local_gather(parts, 3, 1, 1, &y));
  T_EXPECT(y.shape[0] == 3 && y.shape[1] == 10 && y.shape[2] == 2 && y.device == 1,
           "gather dim 1 shape");
  t_check_all("gather dim 1 round trip", &y, iota, NULL, 0);
  tcoll_tensor_free(&y);
  free_all(parts, 3);
  tcoll_tensor_free(&x);
}
END_TEST

START_TEST(gather_scalars) {
  tcoll_tensor_t s[3];
  for (int i = 0; i < 3; i++) {
    s[i] = on(devs[i], TCOLL_FLOAT64, 0, NULL);
    double v = 10.0 * (i + 1);
    t_set_all(&s[i], iota, &v);
  }
  tcoll_tensor_t y = t_empty();
  T_OK(tcoll_local_gather(s, 3, 0, TCOLL_HOST, &y)); /* warns, returns a vector */
  T_EXPECT(y.ndim == 1 && y.shape[0] == 3,
           "scalars gathered as ndim %d, shape[0] %lld (expected a vector of 3)", y.ndim,
           (long long)y.shape[0]);
  for (int i = 0; i < 3; i++)
    T_EXPECT(t_get(&y, i) == 10.0 * (i + 1), "element %d is %g", i, t_get(&y, i));
  tcoll_tensor_free(&y);
  tcoll_tensor_t z = t_empty();
  T_FAILS(tcoll_local_gather(s, 3, 1, 0, &z), TCOLL_ERR_INVALID_ARGUMENT, "dim");
  free_all(s, 3);
}
END_TEST

/* ------------------------------------------------------------------ stream order */

/* Inputs produced late on the caller's stream, outputs consumed on it: no host waits needed. */
START_TEST(stream_order) {
  void *s0 = NULL, *s1 = NULL;
  T_OK(tcoll_stream_create(0, &s0));
  T_OK(tcoll_stream_create(1, &s1));
  T_OK(tcoll_set_stream(0, s0));
  T_OK(tcoll_set_stream(1, s1));
  int64_t shape[1] = {4096}, one[1] = {16};
  tcoll_tensor_t h = on(TCOLL_HOST, TCOLL_FLOAT32, 1, shape), d0 = on(0, TCOLL_FLOAT32, 1, shape);
  tcoll_tensor_t back = on(TCOLL_HOST, TCOLL_FLOAT32, 1, shape);
  tcoll_tensor_t bd = on(0, TCOLL_FLOAT32, 1, one), bh = on(TCOLL_HOST, TCOLL_FLOAT32, 1, one);
  t_set_all(&h, iota, NULL);
  for (int k = 0; k < 30; k++) T_OK(tcoll_tensor_copy_async(&bd, &bh, s0)); /* keeps s0 busy */
  T_OK(tcoll_tensor_copy_async(&d0, &h, s0));
  tcoll_tensor_t out[2] = {t_empty(), t_empty()};
  int to[2] = {1, TCOLL_HOST};
  T_OK(tcoll_local_broadcast_coalesced(&d0, 1, to, 2, out));
  t_check_all("host output, complete at return", &out[1], iota, NULL, 0);
  T_OK(tcoll_tensor_copy_async(&back, &out[0], s1)); /* device 1's current stream */
  T_OK(tcoll_stream_synchronize(1, s1));
  t_check_all("device output read on the current stream", &back, iota, NULL, 0);
  /* reduce_add onto device 1 from inputs produced late on s0 */
  tcoll_tensor_t d1 = on(1, TCOLL_FLOAT32, 1, shape), sum = t_empty();
  T_OK(tcoll_tensor_copy(&d1, &h));
  for (int k = 0; k < 30; k++) T_OK(tcoll_tensor_copy_async(&bd, &bh, s0));
  T_OK(tcoll_tensor_copy_async(&d0, &out[1], s0));
  tcoll_tensor_t pair[2] = {d0, d1};
  T_OK(tcoll_local_reduce_add_coalesced(pair, 2, 1, 1, &sum));
  T_OK(tcoll_tensor_copy_async(&back, &sum, s1));
  T_OK(tcoll_stream_synchronize(1, s1));
  int bad = 0;
  for (int64_t i = 0; i < shape[0]; i++) bad += ((float *)back.data)[i] != 2.0f * (float)i;
  T_EXPECT(bad == 0, "reduce_add in stream order: %d wrong elements", bad);
  T_OK(tcoll_set_stream(0, NULL));
  T_OK(tcoll_set_stream(1, NULL));
  T_OK(tcoll_stream_destroy(0, s0));
  T_OK(tcoll_stream_destroy(1, s1));
  tcoll_tensor_free(&h);
  tcoll_tensor_free(&d0);
  tcoll_tensor_free(&d1);
  tcoll_tensor_free(&back);
  tcoll_tensor_free(&bd);
  tcoll_tensor_free(&bh);
  tcoll_tensor_free(&sum);
  free_all(out, 2);
}
END_TEST

/* ------------------------------------------------------------------ the registry */

static double twice_iota(int64_t i, void *c) { return 2.0 * (double)i * *(double *)c; }

/* These ops write outside the registry: an output that pending work writes or still reads is
 * refused (BUSY, naming the buffer and the work), an input that pending work writes is waited
 * first, and after the wait the same calls work. */
START_TEST(pending_work) {
  int64_t shape[1] = {6};
  double one = 1.0, ranks = (double)t_size;
  tcoll_tensor_t x = on(0, TCOLL_FLOAT64, 1, shape), src = on(TCOLL_HOST, TCOLL_FLOAT64, 1, shape);
  t_set_all(&x, iota, NULL);
  t_set_all(&src, twice_iota, &one);
  tcoll_tensor_t y = t_empty();
  T_OK(tcoll_all_reduce(&x, TCOLL_SUM, NULL, &y)); /* pending: reads x, writes y */
  tcoll_tensor_t out = x;
  T_FAILS(tcoll_local_broadcast_coalesced(&src, 1, devs, 1, &out), TCOLL_ERR_BUSY,
          "an input still read by");
  T_FAILS(tcoll_local_broadcast_coalesced(&src, 1, devs, 1, &out), TCOLL_ERR_BUSY, "out[0]");
  out = y;
  T_FAILS(tcoll_local_broadcast_coalesced(&src, 1, devs, 1, &out), TCOLL_ERR_BUSY, "the output of");
  T_FAILS(tcoll_local_broadcast_coalesced(&src, 1, devs, 1, &out), TCOLL_ERR_BUSY, "all_reduce");
  tcoll_tensor_t parts[2] = {x, t_empty()};
  int64_t sizes[2] = {6, 0};
  T_FAILS(tcoll_local_scatter(&src, devs, 2, sizes, 0, parts), TCOLL_ERR_BUSY, "out[0]");
  int64_t half[1] = {3};
  tcoll_tensor_t a = on(0, TCOLL_FLOAT64, 1, half), b = on(1, TCOLL_FLOAT64, 1, half),
                 ab[2] = {a, b};
  out = x;
  T_FAILS(tcoll_local_gather(ab, 2, 0, 0, &out), TCOLL_ERR_BUSY, "an input still read by");
  tcoll_tensor_t sum_in[2] = {x, on(1, TCOLL_FLOAT64, 1, shape)};
  out = x; /* in place on in[0], which the all_reduce still reads */
  T_FAILS(tcoll_local_reduce_add_coalesced(sum_in, 2, 1, 0, &out), TCOLL_ERR_BUSY,
          "an input still read by");
  T_EXPECT(tcoll_pending_count() == 1,
           "failed calls left %d works pending (expected the all_reduce only)",
           (int)tcoll_pending_count());
  /* y as an input: the all_reduce completes first, so the copies see its result */
  tcoll_tensor_t copies[2] = {t_empty(), t_empty()};
  const int to[2] = {1, TCOLL_HOST};
  T_OK(tcoll_local_broadcast_coalesced(&y, 1, to, 2, copies));
  for (int k = 0; k < 2; k++)
    t_check_all("broadcast of a pending output", &copies[k], twice_iota, &(double){ranks / 2}, 0);
  T_EXPECT(tcoll_pending_count() == 0, "%d works still pending after an op read their output",
           (int)tcoll_pending_count());
  out = x; /* no longer read by anything */
  T_OK(tcoll_local_broadcast_coalesced(&src, 1, devs, 1, &out));
  t_check_all("broadcast after the wait", &x, twice_iota, &one, 0);
  free_all(copies, 2);
  free_all(sum_in + 1, 1);
  free_all(ab, 2);
  tcoll_tensor_free(&y);
  tcoll_tensor_free(&x);
  tcoll_tensor_free(&src);
}
END_TEST

/* ------------------------------------------------------------------ errors */

START_TEST(bad_arguments) {
  int64_t shape[1] = {6}, other[1] = {5};
  tcoll_tensor_t a = on(0, TCOLL_FLOAT32, 1, shape), b = on(1, TCOLL_FLOAT32, 1, other);
  tcoll_tensor_t out[4] = {t_empty(), t_empty(), t_empty(), t_empty()};
  int bad_devs[2] = {0, 7};
  T_FAILS(tcoll_local_broadcast_coalesced(&a, 1, bad_devs, 2, out), TCOLL_ERR_INVALID_ARGUMENT,
          "devices[1] is 7 but device 7 does not exist");
  tcoll_tensor_t ghost = a;
  ghost.device = 5;
  T_FAILS(tcoll_local_broadcast_coalesced(&ghost, 1, devs, 2, out), TCOLL_ERR_INVALID_ARGUMENT,
          "in[0]->device is 5");
  tcoll_tensor_t ab[2] = {a, b};
  T_FAILS(tcoll_local_reduce_add_coalesced(ab, 2, 1, 0, out), TCOLL_ERR_INVALID_ARGUMENT,
          "in[1]->shape is [5]");
  T_FAILS(tcoll_local_reduce_add_coalesced(ab, 2, 1, 9, out), TCOLL_ERR_INVALID_ARGUMENT,
          "destination is 9");
  int64_t sizes[2] = {2, 3};
  T_FAILS(tcoll_local_scatter(&a, devs, 2, sizes, 0, out), TCOLL_ERR_INVALID_ARGUMENT,
          "chunk_sizes sum to 5");
  T_FAILS(tcoll_local_scatter(&a, devs, 2, NULL, 1, out), TCOLL_ERR_INVALID_ARGUMENT, "dim is 1");
  int64_t s2[2] = {2, 3}, s3[2] = {2, 4};
  tcoll_tensor_t m[2] = {on(0, TCOLL_FLOAT32, 2, s2), on(1, TCOLL_FLOAT32, 2, s3)};
  T_FAILS(tcoll_local_gather(m, 2, 0, TCOLL_HOST, out), TCOLL_ERR_INVALID_ARGUMENT,
          "in[1]->shape[1] is 4");
  T_FAILS(tcoll_local_gather(m, 2, 1, 3, out), TCOLL_ERR_INVALID_ARGUMENT, "target_device is 3");
  /* an output that overlaps an input */
  tcoll_tensor_t alias = a;
  T_FAILS(tcoll_local_broadcast_coalesced(&b, 1, devs, 1, &alias), TCOLL_ERR_INVALID_ARGUMENT,
          "out[0]");
  for (int i = 0; i < 4; i++) T_EXPECT(out[i].data == NULL, "a failed call allocated out[%d]", i);
  free_all(m, 2);
  tcoll_tensor_free(&a);
  tcoll_tensor_free(&b);
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("local");
  if (tcoll_device_count() < 2) { /* a machine with one GPU: the cuda suite covers its local ops */
    if (t_rank == 0)
      printf("local: needs 2 devices, %d here: nothing to run\n", tcoll_device_count());
    return s;
  }
  TCase *tc = t_tcase("local");
  tcase_add_test(tc, broadcast_coalesced);
  tcase_add_test(tc, reduce_add_coalesced);
  tcase_add_test(tc, reduce_add_every_dtype);
  tcase_add_test(tc, reduce_add_nan_inf);
  tcase_add_test(tc, scatter_gather_dim0);
  tcase_add_test(tc, scatter_gather_dim1);
  tcase_add_test(tc, gather_scalars);
  tcase_add_test(tc, stream_order);
  tcase_add_test(tc, pending_work);
  tcase_add_test(tc, bad_arguments);
  suite_add_tcase(s, tc);
  return s;
}
