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
/* Counts one call: routed by algo, or passed through (algo NULL). */
void lay_count(lay_fn_t fn, const char *algo);

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
  bool blocking;   /* the program's call blocks (the verdict compares with MPI's blocking call) */
  bool persistent; /* a persistent call's template: scratch lives until the request is freed */
} lay_call_t;

/* Posts c on tcoll: packs its input first where it has to (TCOLL_ERR_BUSY where the key is
 * pending: copies to scratch and retries). */
int lay_post(lay_call_t *c);
/* After tcoll completed c (ok: without error): unpacks, frees scratch. */
void lay_finish(lay_call_t *c, bool ok);
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
