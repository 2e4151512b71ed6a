/* Which datatypes and ops tcoll can carry. A routing decision must be the same on every rank, and
 * MPI lets ranks describe the same data differently (5 x MPI_FLOAT here, one contiguous type of 5
 * floats there): so the answer depends on the type signature only. A signature of one predefined
 * type repeated is carried (non-contiguous layouts through a packed copy); anything else
 * (mixed types, pairs such as MPI_FLOAT_INT, darrays) passes through. */
#include "layer.h"

#include <stdlib.h>

/* The predefined types, as tcoll elements where tcoll reduces them. */
typedef struct named {
  MPI_Datatype type;
  int reduce_as;    /* a tcoll dtype, or -1: moved as bytes only */
  int multiplicity; /* pairs such as MPI_2INT: 2 of the first */
  int size;         /* bytes of one element (of the first, for pairs) */
} named_t;

#define NAMED_SIZE 48
static named_t named[NAMED_SIZE];
static int nnamed;

static int int_dtype(int size) {
  return size == 1   ? TCOLL_INT8
         : size == 2 ? TCOLL_INT16
         : size == 4 ? TCOLL_INT32
         : size == 8 ? TCOLL_INT64
                     : -1;
}

static void add(MPI_Datatype t, int reduce_as, int multiplicity) {
  int size;
  if (t == MPI_DATATYPE_NULL || nnamed == NAMED_SIZE || PMPI_Type_size(t, &size) != MPI_SUCCESS ||
      size <= 0)
    return;
  named[nnamed++] = (named_t){t, reduce_as, multiplicity, size / multiplicity};
}

/* A Fortran type: reduced as a tcoll float or integer only where its size says which. */
static void add_fortran(MPI_Datatype t, bool floating) {
  int size = 0;
  if (t == MPI_DATATYPE_NULL || PMPI_Type_size(t, &size) != MPI_SUCCESS) return;
  int as = floating ? (size == 4   ? TCOLL_FLOAT32
                       : size == 8 ? TCOLL_FLOAT64
                                   : -1)
                    : int_dtype(size);
  add(t, as, 1);
}

/* The handles are constants only after MPI_Init on some MPIs: filled at first use. */
static void fill_named(void) {
  add(MPI_FLOAT, TCOLL_FLOAT32, 1);
  add(MPI_DOUBLE, TCOLL_FLOAT64, 1);
  add(MPI_INT, int_dtype(sizeof(int)), 1);
  add(MPI_LONG, int_dtype(sizeof(long)), 1);
  add(MPI_LONG_LONG, int_dtype(sizeof(long long)), 1);
  add(MPI_SHORT, int_dtype(sizeof(short)), 1);
  add(MPI_SIGNED_CHAR, TCOLL_INT8, 1);
  add(MPI_INT8_T, TCOLL_INT8, 1);
  add(MPI_INT16_T, TCOLL_INT16, 1);
  add(MPI_INT32_T, TCOLL_INT32, 1);
  add(MPI_INT64_T, TCOLL_INT64, 1);
  add(MPI_UINT8_T, TCOLL_UINT8, 1);
  add(MPI_UNSIGNED_CHAR, TCOLL_UINT8, 1);
  /* moved, never reduced by tcoll (no such tcoll element, or MPI reduces them differently) */
  add(MPI_BYTE, -1, 1);
  add(MPI_CHAR, -1, 1);
  add(MPI_UNSIGNED_SHORT, -1, 1);
  add(MPI_UNSIGNED, -1, 1);
  add(MPI_UNSIGNED_LONG, -1, 1);
  add(MPI_UNSIGNED_LONG_LONG, -1, 1);
  add(MPI_UINT16_T, -1, 1);
  add(MPI_UINT32_T, -1, 1);
  add(MPI_UINT64_T, -1, 1);
  add(MPI_LONG_DOUBLE, -1, 1);
  add(MPI_C_BOOL, -1, 1);
  add(MPI_WCHAR, -1, 1);
  add(MPI_AINT, -1, 1);
  add(MPI_OFFSET, -1, 1);
  add(MPI_2INT, -1, 2);
  /* Fortran's (MPICH's Fortran bindings call the C functions with these handles) */
  add_fortran(MPI_DOUBLE_PRECISION, true);
  add_fortran(MPI_REAL, true);
  add_fortran(MPI_INTEGER, false);
  add(MPI_LOGICAL, -1, 1);
  add(MPI_CHARACTER, -1, 1);
}

/* The entry of a predefined type (pairs name their first half). */
static const named_t *find_named(MPI_Datatype t, MPI_Datatype *base) {
  static int filled; /* written under MPI_Init's thread, before any other thread calls */
  if (!filled) fill_named(), filled = 1;
  for (int i = 0; i < nnamed; i++)
    if (named[i].type == t) {
      *base = named[i].multiplicity == 2 ? MPI_INT : t;
      return &named[i];
    }
  return NULL;
}

/* A signature being decoded: the one predefined type seen so far and how many. */
typedef struct sig {
  MPI_Datatype base;
  int64_t n;
} sig_t;

static bool decode(MPI_Datatype t, sig_t *s, int depth);

/* Decodes k copies of t into s. */
static bool add_copies(MPI_Datatype t, int64_t k, sig_t *s, int depth) {
  sig_t one = {MPI_DATATYPE_NULL, 0};
  if (!decode(t, &one, depth + 1)) return false;
  if (one.n == 0 || k == 0) return true;
  if (s->base != MPI_DATATYPE_NULL && s->base != one.base) return false;
  s->base = one.base;
  s->n += k * one.n;
  return true;
}

static int64_t sum(const int *a, int n) {
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += a[i];
  return total;
}

/* The elements a constructor's integers say it repeats its old type(s) by. */
static bool decode_contents(int combiner, const int *ints, int ntypes, const MPI_Datatype *types,
                            sig_t *s, int depth) {
  switch (combiner) {
  case MPI_COMBINER_DUP:
  case MPI_COMBINER_RESIZED: return add_copies(types[0], 1, s, depth);
  case MPI_COMBINER_CONTIGUOUS: return add_copies(types[0], ints[0], s, depth);
  case MPI_COMBINER_VECTOR:
  case MPI_COMBINER_HVECTOR:
  case MPI_COMBINER_INDEXED_BLOCK:
  case MPI_COMBINER_HINDEXED_BLOCK:
    return add_copies(types[0], (int64_t)ints[0] * ints[1], s, depth);
  case MPI_COMBINER_INDEXED:
  case MPI_COMBINER_HINDEXED: return add_copies(types[0], sum(ints + 1, ints[0]), s, depth);
  case MPI_COMBINER_SUBARRAY: {
    int64_t k = 1;
    for (int d = 0; d < ints[0]; d++) k *= ints[1 + ints[0] + d]; /* the subsizes */
    return add_copies(types[0], k, s, depth);
  }
  case MPI_COMBINER_STRUCT:
    for (int i = 0; i < ntypes; i++)
      if (!add_copies(types[i], ints[1 + i], s, depth)) return false;
    return true;
  default: return false; /* darray, Fortran parameterized types: passed through */
  }
}

static bool decode(MPI_Datatype t, sig_t *s, int depth) {
  int ni, na, nd, combiner;
  if (depth > 16 || PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) != MPI_SUCCESS)
    return false;
  if (combiner == MPI_COMBINER_NAMED) {
    MPI_Datatype base;
    const named_t *e = find_named(t, &base);
    if (!e) return false;
    s->base = base;
    s->n = e->multiplicity;
    return true;
  }
  int *ints = malloc(sizeof(int) * (size_t)(ni + 1));
  MPI_Aint *aints = malloc(sizeof(MPI_Aint) * (size_t)(na + 1));
  MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * (size_t)(nd + 1));
  bool ok = ints && aints && types &&
            PMPI_Type_get_contents(t, ni, na, nd, ints, aints, types) == MPI_SUCCESS;
  if (ok) ok = decode_contents(combiner, ints, nd, types, s, depth);
  for (int i = 0; types && i < nd; i++) { /* the contents' derived types are new handles */
    int ci, ca, cd, cc;
    if (PMPI_Type_get_envelope(types[i], &ci, &ca, &cd, &cc) == MPI_SUCCESS &&
        cc != MPI_COMBINER_NAMED)
      PMPI_Type_free(&types[i]);
  }
  free(ints), free(aints), free(types);
  return ok;
}

static void describe(const named_t *b, int64_t n, lay_type_t *t) {
  t->reducible = b->reduce_as >= 0 && b->multiplicity == 1;
  t->dtype = t->reducible ? (tcoll_dtype_t)b->reduce_as : TCOLL_UINT8;
  t->elem = (size_t)b->size;
  t->per_type = n;
  t->contiguous = true;
  t->lb = 0;
}

/* This thread's last predefined type and its description: a program calls with one or two types
 * again and again (predefined handles never change meaning; derived ones may be freed and
 * reused, so they are never kept). initial-exec: a plain offset from the thread pointer. */
static _Thread_local __attribute__((tls_model("initial-exec"))) struct {
  bool valid;
  MPI_Datatype type;
  lay_type_t t;
} last_named;

bool lay_type_of(MPI_Datatype datatype, lay_type_t *t) {
  if (last_named.valid && last_named.type == datatype) {
    *t = last_named.t;
    return true;
  }
  MPI_Datatype base;
  const named_t *e = find_named(datatype, &base);
  if (e && e->multiplicity == 1) { /* the common case: a table lookup */
    describe(e, 1, t);
    last_named.t = *t, last_named.type = datatype, last_named.valid = true;
    return true;
  }
  sig_t s = {MPI_DATATYPE_NULL, 0};
  if (e) {
    s.base = base;
    s.n = e->multiplicity;
  } else if (datatype == MPI_DATATYPE_NULL || !decode(datatype, &s, 0)) {
    return false;
  }
  if (s.n == 0) return false; /* an empty type: nothing to carry, MPI's business */
  const named_t *b = find_named(s.base, &base);
  MPI_Aint lb, extent, tlb, textent;
  if (!b || PMPI_Type_get_extent(datatype, &lb, &extent) != MPI_SUCCESS ||
      PMPI_Type_get_true_extent(datatype, &tlb, &textent) != MPI_SUCCESS)
    return false;
  describe(b, s.n, t);
  MPI_Aint bytes = (MPI_Aint)(s.n * b->size);
  t->contiguous = textent == bytes && extent == bytes;
  t->lb = tlb;
  return true;
}

int lay_redop_of(MPI_Op op, tcoll_dtype_t dtype) {
  bool integer = dtype != TCOLL_FLOAT32 && dtype != TCOLL_FLOAT64 && dtype != TCOLL_FLOAT16 &&
                 dtype != TCOLL_BFLOAT16;
  if (op == MPI_SUM) return TCOLL_SUM;
  if (op == MPI_PROD) return TCOLL_PRODUCT;
  if (op == MPI_MIN) return TCOLL_MIN;
  if (op == MPI_MAX) return TCOLL_MAX;
  if (!integer) return -1;
  if (op == MPI_BAND) return TCOLL_BAND;
  if (op == MPI_BOR) return TCOLL_BOR;
  if (op == MPI_BXOR) return TCOLL_BXOR;
  return -1;
}
