/* The flight recorder: the last ops of this process (sequence number, op, communicator, sizes,
 * post and completion times, state), always kept, cheap to update. Written as Chrome trace JSON
 * (Perfetto opens it; one track per rank once files are merged with scripts/merge-traces) at
 * finalize when TCOLL_TRACE names a file, and on a timeout or a mismatch (to that file, or as a
 * summary on stderr when TCOLL_TRACE is not set). */
#ifndef TC_TRACE_H
#define TC_TRACE_H

#include "work.h"

#define TC_TRACE_RECORDS 4096

void tc_trace_posted(const tc_work_t *w);
void tc_trace_done(const tc_work_t *w);
/* reason: "finalize", "timeout" or "mismatch". */
void tc_trace_dump(const char *reason);
/* The file this rank writes: TCOLL_TRACE with "%r" replaced by the rank, or ".<rank>" inserted
 * before a ".json" suffix (appended otherwise). */
void tc_trace_path(char *buf, size_t len);
void tc_trace_reset(void);

#endif
