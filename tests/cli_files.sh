#!/bin/sh
# .npy round trip and bench JSON through the kpipe command line.
#   cli_files.sh KPIPE SOURCE_DIR WORK_DIR
set -eu
kpipe=$1 src=$2 work=$3
mkdir -p "$work"
cd "$work"
rm -f out.npy again.npy bench.json odd.json flow.json flow_out.npy trace.json clip.y4m \
  clip_sharp.y4m btrace.json progress.txt clip_progress.txt
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
# dynamic sizes: files of 1000 and 5000 elements cycled per tick, checked against cpu;
# the last of 4 ticks takes the second files, so the output holds 5000 floats
"$kpipe" run "$src/tests/specs/relu_1000.json" --device cpu --seed 3 --output output=a1k.npy
"$kpipe" run "$src/tests/specs/relu_1000.json" --device cpu --seed 4 --output output=b1k.npy
"$kpipe" run "$src/tests/specs/relu_5000.json" --device cpu --seed 5 --output output=a5k.npy
"$kpipe" run "$src/tests/specs/relu_5000.json" --device cpu --seed 6 --output output=b5k.npy
"$kpipe" run "$src/examples/dynamic.json" --ticks 4 --check \
  --input input0=a1k.npy --input input0=a5k.npy --input input1=b1k.npy --input input1=b5k.npy \
  --output output=dyn.npy > dyn.txt
grep -q 'output       f32\[5000\]' dyn.txt || { cat dyn.txt; echo "dyn.txt: no f32[5000] output"; exit 1; }
grep -q 'FAIL' dyn.txt && { cat dyn.txt; exit 1; }
[ "$(wc -c < dyn.npy)" -eq $((128 + 5000 * 4)) ]
# sizes that differ between the two inputs of one tick: the engine names them
if "$kpipe" run "$src/examples/dynamic.json" --device cpu --input input0=a1k.npy \
  --input input1=b5k.npy > mixed.txt 2>&1; then
  echo "mixed sizes were accepted"; exit 1
fi
grep -q 'arg0 has 1000 elements but arg1 5000' mixed.txt || { cat mixed.txt; exit 1; }
# a fixed-size pipeline refuses another size
if "$kpipe" run "$src/examples/sample.json" --device cpu --input input0=a1k.npy > fixed.txt 2>&1; then
  echo "a 1000-element file fed a fixed 16384 input"; exit 1
fi
grep -q 'holds f32\[1000\], the pipeline takes f32\[16384\]' fixed.txt || { cat fixed.txt; exit 1; }
# a flow: synthetic frames through two pipelines into an .npy sink, with its health as JSON
"$kpipe" flow "$src/examples/flow.json" --device cpu --quiet --json flow.json --trace trace.json \
  > flow.txt
grep -q '"ph": "X"' trace.json || { echo "trace.json has no slices"; exit 1; }
python3 -c 'import json,sys; json.load(open("trace.json"))' 2>/dev/null || \
  { command -v python3 >/dev/null && { echo "trace.json is not JSON"; exit 1; }; }
grep -q '2000 frames in' flow.txt || { cat flow.txt; exit 1; }
grep -q '"frames": 2000' flow.json || { cat flow.json; exit 1; }
[ "$(wc -c < flow_out.npy)" -eq $((128 + 16384 * 4)) ]
# the report names every file the run wrote, with its size
grep -q '^files written:$' flow.txt || { cat flow.txt; exit 1; }
grep -q '^  flow_out.npy: 65664 bytes, 64.1 KiB (sink "sink")$' flow.txt || { cat flow.txt; exit 1; }
grep -q '^  flow.json: [0-9]* bytes.* (--json)$' flow.txt || { cat flow.txt; exit 1; }
grep -q '^  trace.json: [0-9]* bytes.* (--trace)$' flow.txt || { cat flow.txt; exit 1; }
# off a terminal, progress only when asked: --progress=S gives a line every S
# seconds on stderr and one at the end, with the total the source knows
"$kpipe" flow "$src/examples/flow.json" --device cpu 2> progress.txt > /dev/null
[ ! -s progress.txt ] || { cat progress.txt; echo "progress printed off a terminal unasked"; exit 1; }
"$kpipe" flow "$src/examples/flow.json" --device cpu --progress=0.1 2> progress.txt > /dev/null
cat progress.txt
[ "$(grep -c '^frame=[0-9]*/2000 [0-9]*% fps=[0-9.]* elapsed=' progress.txt)" -ge 2 ] ||
  { echo "fewer than 2 progress lines"; exit 1; }
tail -n 1 progress.txt | grep -q '^frame=2000/2000 100% fps=[0-9.]* elapsed=[0-9:]* drops=0 ' ||
  { echo "the last progress line is not the final count"; exit 1; }
# the video example of docs/video.md: a clip drawn on the device, sharpened; the
# output has the clip's header and size, and differs where it sharpened
"$kpipe" flow "$src/examples/make_clip.json" --device cpu --progress 2> clip_progress.txt > clip.txt
grep -q '^  clip.y4m: 20736403 bytes, 19.8 MiB (sink "write")$' clip.txt || { cat clip.txt; exit 1; }
# testsrc draws 30 frames/s: a speed against real time
grep -q '^frame=60/60 100% fps=[0-9.]* speed=[0-9.e+]*x ' clip_progress.txt ||
  { cat clip_progress.txt; exit 1; }
# a y4m source's length is its file's frame count
"$kpipe" flow "$src/examples/video.json" --device cpu --progress 2> clip_progress.txt > video.txt
grep -q '^frame=60/60 100% ' clip_progress.txt || { cat clip_progress.txt; exit 1; }
grep -q '60 frames in' video.txt || { cat video.txt; exit 1; }
[ "$(head -c 42 clip.y4m)" = "YUV4MPEG2 W640 H360 F30:1 Ip A1:1 C420jpeg" ]
[ "$(head -c 42 clip_sharp.y4m)" = "YUV4MPEG2 W640 H360 F30:1 Ip A1:1 C420jpeg" ]
[ "$(wc -c < clip_sharp.y4m)" -eq "$(wc -c < clip.y4m)" ]
[ "$(wc -c < clip.y4m)" -eq $((43 + 60 * (6 + 640 * 360 * 3 / 2))) ]
if cmp -s clip.y4m clip_sharp.y4m; then echo "the sharpened clip equals the clip"; exit 1; fi
# bench on a flow runs it to its end, with a trace; tick options are refused
"$kpipe" bench "$src/examples/flow.json" --device cpu --trace btrace.json > bflow.txt
grep -q '2000 frames in' bflow.txt && grep -q '"ph": "X"' btrace.json || { cat bflow.txt; exit 1; }
if "$kpipe" bench "$src/examples/flow.json" --ticks 5 2> bflow_err.txt; then exit 1; fi
grep -q 'is a flow' bflow_err.txt || { cat bflow_err.txt; exit 1; }
# a spec path that is not UTF-8 still gives valid JSON: its odd bytes become '?'
odd=$(printf 'spec\377.json')
cp "$src/examples/sample.json" "$odd"
"$kpipe" bench "$odd" --device cpu --ticks 5 --warmup 1 --json odd.json
grep -q '"spec": "spec?.json"' odd.json || { echo "odd.json lacks the spec path"; exit 1; }
rm -f "$odd"
echo PASS
