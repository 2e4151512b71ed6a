"""An mpi4py program (no tcoll in it) through the drop-in layer: Allreduce, Iallreduce + Wait,
Bcast and Reduce_scatter_block on numpy buffers, checked against closed forms. mpi4py calls MPI's
C functions (MPI_Init_thread included), so the layer starts and routes what its table picks;
pmpi-bindings.sh checks the results and the layer's counts."""
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
for k in range(20):
    x = np.arange(8, dtype=np.float64) + rank + k
    y = np.empty_like(x)
    want = size * (size - 1) / 2 + size * (np.arange(8) + k)
    comm.Allreduce(x, y, op=MPI.SUM)
    assert np.array_equal(y, want), (rank, k, y)
    y[:] = -1
    comm.Iallreduce(x, y, op=MPI.SUM).Wait()
    assert np.array_equal(y, want), (rank, k, y)
    b = np.full(5, rank * 10 + k, dtype=np.int32)
    comm.Bcast(b, root=size - 1)
    assert np.all(b == (size - 1) * 10 + k), (rank, k, b)
    s = np.arange(3 * size, dtype=np.float32) + rank
    r = np.empty(3, dtype=np.float32)
    comm.Reduce_scatter_block(s, r, op=MPI.SUM)
    assert np.array_equal(r, size * (np.arange(3) + 3 * rank) + size * (size - 1) / 2), (rank, r)
if rank == 0:
    print("pmpi_mpi4py: ok")
