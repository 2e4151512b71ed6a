#include "trace.h"

#include "comm.h"
#include "tensor.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

typedef enum { REC_EMPTY, REC_POSTED, REC_DONE, REC_FAILED } rec_state_t;

typedef struct record {
  uint64_t seq, comm_seq;
  char op[28];
  char comm[48];
  uint32_t comm_id;
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

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static record_t ring[TC_TRACE_RECORDS];

void tc_trace_posted(const tc_work_t *w) {
  record_t *r = &ring[w->seq % TC_TRACE_RECORDS];
  pthread_mutex_lock(&mu);
  r->seq = w->seq;
  r->comm_seq = w->comm_seq;
  snprintf(r->op, sizeof r->op, "%s", w->op);
  if (w->comm) tc_comm_label(w->comm, r->comm, sizeof r->comm);
  else snprintf(r->comm, sizeof r->comm, "local");
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
  pthread_mutex_unlock(&mu);
}

void tc_trace_done(const tc_work_t *w) {
  record_t *r = &ring[w->seq % TC_TRACE_RECORDS];
  pthread_mutex_lock(&mu);
  if (r->seq == w->seq) {
    r->t_done = w->t_done;
    r->state = w->status ? REC_FAILED : REC_DONE;
    r->status = w->status;
  }
  pthread_mutex_unlock(&mu);
}

void tc_trace_reset(void) {
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
  int n = 0;
  uint64_t max = 0;
  for (int i = 0; i < TC_TRACE_RECORDS; i++)
    if (ring[i].state != REC_EMPTY && ring[i].seq > max) max = ring[i].seq;
  uint64_t first = max >= TC_TRACE_RECORDS ? max - TC_TRACE_RECORDS + 1 : 1;
  for (uint64_t s = first; s <= max && max; s++) {
    record_t *r = &ring[s % TC_TRACE_RECORDS];
    if (r->state != REC_EMPTY && r->seq == s) out[n++] = *r;
  }
  return n;
}

static void write_json(FILE *f, const record_t *recs, int n, const char *reason) {
  /* Timestamps are monotonic; shift them to wall-clock microseconds so ranks line up. */
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  double now = tc_now();
  double shift = (double)rt.tv_sec + 1e-9 * (double)rt.tv_nsec - now;
  int rank = tc_g.world_rank;
  fprintf(f, "{\"traceEvents\":[\n");
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", rank, rank);
  for (int i = 0; i < n; i++) {
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = recs[j].comm_id == recs[i].comm_id;
    if (!seen)
      fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"args\":{\"name\":\"comm %s\"}}",
              rank, recs[i].comm_id, recs[i].comm);
  }
  for (int i = 0; i < n; i++) {
    const record_t *r = &recs[i];
    char shape[128];
    double end = r->state == REC_POSTED ? now : r->t_done;
    fprintf(f,
            ",\n{\"name\":\"%s\",\"cat\":\"tcoll\",\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,"
            "\"args\":{\"seq\":%llu,\"comm_seq\":%llu,\"comm\":\"%s\",\"comm_size\":%d,\"dtype\":\"%s\","
            "\"shape\":\"%s\",\"bytes\":%zu,\"device\":%d,\"state\":\"%s\",\"status\":\"%s\"}}",
            r->op, rank, r->comm_id, (r->t_post + shift) * 1e6, (end - r->t_post) * 1e6, (unsigned long long)r->seq,
            (unsigned long long)r->comm_seq, r->comm, r->comm_size, tcoll_dtype_name(r->dtype),
            tc_shape_str(shape, sizeof shape, r->ndim, r->shape), r->bytes, r->device, state_name(r->state),
            tcoll_status_string(r->status));
  }
  fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"reason\":\"%s\",\"rank\":%d}}\n", reason, rank);
}

static void summary_to_stderr(const record_t *recs, int n, const char *reason) {
  if (n == 0) return;
  int from = n > 8 ? n - 8 : 0;
  double now = tc_now();
  tc_warn("flight recorder (%s): last %d of %d ops", reason, n - from, n);
  for (int i = from; i < n; i++) {
    const record_t *r = &recs[i];
    char shape[96];
    double end = r->state == REC_POSTED ? now : r->t_done;
    tc_warn("  seq %llu %s on comm %s (seq %llu) %s %s %zu bytes: %s after %.3f ms", (unsigned long long)r->seq, r->op,
            r->comm, (unsigned long long)r->comm_seq, tcoll_dtype_name(r->dtype),
            tc_shape_str(shape, sizeof shape, r->ndim, r->shape), r->bytes, state_name(r->state),
            1e3 * (end - r->t_post));
  }
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
  if (!f) tc_warn("cannot write the flight recorder to %s", path);
  else if (strcmp(reason, "finalize")) tc_warn("flight recorder (%s) written to %s", reason, path);
}
