/* Communicators from rank lists (members only, cached per parent + ranks + tag) and from 2-D
 * rank lists (MPMD: each listed rank gets its row). */
#include "comm.h"
#include "drive.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_rank_list(const tcoll_comm_t *p, const int *ranks, int n, const char *what) {
  if (!ranks)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "%s is NULL (expected %d ranks)", what, n);
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= p->size)
      return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                      "%s[%d] is %d (expected a rank of parent in [0, %d))", what, i, ranks[i],
                      p->size);
  }
  return TCOLL_SUCCESS;
}

/* Duplicates across all rows: a quadratic scan would be fine for small groups, but a 512-rank
 * job passes 512 entries, so mark them in a table instead. */
static int check_distinct(const tcoll_comm_t *p, const int *const *rows, const int *sizes,
                          int nrows) {
  int *seen = malloc((size_t)p->size * 2 * sizeof *seen);
  if (!seen) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %d entries", p->size);
  for (int i = 0; i < 2 * p->size; i++) seen[i] = -1;
  int rc = TCOLL_SUCCESS;
  for (int r = 0; r < nrows && !rc; r++) {
    for (int i = 0; i < sizes[r] && !rc; i++) {
      int k = rows[r][i];
      if (seen[2 * k] >= 0) {
        if (nrows == 1)
          rc = tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                        "ranks lists rank %d twice (entries %d and %d; expected distinct ranks)", k,
                        seen[2 * k + 1], i);
        else
          rc = tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                        "ranks lists rank %d twice (row %d entry %d and row %d entry %d; expected "
                        "distinct ranks)",
                        k, seen[2 * k], seen[2 * k + 1], r, i);
      }
      seen[2 * k] = r;
      seen[2 * k + 1] = i;
    }
  }
  free(seen);
  return rc;
}

static tcoll_comm_t *cache_find(const tcoll_comm_t *p, const int *ranks, int n, const char *tag) {
  tcoll_comm_t *hit = NULL;
  tc_comms_lock();
  for (tcoll_comm_t *c = tc_comms_first(); c && !hit; c = c->next) {
    if (c->kind == TC_COMM_CACHED && c->key_parent == p && c->key_n == n &&
        !strcmp(c->key_tag, tag) && !memcmp(c->key_ranks, ranks, (size_t)n * sizeof *ranks)) {
      c->refcount++;
      hit = c;
    }
  }
  tc_comms_unlock();
  return hit;
}

/* MPI_Comm_create_group needs one tag shared by the members; derive it from the request so
 * that concurrent creations of different groups do not match each other. */
static int group_tag(const int *ranks, int n, const char *tag) {
  uint32_t h = 2166136261u;
  for (int i = 0; i < n; i++) {
    h ^= (uint32_t)ranks[i];
    h *= 16777619u;
  }
  for (const char *s = tag; *s; s++) {
    h ^= (uint8_t)*s;
    h *= 16777619u;
  }
  return (int)(h % 32768u); /* MPI guarantees tags up to 32767 */
}

/* The members' rendezvous before MPI_Comm_create_group (only they call it): a dissemination
 * barrier of empty messages on p->ctrl, each round waited for driving (drive.h). Each member
 * sends one message to each peer it sends to, ahead of anything the group's creation sends, so
 * messages under the same tag match in order. */
static int group_rendezvous(tcoll_comm_t *p, const int *ranks, int n, int tag) {
  int me = 0;
  while (me < n && ranks[me] != p->rank) me++;
  for (int k = 1; k < n; k *= 2) {
    MPI_Request req[2];
    int rc = PMPI_Irecv(NULL, 0, MPI_BYTE, ranks[(me - k + n) % n], tag, p->ctrl, &req[0]);
    if (rc == MPI_SUCCESS)
      rc = PMPI_Isend(NULL, 0, MPI_BYTE, ranks[(me + k) % n], tag, p->ctrl, &req[1]);
    else
      req[1] = MPI_REQUEST_NULL;
    for (int i = 0; i < 2; i++) {
      int w = req[i] == MPI_REQUEST_NULL ? MPI_SUCCESS : tc_wait_driving(&req[i], 0.0);
      if (rc == MPI_SUCCESS) rc = w;
    }
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

static int create_cached(tcoll_comm_t *p, const int *ranks, int n, const char *tag,
                         tcoll_comm_t **out) {
  tcoll_comm_t *hit = cache_find(p, ranks, n, tag);
  if (hit) {
    *out = hit;
    return TCOLL_SUCCESS;
  }
  MPI_Group pg, g;
  MPI_Comm newc = MPI_COMM_NULL;
  /* The group comes from the communicator the new one is created on: a group of another one
   * with the same members (p->mpi) is legal, but MPICH 4.0 crashes on it. */
  int rc = group_rendezvous(p, ranks, n, group_tag(ranks, n, tag));
  if (rc != MPI_SUCCESS)
    return tc_mpi_error(rc, "the members' rendezvous before MPI_Comm_create_group");
  rc = PMPI_Comm_group(p->ctrl, &pg);
  if (rc == MPI_SUCCESS) {
    rc = PMPI_Group_incl(pg, n, ranks, &g);
    PMPI_Group_free(&pg);
  }
  if (rc == MPI_SUCCESS) {
    rc = PMPI_Comm_create_group(p->ctrl, g, group_tag(ranks, n, tag), &newc);
    PMPI_Group_free(&g);
  }
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Comm_create_group");
  tcoll_comm_t *c;
  int *key_ranks = malloc((size_t)n * sizeof *key_ranks);
  char *key_tag = strdup(tag);
  if (!key_ranks || !key_tag) {
    free(key_ranks);
    free(key_tag);
    PMPI_Comm_free(&newc);
    return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate the cache key");
  }
  memcpy(key_ranks, ranks, (size_t)n * sizeof *ranks);
  rc = tc_comm_wrap(newc, TC_COMM_CACHED, &c);
  if (rc) {
    free(key_ranks);
    free(key_tag);
    PMPI_Comm_free(&newc);
    return rc;
  }
  c->key_parent = p;
  c->key_ranks = key_ranks;
  c->key_n = n;
  c->key_tag = key_tag;
  *out = c;
  return TCOLL_SUCCESS;
}

int tcoll_comm_from_ranks(tcoll_comm_t *parent, const int *ranks, int n, const char *tag,
                          tcoll_comm_t **out) {
  TC_ENTER("tcoll_comm_from_ranks");
  tcoll_comm_t *p;
  int rc = tc_comm_resolve(parent, "parent", &p);
  if (rc) return rc;
  if (!out) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "out is NULL (expected a pointer)");
  if (n < 1 || n > p->size)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "n is %d (expected 1..%d, the parent's size)", n,
                    p->size);
  if ((rc = check_rank_list(p, ranks, n, "ranks"))) return rc;
  if ((rc = check_distinct(p, &ranks, &n, 1))) return rc;
  bool member = false;
  for (int i = 0; i < n; i++) member |= ranks[i] == p->rank;
  if (!member)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "this process (rank %d of parent) is not in ranks (only members call)",
                    p->rank);
  return create_cached(p, ranks, n, tag ? tag : "", out);
}

static int from_rows(tcoll_comm_t *parent, const int *const *rows, const int *row_sizes, int nrows,
                     const char *tag, tcoll_comm_t **out) {
  tcoll_comm_t *p;
  int rc = tc_comm_resolve(parent, "parent", &p);
  if (rc) return rc;
  if (!out) return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "out is NULL (expected a pointer)");
  if (!rows || !row_sizes)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "%s is NULL (expected %d rows)",
                    rows ? "row_sizes" : "rows", nrows);
  if (nrows < 1 || nrows > p->size)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "nrows is %d (expected 1..%d)", nrows, p->size);
  for (int r = 0; r < nrows; r++) {
    if (row_sizes[r] < 1)
      return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "row_sizes[%d] is %d (expected >= 1)", r,
                      row_sizes[r]);
    if (row_sizes[r] != row_sizes[0])
      return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "group sizes must be identical found %d and %d",
                      row_sizes[0], row_sizes[r]);
  }
  if ((int64_t)nrows * row_sizes[0] > p->size)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "%d rows of %d ranks list more ranks than the parent's %d", nrows, row_sizes[0],
                    p->size);
  char what[32];
  for (int r = 0; r < nrows; r++) {
    snprintf(what, sizeof what, "rows[%d]", r);
    if ((rc = check_rank_list(p, rows[r], row_sizes[r], what))) return rc;
  }
  if ((rc = check_distinct(p, rows, row_sizes, nrows))) return rc;
  for (int r = 0; r < nrows; r++)
    for (int i = 0; i < row_sizes[r]; i++)
      if (rows[r][i] == p->rank)
        return create_cached(p, rows[r], row_sizes[r], tag ? tag : "", out);
  return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                  "this process (rank %d of parent) is in no row (only listed ranks call)",
                  p->rank);
}

int tcoll_comm_from_rank_lists(tcoll_comm_t *parent, const int *const *rows, const int *row_sizes,
                               int nrows, const char *tag, tcoll_comm_t **out) {
  TC_ENTER("tcoll_comm_from_rank_lists");
  return from_rows(parent, rows, row_sizes, nrows, tag, out);
}

int tcoll_comm_from_rank_groups(tcoll_comm_t *parent, const int *ranks, int ngroups, int group_size,
                                const char *tag, tcoll_comm_t **out) {
  TC_ENTER("tcoll_comm_from_rank_groups");
  if (!ranks)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT,
                    "ranks is NULL (expected ngroups x group_size ranks)");
  if (ngroups < 1 || ngroups > 65536)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "ngroups is %d (expected >= 1)", ngroups);
  if (group_size < 1)
    return tc_error(TCOLL_ERR_INVALID_ARGUMENT, "group_size is %d (expected >= 1)", group_size);
  const int **rows = malloc((size_t)ngroups * sizeof *rows);
  int *sizes = malloc((size_t)ngroups * sizeof *sizes);
  if (!rows || !sizes) {
    free(rows);
    free(sizes);
    return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %d rows", ngroups);
  }
  for (int r = 0; r < ngroups; r++) {
    rows[r] = ranks + (size_t)r * (size_t)group_size;
    sizes[r] = group_size;
  }
  int rc = from_rows(parent, rows, sizes, ngroups, tag, out);
  free(rows);
  free(sizes);
  return rc;
}
