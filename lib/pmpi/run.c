/* Running a routed call on tcoll: posting its plan (packing first where it must), finishing it
 * (unpacking, freeing its copies), a blocking call from start to end, and errors as MPI codes
 * through the communicator's error handler. */
#include "layer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lay_error(MPI_Comm comm, int tcoll_rc, const char *what) {
  tcoll_config_t cfg; /* an MPI error code says little: with TCOLL_DEBUG=INFO, tcoll's message */
  if (tcoll_get_config(&cfg) == TCOLL_SUCCESS && cfg.debug >= TCOLL_LOG_INFO)
    fprintf(stderr, "tcoll-mpi: %s failed in tcoll: %s\n", what, tcoll_last_error());
  int code = tcoll_rc == TCOLL_ERR_INVALID_ARGUMENT ? MPI_ERR_ARG
             : tcoll_rc == TCOLL_ERR_NO_MEMORY      ? MPI_ERR_NO_MEM
                                                    : MPI_ERR_OTHER;
  PMPI_Comm_call_errhandler(comm, code);
  return code;
}

static int post_once(lay_call_t *c) {
  switch (c->op) {
  case TCOLL_LAYER_ALL_REDUCE: return tcoll_all_reduce(&c->in, c->redop, c->twin, &c->out);
  case TCOLL_LAYER_REDUCE: return tcoll_reduce(&c->in, c->root, c->redop, c->twin, &c->out);
  case TCOLL_LAYER_BROADCAST: return tcoll_broadcast(&c->in, c->root, c->twin, &c->out);
  case TCOLL_LAYER_ALL_GATHER: return tcoll_all_gather(&c->in, 0, c->twin, &c->out);
  case TCOLL_LAYER_REDUCE_SCATTER:
    return tcoll_reduce_scatter(&c->in, c->redop, 0, c->twin, &c->out);
  case TCOLL_LAYER_ALL_TO_ALL: return tcoll_all_to_all_single(&c->in, NULL, NULL, c->twin, &c->out);
  default: return TCOLL_ERR_INTERNAL;
  }
}

int lay_post(lay_call_t *c) {
  int src = lay_stage_in(&c->stage);
  if (src != TCOLL_SUCCESS) return src;
  if (c->pack_from) {
    int at = 0;
    int rc = PMPI_Pack(c->pack_from, c->pack_count, c->pack_type, c->in.data,
                       (int)tcoll_tensor_nbytes(&c->in), &at, c->comm);
    if (rc != MPI_SUCCESS) return TCOLL_ERR_MPI;
  }
  c->key = c->out.data;
  int rc = LAY_TCOLL(post_once(c));
  /* A buffer only read here (reduce's input off the root, broadcast's at the root) may be read by
   * another lay_pending call, which MPI allows: tcoll registers it as this call's output, so it
   * refuses (and starts nothing); the call runs on a copy instead. */
  if (rc == TCOLL_ERR_BUSY && c->in.data == c->out.data && !c->unpack_to) {
    size_t bytes = tcoll_tensor_nbytes(&c->in);
    if (!(c->copy = malloc(bytes ? bytes : 1))) return TCOLL_ERR_NO_MEMORY;
    memcpy(c->copy, c->in.data, bytes);
    c->in.data = c->out.data = c->key = c->copy;
    rc = LAY_TCOLL(post_once(c));
  }
  return rc;
}

int lay_finish(lay_call_t *c, int rc) {
  if (rc == TCOLL_SUCCESS && c->unpack_to) {
    int at = 0;
    PMPI_Unpack(c->out.data, (int)tcoll_tensor_nbytes(&c->out), &at, c->unpack_to, c->unpack_count,
                c->unpack_type, c->comm);
  }
  if (rc == TCOLL_SUCCESS) rc = lay_stage_out(&c->stage);
  free(c->copy);
  c->copy = NULL;
  if (c->persistent) return rc; /* its scratch and mirrors serve the next start */
  free(c->scratch);
  c->scratch = NULL;
  lay_stage_free(&c->stage);
  return rc;
}

int lay_run_blocking(lay_call_t *c) {
  bool staged = c->stage.n > 0; /* lay_finish frees the mirrors */
  int rc = lay_post(c);
  if (rc == TCOLL_SUCCESS) rc = LAY_TCOLL(tcoll_wait(c->key));
  rc = lay_finish(c, rc);
  lay_count(c->fn, c->algo, staged);
  return rc == TCOLL_SUCCESS ? MPI_SUCCESS : lay_error(c->comm, rc, lay_fn_name(c->fn));
}
