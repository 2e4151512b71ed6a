/* A hash map from non-zero addresses to pointers: open addressing, linear probing,
 * backward-shift deletion (no tombstones, so lookups stay short). Not locked: callers lock. */
#ifndef TC_PTRMAP_H
#define TC_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct tc_ptrmap {
  uintptr_t *keys; /* 0 = empty slot */
  void **vals;
  size_t cap; /* a power of two, or 0 */
  size_t count;
} tc_ptrmap_t;

/* Inserts or replaces; TCOLL_ERR_NO_MEMORY if the table cannot grow. */
int tc_ptrmap_put(tc_ptrmap_t *m, uintptr_t key, void *val);
void *tc_ptrmap_get(const tc_ptrmap_t *m, uintptr_t key);
/* Removes key; returns its value or NULL. */
void *tc_ptrmap_del(tc_ptrmap_t *m, uintptr_t key);
void tc_ptrmap_clear(tc_ptrmap_t *m);

#endif
