/* Each communicator's twin: the tcoll communicator (a duplicate, with its own shared-memory
 * segment) that carries its routed calls. Cached on the program's communicator as an attribute
 * whose delete callback frees the twin with it. A twin is made at the communicator's first
 * blocking collective through the layer, where every rank is present: making it is a collective
 * (MPI_Comm_dup), which a nonblocking call must not wait for (its start is local in MPI: a rank may
 * post it and then wait for a message that a peer sends before posting its own). Until then the
 * communicator's nonblocking calls pass through, on every rank alike. */
#include "layer.h"

#include <stdint.h>

/* The attribute's value for a communicator that never gets a twin (intercommunicator, one rank,
 * creation failed). */
static char no_twin_mark;
#define NO_TWIN ((void *)&no_twin_mark)

static int keyval = MPI_KEYVAL_INVALID;
static tcoll_comm_t *world_twin;
/* Bumped when a twin is freed: a communicator handle may be reused by a new communicator, so a
 * thread's remembered lookup is valid only within one generation. */
static unsigned generation;

/* initial-exec: a plain offset from the thread pointer, not a __tls_get_addr call per lookup
 * (a few words: the static TLS reserve holds them). */
static _Thread_local __attribute__((tls_model("initial-exec"))) struct {
  MPI_Comm comm;
  tcoll_comm_t *twin;
  unsigned generation;
  bool valid;
} last;

static int delete_twin(MPI_Comm comm, int key, void *value, void *extra) {
  (void)comm, (void)key, (void)extra;
  __atomic_add_fetch(&generation, 1, __ATOMIC_RELEASE);
  if (value == NO_TWIN || !lay_on) return MPI_SUCCESS;
  tcoll_comm_t *twin = value;
  lay_requests_drain(twin); /* MPI frees a communicator after its pending calls complete */
  LAY_TCOLL(tcoll_comm_free(&twin));
  return MPI_SUCCESS;
}

int lay_twins_init(void) {
  int rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_twin, &keyval, NULL);
  if (rc != MPI_SUCCESS) return rc;
  world_twin = tcoll_comm_size(tcoll_comm_world()) > 1 ? tcoll_comm_world() : NULL;
  return MPI_SUCCESS;
}

/* Makes comm's twin (or marks it as having none); every rank of comm is here. */
static void *make_twin(MPI_Comm comm) {
  int inter = 1, size = 0;
  void *value = NO_TWIN;
  tcoll_comm_t *twin = NULL;
  if (PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter &&
      PMPI_Comm_size(comm, &size) == MPI_SUCCESS && size > 1 &&
      LAY_TCOLL(tcoll_comm_from_mpi(comm, &twin)) == TCOLL_SUCCESS)
    value = twin;
  if (PMPI_Comm_set_attr(comm, keyval, value) != MPI_SUCCESS) {
    if (twin) LAY_TCOLL(tcoll_comm_free(&twin));
    return NO_TWIN;
  }
  return value;
}

tcoll_comm_t *lay_twin(MPI_Comm comm, bool create) {
  if (comm == MPI_COMM_WORLD) return world_twin;
  unsigned gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
  if (last.valid && last.comm == comm && last.generation == gen) return last.twin;
  void *value = NULL;
  int found = 0;
  if (comm == MPI_COMM_NULL || PMPI_Comm_get_attr(comm, keyval, &value, &found) != MPI_SUCCESS)
    return NULL;
  if (!found) {
    if (!create) return NULL;
    value = make_twin(comm);
  }
  tcoll_comm_t *twin = value == NO_TWIN ? NULL : value;
  last.comm = comm, last.twin = twin, last.generation = gen, last.valid = true;
  return twin;
}
