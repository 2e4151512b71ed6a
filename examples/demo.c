/* A first tour of tcoll: asynchronous collectives, the work registry and groups.
 * Run with: scripts/run demo   (mpiexec -n 4) */
#include <tcoll.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    int rc_ = (call);                                                                            \
    if (rc_ != TCOLL_SUCCESS) {                                                                  \
      fprintf(stderr, "%s failed: %s\n", #call, tcoll_last_error());                             \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                              \
    }                                                                                            \
  } while (0)

int main(int argc, char **argv) {
  CHECK(tcoll_init(&argc, &argv));
  tcoll_comm_t *world = tcoll_comm_world();
  int rank = tcoll_comm_rank(world), size = tcoll_comm_size(world);

  /* Each rank holds a 2 x 3 block filled with its rank. */
  int64_t shape[2] = {2, 3};
  tcoll_tensor_t x;
  CHECK(tcoll_tensor_alloc(&x, TCOLL_FLOAT32, 2, shape, TCOLL_HOST));
  for (int i = 0; i < 6; i++) ((float *)x.data)[i] = (float)rank;

  /* Post two collectives; both run while the program goes on. */
  tcoll_tensor_t sum = {0}, gathered = {0};
  CHECK(tcoll_all_reduce(&x, TCOLL_SUM, world, &sum));            /* allocates sum */
  CHECK(tcoll_all_gather(&x, 1, world, &gathered));               /* 2 x (3 * size) */
  size_t pending = tcoll_pending_count();
  CHECK(tcoll_wait(sum.data));
  CHECK(tcoll_wait(gathered.data));

  if (rank == 0) {
    printf("tcoll %d on %d ranks: %zu collectives were in flight at once\n", tcoll_version(), size, pending);
    printf("all_reduce sum of ranks: %g (expected %d)\n", ((float *)sum.data)[0], size * (size - 1) / 2);
    printf("all_gather along dim 1, first row:");
    for (int j = 0; j < 3 * size; j++) printf(" %g", ((float *)gathered.data)[j]);
    printf("\n");
  }

  /* A 2 x (size/2) mesh when the size allows it: reduce along each dimension. */
  if (size % 2 == 0) {
    int dims[2] = {2, size / 2};
    tcoll_mesh_t *mesh;
    CHECK(tcoll_mesh_create(world, 2, dims, &mesh));
    tcoll_tensor_t row = {0};
    CHECK(tcoll_all_reduce(&x, TCOLL_MAX, tcoll_mesh_comm(mesh, 1), &row));
    CHECK(tcoll_wait(row.data));
    printf("rank %d at mesh (%d, %d): max over my mesh row = %g\n", rank, tcoll_mesh_coord(mesh, 0),
           tcoll_mesh_coord(mesh, 1), ((float *)row.data)[0]);
    tcoll_tensor_free(&row);
    CHECK(tcoll_mesh_free(&mesh));
  }

  tcoll_tensor_free(&x);
  tcoll_tensor_free(&sum);
  tcoll_tensor_free(&gathered);
  return tcoll_finalize() == TCOLL_SUCCESS ? EXIT_SUCCESS : EXIT_FAILURE;
}
