/* The symmetric heap: host storage that every rank of a node maps, as PyTorch's SymmetricMemory
 * and NVSHMEM offer it, so that a collective on tensors from it reads its peers' inputs where they
 * lie instead of copying them in (../mpi/shm_slices.c, ../mpi/all_gather/shm.c).
 *
 * Made once, at tcoll_init, by every rank of MPI_COMM_WORLD (a window per node, over
 * MPI_Comm_split_type(SHARED)), of TCOLL_SYMMETRIC_BYTES per rank (the smallest any rank of the
 * node asked for), its room in /dev/shm checked as a segment's (window.h) and agreed by the
 * node's ranks; each rank's pages are populated as it first hands them out (an allocation the
 * tmpfs cannot hold fails, never a touch). None where it cannot be made, where
 * TCOLL_SYMMETRIC_BYTES=0, or under the drop-in layer (programs' own buffers only). Each rank hands
 * out pieces of its own part, locally (first fit, 256-byte aligned), through the storage cache's
 * host source (../device/cache.h), which init installs: the cache never calls up into this room.
 * Outside it, tensors come from ordinary memory. Closed at finalize once the cache gave its free
 * blocks back; where a rank still has storage from it in use, the window stays (and serves again
 * after a later tcoll_init), so that storage stays valid until MPI_Finalize. */
#ifndef TC_NODE_HEAP_H
#define TC_NODE_HEAP_H

#include "../comm.h"

#include <stdbool.h>
#include <stdint.h>

#define TC_HEAP_NONE UINT64_MAX

/* Collective over MPI_COMM_WORLD; logs at INFO what it made. Never fails tcoll_init: without a
 * heap, storage comes from ordinary memory. */
void tc_heap_open(void);
/* Collective over the node's ranks (at finalize, after tc_cache_fini). */
void tc_heap_close(void);
/* n bytes from this rank's part; false where there is no heap or no room left. Thread-safe. */
bool tc_heap_alloc(size_t n, void **p);
/* Gives back [p, p + n) from tc_heap_alloc; false if p is not from the heap. Thread-safe. */
bool tc_heap_free(void *p, size_t n);
/* Where [p, p + n) lies in this rank's part (bytes from its start), or TC_HEAP_NONE. */
uint64_t tc_heap_offset(const void *p, size_t n);
/* Every rank of c's part, in this process's addresses (parts: c->size entries), where every rank
 * of c has one in the same heap; else false, the same on every rank. Collective on c->ctrl. */
bool tc_heap_parts(tcoll_comm_t *c, char **parts);

#endif
