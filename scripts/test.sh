#!/usr/bin/env bash
# Builds and runs every test: the plain build, then AddressSanitizer with
# UndefinedBehaviorSanitizer, then ThreadSanitizer. Any failure fails the run.
# GPU tests report "Skipped" (with the reason in their output) where there is
# no GPU. Extra arguments go to cmake's configure step (e.g. -DKP_CUDA=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

run() { # build-dir, cmake args...
  local dir=$1; shift
  KP_BUILD_DIR=$dir scripts/bootstrap.sh -DKP_WERROR=ON "$@"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs"
}

echo "== plain build"
run build "$@"
echo "== address and undefined-behaviour sanitizers"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  run build-asan "-DKP_SANITIZE=address;undefined" "$@"
echo "== thread sanitizer"
TSAN_OPTIONS=halt_on_error=1 run build-tsan -DKP_SANITIZE=thread "$@"
echo "== all test builds passed"
