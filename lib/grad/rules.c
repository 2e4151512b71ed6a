/* The differentiable collectives: forward (the plain collective plus a grad node) and backward
 * (the rule of doc/gradients.md) of each op.
 *
 * Convention: the loss is the sum over ranks of each rank's loss, so an output that exists on
 * every rank receives a grad_output on every rank, and an output that is not a function of the
 * inputs on some rank (reduce's y and gather's ys off the root) passes no gradient from there. */
#include "grad.h"

#include "../base/dtype.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID(...) tc_error(TCOLL_ERR_INVALID_ARGUMENT, __VA_ARGS__)
#define UNSUPPORTED(...) tc_error(TCOLL_ERR_UNSUPPORTED, __VA_ARGS__)

/* ------------------------------------------------------------------ helpers */

static int check_node_arg(tcoll_grad_node_t **node) {
  if (!node) return INVALID("node is NULL (expected where to store the new grad node)");
  *node = NULL;
  return TCOLL_SUCCESS;
}

/* The plain collectives' checks name their arguments in / out / ins / outs; the forwards here
 * take x / y / xs / ys, so their messages are rewritten to the names the caller used. Only a
 * whole word followed by what follows an argument name in those messages is renamed. */
static int grad_names(int rc) {
  if (rc != TCOLL_ERR_INVALID_ARGUMENT) return rc;
  static const char *const from[] = {"ins", "outs", "in", "out"}, *const to[] = {"xs", "ys", "x",
                                                                                 "y"};
  static const char *const after[] = {"->",    "[",        " is ",       " (",
                                      " has ", " differs", " describes", " would"};
  const char *msg = tc_last_message();
  char buf[960];
  size_t o = 0;
  for (size_t i = 0; msg[i] && o + 3 < sizeof buf;) {
    int hit = -1;
    if (i == 0 || !(isalnum((unsigned char)msg[i - 1]) || msg[i - 1] == '_')) {
      for (int k = 0; k < 4 && hit < 0; k++) {
        size_t len = strlen(from[k]);
        if (strncmp(msg + i, from[k], len) != 0) continue;
        for (size_t a = 0; a < TC_ARRAY_LEN(after) && hit < 0; a++)
          if (!strncmp(msg + i + len, after[a], strlen(after[a]))) hit = k;
      }
    }
    if (hit < 0) {
      buf[o++] = msg[i++];
      continue;
    }
    for (const char *t = to[hit]; *t; t++) buf[o++] = *t;
    i += strlen(from[hit]);
  }
  buf[o] = '\0';
  char full[1024];
  snprintf(full, sizeof full, "%s: %s", tc_current_fn(), buf);
  tc_restore_error(full);
  return rc;
}

/* Hands the node out on success; frees it otherwise. */
static int forward_end(int rc, tcoll_grad_node_t *n, tcoll_grad_node_t **node) {
  if (rc) {
    tg_node_destroy(n);
    return rc;
  }
  *node = n;
  return TCOLL_SUCCESS;
}

static int expect_count(int got, int want, const char *what, const tcoll_grad_node_t *n) {
  if (got != want)
    return INVALID("%s is %d (expected %d for %s)", what, got, want, tg_kind_name(n->kind));
  return TCOLL_SUCCESS;
}

/* The start of most backward rules: exactly ng_want grad outputs and ngin_want grad inputs,
 * checked against the node, and the grad inputs to allocate filled in. */
static int begin_backward(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng, int ng_want,
                          tcoll_tensor_t *gin, int ngin, int ngin_want) {
  int rc = expect_count(ng, ng_want, "n_grad_outputs", n);
  if (!rc) rc = expect_count(ngin, ngin_want, "n_grad_inputs", n);
  if (!rc) rc = tg_check_gouts(n, g, ng, 0);
  if (!rc) rc = tg_check_gins(n, gin, ngin, 0, g, ng);
  if (!rc) tg_fill_gins(n, gin, ngin, 0);
  return rc;
}

static bool is_bitwise(int kind) {
  return kind == TCOLL_BAND || kind == TCOLL_BOR || kind == TCOLL_BXOR;
}
static bool is_nonlinear(int kind) {
  return kind == TCOLL_MAX || kind == TCOLL_MIN || kind == TCOLL_PRODUCT;
}

/* The rules a reduction op has a gradient for, checked at backward. */
static int check_differentiable(const tcoll_grad_node_t *n) {
  const char *op = tc_redop_kind_name(n->op.kind);
  if (is_bitwise(n->op.kind))
    return UNSUPPORTED("%s with op %s has no gradient (bitwise ops are not differentiable)",
                       tg_kind_name(n->kind), op);
  if (is_nonlinear(n->op.kind) && !tc_dtype_is_float(n->in_desc[0].dtype))
    return UNSUPPORTED(
        "the gradient of %s with op %s needs a floating dtype (float16, bfloat16, float32, "
        "float64), "
        "got %s",
        tg_kind_name(n->kind), op, tcoll_dtype_name(n->in_desc[0].dtype));
  return TCOLL_SUCCESS;
}

/* A 1-D host float64 descriptor of n elements at p. */
static tcoll_tensor_t flat64(void *p, int64_t n) {
  return tcoll_tensor_make(p, TCOLL_FLOAT64, 1, &n, TCOLL_HOST);
}
/* A host descriptor shaped like d at p. */
static tcoll_tensor_t host_like(const void *p, const tcoll_tensor_t *d) {
  return tcoll_tensor_make((void *)p, d->dtype, d->ndim, d->shape, TCOLL_HOST);
}

/* A private host copy of t in the composite's scratch (inner collectives then key nothing on
 * the caller's buffers). */
static int scratch_copy(tc_comp_t *w, const tcoll_tensor_t *t, void **out) {
  const void *view;
  int rc = tg_comp_host_view(w, t, &view);
  if (rc) return rc;
  size_t nb = tcoll_tensor_nbytes(t);
  if (view != t->data) {
    *out = (void *)view; /* already a scratch copy */
    return TCOLL_SUCCESS;
  }
  void *p = tg_comp_scratch(w, nb);
  if (!p) return TCOLL_ERR_NO_MEMORY;
  if (nb) memcpy(p, view, nb);
  *out = p;
  return TCOLL_SUCCESS;
}

/* y = op over ranks of x, computed from node->x_saved into node->y_saved (host) by an inner
 * all_reduce; the caller's y is a composite output written at completion (only on `writer`,
 * -1 for every rank; elsewhere it is left unchanged, as reduce leaves it). MAX / MIN keep y
 * this way so that backward needs nothing of the caller's buffers. */
static int forward_extremum(tcoll_grad_node_t *n, const char *opname, tcoll_tensor_t *y,
                            int writer) {
  const tcoll_tensor_t *d = &n->out_desc[0];
  int rc = tg_saved_new(d, &n->y_saved);
  if (rc) return rc;
  tc_comp_t *w;
  if ((rc = tg_comp_begin(&w, opname, n->comm, 1, 1))) return rc;
  tg_job_t *j = tg_job(w);
  j->fin = tg_fin_copy;
  j->dtype = d->dtype;
  j->n = tcoll_tensor_numel(d);
  j->a = n->y_saved->t.data;
  rc = tg_comp_output(w, 0, y, d, writer < 0 || writer == n->rank);
  if (!rc) rc = tg_comp_register(w);
  if (!rc) {
    tg_comp_hold(w, n->x_saved);
    tg_comp_hold(w, n->y_saved);
    rc = tcoll_all_reduce(&n->x_saved->t, n->op.kind, n->comm, &n->y_saved->t);
    tg_comp_wait_on(w, n->y_saved->t.data);
  }
  return tg_comp_end(w, rc);
}

/* MAX / MIN backward: grad_x_r = [x_r == y] * G / count, with G = sum over ranks of the grads
 * (only the root's for reduce) and count = number of ranks holding the extremum. One inner
 * all_reduce SUM over [g | mask] in float64 gives both. */
static int backward_extremum(tcoll_grad_node_t *n, const tcoll_tensor_t *g, tcoll_tensor_t *gin,
                             bool root_only) {
  int rc = tc_comp_wait(n->y_saved->t.data); /* the forward's result */
  if (rc) return rc;
  const tcoll_tensor_t *d = &n->in_desc[0];
  int64_t cnt = tcoll_tensor_numel(d);
  tc_comp_t *w;
  if ((rc = tg_comp_begin(
           &w, n->kind == TG_REDUCE ? "grad_reduce_backward" : "grad_all_reduce_backward", n->comm,
           1, 1)))
    return rc;
  tg_job_t *j = tg_job(w);
  rc = tg_comp_output(w, 0, gin, d, true);
  if (!rc) rc = tg_comp_register(w);
  const void *hg = NULL;
  if (!rc) rc = tg_comp_host_view(w, g, &hg);
  double *buf = NULL, *sum = NULL;
  if (!rc) {
    buf = tg_comp_scratch(w, 2 * (size_t)cnt * sizeof *buf);
    sum = tg_comp_scratch(w, 2 * (size_t)cnt * sizeof *sum);
    if (!buf || !sum) rc = TCOLL_ERR_NO_MEMORY;
  }
  if (!rc) {
    bool contributes = !root_only || n->rank == n->root;
    const void *x = n->x_saved->t.data, *y = n->y_saved->t.data;
    for (int64_t i = 0; i < cnt; i++) {
      buf[i] = contributes ? tc_load_double(hg, d->dtype, i) : 0.0;
      buf[cnt + i] = tc_load_double(x, d->dtype, i) == tc_load_double(y, d->dtype, i) ? 1.0 : 0.0;
    }
    j->fin = tg_fin_extremum;
    j->dtype = d->dtype;
    j->n = cnt;
    j->a = sum;
    j->b = buf + cnt;
    tcoll_tensor_t in = flat64(buf, 2 * cnt), out = flat64(sum, 2 * cnt);
    rc = tcoll_all_reduce(&in, TCOLL_SUM, n->comm, &out);
    tg_comp_wait_on(w, sum);
  }
  return tg_comp_end(w, rc);
}

/* PRODUCT backward: d(prod_s x_s)/dx_r is the product of the other ranks' entries. Two inner
 * all_reduces in float64: SUM over [g | x == 0] gives G and the number of zeros z, PRODUCT over
 * x with zeros replaced by 1 gives p; then z == 0: p / x_r; z == 1 and x_r == 0: p (exact);
 * otherwise 0. */
static int backward_product(tcoll_grad_node_t *n, const tcoll_tensor_t *g, tcoll_tensor_t *gin,
                            bool root_only) {
  const tcoll_tensor_t *d = &n->in_desc[0];
  int64_t cnt = tcoll_tensor_numel(d);
  tc_comp_t *w;
  int rc =
      tg_comp_begin(&w, n->kind == TG_REDUCE ? "grad_reduce_backward" : "grad_all_reduce_backward",
                    n->comm, 1, 2);
  if (rc) return rc;
  tg_job_t *j = tg_job(w);
  tg_fill_gins(n, gin, 1, 0);
  rc = tg_comp_output(w, 0, gin, d, true);
  if (!rc) rc = tg_comp_register(w);
  const void *hg = NULL;
  if (!rc) rc = tg_comp_host_view(w, g, &hg);
  double *buf = NULL, *sum = NULL, *nz = NULL, *prod = NULL;
  if (!rc) {
    buf = tg_comp_scratch(w, 2 * (size_t)cnt * sizeof *buf);
    sum = tg_comp_scratch(w, 2 * (size_t)cnt * sizeof *sum);
    nz = tg_comp_scratch(w, (size_t)cnt * sizeof *nz);
    prod = tg_comp_scratch(w, (size_t)cnt * sizeof *prod);
    if (!buf || !sum || !nz || !prod) rc = TCOLL_ERR_NO_MEMORY;
  }
  if (!rc) {
    bool contributes = !root_only || n->rank == n->root;
    const void *x = n->x_saved->t.data;
    for (int64_t i = 0; i < cnt; i++) {
      double xi = tc_load_double(x, d->dtype, i);
      buf[i] = contributes ? tc_load_double(hg, d->dtype, i) : 0.0;
      buf[cnt + i] = xi == 0.0 ? 1.0 : 0.0;
      nz[i] = xi == 0.0 ? 1.0 : xi;
    }
    j->fin = tg_fin_product;
    j->dtype = d->dtype;
    j->n = cnt;
    j->a = sum;
    j->b = prod;
    j->c = x;
    tg_comp_hold(w, n->x_saved);
    tcoll_tensor_t in1 = flat64(buf, 2 * cnt), out1 = flat64(sum, 2 * cnt);
    tcoll_tensor_t in2 = flat64(nz, cnt), out2 = flat64(prod, cnt);
    rc = tcoll_all_reduce(&in1, TCOLL_SUM, n->comm, &out1);
    tg_comp_wait_on(w, sum);
    if (!rc) {
      rc = tcoll_all_reduce(&in2, TCOLL_PRODUCT, n->comm, &out2);
      tg_comp_wait_on(w, prod);
    }
  }
  return tg_comp_end(w, rc);
}

/* Outputs that receive no gradient on this rank: zero-filled at completion, while an inner
 * collective (posted by the caller with tg_comp_wait_on) runs. Returns the composite begun and
 * registered, or an error with nothing left. */
static int zero_outputs_begin(tcoll_grad_node_t *n, const char *opname, tcoll_tensor_t *outs,
                              int count, const tcoll_tensor_t *descs, tc_comp_t **out) {
  tc_comp_t *w;
  int rc = tg_comp_begin(&w, opname, n->comm, count, 1);
  if (rc) return rc;
  tg_job_t *j = tg_job(w);
  j->fin = tg_fin_zero;
  j->dtype = descs[0].dtype;
  j->n = tcoll_tensor_numel(&descs[0]);
  for (int i = 0; i < count && !rc; i++) rc = tg_comp_output(w, i, &outs[i], &descs[i], true);
  if (!rc) rc = tg_comp_register(w);
  if (rc) return tg_comp_end(w, rc);
  *out = w;
  return TCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ broadcast */

int tcoll_grad_broadcast(const tcoll_tensor_t *x, int src, tcoll_comm_t *comm, tcoll_tensor_t *y,
                         tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_broadcast");
  tcoll_comm_t *c;
  tcoll_grad_node_t *n;
  int rc = check_node_arg(node);
  if (!rc) rc = grad_names(tc_check_broadcast(x, src, comm, y, &c));
  if (!rc) rc = tg_node_new(TG_BROADCAST, c, 1, 1, &n);
  if (rc) return rc;
  n->root = src;
  n->in_desc[0] = n->out_desc[0] = tg_desc(x);
  return forward_end(tcoll_broadcast(x, src, c, y), n, node);
}

/* y_r = x_src on every rank: grad_x_src = sum_r g_r (reduce SUM to src), zero elsewhere. */
int tg_backward_broadcast(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                          tcoll_tensor_t *gin, int ngin) {
  int rc = begin_backward(n, g, ng, 1, gin, ngin, 1);
  if (rc) return rc;
  if (n->rank == n->root) return tcoll_reduce(&g[0], n->root, TCOLL_SUM, n->comm, &gin[0]);
  tc_comp_t *w;
  if ((rc = zero_outputs_begin(n, "grad_broadcast_backward", gin, 1, n->in_desc, &w))) return rc;
  void *hg = NULL;
  rc = scratch_copy(w, &g[0], &hg);
  void *unused = rc ? NULL : tg_comp_scratch(w, tcoll_tensor_nbytes(&g[0]));
  if (!rc && !unused) rc = TCOLL_ERR_NO_MEMORY;
  if (!rc) {
    tcoll_tensor_t in = host_like(hg, &g[0]), out = host_like(unused, &g[0]);
    rc = tcoll_reduce(&in, n->root, TCOLL_SUM, n->comm,
                      &out); /* out: registered, left unchanged here */
    tg_comp_wait_on(w, unused);
  }
  return tg_comp_end(w, rc);
}

/* ------------------------------------------------------------------ reduce */

int tcoll_grad_reduce(const tcoll_tensor_t *x, int dst, tcoll_redop_t op, tcoll_comm_t *comm,
                      tcoll_tensor_t *y, tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_reduce");
  tcoll_comm_t *c;
  tc_redop_t rop;
  tcoll_grad_node_t *n;
  int rc = check_node_arg(node);
  if (!rc) rc = grad_names(tc_check_reduce(x, dst, op, comm, y, &c, &rop));
  if (!rc) rc = tg_node_new(TG_REDUCE, c, 1, 1, &n);
  if (rc) return rc;
  n->root = dst;
  n->op = rop;
  n->in_desc[0] = n->out_desc[0] = tg_desc(x);
  if (is_nonlinear(rop.kind) && tc_dtype_is_float(x->dtype)) {
    if ((rc = tg_node_save_x(n, x))) return forward_end(rc, n, node);
    if (rop.kind != TCOLL_PRODUCT)
      return forward_end(forward_extremum(n, "grad_reduce", y, dst), n, node);
  }
  return forward_end(tcoll_reduce(x, dst, op, c, y), n, node);
}

/* y_dst = op_r x_r; y elsewhere is not a function of x. SUM: grad_x_r = g_dst (broadcast);
 * AVG: g_dst / size; PREMUL_SUM(s): s * g_dst; MAX / MIN / PRODUCT: as all_reduce with the
 * grads of the ranks other than dst taken as zero. */
int tg_backward_reduce(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng, tcoll_tensor_t *gin,
                       int ngin) {
  int rc = check_differentiable(n);
  if (!rc) rc = begin_backward(n, g, ng, 1, gin, ngin, 1);
  if (rc) return rc;
  switch (n->op.kind) {
  case TCOLL_SUM: return tcoll_broadcast(&g[0], n->root, n->comm, &gin[0]);
  case TCOLL_MAX:
  case TCOLL_MIN: return backward_extremum(n, &g[0], gin, true);
  case TCOLL_PRODUCT: return backward_product(n, &g[0], gin, true);
  default: break; /* AVG, PREMUL_SUM: broadcast, then scale */
  }
  tc_comp_t *w;
  const tcoll_tensor_t *d = &n->in_desc[0];
  if ((rc = tg_comp_begin(&w, "grad_reduce_backward", n->comm, 1, 1))) return rc;
  tg_job_t *j = tg_job(w);
  tg_fill_gins(n, gin, 1, 0);
  rc = tg_comp_output(w, 0, gin, d, true);
  if (!rc) rc = tg_comp_register(w);
  void *buf = NULL;
  if (!rc) rc = scratch_copy(w, &g[0], &buf);
  if (!rc) {
    j->fin = tg_fin_scale;
    j->dtype = d->dtype;
    j->n = tcoll_tensor_numel(d);
    j->a = buf;
    j->mode = n->op.kind == TCOLL_AVG ? 1 : 0;
    j->scale = n->op.kind == TCOLL_AVG ? (double)n->size : n->op.scalar;
    tcoll_tensor_t t = host_like(buf, d);
    rc = tcoll_broadcast(&t, n->root, n->comm, &t); /* in place in scratch */
    tg_comp_wait_on(w, buf);
  }
  return tg_comp_end(w, rc);
}

/* ------------------------------------------------------------------ gather */

int tcoll_grad_gather(const tcoll_tensor_t *x, int dst, tcoll_comm_t *comm, tcoll_tensor_t *ys,
                      tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_gather");
  tcoll_comm_t *c;
  tcoll_grad_node_t *n;
  int rc = check_node_arg(node);
  if (!rc) rc = grad_names(tc_check_gather(x, dst, comm, ys, &c));
  if (rc) return rc;
  bool zeros = tcoll_comm_rank(c) != dst && ys; /* PyTorch's gather returns zeros off the root */
  char name[48];
  for (int i = 0; zeros && i < tcoll_comm_size(c) && !rc; i++) {
    snprintf(name, sizeof name, "ys[%d]", i);
    rc = tc_check_output(&ys[i], name, x->dtype, x->ndim, x->shape, x->device);
    if (!rc) rc = tc_check_disjoint(&ys[i], name, x, "x", false);
  }
  if (!rc) rc = tg_node_new(TG_GATHER, c, 1, tcoll_comm_size(c), &n);
  if (rc) return rc;
  n->root = dst;
  n->in_desc[0] = tg_desc(x);
  for (int i = 0; i < tcoll_comm_size(c); i++) n->out_desc[i] = tg_desc(x);
  if (!zeros)
    return forward_end(tcoll_gather(x, dst, c, tcoll_comm_rank(c) == dst ? ys : NULL), n, node);
  tc_comp_t *w;
  if ((rc = zero_outputs_begin(n, "grad_gather", ys, tcoll_comm_size(c), n->out_desc, &w)))
    return forward_end(rc, n, node);
  void *hx = NULL;
  rc = scratch_copy(w, x, &hx);
  if (!rc) {
    tcoll_tensor_t in = host_like(hx, x);
    rc = tcoll_gather(&in, dst, c, NULL); /* keyed on the scratch copy */
    tg_comp_wait_on(w, hx);
  }
  return forward_end(tg_comp_end(w, rc), n, node);
}

/* ys_dst[r] = x_r: grad_x_r = g_dst[r], a scatter from dst. */
int tg_backward_gather(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng, tcoll_tensor_t *gin,
                       int ngin) {
  bool is_root = n->rank == n->root;
  int rc = expect_count(ngin, 1, "n_grad_inputs", n);
  if (!rc && (is_root || ng != 0)) rc = expect_count(ng, n->size, "n_grad_outputs", n);
  if (!rc) rc = tg_check_gouts(n, g, ng, 0);
  if (!rc) rc = tg_check_gins(n, gin, 1, 0, g, ng);
  if (rc) return rc;
  tg_fill_gins(n, gin, 1, 0);
  return tcoll_scatter(is_root ? g : NULL, n->root, n->comm, &gin[0]);
}

/* ------------------------------------------------------------------ scatter */

int tcoll_grad_scatter(const tcoll_tensor_t *xs, int src, tcoll_comm_t *comm, tcoll_tensor_t *y,
                       tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_scatter");
  tcoll_comm_t *c;
  tcoll_grad_node_t *n;
  int rc = check_node_arg(node);
  if (!rc) rc = grad_names(tc_check_scatter(xs, src, comm, y, &c));
  if (!rc) rc = tg_node_new(TG_SCATTER, c, tcoll_comm_size(c), 1, &n);
  if (rc) return rc;
  n->root = src;
  tcoll_tensor_t piece = tcoll_comm_rank(c) == src ? tg_desc(&xs[0]) : tg_desc(y);
  for (int i = 0; i < tcoll_comm_size(c); i++) n->in_desc[i] = piece;
  n->out_desc[0] = piece;
  return forward_end(tcoll_scatter(xs, src, c, y), n, node);
}

/* y_r = xs_src[r]: grad_xs_src[r] = g_r, a gather to src. Off src, grad_inputs may be absent
 * (n_grad_inputs 0: the work is then keyed on grad_outputs[0], as tcoll_gather does) or size
 * tensors, zero-filled (xs was not read there). */
int tg_backward_scatter(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng, tcoll_tensor_t *gin,
                        int ngin) {
  bool is_root = n->rank == n->root;
  int rc = expect_count(ng, 1, "n_grad_outputs", n);
  if (!rc && (is_root || ngin != 0)) rc = expect_count(ngin, n->size, "n_grad_inputs", n);
  if (!rc) rc = tg_check_gouts(n, g, 1, 0);
  if (!rc) rc = tg_check_gins(n, gin, ngin, 0, g, 1);
  if (rc) return rc;
  tg_fill_gins(n, gin, ngin, 0);
  if (is_root || ngin == 0) return tcoll_gather(&g[0], n->root, n->comm, is_root ? gin : NULL);
  tc_comp_t *w;
  if ((rc = zero_outputs_begin(n, "grad_scatter_backward", gin, ngin, n->in_desc, &w))) return rc;
  void *hg = NULL;
  rc = scratch_copy(w, &g[0], &hg);
  if (!rc) {
    tcoll_tensor_t in = host_like(hg, &g[0]);
    rc = tcoll_gather(&in, n->root, n->comm, NULL);
    tg_comp_wait_on(w, hg);
  }
  return tg_comp_end(w, rc);
}

/* ------------------------------------------------------------------ all_gather (list) */

int tcoll_grad_all_gather(const tcoll_tensor_t *x, tcoll_comm_t *comm, tcoll_tensor_t *ys,
                          tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_all_gather");
  tcoll_comm_t *c;
  tcoll_grad_node_t *n;
  int rc = check_node_arg(node);
  if (!rc) rc = grad_names(tc_check_all_gather_list(x, comm, ys, &c));
  if (!rc) rc = tg_node_new(TG_ALL_GATHER, c, 1, tcoll_comm_size(c), &n);
  if (rc) return rc;
  n->in_desc[0] = tg_desc(x);
  for (int i = 0; i < tcoll_comm_size(c); i++) n->out_desc[i] = tg_desc(x);
  return forward_end(tcoll_all_gather_list(x, c, ys), n, node);
}

/* ys_r[s] = x_s: grad_x_s = sum_r g_r[s], a reduce_scatter SUM. */
int tg_backward_all_gather(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                           tcoll_tensor_t *gin, int ngin) {
  int rc = begin_backward(n, g, ng, n->size, gin, ngin, 1);
  if (rc) return rc;
  return tcoll_reduce_scatter_list(g, TCOLL_SUM, n->comm, &gin[0]);
}

/* ------------------------------------------------------------------ all_gather_into_tensor */

int tcoll_grad_all_gather_into_tensor(const tcoll_tensor_t *x, int gather_dim, tcoll_comm_t *comm,
                                      tcoll_tensor_t *y, tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_all_gather_into_tensor");
  tcoll_comm_t *c;
  tcoll_grad_node_t *n;
  int dim;
  bool inplace;
  int rc = check_node_arg(node);
  if (!rc) rc = grad_names(tc_check_all_gather(x, gather_dim, comm, y, &c, &dim, &inplace));
  if (!rc) rc = tg_node_new(TG_ALL_GATHER_INTO_TENSOR, c, 1, 1, &n);
  if (rc) return rc;
  n->dim = dim;
  n->in_desc[0] = n->out_desc[0] = tg_desc(x);
  tc_all_gather_shape(x, dim, tcoll_comm_size(c), n->out_desc[0].shape);
  return forward_end(tcoll_all_gather(x, gather_dim, c, y), n, node);
}

/* y = cat over ranks along gather_dim: grad_x_r = sum over ranks of block r of g, a
 * reduce_scatter SUM along the same dim. */
int tg_backward_all_gather_into_tensor(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                                       tcoll_tensor_t *gin, int ngin) {
  int rc = begin_backward(n, g, ng, 1, gin, ngin, 1);
  if (rc) return rc;
  return tcoll_reduce_scatter(&g[0], TCOLL_SUM, n->dim, n->comm, &gin[0]);
}

/* ------------------------------------------------------------------ reduce_scatter (list) */

int tcoll_grad_reduce_scatter(const tcoll_tensor_t *xs, tcoll_redop_t op, tcoll_comm_t *comm,
                              tcoll_tensor_t *y, tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_reduce_scatter");
  tcoll_comm_t *c;
  tc_redop_t rop;
  tcoll_grad_node_t *n;
  int rc = check_node_arg(node);
  if (!rc) rc = grad_names(tc_check_reduce_scatter_list(xs, op, comm, y, &c, &rop));
  if (!rc) rc = tg_node_new(TG_REDUCE_SCATTER, c, tcoll_comm_size(c), 1, &n);
  if (rc) return rc;
  n->op = rop;
  for (int i = 0; i < tcoll_comm_size(c); i++) n->in_desc[i] = tg_desc(&xs[0]);
  n->out_desc[0] = tg_desc(&xs[0]);
  return forward_end(tcoll_reduce_scatter_list(xs, op, c, y), n, node);
}

/* y_r = sum_s xs_s[r]: grad_xs_s[r] = g_r, an all_gather; AVG divides by size, PREMUL_SUM(s)
 * multiplies by s. Other ops: TCOLL_ERR_UNSUPPORTED. */
int tg_backward_reduce_scatter(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                               tcoll_tensor_t *gin, int ngin) {
  int rc = expect_count(ng, 1, "n_grad_outputs", n);
  if (!rc) rc = expect_count(ngin, n->size, "n_grad_inputs", n);
  if (!rc && n->op.kind != TCOLL_SUM && n->op.kind != TCOLL_AVG &&
      n->op.kind != TC_REDOP_PREMUL_SUM)
    rc =
        UNSUPPORTED("the gradient of reduce_scatter is defined for sum, avg and premul_sum, not %s",
                    tc_redop_kind_name(n->op.kind));
  if (!rc) rc = tg_check_gouts(n, g, 1, 0);
  if (!rc) rc = tg_check_gins(n, gin, ngin, 0, g, 1);
  if (rc) return rc;
  tg_fill_gins(n, gin, ngin, 0);
  if (n->op.kind == TCOLL_SUM) return tcoll_all_gather_list(&g[0], n->comm, gin);
  const tcoll_tensor_t *d = &n->out_desc[0];
  int64_t cnt = tcoll_tensor_numel(d);
  tc_comp_t *w;
  if ((rc = tg_comp_begin(&w, "grad_reduce_scatter_backward", n->comm, n->size, 1))) return rc;
  tg_job_t *j = tg_job(w);
  for (int i = 0; i < n->size && !rc; i++) rc = tg_comp_output(w, i, &gin[i], &n->in_desc[i], true);
  if (!rc) rc = tg_comp_register(w);
  void *hg = NULL, *all = NULL;
  if (!rc) rc = scratch_copy(w, &g[0], &hg);
  if (!rc && !(all = tg_comp_scratch(w, (size_t)n->size * tcoll_tensor_nbytes(d))))
    rc = TCOLL_ERR_NO_MEMORY;
  if (!rc) {
    j->fin = tg_fin_scale;
    j->dtype = d->dtype;
    j->n = cnt;
    j->a = all;
    j->mode = n->op.kind == TCOLL_AVG ? 1 : 0;
    j->scale = n->op.kind == TCOLL_AVG ? (double)n->size : n->op.scalar;
    int64_t total = cnt * n->size;
    tcoll_tensor_t in = tcoll_tensor_make(hg, d->dtype, 1, &cnt, TCOLL_HOST);
    tcoll_tensor_t out = tcoll_tensor_make(all, d->dtype, 1, &total, TCOLL_HOST);
    rc = tcoll_all_gather(&in, 0, n->comm, &out); /* rank s's g in block s */
    tg_comp_wait_on(w, all);
  }
  return tg_comp_end(w, rc);
}

/* ------------------------------------------------------------------ reduce_scatter_tensor */

int tcoll_grad_reduce_scatter_tensor(const tcoll_tensor_t *x, tcoll_redop_t op, int scatter_dim,
                                     tcoll_comm_t *comm, tcoll_tensor_t *y,
                                     tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_reduce_scatter_tensor");
  tcoll_comm_t *c;
  tc_redop_t rop;
  tcoll_grad_node_t *n;
  int dim;
  int rc = check_node_arg(node);
  if (!rc) rc = grad_names(tc_check_reduce_scatter(x, op, scatter_dim, comm, y, &c, &rop, &dim));
  if (!rc && rop.kind != TCOLL_SUM)
    rc = UNSUPPORTED(
        "Only sum reduce op is supported (got %s; the differentiable reduce_scatter_tensor sums)",
        tc_redop_kind_name(rop.kind));
  if (!rc) rc = tg_node_new(TG_REDUCE_SCATTER_TENSOR, c, 1, 1, &n);
  if (rc) return rc;
  n->op = rop;
  n->dim = dim;
  n->in_desc[0] = n->out_desc[0] = tg_desc(x);
  tc_reduce_scatter_shape(x, dim, tcoll_comm_size(c), n->out_desc[0].shape);
  return forward_end(tcoll_reduce_scatter(x, TCOLL_SUM, scatter_dim, c, y), n, node);
}

/* y_r = sum_s block r of x_s along scatter_dim: grad_x_s = cat_r g_r, an all_gather along the
 * same dim. */
int tg_backward_reduce_scatter_tensor(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                                      tcoll_tensor_t *gin, int ngin) {
  int rc = begin_backward(n, g, ng, 1, gin, ngin, 1);
  if (rc) return rc;
  return tcoll_all_gather(&g[0], n->dim, n->comm, &gin[0]);
}

/* ------------------------------------------------------------------ all_to_all (list) */

int tcoll_grad_all_to_all(const tcoll_tensor_t *xs, tcoll_comm_t *comm, tcoll_tensor_t *ys,
                          tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_all_to_all");
  tcoll_comm_t *c;
  tcoll_grad_node_t *n;
  int rc = check_node_arg(node);
  if (!rc) rc = grad_names(tc_check_all_to_all(xs, comm, ys, &c));
  if (!rc) rc = tg_node_new(TG_ALL_TO_ALL, c, tcoll_comm_size(c), tcoll_comm_size(c), &n);
  if (rc) return rc;
  for (int i = 0; i < tcoll_comm_size(c); i++) {
    n->in_desc[i] = tg_desc(&xs[i]);
    n->out_desc[i] = tcoll_tensor_make(NULL, xs[0].dtype, ys[i].ndim, ys[i].shape, xs[0].device);
  }
  return forward_end(tcoll_all_to_all(xs, c, ys), n, node);
}

/* ys_r[s] = xs_s[r]: grad_xs_s[r] = g_r[s], an all_to_all of the grads. */
int tg_backward_all_to_all(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                           tcoll_tensor_t *gin, int ngin) {
  int rc = begin_backward(n, g, ng, n->size, gin, ngin, n->size);
  if (rc) return rc;
  return tcoll_all_to_all(g, n->comm, gin);
}

/* ------------------------------------------------------------------ all_to_all_single */

int tcoll_grad_all_to_all_single(const tcoll_tensor_t *x, const int64_t *output_split_sizes,
                                 const int64_t *input_split_sizes, tcoll_comm_t *comm,
                                 tcoll_tensor_t *y, tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_all_to_all_single");
  tcoll_comm_t *c;
  tcoll_grad_node_t *n;
  int64_t rows;
  int rc = check_node_arg(node);
  if (!rc)
    rc = grad_names(
        tc_check_all_to_all_single(x, output_split_sizes, input_split_sizes, comm, y, &c, &rows));
  if (!rc) rc = tg_node_new(TG_ALL_TO_ALL_SINGLE, c, 1, 1, &n);
  if (rc) return rc;
  n->in_desc[0] = n->out_desc[0] = tg_desc(x);
  n->out_desc[0].shape[0] = rows;
  if (input_split_sizes) {
    n->naux = 2 * tcoll_comm_size(c);
    if (!(n->aux = malloc((size_t)n->naux * sizeof *n->aux)))
      return forward_end(tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate the node's split sizes"), n,
                         node);
    memcpy(n->aux, output_split_sizes, (size_t)tcoll_comm_size(c) * sizeof *n->aux);
    memcpy(n->aux + tcoll_comm_size(c), input_split_sizes,
           (size_t)tcoll_comm_size(c) * sizeof *n->aux);
  }
  return forward_end(tcoll_all_to_all_single(x, output_split_sizes, input_split_sizes, c, y), n,
                     node);
}

/* The transpose of a permutation of rows: all_to_all_single of the grads with the split sizes
 * swapped (what was received from rank s goes back to rank s). */
int tg_backward_all_to_all_single(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                                  tcoll_tensor_t *gin, int ngin) {
  int rc = begin_backward(n, g, ng, 1, gin, ngin, 1);
  if (rc) return rc;
  const int64_t *fwd_out = n->aux, *fwd_in = n->aux ? n->aux + n->size : NULL;
  return tcoll_all_to_all_single(&g[0], fwd_in, fwd_out, n->comm, &gin[0]);
}

/* ------------------------------------------------------------------ all_reduce */

int tcoll_grad_all_reduce(const tcoll_tensor_t *x, tcoll_redop_t op, tcoll_comm_t *comm,
                          tcoll_tensor_t *y, tcoll_grad_node_t **node) {
  TC_ENTER("tcoll_grad_all_reduce");
  tcoll_comm_t *c;
  tc_redop_t rop;
  tcoll_grad_node_t *n;
  int rc = check_node_arg(node);
  if (!rc) rc = grad_names(tc_check_all_reduce(x, op, comm, y, &c, &rop));
  if (!rc) rc = tg_node_new(TG_ALL_REDUCE, c, 1, 1, &n);
  if (rc) return rc;
  n->op = rop;
  n->in_desc[0] = n->out_desc[0] = tg_desc(x);
  if (is_nonlinear(rop.kind) && tc_dtype_is_float(x->dtype)) {
    if ((rc = tg_node_save_x(n, x))) return forward_end(rc, n, node);
    if (rop.kind != TCOLL_PRODUCT)
      return forward_end(forward_extremum(n, "grad_all_reduce", y, -1), n, node);
  }
  return forward_end(tcoll_all_reduce(x, op, c, y), n, node);
}

/* y = op_r x_r on every rank, each rank's loss sees its y: G = sum_r g_r.
 * SUM: all_reduce SUM; AVG: all_reduce AVG; PREMUL_SUM(s): s * G (all_reduce PREMUL_SUM(s));
 * MAX / MIN: G split evenly among the ranks holding the extremum; PRODUCT: G * prod of the
 * others; bitwise: TCOLL_ERR_UNSUPPORTED. */
int tg_backward_all_reduce(tcoll_grad_node_t *n, const tcoll_tensor_t *g, int ng,
                           tcoll_tensor_t *gin, int ngin) {
  int rc = check_differentiable(n);
  if (!rc) rc = begin_backward(n, g, ng, 1, gin, ngin, 1);
  if (rc) return rc;
  switch (n->op.kind) {
  case TCOLL_MAX:
  case TCOLL_MIN: return backward_extremum(n, &g[0], gin, false);
  case TCOLL_PRODUCT: return backward_product(n, &g[0], gin, false);
  case TC_REDOP_PREMUL_SUM: {
    tcoll_redop_t h;
    if ((rc = tcoll_redop_create_premul_sum(n->op.scalar, &h))) return rc;
    rc = tcoll_all_reduce(&g[0], h, n->comm, &gin[0]);
    tcoll_redop_destroy(h); /* work already posted keeps its scalar */
    return rc;
  }
  default: return tcoll_all_reduce(&g[0], n->op.kind, n->comm, &gin[0]);
  }
}
