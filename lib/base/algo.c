/* Algorithm names and the TCOLL_ALGO override (see algo.h). */
#include "algo.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

tc_algo_t tc_algo_forced[TC_NUM_ALGO_OPS];

static const char *const op_names[TC_NUM_ALGO_OPS] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                                       "all_to_all", "reduce", "all_to_all_list"};
static const char *const algo_names[TC_NUM_ALGOS] = {"auto", "mpi", "ring", "alltoall", "ring_allgather", "scattered",
                                                      "cma"};

/* Which algorithms each op offers besides auto and mpi (bit per tc_algo_t). */
static const unsigned offered[TC_NUM_ALGO_OPS] = {
    [TC_OP_ALL_REDUCE] = 1u << TC_ALGO_RING | 1u << TC_ALGO_RING_ALLGATHER,
    [TC_OP_REDUCE_SCATTER] = 1u << TC_ALGO_RING | 1u << TC_ALGO_ALLTOALL,
    [TC_OP_ALL_TO_ALL] = 1u << TC_ALGO_SCATTERED,
    [TC_OP_REDUCE] = 1u << TC_ALGO_RING,
    [TC_OP_ALL_TO_ALL_LIST] = 1u << TC_ALGO_SCATTERED,
    [TC_OP_ALL_GATHER] = 1u << TC_ALGO_CMA,
};

const char *tc_algo_op_name(tc_algo_op_t op) { return op < TC_NUM_ALGO_OPS ? op_names[op] : "?"; }
const char *tc_algo_name(tc_algo_t algo) { return algo < TC_NUM_ALGOS ? algo_names[algo] : "?"; }

bool tc_algo_offered(tc_algo_op_t op, tc_algo_t algo) {
  return algo == TC_ALGO_AUTO || algo == TC_ALGO_MPI || (offered[op] >> algo & 1u);
}

/* Names match in any case, as the other TCOLL_* values do. */
static int lookup(const char *const *names, int n, const char *name, size_t len) {
  for (int i = 0; i < n; i++)
    if (strlen(names[i]) == len && !strncasecmp(names[i], name, len)) return i;
  return -1;
}

/* [*p, *p + *len) without the spaces around it. */
static void trim(const char **p, size_t *len) {
  while (*len && **p == ' ') (*p)++, (*len)--;
  while (*len && (*p)[*len - 1] == ' ') (*len)--;
}

/* "mpi, ring, ring_allgather" for messages. */
static const char *offered_list(tc_algo_op_t op, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (int a = 0; a < TC_NUM_ALGOS && off < len; a++)
    if (tc_algo_offered(op, (tc_algo_t)a))
      off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? ", " : "", algo_names[a]);
  return buf;
}

/* One item: "name" (every op) or "op:name". */
static int parse_item(const char *item, size_t len, const char *what, tc_algo_t forced[TC_NUM_ALGO_OPS]) {
  const char *colon = memchr(item, ':', len);
  if (!colon) {
    int a = lookup(algo_names, TC_NUM_ALGOS, item, len);
    if (a != TC_ALGO_AUTO && a != TC_ALGO_MPI)
      return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                      "%s: \"%.*s\" is not an algorithm every collective has (expected auto or mpi alone, or "
                      "op:algorithm)",
                      what, (int)len, item);
    for (int op = 0; op < TC_NUM_ALGO_OPS; op++) forced[op] = (tc_algo_t)a;
    return TCOLL_SUCCESS;
  }
  const char *opname = item;
  size_t oplen = (size_t)(colon - item);
  trim(&opname, &oplen);
  int op = lookup(op_names, TC_NUM_ALGO_OPS, opname, oplen);
  if (op < 0)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "%s: unknown collective \"%.*s\" (expected all_reduce, reduce_scatter, all_gather, broadcast, "
                    "all_to_all, reduce or all_to_all_list)",
                    what, (int)oplen, opname);
  const char *name = colon + 1;
  size_t nlen = len - (size_t)(name - item);
  trim(&name, &nlen);
  int a = lookup(algo_names, TC_NUM_ALGOS, name, nlen);
  if (a < 0 || !tc_algo_offered((tc_algo_op_t)op, (tc_algo_t)a)) {
    char list[128];
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "%s: %s has no algorithm \"%.*s\" (expected one of: %s)", what,
                    op_names[op], (int)nlen, name, offered_list((tc_algo_op_t)op, list, sizeof list));
  }
  forced[op] = (tc_algo_t)a;
  return TCOLL_SUCCESS;
}

int tc_algo_parse(const char *spec, const char *what, tc_algo_t forced[TC_NUM_ALGO_OPS]) {
  tc_algo_t tmp[TC_NUM_ALGO_OPS] = {TC_ALGO_AUTO};
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
  memcpy(forced, tmp, sizeof tmp);
  return TCOLL_SUCCESS;
}
