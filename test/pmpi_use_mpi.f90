! A Fortran program of the `use mpi` binding, with no tcoll in it: a blocking and a nonblocking
! sum of 8 doubles, checked against the closed form. pmpi-bindings.sh runs it with the drop-in
! layer preloaded: MPICH's `use mpi` calls the C MPI_Allreduce (routed), Open MPI's calls PMPI_*
! (never seen by the layer); either way the results must be right.
program use_mpi_through_layer
  use mpi
  implicit none
  integer :: ierr, rank, nranks, i, req, k
  double precision :: x(8), y(8), want
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  do k = 1, 20
    do i = 1, 8
      x(i) = rank + i + k
    end do
    call MPI_Allreduce(x, y, 8, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call check(y, k)
    call MPI_Iallreduce(x, y, 8, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, req, ierr)
    call MPI_Wait(req, MPI_STATUS_IGNORE, ierr)
    call check(y, k)
  end do
  if (rank == 0) print '(a)', 'pmpi_use_mpi: ok'
  call MPI_Finalize(ierr)
contains
  subroutine check(y, k)
    double precision, intent(in) :: y(8)
    integer, intent(in) :: k
    integer :: j
    do j = 1, 8
      want = nranks * (nranks - 1) / 2 + nranks * (j + k)
      if (y(j) /= want) then
        print '(a,i0,a,i0,a,f12.1)', 'pmpi_use_mpi: rank ', rank, ' element ', j, ' got ', y(j)
        call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
      end if
    end do
  end subroutine
end program
