#!/bin/sh
# Every function declared in the public headers is called in the misuse test.
#   api_coverage.sh INCLUDE_DIR TEST_SOURCE
set -eu
inc=$1 test=$2
missing=""
for fn in $(cat "$inc"/kpipe/*.h | grep -oE '\bkp_[a-z0-9_]+\(' | tr -d '(' | sort -u); do
  grep -qE "\b$fn\(" "$test" || missing="$missing $fn"
done
if [ -n "$missing" ]; then
  echo "FAIL: public functions the misuse test never calls:$missing"
  exit 1
fi
echo "PASS: $(cat "$inc"/kpipe/*.h | grep -oE '\bkp_[a-z0-9_]+\(' | sort -u | wc -l) public functions, all called"
