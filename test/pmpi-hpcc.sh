#!/usr/bin/env bash
# HPC Challenge (Debian's hpcc, built against Open MPI), unmodified, without and with the drop-in
# layer at NP ranks on a small problem (HPL N=400): every self-check of both runs must pass (HPL's
# residual, PTRANS's residual, RandomAccess with 0 errors, FFT within its error bound), the layer's
# run must have routed calls, and the two runs' RandomAccess error counts and FFT errors agree.
#   pmpi-hpcc.sh TCOLL_MPIEXEC NP            (77: hpcc is not installed)
set -euo pipefail
launch=$1 np=$2
command -v hpcc >/dev/null || { echo "hpcc is not installed: skipped"; exit 77; }
example=/usr/share/doc/hpcc/examples/_hpccinf.txt
[ -f "$example" ] || { echo "no $example: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
p=1 q=$np
[ "$np" = 4 ] && p=2 q=2
for run in plain layer; do
  mkdir -p "$work/$run"
  sed -e "s/^1000 .*Ns/400          Ns/" -e "s/^2 .*Ps/$p            Ps/" -e "s/^2 .*Qs/$q            Qs/" \
    "$example" >"$work/$run/hpccinf.txt"
done
(cd "$work/plain" && "$launch" -n "$np" hpcc >/dev/null)
(cd "$work/layer" && TCOLL_DEBUG=INFO "$launch" --preload -n "$np" hpcc >/dev/null 2>"$work/layer/err.txt")
check() { # run
  local f="$work/$1/hpccoutf.txt"
  grep -q '^MPIRandomAccess_Errors=0$' "$f" || { echo "FAIL ($1): RandomAccess errors"; exit 1; }
  grep -q 'tests completed and failed residual checks' "$f" && \
    ! grep -q '^ *0 tests completed and failed residual checks' "$f" && { echo "FAIL ($1): residual checks"; exit 1; }
  grep -q 'PASSED' "$f" || { echo "FAIL ($1): nothing PASSED"; exit 1; }
  if grep -q 'FAILED' "$f"; then echo "FAIL ($1): a check FAILED"; grep FAILED "$f"; exit 1; fi
  grep -E '^(HPL_N|MPIRandomAccess_Errors|MPIFFT_maxErr|PTRANS_GBs)=' "$f" | sed "s/^/$1: /"
}
check plain
check layer
grep 'tcoll-mpi \[rank 0\]' "$work/layer/err.txt" || true
grep -q 'tcoll-mpi \[rank 0\] MPI_Allreduce: [1-9][0-9]* routed' "$work/layer/err.txt" ||
  { echo "FAIL: no MPI_Allreduce routed"; exit 1; }
echo ok
