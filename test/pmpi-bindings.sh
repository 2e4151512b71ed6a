#!/usr/bin/env bash
# A program of another binding (Fortran's use mpi / mpi_f08, C++, Python's mpi4py) with the
# drop-in layer:
#   pmpi-bindings.sh TCOLL_MPIEXEC NP routed|routed-blocking|passes PROGRAM [ARGS...]
# It must pass its own checks; `routed`: the layer's counts (TCOLL_DEBUG=INFO at finalize) show
# routed MPI_Allreduce and MPI_Iallreduce calls; `routed-blocking`: routed MPI_Allreduce calls
# (MPICH 4.0's mpi_f08 initializes MPI through PMPI_Init with no thread level: the layer starts
# at the first blocking collective on MPI_COMM_WORLD, and without MPI_THREAD_MULTIPLE its progress
# thread cannot run, so nonblocking calls pass); `passes`: nothing is routed (the binding calls
# PMPI_*, as Open MPI 4.1's Fortran bindings do).
set -euo pipefail
launch=$1 np=$2 expect=$3
shift 3
out=$(TCOLL_DEBUG=INFO "$launch" --preload -n "$np" "$@" 2>&1) || { echo "$out"; echo "FAIL: the program failed"; exit 1; }
grep -q ': ok' <<<"$out" || { echo "$out"; echo "FAIL: no ok line"; exit 1; }
counts=$(grep 'tcoll-mpi \[rank' <<<"$out" || true)
echo "$counts"
case "$expect" in
routed | routed-blocking)
  fns="MPI_Allreduce"
  [ "$expect" = routed ] && fns="$fns MPI_Iallreduce"
  for fn in $fns; do
    grep -q "$fn: [1-9][0-9]* routed" <<<"$counts" || { echo "FAIL: no $fn routed"; exit 1; }
  done ;;
passes)
  if grep -q ': [1-9][0-9]* routed' <<<"$counts"; then echo "FAIL: calls were routed"; exit 1; fi ;;
esac
echo ok
