/* Staging: the buffers MPI is handed for a tensor, and the pool of pinned host buffers.
 *
 * Host tensors (and device tensors when MPI takes device pointers for nonblocking collectives)
 * are used as they are; device tensors given to MPI directly first wait on the host for the
 * caller's current stream, so that MPI reads finished data and writes after the stream's
 * earlier uses.
 *
 * Other device tensors go through page-locked host buffers from a pool, whole-buffer: inputs
 * are copied in when the collective is posted (on tcoll's d2h stream after the caller's
 * current stream; the host waits for the copy), outputs are copied back when it completes
 * (after the op's own finish step, which therefore always runs on host memory) on tcoll's h2d
 * stream, after the posting thread's stream as it was at the post, device-async: the waiter's
 * current stream waits for them. Packed forms (coalesced, list, gather, the gradient module's
 * composite works) pack into pinned buffers from tc_stage_scratch the same way.
 * all_reduce, broadcast, all_gather and reduce_scatter move device buffers larger than one
 * staging chunk through the pipeline instead (pipeline.h). */
#ifndef TC_STAGING_H
#define TC_STAGING_H

#include "work.h"
#include "../device/pinned.h"

/* The buffer MPI reads for input t. */
int tc_stage_in(tc_work_t *w, const tcoll_tensor_t *t, const void **buf);
/* The buffer MPI writes for output t. */
int tc_stage_out(tc_work_t *w, const tcoll_tensor_t *t, void **buf);
/* One buffer read and written (in place): holds t's data, goes back to t at completion. */
int tc_stage_inout(tc_work_t *w, const tcoll_tensor_t *t, void **buf);
/* Device memory (or host memory) to host memory, on tcoll's d2h stream of src_dev after the
 * caller's current stream; waits on the host (MPI reads dst next). */
int tc_stage_read(void *dst, const void *src, int src_dev, size_t n);
/* Host memory the work holds until it is recycled, for packing tensors of `device`: pinned
 * (from the pool) for device tensors, whose copies to and from it run on tcoll's streams and
 * may outlive the work's completion (tc_stage_copy_backs returns it once they are done);
 * pooled pageable scratch for host tensors. */
int tc_stage_scratch(tc_work_t *w, size_t nbytes, int device, void **p);
/* The work's copy-backs (staged outputs and device pieces), device-async: each on tcoll's h2d
 * stream of its device, after the posting thread's stream as it was at the post; the popping
 * thread's current stream then waits for them (device semantics: the host does not). The
 * work's pinned buffers return to the pool once the copies are done. */
int tc_stage_copy_backs(tc_work_t *w);
/* Whether t must be staged (a device tensor, and MPI does not take device buffers in
 * nonblocking collectives). */
bool tc_stage_needed(const tcoll_tensor_t *t);

#endif
