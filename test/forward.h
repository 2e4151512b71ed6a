/* For tests that watch libtcoll's MPI calls through the profiling interface (mpi_count.c,
 * test_large_count.c): libtcoll calls MPI's PMPI_* names (so that the drop-in layer never sees
 * tcoll's own calls), so a watching test defines PMPI_X itself (the executable's definition takes
 * precedence for libtcoll's calls) and forwards to the next definition, libmpi's. */
#ifndef T_FORWARD_H
#define T_FORWARD_H

#include <dlfcn.h>

/* Returns fn(...) of the next definition of fn (looked up once). */
#define FORWARD(fn, ...)                                            \
  do {                                                              \
    static __typeof__(&fn) next_;                                   \
    __typeof__(&fn) f_ = __atomic_load_n(&next_, __ATOMIC_ACQUIRE); \
    if (!f_) {                                                      \
      f_ = (__typeof__(&fn))dlsym(RTLD_NEXT, #fn);                  \
      __atomic_store_n(&next_, f_, __ATOMIC_RELEASE);               \
    }                                                               \
    return f_(__VA_ARGS__);                                         \
  } while (0)

#endif
