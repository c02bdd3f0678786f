#!/usr/bin/env bash
# Builds and runs every test: the plain build, a build with every optional
# part (CUDA, UCX, oneTBB) off, then AddressSanitizer with
# UndefinedBehaviorSanitizer and ThreadSanitizer (gcc), then AddressSanitizer
# with UndefinedBehaviorSanitizer under clang, whose build also holds the
# libFuzzer harnesses (a short run of each is a test). Any failure fails the
# run. GPU tests report "Skipped" (with the reason in their output) where
# there is no GPU. Extra arguments go to cmake's configure step (e.g.
# -DKP_CUDA=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

# Why each skipped test skipped: ctest 3.25 lists skips without their
# reason, which is the first line the test printed (tests/*: "SKIP: ...").
skip_reasons() { # build-dir ctest-output
  python3 - "$1/Testing/Temporary/LastTest.log" "$2" <<'PY'
import re, sys
log = open(sys.argv[1], errors="replace").read()
for name in re.findall(r"^\s*\d+ - (\S+) \(Skipped\)", open(sys.argv[2]).read(), re.M):
    m = re.search(r"Testing: " + re.escape(name) + r"\n.*?Output:\n-+\n(.*?)<end of output>", log, re.S)
    lines = [l for l in (m.group(1) if m else "").splitlines() if l.strip()]
    why = next((l for l in lines if "skip" in l.lower()), lines[0] if lines else "(no output)")
    print("  skipped %-28s %s" % (name, why.strip()[:160]))
PY
}

timings=""
run() { # build-dir, cmake args...
  local dir=$1; shift
  local t0=$SECONDS
  KP_BUILD_DIR=$dir scripts/bootstrap.sh -DKP_WERROR=ON "$@"
  local t1=$SECONDS rc=0
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" 2>&1 | tee "$dir/ctest.out" || rc=$?
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  skip_reasons "$dir" "$dir/ctest.out" || true
  timings="$timings$(printf '  %-12s build %4d s, tests %4d s' "$dir" $((t1 - t0)) $((SECONDS - t1)))\n"
  echo "== $dir: built in $((t1 - t0)) s, tested in $((SECONDS - t1)) s"
  return $rc
}

echo "== plain build"
run build "$@"
# allocator_may_return_null: the misuse tests ask for sizes no machine has;
# the library must see NULL there (as without ASan), not an ASan abort.
# Every optional part off: the library and its whole suite must stand
# without them (the options after "$@" win over CI's -DKP_CUDA=ON).
echo "== every option off (no CUDA, no UCX, no oneTBB)"
run build-off "$@" -DKP_CUDA=OFF -DKP_UCX=OFF -DKP_TBB=OFF -DKP_VIDEO=OFF
# The gcc sanitizer builds leave CUDA out (-DKP_CUDA=OFF after "$@"): on a
# machine without a GPU its code never runs, and compiling it again under
# each sanitizer cost minutes; the plain and clang builds compile it, and
# the GPU machine runs it under compute-sanitizer (scripts/gpu-check.sh).
echo "== address and undefined-behaviour sanitizers (gcc)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
  LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp print_suppressions=0" \
  run build-asan "-DKP_SANITIZE=address;undefined" "$@" -DKP_CUDA=OFF
echo "== thread sanitizer (gcc)"
# UCX's memory hooks (libucm) patch mmap and malloc at load, which
# ThreadSanitizer owns: every program linking UCX crashes at start unless
# they are off. tests/CMakeLists.txt sizes the longest tests down here
# (their full sizes run in the plain and ASan builds).
UCX_MEM_EVENTS=no TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" \
  run build-tsan -DKP_SANITIZE=thread "$@" -DKP_CUDA=OFF
echo "== address and undefined-behaviour sanitizers, libFuzzer harnesses (clang)"
# clang's UBSan flags what gcc's does not (arithmetic on NULL, for one); the
# CUDA host compiler is clang++ too, so one sanitizer runtime links. It
# also builds the engine's cuda path without cuDNN (KP_CUDNN=OFF: its own
# convolution kernels), so that configuration compiles wherever CUDA does.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
  LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp print_suppressions=0" \
  CC=clang KP_PACKAGES="clang libclang-rt-14-dev" \
  run build-clang "-DKP_SANITIZE=address;undefined" -DKP_FUZZ=ON -DCMAKE_CUDA_HOST_COMPILER=clang++ "$@" -DKP_CUDNN=OFF
echo "== all test builds passed in $SECONDS s"
printf "$timings"
