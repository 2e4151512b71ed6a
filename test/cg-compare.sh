#!/usr/bin/env bash
# examples/cg.c, a plain MPI program, with and without the drop-in layer:
#   cg-compare.sh TCOLL_MPIEXEC NP CG N
# Both runs must pass their own check (the solution), give the same iteration count and residuals
# within 1e-12 relative (tcoll reduces in rank order, MPI in its own), and the layer's run must
# have routed its dot products (TCOLL_DEBUG=INFO prints the layer's counts at finalize).
set -euo pipefail
launch=$1 np=$2 cg=$3 n=$4
plain=$("$launch" -n "$np" "$cg" "$n" 2>/dev/null)
layered=$(TCOLL_DEBUG=INFO "$launch" --preload -n "$np" "$cg" "$n" 2>&1 >/dev/null | grep 'tcoll-mpi' || true)
layer_out=$("$launch" --preload -n "$np" "$cg" "$n" 2>/dev/null)
echo "without the layer: $plain"
echo "with the layer:    $layer_out"
echo "$layered"
iters() { sed -n 's/.*: \([0-9]*\) iterations.*/\1/p' <<<"$1"; }
resid() { sed -n 's/.*residual \([^,]*\),.*/\1/p' <<<"$1"; }
[ "$(iters "$plain")" = "$(iters "$layer_out")" ] || { echo "FAIL: iteration counts differ"; exit 1; }
awk -v a="$(resid "$plain")" -v b="$(resid "$layer_out")" 'BEGIN {
  d = a - b; if (d < 0) d = -d; s = a < 0 ? -a : a;
  if (d > 1e-12 * s) { print "FAIL: residuals differ by more than 1e-12 relative"; exit 1 } }'
if [ "$np" -gt 1 ]; then
  grep -q 'MPI_Allreduce: [1-9][0-9]* routed' <<<"$layered" || { echo "FAIL: no MPI_Allreduce was routed"; exit 1; }
fi
echo ok
