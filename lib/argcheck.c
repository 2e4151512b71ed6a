#include "argcheck.h"

#include "comm.h"
#include "device/device.h"
#include "base/dtype.h"
#include "tensor.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID(...) tc_error(TCOLL_ERR_INVALID_ARGUMENT, __VA_ARGS__)

/* ------------------------------------------------------------------ building blocks */

int tc_check_tensor(const tcoll_tensor_t *t, const char *name) {
  int rc = tc_check_tensor_desc(t, name);
  if (rc) return rc;
  if (!t->data && tcoll_tensor_numel(t) > 0)
    return INVALID("%s->data is NULL with %lld elements (expected a buffer)", name,
                   (long long)tcoll_tensor_numel(t));
  return tc_dev_check_pointer(t->data, t->device, name);
}

int tc_check_output(const tcoll_tensor_t *out, const char *name, tcoll_dtype_t dtype, int ndim,
                    const int64_t *shape, int device) {
  if (!out)
    return INVALID("%s is NULL (expected a tensor, with data == NULL to have tcoll allocate it)",
                   name);
  if (!out->data) return tc_dev_check(device, name);
  int rc = tc_check_tensor_desc(out, name);
  if (rc) return rc;
  if (out->dtype != dtype)
    return INVALID("%s->dtype is %s (expected %s)", name, tcoll_dtype_name(out->dtype),
                   tcoll_dtype_name(dtype));
  if (!tc_same_shape(out->ndim, out->shape, ndim, shape)) {
    char got[128], want[128];
    return INVALID("%s->shape is %s (expected %s)", name,
                   tc_shape_str(got, sizeof got, out->ndim, out->shape),
                   tc_shape_str(want, sizeof want, ndim, shape));
  }
  if (out->device != device)
    return INVALID("%s->device is %d (expected %d, the input's device)", name, out->device, device);
  return tc_dev_check_pointer(out->data, out->device, name);
}

int tc_check_dim(int dim, int ndim, const char *name, int *norm) {
  if (ndim < 1) return INVALID("%s needs a tensor with at least 1 dim, got a 0-dim tensor", name);
  if (dim < -ndim || dim >= ndim)
    return INVALID("%s is %d (expected -%d..%d)", name, dim, ndim, ndim - 1);
  *norm = dim < 0 ? dim + ndim : dim;
  return TCOLL_SUCCESS;
}

int tc_check_rank(int rank, const tcoll_comm_t *comm, const char *name) {
  if (rank < 0 || rank >= comm->size)
    return INVALID("%s is %d (expected a rank in [0, %d))", name, rank, comm->size);
  return TCOLL_SUCCESS;
}

int tc_check_disjoint(const tcoll_tensor_t *out, const char *oname, const tcoll_tensor_t *in,
                      const char *iname, bool same_ok) {
  if (!out->data || !in->data) return TCOLL_SUCCESS;
  uintptr_t ob = (uintptr_t)out->data, oe = ob + tc_nbytes(out);
  uintptr_t ib = (uintptr_t)in->data, ie = ib + tc_nbytes(in);
  if (same_ok && ob == ib && oe == ie) return TCOLL_SUCCESS;
  if (ob < ie && ib < oe)
    return INVALID(
        "%s (%p) overlaps %s (%p) (expected %s)", oname, out->data, iname, in->data,
        same_ok ? "the same buffer for in place, or disjoint buffers" : "disjoint buffers");
  return TCOLL_SUCCESS;
}

static int check_n(int n, const char *name) {
  if (n < 0) return INVALID("%s is %d (expected >= 0)", name, n);
  return TCOLL_SUCCESS;
}

static int check_array(const void *p, int n, const char *name) {
  if (n > 0 && !p) return INVALID("%s is NULL (expected %d entries)", name, n);
  return TCOLL_SUCCESS;
}

static int check_same_device(const tcoll_tensor_t *t, const char *name, int device) {
  if (t->device != device)
    return INVALID("%s->device is %d (expected %d, the input's device)", name, t->device, device);
  return TCOLL_SUCCESS;
}

/* Whether outputs overlap inputs (an output may coincide exactly with its own input when
 * same_ok). Sorting the outputs once and searching each input among them keeps this
 * O(n log n): coalesced calls carry many tensors. Outputs overlapping each other are the
 * registry's to refuse. Names are formatted only to report a failure. */
typedef struct span {
  uintptr_t b, e;
  int idx;
} span_t;

static void insertion_sort_spans(span_t *v, int m) {
  for (int i = 1; i < m; i++) {
    span_t x = v[i];
    int k = i;
    for (; k > 0 && v[k - 1].b > x.b; k--) v[k] = v[k - 1];
    v[k] = x;
  }
}

/* Merge sort (insertion sort below 16: outputs allocated one after the other come nearly in
 * order, which it handles in a pass; qsort's callbacks cost more at these sizes); tmp: room for
 * m / 2 spans. */
static void sort_spans(span_t *v, int m, span_t *tmp) {
  if (m <= 16) {
    insertion_sort_spans(v, m);
    return;
  }
  int h = m / 2;
  sort_spans(v, h, tmp);
  sort_spans(v + h, m - h, tmp);
  if (v[h - 1].b <= v[h].b) return;
  memcpy(tmp, v, (size_t)h * sizeof *v);
  int a = 0, b = h, o = 0;
  while (a < h && b < m) v[o++] = tmp[a].b <= v[b].b ? tmp[a++] : v[b++];
  while (a < h) v[o++] = tmp[a++];
}

static int report_overlap(const tcoll_tensor_t *out, int i, const tcoll_tensor_t *in, int j,
                          bool same_ok) {
  char oname[32], iname[32];
  snprintf(oname, sizeof oname, "out[%d]", i);
  snprintf(iname, sizeof iname, "in[%d]", j);
  return tc_check_disjoint(&out[i], oname, &in[j], iname, same_ok && i == j);
}

/* Fills v with the spans of t's tensors that have storage, sorted by base; their count. */
static int sorted_spans(const tcoll_tensor_t *t, int n, span_t *v, span_t *tmp) {
  int m = 0;
  for (int i = 0; i < n; i++)
    if (t[i].data)
      v[m++] = (span_t){(uintptr_t)t[i].data, (uintptr_t)t[i].data + tc_nbytes(&t[i]), i};
  sort_spans(v, m, tmp);
  return m;
}

/* Every input disjoint from every output (out[i] may be in[i] itself where same_ok). Both lists
 * sorted by base, then one sweep: outputs that end before an input's base end before every later
 * input's too and are passed for good; the first output left ends after the input's base, so it
 * overlaps the input if it starts before the input's end, and so does any later one that starts
 * before that end (outputs overlapping one another are refused later, by the registry: the
 * first one reported is still a true overlap). */
static int check_lists_disjoint(const tcoll_tensor_t *out, const tcoll_tensor_t *in, int n,
                                bool same_ok) {
  span_t small[3 * 64], *v = n <= 64 ? small : malloc((size_t)3 * (size_t)n * sizeof *v);
  if (!v) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %d spans", n);
  span_t *outs = v, *ins = v + n, *tmp = v + 2 * n; /* the sort's scratch: n / 2 spans */
  int mo = sorted_spans(out, n, outs, tmp), mi = sorted_spans(in, n, ins, tmp), rc = TCOLL_SUCCESS;
  int k = 0; /* first output that may still overlap an input to come (inputs by rising base) */
  for (int j = 0; j < mi && !rc; j++) {
    while (k < mo && outs[k].e <= ins[j].b) k++;
    for (int q = k; q < mo && outs[q].b < ins[j].e && !rc; q++) {
      bool own =
          same_ok && outs[q].idx == ins[j].idx && outs[q].b == ins[j].b && outs[q].e == ins[j].e;
      if (!own) rc = report_overlap(out, outs[q].idx, in, ins[j].idx, same_ok);
    }
  }
  if (v != small) free(v);
  return rc;
}

int tc_check_copy(const tcoll_tensor_t *dst, const tcoll_tensor_t *src) {
  int rc = tc_check_tensor(src, "src");
  if (!rc) rc = tc_check_tensor(dst, "dst");
  if (rc) return rc;
  if (dst->dtype != src->dtype)
    return INVALID("dst->dtype is %s but src->dtype is %s (expected the same)",
                   tcoll_dtype_name(dst->dtype), tcoll_dtype_name(src->dtype));
  if (tcoll_tensor_numel(dst) != tcoll_tensor_numel(src))
    return INVALID("dst has %lld elements but src has %lld (expected the same)",
                   (long long)tcoll_tensor_numel(dst), (long long)tcoll_tensor_numel(src));
  return TCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ shape rules */

int tc_all_gather_shape(const tcoll_tensor_t *in, int dim, int group_size, int64_t *shape) {
  int64_t gathered;
  if (tc_mul_overflows(in->shape[dim], group_size, &gathered)) /* shape is left untouched */
    return INVALID("gathered dim %d (%lld x %d) overflows", dim, (long long)in->shape[dim],
                   group_size);
  memcpy(shape, in->shape, (size_t)in->ndim * sizeof *shape);
  shape[dim] = gathered;
  return TCOLL_SUCCESS;
}

int tc_reduce_scatter_shape(const tcoll_tensor_t *in, int dim, int group_size, int64_t *shape) {
  if (in->shape[dim] % group_size != 0)
    return INVALID("input dimension %d (%lld) must be a multiple of group_size %d", dim,
                   (long long)in->shape[dim], group_size);
  memcpy(shape, in->shape, (size_t)in->ndim * sizeof *shape);
  shape[dim] /= group_size;
  return TCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ fused checks
 *
 * The single-tensor collectives check their input and an output shaped exactly like it on every
 * call: a valid call passes them in one pass over the shape, and only a call that fails one runs
 * the detailed checks above, whose messages name what is wrong. */

/* Whether t's description is valid and it has data (tc_check_tensor would pass but for the
 * pointer query, which the callers make: it can fail with a backend error to report), and its
 * bytes; false when in doubt. like: a shape t's must equal (NULL: none). */
static inline bool quick_desc(const tcoll_tensor_t *t, const int64_t *like, size_t *nbytes) {
  if (!t || !tc_dtype_valid(t->dtype) || t->ndim < 0 || t->ndim > TCOLL_MAX_DIMS) return false;
  uint64_t n = tc_dtype_size(t->dtype);
  bool empty = false, over = false;
  for (int i = 0; i < t->ndim; i++) {
    int64_t s = t->shape[i];
    if (s < 0 || (like && like[i] != s)) return false;
    empty |= s == 0;
    over |= __builtin_mul_overflow(n, (uint64_t)s, &n);
  }
  if (empty)
    n = 0;
  else if (over || n > (uint64_t)INT64_MAX)
    return false; /* an empty tensor's other dims may be anything */
  if (!t->data && n > 0) return false;
  if (t->device != TCOLL_HOST && (t->device < 0 || t->device >= tc_dev_count())) return false;
  *nbytes = (size_t)n;
  return true;
}

static bool quick_tensor(const tcoll_tensor_t *t, size_t *nbytes) {
  return quick_desc(t, NULL, nbytes);
}

/* Whether out is to be allocated, or has exactly in's dtype, shape and device. */
static bool quick_like(const tcoll_tensor_t *out, const tcoll_tensor_t *in) {
  return out && (!out->data ||
                 (out->dtype == in->dtype && out->ndim == in->ndim && out->device == in->device &&
                  tc_same_shape(out->ndim, out->shape, in->ndim, in->shape)));
}

/* Both at once, in one pass over the shape: what quick_tensor(in) and quick_like(out, in) say
 * together (the usual call passes both: the single-tensor collectives run this first). */
static bool quick_in_out(const tcoll_tensor_t *in, const tcoll_tensor_t *out, size_t *nbytes) {
  if (!in || !out) return false;
  bool compare = out->data != NULL; /* an output to allocate has no shape of its own yet */
  if (compare && (out->dtype != in->dtype || out->ndim != in->ndim || out->device != in->device))
    return false;
  return quick_desc(in, compare ? out->shape : NULL, nbytes);
}

/* The rest of check_out_like, for an output that passed quick_like. */
static inline int check_like_out(const tcoll_tensor_t *out, const tcoll_tensor_t *in, size_t nb,
                                 bool same_ok) {
  if (!out->data || !in->data) return TCOLL_SUCCESS; /* to allocate: on in's device, checked */
  int rc =
      tc_dev_check_pointer(out->data, out->device, "out"); /* the device field is not trusted */
  if (rc) return rc;
  uintptr_t ob = (uintptr_t)out->data, ib = (uintptr_t)in->data;
  if ((same_ok && ob == ib) || ob >= ib + nb || ib >= ob + nb) return TCOLL_SUCCESS;
  return tc_check_disjoint(out, "out", in, "in", same_ok);
}

/* An output exactly like the checked input in (of nb bytes), disjoint from it unless the same
 * buffer and same_ok. */
static int check_out_like(const tcoll_tensor_t *out, const tcoll_tensor_t *in, size_t nb,
                          bool same_ok) {
  if (!quick_like(out, in)) {
    int rc = tc_check_output(out, "out", in->dtype, in->ndim, in->shape, in->device);
    return rc ? rc : tc_check_disjoint(out, "out", in, "in", same_ok);
  }
  return check_like_out(out, in, nb, same_ok);
}

/* The input's checks: quick, or detailed when quick has a doubt. */
static int check_input(const tcoll_tensor_t *in, size_t *nb) {
  if (quick_tensor(in, nb)) return tc_dev_check_pointer(in->data, in->device, "in");
  int rc = tc_check_tensor(in, "in");
  if (!rc) *nb = tcoll_tensor_nbytes(in);
  return rc;
}

/* ------------------------------------------------------------------ per collective */

int tc_check_all_reduce(const tcoll_tensor_t *in, tcoll_redop_t op, tcoll_comm_t *comm,
                        const tcoll_tensor_t *out, tcoll_comm_t **c, tc_redop_t *rop) {
  int rc;
  size_t nb;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  /* In the order of the messages: in, op, out (quick: in and out valid, pointers unchecked). */
  bool quick = quick_in_out(in, out, &nb);
  if ((rc = quick ? tc_dev_check_pointer(in->data, in->device, "in") : check_input(in, &nb)))
    return rc;
  if ((rc = tc_redop_resolve(op, in->dtype, "op", rop))) return rc;
  return quick ? check_like_out(out, in, nb, true) : check_out_like(out, in, nb, true);
}

/* Entry i of a coalesced all_reduce; in/out name its tensors in messages. */
static int ar_entry(const tcoll_tensor_t *in, const tcoll_tensor_t *out, int i, tcoll_redop_t op,
                    tc_redop_t *rop, const char *iname, const char *oname) {
  int rc;
  if ((rc = tc_check_tensor(&in[i], iname))) return rc;
  if ((rc = check_same_device(&in[i], iname, in[0].device))) return rc;
  if ((rc = tc_redop_resolve(op, in[i].dtype, "op", rop))) return rc;
  return tc_check_output(&out[i], oname, in[i].dtype, in[i].ndim, in[i].shape, in[i].device);
}

/* Entry i's pointer queries, for entries that passed the quick checks. */
static int pointers_entry(const tcoll_tensor_t *in, const tcoll_tensor_t *out, int i,
                          const char *iname, const char *oname) {
  int rc = tc_dev_check_pointer(in[i].data, in[i].device, iname);
  if (!rc && out[i].data) rc = tc_dev_check_pointer(out[i].data, out[i].device, oname);
  return rc;
}

/* Runs CALL, whose names are placeholders, and only when it fails runs RENAME (which points
 * them at real names, "in[3]") and CALL again for the message: a valid call formats nothing (an
 * snprintf is ~800 instructions; a list all_to_all of two ranks once spent 70% of its own time
 * formatting names). A failure that does not happen twice (a device query that failed once)
 * keeps the first one's status and message. */
#define CHECK_RENAMED(CALL, RENAME)                              \
  do {                                                           \
    int rc_ = (CALL);                                            \
    if (rc_) {                                                   \
      char first_[1024];                                         \
      snprintf(first_, sizeof first_, "%s", tcoll_last_error()); \
      RENAME;                                                    \
      int again_ = (CALL);                                       \
      if (!again_) tc_restore_error(first_);                     \
      return again_ ? again_ : rc_;                              \
    }                                                            \
  } while (0)

/* "name[i]" for an entry of a list, "name" for a single tensor. */
static const char *entry_name(char *buf, size_t len, const char *name, bool list, int i) {
  if (!list) return name;
  snprintf(buf, len, "%s[%d]", name, i);
  return buf;
}

/* CALL on entry i_ of the in and out lists of n entries, named iname and oname. */
#define CHECK_ENTRIES(n, CALL)                                                     \
  for (int i_ = 0; i_ < (n); i_++) {                                               \
    const char *iname = "in[i]", *oname = "out[i]";                                \
    char ibuf[32], obuf[32];                                                       \
    CHECK_RENAMED(CALL, (iname = entry_name(ibuf, sizeof ibuf, "in", true, i_),    \
                         oname = entry_name(obuf, sizeof obuf, "out", true, i_))); \
  }

int tc_check_all_reduce_coalesced(const tcoll_tensor_t *in, int n, tcoll_redop_t op,
                                  tcoll_comm_t *comm, const tcoll_tensor_t *out, tcoll_comm_t **c,
                                  tc_redop_t *rop) {
  int rc;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = check_n(n, "n")) || (rc = check_array(in, n, "in")) ||
      (rc = check_array(out, n, "out")))
    return rc;
  if (n == 0) return tc_redop_lookup(op, "op", rop);
  /* Entries that pass the quick checks are done; the first that does not gets the detailed ones
   * (from it on: they name what is wrong, with its index). */
  int i = 0;
  for (size_t nb; i < n; i++)
    if (!quick_tensor(&in[i], &nb) || in[i].device != in[0].device ||
        !quick_like(&out[i], &in[i]) ||
        tc_redop_resolve(op, in[i].dtype, "op", rop) != TCOLL_SUCCESS)
      break;
  if (i < n) {
    CHECK_ENTRIES(n, ar_entry(in, out, i_, op, rop, iname, oname))
  } else {
    CHECK_ENTRIES(n, pointers_entry(in, out, i_, iname, oname))
  }
  return check_lists_disjoint(out, in, n, true);
}

int tc_check_all_gather(const tcoll_tensor_t *in, int gather_dim, tcoll_comm_t *comm,
                        const tcoll_tensor_t *out, tcoll_comm_t **c, int *dim, bool *inplace) {
  int rc;
  int64_t shape[TCOLL_MAX_DIMS];
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = tc_check_tensor(in, "in"))) return rc;
  if ((rc = tc_check_dim(gather_dim, in->ndim, "gather_dim", dim))) return rc;
  if ((rc = tc_all_gather_shape(in, *dim, (*c)->size, shape))) return rc;
  if ((rc = tc_check_output(out, "out", in->dtype, in->ndim, shape, in->device))) return rc;
  size_t nb = tcoll_tensor_nbytes(in);
  /* NCCL's in-place form: the input is this rank's own slice of the output. */
  *inplace = *dim == 0 && out->data && in->data && nb > 0 &&
             (char *)in->data == (char *)out->data + (size_t)(*c)->rank * nb;
  return *inplace ? TCOLL_SUCCESS : tc_check_disjoint(out, "out", in, "in", false);
}

static int ag_entry(const tcoll_tensor_t *in, const tcoll_tensor_t *out, int i, int size,
                    const char *iname, const char *oname) {
  int rc, dim;
  int64_t shape[TCOLL_MAX_DIMS];
  if ((rc = tc_check_tensor(&in[i], iname))) return rc;
  if ((rc = check_same_device(&in[i], iname, in[0].device))) return rc;
  if ((rc = tc_check_dim(0, in[i].ndim, iname, &dim))) return rc;
  if ((rc = tc_all_gather_shape(&in[i], 0, size, shape))) return rc;
  return tc_check_output(&out[i], oname, in[i].dtype, in[i].ndim, shape, in[i].device);
}

int tc_check_all_gather_coalesced(const tcoll_tensor_t *in, int n, tcoll_comm_t *comm,
                                  const tcoll_tensor_t *out, tcoll_comm_t **c) {
  int rc;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = check_n(n, "n")) || (rc = check_array(in, n, "in")) ||
      (rc = check_array(out, n, "out")))
    return rc;
  int size = (*c)->size;
  CHECK_ENTRIES(n, ag_entry(in, out, i_, size, iname, oname))
  return check_lists_disjoint(out, in, n, false);
}

int tc_check_reduce_scatter(const tcoll_tensor_t *in, tcoll_redop_t op, int scatter_dim,
                            tcoll_comm_t *comm, const tcoll_tensor_t *out, tcoll_comm_t **c,
                            tc_redop_t *rop, int *dim) {
  int rc;
  int64_t shape[TCOLL_MAX_DIMS];
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = tc_check_tensor(in, "in"))) return rc;
  if ((rc = tc_redop_resolve(op, in->dtype, "op", rop))) return rc;
  if ((rc = tc_check_dim(scatter_dim, in->ndim, "scatter_dim", dim))) return rc;
  if ((rc = tc_reduce_scatter_shape(in, *dim, (*c)->size, shape))) return rc;
  if ((rc = tc_check_output(out, "out", in->dtype, in->ndim, shape, in->device))) return rc;
  return tc_check_disjoint(out, "out", in, "in", false);
}

static int rs_entry(const tcoll_tensor_t *in, const tcoll_tensor_t *out, int i, tcoll_redop_t op,
                    const int *scatter_dims, int size, tc_redop_t *rop, int *dims,
                    const char *iname, const char *oname) {
  int rc;
  int64_t shape[TCOLL_MAX_DIMS];
  char dname[32];
  if ((rc = tc_check_tensor(&in[i], iname))) return rc;
  if ((rc = check_same_device(&in[i], iname, in[0].device))) return rc;
  if ((rc = tc_redop_resolve(op, in[i].dtype, "op", rop))) return rc;
  if (scatter_dims[i] < -in[i].ndim || scatter_dims[i] >= in[i].ndim || in[i].ndim < 1) {
    snprintf(dname, sizeof dname, "scatter_dims[%d]", i);
    return tc_check_dim(scatter_dims[i], in[i].ndim, dname, &dims[i]);
  }
  dims[i] = scatter_dims[i] < 0 ? scatter_dims[i] + in[i].ndim : scatter_dims[i];
  if (in[i].shape[dims[i]] % size != 0)
    return INVALID(
        "input dimension %d (%lld) must be a multiple of group_size %d for tensor at index %d",
        dims[i], (long long)in[i].shape[dims[i]], size, i);
  if ((rc = tc_reduce_scatter_shape(&in[i], dims[i], size, shape))) return rc;
  return tc_check_output(&out[i], oname, in[i].dtype, in[i].ndim, shape, in[i].device);
}

int tc_check_reduce_scatter_coalesced(const tcoll_tensor_t *in, int n, tcoll_redop_t op,
                                      const int *scatter_dims, tcoll_comm_t *comm,
                                      const tcoll_tensor_t *out, tcoll_comm_t **c, tc_redop_t *rop,
                                      int *dims) {
  int rc;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = check_n(n, "n")) || (rc = check_array(in, n, "in")) ||
      (rc = check_array(out, n, "out")) || (rc = check_array(scatter_dims, n, "scatter_dims")))
    return rc;
  if (n == 0) return tc_redop_lookup(op, "op", rop);
  int size = (*c)->size;
  CHECK_ENTRIES(n, rs_entry(in, out, i_, op, scatter_dims, size, rop, dims, iname, oname))
  return check_lists_disjoint(out, in, n, false);
}

static int check_splits(const int64_t *splits, int n, const char *name, int64_t *sum) {
  *sum = 0;
  for (int i = 0; i < n; i++) {
    if (splits[i] < 0)
      return INVALID("%s[%d] is %lld (expected >= 0)", name, i, (long long)splits[i]);
    if (__builtin_add_overflow(*sum, splits[i], sum))
      return INVALID("%s sum to more than 2^63 rows (%s[%d] is %lld)", name, name, i,
                     (long long)splits[i]);
  }
  return TCOLL_SUCCESS;
}

int tc_check_all_to_all_single(const tcoll_tensor_t *in, const int64_t *output_split_sizes,
                               const int64_t *input_split_sizes, tcoll_comm_t *comm,
                               const tcoll_tensor_t *out, tcoll_comm_t **c, int64_t *out_rows) {
  int rc;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = tc_check_tensor(in, "in"))) return rc;
  if (in->ndim < 1)
    return INVALID("in is a 0-dim tensor (expected at least 1 dim: splits are rows of dim 0)");
  int size = (*c)->size;
  if (!output_split_sizes != !input_split_sizes)
    return INVALID(
        "output_split_sizes and input_split_sizes must either be specified together or both set to "
        "NULL");
  if (!input_split_sizes) {
    if (in->shape[0] % size != 0)
      return INVALID(
          "in->shape[0] is %lld, not a multiple of the group size %d (expected even splits with "
          "NULL "
          "split sizes)",
          (long long)in->shape[0], size);
    *out_rows = in->shape[0];
  } else {
    int64_t isum, osum;
    if ((rc = check_splits(input_split_sizes, size, "input_split_sizes", &isum))) return rc;
    if ((rc = check_splits(output_split_sizes, size, "output_split_sizes", &osum))) return rc;
    if (isum != in->shape[0])
      return INVALID("input_split_sizes sum to %lld rows but input has %lld", (long long)isum,
                     (long long)in->shape[0]);
    *out_rows = osum;
  }
  int64_t shape[TCOLL_MAX_DIMS];
  memcpy(shape, in->shape, sizeof shape);
  shape[0] = *out_rows;
  /* The rows come from the caller: the output they describe must be representable. */
  tcoll_tensor_t want = tcoll_tensor_make(NULL, in->dtype, in->ndim, shape, in->device);
  if (tc_check_tensor_desc(&want, "out") != TCOLL_SUCCESS)
    return INVALID("output_split_sizes sum to %lld rows: out would have more than 2^63 bytes",
                   (long long)*out_rows);
  if ((rc = tc_check_output(out, "out", in->dtype, in->ndim, shape, in->device))) return rc;
  return tc_check_disjoint(out, "out", in, "in", false);
}

int tc_check_broadcast(const tcoll_tensor_t *in, int src, tcoll_comm_t *comm,
                       const tcoll_tensor_t *out, tcoll_comm_t **c) {
  int rc;
  size_t nb;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = check_input(in, &nb))) return rc;
  if ((rc = tc_check_rank(src, *c, "src"))) return rc;
  return check_out_like(out, in, nb, true);
}

int tc_check_permute(const tcoll_tensor_t *in, const int *src_dst, tcoll_comm_t *comm,
                     const tcoll_tensor_t *out, tcoll_comm_t **c) {
  int rc;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = tc_check_tensor(in, "in"))) return rc;
  int size = (*c)->size;
  if (!src_dst) return INVALID("src_dst is NULL (expected %d destinations)", size);
  /* On the stack for the usual group sizes: a call allocates nothing on the host path. */
  int on_stack[64],
      *from = size <= (int)TC_ARRAY_LEN(on_stack) ? on_stack : malloc((size_t)size * sizeof *from);
  if (!from) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %d entries", size);
  for (int i = 0; i < size; i++) from[i] = -1;
  rc = TCOLL_SUCCESS;
  for (int m = 0; m < size && !rc; m++) {
    int d = src_dst[m];
    if (d < 0 || d >= size)
      rc = INVALID("src_dst[%d] is %d (expected a rank in [0, %d))", m, d, size);
    else if (from[d] >= 0)
      rc = INVALID("src_dst is not a permutation: rank %d is the destination of both %d and %d", d,
                   from[d], m);
    else
      from[d] = m;
  }
  if (from != on_stack) free(from);
  if (rc) return rc;
  if ((rc = tc_check_output(out, "out", in->dtype, in->ndim, in->shape, in->device))) return rc;
  return tc_check_disjoint(out, "out", in, "in", false);
}

int tc_check_shard_dim_all_to_all(const tcoll_tensor_t *in, int gather_dim, int shard_dim,
                                  tcoll_comm_t *comm, const tcoll_tensor_t *out, tcoll_comm_t **c,
                                  int *gdim, int *sdim) {
  int rc;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = tc_check_tensor(in, "in"))) return rc;
  if ((rc = tc_check_dim(gather_dim, in->ndim, "gather_dim", gdim))) return rc;
  if ((rc = tc_check_dim(shard_dim, in->ndim, "shard_dim", sdim))) return rc;
  int64_t shape[TCOLL_MAX_DIMS];
  if ((rc = tc_reduce_scatter_shape(in, *sdim, (*c)->size, shape))) return rc;
  int64_t gathered;
  if (tc_mul_overflows(shape[*gdim], (*c)->size, &gathered))
    return INVALID("gathered dim %d (%lld x %d) overflows", *gdim, (long long)shape[*gdim],
                   (*c)->size);
  shape[*gdim] = gathered;
  if ((rc = tc_check_output(out, "out", in->dtype, in->ndim, shape, in->device))) return rc;
  return tc_check_disjoint(out, "out", in, "in", false);
}

int tc_check_reduce(const tcoll_tensor_t *in, int dst, tcoll_redop_t op, tcoll_comm_t *comm,
                    const tcoll_tensor_t *out, tcoll_comm_t **c, tc_redop_t *rop) {
  int rc;
  size_t nb;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = check_input(in, &nb))) return rc;
  if ((rc = tc_check_rank(dst, *c, "dst"))) return rc;
  if ((rc = tc_redop_resolve(op, in->dtype, "op", rop))) return rc;
  return check_out_like(out, in, nb, true);
}

/* Entry i of a list (named ename, the list name) shaped and typed like ref (outputs: data may
 * be NULL). */
static int list_entry_like(const tcoll_tensor_t *list, int i, const char *ename, const char *name,
                           const tcoll_tensor_t *ref, bool outputs) {
  int rc;
  if (outputs)
    return tc_check_output(&list[i], ename, ref->dtype, ref->ndim, ref->shape, ref->device);
  if ((rc = tc_check_tensor(&list[i], ename))) return rc;
  if (list[i].dtype != ref->dtype ||
      !tc_same_shape(list[i].ndim, list[i].shape, ref->ndim, ref->shape))
    return INVALID(
        "%s differs from %s[0] in dtype or shape (expected one dtype and shape for the list)",
        ename, name);
  return check_same_device(&list[i], ename, ref->device);
}

/* n tensors all shaped and typed like ref (outputs: data may be NULL). */
static int check_list_like(const tcoll_tensor_t *list, int n, const char *name,
                           const tcoll_tensor_t *ref, bool outputs) {
  for (int i = 0; i < n; i++) {
    const char *ename = name;
    char buf[48];
    CHECK_RENAMED(list_entry_like(list, i, ename, name, ref, outputs),
                  ename = entry_name(buf, sizeof buf, name, true, i));
  }
  return TCOLL_SUCCESS;
}

/* Outputs must not overlap any input (the registry catches outputs overlapping each other).
 * Entries of a list are named with their index ("ins[0]", also in a list of one), a single
 * tensor by its argument name ("out"). */
static int check_list_disjoint(const tcoll_tensor_t *outs, int nout, const char *oname, bool olist,
                               const tcoll_tensor_t *ins, int nin, const char *iname, bool ilist) {
  for (int i = 0; i < nout; i++)
    for (int j = 0; j < nin; j++) {
      const char *a = oname, *b = iname;
      char abuf[48], bbuf[48];
      CHECK_RENAMED(tc_check_disjoint(&outs[i], a, &ins[j], b, false),
                    (a = entry_name(abuf, sizeof abuf, oname, olist, i),
                     b = entry_name(bbuf, sizeof bbuf, iname, ilist, j)));
    }
  return TCOLL_SUCCESS;
}

int tc_check_gather(const tcoll_tensor_t *in, int dst, tcoll_comm_t *comm,
                    const tcoll_tensor_t *outs, tcoll_comm_t **c) {
  int rc;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = tc_check_tensor(in, "in"))) return rc;
  if ((rc = tc_check_rank(dst, *c, "dst"))) return rc;
  if ((*c)->rank != dst) return TCOLL_SUCCESS; /* outs is not used here */
  if (!outs) return INVALID("outs is NULL on dst (expected %d tensors)", (*c)->size);
  if ((rc = check_list_like(outs, (*c)->size, "outs", in, true))) return rc;
  return check_list_disjoint(outs, (*c)->size, "outs", true, in, 1, "in", false);
}

int tc_check_scatter(const tcoll_tensor_t *ins, int src, tcoll_comm_t *comm,
                     const tcoll_tensor_t *out, tcoll_comm_t **c) {
  int rc;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = tc_check_rank(src, *c, "src"))) return rc;
  if ((rc = tc_check_tensor_desc(out, "out")))
    return rc; /* *out describes the piece, also with data NULL */
  if ((*c)->rank != src) return TCOLL_SUCCESS;
  if (!ins) return INVALID("ins is NULL on src (expected %d tensors)", (*c)->size);
  if ((rc = check_list_like(ins, (*c)->size, "ins", &ins[0], false))) return rc;
  if ((rc = tc_check_output(out, "out", ins[0].dtype, ins[0].ndim, ins[0].shape, ins[0].device)))
    return rc;
  if (out->dtype != ins[0].dtype ||
      !tc_same_shape(out->ndim, out->shape, ins[0].ndim, ins[0].shape))
    return INVALID(
        "out describes a different piece than ins[0] (expected the same dtype and shape)");
  return check_list_disjoint(out, 1, "out", false, ins, (*c)->size, "ins", true);
}

int tc_check_all_gather_list(const tcoll_tensor_t *in, tcoll_comm_t *comm,
                             const tcoll_tensor_t *outs, tcoll_comm_t **c) {
  int rc;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if ((rc = tc_check_tensor(in, "in"))) return rc;
  if (!outs) return INVALID("outs is NULL (expected %d tensors)", (*c)->size);
  if ((rc = check_list_like(outs, (*c)->size, "outs", in, true))) return rc;
  return check_list_disjoint(outs, (*c)->size, "outs", true, in, 1, "in", false);
}

int tc_check_reduce_scatter_list(const tcoll_tensor_t *ins, tcoll_redop_t op, tcoll_comm_t *comm,
                                 const tcoll_tensor_t *out, tcoll_comm_t **c, tc_redop_t *rop) {
  int rc;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  if (!ins) return INVALID("ins is NULL (expected %d tensors)", (*c)->size);
  if ((rc = tc_check_tensor(&ins[0], "ins[0]"))) return rc;
  if ((rc = check_list_like(ins, (*c)->size, "ins", &ins[0], false))) return rc;
  if ((rc = tc_redop_resolve(op, ins[0].dtype, "op", rop))) return rc;
  if ((rc = tc_check_output(out, "out", ins[0].dtype, ins[0].ndim, ins[0].shape, ins[0].device)))
    return rc;
  return check_list_disjoint(out, 1, "out", false, ins, (*c)->size, "ins", true);
}

static int a2a_input(const tcoll_tensor_t *ins, int i, const char *name) {
  int rc;
  if ((rc = tc_check_tensor(&ins[i], name))) return rc;
  if (ins[i].dtype != ins[0].dtype)
    return INVALID("%s->dtype is %s (expected %s, as ins[0])", name, tcoll_dtype_name(ins[i].dtype),
                   tcoll_dtype_name(ins[0].dtype));
  return check_same_device(&ins[i], name, ins[0].device);
}

/* outs[i] describes what rank i sends: its own shape, ins[0]'s dtype and device. */
static int a2a_output(const tcoll_tensor_t *outs, int i, const char *name,
                      const tcoll_tensor_t *in0) {
  int rc;
  if ((rc = tc_check_tensor_desc(&outs[i], name))) return rc;
  return tc_check_output(&outs[i], name, in0->dtype, outs[i].ndim, outs[i].shape, in0->device);
}

int tc_check_all_to_all(const tcoll_tensor_t *ins, tcoll_comm_t *comm, const tcoll_tensor_t *outs,
                        tcoll_comm_t **c) {
  int rc;
  if ((rc = tc_comm_resolve(comm, "comm", c))) return rc;
  int size = (*c)->size;
  if (!ins) return INVALID("ins is NULL (expected %d tensors)", size);
  if (!outs) return INVALID("outs is NULL (expected %d tensors)", size);
  for (int i = 0; i < size; i++) {
    const char *name = "ins";
    char buf[48];
    CHECK_RENAMED(a2a_input(ins, i, name), name = entry_name(buf, sizeof buf, "ins", true, i));
  }
  for (int i = 0; i < size; i++) {
    const char *name = "outs";
    char buf[48];
    CHECK_RENAMED(a2a_output(outs, i, name, &ins[0]),
                  name = entry_name(buf, sizeof buf, "outs", true, i));
  }
  return check_list_disjoint(outs, size, "outs", true, ins, size, "ins", true);
}
