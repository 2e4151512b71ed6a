/* The page-locked host buffers staging copies go through (see pinned.h): pinned blocks of the
 * storage cache (cache.h), which keeps them by size class and hands them out again only once the
 * copies they were returned with are done. */
#include "pinned.h"

#include "cache.h"

int tc_pinned_get(size_t n, void **p) {
  return tc_cache_alloc(TC_PLACE_PINNED, n ? n : 1, false, p);
}

void tc_pinned_put(void *p) {
  if (p) tc_cache_free(p);
}

void tc_pinned_put_after(void *p, int n, const int *devs, void *const *streams) {
  if (p) tc_cache_free_after(p, n, devs, streams);
}
