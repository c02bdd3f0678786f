#!/usr/bin/env bash
# On the GPU machine: build with CUDA, run every test (GPU ones included),
# run compute-sanitizer memcheck and racecheck over the GPU tests, then the
# benchmarks. Logs go to $OUT (or ./gpu-check-out); a table is printed last.
# Unpack carried Debian packages first (see README, "GPU machine").
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-check-out}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
rows=()
status=0
row() { rows+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")"); [ "$2" = PASS ] || status=1; }

t0=$(date +%s)
if cmake -S . -B build-gpu -G Ninja -DKP_CUDA=ON -DKP_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
     >"$out/build.log" 2>&1 && cmake --build build-gpu >>"$out/build.log" 2>&1; then
  row "build (cuda, Release)" PASS "$(( $(date +%s) - t0 ))s"
else
  row "build (cuda, Release)" FAIL "see build.log"; tail -30 "$out/build.log"
  printf '%s\n' "${rows[@]}"; exit 1
fi

ctest --test-dir build-gpu --output-on-failure >"$out/ctest.log" 2>&1
ct=$?
summary=$(grep -E "tests passed|tests failed" "$out/ctest.log" | tail -1)
skipped=$(grep -c "(Skipped)" "$out/ctest.log")
[ $ct -eq 0 ] && [ "$skipped" -eq 0 ] && row "ctest (all, incl. gpu)" PASS "$summary" \
  || row "ctest (all, incl. gpu)" FAIL "$summary; $skipped skipped"
[ $ct -eq 0 ] || grep -E "Failed|\*\*\*" "$out/ctest.log" | head -20

if build-gpu/examples/sample examples/sample.json cuda >>"$out/sample.log" 2>&1; then
  row "example sample.json on cuda" PASS "$(tail -1 "$out/sample.log")"
else
  row "example sample.json on cuda" FAIL "$(tail -1 "$out/sample.log")"
fi

for mode in graph stream; do
  if build-gpu/src/kpipe run examples/sample.json --device cuda --mode $mode --ticks 10 --check \
       >>"$out/sample.log" 2>&1; then
    row "kpipe run --check ($mode, cuda)" PASS "$(grep -E 'past tolerance' "$out/sample.log" | tail -1 | sed 's/^ *//')"
  else
    row "kpipe run --check ($mode, cuda)" FAIL "see sample.log"
  fi
done

# GPU test programs and their arguments, for compute-sanitizer.
gpu_tests=("test_conformance cuda" "test_alloc_fail cuda" "test_pipeline cuda" "test_memory cuda")
# The tests provoke CUDA API errors on purpose (misuse cases) and check them
# themselves, so memcheck counts memory errors only.
for tool in memcheck racecheck; do
  opts=(--tool "$tool" --error-exitcode 99)
  [ "$tool" = memcheck ] && opts+=(--report-api-errors no --leak-check full)
  for t in "${gpu_tests[@]}"; do
    set -- $t
    log="$out/tmp-cs.log"
    compute-sanitizer "${opts[@]}" "build-gpu/tests/$1" "${@:2}" >"$log" 2>&1
    rc=$?
    { echo "==== compute-sanitizer $tool $t (rc=$rc)"; cat "$log"; } >>"$out/sanitizers.log"
    rm -f "$log"
    sum=$(grep -oE "(ERROR SUMMARY: [0-9]+ errors?|RACECHECK SUMMARY: [0-9]+ hazards)" \
          "$out/sanitizers.log" | tail -1)
    [ $rc -eq 0 ] && row "$tool $t" PASS "${sum:-no summary}" || row "$tool $t" FAIL "rc=$rc ${sum}"
  done
done

if [ -x bench/run-gpu.sh ]; then
  bench/run-gpu.sh build-gpu "$out" >"$out/bench.log" 2>&1 && row "benchmarks" PASS "bench.log" \
    || row "benchmarks" FAIL "see bench.log"
  cat "$out/bench.log"
fi

echo
echo "== gpu-check on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
printf '%s\n' "${rows[@]}"
exit $status
