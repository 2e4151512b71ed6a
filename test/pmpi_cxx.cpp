// A C++ program with no tcoll in it (C++ calls MPI's C entry points): a blocking and a
// nonblocking sum checked against the closed form; pmpi-bindings.sh runs it with the drop-in
// layer, which must route both.
#include <mpi.h>

#include <cstdio>
#include <vector>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<float> x(16), y(16);
  for (int k = 0; k < 20; k++) {
    for (int i = 0; i < 16; i++) x[i] = float(rank + i + k);
    MPI_Request req;
    for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
      if (nonblocking) {
        MPI_Iallreduce(x.data(), y.data(), 16, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
      } else {
        MPI_Allreduce(x.data(), y.data(), 16, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
      for (int i = 0; i < 16; i++)
        if (y[i] != float(size * (size - 1) / 2 + size * (i + k))) {
          std::printf("pmpi_cxx: rank %d element %d got %g\n", rank, i, double(y[i]));
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
  }
  if (rank == 0) std::printf("pmpi_cxx: ok\n");
  MPI_Finalize();
  return 0;
}
