/* One-line log records on stderr, prefixed with the world rank. */
#include "base.h"

#include <stdio.h>
#include <time.h>

static const char *level_name(tcoll_log_level_t level) {
  switch (level) {
  case TCOLL_LOG_WARN: return "WARN";
  case TCOLL_LOG_INFO: return "INFO";
  default: return "DETAIL";
  }
}

void tc_log(tcoll_log_level_t level, const char *fmt, ...) {
  if (level > tc_cfg.debug) return;
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* One fprintf per record so lines of different ranks do not interleave mid-line. */
  fprintf(stderr, "[tcoll %d] %s: %s\n", tc_g.world_rank, level_name(level), msg);
}

double tc_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Every collective takes two stamps (tc_stamp, base.h). The flight recorder's default use,
 * saying what hangs and since when, needs milliseconds; CLOCK_MONOTONIC_COARSE gives them for
 * about 5 ns a read on this project's machines, against 25 ns for CLOCK_MONOTONIC. */
double tc_stamp_resolution(void) {
  struct timespec res;
  if (tc_stamps_precise() || clock_getres(CLOCK_MONOTONIC_COARSE, &res)) return 0.0;
  return (double)res.tv_sec + 1e-9 * (double)res.tv_nsec;
}
