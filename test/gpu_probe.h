/* How a test program decides between the GPU, emulated devices, skipping and failing.
 *
 * T_GPU=1 (the gpu test setups, the GPU bundle, the mock-CUDA variants): the program runs on the
 * CUDA backend; the emulated devices its variant asks for (TCOLL_FAKE_DEVICES) are dropped.
 * T_NEEDS_GPU=1 (suites that only make sense on CUDA) likewise needs the CUDA backend.
 * Without it the program is skipped (exit 77) when no GPU is visible, and fails when one is and
 * tcoll was built with CUDA: a GPU that CUDA cannot use is a defect to see, not a skip. */
#ifndef T_GPU_PROBE_H
#define T_GPU_PROBE_H

#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef T_HAVE_CUDA
#define T_HAVE_CUDA 0
#endif

static inline bool t_gpu_wanted(void) {
  return getenv("T_GPU") != NULL || getenv("T_NEEDS_GPU") != NULL;
}

/* Call before tcoll_init (and before MPI_Init: it may run nvidia-smi). Returns whether a GPU is
 * visible to this process, when one is wanted. */
static inline bool t_gpu_prepare(void) {
  if (getenv("T_GPU")) {
    unsetenv("TCOLL_FAKE_DEVICES");
    unsetenv("TCOLL_FAKE_DELAY_US");
  }
  if (!t_gpu_wanted()) return false;
  glob_t g;
  const char *nodes = getenv("T_GPU_NODES"); /* where GPU device nodes are: tests of this probe */
  bool visible = glob(nodes ? nodes : "/dev/nvidia[0-9]*", 0, NULL, &g) == 0;
  if (visible) globfree(&g);
  FILE *p = visible ? NULL : popen("nvidia-smi -L 2>/dev/null", "r");
  char line[256];
  while (p && fgets(line, sizeof line, p)) visible = visible || strncmp(line, "GPU ", 4) == 0;
  if (p) pclose(p);
  return visible;
}

/* After tcoll_init: 0 to run, 77 to skip, 1 to fail (with a message on stderr). */
static inline int t_gpu_verdict(const char *backend, bool visible, int rank) {
  if (!t_gpu_wanted() || strcmp(backend, "cuda") == 0) return 0;
  if (T_HAVE_CUDA && visible) {
    fprintf(
        stderr,
        "[rank %d] a GPU is visible and tcoll was built with CUDA, but the device backend is %s\n",
        rank, backend);
    return 1;
  }
  if (rank == 0) printf("no CUDA device: skipped\n");
  return 77;
}

#endif
