/* Data type classification and float16 / bfloat16 conversions (host side). */
#ifndef TC_DTYPE_H
#define TC_DTYPE_H

#include "base.h"

#include <string.h>

static inline bool tc_dtype_valid(int d) { return d >= TCOLL_BOOL && d <= TCOLL_FLOAT64; }
/* tcoll_dtype_size, inlined: every call asks it several times. 0 for an invalid dtype. */
static inline size_t tc_dtype_size(int d) {
  static const unsigned char size[TCOLL_NUM_DTYPES] = {
      [TCOLL_BOOL] = 1,    [TCOLL_INT8] = 1,    [TCOLL_UINT8] = 1,   [TCOLL_INT16] = 2,
      [TCOLL_INT32] = 4,   [TCOLL_INT64] = 8,   [TCOLL_FLOAT16] = 2, [TCOLL_BFLOAT16] = 2,
      [TCOLL_FLOAT32] = 4, [TCOLL_FLOAT64] = 8,
  };
  return tc_dtype_valid(d) ? size[d] : 0;
}
static inline bool tc_dtype_is_float(tcoll_dtype_t d) {
  return d == TCOLL_FLOAT16 || d == TCOLL_BFLOAT16 || d == TCOLL_FLOAT32 || d == TCOLL_FLOAT64;
}
/* Integer or bool: the dtypes the bitwise ops accept. */
static inline bool tc_dtype_is_integral(tcoll_dtype_t d) {
  return tc_dtype_valid(d) && !tc_dtype_is_float(d);
}

/* IEEE binary16 <-> binary32, round to nearest even, NaN and infinity kept. */
static inline float tc_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else { /* subnormal: normalize */
    int shift = 0;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      shift++;
    }
    mant &= 0x3ffu;
    bits = sign | ((uint32_t)(113 - shift) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline uint16_t tc_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) /* inf or NaN (NaN keeps a mantissa bit) */
    return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u);
  if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to infinity */
    return sign | 0x7c00u;
  if (absx < 0x38800000u) {              /* result is subnormal or zero */
    if (absx < 0x33000000u) return sign; /* below half the smallest subnormal */
    uint32_t exp = absx >> 23;
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp; /* 14 + (112 - exp) + ... : value = mant * 2^(exp-150) */
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) q++;
    return sign | (uint16_t)q;
  }
  uint32_t q = absx - 0x38000000u; /* rebias exponent 127 -> 15 */
  uint32_t rem = q & 0x1fffu;
  q >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;
  return sign | (uint16_t)q;
}

static inline float tc_bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline uint16_t tc_float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return (uint16_t)(x >> 16);
}

/* Element i of a buffer of dtype d, as a double (exact for every dtype but int64 > 2^53). */
double tc_load_double(const void *buf, tcoll_dtype_t d, int64_t i);
/* Stores v (converted, rounded as a cast would) into element i. */
void tc_store_double(void *buf, tcoll_dtype_t d, int64_t i, double v);

#endif
