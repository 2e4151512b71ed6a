#include "detail.h"

#include "../comm.h"
#include "../drive.h"
#include "../mpiglue/mpi_glue.h"
#include "../tensor.h"
#include "registry.h"
#include "trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fixed-size and plain, so it travels as bytes. */
typedef struct fingerprint {
  int32_t status; /* this rank's local failure, or 0 */
  char op[28];
  int32_t dtype, ndim, agree, root, redop, dim, ntensors;
  int64_t shape[TCOLL_MAX_DIMS];
  double scalar;
  uint64_t seq;
  uint64_t shapes_hash;
  char err[120]; /* this rank's failure, shortened */
} fingerprint_t;

static void fill(fingerprint_t *f, const tc_work_t *w, int status) {
  memset(f, 0, sizeof *f);
  f->status = status;
  snprintf(f->op, sizeof f->op, "%s", w->op);
  f->dtype = w->dtype;
  f->ndim = w->ndim;
  f->agree = w->agree;
  f->root = w->root;
  f->redop = w->redop;
  f->dim = w->dim;
  f->ntensors = w->ntensors;
  memcpy(f->shape, w->shape, sizeof f->shape);
  f->scalar = w->scalar;
  f->seq = w->comm_seq;
  f->shapes_hash = w->shapes_hash;
  if (status) snprintf(f->err, sizeof f->err, "%s", tcoll_last_error());
}

/* How one field reads in a message. */
typedef void (*show_fn)(const fingerprint_t *f, char *buf, size_t len);
static void show_op(const fingerprint_t *f, char *b, size_t n) { snprintf(b, n, "%s", f->op); }
static void show_dtype(const fingerprint_t *f, char *b, size_t n) {
  snprintf(b, n, "%s", tcoll_dtype_name(f->dtype));
}
static void show_shape(const fingerprint_t *f, char *b, size_t n) {
  int from = f->agree == TC_AGREE_ROW ? 1 : 0;
  char s[128];
  tc_shape_str(s, sizeof s, f->ndim - from, f->shape + from);
  snprintf(b, n, from ? "[*, %s" : "%s", from ? s + 1 : s);
}
static void show_root(const fingerprint_t *f, char *b, size_t n) { snprintf(b, n, "%d", f->root); }
static void show_redop(const fingerprint_t *f, char *b, size_t n) {
  if (f->redop == TC_REDOP_PREMUL_SUM)
    snprintf(b, n, "premul_sum(%g)", f->scalar);
  else
    snprintf(b, n, "%s", f->redop < 0 ? "none" : tc_redop_kind_name(f->redop));
}
static void show_dim(const fingerprint_t *f, char *b, size_t n) {
  if (!strcmp(f->op, "shard_dim_all_to_all")) /* both dims travel in one field */
    snprintf(b, n, "gather_dim %d, shard_dim %d", f->dim / TCOLL_MAX_DIMS, f->dim % TCOLL_MAX_DIMS);
  else
    snprintf(b, n, "%d", f->dim);
}
static void show_seq(const fingerprint_t *f, char *b, size_t n) {
  snprintf(b, n, "%llu", (unsigned long long)f->seq);
}
static void show_list(const fingerprint_t *f, char *b, size_t n) {
  snprintf(b, n, "%d tensor(s), descriptor hash %016llx", f->ntensors,
           (unsigned long long)f->shapes_hash);
}

static bool same_op(const fingerprint_t *a, const fingerprint_t *b) {
  return !strcmp(a->op, b->op);
}
static bool same_dtype(const fingerprint_t *a, const fingerprint_t *b) {
  return a->dtype == b->dtype;
}
static bool same_shape(const fingerprint_t *a, const fingerprint_t *b) {
  if (a->agree == TC_AGREE_DTYPE) return true;
  if (a->ndim != b->ndim) return false;
  int from = a->agree == TC_AGREE_ROW ? 1 : 0;
  for (int i = from; i < a->ndim && i < TCOLL_MAX_DIMS; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}
static bool same_root(const fingerprint_t *a, const fingerprint_t *b) { return a->root == b->root; }
static bool same_redop(const fingerprint_t *a, const fingerprint_t *b) {
  return a->redop == b->redop && (a->redop != TC_REDOP_PREMUL_SUM || a->scalar == b->scalar);
}
static bool same_dim(const fingerprint_t *a, const fingerprint_t *b) { return a->dim == b->dim; }
static bool same_seq(const fingerprint_t *a, const fingerprint_t *b) { return a->seq == b->seq; }
/* Coalesced and list calls: the other tensors' dtypes and shapes (the first is in "shape"). */
static bool same_list(const fingerprint_t *a, const fingerprint_t *b) {
  if (a->ntensors != b->ntensors) return false;
  return a->ntensors <= 1 || a->agree != TC_AGREE_SHAPE || a->shapes_hash == b->shapes_hash;
}

static const struct field {
  const char *name;
  bool (*same)(const fingerprint_t *, const fingerprint_t *);
  show_fn show;
} fields[] = {
    {"op", same_op, show_op},          {"sequence number", same_seq, show_seq},
    {"dtype", same_dtype, show_dtype}, {"shape", same_shape, show_shape},
    {"root", same_root, show_root},    {"reduce op", same_redop, show_redop},
    {"dim", same_dim, show_dim},       {"tensors", same_list, show_list},
};

/* Appends "field: rank 0 X, rank 2 Y" for a field on which some rank differs from rank 0. */
static size_t describe_field(const struct field *fd, const fingerprint_t *all, int size, char *buf,
                             size_t len) {
  size_t off = 0;
  char val[160];
  for (int r = 1; r < size; r++) {
    if (fd->same(&all[0], &all[r])) continue;
    if (!off) {
      fd->show(&all[0], val, sizeof val);
      off += (size_t)snprintf(buf, len, "%s: rank 0 %s", fd->name, val);
    }
    fd->show(&all[r], val, sizeof val);
    if (off < len) off += (size_t)snprintf(buf + off, len - off, ", rank %d %s", r, val);
  }
  return off < len ? off : len;
}

static int compare(const tc_work_t *w, const fingerprint_t *all, int size, int local_status) {
  char msg[1024], comm[80];
  size_t off = 0;
  for (int r = 0; r < size && off < sizeof msg; r++) {
    if (all[r].status && r != w->comm->rank)
      off += (size_t)snprintf(msg + off, sizeof msg - off, "%srank %d could not start %s (%s: %s)",
                              off ? "; " : "", r, all[r].op, tcoll_status_string(all[r].status),
                              all[r].err);
  }
  /* A rank that failed locally sent no signature worth comparing. */
  bool any_failed = off > 0 || local_status;
  for (size_t k = 0; k < TC_ARRAY_LEN(fields) && !any_failed && off + 2 < sizeof msg; k++) {
    size_t n =
        describe_field(&fields[k], all, size, msg + off + (off ? 2 : 0), sizeof msg - off - 2);
    if (n) {
      if (off) memcpy(msg + off, "; ", 2);
      off += n + (off ? 2 : 0);
    }
  }
  if (!off || local_status) return local_status; /* a local failure stays the caller's own error */
  tc_error(TCOLL_ERR_MISMATCH, "ranks disagree on %s (comm seq %llu) on comm %s: %s", w->op,
           (unsigned long long)w->comm_seq, tc_comm_label(w->comm, comm, sizeof comm), msg);
  tc_warn("%s", tcoll_last_error());
  tc_trace_dump("mismatch");
  return TCOLL_ERR_MISMATCH;
}

/* Exchanges given up at a timeout. A late rank may still join one, and MPI then writes its
 * buffers: they stay allocated, reachable from here, until their request is found complete (at
 * the next timeout or at finalize). */
typedef struct parked {
  MPI_Request req;
  void *mem;
  struct parked *next;
} parked_t;
static parked_t *parked;
static pthread_mutex_t parked_mu = PTHREAD_MUTEX_INITIALIZER;

/* Frees the parked exchanges whose requests completed. */
static void sweep_parked(void) {
  pthread_mutex_lock(&parked_mu);
  for (parked_t **pp = &parked; *pp;) {
    parked_t *q = *pp;
    int done = 0;
    if (PMPI_Test(&q->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 0;
    if (!done) {
      pp = &q->next;
      continue;
    }
    *pp = q->next;
    free(q->mem);
    free(q);
  }
  pthread_mutex_unlock(&parked_mu);
}

void tc_detail_fini(void) { sweep_parked(); }

static void park(MPI_Request req, void *mem) {
  parked_t *q = malloc(sizeof *q);
  if (!q) return; /* the buffers stay allocated, unrecorded */
  *q = (parked_t){req, mem, NULL};
  pthread_mutex_lock(&parked_mu);
  q->next = parked;
  parked = q;
  pthread_mutex_unlock(&parked_mu);
}

/* Completes a request of the checks, bounded by TCOLL_TIMEOUT: a rank that never arrives must
 * not hang the others (and with TCOLL_ON_TIMEOUT=abort, ends the job). The check runs inside a
 * post, and a peer may reach it only after waiting for an earlier collective whose later steps
 * this rank starts: every schedule is driven while it waits (drive.h). mem holds every buffer of
 * the request (heap): on a timeout it is parked with the request, and the communicator is
 * marked unusable, since its ranks no longer agree on which check is which. */
static int finish_exchange(const tc_work_t *w, MPI_Request *req, const char *what, void *mem) {
  char comm[80];
  double deadline = tc_cfg.timeout > 0 ? tc_now() + tc_cfg.timeout : 0.0;
  int rc = tc_wait_driving(req, deadline);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, what);
  if (*req == MPI_REQUEST_NULL) return TCOLL_SUCCESS;
  sweep_parked();
  park(*req, mem);
  __atomic_store_n(&w->comm->detail_timed_out, w->comm_seq, __ATOMIC_RELAXED);
  tc_error(TCOLL_ERR_TIMEOUT,
           "DETAIL check of %s (comm seq %llu) on comm %s: not every rank arrived within %g s (a "
           "rank is "
           "missing this collective; the communicator is no longer usable)",
           w->op, (unsigned long long)w->comm_seq, tc_comm_label(w->comm, comm, sizeof comm),
           tc_cfg.timeout);
  return tc_timeout_diagnose(true);
}

/* A communicator whose check timed out: its ranks no longer pair their checks alike. */
static int refuse_timed_out(const tc_work_t *w) {
  uint64_t seq = __atomic_load_n(&w->comm->detail_timed_out, __ATOMIC_RELAXED);
  if (!seq) return TCOLL_SUCCESS;
  char comm[80];
  return tc_error(
      TCOLL_ERR_STATE,
      "comm %s is no longer usable: the DETAIL check of its collective seq %llu timed out (a rank "
      "was missing it); %s started nothing",
      tc_comm_label(w->comm, comm, sizeof comm), (unsigned long long)seq, w->op);
}

/* The fingerprints of every rank, gathered into mem (size + 1 of them: this rank's first). */
static int exchange(const tc_work_t *w, fingerprint_t *mem) {
  MPI_Request req;
  int rc = PMPI_Iallgather(mem, (int)sizeof *mem, MPI_BYTE, mem + 1, (int)sizeof *mem, MPI_BYTE,
                           w->comm->ctrl, &req);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Iallgather (DETAIL check)");
  return finish_exchange(w, &req, "the DETAIL check", mem);
}

/* What must agree across ranks, as one number: the fields the same_* tests compare, with the
 * same exceptions (rows of all_to_all_single, per-peer shapes of the list all_to_all). */
static uint64_t agreement_hash(const fingerprint_t *f) {
  uint64_t h = 1469598103934665603ULL;
#define MIX(x)             \
  do {                     \
    h ^= (uint64_t)(x);    \
    h *= 1099511628211ULL; \
  } while (0)
  for (const char *c = f->op; *c; c++) MIX((unsigned char)*c);
  MIX(f->seq);
  MIX(f->dtype);
  if (f->agree != TC_AGREE_DTYPE) {
    MIX(f->ndim);
    for (int i = f->agree == TC_AGREE_ROW ? 1 : 0; i < f->ndim && i < TCOLL_MAX_DIMS; i++)
      MIX(f->shape[i]);
  }
  MIX(f->root);
  MIX(f->redop);
  if (f->redop == TC_REDOP_PREMUL_SUM) {
    uint64_t bits;
    memcpy(&bits, &f->scalar, sizeof bits);
    MIX(bits);
  }
  MIX(f->dim);
  MIX(f->ntensors);
  if (f->ntensors > 1 && f->agree == TC_AGREE_SHAPE) MIX(f->shapes_hash);
#undef MIX
  return h;
}

/* Whether every rank has the same agreement hash and none failed locally: one small
 * all-reduce (max of h, max of ~h = ~min of h, max of the failure flag). The full fingerprints
 * are exchanged only to explain a disagreement. */
static int all_agree(const tc_work_t *w, const fingerprint_t *mine, bool *agree) {
  uint64_t h = agreement_hash(mine), *v = malloc(3 * sizeof *v);
  if (!v) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate the DETAIL check");
  v[0] = h;
  v[1] = ~h;
  v[2] = mine->status != 0;
  MPI_Request req;
  int rc = PMPI_Iallreduce(MPI_IN_PLACE, v, 3, MPI_UINT64_T, MPI_MAX, w->comm->ctrl, &req);
  if (rc != MPI_SUCCESS)
    rc = tc_mpi_error(rc, "MPI_Iallreduce (DETAIL check)");
  else if ((rc = finish_exchange(w, &req, "the DETAIL check", v)) == TCOLL_ERR_TIMEOUT)
    return rc; /* v parked */
  if (!rc) *agree = v[0] == ~v[1] && v[2] == 0;
  free(v);
  return rc;
}

int tc_detail_check(tc_work_t *w, int local_status) {
  int size = w->comm->size;
  int rc = refuse_timed_out(w);
  if (rc) return rc;
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", tcoll_last_error());
  fingerprint_t mine;
  fill(&mine, w, local_status);
  bool agree = false;
  rc = all_agree(w, &mine, &agree);
  if (!rc && !agree) {
    fingerprint_t *mem = malloc((size_t)(size + 1) * sizeof *mem); /* mine, then every rank's */
    if (!mem) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate the DETAIL check");
    mem[0] = mine;
    rc = exchange(w, mem);
    if (rc == TCOLL_ERR_TIMEOUT) return rc; /* mem parked */
    if (!rc) rc = compare(w, mem + 1, size, local_status);
    free(mem);
  }
  if (rc == local_status && local_status) tc_restore_error(saved);
  return rc;
}

int tc_detail_check_splits(tc_work_t *w, const int64_t *isplit, const int64_t *osplit, bool list) {
  int size = w->comm->size, rc = refuse_timed_out(w);
  if (rc) return rc;
  /* Every buffer of the exchanges in one block (parked whole on a timeout): this rank's splits
   * as sent, what each rank j sends me, per rank its first disagreement (peer, expected, sent),
   * mine, and the flag. */
  int64_t *mem = malloc((5 * (size_t)size + 4) * sizeof *mem);
  if (!mem) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate the DETAIL split check");
  int64_t *sent = mem, *sends = mem + size, (*bad)[3] = (int64_t(*)[3])(mem + 2 * size),
          *mine = mem + 5 * size, *any_bad = mine + 3;
  memcpy(sent, isplit, (size_t)size * sizeof *sent);
  MPI_Request req;
  rc = PMPI_Ialltoall(sent, 1, MPI_INT64_T, sends, 1, MPI_INT64_T, w->comm->ctrl, &req);
  if (rc == MPI_SUCCESS)
    rc = finish_exchange(w, &req, "the DETAIL split check", mem);
  else
    rc = tc_mpi_error(rc, "MPI_Ialltoall (DETAIL split check)");
  mine[0] = -1;
  mine[1] = mine[2] = 0;
  for (int j = 0; j < size && !rc; j++) {
    if (sends[j] != osplit[j]) {
      mine[0] = j;
      mine[1] = osplit[j];
      mine[2] = sends[j];
      break;
    }
  }
  *any_bad = mine[0] >= 0; /* one number first; the details only if someone disagrees */
  if (!rc) {
    rc = PMPI_Iallreduce(MPI_IN_PLACE, any_bad, 1, MPI_INT64_T, MPI_MAX, w->comm->ctrl, &req);
    rc = rc == MPI_SUCCESS ? finish_exchange(w, &req, "the DETAIL split check", mem)
                           : tc_mpi_error(rc, "MPI_Iallreduce (DETAIL split check)");
  }
  if (!rc && !*any_bad) {
    free(mem);
    return TCOLL_SUCCESS;
  }
  if (!rc) {
    rc = PMPI_Iallgather(mine, 3, MPI_INT64_T, bad, 3, MPI_INT64_T, w->comm->ctrl, &req);
    rc = rc == MPI_SUCCESS ? finish_exchange(w, &req, "the DETAIL split check", mem)
                           : tc_mpi_error(rc, "MPI_Iallgather (DETAIL split check)");
  }
  if (rc == TCOLL_ERR_TIMEOUT) return rc; /* mem parked */
  if (rc) {
    free(mem);
    return rc;
  }
  char msg[1024], comm[80];
  size_t off = 0;
  for (int r = 0; r < size && off < sizeof msg; r++) {
    if (bad[r][0] < 0) continue;
    int j = (int)bad[r][0];
    off += (size_t)snprintf(
        msg + off, sizeof msg - off,
        "%srank %d expects %lld %s from rank %d (its %s[%d]) but rank %d sends %lld (its %s[%d])",
        off ? "; " : "", r, (long long)bad[r][1], list ? "elements" : "rows", j,
        list ? "outs" : "output_split_sizes", j, j, (long long)bad[r][2],
        list ? "ins" : "input_split_sizes", r);
  }
  free(mem);
  if (!off) return TCOLL_SUCCESS;
  tc_error(TCOLL_ERR_MISMATCH, "ranks disagree on %s (comm seq %llu) on comm %s: %s", w->op,
           (unsigned long long)w->comm_seq, tc_comm_label(w->comm, comm, sizeof comm), msg);
  tc_warn("%s", tcoll_last_error());
  tc_trace_dump("mismatch");
  return TCOLL_ERR_MISMATCH;
}
