/* Reduce ops: names, premul_sum handles and which dtypes each op accepts. */
#include "redop.h"

#include "dtype.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const builtin_names[TCOLL_NUM_BUILTIN_REDOPS] = {
    "sum", "avg", "product", "min", "max", "band", "bor", "bxor"};

/* premul_sum handles are never reused, so a stale handle is recognised as stale. */
#define PREMUL_FIRST_HANDLE 1000

typedef struct premul_slot {
  tcoll_redop_t handle;
  double scalar;
} premul_slot_t;

static pthread_mutex_t premul_lock = PTHREAD_MUTEX_INITIALIZER;
static premul_slot_t *premul_slots;
static int premul_count, premul_cap;
static tcoll_redop_t premul_next = PREMUL_FIRST_HANDLE;

const char *tc_redop_kind_name(int kind) {
  if (kind >= 0 && kind < TCOLL_NUM_BUILTIN_REDOPS) return builtin_names[kind];
  if (kind == TC_REDOP_PREMUL_SUM) return "premul_sum";
  return "invalid";
}

static int premul_find(tcoll_redop_t handle) {
  for (int i = 0; i < premul_count; i++)
    if (premul_slots[i].handle == handle) return i;
  return -1;
}

int tc_redop_lookup(tcoll_redop_t op, const char *argname, tc_redop_t *out) {
  if (op >= 0 && op < TCOLL_NUM_BUILTIN_REDOPS) {
    out->kind = op;
    out->scalar = 1.0;
    return TCOLL_SUCCESS;
  }
  pthread_mutex_lock(&premul_lock);
  int i = premul_find(op);
  if (i >= 0) {
    out->kind = TC_REDOP_PREMUL_SUM;
    out->scalar = premul_slots[i].scalar;
  }
  pthread_mutex_unlock(&premul_lock);
  if (i < 0)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "%s is %d (expected a built-in reduce op 0..%d or a live premul_sum handle)",
                    argname, op, TCOLL_NUM_BUILTIN_REDOPS - 1);
  return TCOLL_SUCCESS;
}

int tc_redop_resolve_any(tcoll_redop_t op, tcoll_dtype_t dtype, const char *argname,
                         tc_redop_t *out) {
  if (tc_redop_any_dtype(op)) {
    out->kind = op;
    out->scalar = 1.0;
    return TCOLL_SUCCESS;
  }
  int rc = tc_redop_lookup(op, argname, out);
  if (rc) return rc;
  const char *name = tc_redop_kind_name(out->kind);
  switch (out->kind) {
  case TCOLL_AVG:
  case TC_REDOP_PREMUL_SUM:
    if (!tc_dtype_is_float(dtype))
      return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                      "%s %s needs a floating dtype (float16, bfloat16, float32, float64), got %s",
                      argname, name, tcoll_dtype_name(dtype));
    break;
  case TCOLL_BAND:
  case TCOLL_BOR:
  case TCOLL_BXOR:
    if (!tc_dtype_is_integral(dtype))
      return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "%s %s needs an integer or bool dtype, got %s",
                      argname, name, tcoll_dtype_name(dtype));
    break;
  default: break;
  }
  return TCOLL_SUCCESS;
}

int tcoll_redop_from_string(const char *name, tcoll_redop_t *op) {
  TC_ENTER("tcoll_redop_from_string");
  if (!name)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "name is NULL (expected a reduce op name)");
  if (!op) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "op is NULL (expected a pointer)");
  for (int i = 0; i < TCOLL_NUM_BUILTIN_REDOPS; i++) {
    if (!strcasecmp(name, builtin_names[i])) {
      *op = i;
      return TCOLL_SUCCESS;
    }
  }
  return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "Unrecognized reduce_op: %s", name);
}

const char *tcoll_redop_name(tcoll_redop_t op) {
  if (op >= 0 && op < TCOLL_NUM_BUILTIN_REDOPS) return builtin_names[op];
  pthread_mutex_lock(&premul_lock);
  int i = premul_find(op);
  pthread_mutex_unlock(&premul_lock);
  return i >= 0 ? "premul_sum" : "invalid";
}

int tcoll_redop_create_premul_sum(double scalar, tcoll_redop_t *op) {
  TC_ENTER("tcoll_redop_create_premul_sum");
  if (!op) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "op is NULL (expected a pointer)");
  if (!isfinite(scalar))
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "scalar is %g (expected a finite number)", scalar);
  pthread_mutex_lock(&premul_lock);
  if (premul_count == premul_cap) {
    int cap = premul_cap ? 2 * premul_cap : 8;
    premul_slot_t *p = realloc(premul_slots, (size_t)cap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&premul_lock);
      return tc_error(TCOLL_ERR_NO_MEMORY, "cannot grow the premul_sum table to %d entries", cap);
    }
    premul_slots = p;
    premul_cap = cap;
  }
  premul_slots[premul_count].handle = premul_next++;
  premul_slots[premul_count].scalar = scalar;
  *op = premul_slots[premul_count++].handle;
  pthread_mutex_unlock(&premul_lock);
  return TCOLL_SUCCESS;
}

int tcoll_redop_destroy(tcoll_redop_t op) {
  TC_ENTER("tcoll_redop_destroy");
  if (op >= 0 && op < TCOLL_NUM_BUILTIN_REDOPS)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "op %d is the built-in %s (only premul_sum handles are destroyed)", op,
                    builtin_names[op]);
  pthread_mutex_lock(&premul_lock);
  int i = premul_find(op);
  if (i >= 0) premul_slots[i] = premul_slots[--premul_count];
  pthread_mutex_unlock(&premul_lock);
  if (i < 0)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "op is %d (expected a live premul_sum handle)", op);
  return TCOLL_SUCCESS;
}

void tc_redop_cleanup(void) {
  pthread_mutex_lock(&premul_lock);
  free(premul_slots);
  premul_slots = NULL;
  premul_count = premul_cap = 0;
  pthread_mutex_unlock(&premul_lock);
}
