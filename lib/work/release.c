/* What frees or copies a buffer first completes the pending work on it: tcoll_tensor_free and
 * the public copies. */
#include "release.h"

#include "../argcheck.h"
#include "../device/device.h"
#include "registry.h"

#include <string.h>

void tcoll_tensor_free(tcoll_tensor_t *t) {
  TC_ENTER("tcoll_tensor_free");
  if (!t || !t->data) return;
  /* A pending buffer is never freed under MPI: neither a pending output nor an input that
   * pending work still reads. */
  tc_wait_users(t->data, tcoll_tensor_nbytes(t));
  tc_tensor_release(t);
}

int tc_copy_prepare(tcoll_tensor_t *dst, const tcoll_tensor_t *src, size_t *n) {
  int rc = tc_check_copy(dst, src);
  if (rc) return rc;
  *n = tcoll_tensor_nbytes(src);
  /* Pending work writing either buffer completes first; so does work still reading dst. */
  rc = tc_wait_writers(src->data, *n);
  if (!rc) rc = tc_wait_writers(dst->data, *n);
  if (!rc) tc_wait_readers(dst->data, *n);
  return rc;
}

int tcoll_tensor_copy(tcoll_tensor_t *dst, const tcoll_tensor_t *src) {
  TC_ENTER("tcoll_tensor_copy");
  size_t n;
  int rc = tc_copy_prepare(dst, src, &n);
  if (rc || n == 0 || dst->data == src->data) return rc;
  if (dst->device == TCOLL_HOST && src->device == TCOLL_HOST) {
    memcpy(dst->data, src->data, n);
    return TCOLL_SUCCESS;
  }
  return tc_dev_copy_sync(dst->data, dst->device, src->data, src->device, n);
}

int tcoll_tensor_copy_async(tcoll_tensor_t *dst, const tcoll_tensor_t *src, void *stream) {
  TC_ENTER("tcoll_tensor_copy_async");
  size_t n;
  int rc = tc_require_init();
  if (!rc) rc = tc_copy_prepare(dst, src, &n);
  if (rc || n == 0 || dst->data == src->data) return rc;
  if (dst->device == TCOLL_HOST && src->device == TCOLL_HOST) {
    memcpy(dst->data, src->data, n);
    return TCOLL_SUCCESS;
  }
  int dev = src->device != TCOLL_HOST ? src->device : dst->device;
  return tc_dev()->copy_async(dst->data, src->data, n, dev, stream);
}
