/* A work: one posted collective, its MPI requests and what must happen when they complete.
 *
 * Life of a work (every collective follows it):
 *   tc_work_begin    take a work from the pool, driven by the posting thread (tc_work_claim),
 *                    with the call's signature (tc_sig_t)
 *   tc_work_output   name each output (allocating it if out->data == NULL: uninitialized, the
 *                    collective writes all of it; tc_work_output_zeroed where it may not)
 *   tc_work_register put the outputs in the registry (TCOLL_ERR_BUSY if one is pending); with
 *                    TCOLL_DEBUG=DETAIL, check the signature across ranks first
 *   tc_work_inputs   wait for inputs that are pending outputs of earlier work
 *                    (tc_work_register_inputs: both, in one registry critical section)
 *   ...post MPI_I* calls into tc_work_req() slots, set w->finish...
 *   tc_work_end      let go of it; on failure before anything was posted, undo everything
 * tc_work_end appends the completion steps to the work's schedule, in rounds after everything
 * posted: divide (AVG), finish (op-specific), pieces (unpacking), copy-backs (staged outputs to
 * device memory). A waiter (or the progress thread) runs the schedule to its end, then pops its
 * buffer. The work returns to the pool when its last buffer is popped. A staging pipeline is
 * steps of the schedule too (pipeline.h); work that runs elsewhere (a composite's inner
 * collectives) is a POLL step: one progress path serves every work. */
#ifndef TC_WORK_H
#define TC_WORK_H

#include "../base/base.h"
#include "../base/redop.h"
#include "../sched/schedule.h"
#include "../mpiglue/mpi_glue.h"

typedef struct tc_work tc_work_t;

/* What ranks must agree on for a collective: DETAIL mode compares it across ranks before
 * posting, and logs and traces describe the call with it. */
enum {
  TC_AGREE_SHAPE, /* dtype and whole shape (most collectives) */
  TC_AGREE_ROW,   /* dtype and shape[1:] (all_to_all_single: row counts differ per rank) */
  TC_AGREE_DTYPE  /* dtype only (list all_to_all: per-peer shapes) */
};
typedef struct tc_sig {
  const tcoll_tensor_t *t; /* the tensor(s) that describe the call */
  int n;                   /* how many (coalesced calls hash all of them) */
  int root;                /* -1: none */
  const tc_redop_t *op;    /* NULL: none */
  int dim;                 /* -1: none */
  int agree;               /* TC_AGREE_* */
  bool local;              /* no communication of its own (e.g. the gradient module's composite
                              works): not numbered on the communicator, not DETAIL-checked */
} tc_sig_t;
#define TC_SIG(...) (&(tc_sig_t){.n = 1, .root = -1, .dim = -1, __VA_ARGS__})
/* Runs once, after the requests completed, on the posting-side buffers (host or staging). */
typedef int (*tc_finish_fn)(tc_work_t *w);

typedef struct tc_wbuf {
  void *base;
  size_t nbytes;
  bool written; /* an output; false for a key that only names the work (gather off its root) */
  /* A wait that completed the work pops this buffer's entry later, at the registry's next
   * critical section (registry.c, "deferred pops"): queued says it is on that list. */
  int queued;
  struct tc_wbuf *pop_next;
  tc_work_t *owner;
} tc_wbuf_t;

/* Host memory whose content goes to device memory once the work completes (a staged output, or
 * a piece of a packed result): src is a pinned buffer the work holds (tc_stage_scratch), since
 * the copy may run after the work is recycled. */
typedef struct tc_copyback {
  void *dst;
  const void *src;
  size_t nbytes;
  int device;
  void *posted_ev; /* recorded on the posting thread's current stream: the copy waits for it */
  bool owns_ev;    /* the first copy-back of its device: returns posted_ev to the pool */
} tc_copyback_t;

/* An event after which an output of the work is ready on a device: whoever pops the output
 * (in any thread, also after the progress thread completed the work) makes its current stream
 * of that device wait for it. */
#define TC_MAX_READY 8
typedef struct tc_ready {
  int device;
  void *event;
  bool pooled; /* taken from the event pool: returned when the work is recycled */
} tc_ready_t;

/* A copy made at completion: packed results to their host output. */
typedef struct tc_piece {
  void *dst;
  const void *src;
  size_t nbytes;
} tc_piece_t;

/* A host region divided at completion (AVG). */
#define TC_MAX_DIVIDE TCOLL_NUM_DTYPES
typedef struct tc_divide {
  void *buf;
  int64_t n;
  tcoll_dtype_t dtype;
} tc_divide_t;

/* A block of memory the work returns when it is recycled. */
typedef struct tc_held {
  void *p;
  /* TC_HELD_SCRATCH, TC_HELD_PINNED, TC_HELD_PIPE, TC_HELD_MPI_TYPES or TC_HELD_MPI_TYPE */
  int kind;
  tc_mpi_type_t type; /* TC_HELD_MPI_TYPE */
} tc_held_t;
enum {
  TC_HELD_SCRATCH,
  TC_HELD_PINNED,
  TC_HELD_PIPE /* a staging pipeline's slots and events (pipeline.h) */,
  TC_HELD_MPI_TYPES /* a malloc'd array of MPI datatypes ended by MPI_DATATYPE_NULL: all freed */,
  TC_HELD_MPI_TYPE /* a datatype of the cache (or not), put back */
};

#define TC_WORK_PRIV_BYTES 256
#define TC_WORK_ERR_LEN 512

struct tc_work {
  /* One thread at a time advances a work: its driver (see tc_work_claim). driver: 1 while one
   * is; sleepers: threads waiting on `wake` (under `lock`) for it to let go. */
  int driver, sleepers;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  const char *op;
  tcoll_comm_t *comm;
  uint64_t seq;      /* process-wide */
  uint64_t comm_seq; /* on comm */
  size_t bytes;      /* payload, for logs and traces */
  int refs;          /* registry entries + waiters holding it (registry lock) */
  bool posted;       /* at least one request was posted */
  bool host_math;    /* the op computes on its buffers on the host (AVG, premul, packing...):
                        staging then hands it host buffers even where MPI takes device ones */
  bool done;
  const char *algo; /* how it runs: its algorithm's name (NULL: "mpi", the literal MPI call) */
  int status;
  char err[TC_WORK_ERR_LEN];
  double t_post, t_done;
  /* The call's signature (see tc_sig_t), for logs, traces and cross-rank checks. */
  tcoll_dtype_t dtype;
  int ndim;
  int64_t shape[TCOLL_MAX_DIMS];
  int device;
  int ntensors, root, redop, dim, agree;
  bool local;
  double scalar;
  uint64_t shapes_hash; /* every tensor's dtype and shape */

  tc_sched_t sched; /* what the work does: its MPI requests and local steps */
  tc_wbuf_t *bufs;  /* outputs, keyed in the registry */
  int nbuf, buf_cap;
  uintptr_t *read_nodes; /* the registry's nodes of the inputs it reads (registry lock): forgotten
                            without a search */
  size_t nread_nodes, read_nodes_cap;
  tcoll_tensor_t **allocated; /* outputs this call allocated: freed if the call fails */
  int nalloc, alloc_cap;
  tc_held_t *held;
  int nheld, held_cap;
  tc_copyback_t *cbs;
  int ncb, cb_cap;
  tc_piece_t *pieces;
  int npiece, piece_cap;
  tc_ready_t ready[TC_MAX_READY];
  int nready;
  tc_divide_t divide[TC_MAX_DIVIDE];
  int ndivide;
  double divisor;

  tc_finish_fn finish;
  bool priv_taken;                                     /* tc_work_small handed out priv */
  _Alignas(16) unsigned char priv[TC_WORK_PRIV_BYTES]; /* op-specific completion data */
  tc_work_t *next_free;
};

/* Op-specific completion data lives inside the work (no allocation per call). */
#define TC_WORK_PRIV(w, type) ((type *)(void *)(w)->priv)
#define TC_PRIV_FITS(type) \
  _Static_assert(sizeof(type) <= TC_WORK_PRIV_BYTES, #type " fits in a work")

int tc_work_begin(tc_work_t **w, const char *op, tcoll_comm_t *comm, const tc_sig_t *sig);
/* The algorithm the collective runs, by name (for logs, traces and tcoll_last_algorithm). */
static inline void tc_work_set_algo(tc_work_t *w, const char *algo) { w->algo = algo; }
/* The algorithm of this thread's last collective (tcoll_last_algorithm): tc_work_end notes it;
 * an op that runs without a work notes its own. */
void tc_work_note_algo(const char *algo);
/* Prepares an output: with out->data == NULL allocates it (dtype, ndim, shape, device given),
 * otherwise it was already checked. Records it as a buffer of the work. The storage comes from
 * the cache uninitialized: the collective must write every byte of it on success. */
int tc_work_output(tc_work_t *w, tcoll_tensor_t *out, tcoll_dtype_t dtype, int ndim,
                   const int64_t *shape, int device);
/* The same for an output the work may leave (partly) unwritten on this rank, where the contract
 * promises zeros (reduce's output off its root, a gradient output left unchanged): an allocated
 * one is zero-filled. */
int tc_work_output_zeroed(tc_work_t *w, tcoll_tensor_t *out, tcoll_dtype_t dtype, int ndim,
                          const int64_t *shape, int device);
/* Records a buffer to key the work under without it being an output tensor. */
int tc_work_key(tc_work_t *w, void *base, size_t nbytes);
int tc_work_register(tc_work_t *w);
/* For a call that failed its argument checks on this rank: with TCOLL_DEBUG=DETAIL, still takes
 * part in the cross-rank check (so that the other ranks learn of it instead of hanging).
 * Returns rc. comm may be NULL (not resolved). */
int tc_call_failed(const char *op, tcoll_comm_t *comm, int rc);
/* Waits for pending work on each input (skipping this work's own buffers). */
int tc_work_inputs(tc_work_t *w, const tcoll_tensor_t *in, int n);
/* tc_work_register then tc_work_inputs, with the outputs keyed and the inputs recorded in one
 * registry critical section (without TCOLL_DEBUG=DETAIL, which checks across ranks between the
 * two). */
int tc_work_register_inputs(tc_work_t *w, const tcoll_tensor_t *in, int n);
/* tc_work_begin, tc_work_output of a preallocated output and tc_work_register_inputs of one
 * input in one registry critical section, where nothing is pending but work already waited (a
 * post-wait loop: nothing the call could conflict with or wait for, so nothing is searched) and
 * TCOLL_DEBUG is below DETAIL. TC_NOT_ALONE (nothing done): take those three steps instead;
 * otherwise as they would return, *w set (end it with tc_work_end). */
enum { TC_NOT_ALONE = -1000 }; /* (no status of tcoll.h) */
int tc_work_begin_alone(tc_work_t **w, const char *op, tcoll_comm_t *comm, const tc_sig_t *sig,
                        tcoll_tensor_t *out, const tcoll_tensor_t *in);
/* Space for n more requests (so that posting never fails half-way for lack of memory). */
int tc_work_reserve(tc_work_t *w, int n);
MPI_Request *tc_work_req(tc_work_t *w);
/* Pooled host scratch memory held until the work is recycled. */
void *tc_work_scratch(tc_work_t *w, size_t nbytes);
/* A few bytes for a step's state, held as long: the work's private bytes the first time (no
 * allocation: the usual one call per work), scratch after (a coalesced call builds several). For
 * ops that keep nothing else in priv. */
static inline void *tc_work_small(tc_work_t *w, size_t nbytes) {
  if (w->priv_taken || nbytes > sizeof w->priv) return tc_work_scratch(w, nbytes);
  w->priv_taken = true;
  return w->priv;
}
int tc_work_hold(tc_work_t *w, void *p, int kind);
/* Holds t (from tc_mpi_vector...) until the work is recycled: for steps the engine posts later
 * than the builder returns. On failure t is put back at once. */
int tc_work_hold_type(tc_work_t *w, tc_mpi_type_t *t);
int tc_work_copyback(tc_work_t *w, void *dst, const void *src, size_t nbytes, int device);
/* An event the work's outputs on device are ready after (see tc_ready_t). */
int tc_work_ready(tc_work_t *w, int device, void *event, bool pooled);
/* The calling thread's current streams wait for the work's ready events (at every pop). */
int tc_work_ready_wait_any(const tc_work_t *w);
static inline int tc_work_ready_wait(const tc_work_t *w) {
  return w->nready ? tc_work_ready_wait_any(w) : TCOLL_SUCCESS;
}
/* Completion steps: divide buf (host) by w->divisor; copy src (host) to dst: a memcpy for host
 * memory, a copy-back (tc_work_copyback) for device memory. */
int tc_work_divide(tc_work_t *w, void *buf, int64_t n, tcoll_dtype_t dtype, double divisor);
int tc_work_piece(tc_work_t *w, void *dst, int dst_device, const void *src, size_t nbytes);
/* Finishes posting: returns rc. If rc is an error and nothing was posted, the work is undone
 * (unregistered, allocated outputs freed, recycled); if requests were posted, the work stays
 * registered with the error so that a wait completes what was posted and reports it. */
int tc_work_end(tc_work_t *w, int rc);

/* Who advances a work: the driver. The poster drives it from tc_work_begin to tc_work_end;
 * afterwards any thread may claim it (a waiter, the progress thread). Claiming is an atomic flag,
 * without a lock of its own (a waiter claims inside the registry critical section where it found
 * the work); a thread that finds it taken returns (tc_work_try_claim) or sleeps until the driver
 * lets go (tc_work_claim). */
bool tc_work_try_claim(tc_work_t *w);
/* Claims w, sleeping while another thread drives it; false if the deadline (> 0) passed first. */
bool tc_work_claim(tc_work_t *w, double deadline);
/* Lets go of w, waking the threads that wait to claim it. */
void tc_work_unclaim(tc_work_t *w);

/* Advances w (the caller drives it: tc_work_claim). Returns the work's status once done,
 * TCOLL_IN_PROGRESS, or TCOLL_ERR_TIMEOUT when block and deadline passed. */
int tc_work_progress(tc_work_t *w, bool block, double deadline);
/* Returns w to the pool (nobody references it any more). */
void tc_work_recycle(tc_work_t *w);
/* "all_reduce #12 on comm 'tp' (seq 3, 4096 bytes)" */
const char *tc_work_describe(const tc_work_t *w, char *buf, size_t len);
void tc_work_pool_cleanup(void);
uint64_t tc_work_count_posted(void);

#endif
