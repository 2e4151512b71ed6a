/* Internal hooks of the single-process multi-device ops (local.c) and the NCCL-shaped
 * multi-buffer ops (multi.c). */
#ifndef TC_LOCAL_H
#define TC_LOCAL_H

#include "../base/base.h"

/* Frees the device scratch of the local ops (before the backend goes). */
void tc_local_cleanup(void);

#endif
