/* The ring reduce (TCOLL_ALGO reduce:ring): a ring reduce_scatter, each block divided once where
 * it was reduced (AVG), then every block sent to the root. */
#include "../ring.h"

#include "../../base/dtype.h"

/* c->dst: the root's output (NULL elsewhere; c->src == c->dst: in place on the root). */
static int build(tc_work_t *w, const tc_algo_call_t *c) {
  int p = w->comm->size, r = w->comm->rank;
  bool is_root = r == c->root;
  const void *src;
  int rc = tc_algo_scaled_src(w, c, c->n, &src);
  if (rc) return rc;
  size_t es = tc_dtype_size(c->dtype),
         ring_bytes = (tc_ring_reduce_scatter_scratch(c->n, p, c->dtype) + 7) & ~(size_t)7;
  size_t own = is_root ? 0 : (size_t)tc_block_count(c->n, p, 0) * es;
  char *scratch = tc_work_scratch(w, ring_bytes + own);
  if (!scratch) return TCOLL_ERR_NO_MEMORY;
  char *mine =
      is_root ? (char *)c->dst + (size_t)tc_block_offset(c->n, p, r) * es : scratch + ring_bytes;
  tc_sched_t *s = &w->sched;
  rc = tc_build_ring_reduce_scatter(s, src, mine, c->n, c->dtype, c->op, scratch, 0, NULL);
  if (!rc && c->divisor != 1.0) /* each block is divided once, where it was reduced */
    rc = tc_sched_scale(s, mine, mine, tc_block_count(c->n, p, r), c->dtype, 1.0, c->divisor, true);
  return rc ? rc : tc_build_blocks_to_root(s, c->dst, mine, c->n, c->dtype, c->root, p);
}

static bool supported(const tc_algo_query_t *q) { return q->count > 0; }

const tc_algo_t tc_reduce_ring = {
    .name = "ring", .layouts = TC_LAYOUT_CONTIG, .supported = supported, .build = build};
