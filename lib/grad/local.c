/* The differentiable single-process multi-device ops (torch.nn.parallel's autograd Functions
 * Broadcast, ReduceAddCoalesced, Scatter, Gather): forward is the plain tcoll_local_* op plus a
 * grad node, backward is the transposed local op, as in the seed:
 *
 *   broadcast_coalesced  <->  reduce_add_coalesced      scatter  <->  gather
 *
 * Each pair are each other's adjoints (copies one way, sums of copies the other way). The nodes
 * have no communicator (comm NULL): they describe one process's tensors, each descriptor with
 * its own device, which is where backward puts each gradient. Like the plain ops, these calls
 * are stream-ordered and register no pending work (see tcoll.h). */
#include "grad.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define INVALID(...) tc_error(TCOLL_ERR_INVALID_ARGUMENT, __VA_ARGS__)

/* The start of every forward: the node argument checked and cleared, tcoll initialized. */
static int begin_forward(tcoll_grad_node_t **node) {
  if (!node) return INVALID("node is NULL (expected where to store the new grad node)");
  *node = NULL;
  return tc_require_init();
}

/* The end of every forward, given the plain op's status: on success the node records its
 * n_in inputs and n_out outputs and is handed out; on failure it is destroyed. */
static int end_forward(tcoll_grad_node_t *nd, int rc, const tcoll_tensor_t *in,
                       const tcoll_tensor_t *out, tcoll_grad_node_t **node) {
  if (rc) {
    tg_node_destroy(nd);
    return rc;
  }
  for (int i = 0; i < nd->n_in; i++) nd->in_desc[i] = tg_desc(&in[i]);
  for (int k = 0; k < nd->n_out; k++) nd->out_desc[k] = tg_desc(&out[k]);
  *node = nd;
  return TCOLL_SUCCESS;
}

static int expect_count(int got, int want, const char *what, const tcoll_grad_node_t *n) {
  if (got != want)
    return INVALID("%s is %d (expected %d for %s)", what, got, want, tg_kind_name(n->kind));
  return TCOLL_SUCCESS;
}

/* The start of every backward: the counts the node expects, then the tensors themselves. */
static int check_backward(const tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng, int want_ng,
                          const tcoll_tensor_t *gin, int ngin, int want_ngin) {
  int rc = expect_count(ng, want_ng, "n_grad_outputs", n);
  if (!rc) rc = expect_count(ngin, want_ngin, "n_grad_inputs", n);
  if (!rc) rc = tg_check_gouts(n, g, ng, 0);
  if (!rc) rc = tg_check_gins(n, gin, ngin, 0, g, ng);
  return rc;
}

/* n_groups groups of n tensors: refused where the total does not fit an int. */
static int check_total(int n_groups, int n, const char *what) {
  if ((int64_t)n_groups * n > INT_MAX)
    return INVALID("%s is %lld tensors (expected at most %d)", what, (long long)n_groups * n,
                   INT_MAX);
  return TCOLL_SUCCESS;
}

/* Which grad_inputs backward allocates (data NULL on entry), so that a failure part way through
 * a backward made of several local calls frees them again. */
static bool *note_allocs(const tcoll_tensor_t *gin, int count) {
  bool *mine = calloc(count > 0 ? (size_t)count : 1, sizeof *mine);
  for (int i = 0; mine && i < count; i++) mine[i] = gin[i].data == NULL;
  return mine;
}

static void undo_allocs(const tcoll_grad_node_t *n, tcoll_tensor_t *gin, int count,
                        const bool *mine) {
  for (int i = 0; i < count; i++) {
    if (!mine[i] || !gin[i].data) continue;
    tc_tensor_release(&gin[i]);
    gin[i] = n->in_desc[i];
    gin[i].data = NULL;
  }
}

/* ------------------------------------------------------------------ broadcast_coalesced */

int tcoll_grad_local_broadcast_coalesced(const tcoll_tensor_t *in, int n, const int *devices,
                                         int n_devices, tcoll_tensor_t *out,
                                         tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_local_broadcast_coalesced");
  tcoll_grad_node_t *nd;
  int rc = begin_forward(node);
  if (rc) return rc;
  if (n < 0) return INVALID("n is %d (expected >= 0)", n);
  /* The plain op accepts no device at all; its gradient would then be zero from nowhere. */
  if (n_devices < 1)
    return INVALID("n_devices is %d (expected >= 1 for the differentiable form)", n_devices);
  if ((rc = check_total(n_devices, n, "n_devices * n"))) return rc;
  if ((rc = tg_node_new(TG_LOCAL_BROADCAST_COALESCED, NULL, n, n_devices * n, &nd))) return rc;
  return end_forward(nd, tcoll_local_broadcast_coalesced(in, n, devices, n_devices, out), in, out,
                     node);
}

/* out[d*n + i] = in[i] on devices[d]: grad_in[i] = sum_d g[d*n + i] on in[i]'s device, a
 * reduce_add_coalesced per input device (one call when the inputs share a device, as in
 * PyTorch, where they must). */
int tg_backward_local_broadcast_coalesced(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                                          tcoll_tensor_t *gin, int ngin) {
  int nin = n->n_in, ndev = nin ? n->n_out / nin : 0;
  int rc = check_backward(n, g, ng, n->n_out, gin, ngin, nin);
  if (rc || nin == 0) return rc;
  int *idx = malloc((size_t)nin * sizeof *idx);
  bool *done = calloc((size_t)nin, sizeof *done), *mine = note_allocs(gin, nin);
  tcoll_tensor_t *gg = malloc((size_t)ndev * (size_t)nin * sizeof *gg),
                 *go = malloc((size_t)nin * sizeof *go);
  if (!idx || !done || !mine || !gg || !go)
    rc = tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %d entries", nin);
  for (int first = 0; first < nin && !rc; first++) {
    if (done[first]) continue;
    int dev = n->in_desc[first].device, cnt = 0;
    for (int i = first; i < nin; i++)
      if (!done[i] && n->in_desc[i].device == dev) {
        done[i] = true;
        idx[cnt++] = i;
      }
    for (int d = 0; d < ndev; d++)
      for (int k = 0; k < cnt; k++) gg[d * cnt + k] = g[d * nin + idx[k]];
    for (int k = 0; k < cnt; k++) go[k] = gin[idx[k]];
    rc = tcoll_local_reduce_add_coalesced(gg, ndev, cnt, dev, go);
    if (!rc)
      for (int k = 0; k < cnt; k++) gin[idx[k]] = go[k];
  }
  if (rc && mine) undo_allocs(n, gin, nin, mine);
  free(idx);
  free(done);
  free(mine);
  free(gg);
  free(go);
  return rc;
}

/* ------------------------------------------------------------------ reduce_add_coalesced */

int tcoll_grad_local_reduce_add_coalesced(const tcoll_tensor_t *in, int n_devices, int n,
                                          int destination, tcoll_tensor_t *out,
                                          tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_local_reduce_add_coalesced");
  tcoll_grad_node_t *nd;
  int rc = begin_forward(node);
  if (rc) return rc;
  if (n_devices < 1) return INVALID("n_devices is %d (expected >= 1)", n_devices);
  if (n < 0) return INVALID("n is %d (expected >= 0)", n);
  if ((rc = check_total(n_devices, n, "n_devices * n"))) return rc;
  if ((rc = tg_node_new(TG_LOCAL_REDUCE_ADD_COALESCED, NULL, n_devices * n, n, &nd))) return rc;
  return end_forward(nd, tcoll_local_reduce_add_coalesced(in, n_devices, n, destination, out), in,
                     out, node);
}

/* out[i] = sum_d in[d*n + i]: grad_in[d*n + i] = g[i] on group d's device, a
 * broadcast_coalesced of the grads to the groups' devices. */
int tg_backward_local_reduce_add_coalesced(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                                           tcoll_tensor_t *gin, int ngin) {
  int nout = n->n_out, ndev = nout ? n->n_in / nout : 0;
  int rc = check_backward(n, g, ng, nout, gin, ngin, n->n_in);
  if (rc || nout == 0) return rc;
  int *devs = malloc((size_t)ndev * sizeof *devs);
  if (!devs) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %d devices", ndev);
  for (int d = 0; d < ndev; d++) devs[d] = n->in_desc[d * nout].device;
  rc = tcoll_local_broadcast_coalesced(g, nout, devs, ndev, gin);
  free(devs);
  return rc;
}

/* ------------------------------------------------------------------ scatter */

int tcoll_grad_local_scatter(const tcoll_tensor_t *in, const int *devices, int n_devices,
                             const int64_t *chunk_sizes, int dim, tcoll_tensor_t *out,
                             tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_local_scatter");
  tcoll_grad_node_t *nd;
  int rc = begin_forward(node);
  if (rc) return rc;
  if (n_devices < 1) return INVALID("n_devices is %d (expected >= 1)", n_devices);
  if ((rc = tg_node_new(TG_LOCAL_SCATTER, NULL, 1, n_devices, &nd))) return rc;
  rc = tcoll_local_scatter(in, devices, n_devices, chunk_sizes, dim, out);
  if (!rc) nd->dim = dim < 0 ? dim + in->ndim : dim; /* checked by the scatter */
  return end_forward(nd, rc, in, out, node);
}

/* out[i] = chunk i of in along dim: grad_in = cat_dim(g[0], ..., g[n-1]) on in's device, a
 * gather of the grads. */
int tg_backward_local_scatter(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                              tcoll_tensor_t *gin, int ngin) {
  int rc = check_backward(n, g, ng, n->n_out, gin, ngin, 1);
  if (rc) return rc;
  return tcoll_local_gather(g, ng, n->dim, n->in_desc[0].device, &gin[0]);
}

/* ------------------------------------------------------------------ gather */

int tcoll_grad_local_gather(const tcoll_tensor_t *in, int n, int dim, int target_device,
                            tcoll_tensor_t *out, tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_local_gather");
  tcoll_grad_node_t *nd;
  int rc = begin_forward(node);
  if (rc) return rc;
  if (n < 1) return INVALID("n is %d (expected >= 1)", n);
  if ((rc = tg_node_new(TG_LOCAL_GATHER, NULL, n, 1, &nd))) return rc;
  if (!(nd->aux = malloc((size_t)n * sizeof *nd->aux))) {
    tg_node_destroy(nd);
    return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate the node's %d chunk sizes", n);
  }
  nd->naux = n;
  if (!(rc = tcoll_local_gather(in, n, dim, target_device, out))) {
    /* Scalars gathered along dim 0 became a vector (the gather warned); otherwise dim was
     * checked against the inputs' ndim. */
    bool unsqueezed = in[0].ndim == 0;
    nd->dim = unsqueezed ? 0 : dim < 0 ? dim + in[0].ndim : dim;
    for (int i = 0; i < n; i++) nd->aux[i] = unsqueezed ? 1 : in[i].shape[nd->dim];
  }
  return end_forward(nd, rc, in, out, node);
}

/* out = cat_dim(in[0], ..., in[n-1]): grad_in[i] = the slab of g along dim that in[i] filled,
 * on in[i]'s device, a scatter of the grad with the inputs' sizes as chunk sizes. Unsqueezed
 * scalars get scalars back: the scatter writes [1]-shaped views of them. */
int tg_backward_local_gather(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                             tcoll_tensor_t *gin, int ngin) {
  int nin = n->n_in;
  int rc = check_backward(n, g, ng, 1, gin, ngin, nin);
  if (rc) return rc;
  int *devs = malloc((size_t)nin * sizeof *devs);
  tcoll_tensor_t *parts = malloc((size_t)nin * sizeof *parts);
  if (!devs || !parts) rc = tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %d entries", nin);
  bool unsqueezed = n->in_desc[0].ndim == 0;
  int64_t one = 1;
  for (int i = 0; i < nin && !rc; i++) {
    const tcoll_tensor_t *d = &n->in_desc[i];
    devs[i] = d->device;
    parts[i] = gin[i];
    if (unsqueezed) parts[i] = tcoll_tensor_make(gin[i].data, d->dtype, 1, &one, d->device);
  }
  if (!rc) rc = tcoll_local_scatter(&g[0], devs, nin, n->aux, n->dim, parts);
  for (int i = 0; i < nin && !rc; i++) {
    if (!unsqueezed)
      gin[i] = parts[i];
    else if (!gin[i].data) { /* allocated as [1]: the same buffer, described as a scalar */
      gin[i] = n->in_desc[i];
      gin[i].data = parts[i].data;
    }
  }
  free(devs);
  free(parts);
  return rc;
}
