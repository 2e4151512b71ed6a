/* Device meshes: the parent's ranks laid out row-major over dims, one communicator per dim. */
#include "comm.h"
#include "drive.h"

#include <stdlib.h>

#define TC_MESH_MAGIC 0x746d7368u /* "tmsh" */

struct tcoll_mesh {
  uint32_t magic;
  struct tcoll_mesh *next; /* live meshes: a freed or foreign pointer is refused, never read */
  int ndim;
  int dims[TCOLL_MAX_DIMS];
  int coords[TCOLL_MAX_DIMS];
  tcoll_comm_t *slices[TCOLL_MAX_DIMS];
};

static pthread_mutex_t meshes_lock = PTHREAD_MUTEX_INITIALIZER;
static tcoll_mesh_t *meshes_head;

static bool mesh_live(const tcoll_mesh_t *m) {
  bool live = false;
  pthread_mutex_lock(&meshes_lock);
  for (tcoll_mesh_t *it = meshes_head; it && !live; it = it->next) live = it == m;
  pthread_mutex_unlock(&meshes_lock);
  return live && m->magic == TC_MESH_MAGIC;
}

/* Removes m from the live list; false if it was not there. */
static bool mesh_unlink(tcoll_mesh_t *m) {
  bool found = false;
  pthread_mutex_lock(&meshes_lock);
  for (tcoll_mesh_t **p = &meshes_head; *p; p = &(*p)->next) {
    if (*p == m) {
      *p = m->next;
      found = true;
      break;
    }
  }
  pthread_mutex_unlock(&meshes_lock);
  return found;
}

static void free_slices(tcoll_mesh_t *m) {
  for (int d = 0; d < m->ndim; d++)
    if (m->slices[d]) tc_comm_destroy(m->slices[d]);
}

/* Ranks that agree on every coordinate but d share a slice; color numbers those positions. */
static int slice_color(const tcoll_mesh_t *m, int d) {
  int color = 0;
  for (int i = 0; i < m->ndim; i++)
    if (i != d) color = color * m->dims[i] + m->coords[i];
  return color;
}

int tcoll_mesh_create(tcoll_comm_t *parent, int ndim, const int *dims, tcoll_mesh_t **out) {
  TC_ENTER("tcoll_mesh_create");
  tcoll_comm_t *p;
  int rc = tc_comm_resolve(parent, "parent", &p);
  if (rc) return rc;
  if (!out) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "out is NULL (expected a pointer)");
  if (ndim < 1 || ndim > TCOLL_MAX_DIMS)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "ndim is %d (expected 1..%d)", ndim,
                    TCOLL_MAX_DIMS);
  if (!dims) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "dims is NULL (expected %d sizes)", ndim);
  int64_t prod = 1;
  for (int d = 0; d < ndim; d++) {
    if (dims[d] < 1)
      return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "dims[%d] is %d (expected >= 1)", d, dims[d]);
    prod *= dims[d];
    if (prod > p->size) break;
  }
  if (prod != p->size)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "mesh dims multiply to %lld but the parent has %d ranks (expected equal)",
                    (long long)prod, p->size);
  tcoll_mesh_t *m = calloc(1, sizeof *m);
  if (!m) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate a mesh");
  m->ndim = ndim;
  int rest = p->rank;
  for (int d = ndim - 1; d >= 0; d--) {
    m->dims[d] = dims[d];
    m->coords[d] = rest % dims[d];
    rest /= dims[d];
  }
  if ((rc = tc_rendezvous(p->ctrl)) != MPI_SUCCESS) {
    free(m);
    return tc_mpi_error(rc, "MPI_Ibarrier (before the slices' MPI_Comm_split)");
  }
  for (int d = 0; d < ndim; d++) {
    MPI_Comm c;
    rc = PMPI_Comm_split(p->mpi, slice_color(m, d), m->coords[d], &c);
    if (rc != MPI_SUCCESS) {
      rc = tc_mpi_error(rc, "MPI_Comm_split");
      break;
    }
    rc = tc_comm_wrap(c, TC_COMM_MESH, &m->slices[d]);
    if (rc) {
      PMPI_Comm_free(&c);
      break;
    }
  }
  if (rc) {
    free_slices(m);
    free(m);
    return rc;
  }
  m->magic = TC_MESH_MAGIC;
  pthread_mutex_lock(&meshes_lock);
  m->next = meshes_head;
  meshes_head = m;
  pthread_mutex_unlock(&meshes_lock);
  *out = m;
  return TCOLL_SUCCESS;
}

static bool dim_ok(const tcoll_mesh_t *mesh, int dim) {
  return mesh_live(mesh) && dim >= 0 && dim < mesh->ndim;
}

tcoll_comm_t *tcoll_mesh_comm(const tcoll_mesh_t *mesh, int dim) {
  TC_ENTER("tcoll_mesh_comm");
  if (!mesh) {
    tc_error(TCOLL_ERR_INVALID_ARGUMENT, "mesh is NULL (expected a mesh)");
    return NULL;
  }
  if (!mesh_live(mesh)) {
    tc_error(TCOLL_ERR_INVALID_ARGUMENT,
             "mesh %p is not a live tcoll mesh (freed, or not from tcoll_mesh_create)",
             (const void *)mesh);
    return NULL;
  }
  if (!dim_ok(mesh, dim)) {
    tc_error(TCOLL_ERR_INVALID_ARGUMENT, "dim is %d (expected 0..%d)", dim, mesh->ndim - 1);
    return NULL;
  }
  return mesh->slices[dim];
}

int tcoll_mesh_coord(const tcoll_mesh_t *mesh, int dim) {
  return dim_ok(mesh, dim) ? mesh->coords[dim] : -1;
}
int tcoll_mesh_ndim(const tcoll_mesh_t *mesh) { return mesh_live(mesh) ? mesh->ndim : 0; }

int tcoll_mesh_free(tcoll_mesh_t **mesh) {
  TC_ENTER("tcoll_mesh_free");
  if (!mesh)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "mesh is NULL (expected the address of a mesh)");
  if (!*mesh) return TCOLL_SUCCESS;
  int rc = tc_require_init();
  if (rc) return rc;
  if (!mesh_unlink(*mesh))
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "mesh %p is not a live tcoll mesh (freed, or not from tcoll_mesh_create)",
                    (void *)*mesh);
  (*mesh)->magic = 0;
  free_slices(*mesh);
  free(*mesh);
  *mesh = NULL;
  return TCOLL_SUCCESS;
}

void tc_meshes_destroy_all(void) {
  for (;;) {
    pthread_mutex_lock(&meshes_lock);
    tcoll_mesh_t *m = meshes_head;
    if (m) meshes_head = m->next;
    pthread_mutex_unlock(&meshes_lock);
    if (!m) break;
    m->magic = 0;
    free_slices(m);
    free(m);
  }
}
