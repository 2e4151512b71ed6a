#!/bin/sh
# Starts one MPI rank of a test: mpiexec runs this script with the test program and its
# arguments. Normally it just execs the program; with TCOLL_VALGRIND set (meson test --setup
# valgrind) it runs the rank under valgrind memcheck, and any error valgrind reports makes the
# rank exit with 99, which fails the test. Extra valgrind options: TCOLL_VALGRIND_ARGS.
# TCOLL_TEST_LIBDIR puts a folder first in the library path: the mock-CUDA build of libtcoll
# (test/mockcuda) stands in for the real one that way. TCOLL_TEST_PRELOAD preloads a library
# into the rank only (not into mpiexec): the drop-in layer's suite (test_pmpi.c) runs so.
if [ -n "${TCOLL_TEST_LIBDIR:-}" ]; then
  export LD_LIBRARY_PATH="$TCOLL_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ -n "${TCOLL_TEST_PRELOAD:-}" ]; then
  # In a sanitizer build the program carries the ASan runtime, which must come first of all
  # libraries: it is preloaded ahead of the layer.
  asan=$(ldd "$1" 2>/dev/null | awk '/libasan/ {print $3; exit}')
  export LD_PRELOAD="${asan:+$asan:}$TCOLL_TEST_PRELOAD${LD_PRELOAD:+:$LD_PRELOAD}"
fi
if [ -n "${TCOLL_VALGRIND:-}" ]; then
  if ! command -v valgrind >/dev/null 2>&1; then
    echo "rank-launcher.sh: TCOLL_VALGRIND is set but valgrind is not installed (apt-get install valgrind)" >&2
    exit 127
  fi
  here=$(dirname "$0")
  supp=""
  # Open MPI's own suppression file (Debian: openmpi-common), then the project's.
  for f in /usr/share/openmpi/openmpi-valgrind.supp "$here/valgrind.supp"; do
    [ -f "$f" ] && supp="$supp --suppressions=$f"
  done
  # shellcheck disable=SC2086
  exec valgrind --tool=memcheck --quiet --error-exitcode=99 --exit-on-first-error=no \
    --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --track-origins=yes --num-callers=30 --gen-suppressions=all $supp ${TCOLL_VALGRIND_ARGS:-} "$@"
fi
exec "$@"
