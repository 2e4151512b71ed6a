#!/usr/bin/env bash
# The functional suites with ranks on two hosts that share no memory: each run goes through
# scripts/netns-run (two network namespaces joined by a veth pair, Open MPI over TCP only) at
# NP ranks, half in each namespace.
#   netns.sh BUILD_DIR NP NAME ENV EXE [NAME ENV EXE ...]    ENV: space-separated VAR=VALUE, or "-"
# Exit status: 0 if every run passed, 1 if one failed, 77 if namespaces cannot be made here.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1 np=$2
shift 2
failed=()
while [ $# -ge 3 ]; do
  name=$1 envs=$2 exe=$(realpath "$3")
  shift 3
  [ "$envs" = - ] && envs=""
  start=$SECONDS
  # shellcheck disable=SC2086
  env $envs "$here/../scripts/netns-run" "$build" "$np" "$exe" >"$build/meson-logs/netns-$name.log" 2>&1
  rc=$?
  [ "$rc" -eq 77 ] && { cat "$build/meson-logs/netns-$name.log"; exit 77; }
  if [ "$rc" -eq 0 ]; then
    echo "ok   $name ($((SECONDS - start)) s)"
  else
    echo "FAIL $name: exit status $rc; its output:"
    tail -40 "$build/meson-logs/netns-$name.log"
    failed+=("$name")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "failed over the namespaces: ${failed[*]}"; exit 1; }
echo "every run passed with ranks in two network namespaces over TCP"
