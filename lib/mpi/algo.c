/* The lists of algorithms, the table walk and the TCOLL_ALGO override (see algo.h). */
#include "algo.h"

#include "../base/dtype.h"
#include "../node/hier.h"
#include "../node/segment.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

const tc_algo_t tc_algo_literal = {.name = "mpi", .layouts = TC_LAYOUT_ANY};

/* Each collective's list, in its own file. */
extern const tc_algo_list_t tc_all_reduce_algos, tc_reduce_scatter_algos, tc_all_gather_algos,
    tc_broadcast_algos, tc_all_to_all_algos, tc_reduce_algos, tc_all_to_all_list_algos;
static const tc_algo_list_t *const lists[TC_NUM_ALGO_OPS] = {
    [TC_OP_ALL_REDUCE] = &tc_all_reduce_algos,
    [TC_OP_REDUCE_SCATTER] = &tc_reduce_scatter_algos,
    [TC_OP_ALL_GATHER] = &tc_all_gather_algos,
    [TC_OP_BROADCAST] = &tc_broadcast_algos,
    [TC_OP_ALL_TO_ALL] = &tc_all_to_all_algos,
    [TC_OP_REDUCE] = &tc_reduce_algos,
    [TC_OP_ALL_TO_ALL_LIST] = &tc_all_to_all_list_algos,
};

/* TCOLL_ALGO's choice per op (NULL: the table's). */
static const tc_algo_t *forced[TC_NUM_ALGO_OPS];

const tc_algo_t *tc_algo_forced(tc_algo_op_t op) { return forced[op]; }

/* Names match in any case, as the other TCOLL_* values do. */
static const tc_algo_t *find(const tc_algo_list_t *l, const char *name, size_t len) {
  for (int i = 0; i < l->nalgos; i++)
    if (strlen(l->algos[i]->name) == len && !strncasecmp(l->algos[i]->name, name, len))
      return l->algos[i];
  return NULL;
}

/* ------------------------------------------------------------------ choosing */

/* a, or where it cannot run the call its fallbacks, or the literal mapping. */
static const tc_algo_t *runnable(const tc_algo_list_t *l, const tc_algo_t *a,
                                 const tc_algo_query_t *q) {
  for (int hops = 0; a && hops < l->nalgos; hops++) {
    if (tc_algo_is_literal(a) || !(a->layouts & q->layout)) break;
    if (!a->supported || a->supported(q)) return a;
    a = a->fallback ? find(l, a->fallback, strlen(a->fallback)) : NULL;
  }
  return &tc_algo_literal;
}

/* The rows of one op for one rank count on this MPI (their indices in the table, and their
 * algorithms' in the list), kept per thread for the last rank count asked: a call scans one or
 * two rows, not the table, so the choice costs a small collective next to nothing. Small:
 * initial-exec TLS is scarce. */
#define MAX_BAND 8
typedef struct bands {
  int ranks; /* 0: not filled */
  /* the smallest size any row covers: smaller calls take the literal mapping at once */
  size_t below;
  uint8_t n, row[MAX_BAND], algo[MAX_BAND];
} bands_t;
static _Thread_local TC_TLS_HOT bands_t memo[TC_NUM_ALGO_OPS];

/* The index of the algorithm named so in l (-1: none). */
static int index_of(const tc_algo_list_t *l, const char *name) {
  const tc_algo_t *a = find(l, name, strlen(name));
  for (int i = 0; a && i < l->nalgos; i++)
    if (l->algos[i] == a) return i;
  return -1;
}

static void fill_bands(bands_t *b, const tc_algo_list_t *l, int ranks) {
  tc_mpi_impl_t impl = tc_mpi_impl();
  b->n = 0;
  b->below = TC_ANY_SIZE;
  for (int i = 0; i < l->nrows && b->n < MAX_BAND; i++) {
    const tc_algo_row_t *r = &l->rows[i];
    int a = index_of(l, r->algo); /* every row names one (tc_algo_check_tables) */
    if (r->impl != impl || ranks < r->min_ranks || ranks > r->max_ranks || a < 0) continue;
    b->row[b->n] = (uint8_t)i;
    b->algo[b->n++] = (uint8_t)a;
    if (r->min_bytes < b->below) b->below = r->min_bytes;
  }
  b->ranks = ranks;
}

static bool row_applies(const tc_algo_row_t *r, const tc_algo_query_t *q) {
  if (q->bytes < r->min_bytes || q->bytes >= r->max_bytes) return false;
  if ((r->where & TC_WHERE_HOST) && q->device) return false;
  if ((r->where & TC_WHERE_STRIDED) && q->layout != TC_LAYOUT_STRIDED) return false;
  if ((r->where & TC_WHERE_SHM) && !tc_node_of(q->comm)) return false;
  if ((r->where & TC_WHERE_HIER) && !tc_node_hier_of(q->comm)) return false;
  return q->layout != TC_LAYOUT_STRIDED || q->run >= r->min_run;
}

static TC_COLD const tc_algo_t *from_rows(const tc_algo_list_t *l, const bands_t *b,
                                          const tc_algo_query_t *q) {
  for (int i = 0; i < b->n; i++) {
    const tc_algo_t *a = l->algos[b->algo[i]];
    if (row_applies(&l->rows[b->row[i]], q) && (a->layouts & q->layout)) return runnable(l, a, q);
  }
  return &tc_algo_literal;
}

/* This thread's last choice: a solver repeats one call, and the same query on the same
 * communicator (by id: its address may be reused) under the same settings gets the same answer
 * (the rows are fixed, and so is what supported() reads: the segment, made with the
 * communicator; TCOLL_MAX_COUNT, a setting). One entry, for TLS is scarce. Not for all_gather,
 * whose cma probes its peers in supported() the first time. */
typedef struct last_choice {
  const tcoll_comm_t *comm; /* NULL: none */
  uint32_t comm_id, settings;
  tc_algo_op_t op;
  size_t bytes, run;
  int64_t count;
  tcoll_dtype_t dtype;
  int redop;
  bool device;
  unsigned layout;
  const tc_algo_t *algo;
} last_choice_t;
static _Thread_local TC_TLS_HOT last_choice_t last;
static uint32_t settings_gen; /* bumped by every change of the settings (tc_algo_setting) */

static bool same_as_last(tc_algo_op_t op, const tc_algo_query_t *q) {
  return last.comm == q->comm && last.op == op && last.bytes == q->bytes &&
         last.count == q->count && last.dtype == q->dtype && last.redop == q->redop &&
         last.device == q->device && last.layout == q->layout && last.run == q->run &&
         last.comm_id == q->comm->id &&
         last.settings == __atomic_load_n(&settings_gen, __ATOMIC_RELAXED);
}

static const tc_algo_t *remember(tc_algo_op_t op, const tc_algo_query_t *q, const tc_algo_t *a) {
  last = (last_choice_t){.comm = q->comm,
                         .comm_id = q->comm->id,
                         .settings = __atomic_load_n(&settings_gen, __ATOMIC_RELAXED),
                         .op = op,
                         .bytes = q->bytes,
                         .run = q->run,
                         .count = q->count,
                         .dtype = q->dtype,
                         .redop = q->redop,
                         .device = q->device,
                         .layout = q->layout,
                         .algo = a};
  return a;
}

const tc_algo_t *tc_algo_choose(tc_algo_op_t op, const tc_algo_query_t *q) {
  const tc_algo_list_t *l = lists[op];
  if (TC_UNLIKELY(forced[op] != NULL)) return runnable(l, forced[op], q);
  int ranks = q->comm->size;
  if (ranks < 2) return &tc_algo_literal;
  if (same_as_last(op, q)) return last.algo;
  bands_t *b = &memo[op];
  if (TC_UNLIKELY(b->ranks != ranks)) fill_bands(b, l, ranks);
  if (q->bytes < b->below) return &tc_algo_literal;
  const tc_algo_t *a = from_rows(l, b, q);
  return op == TC_OP_ALL_GATHER ? a : remember(op, q, a);
}

int tc_algo_check_tables(void) {
  for (int op = 0; op < TC_NUM_ALGO_OPS; op++) {
    const tc_algo_list_t *l = lists[op];
    if (l->nalgos < 1 || !tc_algo_is_literal(l->algos[0]))
      return tc_error(TCOLL_ERR_INTERNAL, "the %s list does not start with the literal mapping",
                      l->op);
    for (int i = 0; i < l->nrows; i++) {
      const tc_algo_row_t *r = &l->rows[i];
      if (index_of(l, r->algo) < 0)
        return tc_error(TCOLL_ERR_INTERNAL,
                        "%s's table row %d names \"%s\", which is not in its list", l->op, i,
                        r->algo);
      if (!r->source || !r->source[0])
        return tc_error(TCOLL_ERR_INTERNAL,
                        "%s's table row %d does not say where its figures came from", l->op, i);
    }
    for (int i = 0; i < l->nalgos; i++) {
      const tc_algo_t *a = l->algos[i];
      if (a->fallback && index_of(l, a->fallback) < 0)
        return tc_error(TCOLL_ERR_INTERNAL,
                        "%s's %s falls back to \"%s\", which is not in its list", l->op, a->name,
                        a->fallback);
    }
  }
  return TCOLL_SUCCESS;
}

int tc_algo_scaled_src(tc_work_t *w, const tc_algo_call_t *c, int64_t n, const void **src) {
  *src = c->src;
  if (c->premul == 1.0) return TCOLL_SUCCESS;
  void *scaled = tc_work_scratch(w, (size_t)n * tc_dtype_size(c->dtype));
  if (!scaled) return TCOLL_ERR_NO_MEMORY;
  *src = scaled;
  return tc_sched_scale(&w->sched, scaled, c->src, n, c->dtype, c->premul, 1.0, true);
}

/* ------------------------------------------------------------------ TCOLL_ALGO */

/* [*p, *p + *len) without the spaces around it. */
static void trim(const char **p, size_t *len) {
  while (*len && **p == ' ') (*p)++, (*len)--;
  while (*len && (*p)[*len - 1] == ' ') (*len)--;
}

/* "mpi, ring, ring_allgather" for messages. */
static const char *names_of(const tc_algo_list_t *l, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (int i = 0; i < l->nalgos && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? ", " : "", l->algos[i]->name);
  return buf;
}

/* "all_reduce, reduce_scatter, ... or all_to_all_list" for messages. */
static const char *ops_list(char *buf, size_t len) {
  size_t off = 0;
  for (int op = 0; op < TC_NUM_ALGO_OPS && off < len; op++)
    off += (size_t)snprintf(buf + off, len - off, "%s%s",
                            op == 0                     ? ""
                            : op == TC_NUM_ALGO_OPS - 1 ? " or "
                                                        : ", ",
                            lists[op]->op);
  return buf;
}

static int find_op(const char *name, size_t len) {
  for (int op = 0; op < TC_NUM_ALGO_OPS; op++)
    if (strlen(lists[op]->op) == len && !strncasecmp(lists[op]->op, name, len)) return op;
  return -1;
}

/* One item: "auto" or "mpi" (every op), or "op:name" ("op:auto": the table's). */
static int parse_item(const char *item, size_t len, const char *what,
                      const tc_algo_t *out[TC_NUM_ALGO_OPS]) {
  const char *colon = memchr(item, ':', len);
  if (!colon) {
    bool is_auto = len == 4 && !strncasecmp(item, "auto", 4),
         is_mpi = len == 3 && !strncasecmp(item, "mpi", 3);
    if (!is_auto && !is_mpi)
      return tc_error(
          TCOLL_ERR_INVALID_ARGUMENT,
          "%s: \"%.*s\" is not an algorithm every collective has (expected auto or mpi alone, or "
          "op:algorithm)",
          what, (int)len, item);
    for (int op = 0; op < TC_NUM_ALGO_OPS; op++) out[op] = is_mpi ? &tc_algo_literal : NULL;
    return TCOLL_SUCCESS;
  }
  const char *opname = item, *name = colon + 1;
  size_t oplen = (size_t)(colon - item), nlen = len - oplen - 1;
  trim(&opname, &oplen);
  trim(&name, &nlen);
  int op = find_op(opname, oplen);
  char list[160];
  if (op < 0)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "%s: unknown collective \"%.*s\" (expected %s)",
                    what, (int)oplen, opname, ops_list(list, sizeof list));
  const tc_algo_t *a = find(lists[op], name, nlen);
  if (!a && !(nlen == 4 && !strncasecmp(name, "auto", 4)))
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "%s: %s has no algorithm \"%.*s\" (expected one of: auto, %s)", what,
                    lists[op]->op, (int)nlen, name, names_of(lists[op], list, sizeof list));
  out[op] = a;
  return TCOLL_SUCCESS;
}

int tc_algo_setting(const char *spec, const char *what, bool apply) {
  const tc_algo_t *tmp[TC_NUM_ALGO_OPS] = {NULL};
  for (const char *p = spec; *p;) {
    size_t len = strcspn(p, ",");
    const char *item = p;
    size_t ilen = len;
    trim(&item, &ilen);
    int rc = ilen ? parse_item(item, ilen, what, tmp) : TCOLL_SUCCESS;
    if (rc) return rc;
    p += len;
    if (*p == ',') p++;
  }
  if (apply) {
    memcpy(forced, tmp, sizeof tmp);
    __atomic_add_fetch(&settings_gen, 1, __ATOMIC_RELAXED); /* (also TCOLL_MAX_COUNT's changes) */
  }
  return TCOLL_SUCCESS;
}
