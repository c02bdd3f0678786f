#!/bin/sh
# .npy round trip and bench JSON through the kpipe command line.
#   cli_files.sh KPIPE SOURCE_DIR WORK_DIR
set -eu
kpipe=$1 src=$2 work=$3
mkdir -p "$work"
cd "$work"
rm -f out.npy again.npy bench.json odd.json
# ReLU(a + b) >= 0, so ReLU of it is itself: the second run must reproduce the file.
"$kpipe" run "$src/examples/sample.json" --device cpu --ticks 2 --seed 7 --output output=out.npy
"$kpipe" run "$src/tests/specs/relu_only.json" --device cpu --input input0=out.npy \
  --output output=again.npy
cmp out.npy again.npy
# the file is a NumPy 1.0 array of 16384 little-endian float32 with a 64-byte aligned header
head -c 10 out.npy | od -An -c | grep -q 'N   U   M   P   Y'
[ "$(wc -c < out.npy)" -eq $((128 + 16384 * 4)) ]
# bench writes JSON with the percentiles of both modes
"$kpipe" bench "$src/examples/sample.json" --device cpu --ticks 50 --warmup 5 --json bench.json
for key in '"graph"' '"stream"' '"p50"' '"p99"' '"throughput_ticks_per_s"'; do
  grep -q "$key" bench.json || { echo "bench.json lacks $key"; exit 1; }
done
# a spec path that is not UTF-8 still gives valid JSON: its odd bytes become '?'
odd=$(printf 'spec\377.json')
cp "$src/examples/sample.json" "$odd"
"$kpipe" bench "$odd" --device cpu --ticks 5 --warmup 1 --json odd.json
grep -q '"spec": "spec?.json"' odd.json || { echo "odd.json lacks the spec path"; exit 1; }
rm -f "$odd"
echo PASS
