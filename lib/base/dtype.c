/* Data type sizes, names and element loads and stores as doubles. */
#include "dtype.h"

#include <string.h>

static const char *const dtype_name[TCOLL_NUM_DTYPES] = {
    [TCOLL_BOOL] = "bool",       [TCOLL_INT8] = "int8",         [TCOLL_UINT8] = "uint8",
    [TCOLL_INT16] = "int16",     [TCOLL_INT32] = "int32",       [TCOLL_INT64] = "int64",
    [TCOLL_FLOAT16] = "float16", [TCOLL_BFLOAT16] = "bfloat16", [TCOLL_FLOAT32] = "float32",
    [TCOLL_FLOAT64] = "float64",
};

size_t tcoll_dtype_size(tcoll_dtype_t d) { return tc_dtype_size(d); }

const char *tcoll_dtype_name(tcoll_dtype_t d) {
  return tc_dtype_valid(d) ? dtype_name[d] : "invalid";
}

double tc_load_double(const void *buf, tcoll_dtype_t d, int64_t i) {
  switch (d) {
  case TCOLL_BOOL: return ((const uint8_t *)buf)[i] ? 1.0 : 0.0;
  case TCOLL_INT8: return ((const int8_t *)buf)[i];
  case TCOLL_UINT8: return ((const uint8_t *)buf)[i];
  case TCOLL_INT16: return ((const int16_t *)buf)[i];
  case TCOLL_INT32: return ((const int32_t *)buf)[i];
  case TCOLL_INT64: return (double)((const int64_t *)buf)[i];
  case TCOLL_FLOAT16: return tc_half_to_float(((const uint16_t *)buf)[i]);
  case TCOLL_BFLOAT16: return tc_bf16_to_float(((const uint16_t *)buf)[i]);
  case TCOLL_FLOAT32: return ((const float *)buf)[i];
  case TCOLL_FLOAT64: return ((const double *)buf)[i];
  }
  return 0.0;
}

void tc_store_double(void *buf, tcoll_dtype_t d, int64_t i, double v) {
  switch (d) {
  case TCOLL_BOOL: ((uint8_t *)buf)[i] = v != 0.0; break;
  case TCOLL_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case TCOLL_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case TCOLL_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
  case TCOLL_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case TCOLL_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case TCOLL_FLOAT16: ((uint16_t *)buf)[i] = tc_float_to_half((float)v); break;
  case TCOLL_BFLOAT16: ((uint16_t *)buf)[i] = tc_float_to_bf16((float)v); break;
  case TCOLL_FLOAT32: ((float *)buf)[i] = (float)v; break;
  case TCOLL_FLOAT64: ((double *)buf)[i] = v; break;
  }
}
