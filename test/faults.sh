#!/usr/bin/env bash
# Runs one fault or tracing scenario of test/scenario.c under mpiexec and checks how it ends.
#   faults.sh MPIEXEC SCENARIO_EXE CASE NP WORKDIR
# MPIEXEC is tcoll-mpiexec (the build's launcher, with its settings for this MPI).
# A hang is a failure: every run is bounded by `timeout` well below meson's own limit.
set -uo pipefail
mpiexec=$1 exe=$2 case=$3 np=$4 work=$5
mkdir -p "$work"
out="$work/$case-np$np.log"
guard=100

run() { # env... -- scenario
  timeout --kill-after=5 "$guard" env "$@" "$mpiexec" -n "$np" "$exe" "$scenario" >"$out" 2>&1
}
expect() { # pattern: the run's output must contain it
  grep -q -- "$1" "$out" || { echo "FAIL ($case): output lacks \"$1\""; cat "$out"; exit 1; }
}
status_is() { # want description
  if ! eval "$1"; then echo "FAIL ($case): exit status $rc, expected $2"; cat "$out"; exit 1; fi
}

case "$case" in
late)
  scenario=late
  run TCOLL_TIMEOUT=60; rc=$?
  status_is '[ $rc -eq 0 ]' 0
  expect "late joiner: completed with exact values"
  ;;
never-abort)  # a rank never joins: TCOLL_ON_TIMEOUT=abort ends the job with a diagnosis
  scenario=never
  run TCOLL_TIMEOUT=2 TCOLL_ON_TIMEOUT=abort; rc=$?
  status_is '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ]' "non-zero, not a hang"
  expect "all_reduce #1 on comm 'world' (seq 1, 8192 bytes) did not complete within 2 s"
  expect "pending on this rank: all_reduce #1"
  expect "flight recorder (timeout)"
  # Stamps from the coarse clock by default: the resolution is said, the waits are still timed.
  expect "times to [0-9]* ms (TCOLL_TRACE or TCOLL_DEBUG=INFO: to 1 us)"
  expect "all_reduce on comm 'world' (seq 1) .*pending after [2-9][0-9][0-9][0-9]\.[0-9]* ms"
  expect "TCOLL_ON_TIMEOUT=abort: aborting the job"
  # Every rank that waited tells its own story: the abort pauses so that none is cut off.
  for r in $(seq 0 $((np - 1))); do
    [ "$r" -eq 1 ] || expect "\[tcoll $r\] WARN: .*pending after [0-9.]* ms"
  done
  ;;
never-return) # the same with TCOLL_ON_TIMEOUT=return: the caller gets TCOLL_ERR_TIMEOUT
  scenario=never
  run TCOLL_TIMEOUT=1; rc=$?
  status_is '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ]' "non-zero, not a hang"
  expect "wait returned TCOLL_ERR_TIMEOUT"
  expect "still pending; a later wait completes it"
  ;;
exit-early)   # a rank dies: the job must end (the launcher notices, or tcoll's timeout aborts)
  scenario=exit-early
  run TCOLL_TIMEOUT=10 TCOLL_ON_TIMEOUT=abort; rc=$?
  status_is '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ]' "non-zero, not a hang"
  # Said by Open MPI's mpiexec, by MPICH's Hydra, or by tcoll; or the job's status is the dead
  # rank's own exit code (3), which Hydra passes on without a word when no other rank was killed.
  [ $rc -eq 3 ] ||
    grep -qE "exiting improperly|non-zero exit code|BAD TERMINATION|did not complete within|aborting" "$out" ||
    { echo "FAIL ($case): no clear error (exit status $rc)"; cat "$out"; exit 1; }
  ;;
mismatch)     # DETAIL: every rank gets TCOLL_ERR_MISMATCH; the recorder is dumped to TCOLL_TRACE
  scenario=mismatch
  rm -f "$work"/mismatch.*.json
  run TCOLL_DEBUG=DETAIL TCOLL_TRACE="$work/mismatch.json"; rc=$?
  status_is '[ $rc -eq 0 ]' 0
  for r in $(seq 0 $((np - 1))); do
    expect "rank $r: tcoll_"
    grep -q '"reason":"mismatch"' "$work/mismatch.$r.json" 2>/dev/null ||
      grep -q '"reason":"finalize"' "$work/mismatch.$r.json" ||
      { echo "FAIL ($case): no flight recorder file for rank $r"; exit 1; }
  done
  expect "op: rank 0 all_reduce, rank 1 all_gather"
  ;;
trace)        # the flight recorder at finalize, one file per rank, merged into one trace
  scenario=trace
  rm -f "$work"/trace.*.json "$work/merged.json"
  run TCOLL_TRACE="$work/trace.json"; rc=$?
  status_is '[ $rc -eq 0 ]' 0
  files=()
  for r in $(seq 0 $((np - 1))); do
    f="$work/trace.$r.json"
    [ -f "$f" ] || { echo "FAIL ($case): $f missing"; cat "$out"; exit 1; }
    [ "$(grep -c '"name":"all_reduce"' "$f")" -eq 3 ] || { echo "FAIL ($case): $f lacks 3 all_reduce events"; cat "$f"; exit 1; }
    grep -q '"name":"all_gather".*"state":"done"' "$f" || { echo "FAIL ($case): $f lacks the all_gather"; exit 1; }
    grep -q "\"name\":\"process_name\",\"ph\":\"M\",\"pid\":$r" "$f" || { echo "FAIL ($case): $f has no track for rank $r"; exit 1; }
    # Records keep communicator ids: the all_gather's, freed before finalize, is still named.
    half=even; [ $((r % 2)) -eq 1 ] && half=odd
    grep -q "\"name\":\"all_gather\".*\"comm\":\"'$half'\"" "$f" ||
      { echo "FAIL ($case): $f does not name the freed communicator '$half'"; exit 1; }
    grep -q '"cache":{"in_use":[0-9]*,"cached":[0-9]*,"peak":[0-9]*,"limit":[0-9]*,"grew":[1-9]' "$f" ||
      { echo "FAIL ($case): $f lacks the storage cache's counts"; exit 1; }
    files+=("$f")
  done
  "$(dirname "$0")/../scripts/merge-traces" "$work/merged.json" "${files[@]}" 2>/dev/null
  [ "$(grep -c '"name":"all_reduce"' "$work/merged.json")" -eq $((3 * np)) ] ||
    { echo "FAIL ($case): merged trace lacks events"; exit 1; }
  if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len({e["pid"] for e in d["traceEvents"]}) == int(sys.argv[2])' \
      "$work/merged.json" "$np" || { echo "FAIL ($case): merged trace is not valid JSON with one track per rank"; exit 1; }
  fi
  ;;
*) echo "unknown case $case"; exit 2 ;;
esac
echo "ok: $case at $np rank(s)"
