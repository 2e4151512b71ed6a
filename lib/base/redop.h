/* Reduce ops as the library sees them once resolved and checked against a dtype. */
#ifndef TC_REDOP_H
#define TC_REDOP_H

#include "base.h"

#define TC_REDOP_PREMUL_SUM TCOLL_NUM_BUILTIN_REDOPS /* kind of a premul_sum handle */

typedef struct tc_redop {
  int kind;      /* TCOLL_SUM..TCOLL_BXOR or TC_REDOP_PREMUL_SUM */
  double scalar; /* premul_sum's factor */
} tc_redop_t;

/* Resolves op (a built-in value or a live premul handle) and checks that it accepts dtype.
 * argname names the op argument in messages. */
int tc_redop_resolve_any(tcoll_redop_t op, tcoll_dtype_t dtype, const char *argname,
                         tc_redop_t *out);
/* The built-in ops that take any dtype. */
static inline bool tc_redop_any_dtype(tcoll_redop_t op) {
  return op == TCOLL_SUM || op == TCOLL_MIN || op == TCOLL_MAX || op == TCOLL_PRODUCT;
}
/* The same, with the ops that take any dtype answered inline (nearly every call's op). */
static inline int tc_redop_resolve(tcoll_redop_t op, tcoll_dtype_t dtype, const char *argname,
                                   tc_redop_t *out) {
  if (tc_redop_any_dtype(op)) {
    out->kind = op;
    out->scalar = 1.0;
    return TCOLL_SUCCESS;
  }
  return tc_redop_resolve_any(op, dtype, argname, out);
}
/* What a collective applies around the reduction itself: each rank's contribution multiplied by
 * premul (premul_sum; 1 otherwise), the result divided by the rank count (AVG; 1 otherwise). */
static inline double tc_redop_premul(const tc_redop_t *op) {
  return op->kind == TC_REDOP_PREMUL_SUM ? op->scalar : 1.0;
}
static inline double tc_redop_divisor(const tc_redop_t *op, int ranks) {
  return op->kind == TCOLL_AVG ? (double)ranks : 1.0;
}
/* Resolves op without a dtype (for checks that come before the dtype is known). */
int tc_redop_lookup(tcoll_redop_t op, const char *argname, tc_redop_t *out);
const char *tc_redop_kind_name(int kind);
void tc_redop_cleanup(void);

#endif
