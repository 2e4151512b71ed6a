/* Local elementwise math of the gradient rules (host memory; device outputs get a completion
 * copy). The nonlinear rules compute in float64 and round once into the output dtype. */
#include "grad.h"

#include "../base/dtype.h"
#include "../base/host_loops.h"

#include <string.h>

void tg_load_all(double *dst, const void *src, tcoll_dtype_t d, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = tc_load_double(src, d, i);
}

int tg_fin_zero(tg_job_t *j) {
  size_t nb = (size_t)j->n * tcoll_dtype_size(j->dtype);
  for (int k = 0; k < j->nout; k++)
    if (j->res[k]) memset(j->res[k], 0, nb);
  return TCOLL_SUCCESS;
}

int tg_fin_copy(tg_job_t *j) {
  if (j->res[0] && j->n) memcpy(j->res[0], j->a, (size_t)j->n * tcoll_dtype_size(j->dtype));
  return TCOLL_SUCCESS;
}

/* mode 1: divide by scale (AVG divides, as the forward does); mode 0: multiply (premul_sum). */
int tg_fin_scale(tg_job_t *j) {
  size_t nb = (size_t)j->n * tcoll_dtype_size(j->dtype);
  for (int k = 0; k < j->nout; k++) {
    if (!j->res[k]) continue;
    const char *src = (const char *)j->a + (size_t)k * nb;
    if (j->mode == 1) {
      if (nb) memmove(j->res[k], src, nb);
      tc_host_divide(j->res[k], j->dtype, j->n, j->scale);
    } else {
      tc_host_scale_copy(j->res[k], src, j->dtype, j->n, j->scale);
    }
  }
  return TCOLL_SUCCESS;
}

/* a: [sum of g | count of ranks at the extremum] (2n float64, all_reduce SUM), b: my mask
 * (n float64, 1 where x == y). grad = mask * sum / count; a count of 0 (NaN data) gives 0. */
int tg_fin_extremum(tg_job_t *j) {
  const double *sum = j->a, *mask = j->b;
  if (!j->res[0]) return TCOLL_SUCCESS;
  for (int64_t i = 0; i < j->n; i++) {
    double count = sum[j->n + i];
    double v = mask[i] != 0.0 && count > 0.0 ? sum[i] / count : 0.0;
    tc_store_double(j->res[0], j->dtype, i, v);
  }
  return TCOLL_SUCCESS;
}

/* a: [G = sum of g | z = number of ranks whose x is 0] (2n float64), b: p = product over the
 * ranks of x, with zeros replaced by 1 (n float64), c: my x (n of dtype). The derivative of
 * prod_s x_s with respect to my x_r is the product of the other ranks' entries:
 *   z == 0:            p / x_r
 *   z == 1, x_r == 0:  p            (exact: the product of the non-zero others)
 *   otherwise:         0            (another rank holds a zero) */
int tg_fin_product(tg_job_t *j) {
  const double *sum = j->a, *p = j->b;
  if (!j->res[0]) return TCOLL_SUCCESS;
  for (int64_t i = 0; i < j->n; i++) {
    double g = sum[i], z = sum[j->n + i], x = tc_load_double(j->c, j->dtype, i);
    double d;
    if (z == 0.0)
      d = p[i] / x;
    else if (z == 1.0 && x == 0.0)
      d = p[i];
    else
      d = 0.0;
    tc_store_double(j->res[0], j->dtype, i, g * d);
  }
  return TCOLL_SUCCESS;
}
