#!/bin/sh
# Runs several test programs at once, COPIES copies of each, every copy a whole mpiexec job of NP
# ranks, as the GPU bundle's runner does with --jobs (scripts/gpu-bundle-run): with ranks of other
# jobs competing for the cores, timing-dependent flaws (a progress thread's calls a check did not
# count, a step that runs late) show here before they show on a GPU machine. Fails if any copy
# fails, naming it, with the end of its output; skipped (77) only if every copy skipped.
#
#   concurrent.sh COPIES MPIEXEC NP LAUNCHER PROGRAM...
#
# The environment (TCOLL_PROGRESS, TCOLL_FAKE_DEVICES, ...) is the caller's, for every copy.
set -u
if [ $# -lt 5 ]; then
  echo "usage: $0 COPIES MPIEXEC NP LAUNCHER PROGRAM..." >&2
  exit 2
fi
copies=$1 mpiexec=$2 np=$3 launcher=$4
shift 4
dir=$(mktemp -d "${TMPDIR:-/tmp}/tcoll-concurrent.XXXXXX") || exit 2
pids=""
# A timeout (meson sends SIGTERM) or an interrupt ends the copies still running too.
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$dir"; exit 1' INT TERM
trap 'rm -rf "$dir"' EXIT

n=0
for prog in "$@"; do
  c=1
  while [ "$c" -le "$copies" ]; do
    n=$((n + 1))
    echo "$(basename "$prog") copy $c of $copies" > "$dir/$n.name"
    "$mpiexec" -n "$np" "$launcher" "$prog" > "$dir/$n.log" 2>&1 &
    pids="$pids $!"
    c=$((c + 1))
  done
done
echo "$n jobs of $np rank(s) at once: $copies of each of $*"

failed=0 skipped=0 k=0
for p in $pids; do
  k=$((k + 1))
  wait "$p"
  rc=$?
  name=$(cat "$dir/$k.name")
  if [ "$rc" -eq 77 ]; then
    skipped=$((skipped + 1))
  elif [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
    echo "--- $name failed (exit $rc); the failures it reported (harness.h's format):"
    grep -E '^\[rank [0-9-]+(/[0-9]+)?\] ' "$dir/$k.log" | head -n 20
    echo "--- and its last lines:"
    tail -n 15 "$dir/$k.log"
  fi
done
if [ "$failed" -gt 0 ]; then
  echo "$failed of $n jobs failed"
  exit 1
fi
if [ "$skipped" -eq "$n" ]; then
  echo "every job skipped"
  exit 77
fi
echo "$n jobs passed"
exit 0
