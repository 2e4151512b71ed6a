/* TCOLL_DEBUG=DETAIL: before a collective, the ranks of its communicator compare what they are
 * about to do (op, dtype, shape, root, reduce op, dim, sequence number) and all refuse a call on
 * which they disagree, instead of hanging or computing garbage. */
#ifndef TC_DETAIL_H
#define TC_DETAIL_H

#include "work.h"

/* Exchanges w's signature (and local_status: a rank that failed locally says so) with the other
 * ranks of w->comm over its control communicator. TCOLL_SUCCESS when all agree and none failed;
 * TCOLL_ERR_MISMATCH naming the ranks and fields that differ; TCOLL_ERR_TIMEOUT if some rank
 * never arrives within TCOLL_TIMEOUT, after which every check on w->comm refuses
 * (TCOLL_ERR_STATE): its ranks no longer pair their checks alike. */
int tc_detail_check(tc_work_t *w, int local_status);

/* all_to_all_single: rank i's input_split[j] must equal rank j's output_split[i] (rows); the list
 * all_to_all (list): the elements of rank i's ins[j] and of rank j's outs[i]. Every rank learns
 * of any disagreement: TCOLL_ERR_MISMATCH naming both ranks and both numbers. */
int tc_detail_check_splits(tc_work_t *w, const int64_t *input_split, const int64_t *output_split,
                           bool list);

/* At finalize: frees what the checks given up at a timeout left, where MPI completed it. */
void tc_detail_fini(void);

#endif
