/* tcoll-cma-probe: exits 0 when one process may read another's memory with process_vm_readv
 * (cross-memory attach), which Open MPI's shared-memory transport uses to move large messages
 * in one copy. Containers often withhold it (ptrace rights, Yama's ptrace_scope, seccomp): the
 * transport then fails at the first large message unless told not to use it. tcoll-mpiexec asks
 * this probe before deciding. The reader is a child reading its parent, which, like two ranks
 * of one job, is not the other's ancestor. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
  static char secret[64] = "tcoll cross-memory attach probe";
  pid_t parent = getpid();
  pid_t child = fork();
  if (child < 0) return 2;
  if (child == 0) {
    char got[sizeof secret] = {0};
    struct iovec local = {got, sizeof got}, remote = {secret, sizeof secret};
    ssize_t n = process_vm_readv(parent, &local, 1, &remote, 1, 0);
    _exit(n == (ssize_t)sizeof got && memcmp(got, secret, sizeof got) == 0 ? 0 : 1);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return 2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}
