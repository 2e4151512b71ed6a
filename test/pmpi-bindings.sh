#!/usr/bin/env bash
# A program of another binding (Fortran's use mpi / mpi_f08, C++, Python's mpi4py) with the
# drop-in layer:
#   pmpi-bindings.sh TCOLL_MPIEXEC NP routed|passes PROGRAM [ARGS...]
# It must pass its own checks; `routed`: the layer's counts (TCOLL_DEBUG=INFO at finalize) show
# routed MPI_Allreduce and MPI_Iallreduce calls; `passes`: nothing is routed (the binding calls
# PMPI_*, as Open MPI 4.1's Fortran bindings do, or initializes MPI through PMPI_Init, as MPICH
# 4.0's mpi_f08 does, so that the layer never starts).
set -euo pipefail
launch=$1 np=$2 expect=$3
shift 3
out=$(TCOLL_DEBUG=INFO "$launch" --preload -n "$np" "$@" 2>&1) || { echo "$out"; echo "FAIL: the program failed"; exit 1; }
grep -q ': ok' <<<"$out" || { echo "$out"; echo "FAIL: no ok line"; exit 1; }
counts=$(grep 'tcoll-mpi \[rank' <<<"$out" || true)
echo "$counts"
case "$expect" in
routed)
  for fn in MPI_Allreduce MPI_Iallreduce; do
    grep -q "$fn: [1-9][0-9]* routed" <<<"$counts" || { echo "FAIL: no $fn routed"; exit 1; }
  done ;;
passes)
  if grep -q ': [1-9][0-9]* routed' <<<"$counts"; then echo "FAIL: calls were routed"; exit 1; fi ;;
esac
echo ok
