#ifndef TC_SCRATCH_H
#define TC_SCRATCH_H

#include "base.h"

/* At least n bytes, 64-byte aligned, from the pool; NULL when out of memory. */
void *tc_scratch_get(size_t n);
void tc_scratch_put(void *p);
void tc_scratch_cleanup(void);

#endif
