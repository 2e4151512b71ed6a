! relax: a Fortran simulation that reduces its residual every step, overlapped with the step.
!
! Each rank relaxes its own problem (no halo: the ranks share nothing but the convergence test):
! Jacobi sweeps u(i) <- (u(i-1) + u(i+1)) / 2 for -u'' = 0 on m interior points with zero
! boundaries, starting from the smoothest mode u(i) = a_r sin(pi i h), h = 1 / (m + 1), with a
! different amplitude a_r on each rank. The global residual is the sum over the ranks of
! |A u|^2, A u = (2 u(i) - u(i-1) - u(i+1)) / h^2. Every step posts its all_reduce, computes
! the next sweep while the sum travels, then waits: the convergence test runs one sweep behind,
! as in codes that hide the latency of their global reductions.
!
! It checks itself against closed forms and exits nonzero on disagreement: on that mode Jacobi
! multiplies u by c = cos(pi h) each sweep, and A u = lambda u with lambda = 4 sin^2(pi h / 2) / h^2,
! so after k sweeps the global residual is lambda^2 c^(2k) (m + 1) / 2 * sum_r a_r^2.
!
!   tcoll-mpiexec -n 4 tcoll-relax [M]      (default M = 50 points per rank)
program relax
  use tcoll
  implicit none
  integer, parameter :: dp = kind(1.0d0)
  real(dp), parameter :: pi = acos(-1.0_dp), tolerance = 1e-6_dp
  real(dp), allocatable :: u(:), unew(:)
  real(dp), asynchronous :: local_res, global_res  ! global_res is pending between post and wait
  real(dp) :: h, c, lambda, amplitudes, expected, first_res, worst = 0
  integer :: m = 50, rank, nranks, step, i, r, max_steps = 100000
  character(len=32) :: arg
  type(tcoll_comm) :: world

  if (command_argument_count() > 0) then
    call get_command_argument(1, arg)
    read(arg, *) m
  end if
  call tcoll_init()
  world = tcoll_comm_world()
  rank = tcoll_comm_rank(world)
  nranks = tcoll_comm_size(world)

  h = 1.0_dp / (m + 1)
  c = cos(pi * h)
  lambda = 4 * sin(pi * h / 2)**2 / h**2
  amplitudes = sum([(real(r + 1, dp)**2, r = 0, nranks - 1)])  ! a_r = r + 1
  allocate(u(0:m + 1), unew(0:m + 1))
  u = [(real(rank + 1, dp) * sin(pi * i * h), i = 0, m + 1)]
  u(0) = 0
  u(m + 1) = 0
  unew = u

  do step = 0, max_steps
    local_res = residual(u)
    call tcoll_all_reduce(local_res, global_res, TCOLL_SUM, world)  ! posted
    unew(1:m) = (u(0:m - 1) + u(2:m + 1)) / 2                        ! the next sweep, meanwhile
    call tcoll_wait(global_res)                                       ! the sum of step `step`
    expected = lambda**2 * c**(2 * step) * (m + 1) / 2 * amplitudes
    worst = max(worst, abs(global_res - expected) / expected)
    if (step == 0) first_res = global_res
    if (global_res <= tolerance**2 * first_res) exit
    u = unew
  end do

  if (rank == 0) then
    print '(a, i0, a, i0, a)', 'relax: ', nranks, ' rank(s), ', m, ' points each'
    print '(a, i0, a, es10.3, a, es10.3)', '  converged after ', step, ' sweeps: residual ', &
      sqrt(global_res), ', from ', sqrt(first_res)
    print '(a, es9.2, a)', '  largest relative error against the closed form: ', worst, ' (allowed 1e-9)'
  end if
  call tcoll_finalize()
  if (worst > 1e-9_dp .or. step > max_steps) error stop 'relax: the residuals disagree with the closed form'

contains

  real(dp) function residual(v)
    real(dp), intent(in) :: v(0:)
    residual = sum(((2 * v(1:m) - v(0:m - 1) - v(2:m + 1)) / h**2)**2)
  end function residual

end program relax
