/* tcoll-bench: the run's world (ranks, communicators, device) and the small helpers every file
 * uses. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "bench.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int g_rank, g_size;
int g_dev = TCOLL_HOST;
MPI_Comm g_mpi;
tcoll_comm_t *g_tc;

void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tcoll-bench (rank %d): ", g_rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *xmalloc(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 64, n ? n : 1)) die("out of memory (%zu bytes)", n);
  memset(p, 0, n);
  return p;
}

const char *human(size_t b, char *buf, size_t len) {
  if (b >= ((size_t)1 << 30) && b % ((size_t)1 << 30) == 0)
    snprintf(buf, len, "%zuG", b >> 30);
  else if (b >= ((size_t)1 << 20) && b % ((size_t)1 << 20) == 0)
    snprintf(buf, len, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0)
    snprintf(buf, len, "%zuK", b >> 10);
  else
    snprintf(buf, len, "%zu", b);
  return buf;
}
