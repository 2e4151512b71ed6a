/* Which algorithm runs a collective: TCOLL_ALGO's override, else the table of defaults measured
 * with tcoll-bench --tune (doc/guide.md, "Algorithms", explains them with the numbers). Every
 * input is the same on every rank of a collective (placement too: ranks must agree on whether
 * a collective's buffers are device buffers), so every rank picks the same algorithm. */
#ifndef TC_SELECT_H
#define TC_SELECT_H

#include "../base/algo.h"

typedef struct tc_algo_query {
  tc_algo_op_t op;
  size_t bytes;  /* all_reduce: the vector; reduce_scatter: the input; all_gather: the output */
  int ranks;
  tcoll_dtype_t dtype;
  int redop;     /* TCOLL_SUM..., TC_REDOP_PREMUL_SUM; -1 for ops without one */
  bool device;   /* device buffers (staged) */
} tc_algo_query_t;

tc_algo_t tc_algo_choose(const tc_algo_query_t *q);

/* The algorithm of this thread's last posted collective (tcoll_last_algorithm). */
void tc_algo_note(tc_algo_t algo);

#endif
