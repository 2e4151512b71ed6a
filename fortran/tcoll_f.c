/* The C side of the Fortran module (fortran/tcoll.F90), in libtcoll_f.
 *
 * The module's interfaces pass arrays as assumed-type, assumed-rank dummies (type(*),
 * dimension(..)) to these bind(C) functions, so each array arrives as its Fortran descriptor
 * (ISO_Fortran_binding.h): base address, type, element length, rank and extents, with no
 * copy. Here a descriptor becomes a one-dimensional tensor of all its elements, after checks
 * that name the Fortran arguments: the type is real(4|8) or integer(4|8), the array is
 * contiguous (a strided section would need a copy, and a copy could not stay pending), the
 * sizes agree. Everything else (reduce op, root, communicator, pending buffers) is checked by
 * libtcoll itself.
 *
 * The shim keeps the last failure it found itself: tcoll_f_last_error returns it when it is
 * newer than libtcoll's (libtcoll's own messages are set only inside libtcoll). */
#include <tcoll.h>

#include <ISO_Fortran_binding.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define TCOLL_F_API __attribute__((visibility("default")))

/* fortran/tcoll.f90 spells these values out as parameters: they must stay those of tcoll.h. */
_Static_assert(TCOLL_SUCCESS == 0 && TCOLL_IN_PROGRESS == 1 && TCOLL_ERR_INVALID_ARGUMENT == -1 &&
                   TCOLL_ERR_BUSY == -2 && TCOLL_ERR_NO_MEMORY == -3 && TCOLL_ERR_MPI == -4 &&
                   TCOLL_ERR_CUDA == -5 && TCOLL_ERR_UNSUPPORTED == -6 && TCOLL_ERR_MISMATCH == -7 &&
                   TCOLL_ERR_TIMEOUT == -8 && TCOLL_ERR_STATE == -9 && TCOLL_ERR_INTERNAL == -10,
               "status codes differ from fortran/tcoll.f90");
_Static_assert(TCOLL_SUM == 0 && TCOLL_AVG == 1 && TCOLL_PRODUCT == 2 && TCOLL_MIN == 3 && TCOLL_MAX == 4 &&
                   TCOLL_BAND == 5 && TCOLL_BOR == 6 && TCOLL_BXOR == 7,
               "reduce ops differ from fortran/tcoll.f90");

static _Thread_local char shim_error[512];
static _Thread_local bool shim_error_newest;

static int fail(const char *fn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(const char *fn, const char *fmt, ...) {
  int len = snprintf(shim_error, sizeof shim_error, "%s: ", fn);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(shim_error + len, sizeof shim_error - (size_t)len, fmt, ap);
  va_end(ap);
  shim_error_newest = true;
  return TCOLL_ERR_INVALID_ARGUMENT;
}

/* A libtcoll call: its failure, if any, is the newest. */
static int passed_on(int rc) {
  if (rc != TCOLL_SUCCESS && rc != TCOLL_IN_PROGRESS) shim_error_newest = false;
  return rc;
}

typedef struct {
  void *data;
  tcoll_dtype_t dtype;
  int64_t n;
} farray_t;

static const char *type_name(const CFI_cdesc_t *a, char *buf, size_t len) {
  int base = a->type & CFI_type_mask;
  const char *kind = base == CFI_type_Integer ? "integer" : base == CFI_type_Real ? "real"
                   : base == CFI_type_Complex ? "complex" : base == CFI_type_Logical ? "logical"
                   : base == CFI_type_Character ? "character" : "derived-type";
  size_t fortran_kind = base == CFI_type_Complex ? a->elem_len / 2 : a->elem_len; /* complex(4): 8 bytes */
  snprintf(buf, len, "%s(%zu)", kind, fortran_kind);
  return buf;
}

/* A Fortran array as a tensor of its n elements: real(4|8) or integer(4|8), contiguous. */
static int from_fortran(const CFI_cdesc_t *a, const char *fn, const char *name, farray_t *out) {
  int base = a->type & CFI_type_mask;
  char tn[32];
  if (base == CFI_type_Real && a->elem_len == 4) out->dtype = TCOLL_FLOAT32;
  else if (base == CFI_type_Real && a->elem_len == 8) out->dtype = TCOLL_FLOAT64;
  else if (base == CFI_type_Integer && a->elem_len == 4) out->dtype = TCOLL_INT32;
  else if (base == CFI_type_Integer && a->elem_len == 8) out->dtype = TCOLL_INT64;
  else
    return fail(fn, "%s is a %s array (expected real(4), real(8), integer(4) or integer(8))", name,
                type_name(a, tn, sizeof tn));
  if (!CFI_is_contiguous(a))
    return fail(fn, "%s is not contiguous (expected a contiguous array: tcoll works in place and does not copy "
                "a strided section)", name);
  out->n = 1;
  for (int d = 0; d < a->rank; d++) out->n *= a->dim[d].extent;
  out->data = a->base_addr;
  return TCOLL_SUCCESS;
}

static tcoll_tensor_t tensor(const farray_t *a, int64_t n) {
  int64_t shape[1] = {n};
  return tcoll_tensor_make(a->data, a->dtype, 1, shape, TCOLL_HOST);
}

/* x and y as tensors of the same type and kind (the caller checks their sizes). */
static int pair(const CFI_cdesc_t *x, const CFI_cdesc_t *y, const char *fn, farray_t *fx, farray_t *fy) {
  int rc = from_fortran(x, fn, "x", fx);
  if (!rc) rc = from_fortran(y, fn, "y", fy);
  if (rc) return rc;
  char tx[32], ty[32];
  if (fx->dtype != fy->dtype)
    return fail(fn, "x is %s but y is %s (expected the same type and kind)", type_name(x, tx, sizeof tx),
                type_name(y, ty, sizeof ty));
  return TCOLL_SUCCESS;
}

static int group_size(const char *fn, tcoll_comm_t *comm, int *n) {
  *n = tcoll_comm_size(comm);
  if (*n < 1) return fail(fn, "the communicator has no ranks (is tcoll initialized, the handle valid?)");
  return TCOLL_SUCCESS;
}

/* Nothing to send: every rank has empty arrays (the sizes agree), and a NULL base address must
 * not reach libtcoll, which would take it for "allocate the output". */
static bool empty(const farray_t *x, const farray_t *y) { return x->n == 0 && y->n == 0; }

TCOLL_F_API int tcoll_f_init(void) { return passed_on(tcoll_init(NULL, NULL)); }
TCOLL_F_API int tcoll_f_finalize(void) { return passed_on(tcoll_finalize()); }
TCOLL_F_API tcoll_comm_t *tcoll_f_comm_world(void) { return tcoll_comm_world(); }
TCOLL_F_API int tcoll_f_comm_rank(tcoll_comm_t *comm) { return tcoll_comm_rank(comm); }
TCOLL_F_API int tcoll_f_comm_size(tcoll_comm_t *comm) { return tcoll_comm_size(comm); }
TCOLL_F_API int tcoll_f_comm_free(tcoll_comm_t **comm) { return passed_on(tcoll_comm_free(comm)); }

/* comm: a Fortran MPI handle (an integer, or the MPI_VAL of mpi_f08's type(MPI_Comm)). */
TCOLL_F_API int tcoll_f_comm_from_mpi(MPI_Fint comm, tcoll_comm_t **out) {
  return passed_on(tcoll_comm_from_mpi(MPI_Comm_f2c(comm), out));
}

TCOLL_F_API int tcoll_f_all_reduce(const CFI_cdesc_t *x, CFI_cdesc_t *y, int op, tcoll_comm_t *comm) {
  const char *fn = "tcoll_all_reduce";
  farray_t fx, fy;
  int rc = pair(x, y, fn, &fx, &fy);
  if (rc) return rc;
  if (fy.n != fx.n) return fail(fn, "size(y) is %lld (expected size(x) = %lld)", (long long)fy.n, (long long)fx.n);
  if (empty(&fx, &fy)) return TCOLL_SUCCESS;
  tcoll_tensor_t in = tensor(&fx, fx.n), out = tensor(&fy, fy.n);
  return passed_on(tcoll_all_reduce(&in, op, comm, fx.data == fy.data ? &in : &out));
}

TCOLL_F_API int tcoll_f_broadcast(const CFI_cdesc_t *x, CFI_cdesc_t *y, int root, tcoll_comm_t *comm) {
  const char *fn = "tcoll_broadcast";
  farray_t fx, fy;
  int n, rc = pair(x, y, fn, &fx, &fy);
  if (!rc) rc = group_size(fn, comm, &n);
  if (rc) return rc;
  if (root < 0 || root >= n) return fail(fn, "root is %d (expected a rank in 0..%d)", root, n - 1);
  if (fy.n != fx.n) return fail(fn, "size(y) is %lld (expected size(x) = %lld)", (long long)fy.n, (long long)fx.n);
  if (empty(&fx, &fy)) return TCOLL_SUCCESS;
  tcoll_tensor_t in = tensor(&fx, fx.n), out = tensor(&fy, fy.n);
  return passed_on(tcoll_broadcast(&in, root, comm, fx.data == fy.data ? &in : &out));
}

TCOLL_F_API int tcoll_f_all_gather(const CFI_cdesc_t *x, CFI_cdesc_t *y, tcoll_comm_t *comm) {
  const char *fn = "tcoll_all_gather";
  farray_t fx, fy;
  int n, rc = pair(x, y, fn, &fx, &fy);
  if (!rc) rc = group_size(fn, comm, &n);
  if (rc) return rc;
  if (fy.n != fx.n * n)
    return fail(fn, "size(y) is %lld (expected size(x) * ranks = %lld * %d = %lld)", (long long)fy.n,
                (long long)fx.n, n, (long long)fx.n * n);
  if (empty(&fx, &fy)) return TCOLL_SUCCESS;
  tcoll_tensor_t in = tensor(&fx, fx.n), out = tensor(&fy, fy.n);
  return passed_on(tcoll_all_gather(&in, 0, comm, &out));
}

TCOLL_F_API int tcoll_f_reduce_scatter(const CFI_cdesc_t *x, CFI_cdesc_t *y, int op, tcoll_comm_t *comm) {
  const char *fn = "tcoll_reduce_scatter";
  farray_t fx, fy;
  int n, rc = pair(x, y, fn, &fx, &fy);
  if (!rc) rc = group_size(fn, comm, &n);
  if (rc) return rc;
  if (fx.n != fy.n * n)
    return fail(fn, "size(x) is %lld (expected size(y) * ranks = %lld * %d = %lld)", (long long)fx.n,
                (long long)fy.n, n, (long long)fy.n * n);
  if (empty(&fx, &fy)) return TCOLL_SUCCESS;
  tcoll_tensor_t in = tensor(&fx, fx.n), out = tensor(&fy, fy.n);
  return passed_on(tcoll_reduce_scatter(&in, op, 0, comm, &out));
}

/* Even splits: x holds one block of size(x) / ranks elements per rank, in rank order. */
TCOLL_F_API int tcoll_f_all_to_all_single(const CFI_cdesc_t *x, CFI_cdesc_t *y, tcoll_comm_t *comm) {
  const char *fn = "tcoll_all_to_all_single";
  farray_t fx, fy;
  int n, rc = pair(x, y, fn, &fx, &fy);
  if (!rc) rc = group_size(fn, comm, &n);
  if (rc) return rc;
  if (fx.n % n != 0)
    return fail(fn, "size(x) is %lld (expected a multiple of the %d ranks: one block per rank)", (long long)fx.n, n);
  if (fy.n != fx.n) return fail(fn, "size(y) is %lld (expected size(x) = %lld)", (long long)fy.n, (long long)fx.n);
  if (empty(&fx, &fy)) return TCOLL_SUCCESS;
  /* Rows of one element: splits are then element counts, and NULL, NULL means even. */
  tcoll_tensor_t in = tensor(&fx, fx.n), out = tensor(&fy, fy.n);
  return passed_on(tcoll_all_to_all_single(&in, NULL, NULL, comm, &out));
}

static int buffer_of(const CFI_cdesc_t *y, const char *fn, void **data) {
  farray_t fy;
  int rc = from_fortran(y, fn, "y", &fy);
  *data = fy.data;
  return rc;
}

TCOLL_F_API int tcoll_f_wait(const CFI_cdesc_t *y) {
  void *data;
  int rc = buffer_of(y, "tcoll_wait", &data);
  return rc ? rc : data ? passed_on(tcoll_wait(data)) : TCOLL_SUCCESS;
}

TCOLL_F_API int tcoll_f_test(const CFI_cdesc_t *y) {
  void *data;
  int rc = buffer_of(y, "tcoll_test", &data);
  return rc ? rc : data ? passed_on(tcoll_test(data)) : TCOLL_SUCCESS;
}

TCOLL_F_API int tcoll_f_wait_all(void) { return passed_on(tcoll_wait_all()); }
TCOLL_F_API const char *tcoll_f_status_string(int status) { return tcoll_status_string(status); }
TCOLL_F_API const char *tcoll_f_last_error(void) { return shim_error_newest ? shim_error : tcoll_last_error(); }
