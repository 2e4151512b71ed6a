/* tcoll-bench: a benchmark point, one op at one size. The op's descriptor (ops-*.c) sets up its
 * buffers and its variants: tcoll's call first, the raw MPI code doing the same second, then
 * others for the note. This file adds what every op may have on top (--alloc's allocated
 * output, --tune's forced algorithms, the memcpy that the mcp columns compare with), fills the
 * inputs, checks the results and frees it all; and holds the helpers and steps the ops share. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

static const op_desc_t *const ops[NUM_OPS] = {
    [OP_ALL_REDUCE] = &op_all_reduce,
    [OP_ALL_GATHER] = &op_all_gather,
    [OP_ALL_GATHER_D1] = &op_all_gather_dim1,
    [OP_REDUCE_SCATTER] = &op_reduce_scatter,
    [OP_REDUCE_SCATTER_D1] = &op_reduce_scatter_dim1,
    [OP_ALL_TO_ALL] = &op_all_to_all_single,
    [OP_BROADCAST] = &op_broadcast,
    [OP_COALESCED] = &op_coalesced,
    [OP_GRAD_ALL_REDUCE] = &op_grad_all_reduce,
    [OP_REDUCE] = &op_reduce,
    [OP_A2A_LIST] = &op_all_to_all,
    [OP_PERMUTE] = &op_permute,
    [OP_SHARD] = &op_shard_dim,
    [OP_SHARD_G1] = &op_shard_dim_g1s0,
};

const op_desc_t *op_desc(int op) { return ops[op]; }
const char *op_name(int op) { return ops[op]->name; }

/* ------------------------------------------------------------------ helpers of the setups */

void add_variant(point_t *p, step_fn post, step_fn wait) {
  if (p->nv == MAX_VARIANTS) die("too many variants for one point");
  p->v[p->nv++] = (variant_t){post, wait, NULL};
}

/* count: elements of one rank's input; s_elems: nccl-tests' S in elements. */
void set_size(point_t *p, int64_t count, int64_t s_elems, double busfactor) {
  p->count = count;
  p->bytes = (size_t)s_elems * g_dt.size;
  p->busfactor = busfactor;
}

/* (n-1)/n: the share of the data each rank exchanges in a ring (0 on one rank). */
double ring_factor(void) { return g_size > 1 ? (double)(g_size - 1) / g_size : 0.0; }

char *raw_in(point_t *p, size_t n) {
  p->min_bytes = n;
  return p->min = xmalloc(n);
}

char *raw_out(point_t *p, size_t n) {
  p->mout_bytes = n;
  return p->mout = xmalloc(n);
}

/* The ops on one whole tensor of `elems` elements: its input on both sides, and an output of the
 * same shape unless the op works in place. */
bool setup_whole_tensor(point_t *p, int64_t elems, double busfactor, bool has_output) {
  if (elems < 1) return false;
  set_size(p, elems, elems, busfactor);
  p->tin = tensor_on(g_dev, 1, elems, 0);
  raw_in(p, p->bytes);
  if (has_output) {
    p->tout = tensor_on(g_dev, 1, elems, 0);
    raw_out(p, p->bytes);
  }
  return true;
}

/* The ops that split their input evenly over the ranks: per = elems / n elements for each rank,
 * S = per n; raw MPI's input. Returns per (0: the size does not apply). */
int64_t split_evenly(point_t *p, int64_t elems) {
  int64_t per = elems / g_size;
  if (per < 1) return 0;
  set_size(p, per * g_size, per * g_size, ring_factor());
  raw_in(p, p->bytes);
  return per;
}

/* Largest power of two r <= sqrt(m) that divides m: a square-ish [r, m/r] shape. */
int64_t rows_for(int64_t m) {
  int64_t r = 1;
  while ((r * 2) * (r * 2) <= m && m % (r * 2) == 0) r *= 2;
  return r;
}

/* Slab r of a [outer, n block] layout: outer runs of block elements, n block apart, whose extent
 * is one block (displacement r selects slab r). */
MPI_Datatype slab_type(int64_t outer, int64_t block) {
  MPI_Datatype v, t;
  MP(MPI_Type_vector((int)outer, (int)block, (int)(block * g_size), g_dt.mpi, &v));
  MP(MPI_Type_create_resized(v, 0, (MPI_Aint)(block * (int64_t)g_dt.size), &t));
  MP(MPI_Type_commit(&t));
  MPI_Type_free(&v);
  return t;
}

/* An output for tcoll to allocate (data == NULL). */
tcoll_tensor_t unallocated(void) { return tcoll_tensor_make(NULL, TCOLL_FLOAT32, 0, NULL, g_dev); }

/* ------------------------------------------------------------------ steps the ops share */

void t_allreduce_post(point_t *p) { TC(tcoll_all_reduce(&p->tin, TCOLL_SUM, g_tc, &p->tout)); }
void m_allreduce_post(point_t *p) {
  MP(MPI_Iallreduce(p->min, p->mout, (int)p->count, g_dt.mpi, MPI_SUM, g_mpi, &p->req));
}
void t_wait_out(point_t *p) { TC(tcoll_wait(p->tout.data)); }
void t_wait_out0(point_t *p) { TC(tcoll_wait(p->tout0.data)); }
void m_wait(point_t *p) { MP(MPI_Wait(&p->req, MPI_STATUS_IGNORE)); }
void no_wait(point_t *p) { (void)p; }

/* The --alloc variants' wait: the output tcoll allocated is freed inside the timed call, as a
 * caller that allocates per call would. */
void t_alloc_wait(point_t *p) {
  TC(tcoll_wait(p->talloc.data));
  tcoll_tensor_free(&p->talloc);
}

/* ------------------------------------------------------------------ variants on top */

/* --alloc: the same call with an output tcoll allocates (data == NULL), freed after the wait,
 * against the preallocated variant 0 (ops with one output tensor). */
static void add_alloc_variant(point_t *p, step_fn post) {
  p->valloc = p->nv;
  add_variant(p, post, t_alloc_wait);
}

/* --tune: the op's tcoll call again under each algorithm it offers, forced with TCOLL_ALGO's
 * setting. */
static void add_tune_variants(point_t *p, const tune_set_t *tune) {
  if (g_size < 2) return;
  p->vtune = p->nv;
  p->ntune = tune->n;
  for (int k = 0; k < tune->n; k++) {
    p->tune_names[k] = tune->names[k];
    add_variant(p, p->v[0].post, p->v[0].wait);
    p->v[p->nv - 1].algo = tune->settings[k];
  }
}

/* The machine's limit, measured next to the collective: a memcpy of the bytes each rank must
 * move (S x the busbw factor), on every rank at once as the collective does. */
static void m_memcpy_post(point_t *p) { memcpy(p->cpy_dst, p->cpy_src, p->cpy_bytes); }

static void add_memcpy_variant(point_t *p) {
  p->cpy_bytes = (size_t)((double)p->bytes * p->busfactor);
  if (p->cpy_bytes == 0) return;
  p->cpy_src = xmalloc(p->cpy_bytes);
  p->cpy_dst = xmalloc(p->cpy_bytes);
  memset(p->cpy_src, 1, p->cpy_bytes); /* pages faulted in before the timing */
  memset(p->cpy_dst, 0, p->cpy_bytes);
  p->vmemcpy = p->nv;
  add_variant(p, m_memcpy_post, no_wait);
}

/* The op's blocking call, on its own buffers (bmin, bmout) in place of min and mout. */
static void blocking_own_buffers(point_t *p) {
  char *in = p->min, *out = p->mout;
  p->min = p->bmin;
  p->mout = p->bmout;
  ops[p->op]->blocking(p);
  p->min = in;
  p->mout = out;
}

/* What a user calls today: the blocking MPI collective, timed beside the nonblocking one (its
 * buffers filled like the raw call's once the inputs are: point_setup). */
static void add_blocking_variant(point_t *p) {
  p->vblocking = p->nv;
  p->bmin = p->min_bytes ? xmalloc(p->min_bytes) : NULL;
  p->bmout = p->mout_bytes ? xmalloc(p->mout_bytes) : NULL;
  add_variant(p, blocking_own_buffers, no_wait);
}

/* ------------------------------------------------------------------ a point's life */

/* Inputs: every rank its own pattern. */
static void fill_plain_inputs(point_t *p) {
  fill_tensor(&p->tin);
  fill_host(p->min, tcoll_tensor_numel(&p->tin));
  if (p->tin0.data) fill_tensor(&p->tin0);
}

bool point_setup(point_t *p, int op, size_t bytes) {
  const op_desc_t *d = ops[op];
  memset(p, 0, sizeof *p);
  p->op = op;
  p->vec = p->rvec = MPI_DATATYPE_NULL;
  p->req = MPI_REQUEST_NULL;
  p->v[0] = d->tcoll;
  p->v[1] = d->mpi;
  p->nv = 2;
  if (!d->setup(p, (int64_t)(bytes / g_dt.size))) return false;
  if (opt.alloc && d->alloc_post) add_alloc_variant(p, d->alloc_post);
  if (opt.tune && d->tune) add_tune_variants(p, d->tune);
  if (d->blocking) add_blocking_variant(p);
  if (!d->no_memcpy) add_memcpy_variant(p); /* last (timing.c: variant_at) */
  (d->fill ? d->fill : fill_plain_inputs)(p);
  if (p->bmin) memcpy(p->bmin, p->min, p->min_bytes);
  if (p->bmout) memcpy(p->bmout, p->mout, p->mout_bytes);
  return true;
}

void point_teardown(point_t *p) {
  tcoll_tensor_free(&p->tin);
  tcoll_tensor_free(&p->tout);
  tcoll_tensor_free(&p->tin0);
  tcoll_tensor_free(&p->tout0);
  for (int i = 0; i < COAL_N; i++) {
    tcoll_tensor_free(&p->cin[i]);
    tcoll_tensor_free(&p->cout[i]);
    tcoll_tensor_free(&p->sout[i]);
    free(p->mcin[i]);
    free(p->mcout[i]);
    free(p->msout[i]);
  }
  free(p->min);
  free(p->mout);
  free(p->bmin);
  free(p->bmout);
  free(p->mout2);
  free(p->mone);
  free(p->scratch);
  free(p->cpy_src);
  free(p->cpy_dst);
  if (p->vec != MPI_DATATYPE_NULL) MPI_Type_free(&p->vec);
  if (p->rvec != MPI_DATATYPE_NULL) MPI_Type_free(&p->rvec);
  free(p->ones);
  free(p->pcounts);
  free(p->pdispls);
}

static long check_output(point_t *p) { return diff_tensor(&p->tout, p->mout); }

long point_check(point_t *p) {
  const op_desc_t *d = ops[p->op];
  long bad = (d->check ? d->check : check_output)(p), total = 0;
  MPI_Allreduce(&bad, &total, 1, MPI_LONG, MPI_SUM, g_mpi);
  return total;
}
