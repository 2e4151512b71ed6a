/* One-line log records on stderr, prefixed with the world rank. */
#include "core.h"

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
