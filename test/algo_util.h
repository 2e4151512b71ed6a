/* Shared helpers for the suites that force algorithms (tcoll_config_t.algo) and set tcoll's log
 * level: test_algo.c, test_cma.c, test_large_count.c.
 *
 * These suites also run with TCOLL_ALGO set in the environment (test/meson.build, algo_suites):
 * every test that sets an algorithm saves the setting it found first and puts it back at its
 * end (t_save_algo, t_restore_algo). */
#ifndef T_ALGO_UTIL_H
#define T_ALGO_UTIL_H

#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The algorithm setting in force (sizeof tcoll_config_t.algo bytes). */
static inline void t_get_algo(char *buf) {
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  memcpy(buf, c.algo, sizeof c.algo);
}

static inline void t_set_algo(const char *spec) {
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  snprintf(c.algo, sizeof c.algo, "%s", spec);
  int rc = tcoll_set_config(&c);
  T_EXPECT(rc == TCOLL_SUCCESS, "setting algo \"%s\" returned %s: %s", spec,
           tcoll_status_string(rc), tcoll_last_error());
}

static inline void t_set_debug(tcoll_log_level_t level) {
  tcoll_config_t c;
  T_OK(tcoll_get_config(&c));
  c.debug = level;
  T_OK(tcoll_set_config(&c));
}

/* The setting a test found (TCOLL_ALGO of the run, or "auto"), put back at its end. */
static char t_found_algo[sizeof(((tcoll_config_t *)0)->algo)];
static inline void t_save_algo(void) { t_get_algo(t_found_algo); }
static inline void t_restore_algo(void) {
  t_set_algo(t_found_algo);
  char now[sizeof t_found_algo];
  t_get_algo(now);
  T_EXPECT(!strcmp(now, t_found_algo), "algo not restored: \"%s\" (expected \"%s\")", now,
           t_found_algo);
}

/* A byte setting as the library reads it (an integer, then K, M or G: powers of 1024), def where
 * unset (TCOLL_SHM_BYTES, TCOLL_SYMMETRIC_BYTES). */
static inline size_t t_env_bytes(const char *name, size_t def) {
  const char *v = getenv(name);
  if (!v || !*v) return def;
  char *end = NULL;
  size_t x = (size_t)strtoull(v, &end, 10);
  switch (*end) {
  case 'k':
  case 'K': return x << 10;
  case 'm':
  case 'M': return x << 20;
  case 'g':
  case 'G': return x << 30;
  default: return x;
  }
}

#endif
