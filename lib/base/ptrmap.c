#include "ptrmap.h"

#include "base.h"

#include <stdlib.h>

static size_t slot_of(uintptr_t key, size_t cap) {
  uint64_t h = (uint64_t)key;
  h ^= h >> 33; /* murmur3 finalizer: addresses share low zero bits and high prefixes */
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return (size_t)h & (cap - 1);
}

static void insert_fresh(tc_ptrmap_t *m, uintptr_t key, void *val) {
  size_t i = slot_of(key, m->cap);
  while (m->keys[i]) i = (i + 1) & (m->cap - 1);
  m->keys[i] = key;
  m->vals[i] = val;
  m->count++;
}

static int grow(tc_ptrmap_t *m) {
  size_t cap = m->cap ? 2 * m->cap : 64;
  uintptr_t *keys = calloc(cap, sizeof *keys);
  void **vals = calloc(cap, sizeof *vals);
  if (!keys || !vals) {
    free(keys);
    free(vals);
    return TCOLL_ERR_NO_MEMORY;
  }
  tc_ptrmap_t old = *m;
  m->keys = keys;
  m->vals = vals;
  m->cap = cap;
  m->count = 0;
  for (size_t i = 0; i < old.cap; i++)
    if (old.keys[i]) insert_fresh(m, old.keys[i], old.vals[i]);
  free(old.keys);
  free(old.vals);
  return TCOLL_SUCCESS;
}

static size_t find(const tc_ptrmap_t *m, uintptr_t key, int *found) {
  *found = 0;
  if (!m->cap) return 0;
  size_t i = slot_of(key, m->cap);
  while (m->keys[i]) {
    if (m->keys[i] == key) {
      *found = 1;
      return i;
    }
    i = (i + 1) & (m->cap - 1);
  }
  return i;
}

int tc_ptrmap_put(tc_ptrmap_t *m, uintptr_t key, void *val) {
  int found;
  size_t i = find(m, key, &found);
  if (found) {
    m->vals[i] = val;
    return TCOLL_SUCCESS;
  }
  if ((m->count + 1) * 2 > m->cap) { /* keep the load factor at most 1/2 */
    int rc = grow(m);
    if (rc) return rc;
  }
  insert_fresh(m, key, val);
  return TCOLL_SUCCESS;
}

void *tc_ptrmap_get(const tc_ptrmap_t *m, uintptr_t key) {
  int found;
  size_t i = find(m, key, &found);
  return found ? m->vals[i] : NULL;
}

void *tc_ptrmap_del(tc_ptrmap_t *m, uintptr_t key) {
  int found;
  size_t i = find(m, key, &found);
  if (!found) return NULL;
  void *val = m->vals[i];
  size_t mask = m->cap - 1;
  /* Backward-shift: pull later members of the probe run into the hole. */
  size_t hole = i, j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (!m->keys[j]) break;
    size_t home = slot_of(m->keys[j], m->cap);
    /* Move j into hole unless its home lies cyclically in (hole, j]. */
    bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (stays) continue;
    m->keys[hole] = m->keys[j];
    m->vals[hole] = m->vals[j];
    hole = j;
  }
  m->keys[hole] = 0;
  m->vals[hole] = NULL;
  m->count--;
  return val;
}

void tc_ptrmap_clear(tc_ptrmap_t *m) {
  free(m->keys);
  free(m->vals);
  m->keys = NULL;
  m->vals = NULL;
  m->cap = m->count = 0;
}
