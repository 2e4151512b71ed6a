#include "staging.h"

#include "device.h"

#include <stdlib.h>

/* Pinned buffers, pooled by power-of-two size class (allocating page-locked memory is slow). */
#define MIN_CLASS 12
#define MAX_CLASS 48
#define HEADER 256
#define KEEP 8

typedef struct pinned {
  struct pinned *next;
  int cls;
} pinned_t;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pinned_t *pool[MAX_CLASS + 1];
static int pool_n[MAX_CLASS + 1];

static void *pinned_get(size_t n) {
  int c = MIN_CLASS;
  while (c < MAX_CLASS && ((size_t)1 << c) < n) c++;
  pthread_mutex_lock(&pool_mu);
  pinned_t *b = pool[c];
  if (b) {
    pool[c] = b->next;
    pool_n[c]--;
  }
  pthread_mutex_unlock(&pool_mu);
  if (!b) {
    void *p = NULL;
    if (tc_dev()->host_alloc(HEADER + ((size_t)1 << c), &p)) return NULL;
    b = p;
    b->cls = c;
  }
  return (char *)b + HEADER;
}

void tc_stage_release(void *p) {
  if (!p) return;
  pinned_t *b = (pinned_t *)((char *)p - HEADER);
  pthread_mutex_lock(&pool_mu);
  if (pool_n[b->cls] < KEEP) {
    b->next = pool[b->cls];
    pool[b->cls] = b;
    pool_n[b->cls]++;
    b = NULL;
  }
  pthread_mutex_unlock(&pool_mu);
  if (b) tc_dev()->host_free(b);
}

void tc_stage_cleanup(void) {
  pthread_mutex_lock(&pool_mu);
  for (int c = 0; c <= MAX_CLASS; c++) {
    while (pool[c]) {
      pinned_t *b = pool[c];
      pool[c] = b->next;
      tc_dev()->host_free(b);
    }
    pool_n[c] = 0;
  }
  pthread_mutex_unlock(&pool_mu);
}

bool tc_stage_needed(const tcoll_tensor_t *t) { return t->device != TCOLL_HOST && !tc_dev_mpi_direct(); }

static int stage_buffer(tc_work_t *w, size_t n, void **buf) {
  void *p = pinned_get(n ? n : 1);
  if (!p) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %zu bytes of pinned staging memory", n);
  int rc = tc_work_hold(w, p, TC_HELD_PINNED);
  if (rc) {
    tc_stage_release(p);
    return rc;
  }
  *buf = p;
  return TCOLL_SUCCESS;
}

int tc_stage_in(tc_work_t *w, const tcoll_tensor_t *t, const void **buf) {
  if (!tc_stage_needed(t)) {
    *buf = t->data;
    return TCOLL_SUCCESS;
  }
  size_t n = tcoll_tensor_nbytes(t);
  void *p;
  int rc = stage_buffer(w, n, &p);
  if (!rc) rc = tc_dev_copy_sync(p, TCOLL_HOST, t->data, t->device, n);
  if (!rc) *buf = p;
  return rc;
}

int tc_stage_out(tc_work_t *w, const tcoll_tensor_t *t, void **buf) {
  if (!tc_stage_needed(t)) {
    *buf = t->data;
    return TCOLL_SUCCESS;
  }
  size_t n = tcoll_tensor_nbytes(t);
  int rc = stage_buffer(w, n, buf);
  if (!rc) rc = tc_work_copyback(w, t->data, *buf, n, t->device);
  return rc;
}

int tc_stage_inout(tc_work_t *w, const tcoll_tensor_t *t, void **buf) {
  if (!tc_stage_needed(t)) {
    *buf = t->data;
    return TCOLL_SUCCESS;
  }
  int rc = tc_stage_out(w, t, buf);
  if (!rc) rc = tc_dev_copy_sync(*buf, TCOLL_HOST, t->data, t->device, tcoll_tensor_nbytes(t));
  return rc;
}
