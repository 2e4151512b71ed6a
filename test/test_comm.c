/* Communicators and meshes: world, from_mpi, split, rank lists (cached, members only), 2-D
 * rank lists, names, free rules, and device meshes laid out like DeviceMesh(arange(n).view(dims)).
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* Every member contributes its world rank; returns the sum over comm (checked to be the same
 * value in every element), or -1 after recording a failure. */
static long sum_of_world_ranks(tcoll_comm_t *comm) {
  int64_t shape[1] = {3};
  tcoll_tensor_t in = t_host(TCOLL_INT64, 1, shape), out = t_empty();
  for (int i = 0; i < 3; i++) ((int64_t *)in.data)[i] = t_rank;
  long result = -1;
  int rc = tcoll_all_reduce(&in, TCOLL_SUM, comm, &out);
  T_EXPECT(rc == TCOLL_SUCCESS, "all_reduce on a communicator: %s", tcoll_last_error());
  if (rc == TCOLL_SUCCESS) {
    T_OK(tcoll_wait(out.data));
    const int64_t *v = out.data;
    T_EXPECT(v[0] == v[1] && v[1] == v[2], "all_reduce elements differ");
    result = (long)v[0];
  }
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  return result;
}

/* The world ranks of comm's members in comm's rank order (all_gather of the world rank). */
static void member_world_ranks(tcoll_comm_t *comm, int64_t *ranks) {
  int64_t one[1] = {1};
  tcoll_tensor_t in = t_host(TCOLL_INT64, 1, one), out = t_empty();
  ((int64_t *)in.data)[0] = t_rank;
  T_OK(tcoll_all_gather(&in, 0, comm, &out));
  T_OK(tcoll_wait(out.data));
  int n = tcoll_comm_size(comm);
  for (int i = 0; i < n && out.data; i++) ranks[i] = ((int64_t *)out.data)[i];
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}

/* Communicators made right after a collective whose later steps this rank starts (t_pending_ring:
 * rank 0 posts a ring reduce_scatter on the world and creates a communicator without waiting, the
 * others wait for the reduce_scatter first). Beyond 2 ranks the ring's second step starts only when
 * rank 0 drives it, so each creation's rendezvous must drive it while it waits (a blocking
 * MPI_Comm_split / MPI_Comm_dup / MPI_Comm_create_group hung here). */
START_TEST(create_after_pending) {
  long want = (long)t_size * (t_size - 1) / 2;
  t_pending_t pr;
  tcoll_comm_t *c = NULL;

  t_pending_ring(&pr, tcoll_comm_world());
  T_OK(tcoll_comm_split(tcoll_comm_world(), 0, t_rank, &c));
  t_pending_ring_done(&pr, "split");
  T_EXPECT(c && sum_of_world_ranks(c) == want, "split after a pending ring");
  T_OK(tcoll_comm_free(&c));

  t_pending_ring(&pr, tcoll_comm_world());
  T_OK(tcoll_comm_from_mpi(MPI_COMM_WORLD, &c));
  t_pending_ring_done(&pr, "from_mpi");
  T_EXPECT(c && sum_of_world_ranks(c) == want, "from_mpi after a pending ring");
  T_OK(tcoll_comm_free(&c));

  int *ranks = malloc((size_t)t_size * sizeof *ranks);
  for (int r = 0; r < t_size; r++) ranks[r] = t_size - 1 - r;
  t_pending_ring(&pr, tcoll_comm_world());
  T_OK(tcoll_comm_from_ranks(tcoll_comm_world(), ranks, t_size, "after-pending", &c));
  t_pending_ring_done(&pr, "from_ranks");
  T_EXPECT(c && sum_of_world_ranks(c) == want, "from_ranks after a pending ring");
  T_OK(tcoll_comm_free(&c));
  free(ranks);

  tcoll_mesh_t *m = NULL;
  int dims[1] = {t_size};
  t_pending_ring(&pr, tcoll_comm_world());
  T_OK(tcoll_mesh_create(tcoll_comm_world(), 1, dims, &m));
  t_pending_ring_done(&pr, "mesh");
  T_EXPECT(m && sum_of_world_ranks(tcoll_mesh_comm(m, 0)) == want, "a mesh after a pending ring");
  T_OK(tcoll_mesh_free(&m));
}
END_TEST

START_TEST(world) {
  tcoll_comm_t *w = tcoll_comm_world();
  T_EXPECT(w != NULL, "tcoll_comm_world() is NULL");
  T_EXPECT(tcoll_comm_rank(w) == t_rank && tcoll_comm_size(w) == t_size, "world is rank %d of %d",
           tcoll_comm_rank(w), tcoll_comm_size(w));
  T_EXPECT(tcoll_comm_world() == w, "tcoll_comm_world() changes");
  MPI_Comm m = tcoll_comm_mpi(w);
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(m, MPI_COMM_WORLD, &cmp);
  T_EXPECT(cmp == MPI_CONGRUENT,
           "world's MPI communicator is not a duplicate of MPI_COMM_WORLD (%d)", cmp);
  T_EXPECT(!strcmp(tcoll_comm_name(w), "world"), "world is named \"%s\"", tcoll_comm_name(w));
  T_EXPECT(tcoll_comm_lookup("world") == w, "lookup(\"world\") is not the world");
  /* NULL means the world, in collectives and in the accessors alike. */
  T_EXPECT(sum_of_world_ranks(NULL) == (long)t_size * (t_size - 1) / 2,
           "all_reduce with comm NULL");
  T_EXPECT(sum_of_world_ranks(w) == (long)t_size * (t_size - 1) / 2, "all_reduce on world");
  T_EXPECT(tcoll_comm_rank(NULL) == t_rank && tcoll_comm_size(NULL) == t_size,
           "rank/size of NULL are not the world's");
  T_EXPECT(tcoll_comm_mpi(NULL) == tcoll_comm_mpi(w), "tcoll_comm_mpi(NULL) is not the world's");
  T_EXPECT(!strcmp(tcoll_comm_name(NULL), "world"), "tcoll_comm_name(NULL) is not \"world\"");
  /* Library communicators return errors instead of aborting. */
  MPI_Errhandler eh;
  MPI_Comm_get_errhandler(m, &eh);
  T_EXPECT(eh == MPI_ERRORS_RETURN, "world's MPI communicator does not use MPI_ERRORS_RETURN");
  MPI_Errhandler_free(&eh);
}
END_TEST

START_TEST(from_mpi) {
  /* The host program's own communicator: odd and even world ranks. */
  MPI_Comm mine;
  MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, t_rank, &mine);
  int my_rank, my_size;
  MPI_Comm_rank(mine, &my_rank);
  MPI_Comm_size(mine, &my_size);
  tcoll_comm_t *c = NULL;
  MPI_Errhandler before; /* MPI_COMM_WORLD's (the dup inherited it), tcoll's stand-in or not */
  MPI_Comm_get_errhandler(mine, &before);
  T_OK(tcoll_comm_from_mpi(mine, &c));
  T_EXPECT(c && tcoll_comm_rank(c) == my_rank && tcoll_comm_size(c) == my_size,
           "from_mpi: rank %d of %d", tcoll_comm_rank(c), tcoll_comm_size(c));
  /* A duplicate: same group, a different communicator. */
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(tcoll_comm_mpi(c), mine, &cmp);
  T_EXPECT(cmp == MPI_CONGRUENT, "tcoll's communicator is not a duplicate (compare gives %d)", cmp);
  /* Same parity ranks: p, p + 2, ...; their sum. */
  long want = 0;
  for (int r = t_rank % 2; r < t_size; r += 2) want += r;
  /* The caller's communicator stays independent: its own collective runs while tcoll's is
   * pending on the duplicate. */
  int64_t shape[1] = {4};
  tcoll_tensor_t in = t_host(TCOLL_INT32, 1, shape), out = t_empty();
  for (int i = 0; i < 4; i++) ((int32_t *)in.data)[i] = t_rank + i;
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, c, &out));
  int mine_sum = 0, one = t_rank;
  MPI_Allreduce(&one, &mine_sum, 1, MPI_INT, MPI_SUM, mine);
  T_EXPECT(mine_sum == want, "the caller's MPI_Allreduce gives %d, expected %ld", mine_sum, want);
  T_OK(tcoll_wait(out.data));
  for (int i = 0; i < 4; i++)
    T_EXPECT(((int32_t *)out.data)[i] == want + (long)i * my_size, "element %d is %d", i,
             ((int32_t *)out.data)[i]);
  T_EXPECT(sum_of_world_ranks(c) == want, "sum over the from_mpi communicator");
  /* The caller's error handler is left alone. */
  MPI_Errhandler eh;
  MPI_Comm_get_errhandler(mine, &eh);
  T_EXPECT(eh == before, "from_mpi changed the caller's error handler");
  MPI_Errhandler_free(&eh);
  MPI_Errhandler_free(&before);
  T_OK(tcoll_comm_free(&c));
  T_EXPECT(c == NULL, "tcoll_comm_free did not set *comm to NULL");
  /* Freeing tcoll's copy leaves the caller's communicator usable. */
  mine_sum = 0;
  MPI_Allreduce(&one, &mine_sum, 1, MPI_INT, MPI_SUM, mine);
  T_EXPECT(mine_sum == want, "the caller's communicator after tcoll_comm_free gives %d", mine_sum);
  /* From MPI_COMM_WORLD itself. */
  T_OK(tcoll_comm_from_mpi(MPI_COMM_WORLD, &c));
  T_EXPECT(c != tcoll_comm_world(), "from_mpi(MPI_COMM_WORLD) returned tcoll's world");
  T_EXPECT(sum_of_world_ranks(c) == (long)t_size * (t_size - 1) / 2,
           "sum over from_mpi(MPI_COMM_WORLD)");
  T_OK(tcoll_comm_free(&c));
  /* Bad arguments. */
  T_FAILS(tcoll_comm_from_mpi(MPI_COMM_NULL, &c), TCOLL_ERR_INVALID_ARGUMENT, "MPI_COMM_NULL");
  T_FAILS(tcoll_comm_from_mpi(mine, NULL), TCOLL_ERR_INVALID_ARGUMENT, "out is NULL");
  if (t_size >= 2) {
    /* An intercommunicator between the even and the odd ranks. */
    MPI_Comm inter;
    MPI_Intercomm_create(mine, 0, MPI_COMM_WORLD, t_rank % 2 ? 0 : 1, 77, &inter);
    T_FAILS(tcoll_comm_from_mpi(inter, &c), TCOLL_ERR_INVALID_ARGUMENT, "intercommunicator");
    T_EXPECT(c == NULL, "a refused from_mpi set *out");
    MPI_Comm_free(&inter);
  }
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
  MPI_Comm_free(&mine);
}
END_TEST

START_TEST(split) {
  /* color = parity, key = -rank: new ranks in decreasing world rank. */
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_split(NULL, t_rank % 2, t_size - t_rank, &c));
  int size = 0, rank = 0;
  for (int r = t_rank % 2; r < t_size; r += 2) {
    size++;
    if (r > t_rank) rank++;
  }
  T_EXPECT(c && tcoll_comm_size(c) == size && tcoll_comm_rank(c) == rank,
           "split: rank %d of %d, expected %d of %d", tcoll_comm_rank(c), tcoll_comm_size(c), rank,
           size);
  int64_t ranks[4] = {-1, -1, -1, -1};
  member_world_ranks(c, ranks);
  for (int i = 0; i < size; i++) {
    int want = t_rank % 2 + 2 * (size - 1 - i);
    T_EXPECT(ranks[i] == want, "split member %d is world rank %lld, expected %d", i,
             (long long)ranks[i], want);
  }
  /* A split of the split (parent other than world): everyone alone. */
  tcoll_comm_t *alone = NULL;
  T_OK(tcoll_comm_split(c, tcoll_comm_rank(c), 0, &alone));
  T_EXPECT(alone && tcoll_comm_size(alone) == 1 && tcoll_comm_rank(alone) == 0, "split of a split");
  T_EXPECT(sum_of_world_ranks(alone) == t_rank, "sum over a one-rank split");
  T_OK(tcoll_comm_free(&alone));
  T_OK(tcoll_comm_free(&c));
  T_EXPECT(c == NULL, "tcoll_comm_free did not set *comm to NULL");
  /* A negative color: no communicator for that rank. */
  tcoll_comm_t *d = (tcoll_comm_t *)&d; /* must be overwritten */
  T_OK(tcoll_comm_split(NULL, t_rank == 0 ? -1 : 5, t_rank, &d));
  if (t_rank == 0) {
    T_EXPECT(d == NULL, "negative color gave a communicator");
  } else {
    T_EXPECT(d && tcoll_comm_size(d) == t_size - 1 && tcoll_comm_rank(d) == t_rank - 1,
             "split without rank 0");
    T_EXPECT(sum_of_world_ranks(d) == (long)t_size * (t_size - 1) / 2,
             "sum over the split without rank 0");
    T_OK(tcoll_comm_free(&d));
  }
  T_FAILS(tcoll_comm_split(NULL, 0, 0, NULL), TCOLL_ERR_INVALID_ARGUMENT, "out is NULL");
}
END_TEST

START_TEST(from_ranks) {
  /* Members: every rank but 0 (rank 0 alone at one rank), listed in decreasing order. Under
   * MPICH 4.0 this also guards MPI_Comm_create_group against a group taken from a communicator
   * other than the one it creates on (a segfault there, lib/comm_groups.c). */
  int n = t_size > 1 ? t_size - 1 : 1, list[4];
  for (int i = 0; i < n; i++) list[i] = t_size - 1 - i;
  bool member = t_size == 1 || t_rank != 0;
  if (member) {
    tcoll_comm_t *a = NULL, *b = NULL, *other = NULL;
    T_OK(tcoll_comm_from_ranks(NULL, list, n, "tp", &a));
    int want_rank = t_size - 1 - t_rank; /* position in the list */
    T_EXPECT(a && tcoll_comm_size(a) == n && tcoll_comm_rank(a) == want_rank,
             "from_ranks: rank %d of %d, expected %d of %d", tcoll_comm_rank(a), tcoll_comm_size(a),
             want_rank, n);
    int64_t ranks[4] = {-1, -1, -1, -1};
    member_world_ranks(a, ranks);
    for (int i = 0; i < n; i++)
      T_EXPECT(ranks[i] == list[i], "member %d is world rank %lld", i, (long long)ranks[i]);
    long want = 0;
    for (int i = 0; i < n; i++) want += list[i];
    T_EXPECT(sum_of_world_ranks(a) == want, "sum over from_ranks");
    /* Cached: the same ranks and tag give the same communicator (no communication). */
    T_OK(tcoll_comm_from_ranks(NULL, list, n, "tp", &b));
    T_EXPECT(a == b, "the same ranks and tag gave another communicator");
    /* Another tag: another communicator over the same ranks. */
    T_OK(tcoll_comm_from_ranks(NULL, list, n, "other", &other));
    T_EXPECT(other && other != a, "another tag gave the same communicator");
    T_EXPECT(other && tcoll_comm_rank(other) == want_rank, "rank in the other-tag communicator");
    T_EXPECT(sum_of_world_ranks(other) == want, "sum over the other-tag communicator");
    /* One free per call: after the first, the cached communicator still works. */
    T_OK(tcoll_comm_free(&b));
    T_EXPECT(b == NULL, "tcoll_comm_free did not set *comm to NULL");
    T_EXPECT(sum_of_world_ranks(a) == want, "sum after freeing one of two references");
    tcoll_comm_t *c = NULL;
    T_OK(tcoll_comm_from_ranks(NULL, list, n, "tp", &c)); /* still cached */
    T_EXPECT(c == a, "the cache forgot a live communicator");
    T_OK(tcoll_comm_free(&c));
    T_OK(tcoll_comm_free(&a));
    T_OK(tcoll_comm_free(&other));
    /* The order of the list matters: increasing order is another group numbering. */
    int inc[4];
    for (int i = 0; i < n; i++) inc[i] = list[n - 1 - i];
    T_OK(tcoll_comm_from_ranks(NULL, inc, n, "tp", &a));
    T_EXPECT(a && tcoll_comm_rank(a) == n - 1 - want_rank, "increasing list: rank %d",
             tcoll_comm_rank(a));
    T_OK(tcoll_comm_free(&a));
    /* NULL tag is the empty tag. */
    T_OK(tcoll_comm_from_ranks(NULL, list, n, NULL, &a));
    T_OK(tcoll_comm_from_ranks(NULL, list, n, "", &b));
    T_EXPECT(a == b, "tag NULL and tag \"\" differ");
    T_OK(tcoll_comm_free(&a));
    T_OK(tcoll_comm_free(&b));
  }
  /* Refusals are local: every rank checks them. */
  tcoll_comm_t *x = NULL;
  int dup[2] = {t_rank, t_rank};
  if (t_size >= 2)
    T_FAILS(tcoll_comm_from_ranks(NULL, dup, 2, "", &x), TCOLL_ERR_INVALID_ARGUMENT, "twice");
  else
    T_FAILS(tcoll_comm_from_ranks(NULL, dup, 2, "", &x), TCOLL_ERR_INVALID_ARGUMENT, "n is 2");
  int range[2] = {t_rank, t_size};
  if (t_size >= 2)
    T_FAILS(tcoll_comm_from_ranks(NULL, range, 2, "", &x), TCOLL_ERR_INVALID_ARGUMENT,
            "ranks[1] is");
  T_FAILS(tcoll_comm_from_ranks(NULL, range + 1, 1, "", &x), TCOLL_ERR_INVALID_ARGUMENT,
          "ranks[0] is");
  int neg[1] = {-1};
  T_FAILS(tcoll_comm_from_ranks(NULL, neg, 1, "", &x), TCOLL_ERR_INVALID_ARGUMENT,
          "ranks[0] is -1");
  if (t_size >= 2) {
    int others[1] = {(t_rank + 1) % t_size};
    T_FAILS(tcoll_comm_from_ranks(NULL, others, 1, "", &x), TCOLL_ERR_INVALID_ARGUMENT,
            "not in ranks");
  }
  T_FAILS(tcoll_comm_from_ranks(NULL, NULL, 1, "", &x), TCOLL_ERR_INVALID_ARGUMENT,
          "ranks is NULL");
  T_FAILS(tcoll_comm_from_ranks(NULL, dup, 0, "", &x), TCOLL_ERR_INVALID_ARGUMENT, "n is 0");
  T_FAILS(tcoll_comm_from_ranks(NULL, dup, 1, "", NULL), TCOLL_ERR_INVALID_ARGUMENT, "out is NULL");
  T_EXPECT(x == NULL, "a refused from_ranks set *out");
}
END_TEST

START_TEST(cache_per_parent) {
  /* The cache is per parent: the same rank list under another parent (numbered differently)
   * is another group, also when the new parent lives where a freed parent used to. Members:
   * world ranks 0 and size-1, listed as parent ranks {0, size-1}. */
  int n = t_size > 1 ? 2 : 1, list[2] = {0, t_size - 1};
  bool member = t_rank == 0 || t_rank == t_size - 1;
  for (int round = 0; round < 4; round++) {
    tcoll_comm_t *p1 = NULL, *p2 = NULL, *c1 = NULL, *c2 = NULL;
    T_OK(tcoll_comm_split(NULL, 0, t_rank, &p1)); /* parent rank = world rank */
    if (member) T_OK(tcoll_comm_from_ranks(p1, list, n, "t", &c1));
    void *old = p1;
    T_OK(tcoll_comm_free(&p1));                            /* c1 stays alive in the cache */
    T_OK(tcoll_comm_split(NULL, 0, t_size - t_rank, &p2)); /* parent rank = size-1 - world rank */
    if (member) {
      T_OK(tcoll_comm_from_ranks(p2, list, n, "t", &c2));
      T_EXPECT(c2 && c2 != c1,
               "round %d: another parent%s gave the cached communicator of a freed parent", round,
               (void *)p2 == old ? " (at the freed parent's address)" : "");
      int want = t_size > 1 && t_rank == 0 ? 1 : 0;
      T_EXPECT(tcoll_comm_rank(c2) == want, "round %d: rank %d in the new group, expected %d",
               round, tcoll_comm_rank(c2), want);
      T_EXPECT(
          c2 && c1 && sum_of_world_ranks(c2) == t_size - 1 && sum_of_world_ranks(c1) == t_size - 1,
          "round %d: collectives over the two groups", round);
    }
    T_OK(tcoll_comm_free(&c1));
    T_OK(tcoll_comm_free(&c2));
    T_OK(tcoll_comm_free(&p2));
  }
}
END_TEST

START_TEST(from_rank_groups) {
  /* MPMD: with an even size, rows {j, j + size/2} for j < size/2 (rank r in row r % (size/2));
   * with an odd size, one row per rank. */
  int gs = t_size % 2 == 0 ? 2 : 1, ng = t_size / gs, ranks[4];
  for (int j = 0; j < ng; j++)
    for (int k = 0; k < gs; k++) ranks[j * gs + k] = j + k * ng;
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_from_rank_groups(NULL, ranks, ng, gs, "mpmd", &c));
  int row = t_rank % ng, col = t_rank / ng;
  T_EXPECT(c && tcoll_comm_size(c) == gs && tcoll_comm_rank(c) == col,
           "rank groups: rank %d of %d, expected %d of %d", tcoll_comm_rank(c), tcoll_comm_size(c),
           col, gs);
  long want = 0;
  for (int k = 0; k < gs; k++) want += row + k * ng;
  T_EXPECT(sum_of_world_ranks(c) == want, "sum over my row");
  /* Cached like from_ranks. */
  tcoll_comm_t *again = NULL;
  T_OK(tcoll_comm_from_rank_groups(NULL, ranks, ng, gs, "mpmd", &again));
  T_EXPECT(again == c, "the same rank groups and tag gave another communicator");
  T_OK(tcoll_comm_free(&again));
  T_OK(tcoll_comm_free(&c));

  /* One row listing every rank in reverse. */
  int rev[4];
  for (int i = 0; i < t_size; i++) rev[i] = t_size - 1 - i;
  T_OK(tcoll_comm_from_rank_groups(NULL, rev, 1, t_size, "rev", &c));
  T_EXPECT(c && tcoll_comm_rank(c) == t_size - 1 - t_rank, "reversed row: rank %d",
           tcoll_comm_rank(c));
  T_OK(tcoll_comm_free(&c));

  /* Only the listed ranks call: with 3+ ranks, one row {2, 1} without rank 0. */
  if (t_size >= 3 && t_rank >= 1 && t_rank <= 2) {
    int part[2] = {2, 1};
    T_OK(tcoll_comm_from_rank_groups(NULL, part, 1, 2, "part", &c));
    T_EXPECT(c && tcoll_comm_rank(c) == 2 - t_rank, "partial row: rank %d", tcoll_comm_rank(c));
    T_EXPECT(sum_of_world_ranks(c) == 3, "sum over the partial row");
    T_OK(tcoll_comm_free(&c));
  }

  /* The ragged form: rows of different sizes are refused as in PyTorch. */
  int r0[2] = {0, 1}, r1[1] = {0};
  const int *rows[2] = {r0, r1};
  int sizes[2] = {2, 1};
  if (t_size >= 2) {
    T_FAILS(tcoll_comm_from_rank_lists(NULL, rows, sizes, 2, "", &c), TCOLL_ERR_INVALID_ARGUMENT,
            "group sizes must be identical found 2 and 1");
    sizes[0] = 1;
    sizes[1] = 2;
    rows[0] = r1;
    rows[1] = r0;
    T_FAILS(tcoll_comm_from_rank_lists(NULL, rows, sizes, 2, "", &c), TCOLL_ERR_INVALID_ARGUMENT,
            "group sizes must be identical found 1 and 2");
  } else {
    T_FAILS(tcoll_comm_from_rank_lists(NULL, rows, sizes, 2, "", &c), TCOLL_ERR_INVALID_ARGUMENT,
            "");
  }
  /* The ragged form with equal rows works like rank_groups. */
  int all[4];
  for (int i = 0; i < t_size; i++) all[i] = i;
  const int *one_row[1] = {all};
  int one_size[1] = {t_size};
  T_OK(tcoll_comm_from_rank_lists(NULL, one_row, one_size, 1, "lists", &c));
  T_EXPECT(c && tcoll_comm_rank(c) == t_rank && tcoll_comm_size(c) == t_size,
           "rank lists: rank %d of %d", tcoll_comm_rank(c), tcoll_comm_size(c));
  T_OK(tcoll_comm_free(&c));
  /* Duplicates across rows, ranks out of range, a caller in no row. */
  if (t_size >= 2) {
    int twice[2] = {0, 0};
    T_FAILS(tcoll_comm_from_rank_groups(NULL, twice, 2, 1, "", &c), TCOLL_ERR_INVALID_ARGUMENT,
            "twice");
    int notme[1] = {(t_rank + 1) % t_size};
    T_FAILS(tcoll_comm_from_rank_groups(NULL, notme, 1, 1, "", &c), TCOLL_ERR_INVALID_ARGUMENT,
            "in no row");
  }
  int bad[1] = {t_size};
  T_FAILS(tcoll_comm_from_rank_groups(NULL, bad, 1, 1, "", &c), TCOLL_ERR_INVALID_ARGUMENT,
          "rows[0][0] is");
  T_FAILS(tcoll_comm_from_rank_groups(NULL, all, 0, 1, "", &c), TCOLL_ERR_INVALID_ARGUMENT,
          "ngroups is 0");
  T_FAILS(tcoll_comm_from_rank_groups(NULL, all, 1, 0, "", &c), TCOLL_ERR_INVALID_ARGUMENT,
          "group_size is 0");
  T_FAILS(tcoll_comm_from_rank_groups(NULL, all, 1, t_size + 1, "", &c), TCOLL_ERR_INVALID_ARGUMENT,
          "");
  T_FAILS(tcoll_comm_from_rank_groups(NULL, NULL, 1, 1, "", &c), TCOLL_ERR_INVALID_ARGUMENT,
          "ranks is NULL");
  T_EXPECT(c == NULL, "a refused call set *out");
}
END_TEST

START_TEST(names) {
  tcoll_comm_t *a = NULL, *b = NULL;
  T_OK(tcoll_comm_split(NULL, 0, t_rank, &a));
  T_OK(tcoll_comm_split(NULL, 0, t_rank, &b));
  T_EXPECT(!strcmp(tcoll_comm_name(a), ""), "a new communicator is named \"%s\"",
           tcoll_comm_name(a));
  T_EXPECT(tcoll_comm_lookup("tp") == NULL, "lookup of an unused name");
  T_EXPECT(tcoll_comm_lookup("") == NULL && tcoll_comm_lookup(NULL) == NULL,
           "lookup of \"\" or NULL");
  T_OK(tcoll_comm_set_name(a, "tp"));
  T_EXPECT(!strcmp(tcoll_comm_name(a), "tp"), "name is \"%s\"", tcoll_comm_name(a));
  T_EXPECT(tcoll_comm_lookup("tp") == a, "lookup(\"tp\")");
  char mpiname[MPI_MAX_OBJECT_NAME];
  int len = 0;
  MPI_Comm_get_name(tcoll_comm_mpi(a), mpiname, &len);
  T_EXPECT(!strcmp(mpiname, "tp"), "the MPI communicator is named \"%s\"", mpiname);
  /* Unique among live communicators. */
  T_FAILS(tcoll_comm_set_name(b, "tp"), TCOLL_ERR_INVALID_ARGUMENT, "already used");
  T_FAILS(tcoll_comm_set_name(b, "world"), TCOLL_ERR_INVALID_ARGUMENT, "\"world\"");
  T_EXPECT(!strcmp(tcoll_comm_name(b), ""), "a refused name was set");
  T_OK(tcoll_comm_set_name(a, "tp")); /* its own name again */
  /* Renaming frees the old name. */
  T_OK(tcoll_comm_set_name(a, "tp2"));
  T_EXPECT(tcoll_comm_lookup("tp") == NULL && tcoll_comm_lookup("tp2") == a, "rename");
  T_OK(tcoll_comm_set_name(b, "tp"));
  T_EXPECT(tcoll_comm_lookup("tp") == b, "lookup after rename");
  /* The name appears in messages about work on the communicator. */
  int64_t shape[1] = {4};
  tcoll_tensor_t in = t_host(TCOLL_FLOAT32, 1, shape), out = t_empty();
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, b, &out));
  T_FAILS(tcoll_all_reduce(&in, TCOLL_SUM, b, &out), TCOLL_ERR_BUSY, "'tp'");
  T_OK(tcoll_wait(out.data));
  /* Length: 63 bytes fit, 64 do not. */
  char name[80];
  memset(name, 'x', sizeof name);
  name[63] = '\0';
  T_OK(tcoll_comm_set_name(a, name));
  T_EXPECT(tcoll_comm_lookup(name) == a, "lookup of a 63-byte name");
  name[63] = 'x';
  name[64] = '\0';
  T_FAILS(tcoll_comm_set_name(a, name), TCOLL_ERR_INVALID_ARGUMENT, "64 bytes");
  T_FAILS(tcoll_comm_set_name(a, NULL), TCOLL_ERR_INVALID_ARGUMENT, "name is NULL");
  /* A freed communicator's name is free again. */
  T_OK(tcoll_comm_free(&b));
  T_EXPECT(tcoll_comm_lookup("tp") == NULL, "lookup finds a freed communicator");
  T_OK(tcoll_comm_set_name(a, "tp"));
  T_EXPECT(tcoll_comm_lookup("tp") == a, "the name of a freed communicator cannot be reused");
  T_OK(tcoll_comm_free(&a));
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}
END_TEST

START_TEST(free_rules) {
  tcoll_comm_t *w = tcoll_comm_world();
  T_FAILS(tcoll_comm_free(&w), TCOLL_ERR_INVALID_ARGUMENT, "world");
  T_EXPECT(w == tcoll_comm_world(), "a refused free changed *comm");
  T_EXPECT(sum_of_world_ranks(w) == (long)t_size * (t_size - 1) / 2, "world after a refused free");
  T_FAILS(tcoll_comm_free(NULL), TCOLL_ERR_INVALID_ARGUMENT, "comm is NULL");
  tcoll_comm_t *none = NULL;
  T_OK(tcoll_comm_free(&none));
  int not_a_comm = 0;
  tcoll_comm_t *fake = (tcoll_comm_t *)&not_a_comm;
  T_FAILS(tcoll_comm_free(&fake), TCOLL_ERR_INVALID_ARGUMENT, "not a live tcoll communicator");
  /* Freeing completes the communicator's pending work first. */
  tcoll_comm_t *c = NULL;
  T_OK(tcoll_comm_split(NULL, 0, t_rank, &c));
  int64_t shape[1] = {8};
  tcoll_tensor_t in = t_host(TCOLL_INT32, 1, shape), out = t_empty();
  for (int i = 0; i < 8; i++) ((int32_t *)in.data)[i] = i * (t_rank + 1);
  T_OK(tcoll_all_reduce(&in, TCOLL_SUM, c, &out));
  T_EXPECT(tcoll_pending_count() == 1, "not pending");
  tcoll_comm_t *keep = c;
  T_OK(tcoll_comm_free(&c));
  T_EXPECT(c == NULL, "tcoll_comm_free did not set *comm to NULL");
  T_EXPECT(tcoll_pending_count() == 0, "freeing a communicator left its work pending");
  for (int i = 0; i < 8; i++)
    T_EXPECT(((int32_t *)out.data)[i] == i * t_size * (t_size + 1) / 2, "element %d is %d", i,
             ((int32_t *)out.data)[i]);
  /* A freed communicator is no longer accepted. */
  T_FAILS(tcoll_comm_free(&keep), TCOLL_ERR_INVALID_ARGUMENT, "not a live tcoll communicator");
  tcoll_tensor_t out2 = t_empty();
  T_FAILS(tcoll_all_reduce(&in, TCOLL_SUM, keep, &out2), TCOLL_ERR_INVALID_ARGUMENT, "comm");
  T_EXPECT(out2.data == NULL, "refused call allocated its output");
  /* Mesh slices belong to their mesh. */
  tcoll_mesh_t *m = NULL;
  int dims[1] = {t_size};
  T_OK(tcoll_mesh_create(NULL, 1, dims, &m));
  tcoll_comm_t *slice = tcoll_mesh_comm(m, 0);
  T_FAILS(tcoll_comm_free(&slice), TCOLL_ERR_INVALID_ARGUMENT, "mesh");
  T_EXPECT(slice == tcoll_mesh_comm(m, 0), "a refused free changed *comm");
  T_EXPECT(sum_of_world_ranks(slice) == (long)t_size * (t_size - 1) / 2,
           "slice after a refused free");
  T_OK(tcoll_mesh_free(&m));
  T_EXPECT(m == NULL, "tcoll_mesh_free did not set *mesh to NULL");
  T_FAILS(tcoll_comm_free(&slice), TCOLL_ERR_INVALID_ARGUMENT, "not a live tcoll communicator");
  T_OK(tcoll_mesh_free(&m)); /* NULL mesh: nothing to do */
  T_FAILS(tcoll_mesh_free(NULL), TCOLL_ERR_INVALID_ARGUMENT, "mesh is NULL");
  tcoll_tensor_free(&in);
  tcoll_tensor_free(&out);
}
END_TEST

/* Checks one mesh over parent, whose rank of this process is prank (parent rank p is world rank
 * to_world[p]). */
static void check_mesh(tcoll_comm_t *parent, int prank, const int *to_world, int ndim,
                       const int *dims) {
  tcoll_mesh_t *m = NULL;
  int rc = tcoll_mesh_create(parent, ndim, dims, &m);
  T_EXPECT(rc == TCOLL_SUCCESS, "mesh_create(ndim %d): %s", ndim, tcoll_last_error());
  if (rc) return;
  T_EXPECT(tcoll_mesh_ndim(m) == ndim, "mesh ndim %d", tcoll_mesh_ndim(m));
  int stride[TCOLL_MAX_DIMS], coord[TCOLL_MAX_DIMS];
  int s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    stride[d] = s;
    coord[d] = prank / s % dims[d];
    s *= dims[d];
  }
  for (int d = 0; d < ndim; d++) {
    T_EXPECT(tcoll_mesh_coord(m, d) == coord[d], "dims %d: coord[%d] is %d, expected %d", ndim, d,
             tcoll_mesh_coord(m, d), coord[d]);
    tcoll_comm_t *sl = tcoll_mesh_comm(m, d);
    T_EXPECT(sl && tcoll_comm_size(sl) == dims[d] && tcoll_comm_rank(sl) == coord[d],
             "slice %d: rank %d of %d, expected %d of %d", d, tcoll_comm_rank(sl),
             tcoll_comm_size(sl), coord[d], dims[d]);
    if (!sl) continue;
    /* Its members: the parent ranks that differ from mine only in coordinate d, in order. */
    int64_t members[4] = {-1, -1, -1, -1};
    member_world_ranks(sl, members);
    long want_sum = 0;
    for (int k = 0; k < dims[d]; k++) {
      int p = prank + (k - coord[d]) * stride[d];
      want_sum += to_world[p];
      T_EXPECT(members[k] == to_world[p], "slice %d member %d is world rank %lld, expected %d", d,
               k, (long long)members[k], to_world[p]);
    }
    T_EXPECT(sum_of_world_ranks(sl) == want_sum, "slice %d: sum of world ranks", d);
  }
  T_EXPECT(tcoll_mesh_comm(m, ndim) == NULL && t_contains(tcoll_last_error(), "dim is"),
           "mesh_comm with a bad dim");
  T_EXPECT(tcoll_mesh_comm(m, -1) == NULL, "mesh_comm(-1)");
  T_EXPECT(tcoll_mesh_coord(m, ndim) == -1 && tcoll_mesh_coord(m, -1) == -1,
           "mesh_coord with a bad dim");
  T_OK(tcoll_mesh_free(&m));
}

START_TEST(meshes) {
  int to_world[4] = {0}, rev[4] = {0};
  for (int r = 0; r < t_size; r++) {
    to_world[r] = r;
    rev[r] = t_size - 1 - r;
  }
  int n = t_size;
  int d1[1] = {n};
  check_mesh(NULL, t_rank, to_world, 1, d1);
  for (int a = 1; a <= n; a++) {
    if (n % a) continue;
    int d2[2] = {a, n / a};
    check_mesh(NULL, t_rank, to_world, 2, d2);
    int d3[3] = {1, a, n / a};
    check_mesh(NULL, t_rank, to_world, 3, d3);
  }
  /* Over a parent whose numbering is the world's reversed: parent rank p is world rank n-1-p. */
  tcoll_comm_t *parent = NULL;
  T_OK(tcoll_comm_split(NULL, 0, n - t_rank, &parent));
  if (n % 2 == 0) {
    int d2[2] = {2, n / 2};
    check_mesh(parent, n - 1 - t_rank, rev, 2, d2);
  } else {
    int d2[2] = {n, 1};
    check_mesh(parent, n - 1 - t_rank, rev, 2, d2);
  }
  /* Refusals. */
  tcoll_mesh_t *m = NULL;
  int bad[2] = {2, n};
  T_FAILS(tcoll_mesh_create(NULL, 2, bad, &m), TCOLL_ERR_INVALID_ARGUMENT, "multiply to");
  int more[1] = {n + 1};
  T_FAILS(tcoll_mesh_create(NULL, 1, more, &m), TCOLL_ERR_INVALID_ARGUMENT, "multiply to");
  if (n >= 2) {
    int fewer[2] = {1, n - 1};
    T_FAILS(tcoll_mesh_create(NULL, 2, fewer, &m), TCOLL_ERR_INVALID_ARGUMENT, "multiply to");
  }
  int zero[2] = {0, n};
  T_FAILS(tcoll_mesh_create(NULL, 2, zero, &m), TCOLL_ERR_INVALID_ARGUMENT, "dims[0] is 0");
  int neg[2] = {n, -1};
  T_FAILS(tcoll_mesh_create(NULL, 2, neg, &m), TCOLL_ERR_INVALID_ARGUMENT, "dims[1] is -1");
  T_FAILS(tcoll_mesh_create(NULL, 0, d1, &m), TCOLL_ERR_INVALID_ARGUMENT, "ndim is 0");
  T_FAILS(tcoll_mesh_create(NULL, TCOLL_MAX_DIMS + 1, d1, &m), TCOLL_ERR_INVALID_ARGUMENT,
          "ndim is 9");
  T_FAILS(tcoll_mesh_create(NULL, 1, NULL, &m), TCOLL_ERR_INVALID_ARGUMENT, "dims is NULL");
  T_FAILS(tcoll_mesh_create(NULL, 1, d1, NULL), TCOLL_ERR_INVALID_ARGUMENT, "out is NULL");
  T_EXPECT(m == NULL, "a refused mesh_create set *out");
  T_EXPECT(tcoll_mesh_comm(NULL, 0) == NULL && t_contains(tcoll_last_error(), "mesh is NULL"),
           "mesh_comm(NULL)");
  T_EXPECT(tcoll_mesh_ndim(NULL) == 0 && tcoll_mesh_coord(NULL, 0) == -1, "NULL mesh accessors");
  T_OK(tcoll_comm_free(&parent));
}
END_TEST

Suite *t_suite(void) {
  Suite *s = suite_create("comm");
  TCase *tc = t_tcase("comm");
  tcase_add_test(tc, world);
  tcase_add_test(tc, from_mpi);
  tcase_add_test(tc, split);
  tcase_add_test(tc, from_ranks);
  tcase_add_test(tc, cache_per_parent);
  tcase_add_test(tc, from_rank_groups);
  tcase_add_test(tc, names);
  tcase_add_test(tc, free_rules);
  tcase_add_test(tc, meshes);
  tcase_add_test(tc, create_after_pending);
  suite_add_tcase(s, tc);
  return s;
}
