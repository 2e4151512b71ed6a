/* The process state every room reads (base.h, "process state"): defined here, at the bottom, so
 * that asking whether tcoll is initialized never calls up into init.c, which only writes it. */
#include "base.h"

tc_state_t tc_g = {.world_rank = -1};

/* On every call: no MPI query here. If the host program finalizes MPI first, the attribute
 * callback on MPI_COMM_SELF (init.c) tears tcoll down and zeroes init_count. */
int tcoll_initialized(void) { return tc_initialized(); }

int tcoll_mpi_thread_level(void) { return tc_g.thread_level; }

int tc_require_init(void) {
  if (!tc_initialized())
    return tc_error(TCOLL_ERR_STATE,
                    "tcoll is not initialized (call tcoll_init first, and tcoll_finalize last)");
  return TCOLL_SUCCESS;
}
