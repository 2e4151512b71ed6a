/* The main of every Check suite (harness.h): MPI, then tcoll, then the suite in CK_NOFORK mode;
 * the worst failure count over the ranks decides the exit status. In the harness library on its
 * own, so that a program with a main of its own (one scenario per process: test_cudamock.c,
 * test_lifetime.c) links the rest of the harness without it: the linker takes this file from
 * the library only for a program that has no main. */
#include "harness.h"

#include "gpu_probe.h"

int main(int argc, char **argv) {
  bool gpu_visible = t_gpu_prepare();
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &t_size);
  if (tcoll_init(&argc, &argv) != TCOLL_SUCCESS) {
    fprintf(stderr, "[rank %d] tcoll_init failed: %s\n", t_rank, tcoll_last_error());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int verdict = t_gpu_verdict(tcoll_device_backend(), gpu_visible, t_rank);
  if (verdict) {
    tcoll_finalize();
    MPI_Finalize();
    return verdict;
  }
  SRunner *sr = srunner_create(t_suite());
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, t_rank == 0 ? CK_NORMAL : CK_SILENT);
  int local = srunner_ntests_failed(sr), worst = 0;
  srunner_free(sr);
  MPI_Allreduce(&local, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (t_rank == 0) printf("%s at %d rank(s): %s\n", argv[0], t_size, worst ? "FAILED" : "passed");
  tcoll_finalize();
  MPI_Finalize();
  return worst ? 1 : 0;
}
