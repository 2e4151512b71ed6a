#!/bin/sh
# Runs a command that must fail, and checks that its output says why.
#   expect-stop.sh NEEDLE COMMAND [ARGS...]
needle=$1
shift
out=$("$@" 2>&1)
rc=$?
if [ "$rc" -eq 0 ]; then
  printf 'FAIL: exit status 0, expected a failure\n%s\n' "$out"
  exit 1
fi
if ! printf '%s\n' "$out" | grep -qF -- "$needle"; then
  printf 'FAIL: exit status %s, but the output lacks "%s":\n%s\n' "$rc" "$needle" "$out"
  exit 1
fi
echo "ok: exit status $rc with \"$needle\""
