/* Test hooks of the mock CUDA runtime (mock_cudart.c): a test program linked with the mock build
 * of libtcoll (test/mockcuda/libtcoll.so.0) programs failures and reads what the runtime saw. */
#ifndef MOCK_CUDART_H
#define MOCK_CUDART_H

#include <stddef.h>

#define MOCK_API __attribute__((visibility("default")))

/* The nth next call of `call` (a CUDA runtime function name, or "cudaLaunchKernel" for a kernel
 * launch) fails with the cudaError_t `code`; nth 0: every call from now on. */
MOCK_API void mock_cuda_fail(const char *call, int nth, int code);
/* Forgets every programmed failure. */
MOCK_API void mock_cuda_fail_none(void);
/* Calls of `call` so far. */
MOCK_API long mock_cuda_calls(const char *call);
/* Devices with a primary context (bit d: device d), as the driver would have them. */
MOCK_API unsigned mock_cuda_context_mask(void);
/* The calling thread's current device as cudaSetDevice left it, -1 if never set. */
MOCK_API int mock_cuda_thread_device(void);
/* cudaSetDevice on the calling thread (a program's own choice of device). */
MOCK_API int mock_cuda_select(int dev);
/* Asynchronous copies so far with a side in pageable host memory (neither device nor pinned). */
MOCK_API long mock_cuda_pageable_copies(void);

#endif
