/* The NCCL-shaped bootstrap (tcoll_get_unique_id, tcoll_comm_init_rank): rendezvous over MPI. */
#ifndef TC_BOOTSTRAP_H
#define TC_BOOTSTRAP_H

#include "base/base.h"

/* Creates the communicator the bootstrap traffic uses (collective over MPI_COMM_WORLD: called
 * by tcoll_init). */
int tc_bootstrap_init(void);
/* Stops the bootstrap thread, frees what the bootstrap holds. */
void tc_bootstrap_fini(void);

#endif
