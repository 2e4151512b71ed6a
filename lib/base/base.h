/* Internal declarations shared by every part of the library (never installed). */
#ifndef TC_CORE_H
#define TC_CORE_H

#define TCOLL_BUILDING_LIBRARY 1
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* recursive mutex initializer, strdup */
#endif
#include "tcoll.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define TC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define TC_UNUSED(x) ((void)(x))
#define TC_LIKELY(x) __builtin_expect(!!(x), 1)
#define TC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TC_PRINTF(f, a) __attribute__((format(printf, f, a)))
/* A rare path kept out of line, so that its hot caller saves fewer registers and stays short. */
#define TC_COLD __attribute__((cold, noinline))
/* Small thread-locals read on every call: the initial-exec model reads them with one instruction
 * instead of a __tls_get_addr call per access. They total under 128 bytes, well inside the static
 * TLS room glibc keeps for a library loaded with dlopen. */
#define TC_TLS_HOT __attribute__((tls_model("initial-exec")))

#ifndef TCOLL_VERSION_SUFFIX
#define TCOLL_VERSION_SUFFIX "" /* meson sets it for development builds */
#endif

/* ---- errors (status.c) ---- */

/* Every public entry point names itself first, so that messages say where they come from. */
void tc_enter(const char *fn);
#define TC_ENTER(fn) tc_enter(fn)
const char *tc_current_fn(void);
/* tcoll's own threads (progress, bootstrap) say so at their start: the drop-in layer's hook in
 * MPI's progress loop must not enter tcoll from inside their MPI calls. */
void tc_mark_internal_thread(void);
bool tc_is_internal_thread(void);
/* Records "fn: message" as this thread's last error and returns status. */
int tc_error(int status, const char *fmt, ...) TC_PRINTF(2, 3);
/* This thread's last error without the "fn: " prefix (to be reported again by another call). */
const char *tc_last_message(void);
/* Puts back a last-error text saved earlier (no logging). */
void tc_restore_error(const char *saved);
/* For an MPI return code: TCOLL_ERR_MPI with MPI's own error string. */
int tc_mpi_error(int mpi_rc, const char *what);

/* ---- logging (log.c) ---- */

void tc_log(tcoll_log_level_t level, const char *fmt, ...) TC_PRINTF(2, 3);
#define tc_warn(...) tc_log(TCOLL_LOG_WARN, __VA_ARGS__)
#define tc_info(...) tc_log(TCOLL_LOG_INFO, __VA_ARGS__)

/* ---- configuration (config.c) ---- */

extern tcoll_config_t tc_cfg;
/* Reads TCOLL_* into tc_cfg; a malformed value is an error naming the variable. */
int tc_config_load(void);
/* Settings outside tcoll_config_t (its fields are the public API's), read by tc_config_load. */
typedef struct tc_settings {
  bool shm;         /* TCOLL_SHM: node-shared segments (lib/node) may be made */
  size_t shm_bytes; /* TCOLL_SHM_BYTES: the most a communicator's segment takes per rank */
  size_t sym_bytes; /* TCOLL_SYMMETRIC_BYTES: each rank's part of the symmetric heap (0: none) */
} tc_settings_t;
extern tc_settings_t tc_set;
#define TC_DEFAULT_SHM_BYTES ((size_t)1 << 20)
#define TC_DEFAULT_SYMMETRIC_BYTES ((size_t)64 << 20)
#define TC_DEFAULT_STAGING_CHUNK ((size_t)4 << 20)
#define TC_DEFAULT_CACHE_BYTES ((size_t)1 << 30)
/* What tcoll_set_config calls after lowering cache_bytes (the cache gives back what is beyond). */
void tc_config_on_cache_limit(void (*fn)(void));
/* Checks an algorithm setting (TCOLL_ALGO, config->algo) and, with apply, makes it current; what
 * names the setting in messages. The algorithm lists own the names (lib/mpi/algo.c): tcoll_init
 * installs theirs before reading the environment. */
typedef int (*tc_algo_setting_fn)(const char *spec, const char *what, bool apply);
void tc_config_on_algo(tc_algo_setting_fn fn);

/* ---- process state (state.c; written by init.c only, but mpi/layer.c writes the layer's two
 * flags) ----
 */

typedef struct tc_state {
  int init_count;             /* tcoll_init calls not yet matched by tcoll_finalize */
  int mpi_owned;              /* tcoll_init called MPI_Init_thread */
  int thread_level;           /* what MPI provided */
  bool mpi_finalize_expected; /* MPI_Finalize may come before tcoll_finalize (the drop-in layer) */
  bool no_symmetric_heap;     /* the drop-in layer: programs' own buffers only (mpi/layer.c) */
  int world_rank;
  int world_size;
  tcoll_comm_t *world;
} tc_state_t;
extern tc_state_t tc_g;
/* tcoll_initialized(), inline for the calls that ask it on every collective. */
static inline bool tc_initialized(void) {
  return __atomic_load_n(&tc_g.init_count, __ATOMIC_ACQUIRE) > 0;
}
/* TCOLL_ERR_STATE unless tcoll is initialized (and MPI not yet finalized). */
int tc_require_init(void);

/* ---- time ---- */
double tc_now(void); /* seconds, monotonic */
/* A work's post and completion times (seconds, same clock as tc_now): the coarse clock (a few
 * ms, a fifth of the cost) unless a trace file or INFO logs will show durations. Inline: every
 * collective takes two. */
static inline bool tc_stamps_precise(void) {
  return tc_cfg.trace_path[0] || tc_cfg.debug >= TCOLL_LOG_INFO;
}
static inline double tc_stamp(void) {
  struct timespec ts;
  clock_gettime(tc_stamps_precise() ? CLOCK_MONOTONIC : CLOCK_MONOTONIC_COARSE, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
/* Resolution of tc_stamp now, in seconds (0 when it is tc_now's). */
double tc_stamp_resolution(void);

/* ---- checked arithmetic ---- */
static inline bool tc_mul_overflows(int64_t a, int64_t b, int64_t *out) {
  return __builtin_mul_overflow(a, b, out);
}

#endif
