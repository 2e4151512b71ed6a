/* The gradient module: grad nodes and the reverse-mode rules of the differentiable collectives.
 *
 * Communication goes only through the public collectives (tcoll_all_reduce, tcoll_reduce, ...).
 * What the module adds is local: grad nodes, host elementwise math, and composite works
 * (work/composite.h, the one internal header it includes besides base/: a work keyed under the
 * caller's outputs that waits for the inner public collectives, then does the local math). */
#ifndef TG_GRAD_H
#define TG_GRAD_H

#include "../base/base.h"
#include "../base/redop.h"
#include "../work/composite.h"

#define TG_NODE_MAGIC 0x74676e64u /* "tgnd" */

typedef enum {
  TG_BROADCAST,
  TG_REDUCE,
  TG_GATHER,
  TG_SCATTER,
  TG_ALL_GATHER,
  TG_ALL_GATHER_INTO_TENSOR,
  TG_REDUCE_SCATTER,
  TG_REDUCE_SCATTER_TENSOR,
  TG_ALL_TO_ALL,
  TG_ALL_TO_ALL_SINGLE,
  TG_ALL_REDUCE,
  /* The single-process multi-device rules (nn.parallel Broadcast, ReduceAddCoalesced, Scatter,
   * Gather; local.c): comm NULL, each descriptor on its own device; gather keeps the inputs'
   * sizes along dim in aux. */
  TG_LOCAL_BROADCAST_COALESCED,
  TG_LOCAL_REDUCE_ADD_COALESCED,
  TG_LOCAL_SCATTER,
  TG_LOCAL_GATHER,
  TG_NUM_KINDS
} tg_kind_t;

/* A host tensor shared between a node and the composite works that still read it. */
typedef struct tg_saved {
  int refs;
  tcoll_tensor_t t;
} tg_saved_t;

int tg_saved_new(const tcoll_tensor_t *like, tg_saved_t **out); /* host, uninitialized, refs 1 */
tg_saved_t *tg_saved_ref(tg_saved_t *s);
void tg_saved_put(tg_saved_t *s); /* frees at the last reference (waits if pending) */

struct tcoll_grad_node {
  uint32_t magic;
  tg_kind_t kind;
  tcoll_comm_t *comm; /* resolved at forward; must stay alive until the node is freed; NULL for
                       * the single-process (local) kinds */
  int rank, size;     /* in comm */
  int root;           /* broadcast src, reduce / gather dst, scatter src; -1 otherwise */
  tc_redop_t op;      /* resolved at forward: a premul handle may be destroyed afterwards */
  int dim;            /* gather_dim / scatter_dim (local: scatter / gather dim), normalized */
  /* Descriptors (data NULL) of the forward's inputs and outputs on this rank: the grad_inputs
   * and grad_outputs of backward have exactly these dtypes, shapes and devices. */
  int n_in, n_out;
  tcoll_tensor_t *in_desc, *out_desc;
  /* Extra integers: all_to_all_single keeps [output splits | input splits] (2 * size) when
   * the forward had explicit splits (NULL for even splits); local_gather keeps the size of each
   * input along dim (n_in). */
  int64_t *aux;
  int naux;
  /* MAX / MIN / PRODUCT: x as it was at forward time; MAX / MIN: y on every rank. */
  tg_saved_t *x_saved, *y_saved;
  tcoll_tensor_t descs[]; /* in_desc and out_desc point here: one allocation per node */
};

/* ---- nodes (node.c) ---- */

/* A node with n_in / n_out descriptors (filled by the caller). */
int tg_node_new(tg_kind_t kind, tcoll_comm_t *comm, int n_in, int n_out, tcoll_grad_node_t **out);
void tg_node_destroy(tcoll_grad_node_t *n);
/* At finalize: frees the table of live nodes if none is left. */
void tg_cleanup(void);
/* Descriptor of t without its data. */
tcoll_tensor_t tg_desc(const tcoll_tensor_t *t);
/* Keeps a host copy of x in node->x_saved (waits for x first if it is pending). */
int tg_node_save_x(tcoll_grad_node_t *n, const tcoll_tensor_t *x);
const char *tg_kind_name(tg_kind_t kind);

/* ---- backward argument checks (node.c) ---- */

/* grad_outputs[i] for i < n: exactly like node->out_desc[first + i] (dtype, shape, device), with
 * data. */
int tg_check_gouts(const tcoll_grad_node_t *n, const tcoll_tensor_t *g, int count, int first);
/* grad_inputs[i]: data == NULL (filled in with the descriptor, allocated by the op) or exactly
 * like node->in_desc[first + i]; none may overlap any of the count_g grad_outputs. Only checks. */
int tg_check_gins(const tcoll_grad_node_t *n, const tcoll_tensor_t *gin, int count, int first,
                  const tcoll_tensor_t *g, int count_g);
/* Fills in the descriptor of each grad_input with data == NULL (after the checks passed). */
void tg_fill_gins(const tcoll_grad_node_t *n, tcoll_tensor_t *gin, int count, int first);

/* ---- composite works (comp.c) ---- */

typedef struct tg_job tg_job_t;
typedef int (*tg_fin_fn)(tg_job_t *j);

/* Lives inside the composite (tc_comp_ctx): no allocation of its own. */
struct tg_job {
  tg_fin_fn fin; /* local math, after every inner collective completed */
  tg_saved_t *hold[3];
  int nhold;
  /* what fin works on */
  tcoll_dtype_t dtype;
  int64_t n; /* elements per output */
  int nout;
  void **res; /* host buffer fin writes for each output; NULL: output left unchanged */
  const void *a, *b, *c;
  double scale;
  int mode;
};

/* Starts a composite of nout outputs that waits for at most nwait inner buffers. */
int tg_comp_begin(tc_comp_t **w, const char *op, tcoll_comm_t *comm, int nout, int nwait);
/* Prepares output k (allocating it if out->data == NULL, as described by desc). written: fin
 * produces it (a host buffer is set up: the output itself, or scratch copied to the device
 * at completion); otherwise the output is left unchanged (zero-filled if allocated). */
int tg_comp_output(tc_comp_t *w, int k, tcoll_tensor_t *out, const tcoll_tensor_t *desc,
                   bool written);
/* The composite's own calls (composite.h), under the names the rules use. */
#define tg_comp_register tc_comp_register
#define tg_comp_scratch tc_comp_scratch
#define tg_comp_host_view tc_comp_host_view
#define tg_comp_wait_on tc_comp_wait_on
/* Keeps s alive until the composite's finish has run (or it failed). */
void tg_comp_hold(tc_comp_t *w, tg_saved_t *s);
/* Finishes: on success the composite is pending on its outputs and runs the job's fin once the
 * inner collectives completed; on failure every inner collective already posted is completed
 * and the composite is undone. Returns rc. */
int tg_comp_end(tc_comp_t *w, int rc);
static inline tg_job_t *tg_job(tc_comp_t *w) { return tc_comp_ctx(w); }

/* ---- finish steps (math.c) ---- */

int tg_fin_zero(tg_job_t *j);     /* every written output = 0 */
int tg_fin_copy(tg_job_t *j);     /* res[0] = a (n elements of dtype) */
int tg_fin_scale(tg_job_t *j);    /* res[k] = a[k*n ..] / scale (mode 1) or * scale (mode 0) */
int tg_fin_extremum(tg_job_t *j); /* res[0] = mask b ? sum a[i] / count a[n+i] : 0 */
int tg_fin_product(tg_job_t *j);  /* res[0] = G * d(prod)/dx from a = [G, zeros], b = prod, c = x */

/* Host float64 helpers for the nonlinear rules. */
void tg_load_all(double *dst, const void *src, tcoll_dtype_t d, int64_t n);

#endif
