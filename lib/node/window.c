/* Node-shared windows (see window.h). */
#include "window.h"

#include "../mpiglue/mpi_calls.h"
#include "../mpiglue/mpi_cvar.h"
#include "../mpiglue/mpi_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define LINE 64

static void read_first_line(const char *path, char *buf, size_t len) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (!fgets(buf, (int)len, f)) buf[0] = '\0';
  fclose(f);
  buf[strcspn(buf, "\n")] = '\0';
}

void tc_node_key(tc_node_key_t *k) {
  char host[64] = "", boot[64] = "", net[64] = "";
  gethostname(host, sizeof host - 1);
  read_first_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
  ssize_t n = readlink("/proc/self/ns/net", net, sizeof net - 1);
  net[n > 0 ? n : 0] = '\0';
  memset(k, 0, sizeof *k);
  snprintf(k->text, sizeof k->text, "%.63s|%.63s|%.60s", host, boot, net);
}

uint64_t tc_node_key_hash(void) {
  tc_node_key_t key;
  tc_node_key(&key);
  uint64_t h = 1469598103934665603ull;
  for (const char *c = key.text; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  return h;
}

int tc_node_agree(MPI_Comm ctrl, int ok) {
  int all = 0;
  if (tc_mpi_allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, ctrl, true) != MPI_SUCCESS) return 0;
  return all;
}

size_t tc_node_page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

bool tc_node_room_for(size_t bytes, char *why, size_t len) {
  struct statvfs v;
  if (statvfs("/dev/shm", &v) != 0) return true; /* no tmpfs there: the populate step decides */
  unsigned long long avail = (unsigned long long)v.f_bavail * v.f_frsize;
  if (avail / 2 >= bytes) return true;
  snprintf(why, len, "/dev/shm has %llu bytes free, %zu needed (twice that kept free)", avail,
           bytes);
  return false;
}

/* MPICH first looks for an address range free on every rank of the node, so that the window lies
 * at the same address everywhere, testing each page with msync: 0.11 s for a 64 MiB heap at 2
 * ranks, every tcoll_init, 0.3-0.9 s at 3-4 (MPIR_CVAR_SHM_SYMHEAP_RETRY=0 skips it; MPICH falls
 * back to ranks' own addresses). tcoll finds the pieces with MPI_Win_shared_query and needs none.
 * Every rank of the node sets it, as its scope (the group) asks; Open MPI has no such search.
 * Windows made at once by several threads (on different communicators) share one change: the
 * first to start sets it, the last to finish puts the program's value back (a lock held across the
 * collective call itself could deadlock between ranks). */
static pthread_mutex_t search_mu = PTHREAD_MUTEX_INITIALIZER;
static int search_off; /* window allocations under way with the search turned off */
static tc_mpi_cvar_t search_saved;

static void address_search_off(void) {
  if (tc_mpi_impl() == TC_MPI_OPEN_MPI) return;
  pthread_mutex_lock(&search_mu);
  if (search_off++ == 0) tc_mpi_cvar_push("MPIR_CVAR_SHM_SYMHEAP_RETRY", 0, &search_saved);
  pthread_mutex_unlock(&search_mu);
}

static void address_search_back(void) {
  if (tc_mpi_impl() == TC_MPI_OPEN_MPI) return;
  pthread_mutex_lock(&search_mu);
  if (--search_off == 0) tc_mpi_cvar_pop(&search_saved);
  pthread_mutex_unlock(&search_mu);
}

bool tc_node_win_allocate(MPI_Comm node, size_t bytes, MPI_Win *win, char *why, size_t len) {
  MPI_Info info = MPI_INFO_NULL;
  if (PMPI_Info_create(&info) == MPI_SUCCESS)
    PMPI_Info_set(info, "alloc_shared_noncontig", "true"); /* each piece its owner's pages */
  void *base = NULL;
  address_search_off();
  int rc = PMPI_Win_allocate_shared((MPI_Aint)(bytes + LINE), 1, info, node, &base, win);
  address_search_back();
  if (info != MPI_INFO_NULL) PMPI_Info_free(&info);
  if (rc == MPI_SUCCESS) return true;
  *win = MPI_WIN_NULL;
  snprintf(why, len, "MPI_Win_allocate_shared of %zu bytes failed", bytes);
  return false;
}

char *tc_node_win_piece(MPI_Win win, int r, size_t bytes) {
  MPI_Aint sz = 0;
  int unit = 0;
  void *base = NULL;
  if (PMPI_Win_shared_query(win, r, &sz, &unit, &base) != MPI_SUCCESS || !base ||
      (size_t)sz < bytes + LINE)
    return NULL;
  return (char *)(((uintptr_t)base + LINE - 1) & ~(uintptr_t)(LINE - 1));
}

bool tc_node_populate(char *area, size_t bytes, char *why, size_t len) {
  size_t pg = tc_node_page_size();
  uintptr_t b = ((uintptr_t)area + pg - 1) / pg * pg, e = ((uintptr_t)area + bytes) / pg * pg;
  if (e > b && madvise((void *)b, e - b, MADV_POPULATE_WRITE) != 0) {
    int err = errno;
    if (err != EINVAL) { /* EINVAL: a kernel before 5.14; the statvfs check stands alone */
      snprintf(why, len, "populating its %zu bytes failed: %s", bytes, strerror(err));
      return false;
    }
  }
  return true;
}
