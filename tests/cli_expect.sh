#!/bin/sh
# Runs a command and checks its exit status and that its output (stdout and
# stderr together) matches an extended regular expression.
#   cli_expect.sh STATUS REGEX COMMAND [ARG...]
want=$1
regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
echo "$out"
if [ "$rc" -ne "$want" ]; then
  echo "FAIL: exit status $rc, expected $want: $*"
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
  echo "FAIL: output does not match /$regex/: $*"
  exit 1
fi
echo "PASS"
