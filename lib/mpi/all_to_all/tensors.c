/* all_to_all of a list of tensors, one per peer -> MPI_Ialltoallv between packed scratch buffers,
 * or the scattered exchange (scattered.c here): one MPI_Isend and one MPI_Irecv per peer straight
 * between the host tensors (device tensors still packed), the own block copied. */
#include "../../argcheck.h"
#include "../../work/detail.h"
#include "../../work/staging.h"
#include "../../base/dtype.h"
#include "../post.h"
#include "all_to_all.h"

/* ------------------------------------------------------------------ algorithms and table */

extern const tc_algo_t tc_all_to_all_scattered;
static const tc_algo_t *const algos[] = {&tc_algo_literal, &tc_all_to_all_scattered};

/* The list all_to_all's literal mapping packs the tensors into one buffer and unpacks the
 * results; the scattered exchange sends and receives host tensors where they lie. Against raw
 * MPI_Ialltoall of the same bytes (medians of 3 runs, scattered / literal, same runs): Open MPI 2
 * ranks 1.51 / 1.78 at 8 B, 1.10 / 1.71 at 32 KiB, 0.60 / 1.17 at 2 MiB, 0.98 / 1.91 at 16 MiB;
 * 3-4 ranks 1.16-1.30 / 1.18-1.30 below 32 KiB, 0.84-1.00 / 1.08-1.34 above; MPICH 2 ranks
 * 1.23-1.63 / 1.70-2.22 below 32 KiB, 0.60-1.03 / 1.52-2.99 above (and 0.04-0.65 / 0.16-1.00 in
 * the oversubscribed 3-4-rank runs). Never slower: every size, at the measured rank counts. */
#define MEASURED \
  "tcoll-bench, list all_to_all against raw MPI_Ialltoall, 2-4 ranks, medians of 3 runs"
static const tc_algo_row_t table[] = {
    {TC_MPI_OPEN_MPI, 2, 4, 0, TC_ANY_SIZE, 0, 0, "scattered", MEASURED},
    {TC_MPI_MPICH, 2, 4, 0, TC_ANY_SIZE, 0, 0, "scattered", MEASURED},
};

const tc_algo_list_t tc_all_to_all_list_algos = TC_ALGO_LIST("all_to_all_list", algos, table);

/* Where peer p's block lies for MPI: in its packed buffer at displacement displ (device
 * tensors, staged), or in its own tensor (host tensors, pack NULL). */
static char *block_at(char *pack, const int64_t *displs, int p, size_t es, void *own) {
  return pack ? pack + (size_t)displs[p] * es : own;
}

/* The scattered exchange of the list form: each block travels from where it lies to where it
 * lands. v: sent counts and displacements, received counts and displacements (elements, size
 * each). */
typedef struct lists_at {
  const tcoll_tensor_t *ins, *outs;
  char *spack, *rpack;
  const int64_t *v;
  size_t es;
  int size;
} lists_at_t;

static void block_of(const tc_exchange_t *x, int p, bool recv, char **at, int64_t *count) {
  const lists_at_t *l = x->ctx;
  const int64_t *v = l->v + (recv ? 2 * l->size : 0);
  *at = recv ? block_at(l->rpack, v + l->size, p, l->es, l->outs[p].data)
             : block_at(l->spack, v + l->size, p, l->es, l->ins[p].data);
  *count = v[p];
}

static int post_all_to_all_scattered(tc_work_t *w, const tc_algo_t *a, const tcoll_tensor_t *ins,
                                     tcoll_tensor_t *outs, char *spack, char *rpack,
                                     const int64_t *v) {
  lists_at_t l = {ins, outs, spack, rpack, v, tc_dtype_size(ins[0].dtype), w->comm->size};
  tc_exchange_t x = {block_of, &l, MPI_DATATYPE_NULL, MPI_DATATYPE_NULL, "ins", "outs", "elements"};
  tc_algo_call_t c = {.n = 1, .dtype = ins[0].dtype, .x = &x};
  return a->build(w, &c);
}

/* Device tensors are packed into pinned scratch (inputs read now, results copied back as
 * pieces); the literal call packs host tensors too, the scattered exchange does not. */
static int post_all_to_all(tc_work_t *w, const tcoll_tensor_t *ins, tcoll_tensor_t *outs) {
  int size = w->comm->size;
  tcoll_dtype_t d = ins[0].dtype;
  size_t es = tc_dtype_size(d);
  const tc_algo_t *a =
      tc_all_to_all_choose(TC_OP_ALL_TO_ALL_LIST, w->comm, d, ins[0].device != TCOLL_HOST);
  tc_work_set_algo(w, a->name);
  int64_t *v = tc_work_scratch(w, 4 * (size_t)size * sizeof *v);
  if (!v) return TCOLL_ERR_NO_MEMORY;
  int64_t stotal = 0, rtotal = 0;
  for (int p = 0; p < size; p++) {
    v[p] = tcoll_tensor_numel(&ins[p]);
    v[size + p] = stotal;
    stotal += v[p];
    v[2 * size + p] = tcoll_tensor_numel(&outs[p]);
    v[3 * size + p] = rtotal;
    rtotal += v[2 * size + p];
  }
  /* With DETAIL a block that its peer does not expect is refused on every rank (else the
   * scattered exchange leaves it unmatched, and the literal call fails or hangs) */
  int rc = TCOLL_SUCCESS;
  if (tc_cfg.debug >= TCOLL_LOG_DETAIL && (rc = tc_detail_check_splits(w, v, v + 2 * size, true)))
    return rc;
  bool pack = !a->build || ins[0].device != TCOLL_HOST;
  char *sbuf = NULL, *rbuf = NULL;
  if (pack) rc = tc_stage_scratch(w, (size_t)stotal * es, ins[0].device, (void **)&sbuf);
  if (pack && !rc) rc = tc_stage_scratch(w, (size_t)rtotal * es, ins[0].device, (void **)&rbuf);
  for (int p = 0; pack && p < size && !rc; p++)
    rc = tc_stage_read(sbuf + (size_t)v[size + p] * es, ins[p].data, ins[p].device,
                       (size_t)v[p] * es);
  for (int p = 0; pack && p < size && !rc; p++)
    rc = tc_work_piece(w, outs[p].data, outs[p].device, rbuf + (size_t)v[3 * size + p] * es,
                       (size_t)v[2 * size + p] * es);
  if (rc) return rc;
  if (a->build) return post_all_to_all_scattered(w, a, ins, outs, sbuf, rbuf, v);
  return tc_post_alltoallv(w, sbuf, v, v + size, rbuf, v + 2 * size, v + 3 * size, d, 1);
}

int tcoll_all_to_all(const tcoll_tensor_t *ins, tcoll_comm_t *comm, tcoll_tensor_t *outs) {
  TC_ENTER("tcoll_all_to_all");
  tcoll_comm_t *c = NULL;
  int rc = tc_check_all_to_all(ins, comm, outs, &c);
  if (rc) return tc_call_failed("all_to_all", c, rc);
  tc_work_t *w;
  if ((rc = tc_work_begin(&w, "all_to_all", c, TC_SIG(.t = ins, .agree = TC_AGREE_DTYPE))))
    return rc;
  for (int p = 0; p < c->size && !rc; p++)
    rc = tc_work_output(w, &outs[p], ins[0].dtype, outs[p].ndim, outs[p].shape, ins[0].device);
  if (!rc) rc = tc_work_register_inputs(w, ins, c->size);
  if (!rc) rc = post_all_to_all(w, ins, outs);
  return tc_work_end(w, rc);
}
