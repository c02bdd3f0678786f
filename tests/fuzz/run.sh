#!/bin/sh
# One short libFuzzer run as a test: its log (a line per new input) goes to
# LOG, and only its end is printed: the final stats when it passes, and
# when it fails the report that says why (the crash, leak, timeout or
# memory limit, with the input's artifact), which a test log cut to its
# start would lose.
#   run.sh LOG FUZZER ARGS...
log=$1
shift
"$@" > "$log" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
  echo "FAIL: $1 exited $rc; the end of its log ($log):"
  tail -n 100 "$log"
else
  tail -n 12 "$log"
fi
exit "$rc"
