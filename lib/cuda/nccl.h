/* Internal hooks of the single-process multi-device ops (local.c), the NCCL-shaped bootstrap
 * (bootstrap.c) and multi-buffer ops (multi.c). */
#ifndef TC_NCCL_H
#define TC_NCCL_H

#include "../core.h"

/* Creates the communicator the bootstrap traffic uses (collective over MPI_COMM_WORLD: called
 * by tcoll_init). */
int tc_bootstrap_init(void);
/* Stops the bootstrap thread, frees what the bootstrap holds. */
void tc_bootstrap_fini(void);
/* Frees the device scratch of the local ops (before the backend goes). */
void tc_local_cleanup(void);

#endif
