/* Freeing and copying tensors: first the pending work on their buffers completes. */
#ifndef TC_RELEASE_H
#define TC_RELEASE_H

#include "../tensor.h"

/* The checks and waits a copy needs before it moves anything; *n gets the bytes to move. */
int tc_copy_prepare(tcoll_tensor_t *dst, const tcoll_tensor_t *src, size_t *n);

#endif
