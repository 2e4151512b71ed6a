/* TCOLL_* environment variables and the tcoll_config_t that mirrors them. */
#include "base.h"

#include <limits.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

tcoll_config_t tc_cfg = {
    .debug = TCOLL_LOG_WARN,
    .timeout = 0.0,
    .abort_on_timeout = 0,
    .max_count = INT_MAX,
    .staging_chunk = TC_DEFAULT_STAGING_CHUNK,
    .cuda_aware = -1,
    .fake_devices = 0,
    .progress_thread = 0,
    .trace_path = "",
    .algo = "auto",
    .wait_yield = 0,
    .cache_bytes = TC_DEFAULT_CACHE_BYTES,
};

tc_settings_t tc_set = {
    .shm = true, .shm_bytes = TC_DEFAULT_SHM_BYTES, .sym_bytes = TC_DEFAULT_SYMMETRIC_BYTES};

static void (*on_cache_limit)(void);
void tc_config_on_cache_limit(void (*fn)(void)) { on_cache_limit = fn; }

/* TCOLL_ALGO's names belong to the algorithm lists (lib/mpi/algo.c): tcoll_init installs their
 * checker before it reads the environment. */
static tc_algo_setting_fn algo_setting;
void tc_config_on_algo(tc_algo_setting_fn fn) { algo_setting = fn; }

static int set_algo(const char *spec, const char *what, bool apply) {
  if (algo_setting) return algo_setting(spec, what, apply);
  if (!strcasecmp(spec, "auto") || !strcmp(spec, tc_cfg.algo)) return TCOLL_SUCCESS;
  return tc_error(TCOLL_ERR_STATE, "%s: algorithms can be chosen once tcoll_init ran", what);
}

static int bad_env(const char *name, const char *value, const char *expected) {
  return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                  "environment variable %s=\"%s\" is invalid (expected %s)", name, value, expected);
}

static int parse_int64(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end != '\0' || x < lo || x > hi) {
    char expected[96];
    snprintf(expected, sizeof expected, "an integer in [%lld, %lld]", (long long)lo, (long long)hi);
    return bad_env(name, v, expected);
  }
  *out = x;
  return TCOLL_SUCCESS;
}

/* Bytes: an integer with an optional K, M, G or T suffix (powers of 1024, "KiB" style too). */
static int parse_bytes(const char *name, const char *v, size_t *out) {
  const char *expected =
      "bytes >= 0: an integer with an optional K, M, G or T suffix (powers of 1024)";
  char *end = NULL;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v || *v == '-' || *v == '+' || *v == ' ') return bad_env(name, v, expected);
  int shift = 0;
  switch (*end) {
  case 'k':
  case 'K':
    shift = 10;
    end++;
    break;
  case 'm':
  case 'M':
    shift = 20;
    end++;
    break;
  case 'g':
  case 'G':
    shift = 30;
    end++;
    break;
  case 't':
  case 'T':
    shift = 40;
    end++;
    break;
  default: break;
  }
  if (shift && *end == 'i') end++;
  if (shift && (*end == 'B' || *end == 'b')) end++;
  if (*end != '\0' || (shift && x > (SIZE_MAX >> shift))) return bad_env(name, v, expected);
  *out = (size_t)x << shift;
  return TCOLL_SUCCESS;
}

static int load_debug(const char *v) {
  if (!strcasecmp(v, "WARN"))
    tc_cfg.debug = TCOLL_LOG_WARN;
  else if (!strcasecmp(v, "INFO"))
    tc_cfg.debug = TCOLL_LOG_INFO;
  else if (!strcasecmp(v, "DETAIL"))
    tc_cfg.debug = TCOLL_LOG_DETAIL;
  else
    return bad_env("TCOLL_DEBUG", v, "WARN, INFO or DETAIL");
  return TCOLL_SUCCESS;
}

static int load_timeout(const char *v) {
  char *end = NULL;
  double t = strtod(v, &end);
  if (end == v || *end != '\0' || !isfinite(t) || t < 0)
    return bad_env("TCOLL_TIMEOUT", v, "a number of seconds >= 0");
  tc_cfg.timeout = t;
  return TCOLL_SUCCESS;
}

static int load_on_timeout(const char *v) {
  if (!strcasecmp(v, "return"))
    tc_cfg.abort_on_timeout = 0;
  else if (!strcasecmp(v, "abort"))
    tc_cfg.abort_on_timeout = 1;
  else
    return bad_env("TCOLL_ON_TIMEOUT", v, "return or abort");
  return TCOLL_SUCCESS;
}

static int load_cuda_aware(const char *v) {
  if (!strcasecmp(v, "auto"))
    tc_cfg.cuda_aware = -1;
  else if (!strcmp(v, "0"))
    tc_cfg.cuda_aware = 0;
  else if (!strcmp(v, "1"))
    tc_cfg.cuda_aware = 1;
  else
    return bad_env("TCOLL_CUDA_AWARE", v, "auto, 0 or 1");
  return TCOLL_SUCCESS;
}

static int load_progress(const char *v) {
  if (!strcasecmp(v, "none"))
    tc_cfg.progress_thread = 0;
  else if (!strcasecmp(v, "thread"))
    tc_cfg.progress_thread = 1;
  else
    return bad_env("TCOLL_PROGRESS", v, "none or thread");
  return TCOLL_SUCCESS;
}

static int load_wait(const char *v) {
  if (!strcasecmp(v, "block"))
    tc_cfg.wait_yield = 0;
  else if (!strcasecmp(v, "yield"))
    tc_cfg.wait_yield = 1;
  else
    return bad_env("TCOLL_WAIT", v, "block or yield");
  return TCOLL_SUCCESS;
}

int tc_config_load(void) {
  const char *v;
  int64_t x;
  int rc;
  tc_set = (tc_settings_t){
      .shm = true, .shm_bytes = TC_DEFAULT_SHM_BYTES, .sym_bytes = TC_DEFAULT_SYMMETRIC_BYTES};
  if ((v = getenv("TCOLL_DEBUG")) && *v && (rc = load_debug(v))) return rc;
  if ((v = getenv("TCOLL_TIMEOUT")) && *v && (rc = load_timeout(v))) return rc;
  if ((v = getenv("TCOLL_ON_TIMEOUT")) && *v && (rc = load_on_timeout(v))) return rc;
  if ((v = getenv("TCOLL_CUDA_AWARE")) && *v && (rc = load_cuda_aware(v))) return rc;
  if ((v = getenv("TCOLL_PROGRESS")) && *v && (rc = load_progress(v))) return rc;
  if ((v = getenv("TCOLL_WAIT")) && *v && (rc = load_wait(v))) return rc;
  if ((v = getenv("TCOLL_MAX_COUNT")) && *v) {
    if ((rc = parse_int64("TCOLL_MAX_COUNT", v, 1, INT_MAX, &x))) return rc;
    tc_cfg.max_count = x;
  }
  if ((v = getenv("TCOLL_STAGING_CHUNK")) && *v) {
    if ((rc = parse_int64("TCOLL_STAGING_CHUNK", v, 256, (int64_t)1 << 40, &x))) return rc;
    tc_cfg.staging_chunk = (size_t)x;
  }
  if ((v = getenv("TCOLL_FAKE_DEVICES")) && *v) {
    if ((rc = parse_int64("TCOLL_FAKE_DEVICES", v, 0, 64, &x))) return rc;
    tc_cfg.fake_devices = (int)x;
  }
  if ((v = getenv("TCOLL_ALGO")) && *v) {
    if (strlen(v) >= sizeof tc_cfg.algo)
      return bad_env("TCOLL_ALGO", v, "a setting shorter than 256 bytes");
    char what[300];
    snprintf(what, sizeof what, "TCOLL_ALGO=\"%s\"", v);
    if ((rc = set_algo(v, what, true))) return rc;
    strcpy(tc_cfg.algo, v);
  }
  if ((v = getenv("TCOLL_CACHE_BYTES")) && *v &&
      (rc = parse_bytes("TCOLL_CACHE_BYTES", v, &tc_cfg.cache_bytes)))
    return rc;
  if ((v = getenv("TCOLL_SHM")) && *v) {
    if (strcmp(v, "0") && strcmp(v, "1")) return bad_env("TCOLL_SHM", v, "0 or 1");
    tc_set.shm = *v == '1';
  }
  if ((v = getenv("TCOLL_SHM_BYTES")) && *v &&
      (rc = parse_bytes("TCOLL_SHM_BYTES", v, &tc_set.shm_bytes)))
    return rc;
  if ((v = getenv("TCOLL_SYMMETRIC_BYTES")) && *v &&
      (rc = parse_bytes("TCOLL_SYMMETRIC_BYTES", v, &tc_set.sym_bytes)))
    return rc;
  if ((v = getenv("TCOLL_TRACE")) && *v) {
    if (strlen(v) >= sizeof tc_cfg.trace_path)
      return bad_env("TCOLL_TRACE", v, "a path shorter than 512 bytes");
    strcpy(tc_cfg.trace_path, v);
  }
  return TCOLL_SUCCESS;
}

int tcoll_get_config(tcoll_config_t *config) {
  TC_ENTER("tcoll_get_config");
  if (!config) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "config is NULL (expected a pointer)");
  *config = tc_cfg;
  return TCOLL_SUCCESS;
}

static bool fixed_fields_equal(const tcoll_config_t *a, const tcoll_config_t *b) {
  return a->cuda_aware == b->cuda_aware && a->fake_devices == b->fake_devices &&
         a->progress_thread == b->progress_thread && !strcmp(a->trace_path, b->trace_path);
}

int tcoll_set_config(const tcoll_config_t *c) {
  TC_ENTER("tcoll_set_config");
  if (!c) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "config is NULL (expected a pointer)");
  if (c->debug < TCOLL_LOG_WARN || c->debug > TCOLL_LOG_DETAIL)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "config->debug is %d (expected 0..2)",
                    (int)c->debug);
  if (!isfinite(c->timeout) || c->timeout < 0)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "config->timeout is %g (expected seconds >= 0)",
                    c->timeout);
  if (c->max_count < 1 || c->max_count > INT_MAX)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "config->max_count is %lld (expected 1..%d)",
                    (long long)c->max_count, INT_MAX);
  if (c->staging_chunk < 256)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "config->staging_chunk is %zu (expected >= 256 bytes)", c->staging_chunk);
  if (!memchr(c->algo, '\0', sizeof c->algo))
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "config->algo is not a terminated string (expected < 256 bytes)");
  char what[300];
  snprintf(what, sizeof what, "config->algo=\"%.256s\"", c->algo);
  int rc = set_algo(c->algo, what, false);
  if (rc) return rc;
  if (!fixed_fields_equal(c, &tc_cfg))
    return tc_error(
        TCOLL_ERR_INVALID_ARGUMENT,
        "cuda_aware, fake_devices, progress_thread and trace_path are fixed at tcoll_init "
        "(set them through the environment)");
  tc_cfg.debug = c->debug;
  tc_cfg.timeout = c->timeout;
  tc_cfg.abort_on_timeout = c->abort_on_timeout ? 1 : 0;
  tc_cfg.max_count = c->max_count;
  tc_cfg.staging_chunk = c->staging_chunk;
  set_algo(c->algo, what, true); /* checked above */
  snprintf(tc_cfg.algo, sizeof tc_cfg.algo, "%s", c->algo);
  tc_cfg.wait_yield = c->wait_yield ? 1 : 0;
  bool lower = c->cache_bytes < tc_cfg.cache_bytes;
  tc_cfg.cache_bytes = c->cache_bytes;
  if (lower && on_cache_limit) on_cache_limit();
  return TCOLL_SUCCESS;
}
