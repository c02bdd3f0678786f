#!/bin/sh
# What the kpipe command line says, where a pattern that must match is not
# enough: what must not be there, and how tables line up.
#   cli_messages.sh KPIPE SOURCE_DIR WORK_DIR
set -eu
kpipe=$1 src=$2 work=$3
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

# an error leads with the user's problem: the file, the stage by its name,
# what is wrong; no library function names unless --verbose asks for them
cat > bad_stage.json <<'EOF'
{"kpipe_flow": 1, "stages": [
  {"name": "read", "source": "y4m", "path": "no_such_clip.y4m"},
  {"name": "write", "sink": "y4m", "path": "never.y4m"}]}
EOF
for cmd in flow validate; do
  if "$kpipe" $cmd bad_stage.json --device cpu > out.txt 2> err.txt; then fail "$cmd took a missing clip"; fi
  cat err.txt
  grep -q "^kpipe $cmd: bad_stage.json: \$.stages\[0\] (stage \"read\"): no_such_clip.y4m: cannot open" err.txt ||
    fail "$cmd: the message does not lead with the file, the stage and the cause"
  if grep -q 'kp_[a-z_]*: ' err.txt; then fail "$cmd: a library function's name without --verbose"; fi
  "$kpipe" $cmd bad_stage.json --device cpu --verbose 2> verbose.txt > out.txt || true
  cat verbose.txt
  grep -q "^kpipe $cmd: input/output error: kp_flow_create_from_file[a-z_]*: bad_stage.json: " verbose.txt ||
    fail "$cmd --verbose: no status and call chain"
done
# --verbose is global: before the command as well as after it
"$kpipe" --verbose run "$src/examples/sample.json" --device tpu 2> verbose.txt && fail "tpu opened"
grep -q '^kpipe run: no such device: kp_device_open: unknown device "tpu"' verbose.txt ||
  { cat verbose.txt; fail "--verbose before the command"; }
"$kpipe" run "$src/examples/sample.json" --device tpu 2> plain.txt && fail "tpu opened"
grep -q '^kpipe run: unknown device "tpu"' plain.txt || { cat plain.txt; fail "the plain message"; }

# kpipe help CMD prints what kpipe CMD --help prints
for cmd in run validate bench flow info; do
  "$kpipe" help $cmd > help.txt
  "$kpipe" $cmd --help > dashhelp.txt
  cmp help.txt dashhelp.txt || fail "help $cmd differs from $cmd --help"
done

# --version: the version and the libraries, as info's first line has them
"$kpipe" --version > version.txt
cat version.txt
version=$(sed -n 's/^kpipe \([0-9][0-9.]*\)$/\1/p' version.txt)
[ -n "$version" ] || fail "--version: no version line"
"$kpipe" info > info.txt
head -n 1 info.txt | grep -q "^kpipe $version (" || fail "--version and info disagree"
libs=$(sed -n 's/^libraries: //p' version.txt)
[ -n "$libs" ] && head -n 1 info.txt | grep -qF "($libs)" || fail "--version's libraries differ from info's"

# the cpu backend's logical devices on one line, not one line per device
cat info.txt
grep -q '^    cpu:0\.\.cpu:[0-9]* ([0-9]* logical devices sharing [0-9]* cores*): ' info.txt ||
  fail "info: the cpu devices are not one line of logical devices"
if grep -q '^    cpu:1 ' info.txt; then fail "info: a line per cpu device"; fi
# with the cuda backend built and no driver library at all, info says so,
# not that the driver is too old
if grep -q '^  cuda (kernels: cuda): no device' info.txt &&
  command -v python3 > /dev/null &&
  ! python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2> /dev/null; then
  grep -q 'no device: no NVIDIA driver (libcuda.so.1 not found)' info.txt ||
    fail "info: no driver, but the reason does not say so"
fi

# validate: the binding line says what happens; the fused group reads its
# inputs in place, so nothing is called a copy
"$kpipe" validate "$src/examples/fused.json" > fused.txt
cat fused.txt
if grep -q 'binding copy' fused.txt; then fail "fused.json: zero-copy inputs, and a copy binding"; fi
grep -q '^graph cache: .*inputs read in place, none copied' fused.txt || fail "fused.json: binding line"
# the arena table's columns line up whatever the length of a module's id
awk '/^arena:/ { on = 1; next }
     on && /^  module / { col = index($0, "what"); next }
     on && /^  totals:/ { exit bad }
     on && (substr($0, col - 2, 2) != "  " || substr($0, col, 1) == " ") { bad = 1 }
     END { exit bad }' fused.txt || fail "fused.json: the arena table's columns do not line up"

# bench: a graph made before the first call is not called a miss
"$kpipe" bench "$src/examples/sample.json" --device cpu --mode graph --ticks 1 --warmup 0 > cache.txt
cat cache.txt
grep -q '^graph cache: 1 graph held, .*: [0-9]* hits, 0 misses; 1 graph made before the first call' cache.txt ||
  fail "bench: the graph cache's line"
echo PASS
