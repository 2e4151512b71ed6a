/* The ranks that share this node and the cores they run on: whether waits may spin (lib/node)
 * and whether a helper thread per rank finds a core of its own (the drop-in layer's rows). */
#ifndef TC_CORES_H
#define TC_CORES_H

/* The ranks on this node, as the launcher says (Open MPI, MPICH's hydra, PMI), at least known. */
int tc_node_local_ranks(int known);
/* The cores this process may run on; the node's online cores where it is bound to one. */
int tc_usable_cores(void);

#endif
