/* Staging: the buffers MPI is handed for a tensor.
 *
 * Host tensors (and device tensors when MPI takes device pointers) are used as they are. Other
 * device tensors go through page-locked host buffers from a pool: inputs are copied in when the
 * collective is posted, outputs are copied back when it completes (after the op's own finish
 * step, which therefore always runs on host memory). */
#ifndef TC_STAGING_H
#define TC_STAGING_H

#include "../work.h"

/* The buffer MPI reads for input t. */
int tc_stage_in(tc_work_t *w, const tcoll_tensor_t *t, const void **buf);
/* The buffer MPI writes for output t. */
int tc_stage_out(tc_work_t *w, const tcoll_tensor_t *t, void **buf);
/* One buffer read and written (in place): holds t's data, goes back to t at completion. */
int tc_stage_inout(tc_work_t *w, const tcoll_tensor_t *t, void **buf);
/* Whether t must be staged. */
bool tc_stage_needed(const tcoll_tensor_t *t);
/* Returns a pooled staging buffer. */
void tc_stage_release(void *p);
void tc_stage_cleanup(void);

#endif
