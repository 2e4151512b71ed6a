/* The public stream API: each thread's current stream per device, streams the user creates, and
 * synchronization. */
#include "device/device.h"

static int check_device(int device, const char *argname) {
  int rc = tc_require_init();
  if (rc) return rc;
  if (device == TCOLL_HOST)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "%s is TCOLL_HOST (expected a device ordinal: the host has no streams)",
                    argname);
  int n = tc_dev_count();
  if (device < 0 || device >= n) {
    if (n == 0)
      return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "%s is %d but no device exists (backend %s)",
                      argname, device, tc_dev()->name);
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "%s is %d but device %d does not exist (expected a device in [0, %d))", argname,
                    device, device, n);
  }
  return TCOLL_SUCCESS;
}

int tcoll_set_stream(int device, void *stream) {
  TC_ENTER("tcoll_set_stream");
  int rc = check_device(device, "device");
  if (rc) return rc;
  tc_dev_set_current_stream(device, stream);
  return TCOLL_SUCCESS;
}

void *tcoll_get_stream(int device) {
  if (!tcoll_initialized() || device < 0 || device >= tc_dev_count()) return NULL;
  return tc_dev_current_stream(device);
}

int tcoll_stream_create(int device, void **stream) {
  TC_ENTER("tcoll_stream_create");
  int rc = check_device(device, "device");
  if (rc) return rc;
  if (!stream)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "stream is NULL (expected where to store the stream)");
  return tc_dev()->stream_create(device, stream);
}

int tcoll_stream_destroy(int device, void *stream) {
  TC_ENTER("tcoll_stream_destroy");
  int rc = check_device(device, "device");
  if (rc) return rc;
  if (!stream) return TCOLL_SUCCESS; /* the default stream is not destroyed */
  rc = tc_dev()->stream_sync(device, stream);
  if (tc_dev_current_stream(device) == stream) tc_dev_set_current_stream(device, NULL);
  int destroyed = tc_dev()->stream_destroy(device, stream);
  return rc ? rc : destroyed;
}

int tcoll_stream_synchronize(int device, void *stream) {
  TC_ENTER("tcoll_stream_synchronize");
  int rc = check_device(device, "device");
  if (rc) return rc;
  return tc_dev()->stream_sync(device, stream);
}

int tcoll_device_synchronize(int device) {
  TC_ENTER("tcoll_device_synchronize");
  int rc = check_device(device, "device");
  if (rc) return rc;
  return tc_dev()->device_sync(device);
}
