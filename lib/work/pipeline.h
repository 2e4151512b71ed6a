/* The staging pipeline: device buffers larger than one staging chunk move through pinned host
 * memory in chunks of about TCOLL_STAGING_CHUNK bytes, so that the device-to-host copy of chunk
 * k+1, MPI on chunk k and the host-to-device copy of chunk k-1 overlap.
 *
 * A pipeline is a schedule: tc_pipe_start appends each chunk's steps to the work's schedule and
 * the engine runs them like any other (one progress path for every work):
 *   fill   (DEV) device-to-host copies on tcoll's d2h stream of the device (which waits, once,
 *          for the caller's current stream at the call), done once its event completed;
 *   scale  (SCALE) premul_sum on the host;
 *   MPI    (COLL) the chunk's MPI_I* call: one call per chunk (TCOLL_MAX_COUNT);
 *   divide (SCALE) AVG on the host;
 *   drain  (DEV) host-to-device copies on the h2d stream, done once queued.
 * A ring of TC_PIPE_SLOTS pinned slots bounds the memory; slot reuse is a dependency: chunk
 * k + TC_PIPE_SLOTS's fill starts after chunk k's drain was queued, and its copies wait on the
 * device for the drain's event; where MPI fills the slot (broadcast off its root), a host-side
 * wait on that event comes first. After the last drain an event is recorded: the work is
 * complete then, and every waiter's current stream waits for the event (device semantics: the
 * host blocks only for MPI).
 *
 * The chunk calls are COLL steps: the engine posts a schedule's COLL steps in the order they
 * were added, on the schedule communicator, once every schedule started before on that
 * communicator posted all of its own (the engine's FIFO), so every rank posts the same calls in
 * the same order, whatever order the works are waited in. A device pipeline posts none inside
 * tc_sched_start (tc_sched_coll_later): whether a chunk is ready then differs between ranks.
 * Ranks must agree on whether a collective's buffers are device buffers when it is pipelined.
 *
 * A host pipeline (device TCOLL_HOST) builds the same steps on host buffers, with memcpy for
 * copies and chunks of TC_PIPE_HOST_CHUNK bytes: a gather along a dim other than 0 interleaves
 * each chunk while it is still in cache, instead of MPI unpacking a strided datatype or one
 * interleave of the whole output afterwards. Its fills are done at once, so its first chunks'
 * calls are posted when the schedule starts, on the communicator itself, in program order. */
#ifndef TC_PIPELINE_H
#define TC_PIPELINE_H

#include "work.h"

#define TC_PIPE_SLOTS 4
/* Bytes of output per chunk of a host pipeline: at 2 ranks 256 KiB chunks measured faster than
 * 64 KiB ones (more calls) and 1 MiB ones (out of cache by the time they are interleaved). */
#define TC_PIPE_HOST_CHUNK (256 << 10)

typedef enum {
  TC_PIPE_ALL_REDUCE,
  TC_PIPE_BROADCAST,
  TC_PIPE_ALL_GATHER,
  TC_PIPE_REDUCE_SCATTER
} tc_pipe_kind_t;

/* The chunked range is [0, n) of a per-rank vector:
 *   all_reduce, broadcast: the tensor (n = numel);
 *   all_gather: this rank's input (n = its numel); rank r's piece of the output is strided;
 *   reduce_scatter: this rank's output (n = its numel); rank r's piece of the input is strided.
 * The strided piece of rank r: element e is at (e / run) * stride + r * run + e % run (along
 * dim 0, run == n and stride == n * size). */
typedef struct tc_pipe_desc {
  tc_pipe_kind_t kind;
  int device;
  tcoll_dtype_t dtype;
  MPI_Datatype mpi_dtype;
  MPI_Op mpi_op;  /* reductions */
  double premul;  /* each rank's contribution is multiplied by it first (1: none) */
  double divisor; /* the result is divided by it (AVG; 1: none) */
  int root;       /* broadcast */
  const void *in; /* device memory (host memory for a host pipeline) */
  void *out;      /* device memory (host memory for a host pipeline) */
  bool inplace;   /* all_reduce / broadcast: in == out; all_gather: in is out's own piece */
  int64_t n, run, stride;
} tc_pipe_desc_t;

/* Whether a collective on device tensor t (n, run as above, group size) is pipelined: t must
 * be staged, n must span more than one chunk, and strided pieces must come in runs long enough
 * for per-run copies. */
bool tc_pipe_wanted(const tcoll_tensor_t *t, tc_pipe_kind_t kind, int64_t n, int64_t run, int size);
/* Builds the pipeline for w (outputs registered, pending inputs waited) into its schedule:
 * tc_work_end starts it (the first fills are queued then). */
int tc_pipe_start(tc_work_t *w, const tc_pipe_desc_t *d);
/* Returns a pipeline held by a work (TC_HELD_PIPE) once its steps are done or never started. */
void tc_pipe_release(void *pipe);
void tc_pipe_cleanup(void);

#endif
