! The Fortran module at N ranks: every collective on real(4|8) and integer(4|8) arrays of ranks
! 0 to 3, expected values from closed forms; communicators from mpi_f08 and from integer
! handles; asynchrony (post, compute, test, wait); errors returned in ierr with their messages.
!
!   tcoll-mpiexec -n N test_fortran           the suite; exit 1 if any check fails on any rank
!   tcoll-mpiexec -n N test_fortran stop      a bad call without ierr: must stop the program
program test_fortran
  use tcoll
  use mpi_f08
  implicit none
  integer :: rank, nranks, failures = 0, total, checks = 0
  type(tcoll_comm) :: world
  character(len=16) :: mode

  mode = ''
  if (command_argument_count() > 0) call get_command_argument(1, mode)
  call tcoll_init()
  world = tcoll_comm_world()
  rank = tcoll_comm_rank(world)
  nranks = tcoll_comm_size(world)
  if (mode == 'stop') call stop_without_ierr()

  call all_reduce_kinds_and_ranks()
  call all_reduce_ops()
  call in_place_and_overlap()
  call broadcast_from_each_root()
  call all_gather_blocks()
  call reduce_scatter_blocks()
  call all_to_all_blocks()
  call communicators_from_mpi()
  call errors_in_ierr()

  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) print '(a, i0, a, i0, a, i0, a)', 'test_fortran at ', nranks, ' rank(s): ', checks, &
                                                  ' checks per rank, ', total, ' failed'
  call tcoll_finalize()
  if (total /= 0) error stop 1

contains

  subroutine expect(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    checks = checks + 1
    if (.not. ok) then
      failures = failures + 1
      print '(a, i0, a, i0, a, a)', '[rank ', rank, '/', nranks, '] FAILED: ', what
    end if
  end subroutine expect

  subroutine expect_ok(ierr, what)
    integer, intent(in) :: ierr
    character(len=*), intent(in) :: what
    call expect(ierr == TCOLL_SUCCESS, what // ' returned ' // tcoll_status_string(ierr) // ': ' // tcoll_last_error())
  end subroutine expect_ok

  ! ---------------------------------------------------------------- all_reduce

  ! x(i,...) = (rank + 1) * v(i): the sum over the ranks is n(n+1)/2 * v(i).
  subroutine all_reduce_kinds_and_ranks()
    real(8), asynchronous :: a8(5, 3), s8(5, 3)
    real(4), asynchronous :: a4(7), s4(7)
    integer(4), asynchronous :: i4(2, 3, 4), t4(2, 3, 4)
    integer(8), asynchronous :: i8, t8
    integer :: i, j, k, ierr, tri
    tri = nranks * (nranks + 1) / 2
    do j = 1, 3
      do i = 1, 5
        a8(i, j) = (rank + 1) * (i + 10.0d0 * j)
      end do
    end do
    a4 = [((rank + 1) * real(i, 4), i = 1, 7)]
    do k = 1, 4
      do j = 1, 3
        do i = 1, 2
          i4(i, j, k) = (rank + 1) * (i + 10 * j + 100 * k)
        end do
      end do
    end do
    i8 = (rank + 1) * 3000000000_8  ! above 2^31: the 8-byte kind must survive
    call tcoll_all_reduce(a8, s8, TCOLL_SUM, world, ierr); call expect_ok(ierr, 'all_reduce real(8) rank 2')
    call tcoll_all_reduce(a4, s4, TCOLL_SUM, world, ierr); call expect_ok(ierr, 'all_reduce real(4) rank 1')
    call tcoll_all_reduce(i4, t4, TCOLL_SUM, world, ierr); call expect_ok(ierr, 'all_reduce integer(4) rank 3')
    call tcoll_all_reduce(i8, t8, TCOLL_SUM, world, ierr); call expect_ok(ierr, 'all_reduce integer(8) rank 0')
    call tcoll_wait(s8); call tcoll_wait(s4); call tcoll_wait(t4); call tcoll_wait(t8)
    do j = 1, 3
      do i = 1, 5
        call expect(s8(i, j) == tri * (i + 10.0d0 * j), 'real(8) sum')
      end do
    end do
    do i = 1, 7
      call expect(s4(i) == tri * real(i, 4), 'real(4) sum')
    end do
    do k = 1, 4
      do j = 1, 3
        do i = 1, 2
          call expect(t4(i, j, k) == tri * (i + 10 * j + 100 * k), 'integer(4) sum')
        end do
      end do
    end do
    call expect(t8 == tri * 3000000000_8, 'integer(8) sum')
  end subroutine all_reduce_kinds_and_ranks

  subroutine all_reduce_ops()
    integer(8), asynchronous :: x(4), mx(4), mn(4), pr(4), bo(4)
    real(8), asynchronous :: r(3), avg(3)
    integer :: i
    integer(8) :: fact
    x = [(int(rank, 8) * 1000 + i, i = 1, 4)]
    call tcoll_all_reduce(x, mx, TCOLL_MAX, world)
    call tcoll_all_reduce(x, mn, TCOLL_MIN, world)
    call tcoll_wait(mx)
    call tcoll_wait(mn)
    do i = 1, 4
      call expect(mx(i) == int(nranks - 1, 8) * 1000 + i, 'max')
      call expect(mn(i) == i, 'min')
    end do
    x = rank + 1
    call tcoll_all_reduce(x, pr, TCOLL_PRODUCT, world)
    call tcoll_wait(pr)  ! x may change only after the wait: it is read until then
    x = ishft(1_8, rank)
    fact = product([(int(i, 8), i = 1, nranks)])
    call expect(all(pr == fact), 'product = n!')
    call tcoll_all_reduce(x, bo, TCOLL_BOR, world)
    call tcoll_wait(bo)
    call expect(all(bo == 2_8**nranks - 1), 'bor of one bit per rank')
    r = [(real((rank + 1) * i, 8), i = 1, 3)]
    call tcoll_all_reduce(r, avg, TCOLL_AVG, world)
    call tcoll_wait(avg)
    do i = 1, 3
      call expect(abs(avg(i) - (nranks + 1) / 2.0d0 * i) <= 1d-12 * i, 'avg')
    end do
  end subroutine all_reduce_ops

  ! In place (x and y the same array), posted while this rank computes, tested until done.
  subroutine in_place_and_overlap()
    real(8), asynchronous :: a(1000)
    real(8) :: busy
    integer :: i, polls
    logical :: done
    a = [(rank + real(i, 8), i = 1, 1000)]
    call tcoll_all_reduce(a, a, TCOLL_SUM, world)
    busy = 0
    do i = 1, 100000  ! local work while the reduction travels
      busy = busy + sqrt(real(i, 8))
    end do
    polls = 0
    done = .false.
    do while (.not. done)
      call tcoll_test(a, done)
      polls = polls + 1
    end do
    call expect(busy > 0 .and. polls >= 1, 'computed and polled')
    do i = 1, 1000
      call expect(a(i) == nranks * (nranks - 1) / 2.0d0 + nranks * real(i, 8), 'in-place sum')
    end do
    call tcoll_wait(a)  ! nothing pending any more: returns at once
    call tcoll_wait_all()
  end subroutine in_place_and_overlap

  ! ---------------------------------------------------------------- the others

  subroutine broadcast_from_each_root()
    integer(4), asynchronous :: x(3, 2), y(3, 2)
    integer :: root, i, j
    do root = 0, nranks - 1
      x = reshape([(rank * 100 + i, i = 1, 6)], [3, 2])
      y = -1
      call tcoll_broadcast(x, y, root, world)
      call tcoll_wait(y)
      do j = 1, 2
        do i = 1, 3
          call expect(y(i, j) == root * 100 + i + 3 * (j - 1), 'broadcast value')
        end do
      end do
    end do
  end subroutine broadcast_from_each_root

  ! Rank r contributes x(k) = 100 r + k; y holds the ranks' blocks in rank order.
  subroutine all_gather_blocks()
    real(4), asynchronous :: x(2, 2)
    real(4), asynchronous, allocatable :: y(:, :)
    integer :: k, r
    x = reshape([(100.0 * rank + k, k = 1, 4)], [2, 2])
    allocate(y(4, nranks))  ! rank 2 in, rank 2 out: only the total size matters
    call tcoll_all_gather(x, y, world)
    call tcoll_wait(y)
    do r = 0, nranks - 1
      do k = 1, 4
        call expect(y(k, r + 1) == 100.0 * r + k, 'all_gather block')
      end do
    end do
  end subroutine all_gather_blocks

  ! x(k) = rank + k over m * n elements; rank r keeps block r of the sum:
  ! y(k) = sum over s of (s + r m + k) = n(n-1)/2 + n (r m + k).
  subroutine reduce_scatter_blocks()
    integer, parameter :: m = 3
    integer(8), asynchronous, allocatable :: x(:)
    integer(8), asynchronous :: y(m)
    integer :: k
    allocate(x(m * nranks))
    x = [(int(rank + k, 8), k = 1, m * nranks)]
    call tcoll_reduce_scatter(x, y, TCOLL_SUM, world)
    call tcoll_wait(y)
    do k = 1, m
      call expect(y(k) == nranks * (nranks - 1) / 2 + nranks * (rank * m + k), 'reduce_scatter block')
    end do
  end subroutine reduce_scatter_blocks

  ! Block j of rank i holds 1000 i + 10 j + k: y's block i then holds 1000 i + 10 rank + k.
  subroutine all_to_all_blocks()
    integer, parameter :: m = 2
    real(8), asynchronous, allocatable :: x(:), y(:)
    integer :: i, j, k
    allocate(x(m * nranks), y(m * nranks))
    do j = 0, nranks - 1
      do k = 1, m
        x(j * m + k) = 1000 * rank + 10 * j + k
      end do
    end do
    call tcoll_all_to_all_single(x, y, world)
    call tcoll_wait(y)
    do i = 0, nranks - 1
      do k = 1, m
        call expect(y(i * m + k) == 1000 * i + 10 * rank + k, 'all_to_all block')
      end do
    end do
  end subroutine all_to_all_blocks

  ! The program's own communicators: even and odd world ranks (mpi_f08), and MPI_COMM_WORLD
  ! given as the integer handle of `use mpi`.
  subroutine communicators_from_mpi()
    type(MPI_Comm) :: half
    type(tcoll_comm) :: c, w
    integer(4), asynchronous :: x, s
    integer :: ierr, members, want
    call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), rank, half)
    call tcoll_comm_from_mpi(half, c, ierr)
    call expect_ok(ierr, 'tcoll_comm_from_mpi(type(MPI_Comm))')
    members = (nranks - mod(rank, 2) + 1) / 2  ! ranks of my parity
    call expect(tcoll_comm_size(c) == members .and. tcoll_comm_rank(c) == rank / 2, 'split ranks')
    x = rank
    call tcoll_all_reduce(x, s, TCOLL_SUM, c)
    call tcoll_wait(s)
    want = merge(members * (members - 1), members * members, mod(rank, 2) == 0)  ! 0+2+.. or 1+3+..
    call expect(s == want, 'sum over my parity')
    call tcoll_comm_free(c)
    call expect(tcoll_comm_size(c) == nranks, 'a freed handle is the null handle (the world)')
    call MPI_Comm_free(half)

    call tcoll_comm_from_mpi(MPI_COMM_WORLD%MPI_VAL, w, ierr)
    call expect_ok(ierr, 'tcoll_comm_from_mpi(integer)')
    x = 1
    call tcoll_all_reduce(x, s, TCOLL_SUM, w)
    call tcoll_wait(s)
    call expect(s == nranks .and. tcoll_comm_size(w) == nranks, 'sum over the integer handle''s world')
    call tcoll_comm_free(w)
  end subroutine communicators_from_mpi

  ! ---------------------------------------------------------------- errors

  subroutine expect_invalid(ierr, needle, what)
    integer, intent(in) :: ierr
    character(len=*), intent(in) :: needle, what
    character(len=:), allocatable :: msg
    msg = tcoll_last_error()
    call expect(ierr == TCOLL_ERR_INVALID_ARGUMENT, what // ': got ' // tcoll_status_string(ierr))
    call expect(index(msg, needle) > 0, what // ': message "' // msg // '" lacks "' // needle // '"')
  end subroutine expect_invalid

  subroutine errors_in_ierr()
    real(8), asynchronous :: a(10), b(10), c(11), strided(20)
    real(4), asynchronous :: f(10)
    integer(4), asynchronous :: i(10), j(10)
    complex(4), asynchronous :: z(10)
    integer :: ierr
    a = 1
    call tcoll_all_reduce(a, c, TCOLL_SUM, world, ierr)
    call expect_invalid(ierr, 'size(y) is 11 (expected size(x) = 10)', 'sizes')
    call tcoll_all_reduce(a, strided(1:20:2), TCOLL_SUM, world, ierr)
    call expect_invalid(ierr, 'y is not contiguous', 'strided section')
    call tcoll_all_reduce(a, f, TCOLL_SUM, world, ierr)
    call expect_invalid(ierr, 'x is real(8) but y is real(4)', 'kinds')
    call tcoll_all_reduce(z, z, TCOLL_SUM, world, ierr)
    call expect_invalid(ierr, 'x is a complex(4) array', 'complex')
    call tcoll_all_reduce(a, b, 99, world, ierr)
    call expect_invalid(ierr, 'is 99', 'reduce op 99')
    i = 1
    call tcoll_all_reduce(i, j, TCOLL_AVG, world, ierr)
    call expect_invalid(ierr, 'needs a floating dtype', 'AVG of integers')
    call tcoll_broadcast(a, b, nranks, world, ierr)
    call expect_invalid(ierr, 'root is ', 'root out of range')
    call tcoll_all_gather(a, b, world, ierr)
    if (nranks > 1) call expect_invalid(ierr, 'size(y) is 10 (expected size(x) * ranks', 'all_gather sizes')
    call tcoll_reduce_scatter(a, c, TCOLL_SUM, world, ierr)
    call expect_invalid(ierr, 'size(x) is 10 (expected size(y) * ranks', 'reduce_scatter sizes')
    call tcoll_wait(strided(1:20:2), ierr)
    call expect_invalid(ierr, 'y is not contiguous', 'waiting on a strided section')
    ! Refused calls leave nothing pending, and the library works on.
    call tcoll_wait_all(ierr)
    call expect_ok(ierr, 'wait_all after the refusals')
    call tcoll_all_reduce(a, b, TCOLL_SUM, world, ierr)
    call tcoll_wait(b, ierr)
    call expect(ierr == TCOLL_SUCCESS .and. all(b == nranks), 'all_reduce after the refusals')
    ! A pending output cannot take a second collective.
    call tcoll_all_reduce(a, b, TCOLL_SUM, world)
    call tcoll_all_reduce(a, b, TCOLL_SUM, world, ierr)
    call expect(ierr == TCOLL_ERR_BUSY, 'a second collective into a pending y: ' // tcoll_status_string(ierr))
    call tcoll_wait(b)
    call expect(tcoll_status_string(TCOLL_ERR_INVALID_ARGUMENT) == 'TCOLL_ERR_INVALID_ARGUMENT', 'status string')
  end subroutine errors_in_ierr

  ! Without ierr, a failure stops the program with tcoll's message.
  subroutine stop_without_ierr()
    real(8), asynchronous :: a(4), c(5)
    a = 1
    call tcoll_all_reduce(a, c, TCOLL_SUM, world)
    print '(a)', 'NOT STOPPED: tcoll_all_reduce returned after an error without ierr'
    call tcoll_finalize()
    stop 0
  end subroutine stop_without_ierr

end program test_fortran
