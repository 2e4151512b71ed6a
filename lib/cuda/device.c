/* Backend selection and the device-agnostic helpers built on the ops table. */
#include "device.h"

#include <stdlib.h>
#include <string.h>

extern const tc_device_ops_t tc_fake_device_ops;
#ifdef TCOLL_HAVE_CUDA
extern const tc_device_ops_t tc_cuda_device_ops;
#endif

static int none_count(void) { return 0; }
static const tc_device_ops_t none_ops = {.name = "none", .count = none_count};

static const tc_device_ops_t *active = &none_ops;

int tc_dev_init(void) {
  active = &none_ops;
  if (tc_cfg.fake_devices > 0) {
    active = &tc_fake_device_ops;
  } else {
#ifdef TCOLL_HAVE_CUDA
    if (tc_cuda_device_ops.init() == TCOLL_SUCCESS && tc_cuda_device_ops.count() > 0) {
      active = &tc_cuda_device_ops;
      return TCOLL_SUCCESS;
    }
#endif
    return TCOLL_SUCCESS;
  }
  int rc = active->init();
  if (rc) active = &none_ops;
  return rc;
}

void tc_dev_fini(void) {
  if (active->fini) active->fini();
  active = &none_ops;
}

const tc_device_ops_t *tc_dev(void) { return active; }
int tc_dev_count(void) { return active->count(); }

int tcoll_device_count(void) { return tc_dev_count(); }
const char *tcoll_device_backend(void) { return active->name; }

int tc_dev_check(int device, const char *argname) {
  if (device == TCOLL_HOST) return TCOLL_SUCCESS;
  int n = tc_dev_count();
  if (device < 0 || device >= n) {
    if (n == 0)
      return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                      "%s->device is %d but no device exists (backend %s; expected TCOLL_HOST, or set "
                      "TCOLL_FAKE_DEVICES)",
                      argname, device, active->name);
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "%s->device is %d (expected TCOLL_HOST or a device in [0, %d))",
                    argname, device, n);
  }
  return TCOLL_SUCCESS;
}

int tc_dev_alloc(int device, size_t nbytes, void **p) {
  if (device == TCOLL_HOST) {
    void *q = NULL;
    if (posix_memalign(&q, 64, nbytes ? nbytes : 1))
      return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %zu bytes of host memory", nbytes);
    memset(q, 0, nbytes);
    *p = q;
    return TCOLL_SUCCESS;
  }
  int rc = active->alloc(device, nbytes, p);
  if (rc) return rc;
  rc = active->memset_async(*p, 0, nbytes, device, NULL);
  if (!rc) rc = active->stream_sync(device, NULL);
  if (rc) active->free(device, *p);
  return rc;
}

void tc_dev_free(int device, void *p) {
  if (device == TCOLL_HOST) free(p);
  else active->free(device, p);
}

int tc_dev_copy_sync(void *dst, int dst_dev, const void *src, int src_dev, size_t n) {
  if (n == 0) return TCOLL_SUCCESS;
  if (dst_dev == TCOLL_HOST && src_dev == TCOLL_HOST) {
    memcpy(dst, src, n);
    return TCOLL_SUCCESS;
  }
  /* Device-to-device across devices goes through the source device's stream (peer copy). */
  int dev = src_dev != TCOLL_HOST ? src_dev : dst_dev;
  int rc = active->copy_async(dst, src, n, dev, NULL);
  if (!rc) rc = active->stream_sync(dev, NULL);
  if (!rc && dst_dev != TCOLL_HOST && dst_dev != dev) rc = active->stream_sync(dst_dev, NULL);
  return rc;
}

bool tc_dev_mpi_direct(void) {
  /* Open MPI 4.x rejects device buffers in nonblocking collectives even when CUDA-aware, so
   * the staged path is used unless the user forces it (TCOLL_CUDA_AWARE=1). */
  return tc_cfg.cuda_aware == 1 && strcmp(active->name, "cuda") == 0;
}
