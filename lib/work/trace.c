#include "trace.h"

#include "../comm.h"
#include "../device/cache.h"
#include "../tensor.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

typedef enum { REC_EMPTY, REC_POSTED, REC_DONE, REC_FAILED } rec_state_t;

typedef struct record {
  uint64_t version; /* seqlock: odd while a writer fills the record */
  uint64_t seq, comm_seq;
  const char *op;   /* a string literal of the op's source file */
  uint32_t comm_id; /* named at dump time (tc_comm_label_of: also once the communicator is gone) */
  int comm_size;
  tcoll_dtype_t dtype;
  int ndim;
  int64_t shape[TCOLL_MAX_DIMS];
  size_t bytes;
  int device;
  double t_post, t_done; /* tc_now() */
  rec_state_t state;
  int status;
} record_t;

/* "'name'", "#id" or "local", as tc_comm_label writes it. */
static const char *comm_label(const record_t *r, char *buf, size_t len) {
  if (r->comm_id == UINT32_MAX)
    snprintf(buf, len, "local");
  else
    tc_comm_label_of(r->comm_id, buf, len);
  return buf;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* dumps, one at a time */
static record_t ring[TC_TRACE_RECORDS];

/* Writers never block and never format (the dump formats): each claims its slot by making the
 * version odd, and drops the record if another writer holds the slot (only possible with more
 * than TC_TRACE_RECORDS ops in flight; this is a diagnostic, not an account). */
static record_t *claim(uint64_t seq, uint64_t *v) {
  record_t *r = &ring[seq % TC_TRACE_RECORDS];
  *v = __atomic_load_n(&r->version, __ATOMIC_ACQUIRE);
  if ((*v & 1) || !__atomic_compare_exchange_n(&r->version, v, *v + 1, false, __ATOMIC_ACQ_REL,
                                               __ATOMIC_RELAXED))
    return NULL;
  return r;
}

static void publish(record_t *r, uint64_t v) {
  __atomic_store_n(&r->version, v + 2, __ATOMIC_RELEASE);
}

void tc_trace_posted(const tc_work_t *w) {
  uint64_t v;
  record_t *r = claim(w->seq, &v);
  if (!r) return;
  r->seq = w->seq;
  r->comm_seq = w->comm_seq;
  r->op = w->op;
  r->comm_id = w->comm ? w->comm->id : UINT32_MAX; /* local work gets a row of its own */
  r->comm_size = w->comm ? w->comm->size : 1;
  r->dtype = w->dtype;
  r->ndim = w->ndim;
  memcpy(r->shape, w->shape, sizeof r->shape);
  r->bytes = w->bytes;
  r->device = w->device;
  r->t_post = w->t_post;
  r->t_done = 0;
  r->state = w->status ? REC_FAILED : REC_POSTED;
  r->status = w->status;
  publish(r, v);
}

/* Completion updates its record in place, without claiming the slot: the status, the time, then
 * the state, which says the others are there (a dump that reads the record meanwhile sees it
 * pending, or done a little early with its time still 0). */
void tc_trace_done(const tc_work_t *w) {
  record_t *r = &ring[w->seq % TC_TRACE_RECORDS];
  if (__atomic_load_n(&r->seq, __ATOMIC_RELAXED) != w->seq) return; /* overwritten since */
  __atomic_store_n(&r->status, w->status, __ATOMIC_RELAXED);
  double t = w->t_done;
  __atomic_store(&r->t_done, &t, __ATOMIC_RELAXED);
  __atomic_store_n(&r->state, w->status ? REC_FAILED : REC_DONE, __ATOMIC_RELEASE);
}

/* A consistent copy of a slot, or false if it stays busy. */
static bool read_slot(const record_t *r, record_t *out) {
  for (int tries = 0; tries < 64; tries++) {
    uint64_t v1 = __atomic_load_n(&r->version, __ATOMIC_ACQUIRE);
    if (v1 & 1) continue;
    memcpy(out, r, sizeof *out);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&r->version, __ATOMIC_RELAXED) == v1) return true;
  }
  return false;
}

void tc_trace_reset(void) { /* at teardown: no collective is in flight any more */
  pthread_mutex_lock(&mu);
  memset(ring, 0, sizeof ring);
  pthread_mutex_unlock(&mu);
}

void tc_trace_path(char *buf, size_t len) {
  const char *p = tc_cfg.trace_path;
  const char *pct = strstr(p, "%r");
  size_t n = strlen(p);
  if (pct)
    snprintf(buf, len, "%.*s%d%s", (int)(pct - p), p, tc_g.world_rank, pct + 2);
  else if (n > 5 && !strcmp(p + n - 5, ".json"))
    snprintf(buf, len, "%.*s.%d.json", (int)(n - 5), p, tc_g.world_rank);
  else
    snprintf(buf, len, "%s.%d.json", p, tc_g.world_rank);
}

static const char *state_name(rec_state_t s) {
  switch (s) {
  case REC_POSTED: return "pending";
  case REC_DONE: return "done";
  case REC_FAILED: return "failed";
  default: return "empty";
  }
}

/* Records in sequence order, oldest first: the ring is indexed by seq. */
static int ordered(record_t *out) {
  static record_t snap[TC_TRACE_RECORDS]; /* under mu */
  uint64_t max = 0;
  for (int i = 0; i < TC_TRACE_RECORDS; i++) {
    if (!read_slot(&ring[i], &snap[i])) snap[i].state = REC_EMPTY;
    if (snap[i].state != REC_EMPTY && snap[i].seq > max) max = snap[i].seq;
  }
  int n = 0;
  uint64_t first = max >= TC_TRACE_RECORDS ? max - TC_TRACE_RECORDS + 1 : 1;
  for (uint64_t s = first; s <= max && max; s++) {
    record_t *r = &snap[s % TC_TRACE_RECORDS];
    if (r->state != REC_EMPTY && r->seq == s) out[n++] = *r;
  }
  return n;
}

/* How long r took, or has been pending at `now`. Stamps may come from the coarse clock, which
 * lags the precise one: never negative. */
static double elapsed(const record_t *r, double now) {
  double end = r->state == REC_POSTED ? now : r->t_done;
  return end > r->t_post ? end - r->t_post : 0.0;
}

static void write_json(FILE *f, const record_t *recs, int n, const char *reason) {
  /* Timestamps are monotonic; shift them to wall-clock microseconds so ranks line up. */
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  double now = tc_now();
  double shift = (double)rt.tv_sec + 1e-9 * (double)rt.tv_nsec - now;
  int rank = tc_g.world_rank;
  fprintf(f, "{\"traceEvents\":[\n");
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
          rank, rank);
  for (int i = 0; i < n; i++) {
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = recs[j].comm_id == recs[i].comm_id;
    char label[80];
    if (!seen)
      fprintf(f,
              ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"args\":{\"name\":"
              "\"comm %s\"}}",
              rank, recs[i].comm_id, comm_label(&recs[i], label, sizeof label));
  }
  for (int i = 0; i < n; i++) {
    const record_t *r = &recs[i];
    char shape[128], label[80];
    fprintf(f,
            ",\n{\"name\":\"%s\",\"cat\":\"tcoll\",\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"ts\":%.3f,"
            "\"dur\":%.3f,"
            "\"args\":{\"seq\":%llu,\"comm_seq\":%llu,\"comm\":\"%s\",\"comm_size\":%d,\"dtype\":"
            "\"%s\","
            "\"shape\":\"%s\",\"bytes\":%zu,\"device\":%d,\"state\":\"%s\",\"status\":\"%s\"}}",
            r->op, rank, r->comm_id, (r->t_post + shift) * 1e6, elapsed(r, now) * 1e6,
            (unsigned long long)r->seq, (unsigned long long)r->comm_seq,
            comm_label(r, label, sizeof label), r->comm_size, tcoll_dtype_name(r->dtype),
            tc_shape_str(shape, sizeof shape, r->ndim, r->shape), r->bytes, r->device,
            state_name(r->state), tcoll_status_string(r->status));
  }
  tcoll_cache_info_t c;
  tc_cache_stats(&c);
  fprintf(
      f,
      "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"reason\":\"%s\",\"rank\":%d,\"cache\":{\"in_"
      "use\":%zu,"
      "\"cached\":%zu,\"peak\":%zu,\"limit\":%zu,\"grew\":%llu,\"reused\":%llu,\"freed\":%llu}}}\n",
      reason, rank, c.in_use, c.cached, c.peak, c.limit, (unsigned long long)c.allocated,
      (unsigned long long)c.reused, (unsigned long long)c.freed);
}

static void summary_to_stderr(const record_t *recs, int n, const char *reason) {
  if (n == 0) return;
  int from = n > 8 ? n - 8 : 0;
  double now = tc_now(), res = tc_stamp_resolution();
  char precision[96] = "";
  if (res > 0)
    snprintf(precision, sizeof precision,
             "; times to %.0f ms (TCOLL_TRACE or TCOLL_DEBUG=INFO: to 1 us)", res * 1e3);
  tc_warn("flight recorder (%s): last %d of %d ops%s", reason, n - from, n, precision);
  for (int i = from; i < n; i++) {
    const record_t *r = &recs[i];
    char shape[96], label[80];
    tc_warn("  seq %llu %s on comm %s (seq %llu) %s %s %zu bytes: %s after %.3f ms",
            (unsigned long long)r->seq, r->op, comm_label(r, label, sizeof label),
            (unsigned long long)r->comm_seq, tcoll_dtype_name(r->dtype),
            tc_shape_str(shape, sizeof shape, r->ndim, r->shape), r->bytes, state_name(r->state),
            1e3 * elapsed(r, now));
  }
  tcoll_cache_info_t c;
  tc_cache_stats(&c);
  tc_warn(
      "  storage cache: %zu bytes in use, %zu cached (limit %zu, peak %zu); grew %llu times, "
      "reused %llu, "
      "gave back %llu",
      c.in_use, c.cached, c.limit, c.peak, (unsigned long long)c.allocated,
      (unsigned long long)c.reused, (unsigned long long)c.freed);
}

void tc_trace_dump(const char *reason) {
  static record_t recs[TC_TRACE_RECORDS]; /* under mu */
  pthread_mutex_lock(&mu);
  int n = ordered(recs);
  if (!tc_cfg.trace_path[0]) {
    if (strcmp(reason, "finalize")) summary_to_stderr(recs, n, reason);
    pthread_mutex_unlock(&mu);
    return;
  }
  char path[600];
  tc_trace_path(path, sizeof path);
  FILE *f = fopen(path, "w");
  if (f) {
    write_json(f, recs, n, reason);
    fclose(f);
  }
  pthread_mutex_unlock(&mu);
  if (!f)
    tc_warn("cannot write the flight recorder to %s", path);
  else if (strcmp(reason, "finalize"))
    tc_warn("flight recorder (%s) written to %s", reason, path);
}
