/* Pooled host scratch memory (packing, coalescing): power-of-two size classes kept on free
 * lists, so that steady-state calls allocate nothing. */
#include "scratch.h"

#include <stdlib.h>

#define MIN_CLASS 12 /* 4 KiB */
#define MAX_CLASS 48
#define HEADER 64 /* keeps the payload 64-byte aligned; holds the class */
#define KEEP_SMALL 16
#define KEEP_LARGE 2 /* above 64 MiB */

typedef struct block {
  struct block *next;
  int cls;
} block_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block_t *free_list[MAX_CLASS + 1];
static int free_count[MAX_CLASS + 1];

static int class_of(size_t n) {
  int c = MIN_CLASS;
  while (c < MAX_CLASS && ((size_t)1 << c) < n) c++;
  return c;
}

void *tc_scratch_get(size_t n) {
  int c = class_of(n);
  if (((size_t)1 << c) < n) return NULL;
  pthread_mutex_lock(&lock);
  block_t *b = free_list[c];
  if (b) {
    free_list[c] = b->next;
    free_count[c]--;
  }
  pthread_mutex_unlock(&lock);
  if (!b) {
    void *p = NULL;
    if (posix_memalign(&p, HEADER, HEADER + ((size_t)1 << c))) return NULL;
    b = p;
    b->cls = c;
  }
  return (char *)b + HEADER;
}

void tc_scratch_put(void *p) {
  if (!p) return;
  block_t *b = (block_t *)((char *)p - HEADER);
  int keep = b->cls > 26 ? KEEP_LARGE : KEEP_SMALL;
  pthread_mutex_lock(&lock);
  if (free_count[b->cls] < keep) {
    b->next = free_list[b->cls];
    free_list[b->cls] = b;
    free_count[b->cls]++;
    b = NULL;
  }
  pthread_mutex_unlock(&lock);
  free(b);
}

void tc_scratch_cleanup(void) {
  pthread_mutex_lock(&lock);
  for (int c = 0; c <= MAX_CLASS; c++) {
    while (free_list[c]) {
      block_t *b = free_list[c];
      free_list[c] = b->next;
      free(b);
    }
    free_count[c] = 0;
  }
  pthread_mutex_unlock(&lock);
}
