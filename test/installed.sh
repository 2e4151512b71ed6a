#!/usr/bin/env bash
# tcoll as another project uses it: `meson install --destdir` into a temporary folder, then the
# examples built against that installed copy, as README.md shows, and run with the installed
# tcoll-mpiexec at 2 ranks (each example checks its own results).
#   installed.sh pkg-config|cmake BUILD_DIR SOURCE_DIR MPICC [MPIFORT]
# pkg-config: heat.c with `mpicc ... $(pkg-config --cflags --libs tcoll)`, relax.f90 with
# `mpifort ... $(pkg-config --cflags --libs tcoll-fortran)`, and the plain MPI program cg.c linked
# with the drop-in layer (`pkg-config --libs tcoll-mpi`) and, built without it, run with
# `tcoll-mpiexec --preload`: both must route (TCOLL_DEBUG=INFO's counts). cmake:
# test/cmake-consumer (find_package(tcoll CONFIG), tcoll::tcoll, tcoll::mpi and tcoll::fortran)
# with CMAKE_PREFIX_PATH. Without
# a MPIFORT (tcoll built without its Fortran module) only the C example is built. Skipped (77)
# where pkg-config or cmake is not installed.
set -euo pipefail
how=$1 build=$2 src=$3 mpicc=$4 mpifort=${5:-}
command -v "$how" >/dev/null || { echo "$how is not installed: skipped"; exit 77; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
meson install -C "$build" --destdir "$work/root" --no-rebuild --quiet >/dev/null
pc=$(find "$work/root" -name tcoll.pc)
libdir=$(dirname "$(dirname "$pc")")
prefix=$(dirname "$(find "$work/root" -name tcoll.h)")/..
launch=$(find "$work/root" -name tcoll-mpiexec)
say() { printf '[installed.sh %s] %s\n' "$how" "$*"; }
run() { # program [args]: at 2 ranks, and it must run against the installed library
  if ldd "$1" | grep -q "$build"; then say "FAIL: $1 resolves a library of the build folder"; ldd "$1"; exit 1; fi
  say "running $launch -n 2 $*"
  "$launch" -n 2 "$@"
}
# The layer's rows pass cg's 8-byte dot products to MPI (its own are faster there): the
# algorithm is forced so that they go through tcoll.
routes() { # [--preload] program: at 2 ranks through the layer, whose counts must show routed calls
  say "running $launch $* (TCOLL_DEBUG=INFO)"
  local out
  out=$(TCOLL_DEBUG=INFO TCOLL_ALGO=all_reduce:shm "$launch" "${@:1:$#-1}" -n 2 "${@: -1}" 2>&1) || { echo "$out"; exit 1; }
  grep -q 'MPI_Allreduce: [1-9][0-9]* routed' <<<"$out" || { say "FAIL: nothing routed"; echo "$out" | tail; exit 1; }
}

case "$how" in
pkg-config)
  export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  say "$mpicc heat.c \$(pkg-config --cflags --libs tcoll) -lm"
  # -Wl,-rpath: the installed copy lies off the loader's path (a real install runs ldconfig).
  # shellcheck disable=SC2046 # pkg-config's flags are separate words, as in README.md
  "$mpicc" "$src/examples/heat.c" $(pkg-config --cflags --libs tcoll) -lm -Wl,-rpath,"$libdir" -o "$work/heat"
  run "$work/heat"
  if [ -n "$mpifort" ]; then
    say "$mpifort relax.f90 \$(pkg-config --cflags --libs tcoll-fortran)"
    # shellcheck disable=SC2046
    "$mpifort" "$src/examples/relax.f90" $(pkg-config --cflags --libs tcoll-fortran) -Wl,-rpath,"$libdir" \
      -o "$work/relax"
    run "$work/relax"
  fi
  say "$mpicc cg.c \$(pkg-config --libs tcoll-mpi) -lm"
  # shellcheck disable=SC2046
  "$mpicc" "$src/examples/cg.c" $(pkg-config --libs tcoll-mpi) -lm -Wl,-rpath,"$libdir" -o "$work/cg-linked"
  routes "$work/cg-linked"
  "$mpicc" "$src/examples/cg.c" -lm -o "$work/cg"
  routes --preload "$work/cg"
  ;;
cmake)
  fortran=OFF
  [ -n "$mpifort" ] && fortran=ON
  say "cmake -DCMAKE_PREFIX_PATH=<installed prefix> (WITH_FORTRAN=$fortran)"
  cmake -S "$src/test/cmake-consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
    -DTCOLL_EXAMPLES="$src/examples" -DWITH_FORTRAN="$fortran" >"$work/cmake.log" 2>&1 ||
    { cat "$work/cmake.log"; exit 1; }
  cmake --build "$work/cmake" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
  run "$work/cmake/heat"
  routes "$work/cmake/cg"
  [ "$fortran" = ON ] && run "$work/cmake/relax"
  ;;
*) echo "usage: installed.sh pkg-config|cmake BUILD_DIR SOURCE_DIR MPICC [MPIFORT]" >&2; exit 2 ;;
esac
say "ok"
