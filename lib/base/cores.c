/* How many ranks share this node, and how many cores they have (cores.h). */
#define _GNU_SOURCE
#include "cores.h"

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

int tc_node_local_ranks(int known) {
  const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"};
  int local = known;
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > local) local = atoi(v);
  }
  return local;
}

int tc_usable_cores(void) {
  cpu_set_t set;
  int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online > 0 && online < cores) cores = (int)online;
  /* Bound to one core each (--bind-to core), a rank sees one: count the node's instead. */
  if (cores == 1 && online > 1) cores = (int)online;
  return cores;
}
