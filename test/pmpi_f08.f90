! The same as pmpi_use_mpi.f90 through the mpi_f08 binding. MPICH 4.0's mpi_f08 initializes and
! finalizes MPI through PMPI_Init / PMPI_Finalize: the layer starts at the first MPI_Allreduce on
! MPI_COMM_WORLD and routes the blocking calls. Open MPI's calls PMPI_*: never routed.
program f08_through_layer
  use mpi_f08
  implicit none
  integer :: rank, nranks, i, k, j
  type(MPI_Request) :: req
  double precision :: x(8), y(8), want
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  do k = 1, 20
    do i = 1, 8
      x(i) = rank + i + k
    end do
    call MPI_Allreduce(x, y, 8, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
    call MPI_Iallreduce(x, y, 8, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, req)
    call MPI_Wait(req, MPI_STATUS_IGNORE)
    do j = 1, 8
      want = nranks * (nranks - 1) / 2 + nranks * (j + k)
      if (y(j) /= want) then
        print '(a,i0,a,i0,a,f12.1)', 'pmpi_f08: rank ', rank, ' element ', j, ' got ', y(j)
        call MPI_Abort(MPI_COMM_WORLD, 1)
      end if
    end do
  end do
  if (rank == 0) print '(a)', 'pmpi_f08: ok'
  call MPI_Finalize()
end program
