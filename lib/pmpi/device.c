/* Device buffers on an MPI that cannot read them (one that is not CUDA-aware, as Debian's Open
 * MPI and MPICH). Whether a call is routed rests only on what matches across ranks, never on where
 * a rank's buffers live (collectives.c): each rank alone makes its own device buffers readable
 * for the call, routed or passed. Each device buffer gets a host mirror of the span its (count,
 * datatype) covers, copied from the device before the call where the call reads it (or where
 * the datatype has gaps that the call must leave as they are), and back to the device once the
 * call completed where the call writes it. The call then runs on the mirrors as on any host
 * buffer. Mirrors are page-locked memory from tcoll's staging pool. Whole buffers are copied, not
 * pipelined chunks: tcoll's own device path overlaps its copies with the transfers, but it takes
 * tensors that say where they live, with no datatype.
 *
 * A nonblocking call passed to MPI completes the program's request once MPI's completed and its
 * mirrors went back (requests.c); a persistent one, at each start (persistent.c). Left alone:
 * intercommunicators, persistent calls passed where the layer has no way to drive calls, and an
 * MPI that reads device memory itself (MPIX_Query_cuda_support on Open MPI,
 * MPIX_GPU_query_support on MPICH). */
#include "layer.h"

#if defined(OPEN_MPI)
#include <mpi-ext.h>
#endif

#include <stdint.h>
#include <stdlib.h>

bool lay_stages;

/* Whether the MPI moves CUDA device memory itself. */
static bool mpi_reads_device_memory(void) {
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  return MPIX_Query_cuda_support() == 1;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
  int yes = 0;
  return PMPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes) == MPI_SUCCESS && yes;
#else
  return false;
#endif
}

void lay_stage_init(void) {
  lay_stages = lay_on && tcoll_device_count() > 0 && !mpi_reads_device_memory();
}

/* The bytes count elements of t cover, from buf + *lb. */
static size_t span_of(int count, MPI_Datatype t, MPI_Aint *lb, bool *gaps) {
  MPI_Aint tlb, textent, elb, extent;
  int size = 0;
  if (PMPI_Type_get_true_extent(t, &tlb, &textent) != MPI_SUCCESS ||
      PMPI_Type_get_extent(t, &elb, &extent) != MPI_SUCCESS ||
      PMPI_Type_size(t, &size) != MPI_SUCCESS)
    return 0;
  MPI_Aint first = tlb, last = tlb + textent; /* a negative extent runs backwards */
  if (extent >= 0)
    last += (MPI_Aint)(count - 1) * extent;
  else
    first += (MPI_Aint)(count - 1) * extent;
  *lb = first;
  size_t bytes = (size_t)(last - first);
  *gaps = (size_t)size * (size_t)count != bytes;
  return bytes;
}

/* Where buf lies (TCOLL_HOST for none, MPI_IN_PLACE): asked of tcoll once per call and buffer. */
static int device_of(lay_stage_t *s, int i, const void *buf) {
  if (!buf || buf == MPI_IN_PLACE) return TCOLL_HOST;
  if (s->asked[i] != buf) {
    s->asked[i] = buf;
    s->device[i] = tcoll_layer_pointer_device(buf);
  }
  return s->device[i];
}

/* The host pointer standing for buf, the call's buffer i (0: send, 1: receive): a mirror of its
 * span where it lies on a device. */
static void *mirror(lay_stage_t *s, int i, const void *buf, int count, MPI_Datatype t, bool read,
                    bool written) {
  if (count <= 0 || s->n == 2) return (void *)buf;
  int dev = device_of(s, i, buf);
  if (dev == TCOLL_HOST) return (void *)buf;
  MPI_Aint lb = 0;
  bool gaps = false;
  size_t bytes = span_of(count, t, &lb, &gaps);
  char *host = bytes ? tcoll_layer_host_get(bytes) : NULL;
  if (!host) { /* left as it is: MPI fails on it as it would without the layer */
    s->failed = true;
    return (void *)buf;
  }
  s->m[s->n++] = (lay_mirror_t){.device_at = (char *)buf + lb,
                                .host = host,
                                .bytes = bytes,
                                .device = dev,
                                .read = read || (written && gaps),
                                .written = written};
  return host - lb;
}

/* Whether a call with buffers a and b on comm may stage: staging is on, one of them lies on a
 * device (asked first: a host call pays no communicator query), comm is an intracommunicator. */
static bool stage_on(lay_stage_t *s, const void *a, const void *b, MPI_Comm comm, int *p, int *me) {
  s->n = 0;
  s->failed = false;
  s->asked[0] = s->asked[1] = NULL;
  if (!__atomic_load_n(&lay_stages, __ATOMIC_RELAXED)) return false;
  if (device_of(s, 0, a) == TCOLL_HOST && device_of(s, 1, b) == TCOLL_HOST) return false;
  int inter = 0;
  if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter)
    return false;
  PMPI_Comm_size(comm, p);
  PMPI_Comm_rank(comm, me);
  return true;
}

/* Whether anything is staged. Where a mirror could not be made, none is: the call's buffers go
 * back to what the program gave (sbuf0, rbuf0) and the mirrors made are freed. */
static bool staged(lay_stage_t *s, const void **sbuf, const void *sbuf0, void **rbuf, void *rbuf0) {
  if (!s->failed) return s->n > 0;
  if (sbuf) *sbuf = sbuf0;
  *rbuf = rbuf0;
  lay_stage_free(s);
  return false;
}

/* count times p as an int count, or -1 past INT_MAX (then nothing is staged). */
static int times(int count, int p) {
  int64_t n = (int64_t)count * p;
  return n > INT32_MAX ? -1 : (int)n;
}

bool lay_stage_reduction(lay_stage_t *s, const void **sbuf, void **rbuf, int count, MPI_Datatype dt,
                         int root, MPI_Comm comm) {
  int p, me;
  if (!stage_on(s, *sbuf, *rbuf, comm, &p, &me)) return false;
  const void *s0 = *sbuf;
  void *r0 = *rbuf;
  bool out_here = root < 0 || me == root;
  bool in_place = *sbuf == MPI_IN_PLACE;
  if (!in_place) *sbuf = mirror(s, 0, *sbuf, count, dt, true, false);
  if (out_here) *rbuf = mirror(s, 1, *rbuf, count, dt, in_place, true);
  return staged(s, sbuf, s0, rbuf, r0);
}

bool lay_stage_bcast(lay_stage_t *s, void **buf, int count, MPI_Datatype dt, int root,
                     MPI_Comm comm) {
  int p, me;
  if (!stage_on(s, *buf, NULL, comm, &p, &me)) return false;
  void *b0 = *buf;
  *buf = mirror(s, 0, *buf, count, dt, me == root, me != root);
  return staged(s, NULL, NULL, buf, b0);
}

bool lay_stage_gather(lay_stage_t *s, const void **sbuf, int scount, MPI_Datatype stype,
                      void **rbuf, int rcount, MPI_Datatype rtype, bool all_to_all, MPI_Comm comm) {
  int p, me;
  if (!stage_on(s, *sbuf, *rbuf, comm, &p, &me)) return false;
  int sn = all_to_all ? times(scount, p) : scount, rn = times(rcount, p);
  if (sn < 0 || rn < 0) return false;
  const void *s0 = *sbuf;
  void *r0 = *rbuf;
  bool in_place = *sbuf == MPI_IN_PLACE;
  if (!in_place) *sbuf = mirror(s, 0, *sbuf, sn, stype, true, false);
  *rbuf = mirror(s, 1, *rbuf, rn, rtype, in_place, true);
  return staged(s, sbuf, s0, rbuf, r0);
}

bool lay_stage_reduce_scatter(lay_stage_t *s, const void **sbuf, void **rbuf, const int *counts,
                              int block, MPI_Datatype dt, MPI_Comm comm) {
  int p, me;
  if (!stage_on(s, *sbuf, *rbuf, comm, &p, &me)) return false;
  if (!counts && block < 0) return false;
  int64_t total = 0;
  for (int i = 0; i < p; i++) total += counts ? counts[i] : block;
  int mine = counts ? counts[me] : block;
  if (total > INT32_MAX) return false;
  const void *s0 = *sbuf;
  void *r0 = *rbuf;
  bool in_place = *sbuf == MPI_IN_PLACE;
  if (!in_place) *sbuf = mirror(s, 0, *sbuf, (int)total, dt, true, false);
  *rbuf = mirror(s, 1, *rbuf, in_place ? (int)total : mine, dt, in_place, true);
  return staged(s, sbuf, s0, rbuf, r0);
}

static int copy(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes) {
  int64_t n[1] = {(int64_t)bytes};
  tcoll_tensor_t d = tcoll_tensor_make(dst, TCOLL_UINT8, 1, n, dst_dev);
  tcoll_tensor_t s = tcoll_tensor_make((void *)src, TCOLL_UINT8, 1, n, src_dev);
  return LAY_TCOLL(tcoll_tensor_copy(&d, &s));
}

int lay_stage_in(const lay_stage_t *s) {
  for (int i = 0; i < s->n; i++) {
    const lay_mirror_t *m = &s->m[i];
    int rc = m->read ? copy(m->host, TCOLL_HOST, m->device_at, m->device, m->bytes) : 0;
    if (rc) return rc;
  }
  return TCOLL_SUCCESS;
}

int lay_stage_out(const lay_stage_t *s) {
  for (int i = 0; i < s->n; i++) {
    const lay_mirror_t *m = &s->m[i];
    int rc = m->written ? copy(m->device_at, m->device, m->host, TCOLL_HOST, m->bytes) : 0;
    if (rc) return rc;
  }
  return TCOLL_SUCCESS;
}

void lay_stage_free(lay_stage_t *s) {
  for (int i = 0; i < s->n; i++) tcoll_layer_host_put(s->m[i].host);
  s->n = 0;
}

int lay_pass_staged(lay_stage_t *s, lay_fn_t fn, MPI_Comm comm, int rc) {
  if (rc == MPI_SUCCESS) {
    int trc = lay_stage_out(s);
    if (trc != TCOLL_SUCCESS) rc = lay_error(comm, trc, lay_fn_name(fn));
  }
  lay_stage_free(s);
  lay_count(fn, NULL, true);
  return rc;
}
