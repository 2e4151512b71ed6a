!> tcoll for Fortran: the asynchronous collectives of tcoll.h on Fortran arrays.
!>
!>   use tcoll
!>   real(8), asynchronous :: x(100, 3), y(100, 3)
!>   call tcoll_init()                                   ! initializes MPI unless the program did
!>   call tcoll_all_reduce(x, y, TCOLL_SUM, tcoll_comm_world())   ! posted: returns at once
!>   ! ... compute, without touching y ...
!>   call tcoll_wait(y)                                  ! y holds the sum over the ranks
!>   call tcoll_finalize()
!>
!> Arrays: real(4), real(8), integer(4) or integer(8), of any rank (a scalar is a rank-0 array),
!> x and y of the same type and kind. They are passed by their descriptors (assumed-type,
!> assumed-rank dummies), never copied: an array that is not contiguous (a strided section such
!> as a(1:n:2) or b(i, :)) is refused with TCOLL_ERR_INVALID_ARGUMENT rather than copied, since
!> a copy could not stay pending. Every array is treated as its elements in array element
!> order; all_gather places the ranks' blocks one after the other, reduce_scatter gives rank r
!> the r-th block of size(y) elements (ranks counted from 0, as in MPI).
!>
!> Asynchrony: a collective only posts its work; y is pending until tcoll_wait(y) (or
!> tcoll_test(y, done) returning done, or tcoll_wait_all) and x must not change until then
!> either. Declare both `asynchronous` (or `target`) in the caller, as for MPI's nonblocking
!> calls: without it the compiler may keep y in registers or move reads of y across the wait.
!> Passing y to tcoll_wait is what tells the compiler that y changes there. In place: pass the
!> same array as x and y (all_reduce, broadcast).
!>
!> Errors: every routine takes an optional last argument ierr. Present, it receives the status
!> (TCOLL_SUCCESS = 0, or a negative TCOLL_ERR_* code; tcoll_last_error() says why). Absent, an
!> error stops the program with tcoll's message (error stop), as MPI's Fortran bindings do under
!> MPI_ERRORS_ARE_FATAL.
!>
!> Communicators: type(tcoll_comm) holds a tcoll_comm_t*. tcoll_comm_world() is the world (its
!> default value, a null handle, means the world too); tcoll_comm_from_mpi wraps (duplicates) an
!> MPI communicator given as mpi_f08's type(MPI_Comm) or as an integer handle of `use mpi`;
!> free those with tcoll_comm_free.
!>
!> The module is compiled code (libtcoll_f) plus tcoll.mod, which only the same Fortran compiler
!> (gfortran, same major version) can read.
module tcoll
  use, intrinsic :: iso_c_binding, only: c_int, c_ptr, c_null_ptr, c_char, c_associated, c_f_pointer, c_size_t
  use, intrinsic :: iso_fortran_env, only: error_unit
  use mpi_f08, only: MPI_Comm
  implicit none
  private

  ! Status codes and reduce ops: the values of tcoll.h (fortran/tcoll_f.c asserts they agree).
  integer, parameter, public :: TCOLL_SUCCESS = 0, TCOLL_IN_PROGRESS = 1, &
    TCOLL_ERR_INVALID_ARGUMENT = -1, TCOLL_ERR_BUSY = -2, TCOLL_ERR_NO_MEMORY = -3, &
    TCOLL_ERR_MPI = -4, TCOLL_ERR_CUDA = -5, TCOLL_ERR_UNSUPPORTED = -6, &
    TCOLL_ERR_MISMATCH = -7, TCOLL_ERR_TIMEOUT = -8, TCOLL_ERR_STATE = -9, &
    TCOLL_ERR_INTERNAL = -10
  integer, parameter, public :: TCOLL_SUM = 0, TCOLL_AVG = 1, TCOLL_PRODUCT = 2, &
    TCOLL_MIN = 3, TCOLL_MAX = 4, TCOLL_BAND = 5, TCOLL_BOR = 6, TCOLL_BXOR = 7

  !> A tcoll communicator (tcoll_comm_t*); the default, a null handle, is the world.
  type, bind(C), public :: tcoll_comm
    type(c_ptr) :: handle = c_null_ptr
  end type tcoll_comm

  public :: tcoll_init, tcoll_finalize, tcoll_comm_world, tcoll_comm_from_mpi, tcoll_comm_free
  public :: tcoll_comm_rank, tcoll_comm_size
  public :: tcoll_all_reduce, tcoll_broadcast, tcoll_all_gather, tcoll_reduce_scatter
  public :: tcoll_all_to_all_single
  public :: tcoll_wait, tcoll_test, tcoll_wait_all
  public :: tcoll_status_string, tcoll_last_error

  !> call tcoll_comm_from_mpi(comm, c [, ierr]): comm is type(MPI_Comm) or an integer handle.
  interface tcoll_comm_from_mpi
    module procedure comm_from_mpi_f08, comm_from_mpi_handle
  end interface tcoll_comm_from_mpi

  ! The C side (fortran/tcoll_f.c): arrays arrive as their descriptors.
  interface
    integer(c_int) function f_init() bind(C, name='tcoll_f_init')
      import :: c_int
    end function
    integer(c_int) function f_finalize() bind(C, name='tcoll_f_finalize')
      import :: c_int
    end function
    type(c_ptr) function f_comm_world() bind(C, name='tcoll_f_comm_world')
      import :: c_ptr
    end function
    integer(c_int) function f_comm_rank(comm) bind(C, name='tcoll_f_comm_rank')
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
    end function
    integer(c_int) function f_comm_size(comm) bind(C, name='tcoll_f_comm_size')
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
    end function
    integer(c_int) function f_comm_free(comm) bind(C, name='tcoll_f_comm_free')
      import :: c_int, c_ptr
      type(c_ptr) :: comm
    end function
    integer(c_int) function f_comm_from_mpi(comm, out) bind(C, name='tcoll_f_comm_from_mpi')
      import :: c_int, c_ptr
      integer(c_int), value :: comm
      type(c_ptr) :: out
    end function
    integer(c_int) function f_all_reduce(x, y, op, comm) bind(C, name='tcoll_f_all_reduce')
      import :: c_int, c_ptr
      type(*), dimension(..), intent(in), asynchronous :: x
      type(*), dimension(..), intent(inout), asynchronous :: y
      integer(c_int), value :: op
      type(c_ptr), value :: comm
    end function
    integer(c_int) function f_broadcast(x, y, root, comm) bind(C, name='tcoll_f_broadcast')
      import :: c_int, c_ptr
      type(*), dimension(..), intent(in), asynchronous :: x
      type(*), dimension(..), intent(inout), asynchronous :: y
      integer(c_int), value :: root
      type(c_ptr), value :: comm
    end function
    integer(c_int) function f_all_gather(x, y, comm) bind(C, name='tcoll_f_all_gather')
      import :: c_int, c_ptr
      type(*), dimension(..), intent(in), asynchronous :: x
      type(*), dimension(..), intent(inout), asynchronous :: y
      type(c_ptr), value :: comm
    end function
    integer(c_int) function f_reduce_scatter(x, y, op, comm) bind(C, name='tcoll_f_reduce_scatter')
      import :: c_int, c_ptr
      type(*), dimension(..), intent(in), asynchronous :: x
      type(*), dimension(..), intent(inout), asynchronous :: y
      integer(c_int), value :: op
      type(c_ptr), value :: comm
    end function
    integer(c_int) function f_all_to_all_single(x, y, comm) bind(C, name='tcoll_f_all_to_all_single')
      import :: c_int, c_ptr
      type(*), dimension(..), intent(in), asynchronous :: x
      type(*), dimension(..), intent(inout), asynchronous :: y
      type(c_ptr), value :: comm
    end function
    integer(c_int) function f_wait(y) bind(C, name='tcoll_f_wait')
      import :: c_int
      type(*), dimension(..), intent(inout), asynchronous :: y
    end function
    integer(c_int) function f_test(y) bind(C, name='tcoll_f_test')
      import :: c_int
      type(*), dimension(..), intent(inout), asynchronous :: y
    end function
    integer(c_int) function f_wait_all() bind(C, name='tcoll_f_wait_all')
      import :: c_int
    end function
    type(c_ptr) function f_status_string(status) bind(C, name='tcoll_f_status_string')
      import :: c_int, c_ptr
      integer(c_int), value :: status
    end function
    type(c_ptr) function f_last_error() bind(C, name='tcoll_f_last_error')
      import :: c_ptr
    end function
    integer(c_size_t) function c_strlen(s) bind(C, name='strlen')
      import :: c_size_t, c_ptr
      type(c_ptr), value :: s
    end function
  end interface

contains

  !> A NUL-terminated C string as a Fortran string.
  function from_c(s) result(str)
    type(c_ptr), intent(in) :: s
    character(len=:), allocatable :: str
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(s)) then
      str = ''
      return
    end if
    n = int(c_strlen(s))
    call c_f_pointer(s, chars, [n])
    allocate(character(len=n) :: str)
    do i = 1, n
      str(i:i) = chars(i)
    end do
  end function from_c

  !> The status as ierr, or, without ierr, a failure stops the program with tcoll's message.
  subroutine finish(rc, routine, ierr)
    integer(c_int), intent(in) :: rc
    character(len=*), intent(in) :: routine
    integer, intent(out), optional :: ierr
    if (present(ierr)) then
      ierr = rc
    else if (rc < 0) then
      write(error_unit, '(a)') routine // ' failed (' // tcoll_status_string(rc) // '): ' // tcoll_last_error()
      error stop 'tcoll: an error with no ierr to return it in'
    end if
  end subroutine finish

  !> Initializes tcoll, and MPI (MPI_THREAD_MULTIPLE) unless the program already did.
  subroutine tcoll_init(ierr)
    integer, intent(out), optional :: ierr
    call finish(f_init(), 'tcoll_init', ierr)
  end subroutine tcoll_init

  !> Finalizes tcoll, and MPI only if tcoll_init initialized it.
  subroutine tcoll_finalize(ierr)
    integer, intent(out), optional :: ierr
    call finish(f_finalize(), 'tcoll_finalize', ierr)
  end subroutine tcoll_finalize

  !> The world communicator (a duplicate of MPI_COMM_WORLD, owned by tcoll).
  function tcoll_comm_world() result(c)
    type(tcoll_comm) :: c
    c%handle = f_comm_world()
  end function tcoll_comm_world

  !> This rank's number in c (-1 before tcoll_init).
  integer function tcoll_comm_rank(c)
    type(tcoll_comm), intent(in) :: c
    tcoll_comm_rank = f_comm_rank(c%handle)
  end function tcoll_comm_rank

  !> The number of ranks of c (-1 before tcoll_init).
  integer function tcoll_comm_size(c)
    type(tcoll_comm), intent(in) :: c
    tcoll_comm_size = f_comm_size(c%handle)
  end function tcoll_comm_size

  subroutine comm_from_mpi_f08(comm, c, ierr)
    type(MPI_Comm), intent(in) :: comm
    type(tcoll_comm), intent(out) :: c
    integer, intent(out), optional :: ierr
    call finish(f_comm_from_mpi(int(comm%MPI_VAL, c_int), c%handle), 'tcoll_comm_from_mpi', ierr)
  end subroutine comm_from_mpi_f08

  subroutine comm_from_mpi_handle(comm, c, ierr)
    integer, intent(in) :: comm
    type(tcoll_comm), intent(out) :: c
    integer, intent(out), optional :: ierr
    call finish(f_comm_from_mpi(int(comm, c_int), c%handle), 'tcoll_comm_from_mpi', ierr)
  end subroutine comm_from_mpi_handle

  !> Frees a communicator made by tcoll_comm_from_mpi (collective); c becomes the null handle.
  subroutine tcoll_comm_free(c, ierr)
    type(tcoll_comm), intent(inout) :: c
    integer, intent(out), optional :: ierr
    call finish(f_comm_free(c%handle), 'tcoll_comm_free', ierr)
  end subroutine tcoll_comm_free

  !> y = op over the ranks of x, element by element; size(y) = size(x). Posted: wait on y.
  subroutine tcoll_all_reduce(x, y, op, c, ierr)
    type(*), dimension(..), intent(in), target, asynchronous :: x
    type(*), dimension(..), intent(inout), target, asynchronous :: y
    integer, intent(in) :: op
    type(tcoll_comm), intent(in) :: c
    integer, intent(out), optional :: ierr
    call finish(f_all_reduce(x, y, int(op, c_int), c%handle), 'tcoll_all_reduce', ierr)
  end subroutine tcoll_all_reduce

  !> y = x of rank root on every rank; size(y) = size(x). Posted: wait on y.
  subroutine tcoll_broadcast(x, y, root, c, ierr)
    type(*), dimension(..), intent(in), target, asynchronous :: x
    type(*), dimension(..), intent(inout), target, asynchronous :: y
    integer, intent(in) :: root
    type(tcoll_comm), intent(in) :: c
    integer, intent(out), optional :: ierr
    call finish(f_broadcast(x, y, int(root, c_int), c%handle), 'tcoll_broadcast', ierr)
  end subroutine tcoll_broadcast

  !> y = the ranks' x one after the other, in rank order; size(y) = size(x) * ranks.
  subroutine tcoll_all_gather(x, y, c, ierr)
    type(*), dimension(..), intent(in), target, asynchronous :: x
    type(*), dimension(..), intent(inout), target, asynchronous :: y
    type(tcoll_comm), intent(in) :: c
    integer, intent(out), optional :: ierr
    call finish(f_all_gather(x, y, c%handle), 'tcoll_all_gather', ierr)
  end subroutine tcoll_all_gather

  !> y = block r (of size(y) elements) of op over the ranks of x; size(x) = size(y) * ranks.
  subroutine tcoll_reduce_scatter(x, y, op, c, ierr)
    type(*), dimension(..), intent(in), target, asynchronous :: x
    type(*), dimension(..), intent(inout), target, asynchronous :: y
    integer, intent(in) :: op
    type(tcoll_comm), intent(in) :: c
    integer, intent(out), optional :: ierr
    call finish(f_reduce_scatter(x, y, int(op, c_int), c%handle), 'tcoll_reduce_scatter', ierr)
  end subroutine tcoll_reduce_scatter

  !> x in ranks blocks of equal size: block j goes to rank j, y's block i comes from rank i.
  subroutine tcoll_all_to_all_single(x, y, c, ierr)
    type(*), dimension(..), intent(in), target, asynchronous :: x
    type(*), dimension(..), intent(inout), target, asynchronous :: y
    type(tcoll_comm), intent(in) :: c
    integer, intent(out), optional :: ierr
    call finish(f_all_to_all_single(x, y, c%handle), 'tcoll_all_to_all_single', ierr)
  end subroutine tcoll_all_to_all_single

  !> Completes the collective pending on y (at once if none is).
  subroutine tcoll_wait(y, ierr)
    type(*), dimension(..), intent(inout), target, asynchronous :: y
    integer, intent(out), optional :: ierr
    call finish(f_wait(y), 'tcoll_wait', ierr)
  end subroutine tcoll_wait

  !> done = whether y is ready (a completed collective is then finished, as by tcoll_wait).
  subroutine tcoll_test(y, done, ierr)
    type(*), dimension(..), intent(inout), target, asynchronous :: y
    logical, intent(out) :: done
    integer, intent(out), optional :: ierr
    integer(c_int) :: rc
    rc = f_test(y)
    done = rc == TCOLL_SUCCESS
    call finish(merge(TCOLL_SUCCESS, rc, rc == TCOLL_IN_PROGRESS), 'tcoll_test', ierr)
  end subroutine tcoll_test

  !> Completes every pending collective of this thread's process.
  subroutine tcoll_wait_all(ierr)
    integer, intent(out), optional :: ierr
    call finish(f_wait_all(), 'tcoll_wait_all', ierr)
  end subroutine tcoll_wait_all

  !> The name of a status code ("TCOLL_ERR_INVALID_ARGUMENT", ...).
  function tcoll_status_string(status) result(str)
    integer, intent(in) :: status
    character(len=:), allocatable :: str
    str = from_c(f_status_string(int(status, c_int)))
  end function tcoll_status_string

  !> This thread's last failure, in detail (names the argument, its value and what was expected).
  function tcoll_last_error() result(str)
    character(len=:), allocatable :: str
    str = from_c(f_last_error())
  end function tcoll_last_error

end module tcoll
