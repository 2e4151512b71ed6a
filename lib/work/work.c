#include "work.h"

#include "../comm.h"
#include "../base/dtype.h"
#include "../base/host_loops.h"
#include "../device/device.h"
#include "pipeline.h"
#include "staging.h"
#include "registry.h"
#include "../base/scratch.h"
#include "../tensor.h"
#include "trace.h"
#include "detail.h"
#include "../mpiglue/mpi_glue.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_KEEP 1024
#define THREAD_KEEP 8

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static tc_work_t *pool;
static int pool_size;
static uint64_t next_seq;

/* Each thread keeps a few works of its own, so that the common post-wait cycle takes no pool
 * lock; a thread's works go back to the shared pool when it exits. */
typedef struct thread_cache {
  tc_work_t *w[THREAD_KEEP];
  int n;
} thread_cache_t;
static _Thread_local TC_TLS_HOT thread_cache_t cache;
static _Thread_local TC_TLS_HOT bool cache_registered;
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void free_work(tc_work_t *w);

static void flush_cache(void *arg) {
  thread_cache_t *c = arg;
  pthread_mutex_lock(&pool_lock);
  while (c->n > 0) {
    tc_work_t *w = c->w[--c->n];
    w->next_free = pool;
    pool = w;
    pool_size++;
  }
  pthread_mutex_unlock(&pool_lock);
}

static void make_cache_key(void) { pthread_key_create(&cache_key, flush_cache); }

static tc_work_t *cache_pop(void) { return cache.n > 0 ? cache.w[--cache.n] : NULL; }

static bool cache_push(tc_work_t *w) {
  if (cache.n == THREAD_KEEP) return false;
  if (!cache_registered) { /* so that an exiting thread returns its works */
    pthread_once(&cache_once, make_cache_key);
    pthread_setspecific(cache_key, &cache);
    cache_registered = true;
  }
  cache.w[cache.n++] = w;
  return true;
}

uint64_t tc_work_count_posted(void) { return __atomic_load_n(&next_seq, __ATOMIC_RELAXED); }

/* Grows *arr (of elem bytes each) to hold at least need entries (rarely: tables are kept). */
static int grow_slow(void **arr, int *cap, int need, size_t elem) {
  int c = *cap ? *cap : 4;
  while (c < need) c *= 2;
  void *p = realloc(*arr, (size_t)c * elem);
  if (!p) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot grow a work's table to %d entries", c);
  *arr = p;
  *cap = c;
  return TCOLL_SUCCESS;
}

static inline int grow(void **arr, int *cap, int need, size_t elem) {
  return TC_LIKELY(need <= *cap) ? TCOLL_SUCCESS : grow_slow(arr, cap, need, elem);
}

static uint64_t hash_shapes(const tcoll_tensor_t *t, int n) {
  uint64_t h = 1469598103934665603ULL;
  for (int i = 0; i < n; i++) {
    int64_t v[TCOLL_MAX_DIMS + 2] = {t[i].dtype, t[i].ndim};
    for (int d = 0; d < t[i].ndim && d < TCOLL_MAX_DIMS; d++) v[d + 2] = t[i].shape[d];
    for (int k = 0; k < TCOLL_MAX_DIMS + 2; k++) {
      h ^= (uint64_t)v[k];
      h *= 1099511628211ULL;
    }
  }
  return h;
}

static void set_signature(tc_work_t *w, const tc_sig_t *sig) {
  static const tc_sig_t none = {.n = 1, .root = -1, .dim = -1};
  if (!sig) sig = &none;
  const tcoll_tensor_t *t = sig->t;
  if (t) {
    w->dtype = t->dtype;
    w->ndim = t->ndim;
    w->device = t->device;
    memcpy(w->shape, t->shape, sizeof w->shape);
  } else {
    w->dtype = TCOLL_UINT8;
    w->ndim = 0;
    w->device = TCOLL_HOST;
    memset(w->shape, 0, sizeof w->shape);
  }
  w->ntensors = t ? sig->n : 0;
  w->root = sig->root;
  w->redop = sig->op ? sig->op->kind : -1;
  w->scalar = sig->op ? sig->op->scalar : 0.0;
  w->dim = sig->dim;
  w->agree = sig->agree;
  w->local = sig->local;
  /* Only DETAIL compares it across ranks; skip the hashing otherwise. */
  w->shapes_hash = tc_cfg.debug >= TCOLL_LOG_DETAIL && t && w->agree == TC_AGREE_SHAPE
                       ? hash_shapes(t, sig->n)
                       : 0;
}

/* A work from this thread's cache, the pool, or new (its tables empty: see tc_work_recycle). */
static tc_work_t *acquire(void) {
  tc_work_t *w = cache_pop();
  if (!w) {
    pthread_mutex_lock(&pool_lock);
    w = pool;
    if (w) {
      pool = w->next_free;
      pool_size--;
    }
    pthread_mutex_unlock(&pool_lock);
  }
  if (!w) {
    w = calloc(1, sizeof *w);
    if (!w) return NULL;
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines come from tc_now() */
    pthread_cond_init(&w->wake, &ca);
    pthread_condattr_destroy(&ca);
  }
  return w;
}

/* The per-call fields (the tables' counts are 0: a new work's, or reset by tc_work_recycle). */
static void init(tc_work_t *w, const char *op, tcoll_comm_t *comm, const tc_sig_t *sig) {
  w->op = op;
  w->comm = comm;
  w->seq = w->comm_seq = 0;
  w->bytes = 0;
  w->refs = 0;
  w->posted = w->done = w->host_math = w->priv_taken = false;
  w->algo = NULL;
  w->status = TCOLL_SUCCESS;
  w->err[0] = '\0';
  w->t_post = w->t_done = 0.0;
  set_signature(w, sig);
  tc_sched_reset(&w->sched, comm, 0);
  w->divisor = 1.0;
  w->finish = NULL;
  w->next_free = NULL;
  w->driver = 1; /* the poster drives it until tc_work_end; nobody else sees it before */
  w->sleepers = 0;
}

int tc_work_begin(tc_work_t **out, const char *op, tcoll_comm_t *comm, const tc_sig_t *sig) {
  tc_work_t *w = acquire();
  if (!w) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate a work");
  init(w, op, comm, sig);
  *out = w;
  return TCOLL_SUCCESS;
}

static inline int add_buf(tc_work_t *w, void *base, size_t nbytes, bool written) {
  if (!base) return TCOLL_SUCCESS; /* an empty buffer without storage: nothing to key or wait for */
  int rc = grow((void **)&w->bufs, &w->buf_cap, w->nbuf + 1, sizeof *w->bufs);
  if (rc) return rc;
  w->bufs[w->nbuf++] = (tc_wbuf_t){.base = base, .nbytes = nbytes, .written = written, .owner = w};
  w->bytes += nbytes;
  return TCOLL_SUCCESS;
}

int tc_work_key(tc_work_t *w, void *base, size_t nbytes) { return add_buf(w, base, nbytes, false); }

/* Zeros into a fresh output: on the host at once; on a device on tcoll's h2d stream, without
 * waiting: the work's ready event makes whoever pops the output wait for them. */
static int zero_output(tc_work_t *w, const tcoll_tensor_t *out) {
  size_t n = tc_nbytes(out);
  if (out->device == TCOLL_HOST || n == 0) {
    memset(out->data, 0, n);
    return TCOLL_SUCCESS;
  }
  int dev = out->device;
  void *d2h, *h2d, *ev = NULL;
  int rc = tc_dev_copy_streams(dev, &d2h, &h2d);
  if (!rc) rc = tc_dev()->memset_async(out->data, 0, n, dev, h2d);
  if (!rc) rc = tc_dev_event_get(dev, &ev);
  if (!rc) rc = tc_dev()->event_record(dev, ev, h2d);
  if (!rc) return tc_work_ready(w, dev, ev, true);
  if (ev) tc_dev_event_put(dev, ev);
  return rc;
}

static int prepare_output(tc_work_t *w, tcoll_tensor_t *out, tcoll_dtype_t dtype, int ndim,
                          const int64_t *shape, int device, bool zero) {
  int rc;
  if (!out->data) {
    if ((rc = grow((void **)&w->allocated, &w->alloc_cap, w->nalloc + 1, sizeof *w->allocated)))
      return rc;
    *out = tcoll_tensor_make(NULL, dtype, ndim, shape, device);
    if ((rc = tc_tensor_storage(out, false))) return rc;
    w->allocated[w->nalloc++] = out;
    if (zero && (rc = zero_output(w, out))) return rc;
  }
  return add_buf(w, out->data, tc_nbytes(out), true);
}

int tc_work_output(tc_work_t *w, tcoll_tensor_t *out, tcoll_dtype_t dtype, int ndim,
                   const int64_t *shape, int device) {
  if (out->data)
    return add_buf(w, out->data, tc_nbytes(out), true); /* the usual, preallocated output */
  return prepare_output(w, out, dtype, ndim, shape, device, false);
}

int tc_work_output_zeroed(tc_work_t *w, tcoll_tensor_t *out, tcoll_dtype_t dtype, int ndim,
                          const int64_t *shape, int device) {
  return prepare_output(w, out, dtype, ndim, shape, device, true);
}

/* Numbers w (process-wide and on its communicator) and, with TCOLL_DEBUG=DETAIL, checks it
 * across ranks; rc: whether keying it worked here. */
static inline int number_and_check(tc_work_t *w, int rc) {
  w->seq = __atomic_add_fetch(&next_seq, 1, __ATOMIC_RELAXED);
  if (w->local) return rc;
  w->comm_seq = tc_comm_next_seq(w->comm);
  tc_sched_set_seq(&w->sched, w->comm_seq);
  if (tc_cfg.debug >= TCOLL_LOG_DETAIL) {
    /* Every rank that reached this point takes part, also one that failed locally. */
    int checked = tc_detail_check(w, rc);
    if (!rc && checked) {
      tc_registry_remove_entries(w);
      rc = checked;
    }
  }
  return rc;
}

int tc_work_register(tc_work_t *w) { return number_and_check(w, tc_registry_add(w)); }

int tc_work_begin_alone(tc_work_t **out, const char *op, tcoll_comm_t *comm, const tc_sig_t *sig,
                        tcoll_tensor_t *output, const tcoll_tensor_t *in) {
  if (tc_cfg.debug >= TCOLL_LOG_DETAIL || !output->data) return TC_NOT_ALONE;
  tc_work_t *w = acquire();
  if (!w) return TC_NOT_ALONE;
  /* a work used before: room for one buffer and one read (nothing to grow in the lock) */
  if (!w->buf_cap || !w->read_nodes_cap || !tc_registry_quiet_lock()) {
    tc_work_recycle(w);
    return TC_NOT_ALONE;
  }
  init(w, op, comm, sig);
  add_buf(w, output->data, tc_nbytes(output), true);
  *out = w;
  return number_and_check(w, tc_registry_quiet_add_io(w, in));
}

int tc_call_failed(const char *op, tcoll_comm_t *comm, int rc) {
  if (rc && comm && tc_cfg.debug >= TCOLL_LOG_DETAIL) {
    tc_work_t w = {
        .op = op, .comm = comm, .dtype = TCOLL_UINT8, .root = -1, .redop = -1, .dim = -1};
    w.comm_seq = tc_comm_next_seq(comm);
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", tcoll_last_error());
    tc_detail_check(&w, rc);
    tc_restore_error(saved); /* the caller learns of its own failure, not of the others' reaction */
  }
  return rc;
}

/* Waits for other (held: pending on base, the output of earlier work that in[*next] reads), then
 * records the inputs from in[*next] on, waiting likewise for each pending one. */
static int inputs_after(tc_work_t *w, const tcoll_tensor_t *in, int n, int *next, tc_work_t *other,
                        void *base) {
  int rc = TCOLL_SUCCESS;
  /* Like PyTorch's AsyncCollectiveTensor: using a pending result waits for it. */
  while (other) {
    tc_registry_release(other, base, false);
    if ((rc = tc_wait_ptr(base, 0.0, true))) return rc;
    other = tc_registry_claim_inputs(w, in, n, next, &base, &rc);
  }
  return rc;
}

int tc_work_inputs(tc_work_t *w, const tcoll_tensor_t *in, int n) {
  int next = 0, rc = TCOLL_SUCCESS;
  void *base = NULL;
  tc_work_t *other = tc_registry_claim_inputs(w, in, n, &next, &base, &rc);
  return other ? inputs_after(w, in, n, &next, other, base) : rc;
}

int tc_work_register_inputs(tc_work_t *w, const tcoll_tensor_t *in, int n) {
  /* DETAIL checks across ranks before the inputs are waited for, as tc_work_register would. */
  if (tc_cfg.debug >= TCOLL_LOG_DETAIL && !w->local) {
    int rc = tc_work_register(w);
    return rc ? rc : tc_work_inputs(w, in, n);
  }
  int next = 0, rc = TCOLL_SUCCESS;
  void *base = NULL;
  tc_work_t *other = tc_registry_add_io(w, in, n, &next, &base, &rc);
  rc = number_and_check(w, rc);
  if (rc) {
    if (other) tc_registry_release(other, base, false);
    return rc;
  }
  return other ? inputs_after(w, in, n, &next, other, base) : rc;
}

int tc_work_reserve(tc_work_t *w, int n) { return tc_sched_reserve(&w->sched, n); }

MPI_Request *tc_work_req(tc_work_t *w) { return tc_sched_posted(&w->sched); }

int tc_work_hold(tc_work_t *w, void *p, int kind) {
  int rc = grow((void **)&w->held, &w->held_cap, w->nheld + 1, sizeof *w->held);
  if (rc) return rc;
  w->held[w->nheld++] = (tc_held_t){.p = p, .kind = kind};
  return TCOLL_SUCCESS;
}

int tc_work_hold_type(tc_work_t *w, tc_mpi_type_t *t) {
  int rc = grow((void **)&w->held, &w->held_cap, w->nheld + 1, sizeof *w->held);
  if (rc) {
    tc_mpi_type_put(t);
    return rc;
  }
  w->held[w->nheld++] = (tc_held_t){.kind = TC_HELD_MPI_TYPE, .type = *t};
  return TCOLL_SUCCESS;
}

void *tc_work_scratch(tc_work_t *w, size_t nbytes) {
  void *p = tc_scratch_get(nbytes ? nbytes : 1);
  if (!p) {
    tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %zu bytes of scratch memory", nbytes);
    return NULL;
  }
  if (tc_work_hold(w, p, TC_HELD_SCRATCH)) {
    tc_scratch_put(p);
    return NULL;
  }
  return p;
}

int tc_work_copyback(tc_work_t *w, void *dst, const void *src, size_t nbytes, int device) {
  int rc = grow((void **)&w->cbs, &w->cb_cap, w->ncb + 1, sizeof *w->cbs);
  if (rc) return rc;
  /* Whichever thread completes the work, the copy into dst follows what the posting thread had
   * queued on its stream when it posted (dst may still be in use there). Nothing is queued on
   * that stream during the post: one event per device serves all the work's copy-backs. */
  for (int i = w->ncb; i-- > 0;) {
    if (w->cbs[i].device == device && w->cbs[i].posted_ev) {
      w->cbs[w->ncb++] = (tc_copyback_t){dst, src, nbytes, device, w->cbs[i].posted_ev, false};
      return TCOLL_SUCCESS;
    }
  }
  void *ev = NULL;
  if (device != TCOLL_HOST) {
    if ((rc = tc_dev_event_get(device, &ev))) return rc;
    if ((rc = tc_dev()->event_record(device, ev, tc_dev_current_stream(device)))) {
      tc_dev_event_put(device, ev);
      return rc;
    }
  }
  w->cbs[w->ncb++] = (tc_copyback_t){dst, src, nbytes, device, ev, ev != NULL};
  return TCOLL_SUCCESS;
}

int tc_work_ready(tc_work_t *w, int device, void *event, bool pooled) {
  if (w->nready == TC_MAX_READY) { /* more devices than that: settle the oldest on the host */
    int rc = tc_dev()->event_sync(w->ready[0].device, w->ready[0].event);
    if (w->ready[0].pooled) tc_dev_event_put(w->ready[0].device, w->ready[0].event);
    memmove(&w->ready[0], &w->ready[1], (TC_MAX_READY - 1) * sizeof w->ready[0]);
    w->nready--;
    if (rc) return rc;
  }
  w->ready[w->nready++] = (tc_ready_t){device, event, pooled};
  return TCOLL_SUCCESS;
}

int tc_work_ready_wait_any(const tc_work_t *w) {
  int rc = TCOLL_SUCCESS;
  for (int i = 0; i < w->nready && !rc; i++)
    rc = tc_dev()->stream_wait_event(w->ready[i].device, tc_dev_current_stream(w->ready[i].device),
                                     w->ready[i].event);
  return rc;
}

int tc_work_divide(tc_work_t *w, void *buf, int64_t n, tcoll_dtype_t dtype, double divisor) {
  if (w->ndivide == TC_MAX_DIVIDE)
    return tc_error(TCOLL_ERR_INTERNAL, "too many regions to divide");
  w->divide[w->ndivide++] = (tc_divide_t){buf, n, dtype};
  w->divisor = divisor;
  return TCOLL_SUCCESS;
}

int tc_work_piece(tc_work_t *w, void *dst, int dst_device, const void *src, size_t nbytes) {
  /* Device memory is written like any staged output: after what the posting thread's stream
   * had queued when it posted, not after the stream of whichever thread completes the work. */
  if (dst_device != TCOLL_HOST) return tc_work_copyback(w, dst, src, nbytes, dst_device);
  int rc = grow((void **)&w->pieces, &w->piece_cap, w->npiece + 1, sizeof *w->pieces);
  if (rc) return rc;
  w->pieces[w->npiece++] = (tc_piece_t){dst, src, nbytes};
  return TCOLL_SUCCESS;
}

static void release_held_slow(tc_work_t *w) {
  for (int i = 0; i < w->nheld; i++) {
    if (w->held[i].kind == TC_HELD_SCRATCH)
      tc_scratch_put(w->held[i].p);
    else if (w->held[i].kind == TC_HELD_PIPE)
      tc_pipe_release(w->held[i].p);
    else if (w->held[i].kind == TC_HELD_MPI_TYPE)
      tc_mpi_type_put(&w->held[i].type);
    else if (w->held[i].kind == TC_HELD_MPI_TYPES) {
      for (MPI_Datatype *t = w->held[i].p; *t != MPI_DATATYPE_NULL; t++) PMPI_Type_free(t);
      free(w->held[i].p);
    } else
      tc_pinned_put(w->held[i].p);
  }
  w->nheld = 0;
}

static inline void release_held(tc_work_t *w) {
  if (w->nheld) release_held_slow(w);
}

/* Device events a work still holds: of copy-backs that never ran (a failed work), and of its
 * outputs' readiness. */
static void put_events(tc_work_t *w) {
  for (int i = 0; i < w->ncb; i++)
    if (w->cbs[i].owns_ev) tc_dev_event_put(w->cbs[i].device, w->cbs[i].posted_ev);
  for (int i = 0; i < w->nready; i++)
    if (w->ready[i].pooled) tc_dev_event_put(w->ready[i].device, w->ready[i].event);
  w->nready = 0;
}

void tc_work_recycle(tc_work_t *w) {
  release_held(w);
  if (w->ncb || w->nready) put_events(w);
  w->sched.n = w->sched.first = w->sched.nmpi = 0;
  w->nbuf = w->nalloc = w->ncb = w->npiece = w->ndivide = 0; /* tc_work_begin relies on it */
  if (cache_push(w)) return;
  pthread_mutex_lock(&pool_lock);
  if (pool_size < POOL_KEEP) {
    w->next_free = pool;
    pool = w;
    pool_size++;
    w = NULL;
  }
  pthread_mutex_unlock(&pool_lock);
  if (w) free_work(w);
}

static void free_work(tc_work_t *w) {
  tc_sched_free(&w->sched);
  free(w->bufs);
  free(w->read_nodes);
  free(w->allocated);
  free(w->held);
  free(w->cbs);
  free(w->pieces);
  pthread_mutex_destroy(&w->lock);
  pthread_cond_destroy(&w->wake);
  free(w);
}

static void undo_outputs(tc_work_t *w) {
  for (int i = 0; i < w->nalloc; i++) tc_tensor_release(w->allocated[i]);
  w->nalloc = 0;
}

/* The algorithm of this thread's last posted collective (NULL: the literal mapping). */
static _Thread_local TC_TLS_HOT const char *last_algo;

void tc_work_note_algo(const char *algo) { last_algo = algo; }

const char *tcoll_last_algorithm(void) { return last_algo ? last_algo : "mpi"; }

/* INFO logs: one line per posted work with a communicator. */
static TC_COLD void log_posted(const tc_work_t *w) {
  char shape[96], comm[80];
  tc_info("seq %llu %s %s %s on comm %s (seq %llu, size %d), %zu bytes, device %d, algorithm %s",
          (unsigned long long)w->seq, w->op, tcoll_dtype_name(w->dtype),
          tc_shape_str(shape, sizeof shape, w->ndim, w->shape),
          tc_comm_label(w->comm, comm, sizeof comm), (unsigned long long)w->comm_seq, w->comm->size,
          w->bytes, w->device, w->algo ? w->algo : "mpi");
}

static int divide_step(void *arg) {
  tc_work_t *w = arg;
  for (int i = 0; i < w->ndivide; i++)
    tc_host_divide(w->divide[i].buf, w->divide[i].dtype, w->divide[i].n, w->divisor);
  return TCOLL_SUCCESS;
}

static int finish_step(void *arg) {
  tc_work_t *w = arg;
  return w->finish(w);
}

static int pieces_step(void *arg) {
  tc_work_t *w = arg;
  for (int i = 0; i < w->npiece; i++)
    memcpy(w->pieces[i].dst, w->pieces[i].src, w->pieces[i].nbytes);
  return TCOLL_SUCCESS;
}

static int copy_backs_step(void *arg) {
  return tc_stage_copy_backs(arg); /* device-async, on tcoll's streams */
}

/* The completion steps (see work.h), each in a round of its own after everything posted. */
static int add_completion_steps(tc_work_t *w) {
  if (!(w->ndivide | w->npiece | w->ncb) && !w->finish) return TCOLL_SUCCESS; /* the usual: none */
  tc_sched_t *s = &w->sched;
  int rc = TCOLL_SUCCESS;
  if (w->ndivide) rc = tc_sched_call(s, divide_step, w, true);
  if (!rc && w->finish) rc = tc_sched_call(s, finish_step, w, true);
  if (!rc && w->npiece) rc = tc_sched_call(s, pieces_step, w, true);
  if (!rc && w->ncb) rc = tc_sched_call(s, copy_backs_step, w, true);
  return rc;
}

static int end_failed(tc_work_t *w, int rc);

int tc_work_end(tc_work_t *w, int rc) {
  if (rc == TCOLL_SUCCESS && (rc = add_completion_steps(w)) && tc_sched_posted_any(&w->sched)) {
    /* Requests in flight, no room for the steps that complete them: wait for them here. */
    tc_sched_abandon(&w->sched);
  }
  if (rc == TCOLL_SUCCESS) {
    tc_sched_start(&w->sched);
    if (w->sched.status) rc = tc_error(w->sched.status, "%s", w->sched.err);
  }
  if (rc == TCOLL_SUCCESS && w->nbuf == 0 && w->sched.n == 0) {
    /* Nothing to key and nothing posted (an empty gather off its root): already complete. */
    w->done = true;
    tc_work_unclaim(w);
    tc_registry_remove_work(w);
    return TCOLL_SUCCESS;
  }
  if (rc == TCOLL_SUCCESS) {
    w->posted = true;
    tc_work_note_algo(w->algo);
    w->t_post = tc_stamp();
    w->nalloc = 0;
    if (tc_cfg.debug >= TCOLL_LOG_INFO && w->comm) log_posted(w);
    tc_trace_posted(w);
    tc_work_unclaim(w);
    return TCOLL_SUCCESS;
  }
  return end_failed(w, rc);
}

/* tc_work_end's failure: undone if nothing was posted, else kept so that a wait completes it. */
static TC_COLD int end_failed(tc_work_t *w, int rc) {
  bool started = w->posted || tc_sched_posted_any(&w->sched);
  if (!started) tc_sched_abandon(&w->sched); /* out of the engine's lists */
  if (!started) {
    undo_outputs(w);
    w->status = rc; /* a waiter that found it meanwhile sees a finished work */
    w->done = true;
    snprintf(w->err, sizeof w->err, "%s", tc_last_message());
    tc_work_unclaim(w);
    tc_registry_remove_work(w);
    return rc;
  }
  /* Some requests are in flight: keep the work so that a wait completes and reports it. */
  w->status = rc;
  snprintf(w->err, sizeof w->err, "%s", tc_last_message());
  w->nalloc = 0;
  w->t_post = tc_stamp();
  tc_trace_posted(w);
  tc_work_unclaim(w);
  return rc;
}

/* ------------------------------------------------------------------ drivers */

bool tc_work_try_claim(tc_work_t *w) {
  int free_ = 0;
  return __atomic_compare_exchange_n(&w->driver, &free_, 1, false, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED);
}

/* The sleeper counts itself before it looks at driver, and the driver clears driver before it
 * looks at the sleepers (both sequentially consistent): one of them sees the other, so a
 * sleeper is either woken or never sleeps. */
bool tc_work_claim(tc_work_t *w, double deadline) {
  while (!tc_work_try_claim(w)) {
    pthread_mutex_lock(&w->lock);
    __atomic_add_fetch(&w->sleepers, 1, __ATOMIC_SEQ_CST);
    bool late = false;
    while (__atomic_load_n(&w->driver, __ATOMIC_SEQ_CST) && !late) {
      if (deadline <= 0) {
        pthread_cond_wait(&w->wake, &w->lock);
        continue;
      }
      double t = deadline;
      struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
      late = pthread_cond_timedwait(&w->wake, &w->lock, &ts) != 0 && tc_now() >= deadline;
    }
    __atomic_sub_fetch(&w->sleepers, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&w->lock);
    if (late) return false;
  }
  return true;
}

void tc_work_unclaim(tc_work_t *w) {
  __atomic_store_n(&w->driver, 0, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&w->sleepers, __ATOMIC_SEQ_CST) == 0) return;
  pthread_mutex_lock(&w->lock);
  pthread_cond_broadcast(&w->wake);
  pthread_mutex_unlock(&w->lock);
}

/* The schedule's error, said with what the work is. */
static int sched_progress(tc_work_t *w, bool block, double deadline) {
  int rc = tc_sched_progress(&w->sched, block, deadline);
  if (rc == TCOLL_SUCCESS || rc == TCOLL_IN_PROGRESS) return rc;
  char what[160];
  return tc_error(rc, "%s: %s", tc_work_describe(w, what, sizeof what), w->sched.err);
}

int tc_work_progress(tc_work_t *w, bool block, double deadline) {
  if (w->done) return w->status;
  int rc = sched_progress(w, block, deadline);
  if (rc == TCOLL_IN_PROGRESS) return block ? TCOLL_ERR_TIMEOUT : TCOLL_IN_PROGRESS;
  if (rc != TCOLL_SUCCESS && w->status == TCOLL_SUCCESS) {
    w->status = rc;
    snprintf(w->err, sizeof w->err, "%s", tc_last_message());
  }
  w->t_done = tc_stamp();
  /* Its inputs are read no more: the registry ignores reads of done work (no lock needed here)
   * and forgets them when the work is recycled. */
  __atomic_store_n(&w->done, true, __ATOMIC_RELEASE);
  release_held(w);
  tc_trace_done(w);
  if (tc_cfg.debug >= TCOLL_LOG_INFO) {
    char what[160];
    tc_info("%s completed in %.3f ms: %s", tc_work_describe(w, what, sizeof what),
            1e3 * (w->t_done - w->t_post), tcoll_status_string(w->status));
  }
  return w->status;
}

const char *tc_work_describe(const tc_work_t *w, char *buf, size_t len) {
  char comm[80] = "none";
  if (!w->comm) {
    snprintf(buf, len, "%s #%llu (local, %zu bytes)", w->op, (unsigned long long)w->seq, w->bytes);
    return buf;
  }
  snprintf(buf, len, "%s #%llu on comm %s (seq %llu, %zu bytes)", w->op, (unsigned long long)w->seq,
           tc_comm_label(w->comm, comm, sizeof comm), (unsigned long long)w->comm_seq, w->bytes);
  return buf;
}

void tc_work_pool_cleanup(void) {
  /* Only this thread's cache is reachable here; other threads return theirs when they exit
   * (to the pool, freed at the next cleanup or kept for a later tcoll_init). */
  while (cache.n > 0) free_work(cache.w[--cache.n]);
  pthread_mutex_lock(&pool_lock);
  tc_work_t *w = pool;
  pool = NULL;
  pool_size = 0;
  pthread_mutex_unlock(&pool_lock);
  while (w) {
    tc_work_t *next = w->next_free;
    free_work(w);
    w = next;
  }
}
