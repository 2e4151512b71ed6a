/* The staging pipeline: device buffers larger than one staging chunk move through pinned host
 * memory in chunks of about TCOLL_STAGING_CHUNK bytes, so that the device-to-host copy of chunk
 * k+1, MPI on chunk k and the host-to-device copy of chunk k-1 overlap.
 *
 * Per chunk: fill (device-to-host copies on tcoll's d2h stream of the device, ordered after
 * the caller's current stream by an event recorded when the collective was posted), host
 * pre-processing (premul_sum scaling), one MPI_I* call, host post-processing (AVG division),
 * drain (host-to-device copies on tcoll's h2d stream). A ring of TC_PIPE_SLOTS pinned slots
 * bounds the memory; a slot is refilled once its drain finished (the d2h stream waits on the
 * drain's event; MPI writing a slot that was not refilled waits on the host).
 *
 * The state machine is the work's progress hook: tcoll_wait / tcoll_test (of this work or of
 * any other pipelined work) advance every active pipeline. The host blocks only for MPI: when
 * the last chunk's drain is queued the work is complete, and the waiter's current stream waits
 * for the drains with an event ("device semantics").
 *
 * Chunk MPI calls are posted lazily, so they go on a duplicate of the communicator reserved for
 * them (made with MPI_Comm_idup the first time), in the order the pipelines were started: every
 * rank posts the same calls in the same order, whatever order the works are waited in. Ranks
 * must agree on whether a collective's buffers are device buffers when it is pipelined.
 *
 * A host pipeline (device TCOLL_HOST) runs the same engine on host buffers, with memcpy for
 * copies and chunks of TC_PIPE_HOST_CHUNK bytes: a gather along a dim other than 0 interleaves
 * each chunk while it is still in cache, instead of MPI unpacking a strided datatype or one
 * interleave of the whole output afterwards. Its first chunks are posted by tc_pipe_start. */
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
  MPI_Op mpi_op;   /* reductions */
  double premul;   /* each rank's contribution is multiplied by it first (1: none) */
  double divisor;  /* the result is divided by it (AVG; 1: none) */
  int root;        /* broadcast */
  const void *in;  /* device memory (host memory for a host pipeline) */
  void *out;       /* device memory (host memory for a host pipeline) */
  bool inplace;    /* all_reduce / broadcast: in == out; all_gather: in is out's own piece */
  int64_t n, run, stride;
} tc_pipe_desc_t;

/* Whether a collective on device tensor t (n, run as above, group size) is pipelined: t must
 * be staged, n must span more than one chunk, and strided pieces must come in runs long enough
 * for per-run copies. */
bool tc_pipe_wanted(const tcoll_tensor_t *t, tc_pipe_kind_t kind, int64_t n, int64_t run, int size);
/* Starts the pipeline for w (outputs registered, pending inputs waited): queues the first
 * fills and sets w->progress. Nothing is posted to MPI yet. */
int tc_pipe_start(tc_work_t *w, const tc_pipe_desc_t *d);
/* Returns a pipeline held by a work (TC_HELD_PIPE). */
void tc_pipe_release(void *pipe);
void tc_pipe_cleanup(void);

#endif
