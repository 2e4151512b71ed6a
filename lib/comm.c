/* Communicators: world, from MPI, split, names, free. Rank-list forms are in comm_groups.c. */
#include "comm.h"

#include "base/ptrmap.h"
#include "drive.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;
static tcoll_comm_t *comms_head;
static uint32_t comms_next_id;
static tc_ptrmap_t comms_live; /* the same communicators, for an O(1) check on every call */
/* Bumped whenever a communicator goes away: a thread may trust the last communicator it found
 * live for as long as the generation has not moved, without taking the lock. */
static uint64_t comms_generation;
static _Thread_local TC_TLS_HOT const tcoll_comm_t *recent_comm;
static _Thread_local TC_TLS_HOT uint64_t recent_generation;

void tc_comms_lock(void) { pthread_mutex_lock(&comms_lock); }
void tc_comms_unlock(void) { pthread_mutex_unlock(&comms_lock); }
tcoll_comm_t *tc_comms_first(void) { return comms_head; }

static bool is_live(const tcoll_comm_t *c) {
  if (c == recent_comm && recent_generation == __atomic_load_n(&comms_generation, __ATOMIC_ACQUIRE))
    return true;
  tc_comms_lock();
  bool live = tc_ptrmap_get(&comms_live, (uintptr_t)c) != NULL;
  if (live) {
    recent_comm = c;
    recent_generation = comms_generation;
  }
  tc_comms_unlock();
  return live;
}

int tc_comm_resolve_any(tcoll_comm_t *comm, const char *argname, tcoll_comm_t **out) {
  if (!tcoll_initialized()) return tc_require_init();
  if (!comm) {
    *out = tc_g.world;
    return TCOLL_SUCCESS;
  }
  if (!is_live(comm) || comm->magic != TC_COMM_MAGIC)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "%s %p is not a live tcoll communicator", argname,
                    (void *)comm);
  *out = comm;
  return TCOLL_SUCCESS;
}

/* Set by init: makes what rooms above keep for a communicator (its node-shared segment),
 * collectively, as the communicator is made. */
static void (*create_hook)(tcoll_comm_t *);
void tc_comm_set_create(void (*create)(tcoll_comm_t *)) { create_hook = create; }

int tc_comm_wrap(MPI_Comm mpi, tc_comm_kind_t kind, tcoll_comm_t **out) {
  tcoll_comm_t *c = calloc(1, sizeof *c);
  if (!c) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate a communicator");
  int rc = PMPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = PMPI_Comm_dup(mpi, &c->ctrl);
  if (rc == MPI_SUCCESS) {
    rc = PMPI_Comm_dup(mpi, &c->sched);
    if (rc != MPI_SUCCESS) PMPI_Comm_free(&c->ctrl);
  }
  if (rc != MPI_SUCCESS) {
    free(c);
    return tc_mpi_error(rc, "setting up a communicator");
  }
  PMPI_Comm_set_errhandler(c->ctrl, MPI_ERRORS_RETURN);
  PMPI_Comm_set_errhandler(c->sched, MPI_ERRORS_RETURN);
  c->magic = TC_COMM_MAGIC;
  c->kind = kind;
  c->mpi = mpi;
  PMPI_Comm_rank(mpi, &c->rank);
  PMPI_Comm_size(mpi, &c->size);
  c->refcount = 1;
  tc_comms_lock();
  rc = tc_ptrmap_put(&comms_live, (uintptr_t)c, c);
  if (!rc) {
    c->id = comms_next_id++;
    c->next = comms_head;
    comms_head = c;
  }
  tc_comms_unlock();
  if (rc) {
    PMPI_Comm_free(&c->ctrl);
    PMPI_Comm_free(&c->sched);
    free(c);
    return tc_error(rc, "cannot record a new communicator");
  }
  if (create_hook) create_hook(c); /* optional: it never fails the communicator */
  *out = c;
  return TCOLL_SUCCESS;
}

/* Names of freed communicators, by id (comms lock): the flight recorder keeps only ids, and may
 * describe an op after its communicator is gone. Forgotten with the last communicator. */
typedef struct gone_name {
  uint32_t id;
  char name[TC_COMM_NAME_LEN];
} gone_name_t;
static gone_name_t *gone;
static size_t ngone, gone_cap;

static void remember_name_locked(const tcoll_comm_t *c) {
  if (!c->name[0]) return;
  if (ngone == gone_cap) {
    size_t cap = gone_cap ? 2 * gone_cap : 16;
    gone_name_t *g = realloc(gone, cap * sizeof *g);
    if (!g) return; /* the recorder shows the id instead */
    gone = g;
    gone_cap = cap;
  }
  gone[ngone].id = c->id;
  memcpy(gone[ngone++].name, c->name, sizeof c->name);
}

const char *tc_comm_label_of(uint32_t id, char *buf, size_t len) {
  const char *name = NULL;
  tc_comms_lock();
  for (const tcoll_comm_t *c = comms_head; c && !name; c = c->next)
    if (c->id == id) name = c->name;
  for (size_t i = ngone; i-- > 0 && !name;)
    if (gone[i].id == id) name = gone[i].name;
  if (name && name[0])
    snprintf(buf, len, "'%s'", name);
  else
    snprintf(buf, len, "#%u", id);
  tc_comms_unlock();
  return buf;
}

static void unlink_comm(tcoll_comm_t *c) {
  tc_comms_lock();
  remember_name_locked(c);
  tc_ptrmap_del(&comms_live, (uintptr_t)c);
  __atomic_add_fetch(&comms_generation, 1, __ATOMIC_RELEASE);
  for (tcoll_comm_t **p = &comms_head; *p; p = &(*p)->next) {
    if (*p == c) {
      *p = c->next;
      break;
    }
  }
  /* Cached communicators made from c stay alive, but no later request can name c as their
   * parent: a new communicator may be allocated at c's address. */
  for (tcoll_comm_t *it = comms_head; it; it = it->next)
    if (it->key_parent == c) it->key_parent = NULL;
  tc_comms_unlock();
}

/* Set by init: completes a communicator's pending work (the registry's business, above this
 * file), so that nothing a user submitted is lost when it is freed. */
static void (*drain_hook)(const tcoll_comm_t *);
void tc_comm_set_drain(void (*drain)(const tcoll_comm_t *)) { drain_hook = drain; }
/* Set by init: frees what rooms above keep for a communicator (its node-shared segment). */
static void (*release_hook)(tcoll_comm_t *);
void tc_comm_set_release(void (*release)(tcoll_comm_t *)) { release_hook = release; }

void tc_comm_destroy(tcoll_comm_t *c) {
  if (drain_hook) drain_hook(c);
  if (release_hook) release_hook(c);
  unlink_comm(c);
  PMPI_Comm_free(&c->ctrl);
  PMPI_Comm_free(&c->sched);
  PMPI_Comm_free(&c->mpi);
  free(c->key_ranks);
  free(c->key_tag);
  c->magic = 0;
  free(c);
}

void tc_comms_destroy_all(void) {
  for (;;) {
    tc_comms_lock();
    tcoll_comm_t *c = comms_head;
    tc_comms_unlock();
    if (!c) break;
    tc_comm_destroy(c);
  }
  tc_comms_lock();
  free(gone);
  gone = NULL;
  ngone = gone_cap = 0;
  tc_comms_unlock();
}

uint64_t tc_comm_next_seq(tcoll_comm_t *comm) {
  return __atomic_add_fetch(&comm->seq, 1, __ATOMIC_RELAXED);
}

const char *tc_comm_label(const tcoll_comm_t *c, char *buf, size_t len) {
  if (c->name[0])
    snprintf(buf, len, "'%s'", c->name);
  else
    snprintf(buf, len, "#%u", c->id);
  return buf;
}

tcoll_comm_t *tcoll_comm_world(void) { return tcoll_initialized() ? tc_g.world : NULL; }

int tcoll_comm_from_mpi(MPI_Comm comm, tcoll_comm_t **out) {
  TC_ENTER("tcoll_comm_from_mpi");
  int rc = tc_require_init();
  if (rc) return rc;
  if (!out) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "out is NULL (expected a pointer)");
  if (comm == MPI_COMM_NULL)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "comm is MPI_COMM_NULL (expected a valid communicator)");
  int inter = 0;
  rc = PMPI_Comm_test_inter(comm, &inter);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Comm_test_inter");
  if (inter)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "comm is an intercommunicator (expected an intracommunicator)");
  MPI_Comm dup;
  rc = tc_rendezvous(comm);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Ibarrier (before MPI_Comm_dup)");
  rc = PMPI_Comm_dup(comm, &dup);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Comm_dup");
  rc = tc_comm_wrap(dup, TC_COMM_USER, out);
  if (rc) PMPI_Comm_free(&dup);
  return rc;
}

/* NULL is the world, as in every collective (none before tcoll_init). */
static const tcoll_comm_t *or_world(const tcoll_comm_t *comm) {
  return comm ? comm : tcoll_comm_world();
}
MPI_Comm tcoll_comm_mpi(const tcoll_comm_t *comm) {
  return or_world(comm) ? or_world(comm)->mpi : MPI_COMM_NULL;
}
int tcoll_comm_rank(const tcoll_comm_t *comm) { return or_world(comm) ? or_world(comm)->rank : -1; }
int tcoll_comm_size(const tcoll_comm_t *comm) { return or_world(comm) ? or_world(comm)->size : -1; }
const char *tcoll_comm_name(const tcoll_comm_t *comm) {
  return or_world(comm) ? or_world(comm)->name : "";
}

int tcoll_comm_split(tcoll_comm_t *parent, int color, int key, tcoll_comm_t **out) {
  TC_ENTER("tcoll_comm_split");
  tcoll_comm_t *p;
  int rc = tc_comm_resolve(parent, "parent", &p);
  if (rc) return rc;
  if (!out) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "out is NULL (expected a pointer)");
  MPI_Comm newc;
  rc = tc_rendezvous(p->ctrl);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Ibarrier (before MPI_Comm_split)");
  rc = PMPI_Comm_split(p->mpi, color < 0 ? MPI_UNDEFINED : color, key, &newc);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Comm_split");
  *out = NULL;
  if (newc == MPI_COMM_NULL) return TCOLL_SUCCESS;
  rc = tc_comm_wrap(newc, TC_COMM_USER, out);
  if (rc) PMPI_Comm_free(&newc);
  return rc;
}

int tcoll_comm_set_name(tcoll_comm_t *comm, const char *name) {
  TC_ENTER("tcoll_comm_set_name");
  tcoll_comm_t *c;
  int rc = tc_comm_resolve(comm, "comm", &c);
  if (rc) return rc;
  if (!name) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "name is NULL (expected a string)");
  if (strlen(name) >= TC_COMM_NAME_LEN)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "name \"%s\" is %zu bytes long (expected at most %d)", name, strlen(name),
                    TC_COMM_NAME_LEN - 1);
  rc = TCOLL_SUCCESS;
  tc_comms_lock();
  for (tcoll_comm_t *it = comms_head; it; it = it->next)
    if (it != c && name[0] && !strcmp(it->name, name)) rc = TCOLL_ERR_INVALID_ARGUMENT;
  if (!rc) snprintf(c->name, sizeof c->name, "%s", name);
  tc_comms_unlock();
  if (rc)
    return tc_error(
        rc, "name \"%s\" is already used by another communicator (expected a unique name)", name);
  PMPI_Comm_set_name(c->mpi, c->name);
  return TCOLL_SUCCESS;
}

tcoll_comm_t *tcoll_comm_lookup(const char *name) {
  if (!name || !name[0]) return NULL;
  tcoll_comm_t *found = NULL;
  tc_comms_lock();
  for (tcoll_comm_t *it = comms_head; it && !found; it = it->next)
    if (!strcmp(it->name, name)) found = it;
  tc_comms_unlock();
  return found;
}

int tcoll_comm_free(tcoll_comm_t **comm) {
  TC_ENTER("tcoll_comm_free");
  if (!comm)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "comm is NULL (expected the address of a communicator)");
  if (!*comm) return TCOLL_SUCCESS;
  tcoll_comm_t *c;
  int rc = tc_comm_resolve(*comm, "*comm", &c);
  if (rc) return rc;
  if (c->kind == TC_COMM_WORLD)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "*comm is the world communicator (owned by tcoll, expected one you created)");
  if (c->kind == TC_COMM_MESH)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "*comm is a mesh slice (free the mesh with tcoll_mesh_free)");
  *comm = NULL;
  if (c->kind == TC_COMM_CACHED) {
    tc_comms_lock();
    int left = --c->refcount;
    tc_comms_unlock();
    if (left > 0) return TCOLL_SUCCESS;
  }
  tc_comm_destroy(c);
  return TCOLL_SUCCESS;
}
