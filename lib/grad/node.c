/* Grad nodes: what a forward keeps for its backward, the checks of backward's arguments, and
 * the dispatch of tcoll_grad_backward to the rule of the node's kind. */
#include "grad.h"

#include "../base/ptrmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID(...) tc_error(TCOLL_ERR_INVALID_ARGUMENT, __VA_ARGS__)

static const char *const kind_names[TG_NUM_KINDS] = {
    [TG_BROADCAST] = "broadcast",
    [TG_REDUCE] = "reduce",
    [TG_GATHER] = "gather",
    [TG_SCATTER] = "scatter",
    [TG_ALL_GATHER] = "all_gather",
    [TG_ALL_GATHER_INTO_TENSOR] = "all_gather_into_tensor",
    [TG_REDUCE_SCATTER] = "reduce_scatter",
    [TG_REDUCE_SCATTER_TENSOR] = "reduce_scatter_tensor",
    [TG_ALL_TO_ALL] = "all_to_all",
    [TG_ALL_TO_ALL_SINGLE] = "all_to_all_single",
    [TG_ALL_REDUCE] = "all_reduce",
    [TG_LOCAL_BROADCAST_COALESCED] = "local_broadcast_coalesced",
    [TG_LOCAL_REDUCE_ADD_COALESCED] = "local_reduce_add_coalesced",
    [TG_LOCAL_SCATTER] = "local_scatter",
    [TG_LOCAL_GATHER] = "local_gather",
};

const char *tg_kind_name(tg_kind_t kind) {
  return (int)kind >= 0 && (int)kind < TG_NUM_KINDS && kind_names[kind] ? kind_names[kind]
                                                                        : "invalid";
}

/* ------------------------------------------------------------------ saved tensors */

int tg_saved_new(const tcoll_tensor_t *like, tg_saved_t **out) {
  tg_saved_t *s = calloc(1, sizeof *s);
  if (!s) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate a saved tensor");
  s->t = tcoll_tensor_make(NULL, like->dtype, like->ndim, like->shape, TCOLL_HOST);
  int rc = tc_tensor_storage(&s->t, false); /* filled at once by a copy or a collective */
  if (rc) {
    free(s);
    return rc;
  }
  s->refs = 1;
  *out = s;
  return TCOLL_SUCCESS;
}

tg_saved_t *tg_saved_ref(tg_saved_t *s) {
  if (s) __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
  return s;
}

void tg_saved_put(tg_saved_t *s) {
  if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  tc_comp_wait(s->t.data); /* never freed under MPI */
  tc_tensor_release(&s->t);
  free(s);
}

/* ------------------------------------------------------------------ nodes */

/* Live nodes, so that a freed or foreign pointer is refused without being read. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static tc_ptrmap_t live_nodes;

static bool node_live(const tcoll_grad_node_t *n) {
  pthread_mutex_lock(&live_lock);
  bool live = n && tc_ptrmap_get(&live_nodes, (uintptr_t)n) != NULL;
  pthread_mutex_unlock(&live_lock);
  return live;
}

/* Nodes of few descriptors (every single-tensor op) are kept for the next forward once freed:
 * steady-state training steps allocate none. The table keeps its room once empty. Both are freed
 * at finalize (tg_cleanup). */
#define KEEP_DESCS 2
#define KEEP_NODES 64
static tcoll_grad_node_t *kept[KEEP_NODES];
static int nkept;

static size_t node_bytes(size_t ndesc) {
  return sizeof(tcoll_grad_node_t) + ndesc * sizeof(tcoll_tensor_t);
}

/* Unrecords n and keeps it, or says to free it (live_lock held). */
static bool forget_and_keep_locked(tcoll_grad_node_t *n) {
  tc_ptrmap_del(&live_nodes, (uintptr_t)n);
  if (n->n_in + n->n_out > KEEP_DESCS || nkept == KEEP_NODES) return false;
  kept[nkept++] = n;
  return true;
}

void tg_cleanup(void) {
  pthread_mutex_lock(&live_lock);
  while (nkept > 0) free(kept[--nkept]);
  if (live_nodes.count == 0) tc_ptrmap_clear(&live_nodes); /* nodes still held stay known */
  pthread_mutex_unlock(&live_lock);
}

tcoll_tensor_t tg_desc(const tcoll_tensor_t *t) {
  return tcoll_tensor_make(NULL, t->dtype, t->ndim, t->shape, t->device);
}

/* One block: the node and its descriptors after it (a kept one when it has room for them). */
int tg_node_new(tg_kind_t kind, tcoll_comm_t *comm, int n_in, int n_out, tcoll_grad_node_t **out) {
  size_t ndesc = (size_t)(n_in + n_out);
  tcoll_grad_node_t *n = NULL;
  pthread_mutex_lock(&live_lock);
  if (ndesc <= KEEP_DESCS && nkept > 0) n = kept[--nkept];
  pthread_mutex_unlock(&live_lock);
  if (n)
    memset(n, 0, node_bytes(KEEP_DESCS));
  else
    n = calloc(1, node_bytes(ndesc <= KEEP_DESCS ? KEEP_DESCS : ndesc));
  if (!n) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate a grad node");
  n->magic = TG_NODE_MAGIC;
  n->kind = kind;
  n->comm = comm;
  n->rank = comm ? tcoll_comm_rank(comm) : 0;
  n->size = comm ? tcoll_comm_size(comm) : 1;
  n->root = -1;
  n->op.kind = TCOLL_SUM;
  n->op.scalar = 1.0;
  n->n_in = n_in;
  n->n_out = n_out;
  n->in_desc = n->descs;
  n->out_desc = n->descs + n_in;
  pthread_mutex_lock(&live_lock);
  int rc = tc_ptrmap_put(&live_nodes, (uintptr_t)n, n);
  pthread_mutex_unlock(&live_lock);
  if (rc) {
    free(n);
    return tc_error(rc, "cannot record a grad node");
  }
  *out = n;
  return TCOLL_SUCCESS;
}

void tg_node_destroy(tcoll_grad_node_t *n) {
  if (!n) return;
  tg_saved_put(n->x_saved);
  tg_saved_put(n->y_saved);
  free(n->aux);
  n->magic = 0;
  pthread_mutex_lock(&live_lock);
  bool keep = forget_and_keep_locked(n);
  pthread_mutex_unlock(&live_lock);
  if (!keep) free(n);
}

int tg_node_save_x(tcoll_grad_node_t *n, const tcoll_tensor_t *x) {
  int rc = tg_saved_new(x, &n->x_saved);
  if (rc) return rc;
  return tcoll_tensor_copy(&n->x_saved->t, x); /* waits for x first if it is pending */
}

/* ------------------------------------------------------------------ backward checks */

static int check_like(const tcoll_tensor_t *t, const char *name, const tcoll_tensor_t *want) {
  if (t->dtype != want->dtype)
    return INVALID("%s->dtype is %s (expected %s, as in the forward)", name,
                   tcoll_dtype_name(t->dtype), tcoll_dtype_name(want->dtype));
  if (!tc_same_shape(t->ndim, t->shape, want->ndim, want->shape)) {
    char got[128], exp[128];
    return INVALID("%s->shape is %s (expected %s, as in the forward)", name,
                   tc_shape_str(got, sizeof got, t->ndim, t->shape),
                   tc_shape_str(exp, sizeof exp, want->ndim, want->shape));
  }
  if (t->device != want->device)
    return INVALID("%s->device is %d (expected %d, as in the forward)", name, t->device,
                   want->device);
  return TCOLL_SUCCESS;
}

/* Checks run with a placeholder argument name; only a failing one runs again with its real name
 * ("grad_inputs[3]"), so that a call that passes formats nothing. */
static int check_gout(const tcoll_grad_node_t *n, const tcoll_tensor_t *g, int first, int i,
                      const char *name) {
  int rc = tc_check_tensor(&g[i], name);
  return rc ? rc : check_like(&g[i], name, &n->out_desc[first + i]);
}

int tg_check_gouts(const tcoll_grad_node_t *n, const tcoll_tensor_t *g, int count, int first) {
  for (int i = 0; i < count; i++) {
    if (check_gout(n, g, first, i, "grad_outputs[i]") == TCOLL_SUCCESS) continue;
    char name[48];
    snprintf(name, sizeof name, "grad_outputs[%d]", i);
    return check_gout(n, g, first, i, name);
  }
  return TCOLL_SUCCESS;
}

/* grad_inputs[i]: its descriptor, and no overlap with the grad outputs or the earlier grad inputs;
 * gnames: whether to name them ("grad_outputs[2]") or use placeholders. */
static int check_gin(const tcoll_grad_node_t *n, const tcoll_tensor_t *gin, int first, int i,
                     const tcoll_tensor_t *g, int count_g, bool named) {
  char name[48] = "grad_inputs[i]", other[48] = "grad_outputs[k]";
  if (named) snprintf(name, sizeof name, "grad_inputs[%d]", i);
  const tcoll_tensor_t *want = &n->in_desc[first + i];
  int rc = gin[i].data ? tc_check_tensor_desc(&gin[i], name)
                       : TCOLL_SUCCESS; /* NULL: allocated like want */
  if (!rc && gin[i].data) rc = check_like(&gin[i], name, want);
  for (int k = 0; k < count_g && !rc; k++) {
    if (named) snprintf(other, sizeof other, "grad_outputs[%d]", k);
    rc = tc_check_disjoint(&gin[i], name, &g[k], other, false);
  }
  for (int k = 0; k < i && !rc; k++) {
    if (named) snprintf(other, sizeof other, "grad_inputs[%d]", k);
    rc = tc_check_disjoint(&gin[i], name, &gin[k], other, false);
  }
  return rc;
}

int tg_check_gins(const tcoll_grad_node_t *n, const tcoll_tensor_t *gin, int count, int first,
                  const tcoll_tensor_t *g, int count_g) {
  for (int i = 0; i < count; i++)
    if (check_gin(n, gin, first, i, g, count_g, false))
      return check_gin(n, gin, first, i, g, count_g, true);
  return TCOLL_SUCCESS;
}

void tg_fill_gins(const tcoll_grad_node_t *n, tcoll_tensor_t *gin, int count, int first) {
  for (int i = 0; i < count; i++)
    if (!gin[i].data) gin[i] = n->in_desc[first + i];
}

/* ------------------------------------------------------------------ public entry points */

typedef int (*tg_backward_fn)(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                              tcoll_tensor_t *gin, int ngin);
int tg_backward_broadcast(tcoll_grad_node_t *, const tcoll_tensor_t *, int, tcoll_tensor_t *, int);
int tg_backward_reduce(tcoll_grad_node_t *, const tcoll_tensor_t *, int, tcoll_tensor_t *, int);
int tg_backward_gather(tcoll_grad_node_t *, const tcoll_tensor_t *, int, tcoll_tensor_t *, int);
int tg_backward_scatter(tcoll_grad_node_t *, const tcoll_tensor_t *, int, tcoll_tensor_t *, int);
int tg_backward_all_gather(tcoll_grad_node_t *, const tcoll_tensor_t *, int, tcoll_tensor_t *, int);
int tg_backward_all_gather_into_tensor(tcoll_grad_node_t *, const tcoll_tensor_t *, int,
                                       tcoll_tensor_t *, int);
int tg_backward_reduce_scatter(tcoll_grad_node_t *, const tcoll_tensor_t *, int, tcoll_tensor_t *,
                               int);
int tg_backward_reduce_scatter_tensor(tcoll_grad_node_t *, const tcoll_tensor_t *, int,
                                      tcoll_tensor_t *, int);
int tg_backward_all_to_all(tcoll_grad_node_t *, const tcoll_tensor_t *, int, tcoll_tensor_t *, int);
int tg_backward_all_to_all_single(tcoll_grad_node_t *, const tcoll_tensor_t *, int,
                                  tcoll_tensor_t *, int);
int tg_backward_all_reduce(tcoll_grad_node_t *, const tcoll_tensor_t *, int, tcoll_tensor_t *, int);
int tg_backward_local_broadcast_coalesced(tcoll_grad_node_t *, const tcoll_tensor_t *, int,
                                          tcoll_tensor_t *, int);
int tg_backward_local_reduce_add_coalesced(tcoll_grad_node_t *, const tcoll_tensor_t *, int,
                                           tcoll_tensor_t *, int);
int tg_backward_local_scatter(tcoll_grad_node_t *, const tcoll_tensor_t *, int, tcoll_tensor_t *,
                              int);
int tg_backward_local_gather(tcoll_grad_node_t *, const tcoll_tensor_t *, int, tcoll_tensor_t *,
                             int);

static const tg_backward_fn backward_fns[TG_NUM_KINDS] = {
    [TG_BROADCAST] = tg_backward_broadcast,
    [TG_REDUCE] = tg_backward_reduce,
    [TG_GATHER] = tg_backward_gather,
    [TG_SCATTER] = tg_backward_scatter,
    [TG_ALL_GATHER] = tg_backward_all_gather,
    [TG_ALL_GATHER_INTO_TENSOR] = tg_backward_all_gather_into_tensor,
    [TG_REDUCE_SCATTER] = tg_backward_reduce_scatter,
    [TG_REDUCE_SCATTER_TENSOR] = tg_backward_reduce_scatter_tensor,
    [TG_ALL_TO_ALL] = tg_backward_all_to_all,
    [TG_ALL_TO_ALL_SINGLE] = tg_backward_all_to_all_single,
    [TG_ALL_REDUCE] = tg_backward_all_reduce,
    [TG_LOCAL_BROADCAST_COALESCED] = tg_backward_local_broadcast_coalesced,
    [TG_LOCAL_REDUCE_ADD_COALESCED] = tg_backward_local_reduce_add_coalesced,
    [TG_LOCAL_SCATTER] = tg_backward_local_scatter,
    [TG_LOCAL_GATHER] = tg_backward_local_gather,
};

int tcoll_grad_backward(tcoll_grad_node_t *node, const tcoll_tensor_t *grad_outputs,
                        int n_grad_outputs, tcoll_tensor_t *grad_inputs, int n_grad_inputs) {
  TC_ENTER("tcoll_grad_backward");
  int rc = tc_require_init();
  if (rc) return rc;
  if (!node) return INVALID("node is NULL (expected a node from a tcoll_grad_* forward)");
  if (!node_live(node) || node->magic != TG_NODE_MAGIC || (int)node->kind < 0 ||
      (int)node->kind >= TG_NUM_KINDS || !backward_fns[node->kind])
    return INVALID("node %p is not a live grad node (freed, or not from a tcoll_grad_* forward)",
                   (void *)node);
  if (node->comm && (rc = tc_comp_comm_live(node->comm, "the node's communicator")))
    return rc; /* freed since the forward: nodes do not own their communicator */
  if (n_grad_outputs < 0 || n_grad_inputs < 0)
    return INVALID("n_grad_outputs is %d and n_grad_inputs is %d (expected >= 0)", n_grad_outputs,
                   n_grad_inputs);
  if (n_grad_outputs > 0 && !grad_outputs)
    return INVALID("grad_outputs is NULL (expected %d tensors)", n_grad_outputs);
  if (n_grad_inputs > 0 && !grad_inputs)
    return INVALID("grad_inputs is NULL (expected %d tensors)", n_grad_inputs);
  rc = backward_fns[node->kind](node, grad_outputs, n_grad_outputs, grad_inputs, n_grad_inputs);
  TC_ENTER("tcoll_grad_backward");
  return rc;
}

void tcoll_grad_node_free(tcoll_grad_node_t *node) {
  TC_ENTER("tcoll_grad_node_free");
  if (!node) return;
  if (!node_live(node) || node->magic != TG_NODE_MAGIC) {
    tc_warn("tcoll_grad_node_free: %p is not a live grad node; ignored", (void *)node);
    return;
  }
  tg_node_destroy(node);
}
