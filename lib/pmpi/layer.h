/* libtcoll-mpi.so, the drop-in layer: MPI_* collective entry points that route a call to tcoll
 * where tcoll serves it and its table says tcoll is faster, and pass every other call to PMPI_*
 * untouched (doc/guide.md, "The drop-in layer").
 *
 * The rule every part keeps: every rank of a communicator takes the same decision for the same
 * collective, so a decision reads only what MPI requires to match across ranks (count, type
 * signature, op, root, communicator) and state that changed at the same collective on every rank
 * (a communicator gets its tcoll twin at its first blocking collective). Files:
 *   state.c        MPI_Init*, MPI_Finalize, the load-time check, TCOLL_MPI, the counts
 *   types.c        datatypes and ops: which calls tcoll can carry, as which tcoll dtype
 *   twins.c        each communicator's tcoll communicator, cached as an attribute
 *   collectives.c  the collective entry points: plan, route or pass
 *   run.c          running a routed call on tcoll (post, finish, a blocking call)
 *   requests.c     routed nonblocking calls as real MPI requests (pending.h)
 *   progress.c     what drives them while the program blocks elsewhere in MPI: MPI's own
 *                  progress loop (Open MPI) or a progress thread
 *   waits.c        the completion calls (MPI_Wait, MPI_Test..., MPI_Request_free)
 *   persistent.c   MPI-4's persistent collectives, MPI_Start, MPI_Startall
 *   device.c       device buffers on an MPI that cannot read them: host mirrors around a call
 * Uses tcoll's public API and one internal header, lib/mpi/layer.h (the table's verdict). */
#ifndef TC_PMPI_LAYER_H
#define TC_PMPI_LAYER_H

#include "../mpi/layer.h"

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The functions the layer exports (it is built with hidden visibility). */
#define LAY_EXPORT __attribute__((visibility("default")))

/* A loaded object's file name without its directories (dl_iterate_phdr's dlpi_name). */
static inline const char *lay_file_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* ------------------------------------------------------------------ state.c */

/* The functions the layer defines. */
#define LAY_DEFINED(X)     \
  X(Allreduce)             \
  X(Iallreduce)            \
  X(Reduce)                \
  X(Ireduce)               \
  X(Bcast)                 \
  X(Ibcast)                \
  X(Allgather)             \
  X(Iallgather)            \
  X(Alltoall)              \
  X(Ialltoall)             \
  X(Reduce_scatter_block)  \
  X(Ireduce_scatter_block) \
  X(Reduce_scatter)        \
  X(Ireduce_scatter)       \
  X(Init)                  \
  X(Init_thread)           \
  X(Finalize)              \
  X(Wait)                  \
  X(Test)                  \
  X(Request_get_status)    \
  X(Waitall)               \
  X(Testall)               \
  X(Waitany)               \
  X(Testany)               \
  X(Waitsome)              \
  X(Testsome)              \
  X(Request_free)          \
  X(Start)                 \
  X(Startall)              \
  LAY_DEFINED_MPI4(X)
#if MPI_VERSION >= 4
#define LAY_DEFINED_MPI4(X)    \
  X(Allreduce_init)            \
  X(Reduce_init)               \
  X(Bcast_init)                \
  X(Allgather_init)            \
  X(Alltoall_init)             \
  X(Reduce_scatter_block_init) \
  X(Reduce_scatter_init)
#else
#define LAY_DEFINED_MPI4(X)
#endif

/* The next definition of each (dlsym(RTLD_NEXT, "MPI_X") at load): a profiling tool loaded after
 * the layer, else MPI's own. The program's calls that pass through go there, so that such a tool
 * still sees them; the layer's own MPI calls, and tcoll's, go to PMPI_* directly. */
typedef struct lay_next {
#define LAY_NEXT_FIELD(f) __typeof__(&PMPI_##f) f;
  LAY_DEFINED(LAY_NEXT_FIELD)
#undef LAY_NEXT_FIELD
} lay_next_t;
extern lay_next_t lay_next;

/* The functions the layer defines, for the counts. */
typedef enum {
  LAY_ALLREDUCE,
  LAY_IALLREDUCE,
  LAY_REDUCE,
  LAY_IREDUCE,
  LAY_BCAST,
  LAY_IBCAST,
  LAY_ALLGATHER,
  LAY_IALLGATHER,
  LAY_ALLTOALL,
  LAY_IALLTOALL,
  LAY_REDUCE_SCATTER_BLOCK,
  LAY_IREDUCE_SCATTER_BLOCK,
  LAY_REDUCE_SCATTER,
  LAY_IREDUCE_SCATTER,
  LAY_ALLREDUCE_INIT, /* MPI-4's persistent forms: counted per start */
  LAY_REDUCE_INIT,
  LAY_BCAST_INIT,
  LAY_ALLGATHER_INIT,
  LAY_ALLTOALL_INIT,
  LAY_REDUCE_SCATTER_BLOCK_INIT,
  LAY_REDUCE_SCATTER_INIT,
  LAY_NUM_FNS
} lay_fn_t;

/* Whether the layer routes at all: MPI_Init went through it, TCOLL_MPI is on on every rank and
 * tcoll started. Read on every call (relaxed: it changes only in MPI_Init and MPI_Finalize). */
extern bool lay_on;
/* Nonblocking calls can be routed: every rank has a way to progress them (progress.c). */
extern bool lay_nonblocking;
/* The MPI's own persistent collectives are wrong (MPICH before 4.1: stale results after the first
 * start; with some of a communicator's persistent calls routed and others not, its schedules
 * failed with "Invalid communicator"), on every rank: the layer routes each persistent call that
 * tcoll serves, whatever it measured. */
extern bool lay_mpi_persistent_wrong;

/* How routed nonblocking calls progress while the program blocks elsewhere in MPI (progress.c):
 * a callback in MPI's own progress loop (Open MPI's opal_progress_register), which needs no
 * thread level of its own, or a progress thread, which needs MPI_THREAD_MULTIPLE. */
typedef enum { LAY_PROGRESS_HOOK = 1, LAY_PROGRESS_THREAD } lay_progress_t;
/* Before MPI_Init: the way this process will take (TCOLL_MPI_PROGRESS, what the MPI offers). */
lay_progress_t lay_progress_plan(void);
/* "hook", "thread", or "none" (nonblocking calls pass through): the way in use. */
const char *lay_progress_name(void);

/* This thread's depth of calls into tcoll. MPI's progress loop runs the layer's hook inside any
 * MPI call this thread makes, tcoll's own included, and tcoll must not be entered again from
 * there (its locks are not recursive): the hook does nothing while it is above zero. Every call of
 * the layer's into tcoll that may reach MPI goes through LAY_TCOLL. initial-exec: a plain offset
 * from the thread pointer. */
extern _Thread_local __attribute__((tls_model("initial-exec"))) int lay_in_tcoll;
#define LAY_TCOLL(call)               \
  __extension__({                     \
    lay_in_tcoll++;                   \
    __typeof__(call) lay_r_ = (call); \
    lay_in_tcoll--;                   \
    lay_r_;                           \
  })
/* In a blocking collective on MPI_COMM_WORLD of a program whose MPI started without the layer's
 * MPI_Init: starts the layer there (once); whether it is on. */
bool lay_start_late(void);
/* The MPI function's name ("MPI_Iallreduce"). */
const char *lay_fn_name(lay_fn_t fn);
/* Counts one call: routed by algo, or passed through (algo NULL); staged: it ran on host mirrors
 * of device buffers (device.c). */
void lay_count(lay_fn_t fn, const char *algo, bool staged);

/* ------------------------------------------------------------------ types.c */

/* What a (count, datatype) pair carries, when its type signature is one predefined type
 * repeated: as tcoll elements, and where they lie. */
typedef struct lay_type {
  tcoll_dtype_t
      dtype;        /* the element for reductions; TCOLL_UINT8 (bytes) where reducible is false */
  bool reducible;   /* dtype is the predefined type itself (not bytes) */
  size_t elem;      /* bytes of one predefined element */
  int64_t per_type; /* predefined elements per datatype element */
  bool contiguous;  /* count elements lie back to back from buf + lb */
  MPI_Aint lb;      /* true lower bound */
} lay_type_t;

/* Whether datatype's signature is one predefined type repeated (the same answer on every rank
 * for the same signature); fills *t. */
bool lay_type_of(MPI_Datatype datatype, lay_type_t *t);
/* The tcoll reduce op for a predefined MPI op that tcoll applies to dtype, or -1. */
int lay_redop_of(MPI_Op op, tcoll_dtype_t dtype);

/* ------------------------------------------------------------------ twins.c */

/* The tcoll communicator that carries comm's routed calls, or NULL (not yet, an
 * intercommunicator, one rank, or the layer off). create: this is a blocking collective, where
 * every rank of comm is present: a twin may be made now (a collective over comm). */
tcoll_comm_t *lay_twin(MPI_Comm comm, bool create);
/* At MPI_Init: the keyval and the world's twin (tcoll's world). */
int lay_twins_init(void);

/* ------------------------------------------------------------------ device.c */

/* A host copy of a device buffer's span, standing in for the buffer during one call. */
typedef struct lay_mirror {
  char *device_at; /* the span's first byte, on the device */
  char *host;      /* the copy (owned: tcoll_layer_host_get) */
  size_t bytes;
  int device;
  bool read;    /* copied to the host before the call */
  bool written; /* copied back to the device after it */
} lay_mirror_t;

/* The device buffers of one call: an input and an output at most. */
typedef struct lay_stage {
  lay_mirror_t m[2];
  int n;
  bool failed; /* a mirror could not be allocated: nothing staged */
  /* where the call's two buffers lie, as asked once (NULL: not asked) */
  const void *asked[2];
  int device[2];
} lay_stage_t;

/* Whether device buffers are staged at all: the layer is on, tcoll sees devices, and the MPI
 * cannot read device memory. Set at start (lay_stage_init); false costs one load per call. */
extern bool lay_stages;
void lay_stage_init(void);
/* Each looks at the buffers of one call of its shape on comm and, for each that lies on a device,
 * makes a host mirror in *s and puts the pointer that stands for it in the call in place of the
 * buffer's. Whether any was staged (*s is then the call's, freed by lay_stage_free). root: -1 for
 * all_reduce. counts: reduce_scatter's (NULL: block to each rank). */
bool lay_stage_reduction(lay_stage_t *s, const void **sbuf, void **rbuf, int count, MPI_Datatype dt,
                         int root, MPI_Comm comm);
bool lay_stage_bcast(lay_stage_t *s, void **buf, int count, MPI_Datatype dt, int root,
                     MPI_Comm comm);
bool lay_stage_gather(lay_stage_t *s, const void **sbuf, int scount, MPI_Datatype stype,
                      void **rbuf, int rcount, MPI_Datatype rtype, bool all_to_all, MPI_Comm comm);
bool lay_stage_reduce_scatter(lay_stage_t *s, const void **sbuf, void **rbuf, const int *counts,
                              int block, MPI_Datatype dt, MPI_Comm comm);
/* Copies the mirrors the call reads from the device, and back those it wrote (tcoll codes). */
int lay_stage_in(const lay_stage_t *s);
int lay_stage_out(const lay_stage_t *s);
void lay_stage_free(lay_stage_t *s);
/* The end of a staged call passed to MPI that returned rc: the mirrors copied back (where rc is
 * MPI_SUCCESS) and freed, the call counted. Returns MPI's code. */
int lay_pass_staged(lay_stage_t *s, lay_fn_t fn, MPI_Comm comm, int rc);
/* A staged nonblocking call passed to MPI, which returned rc and inner: *request, the program's,
 * completes once inner did and the mirrors went back (an entry of requests.c). */
int lay_pass_staged_nonblocking(lay_stage_t *s, lay_fn_t fn, MPI_Comm comm, int rc,
                                MPI_Request inner, MPI_Request *request);

/* A staged persistent call passed to MPI, whose MPI_X_init on the mirrors returned rc and inner:
 * *request, a persistent request of the layer's (persistent.c). */
int lay_pass_staged_persistent(lay_stage_t *s, lay_fn_t fn, MPI_Comm comm, int rc,
                               MPI_Request inner, MPI_Request *request);

/* ------------------------------------------------------------------ requests.c and plans */

/* One routed call, from its plan to its completion. */
typedef struct lay_call {
  lay_fn_t fn;
  MPI_Comm comm;
  tcoll_comm_t *twin;
  tcoll_layer_op_t op;
  const char *algo; /* the verdict */
  int redop, root;
  tcoll_tensor_t in, out;
  void *key;     /* the buffer tcoll registered the work under */
  void *scratch; /* copies of buffers that are not contiguous or may not be registered (owned) */
  void *copy;    /* a copy of an input another pending call holds (one post; owned) */
  const void *pack_from; /* non-NULL: in is packed from here into in.data when posted */
  int pack_count;
  MPI_Datatype pack_type;
  void *unpack_to; /* non-NULL: out went to scratch and is unpacked here at completion */
  int unpack_count;
  MPI_Datatype unpack_type;
  bool blocking;     /* the program's call blocks (the verdict compares with MPI's blocking call) */
  bool persistent;   /* a persistent call's template: scratch lives until the request is freed */
  lay_stage_t stage; /* host mirrors of its device buffers (device.c) */
  MPI_Request inner; /* a staged call passed to MPI: MPI's request (tcoll has no work for it) */
} lay_call_t;

/* Posts c on tcoll: copies its device buffers' mirrors in and packs its input first where it has
 * to (TCOLL_ERR_BUSY where the key is pending: copies to scratch and retries). */
int lay_post(lay_call_t *c);
/* After c completed with rc (tcoll's): unpacks, copies mirrors back to the device, frees scratch
 * (a persistent call's stays). Returns rc, or the error of a copy back. */
int lay_finish(lay_call_t *c, int rc);
/* An MPI error code for a tcoll failure, through comm's error handler (what: the MPI function;
 * TCOLL_DEBUG=INFO prints it with tcoll's message). */
int lay_error(MPI_Comm comm, int tcoll_rc, const char *what);

/* Runs a routed blocking call to its end; returns MPI's code. */
int lay_run_blocking(lay_call_t *c);
/* Starts a routed nonblocking call; *request: a real MPI request completed with it. */
int lay_run_nonblocking(lay_call_t *c, MPI_Request *request);
/* A routed persistent call (MPI-4's MPI_Allreduce_init...): *request, a persistent request that
 * MPI_Start / MPI_Startall start (the layer's) and every completion call completes. */
int lay_run_persistent(lay_call_t *c, MPI_Request *request);
/* Completes every routed call pending on twin (before it is freed), or every one (twin NULL). */
void lay_requests_drain(const tcoll_comm_t *twin);
/* After MPI_Init: the layer's private communicator, then the progress (how; thread_level: what MPI
 * gave the program). */
int lay_requests_init(lay_progress_t how, int thread_level);
void lay_requests_stop(void);

#endif
