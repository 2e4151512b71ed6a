/* Node-shared windows as the node room makes them (a communicator's segment, the symmetric heap):
 * the checks that keep the MPIs' failures away from the user. With more asked than /dev/shm
 * holds, Open MPI 4.1 prints a banner, fails on one rank and leaves the others inside
 * MPI_Win_allocate_shared; MPICH 4.0 succeeds sparse and the first touch raises SIGBUS. So the
 * callers check the room first, populate after, and agree on each step across ranks. */
#ifndef TC_NODE_WINDOW_H
#define TC_NODE_WINDOW_H

#include "../base/base.h"

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

size_t tc_node_page_size(void);
/* Every rank's verdict: the lowest of the ranks' ok over ctrl (a collective, driving the
 * schedules in flight while it waits: segments are made inside posts). */
int tc_node_agree(MPI_Comm ctrl, int ok);
/* What names this rank's node: the host name, the kernel's boot id and the network namespace
 * (ranks in two network namespaces of one host are tcoll's test of two hosts, and Open MPI's
 * shared split over them gives inconsistent groups: checked against these keys). */
typedef struct tc_node_key {
  char text[192];
} tc_node_key_t;
void tc_node_key(tc_node_key_t *k);
/* This rank's key as a 64-bit FNV-1a hash (what ranks gather to find their node's peers). */
uint64_t tc_node_key_hash(void);
/* Whether /dev/shm (where both MPIs back shared windows) has room for bytes, with as much again
 * to spare; why says what is missing where not. */
bool tc_node_room_for(size_t bytes, char *why, size_t len);
/* MPI_Win_allocate_shared of bytes per rank over node (every rank of it takes part), each
 * rank's piece in its own pages where the MPI honours alloc_shared_noncontig, with a cache line
 * more (Open MPI's pieces start past a header, off the line); false if MPI refused (win is then
 * MPI_WIN_NULL). */
bool tc_node_win_allocate(MPI_Comm node, size_t bytes, MPI_Win *win, char *why, size_t len);
/* Rank r's piece of win in this process's addresses, from its first cache line (the offset of a
 * piece within its page is the same in every process); NULL if smaller than bytes. */
char *tc_node_win_piece(MPI_Win win, int r, size_t bytes);
/* Faults bytes from area in, first touched here (this rank's NUMA node); false where the memory
 * is not there (a tmpfs that fills up: EFAULT, where a touch would raise SIGBUS). */
bool tc_node_populate(char *area, size_t bytes, char *why, size_t len);

#endif
