/*
 * tcoll: MPI-native collectives on host and device buffers.
 *
 * One public header. Conventions used by every function below:
 *
 *  - Return value: an int holding a tcoll_status_t unless shown otherwise. On failure,
 *    tcoll_last_error() describes it (argument, value, what was expected).
 *  - Bad arguments return TCOLL_ERR_INVALID_ARGUMENT, start no communication, leave nothing
 *    allocated and leave nothing pending.
 *  - Collectives are asynchronous. A call returns once its MPI requests are posted; each output
 *    buffer is then "pending" and must be completed with tcoll_wait() (or wait_tensor,
 *    wait_timeout, test, wait_all) before it is read. Input buffers must not be modified until
 *    the outputs are waited (as for MPI nonblocking calls). An input that is itself a pending
 *    output of an earlier call is waited for first (like PyTorch's AsyncCollectiveTensor).
 *  - Outputs: out->data == NULL makes tcoll allocate the output on the input's device and fill
 *    in *out (free it with tcoll_tensor_free). Otherwise *out must already have exactly the
 *    expected dtype, shape and device. An output that already has pending work is refused with
 *    TCOLL_ERR_BUSY.
 *  - comm == NULL means the world communicator.
 *  - Dimensions may be negative (counted from the end, as in PyTorch).
 */
#ifndef TCOLL_H
#define TCOLL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the exported functions (the library is built with hidden visibility). */
#if defined(TCOLL_BUILDING_LIBRARY)
#define TCOLL_API __attribute__((visibility("default")))
#else
#define TCOLL_API
#endif

/* ---------------------------------------------------------------- version and status */

#define TCOLL_VERSION_MAJOR 0                                   /* major version of this header */
#define TCOLL_VERSION_MINOR 1                                   /* minor version */
#define TCOLL_VERSION_PATCH 0                                   /* patch version */
#define TCOLL_VERSION_CODE(a, b, c) ((a)*10000 + (b)*100 + (c)) /* as tcoll_version() gives */

/* MAJOR*10000 + MINOR*100 + PATCH of the library actually linked. */
TCOLL_API int tcoll_version(void);
/* "" for a release, "-dev" style otherwise. Static storage. */
TCOLL_API const char *tcoll_version_suffix(void);

/* What every function returns (0 success, 1 in progress, negative errors). */
typedef enum {
  TCOLL_SUCCESS = 0,
  TCOLL_IN_PROGRESS = 1,
  TCOLL_ERR_INVALID_ARGUMENT = -1,
  TCOLL_ERR_BUSY = -2,
  TCOLL_ERR_NO_MEMORY = -3,
  TCOLL_ERR_MPI = -4,
  TCOLL_ERR_CUDA = -5,
  TCOLL_ERR_UNSUPPORTED = -6,
  TCOLL_ERR_MISMATCH = -7,
  TCOLL_ERR_TIMEOUT = -8,
  TCOLL_ERR_STATE = -9,
  TCOLL_ERR_INTERNAL = -10
} tcoll_status_t;

/* A short literal naming the status ("TCOLL_ERR_BUSY"); never NULL, also for unknown values. */
TCOLL_API const char *tcoll_status_string(int status);
/* This thread's last failure in detail; "" if none yet. Valid until this thread's next failure. */
TCOLL_API const char *tcoll_last_error(void);

/* ---------------------------------------------------------------- data types, reduce ops */

/* Element types. */
typedef enum {
  TCOLL_BOOL,
  TCOLL_INT8,
  TCOLL_UINT8,
  TCOLL_INT16,
  TCOLL_INT32,
  TCOLL_INT64,
  TCOLL_FLOAT16,
  TCOLL_BFLOAT16,
  TCOLL_FLOAT32,
  TCOLL_FLOAT64
} tcoll_dtype_t;
#define TCOLL_NUM_DTYPES 10 /* how many dtypes there are */

/* Bytes per element; 0 for an invalid value. */
TCOLL_API size_t tcoll_dtype_size(tcoll_dtype_t dtype);
/* "float32" etc.; "invalid" for an invalid value. */
TCOLL_API const char *tcoll_dtype_name(tcoll_dtype_t dtype);

/* A reduce op: one of the built-in values below, or a handle made by
 * tcoll_redop_create_premul_sum. */
typedef int tcoll_redop_t;
enum {
  TCOLL_SUM,
  TCOLL_AVG, /* sum, then divided by the group size; floating dtypes only */
  TCOLL_PRODUCT,
  TCOLL_MIN,
  TCOLL_MAX,
  TCOLL_BAND, /* bitwise ops: integer and bool dtypes only */
  TCOLL_BOR,
  TCOLL_BXOR
};
#define TCOLL_NUM_BUILTIN_REDOPS 8 /* how many built-in reduce ops there are */

/* "sum", "avg", "product", "min", "max", "band", "bor", "bxor" in any case. Unknown names give
 * TCOLL_ERR_INVALID_ARGUMENT with "Unrecognized reduce_op: NAME". */
TCOLL_API int tcoll_redop_from_string(const char *name, tcoll_redop_t *op);
/* "sum" ... "bxor", "premul_sum" for a premul handle, "invalid" otherwise. */
TCOLL_API const char *tcoll_redop_name(tcoll_redop_t op);
/* A sum in which each rank's contribution is multiplied by `scalar` first (finite). Floating
 * dtypes only. The handle stays valid until tcoll_redop_destroy; work already posted with it is
 * not affected by destroying it. */
TCOLL_API int tcoll_redop_create_premul_sum(double scalar, tcoll_redop_t *op);
/* Destroys a premul_sum handle (built-in ops are refused). */
TCOLL_API int tcoll_redop_destroy(tcoll_redop_t op);

/* ---------------------------------------------------------------- tensors */

#define TCOLL_MAX_DIMS 8 /* most dims a tensor has */
#define TCOLL_HOST (-1)  /* the device value of host memory */

/* A contiguous row-major tensor. ndim == 0 is a scalar (one element). The struct does not own
 * its data unless it came from tcoll_tensor_alloc or an output tcoll allocated. */
typedef struct tcoll_tensor {
  void *data;                    /* the first element; NULL for an output tcoll allocates */
  tcoll_dtype_t dtype;           /* element type */
  int ndim;                      /* number of dims, 0..TCOLL_MAX_DIMS */
  int64_t shape[TCOLL_MAX_DIMS]; /* size of each dim (the first ndim entries) */
  int device;                    /* TCOLL_HOST or a device ordinal */
} tcoll_tensor_t;

/* Fills a descriptor; copies at most TCOLL_MAX_DIMS entries of shape. No checks, no allocation. */
TCOLL_API tcoll_tensor_t tcoll_tensor_make(void *data, tcoll_dtype_t dtype, int ndim,
                                           const int64_t *shape, int device);
/* Elements of t (1 for a scalar); 0 for NULL or an invalid descriptor. */
TCOLL_API int64_t tcoll_tensor_numel(const tcoll_tensor_t *t);
/* Bytes of t: numel times the dtype size; 0 for NULL or an invalid descriptor. */
TCOLL_API size_t tcoll_tensor_nbytes(const tcoll_tensor_t *t);
/* Allocates zero-filled storage on `device` (TCOLL_HOST or a device ordinal), from tcoll's
 * storage cache (see tcoll_cache_release). On a device the zeros are written on tcoll's own
 * stream and complete on return: any stream may use the tensor at once. On the host it comes
 * from the node's symmetric heap while that has room (TCOLL_SYMMETRIC_BYTES): the shared-memory
 * algorithms then read it in place on the peers instead of copying it in. */
TCOLL_API int tcoll_tensor_alloc(tcoll_tensor_t *t, tcoll_dtype_t dtype, int ndim,
                                 const int64_t *shape, int device);
/* Frees storage tcoll allocated: waits first if the buffer has pending work, returns the storage
 * to tcoll's cache and sets t->data = NULL. Memory tcoll did not allocate is not freed (a warning
 * is logged). */
TCOLL_API void tcoll_tensor_free(tcoll_tensor_t *t);
/* Copies src into dst: any device to any device, same dtype and numel (shapes may differ).
 * Synchronous. A pending src or dst is waited for first. */
TCOLL_API int tcoll_tensor_copy(tcoll_tensor_t *dst, const tcoll_tensor_t *src);

/* ---------------------------------------------------------------- lifetime and configuration */

/* Calls MPI_Init_thread(MPI_THREAD_MULTIPLE) unless MPI is already initialized, reads the
 * TCOLL_* environment and creates the world communicator. May be called again (reference
 * counted). argc/argv may be NULL. */
TCOLL_API int tcoll_init(int *argc, char ***argv);
/* Completes and reports unwaited work, frees every communicator, and finalizes MPI only if
 * tcoll_init initialized it. Matches one tcoll_init. */
TCOLL_API int tcoll_finalize(void);
/* 1 between tcoll_init and the matching tcoll_finalize. */
TCOLL_API int tcoll_initialized(void);
/* The thread level MPI provided (MPI_THREAD_*). */
TCOLL_API int tcoll_mpi_thread_level(void);

/* TCOLL_DEBUG levels: warnings only; one line per collective; plus cross-rank checks. */
typedef enum { TCOLL_LOG_WARN = 0, TCOLL_LOG_INFO = 1, TCOLL_LOG_DETAIL = 2 } tcoll_log_level_t;

/* Mirrors the TCOLL_* environment variables (read by tcoll_init). */
typedef struct tcoll_config {
  tcoll_log_level_t debug; /* TCOLL_DEBUG */
  double timeout;          /* TCOLL_TIMEOUT, seconds; 0 = none */
  int abort_on_timeout;    /* TCOLL_ON_TIMEOUT=abort */
  int64_t max_count;       /* TCOLL_MAX_COUNT: largest int count per MPI call (above it: one
                              MPI-4 _c call where MPI has them, else split) */
  size_t staging_chunk;    /* TCOLL_STAGING_CHUNK, bytes (default 4 MiB; same on every rank) */
  int cuda_aware;          /* TCOLL_CUDA_AWARE: -1 auto, 0, 1 */
  int fake_devices;        /* TCOLL_FAKE_DEVICES */
  int progress_thread;     /* TCOLL_PROGRESS=thread */
  char trace_path[512];    /* TCOLL_TRACE; "" = off */
  char algo[256];          /* TCOLL_ALGO: "auto" (default), "mpi" (the literal one-to-one MPI
                              mapping everywhere) or "op:algorithm,..." (e.g.
                              "all_reduce:ring,reduce_scatter:mpi"); same on every rank */
  int wait_yield;          /* TCOLL_WAIT=yield: waits poll MPI and give the core up between polls */
  size_t cache_bytes;      /* TCOLL_CACHE_BYTES: most bytes of free storage the cache keeps */
} tcoll_config_t;

/* The algorithm that ran this thread's last posted collective: "mpi" (the literal one-to-one
 * MPI call), "ring", "alltoall", "ring_allgather", "scattered", "cma", "shm", "shm_slices"
 * (node-shared memory), "hier" (two levels across nodes; see doc/guide.md, "Algorithms"). A
 * literal. */
TCOLL_API const char *tcoll_last_algorithm(void);

/* The configuration in force. */
TCOLL_API int tcoll_get_config(tcoll_config_t *config);
/* Changes debug, timeout, abort_on_timeout, max_count, staging_chunk, algo and wait_yield
 * for work posted from now on (every rank must make the same change between the same
 * collectives), and cache_bytes at once (a lower limit gives back what the cache holds
 * beyond it). The other fields are fixed at tcoll_init: changing them is an error. */
TCOLL_API int tcoll_set_config(const tcoll_config_t *config);

/* ---------------------------------------------------------------- storage cache
 *
 * Storage tcoll allocates (tcoll_tensor_alloc, outputs with data == NULL, the pinned host
 * buffers of staging, device memory) comes from a cache, like PyTorch's caching allocators:
 * tcoll_tensor_free returns it there, and a later allocation of a similar size on the same
 * device (or the host) reuses it, without asking the system (no page faults, no cudaMalloc).
 * An output tcoll allocates is not zero-filled where the collective writes all of it. The free
 * storage kept is bounded by TCOLL_CACHE_BYTES (config->cache_bytes; beyond it the least
 * recently freed blocks go back to the system); finalize gives everything back. */

/* What the cache holds now, and what it did since tcoll was loaded. */
typedef struct tcoll_cache_info {
  size_t limit;         /* TCOLL_CACHE_BYTES in force */
  size_t cached;        /* bytes of free blocks kept for reuse: host, pinned and device */
  size_t cached_host;   /* of which pageable host memory */
  size_t cached_pinned; /* of which page-locked host memory (staging) */
  size_t cached_device; /* of which device memory, every device */
  size_t in_use;        /* bytes of blocks handed out and not freed yet */
  size_t peak;          /* the largest in_use + cached seen */
  uint64_t reused;      /* allocations served by a cached block */
  uint64_t allocated;   /* blocks allocated from the system (the cache grew) */
  uint64_t freed;       /* blocks given back to the system (beyond the limit, or released) */
} tcoll_cache_info_t;

/* Gives every free block of the cache back to the system (like torch.cuda.empty_cache), and
 * tcoll's pooled host scratch memory with it. Storage in use is not affected; device blocks are
 * freed once the work last queued on them is done. Any thread, at any time (also before
 * tcoll_init or after tcoll_finalize, when nothing is cached). Every block is given back even
 * when the backend fails to free one: the first failure is returned (TCOLL_ERR_CUDA naming the
 * call), any further one logged. Frees elsewhere (beyond the limit, at finalize) tell nobody:
 * their failures are logged. */
TCOLL_API int tcoll_cache_release(void);
/* Fills *info (NULL: TCOLL_ERR_INVALID_ARGUMENT). Any thread, at any time. */
TCOLL_API int tcoll_cache_info(tcoll_cache_info_t *info);

/* ---------------------------------------------------------------- communicators */

/* A communicator (opaque): a duplicate of an MPI communicator with tcoll's bookkeeping. */
typedef struct tcoll_comm tcoll_comm_t;

/* The world communicator (a duplicate of MPI_COMM_WORLD); NULL before tcoll_init. Owned by
 * tcoll: do not free it. */
TCOLL_API tcoll_comm_t *tcoll_comm_world(void);
/* Collective over comm. Duplicates comm: the caller keeps ownership of its MPI_Comm. */
TCOLL_API int tcoll_comm_from_mpi(MPI_Comm comm, tcoll_comm_t **out);
/* The library's MPI communicator (errors return), owned by tcoll. As everywhere, NULL means
 * the world communicator; before tcoll_init these give MPI_COMM_NULL, -1, -1 and "". */
TCOLL_API MPI_Comm tcoll_comm_mpi(const tcoll_comm_t *comm);
/* This process's rank in comm. */
TCOLL_API int tcoll_comm_rank(const tcoll_comm_t *comm);
/* The number of ranks in comm. */
TCOLL_API int tcoll_comm_size(const tcoll_comm_t *comm);
/* Collective over parent, like MPI_Comm_split. A negative color gives *out = NULL. */
TCOLL_API int tcoll_comm_split(tcoll_comm_t *parent, int color, int key, tcoll_comm_t **out);
/* Called by the listed ranks of parent only (in parent's numbering, no duplicates); the new
 * ranks follow the list order. Cached per parent + ranks + tag: calling again returns the same
 * communicator (each call must be matched by one tcoll_comm_free). */
TCOLL_API int tcoll_comm_from_ranks(tcoll_comm_t *parent, const int *ranks, int n, const char *tag,
                                    tcoll_comm_t **out);
/* A 2-D rank list, ngroups rows of group_size ranks (MPMD): every listed rank calls and gets
 * the communicator of its row. Cached like tcoll_comm_from_ranks. */
TCOLL_API int tcoll_comm_from_rank_groups(tcoll_comm_t *parent, const int *ranks, int ngroups,
                                          int group_size, const char *tag, tcoll_comm_t **out);
/* Ragged form of the above: rows[i] holds row_sizes[i] ranks. Rows of different sizes are
 * refused ("group sizes must be identical found A and B"). */
TCOLL_API int tcoll_comm_from_rank_lists(tcoll_comm_t *parent, const int *const *rows,
                                         const int *row_sizes, int nrows, const char *tag,
                                         tcoll_comm_t **out);
/* Names are unique among live communicators; the string is copied (at most 63 bytes). */
TCOLL_API int tcoll_comm_set_name(tcoll_comm_t *comm, const char *name);
/* NULL if no live communicator has that name. */
TCOLL_API tcoll_comm_t *tcoll_comm_lookup(const char *name);
/* comm's name; "" if unnamed. */
TCOLL_API const char *tcoll_comm_name(const tcoll_comm_t *comm);
/* Completes this process's pending work on the communicator, frees it (MPI_Comm_free: call it
 * on every member) and sets *comm = NULL. A communicator from tcoll_comm_from_ranks is freed
 * when its last holder frees it. The world communicator and mesh slices cannot be freed here. */
TCOLL_API int tcoll_comm_free(tcoll_comm_t **comm);

/* A device mesh (opaque): one communicator per dim. */
typedef struct tcoll_mesh tcoll_mesh_t;
/* Collective over parent. The parent's ranks laid out row-major over dims (like
 * DeviceMesh(arange(n).view(dims))); the product of dims must equal the parent's size. */
TCOLL_API int tcoll_mesh_create(tcoll_comm_t *parent, int ndim, const int *dims,
                                tcoll_mesh_t **out);
/* My 1-D slice along dim: the ranks that share all my other coordinates, ordered by their
 * coordinate along dim. Owned by the mesh. NULL (with tcoll_last_error) for a bad dim. */
TCOLL_API tcoll_comm_t *tcoll_mesh_comm(const tcoll_mesh_t *mesh, int dim);
/* My coordinate along dim; -1 for a bad dim. */
TCOLL_API int tcoll_mesh_coord(const tcoll_mesh_t *mesh, int dim);
/* The number of mesh dims; 0 for NULL. */
TCOLL_API int tcoll_mesh_ndim(const tcoll_mesh_t *mesh);
/* Frees the mesh and its slices (MPI_Comm_free: call it on every member); sets *mesh = NULL. */
TCOLL_API int tcoll_mesh_free(tcoll_mesh_t **mesh);

/* ---------------------------------------------------------------- NCCL-shaped bootstrap */

#define TCOLL_UNIQUE_ID_BYTES 128 /* size of a tcoll_unique_id_t */
/* The rendezvous id tcoll_get_unique_id makes and tcoll_comm_init_rank reads. */
typedef struct {
  char bytes[TCOLL_UNIQUE_ID_BYTES]; /* opaque */
} tcoll_unique_id_t;
/* Makes an id naming this process as the rendezvous root. Local, not collective. The id holds
 * a magic, a format version, this process's rank in MPI_COMM_WORLD, the world size, a random
 * nonce and a checksum; pass its 128 bytes to the members yourself (e.g. MPI_Bcast). An id can
 * be used for one communicator.
 * The rendezvous root must answer the members: when MPI provides MPI_THREAD_MULTIPLE, a
 * bootstrap thread of the creating process does (it polls with a short sleep and stops at
 * tcoll_finalize), so the creator need not be a member. Without MPI_THREAD_MULTIPLE the
 * creating process must itself be a member: it answers the others from inside its own
 * tcoll_comm_init_rank call. */
TCOLL_API int tcoll_get_unique_id(tcoll_unique_id_t *id);
/* Called by the nranks members only, each with its rank in [0, nranks) and the same id
 * (id_len must be TCOLL_UNIQUE_ID_BYTES). Rendezvous over MPI point-to-point with the process
 * that made the id; then the members build the communicator among themselves
 * (MPI_Comm_create_group), ordered by rank. Free with tcoll_comm_free.
 * Errors: an id_len other than 128 ("invalid unique_id (expected 128 bytes, got N)") and an id
 * tcoll did not make fail at once, without contacting anyone. Everything else is decided by the
 * root and reported to every member, so that no member hangs: a rank outside [0, nranks), an
 * nranks outside [1, world size], members disagreeing on nranks, two members with the same
 * rank, more members than nranks, and (with TCOLL_TIMEOUT set) a rendezvous still incomplete
 * after that many seconds. Members that arrive after the rendezvous failed get the same error. */
TCOLL_API int tcoll_comm_init_rank(tcoll_comm_t **comm, int nranks, const void *id, size_t id_len,
                                   int rank);

/* ---------------------------------------------------------------- functional collectives */

/* out == in (same data): in place. */
TCOLL_API int tcoll_all_reduce(const tcoll_tensor_t *in, tcoll_redop_t op, tcoll_comm_t *comm,
                               tcoll_tensor_t *out);
/* n tensors, one MPI call per dtype present. out[i] pairs with in[i]; out[i] may equal in[i]
 * (that entry in place), entry by entry. Each out[i] is registered and waited on its own. */
TCOLL_API int tcoll_all_reduce_coalesced(const tcoll_tensor_t *in, int n, tcoll_redop_t op,
                                         tcoll_comm_t *comm, tcoll_tensor_t *out);
/* out.shape[gather_dim] = in.shape[gather_dim] * size; rank r's block is the r-th slice. */
TCOLL_API int tcoll_all_gather(const tcoll_tensor_t *in, int gather_dim, tcoll_comm_t *comm,
                               tcoll_tensor_t *out);
TCOLL_API int tcoll_all_gather_coalesced(const tcoll_tensor_t *in, int n, tcoll_comm_t *comm,
                                         tcoll_tensor_t *out); /* gather_dim 0 */
/* in.shape[scatter_dim] must be a multiple of size; rank r gets the reduced r-th slice. */
TCOLL_API int tcoll_reduce_scatter(const tcoll_tensor_t *in, tcoll_redop_t op, int scatter_dim,
                                   tcoll_comm_t *comm, tcoll_tensor_t *out);
/* n tensors, each scattered along its own scatter_dims[i], one MPI call per dtype present. */
TCOLL_API int tcoll_reduce_scatter_coalesced(const tcoll_tensor_t *in, int n, tcoll_redop_t op,
                                             const int *scatter_dims, tcoll_comm_t *comm,
                                             tcoll_tensor_t *out);
/* Splits in rows of dim 0 (one entry per rank). NULL, NULL: in.shape[0] split evenly. Rank i's
 * input_split_sizes[j] must equal rank j's output_split_sizes[i]. */
TCOLL_API int tcoll_all_to_all_single(const tcoll_tensor_t *in, const int64_t *output_split_sizes,
                                      const int64_t *input_split_sizes, tcoll_comm_t *comm,
                                      tcoll_tensor_t *out);
/* out == in: in place. On every rank `in` gives the shape; src's data is sent. */
TCOLL_API int tcoll_broadcast(const tcoll_tensor_t *in, int src, tcoll_comm_t *comm,
                              tcoll_tensor_t *out);
/* src_dst is a permutation of the ranks: rank m sends its input to rank src_dst[m]. */
TCOLL_API int tcoll_permute(const tcoll_tensor_t *in, const int *src_dst, tcoll_comm_t *comm,
                            tcoll_tensor_t *out);
/* Splits in along shard_dim into size chunks, sends chunk j to rank j, and concatenates what
 * it receives along gather_dim (DTensor's shard_dim_alltoall). */
TCOLL_API int tcoll_shard_dim_all_to_all(const tcoll_tensor_t *in, int gather_dim, int shard_dim,
                                         tcoll_comm_t *comm, tcoll_tensor_t *out);

/* List and rooted forms (used by the gradient module; one tensor per rank of comm). */
/* out is written on dst; on other ranks out is registered but left unchanged. */
TCOLL_API int tcoll_reduce(const tcoll_tensor_t *in, int dst, tcoll_redop_t op, tcoll_comm_t *comm,
                           tcoll_tensor_t *out);
/* outs (size entries, each shaped like in) is written on dst. On the other ranks outs is not
 * used (NULL is fine) and the work is registered under in->data: wait on that. */
TCOLL_API int tcoll_gather(const tcoll_tensor_t *in, int dst, tcoll_comm_t *comm,
                           tcoll_tensor_t *outs);
/* ins (size entries of one shape) is read on src only (may be NULL elsewhere); every rank
 * passes out shaped like those entries (with out->data == NULL, src's shape is not known on the
 * other ranks: there, *out must give the shape). */
TCOLL_API int tcoll_scatter(const tcoll_tensor_t *ins, int src, tcoll_comm_t *comm,
                            tcoll_tensor_t *out);
/* outs: size entries shaped like in. */
TCOLL_API int tcoll_all_gather_list(const tcoll_tensor_t *in, tcoll_comm_t *comm,
                                    tcoll_tensor_t *outs);
/* ins: size entries of one shape and dtype; out shaped like them. */
TCOLL_API int tcoll_reduce_scatter_list(const tcoll_tensor_t *ins, tcoll_redop_t op,
                                        tcoll_comm_t *comm, tcoll_tensor_t *out);
/* ins[j] goes to rank j, outs[i] comes from rank i; shapes may differ per peer but dtypes
 * match. outs[i] must be given (with data or with data == NULL and a shape). */
TCOLL_API int tcoll_all_to_all(const tcoll_tensor_t *ins, tcoll_comm_t *comm, tcoll_tensor_t *outs);

/* Shape rules without communicating (the "meta" functions); shape receives in->ndim entries. */
TCOLL_API int tcoll_all_gather_shape(const tcoll_tensor_t *in, int gather_dim, int group_size,
                                     int64_t *shape);
/* The shape reduce_scatter would give (the dim must be a multiple of group_size). */
TCOLL_API int tcoll_reduce_scatter_shape(const tcoll_tensor_t *in, int scatter_dim, int group_size,
                                         int64_t *shape);

/* ---------------------------------------------------------------- the work registry */

/* Completes the work pending on buffer (a base address or a pointer into a pending buffer).
 * TCOLL_SUCCESS at once if nothing is pending. Returns the work's error if it failed. Honors
 * TCOLL_TIMEOUT. */
TCOLL_API int tcoll_wait(const void *buffer);
/* tcoll_wait on t->data. */
TCOLL_API int tcoll_wait_tensor(const tcoll_tensor_t *t);
/* seconds <= 0: no deadline. TCOLL_ERR_TIMEOUT leaves the work pending: a later wait
 * completes it. */
TCOLL_API int tcoll_wait_timeout(const void *buffer, double seconds);
/* TCOLL_SUCCESS (done, now popped, or nothing pending), TCOLL_IN_PROGRESS, or an error. Where
 * this node's ranks outnumber its cores (or TCOLL_WAIT=yield), a test that returns
 * TCOLL_IN_PROGRESS first yields the core once, as MPI_Test does there, so that a loop of tests
 * does not keep the ranks it waits for from running. */
TCOLL_API int tcoll_test(const void *buffer);
/* TCOLL_SUCCESS if the work on buffer is already complete (or nothing is pending),
 * TCOLL_IN_PROGRESS otherwise. Never calls MPI and never advances anything (unlike tcoll_test):
 * a way to see what the progress thread (TCOLL_PROGRESS=thread) has completed. The buffer stays
 * pending until waited. */
TCOLL_API int tcoll_query(const void *buffer);
/* Waits for every pending buffer of this process. Returns the first error met. */
TCOLL_API int tcoll_wait_all(void);
/* How many buffers are pending (each needs its own wait; a coalesced call counts n). */
TCOLL_API size_t tcoll_pending_count(void);

/* ---------------------------------------------------------------- differentiable collectives */

/* Forward: same semantics, asynchrony and argument checks as the plain op, plus a grad node in
 * *node (NULL on failure). Backward writes grad_inputs (same out->data == NULL rule), pending
 * until waited. Lists hold one tensor per rank of comm. Rules and derivations: doc/gradients.md.
 *
 * The loss is the sum over ranks of each rank's loss: every output that exists on a rank gets a
 * grad_output there (ignored where the output does not depend on the inputs: reduce's y and
 * gather's ys off dst). grad_outputs have exactly the dtype, shape and device of the forward's
 * outputs on that rank; grad_inputs those of the forward's inputs (or data == NULL) and must not
 * overlap grad_outputs. n_grad_outputs / n_grad_inputs: 1 for a tensor, the size of comm for a
 * list.
 *
 * The node keeps what backward needs (comm, roots, shapes, split sizes, the op and its premul
 * scalar, and for MAX / MIN / PRODUCT host copies of x, and of y for MAX / MIN), so backward
 * reads nothing of the caller's x or y. The caller keeps comm alive until the node is freed. A
 * node serves any number of backward calls and may be freed before its work is waited.
 * Errors: TCOLL_ERR_UNSUPPORTED where no gradient exists (bitwise ops; MAX / MIN / PRODUCT on
 * integer dtypes; reduce_scatter with an op other than SUM / AVG / PREMUL_SUM, at backward). */
typedef struct tcoll_grad_node tcoll_grad_node_t;
/* backward: reduce SUM to src on src, zeros elsewhere. */
TCOLL_API int tcoll_grad_broadcast(const tcoll_tensor_t *x, int src, tcoll_comm_t *comm,
                                   tcoll_tensor_t *y, tcoll_grad_node_t **node);
/* backward: broadcast of dst's grad (SUM), scaled for AVG / PREMUL_SUM; MAX / MIN / PRODUCT as
 * all_reduce with dst's grad. MAX / MIN forward run as an all_reduce (every rank needs y). */
TCOLL_API int tcoll_grad_reduce(const tcoll_tensor_t *x, int dst, tcoll_redop_t op,
                                tcoll_comm_t *comm, tcoll_tensor_t *y, tcoll_grad_node_t **node);
/* ys: size entries; off dst they are filled with zeros, or ys may be NULL there (then the work
 * is keyed on x, as for tcoll_gather). backward: scatter from dst; grad_outputs are read on dst
 * (off dst pass size tensors or none). */
TCOLL_API int tcoll_grad_gather(const tcoll_tensor_t *x, int dst, tcoll_comm_t *comm,
                                tcoll_tensor_t *ys, tcoll_grad_node_t **node);
/* xs read on src only (may be NULL elsewhere; there *y gives the shape). backward: gather to
 * src; off src grad_inputs are size tensors filled with zeros, or none (n_grad_inputs 0: the
 * work is then keyed on grad_outputs[0]). */
TCOLL_API int tcoll_grad_scatter(const tcoll_tensor_t *xs, int src, tcoll_comm_t *comm,
                                 tcoll_tensor_t *y, tcoll_grad_node_t **node);
/* backward: reduce_scatter SUM of the size grads. */
TCOLL_API int tcoll_grad_all_gather(const tcoll_tensor_t *x, tcoll_comm_t *comm, tcoll_tensor_t *ys,
                                    tcoll_grad_node_t **node);
/* Any gather_dim. backward: reduce_scatter SUM along gather_dim. */
TCOLL_API int tcoll_grad_all_gather_into_tensor(const tcoll_tensor_t *x, int gather_dim,
                                                tcoll_comm_t *comm, tcoll_tensor_t *y,
                                                tcoll_grad_node_t **node);
/* backward: all_gather of the grads (divided by size for AVG, times the scalar for PREMUL_SUM;
 * other ops: TCOLL_ERR_UNSUPPORTED). */
TCOLL_API int tcoll_grad_reduce_scatter(const tcoll_tensor_t *xs, tcoll_redop_t op,
                                        tcoll_comm_t *comm, tcoll_tensor_t *y,
                                        tcoll_grad_node_t **node);
/* op must be TCOLL_SUM: anything else is TCOLL_ERR_UNSUPPORTED, "Only sum reduce op is
 * supported" (as PyTorch's ReduceScatterTensor). Any scatter_dim. backward: all_gather along
 * scatter_dim. */
TCOLL_API int tcoll_grad_reduce_scatter_tensor(const tcoll_tensor_t *x, tcoll_redop_t op,
                                               int scatter_dim, tcoll_comm_t *comm,
                                               tcoll_tensor_t *y, tcoll_grad_node_t **node);
/* backward: all_to_all of the grads (grad_inputs shaped like xs). */
TCOLL_API int tcoll_grad_all_to_all(const tcoll_tensor_t *xs, tcoll_comm_t *comm,
                                    tcoll_tensor_t *ys, tcoll_grad_node_t **node);
/* The node copies the split sizes. backward: all_to_all_single with the splits swapped. */
TCOLL_API int tcoll_grad_all_to_all_single(const tcoll_tensor_t *x,
                                           const int64_t *output_split_sizes,
                                           const int64_t *input_split_sizes, tcoll_comm_t *comm,
                                           tcoll_tensor_t *y, tcoll_grad_node_t **node);
/* backward: SUM / AVG / PREMUL_SUM(s): all_reduce of the grads with the same op; MAX / MIN: the
 * sum of the grads goes to the ranks holding the extremum, split evenly among ties; PRODUCT:
 * (sum of the grads) * (product of the other ranks' x), exact when x has zeros; bitwise:
 * TCOLL_ERR_UNSUPPORTED. */
TCOLL_API int tcoll_grad_all_reduce(const tcoll_tensor_t *x, tcoll_redop_t op, tcoll_comm_t *comm,
                                    tcoll_tensor_t *y, tcoll_grad_node_t **node);

/* Differentiable single-process multi-device ops (torch.nn.parallel's Broadcast,
 * ReduceAddCoalesced, Scatter and Gather Functions). Forward: exactly the plain tcoll_local_*
 * op below (same arguments, checks, output allocation and stream order), plus a grad node with
 * no communicator. Backward (through tcoll_grad_backward) is the transposed local op: broadcast
 * <-> reduce-add, scatter <-> gather. Devices may include TCOLL_HOST; each grad_input is put on
 * the device of its forward input. Unlike the collectives above, neither forward outputs nor
 * grad_inputs are pending work: like the plain local ops they are stream-ordered (device
 * results ready for work queued afterwards on the current stream of their device, host results
 * complete when the call returns), and tcoll_wait on them returns at once. The node keeps only
 * descriptors (dtypes, shapes, devices, dim, chunk sizes): backward reads nothing of the
 * forward's tensors, and the node may be freed at any time.
 *
 * Counts in tcoll_grad_backward (n_grad_outputs, n_grad_inputs):
 *   local_broadcast_coalesced   n_devices * n (like out),   n (like in)
 *   local_reduce_add_coalesced  n (like out),               n_devices * n (like in)
 *   local_scatter               n_devices (like out),       1
 *   local_gather                1,                          n (like in; scalars for scalars) */
/* n_devices >= 1 (the plain op also accepts 0). backward: grad_in[i] = sum over d of
 * grad_out[d * n + i], reduce-added on in[i]'s device (one tcoll_local_reduce_add_coalesced per
 * distinct input device). */
TCOLL_API int tcoll_grad_local_broadcast_coalesced(const tcoll_tensor_t *in, int n,
                                                   const int *devices, int n_devices,
                                                   tcoll_tensor_t *out, tcoll_grad_node_t **node);
/* backward: grad_in[d * n + i] = grad_out[i], broadcast onto group d's device
 * (tcoll_local_broadcast_coalesced). */
TCOLL_API int tcoll_grad_local_reduce_add_coalesced(const tcoll_tensor_t *in, int n_devices, int n,
                                                    int destination, tcoll_tensor_t *out,
                                                    tcoll_grad_node_t **node);
/* backward: grad_in = the n_devices grads concatenated along dim on in's device
 * (tcoll_local_gather). */
TCOLL_API int tcoll_grad_local_scatter(const tcoll_tensor_t *in, const int *devices, int n_devices,
                                       const int64_t *chunk_sizes, int dim, tcoll_tensor_t *out,
                                       tcoll_grad_node_t **node);
/* Scalars along dim 0 are gathered as a vector, with the plain op's warning. backward: the grad
 * split along dim into the inputs' sizes, grad_in[i] on in[i]'s device (tcoll_local_scatter);
 * for gathered scalars each grad_in is a scalar again. */
TCOLL_API int tcoll_grad_local_gather(const tcoll_tensor_t *in, int n, int dim, int target_device,
                                      tcoll_tensor_t *out, tcoll_grad_node_t **node);
/* Posts the backward of node's forward (asynchronous: wait on each grad_input). */
TCOLL_API int tcoll_grad_backward(tcoll_grad_node_t *node, const tcoll_tensor_t *grad_outputs,
                                  int n_grad_outputs, tcoll_tensor_t *grad_inputs,
                                  int n_grad_inputs);
/* NULL is ignored. Pending work started from the node is not affected. */
TCOLL_API void tcoll_grad_node_free(tcoll_grad_node_t *node);

/* ---------------------------------------------------------------- devices */

/* Number of devices the active backend serves (CUDA devices, or TCOLL_FAKE_DEVICES). */
TCOLL_API int tcoll_device_count(void);
/* "cuda", "fake" or "none". */
TCOLL_API const char *tcoll_device_backend(void);

/* Whether tcoll hands device buffers to MPI directly (1) or stages them through pinned host
 * memory (0), for nonblocking collectives (nonblocking_collective != 0: every functional
 * collective) or for blocking calls. TCOLL_CUDA_AWARE=0: never; =1: always (with emulated
 * devices too, whose memory is host memory: this exercises the direct path); auto: only the
 * CUDA backend with a CUDA-aware MPI (MPIX_Query_cuda_support), and not for nonblocking
 * collectives on Open MPI 4.x, which rejects device buffers there even when CUDA-aware. */
TCOLL_API int tcoll_mpi_device_direct(int nonblocking_collective);

/* ---------------------------------------------------------------- streams
 *
 * Like NCCL and PyTorch, tcoll orders its device work after the caller's stream. Every thread
 * has a current stream per device (NULL, the device's default stream, until set); a stream is
 * a cudaStream_t passed as void * with the CUDA backend, or one made by tcoll_stream_create.
 *
 *  - Inputs: a device input is read once the work queued on the current stream of its device
 *    before the call is done, and a device output is written only after that work too. The
 *    call does not wait for it on the host, except where the whole input is staged at once or
 *    handed to MPI directly (see below).
 *  - Outputs: completing a collective (tcoll_wait / tcoll_test returning TCOLL_SUCCESS)
 *    blocks the host only for MPI. A device output may still be being copied into place: the
 *    completing thread's current stream of that device is made to wait for it, so work queued
 *    there afterwards (a kernel, tcoll_tensor_copy, another collective) sees the result. To
 *    read it on the host otherwise, synchronize that stream.
 *  - Device buffers that MPI cannot take directly (tcoll_mpi_device_direct) move through pinned
 *    host memory. all_reduce, broadcast, all_gather and reduce_scatter of more than
 *    TCOLL_STAGING_CHUNK bytes do so in a pipeline of chunks on tcoll's own copy streams, with
 *    the semantics above; the chunks' MPI calls are posted as the pipeline is advanced (by
 *    tcoll_wait / tcoll_test of any pipelined work, each advancing every pipeline, or by the
 *    progress thread), on a communicator tcoll reserves for them, so all ranks must agree on
 *    whether such a collective's buffers are device buffers (and on the chunk size).
 *    Other device collectives (and those of one chunk) copy their whole inputs at the call,
 *    on tcoll's stream after the current stream, waiting on the host for that copy (MPI reads
 *    it next), and copy their outputs back at completion on tcoll's stream, with the same
 *    device semantics as above.
 *  - Device buffers given to MPI directly: the call waits on the host for the current stream,
 *    and the output is complete on the host and the device when the wait returns. */

/* Sets the calling thread's current stream on device (NULL: the default stream). */
TCOLL_API int tcoll_set_stream(int device, void *stream);
/* The calling thread's current stream on device (NULL: the default stream, or a bad device). */
TCOLL_API void *tcoll_get_stream(int device);
/* A new stream on device (CUDA: non-blocking w.r.t. the legacy default stream). */
TCOLL_API int tcoll_stream_create(int device, void **stream);
/* Waits for the stream, then destroys it (and unsets it as this thread's current stream). */
TCOLL_API int tcoll_stream_destroy(int device, void *stream);
/* Waits on the host for what is queued on stream of device (NULL: its default stream). */
TCOLL_API int tcoll_stream_synchronize(int device, void *stream);
/* Waits for everything queued on every stream of device, tcoll's own included. */
TCOLL_API int tcoll_device_synchronize(int device);
/* Queues a copy of src into dst on `stream` (a stream of the device side; for two devices, of
 * src's device); same dtype and numel. Pending tcoll work on either buffer is waited first.
 * Host memory involved must stay valid until the stream reaches the copy. Host to host: a
 * plain synchronous copy. */
TCOLL_API int tcoll_tensor_copy_async(tcoll_tensor_t *dst, const tcoll_tensor_t *src, void *stream);

/* ---------------------------------------------------------------- single-process multi-device
 *
 * torch.nn.parallel's Broadcast / ReduceAddCoalesced / Scatter / Gather for one process. Devices
 * may include TCOLL_HOST. Outputs follow the usual rule (data == NULL: tcoll allocates it on its
 * device; otherwise exactly the expected dtype, shape and device); no output may overlap an
 * input (except an output that is its own input, which is left as it is).
 *
 * Semantics: stream-ordered, not registered as pending work. Copies run on tcoll's background
 * stream of the destination device, after the calling thread's current streams of every device
 * involved are done with what was queued before the call. When the call returns, device
 * outputs are ready for work queued afterwards on the current stream of their device (those
 * streams wait for the copies: no host synchronization), and host outputs are complete. The
 * current streams of the source devices also wait, so that inputs may be overwritten by work
 * queued there afterwards. A host input is fully read when the call returns. */

/* out[d * n + i] (n_devices * n entries) is a copy of in[i] on devices[d]. */
TCOLL_API int tcoll_local_broadcast_coalesced(const tcoll_tensor_t *in, int n, const int *devices,
                                              int n_devices, tcoll_tensor_t *out); /* out[d*n+i] */
/* out[i] = sum over d of in[d * n + i] (n_devices groups of n tensors; group d's tensors on one
 * device, in[d * n + i] shaped and typed like in[i]), on `destination`. Sums in dtype (float16
 * and bfloat16 accumulate in float per addition), in the order d = 0, 1, ... */
TCOLL_API int tcoll_local_reduce_add_coalesced(const tcoll_tensor_t *in, int n_devices, int n,
                                               int destination,
                                               tcoll_tensor_t *out); /* in[d*n+i] */
/* Splits in along dim (negative counts from the end) into n_devices chunks, out[i] on
 * devices[i]. chunk_sizes (n_devices entries, >= 0, summing to in->shape[dim]), or NULL for
 * torch.chunk's split: ceil(size / n_devices) per chunk, the last ones smaller and possibly
 * empty (0 along dim). */
TCOLL_API int tcoll_local_scatter(const tcoll_tensor_t *in, const int *devices, int n_devices,
                                  const int64_t *chunk_sizes, int dim, tcoll_tensor_t *out);
/* Concatenates in[0..n) along dim onto target_device (a device or TCOLL_HOST): same dtype and
 * ndim, equal sizes but along dim. If every input is a scalar (ndim 0) and dim is 0, they are
 * gathered as a vector of n elements instead, with a warning (as torch.nn.parallel.Gather). */
TCOLL_API int tcoll_local_gather(const tcoll_tensor_t *in, int n, int dim, int target_device,
                                 tcoll_tensor_t *out);

/* NCCL-shaped multi-buffer ops: one buffer per local device; streams: NULL or n entries
 * (cudaStream_t passed as void*). comms NULL: the n local buffers only, like NCCL's
 * single-process clique. comms with n entries: after the local step the processes of those
 * communicators combine too (all entries must have the same members).
 *
 * Buffers: in[0..n) on distinct devices (TCOLL_HOST counts as one), one dtype and shape. With
 * comms, every process passes the same n and shape; the buffers are numbered globally
 * g = p * n + i (p: the process's rank in comms[0], i: the local index), which orders gathered
 * and scattered blocks and names the root (root in [0, n * size), or [0, n) without comms;
 * "invalid root" otherwise).
 *   all_reduce:     out[i] = op over every buffer (AVG: divided by their number).
 *   reduce:         out (one tensor, on the root buffer's device, on the root's process; NULL
 *                   there: the root's own input receives it; ignored elsewhere) = op over all.
 *   broadcast:      every buffer receives the root buffer.
 *   all_gather:     out[i] = the buffers concatenated along dim 0 in global order.
 *   reduce_scatter: out[i] = block g (dim 0 split into n * size blocks) of op over all buffers.
 * out may equal in (in place) for all_reduce.
 * Streams: buffer i's copies run on streams[i] (NULL entries, or streams == NULL: the calling
 * thread's current stream of its device), as NCCL runs on the given streams. The local
 * reduction is done on the host (MPI_Reduce_local: every op and dtype) and the processes then
 * combine with blocking MPI calls on the host copy, so the host blocks until the data has been
 * exchanged; device outputs are then complete in stream order on streams[i] (queue work there,
 * or synchronize it, to read them). Not registered as pending work. */
TCOLL_API int tcoll_multi_all_reduce(const tcoll_tensor_t *in, tcoll_tensor_t *out, int n,
                                     tcoll_redop_t op, void *const *streams,
                                     tcoll_comm_t *const *comms);
/* See above: op over every buffer of every process into out on the root. */
TCOLL_API int tcoll_multi_reduce(const tcoll_tensor_t *in, int n, tcoll_tensor_t *out, int root,
                                 tcoll_redop_t op, void *const *streams,
                                 tcoll_comm_t *const *comms);
/* See above: every buffer receives the root buffer. */
TCOLL_API int tcoll_multi_broadcast(tcoll_tensor_t *inout, int n, int root, void *const *streams,
                                    tcoll_comm_t *const *comms);
/* See above: out[i] = all buffers concatenated along dim 0 in global order. */
TCOLL_API int tcoll_multi_all_gather(const tcoll_tensor_t *in, tcoll_tensor_t *out, int n,
                                     void *const *streams, tcoll_comm_t *const *comms);
/* See above: out[i] = block g of op over all buffers. */
TCOLL_API int tcoll_multi_reduce_scatter(const tcoll_tensor_t *in, tcoll_tensor_t *out, int n,
                                         tcoll_redop_t op, void *const *streams,
                                         tcoll_comm_t *const *comms);
/* The same with the length of every list given, as a binding receives them (the forms above
 * pass n for each; a NULL list is "None" whatever its count). Mismatches are reported as the
 * seed does: "number of streams is not equal to number of inputs", "number of communicators is
 * not equal to number of inputs", "number of outputs is not equal to number of inputs". */
TCOLL_API int tcoll_multi_all_reduce_v(const tcoll_tensor_t *in, int n_in, tcoll_tensor_t *out,
                                       int n_out, tcoll_redop_t op, void *const *streams,
                                       int n_streams, tcoll_comm_t *const *comms, int n_comms);
/* tcoll_multi_reduce with list lengths. */
TCOLL_API int tcoll_multi_reduce_v(const tcoll_tensor_t *in, int n_in, tcoll_tensor_t *out,
                                   int root, tcoll_redop_t op, void *const *streams, int n_streams,
                                   tcoll_comm_t *const *comms, int n_comms);
/* tcoll_multi_broadcast with list lengths. */
TCOLL_API int tcoll_multi_broadcast_v(tcoll_tensor_t *inout, int n, int root, void *const *streams,
                                      int n_streams, tcoll_comm_t *const *comms, int n_comms);
/* tcoll_multi_all_gather with list lengths. */
TCOLL_API int tcoll_multi_all_gather_v(const tcoll_tensor_t *in, int n_in, tcoll_tensor_t *out,
                                       int n_out, void *const *streams, int n_streams,
                                       tcoll_comm_t *const *comms, int n_comms);
/* tcoll_multi_reduce_scatter with list lengths. */
TCOLL_API int tcoll_multi_reduce_scatter_v(const tcoll_tensor_t *in, int n_in, tcoll_tensor_t *out,
                                           int n_out, tcoll_redop_t op, void *const *streams,
                                           int n_streams, tcoll_comm_t *const *comms, int n_comms);

#ifdef __cplusplus
}
#endif

#endif /* TCOLL_H */
