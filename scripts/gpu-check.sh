#!/usr/bin/env bash
# On the GPU machine: build with CUDA, run every test (GPU ones included),
# compute-sanitizer memcheck and racecheck over the GPU tests, the soak (a
# million ticks per execution mode) and the benchmarks. Logs go to $OUT (or
# ./gpu-check-out). Stages can run in separate calls, each well under ten
# minutes; their rows collect in build-gpu/gpu-check.rows and the whole
# table is printed after every call.
#   scripts/gpu-check.sh [build] [test] [sanitize] [soak] [bench] [cache] [flowbench] [taskbench] [hostpath]
#                        [multigpu] [video] [streams] [parallel] [fusion] [python] [remote] [onnx]
#                        [fp16] [srmodel]
#   (none: all but multigpu, which needs two GPUs: the 2 x H200 machine)
# Unpack carried Debian packages first (see docs/gpu-machine.md).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-check-out}
mkdir -p "$out" build-gpu
export PATH=/usr/local/cuda/bin:$PATH
rows=build-gpu/gpu-check.rows
status=0
row() { printf '%-40s %-6s %s\n' "$1" "$2" "$3" >>"$rows"; [ "$2" = PASS ] || status=1; }

stage_build() {
  : >"$rows"
  local t0=$(date +%s)
  # cuDNN's headers: the machine has them only in PyTorch's environment
  local cudnn_root
  cudnn_root=$(python3 -c "import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])" 2>/dev/null)
  if cmake -S . -B build-gpu -G Ninja -DKP_CUDA=ON -DKP_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
       ${cudnn_root:+-DKP_CUDNN_ROOT=$cudnn_root} >"$out/build.log" 2>&1 \
       && cmake --build build-gpu ${KP_BUILD_TARGETS:+--target $KP_BUILD_TARGETS} >>"$out/build.log" 2>&1; then
    row "build (cuda, Release)" PASS "$(( $(date +%s) - t0 ))s"
  else
    row "build (cuda, Release)" FAIL "see build.log"; tail -30 "$out/build.log"
    return 1
  fi
}

stage_test() {
  local t0=$(date +%s)
  ctest --test-dir build-gpu --output-on-failure ${KP_CTEST_REGEX:+-R "$KP_CTEST_REGEX"} >"$out/ctest.log" 2>&1
  local ct=$? summary skipped
  summary=$(grep -E "tests passed|tests failed" "$out/ctest.log" | tail -1)
  skipped=$(grep -c "(Skipped)" "$out/ctest.log")
  # the two-GPU flow test skips where there is one GPU: the multigpu stage
  # runs it where there are two
  local gpus note=""
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
  if [ "$gpus" -lt 2 ] && grep -qE "flow_devices_cuda .*Skipped" "$out/ctest.log"; then
    skipped=$((skipped - 1))
    note="; flow_devices_cuda skipped: $gpus GPU (multigpu stage)"
  fi
  if [ $ct -eq 0 ] && [ "$skipped" -eq 0 ]; then
    row "ctest (all, incl. gpu)" PASS "$summary, $(( $(date +%s) - t0 ))s$note"
  else
    row "ctest (all, incl. gpu)" FAIL "$summary; $skipped skipped"
    grep -E "Failed|\*\*\*|wrong outputs" "$out/ctest.log" | head -20
  fi
  local copies
  copies=$(grep -E "copies_cuda .*(Passed|Failed)" "$out/ctest.log" | grep -oE "(Passed|Failed) +[0-9.]+ sec")
  row "copies_cuda: 1M+16M, 3 sources x 2 modes" "$(echo "$copies" | grep -q Passed && echo PASS || echo FAIL)" \
      "${copies:-not run}; x same/new buffers, 100 ticks each, every element"
  if build-gpu/examples/sample examples/sample.json cuda >>"$out/sample.log" 2>&1; then
    row "example sample.json on cuda" PASS "$(tail -1 "$out/sample.log")"
  else
    row "example sample.json on cuda" FAIL "$(tail -1 "$out/sample.log")"
  fi
  if (cd "$out" && "$OLDPWD/build-gpu/src/kpipe" flow "$OLDPWD/examples/flow.json" --device cuda \
        --quiet >flow.log 2>&1); then
    row "kpipe flow examples/flow.json (cuda)" PASS "$(grep -E 'frames in' "$out/flow.log")"
  else
    row "kpipe flow examples/flow.json (cuda)" FAIL "$(tail -1 "$out/flow.log")"
  fi
  # the video example of docs/video.md on cuda and on cpu: the clip (integer stages)
  # must be identical, the sharpened output within 1 of 255 per sample
  local dev
  for dev in cuda cpu; do
    mkdir -p "$out/video_$dev"
    (cd "$out/video_$dev" && "$OLDPWD/build-gpu/src/kpipe" flow "$OLDPWD/examples/make_clip.json" \
       --device $dev --quiet && "$OLDPWD/build-gpu/src/kpipe" flow "$OLDPWD/examples/video.json" \
       --device $dev --quiet) >"$out/video_$dev.log" 2>&1 \
      && row "kpipe flow examples/video.json ($dev)" PASS "$(grep -E 'frames in' "$out/video_$dev.log" | tail -1)" \
      || row "kpipe flow examples/video.json ($dev)" FAIL "$(tail -1 "$out/video_$dev.log")"
  done
  if cmp -s "$out/video_cuda/clip.y4m" "$out/video_cpu/clip.y4m"; then
    row "video clip: cuda = cpu (testsrc, y4m)" PASS "byte-identical"
  else
    row "video clip: cuda = cpu (testsrc, y4m)" FAIL "files differ"
  fi
  local vd
  vd=$(python3 scripts/y4m_diff.py "$out/video_cuda/clip_sharp.y4m" "$out/video_cpu/clip_sharp.y4m" 2>&1)
  [ $? -eq 0 ] && row "video output: cuda vs cpu (<= 1/255)" PASS "$vd" \
    || row "video output: cuda vs cpu (<= 1/255)" FAIL "$vd"
  for mode in graph stream; do
    if build-gpu/src/kpipe run examples/sample.json --device cuda --mode $mode --ticks 10 --check \
         >>"$out/sample.log" 2>&1; then
      row "kpipe run --check ($mode, cuda)" PASS "$(grep -E 'past tolerance' "$out/sample.log" | tail -1 | sed 's/^ *//')"
    else
      row "kpipe run --check ($mode, cuda)" FAIL "see sample.log"
    fi
  done
}

# GPU test programs and their arguments, for compute-sanitizer (the copy
# test at one million elements, three ticks per case: memcheck is slow).
gpu_tests=("tests/test_conformance cuda" "tests/test_alloc_fail cuda" "tests/test_pipeline cuda"
           "tests/test_memory cuda" "tests/test_copies cuda 3 1048576" "tests/test_api_misuse cuda"
           "tests/test_graph_cache cuda" "tests/test_dynamic cuda 20" "tests/test_flow cuda 50"
           "tests/test_video cuda" "tests/test_video_files cuda" "tests/test_tasks cuda" "tests/test_cholesky cuda"
           "tests/test_flow_graph cuda" "tests/test_resize cuda" "tests/test_video_streams cuda"
           "tests/test_fusion cuda SMALL" "tests/test_remote cuda frames_*"
           "tests/test_frame_formats cuda" "tests/test_video_deep cuda"
           "examples/custom_module examples/custom_module/scale_clamp.json cuda 3")

# One program under compute-sanitizer's memcheck and racecheck: a row each.
# The tests provoke CUDA API errors on purpose (misuse cases) and check
# them themselves, so memcheck counts memory errors and leaks only.
# compute-sanitizer 13.0 crashes inside cuGraphLaunch when a graph's baked
# input address was freed and handed out again (legal, and plain runs
# pass): under the tools, tests keep such buffers to the end. Timing
# checks (KP_TEST_NO_TIMING) only print there: the tool sets the pace.
sanitize_one() {
  local tool log rc sum
  for tool in memcheck racecheck; do
    local opts=(--tool "$tool" --error-exitcode 99)
    [ "$tool" = memcheck ] && opts+=(--report-api-errors no --leak-check full)
    log="$out/tmp-cs.log"
    KP_TEST_NO_ADDRESS_REUSE=1 KP_TEST_NO_TIMING=1 compute-sanitizer "${opts[@]}" "$@" >"$log" 2>&1
    rc=$?
    { echo "==== compute-sanitizer $tool $* (rc=$rc)"; cat "$log"; } >>"$out/sanitizers.log"
    sum=$(grep -oE "(ERROR SUMMARY: [0-9]+ errors?|RACECHECK SUMMARY: [0-9]+ hazards?)" "$log" | tail -1)
    rm -f "$log"
    [ $rc -eq 0 ] && row "$tool ${*#build-gpu/}" PASS "${sum:-no summary}" || row "$tool ${*#build-gpu/}" FAIL "rc=$rc ${sum}"
  done
}

stage_sanitize() {
  local t
  for t in "${gpu_tests[@]}"; do
    # KP_SANITIZE_ONLY (a regular expression): only the matching programs
    [[ -n "${KP_SANITIZE_ONLY:-}" && ! "$t" =~ $KP_SANITIZE_ONLY ]] && continue
    sanitize_one build-gpu/$t
  done
}

# Video files: the README's round trip on cuda (NVDEC in, libx264 out) and
# cpu, then bench_video (decode against a hand NVDEC loop, end to end).
stage_video() {
  local dev
  for dev in cuda cpu; do
    mkdir -p "$out/mp4_$dev"
    (cd "$out/mp4_$dev" && "$OLDPWD/build-gpu/src/kpipe" flow "$OLDPWD/examples/make_clip_mp4.json" \
       --device $dev --quiet && "$OLDPWD/build-gpu/src/kpipe" flow "$OLDPWD/examples/video_mp4.json" \
       --device $dev) >"$out/mp4_$dev.log" 2>&1 \
      && row "kpipe flow examples/video_mp4.json ($dev)" PASS "$(grep -E 'frames in' "$out/mp4_$dev.log" | tail -1)" \
      || row "kpipe flow examples/video_mp4.json ($dev)" FAIL "$(tail -1 "$out/mp4_$dev.log")"
    cat "$out/mp4_$dev.log"
    rm -f "$out/mp4_$dev"/*.mp4
  done
  mkdir -p /tmp/kp_bench_video
  if build-gpu/bench/bench_video /tmp/kp_bench_video ${KP_VIDEO_FRAMES:-300 120} >"$out/bench_video.md" 2>&1; then
    row "bench_video" PASS "bench_video.md"
  else
    row "bench_video" FAIL "see bench_video.md"
  fi
  cat "$out/bench_video.md"
  rm -rf /tmp/kp_bench_video
}

# Many streams: the README's 16-stream example on cuda (clips made, then
# decoded on NVDEC, batched through one pipeline, a file per stream), the
# live example over loopback, then bench_video's many-streams table.
stage_streams() {
  local d="$out/streams"
  mkdir -p "$d"
  (cd "$d" && "$OLDPWD/build-gpu/src/kpipe" flow "$OLDPWD/examples/make_streams.json" --device cuda --quiet \
     && "$OLDPWD/build-gpu/src/kpipe" flow "$OLDPWD/examples/streams.json" --device cuda --quiet \
     && [ "$(ls streams_out*.mp4 | wc -l)" -eq 16 ]) >"$out/streams.log" 2>&1 \
    && row "kpipe flow examples/streams.json (cuda)" PASS "$(grep -E 'frames in' "$out/streams.log" | tail -1)" \
    || row "kpipe flow examples/streams.json (cuda)" FAIL "$(tail -1 "$out/streams.log")"
  cat "$out/streams.log"
  (cd "$d" && { timeout 30 "$OLDPWD/build-gpu/src/kpipe" flow "$OLDPWD/examples/live_send.json" --device cuda \
     --quiet >send.log 2>&1 & } && sleep 0.5 \
     && timeout 30 "$OLDPWD/build-gpu/src/kpipe" flow "$OLDPWD/examples/live_udp.json" --device cuda) \
     >"$out/live.log" 2>&1 \
    && row "kpipe flow examples/live_udp.json (cuda)" PASS "$(grep -E 'frames in' "$out/live.log" | tail -1)" \
    || row "kpipe flow examples/live_udp.json (cuda)" FAIL "$(tail -1 "$out/live.log")"
  cat "$out/live.log"
  rm -rf "$d"
  mkdir -p /tmp/kp_bench_streams
  if build-gpu/bench/bench_video /tmp/kp_bench_streams streams ${KP_STREAM_FRAMES:-150} \
       >"$out/bench_streams.md" 2>&1; then
    row "bench_video streams" PASS "bench_streams.md"
  else
    row "bench_video streams" FAIL "see bench_streams.md"
  fi
  cat "$out/bench_streams.md"
  rm -rf /tmp/kp_bench_streams
}

# One file on several NVDEC sessions: bench_video's parallel table (2160p
# and 1080p, 1 to 7 sessions).
stage_parallel() {
  mkdir -p /tmp/kp_bench_parallel
  if build-gpu/bench/bench_video /tmp/kp_bench_parallel parallel ${KP_PARALLEL_FRAMES:-300} \
       >"$out/bench_parallel.md" 2>&1; then
    row "bench_video parallel" PASS "bench_parallel.md"
  else
    row "bench_video parallel" FAIL "$(tail -1 "$out/bench_parallel.md")"
  fi
  cat "$out/bench_parallel.md"
  rm -rf /tmp/kp_bench_parallel
}

# KP_SOAK_VIDEO_ONLY=1: the video soaks alone (test_soak's 1M ticks skipped)
stage_soak() {
  if [ -z "${KP_SOAK_VIDEO_ONLY:-}" ]; then
    if build-gpu/tests/test_soak cuda 1000000 100000 1000 >"$out/soak.log" 2>&1; then
      row "soak: 1M ticks per mode (cuda)" PASS "allocators, host allocs, RSS flat; see soak.log"
    else
      row "soak: 1M ticks per mode (cuda)" FAIL "$(grep -vE '^ ' "$out/soak.log" | tail -2 | tr '\n' ' ')"
    fi
    cat "$out/soak.log"
  fi
  # 10,000 decoder open/close cycles (pooled NVDEC decoders), and 1,000
  # size switches (1080p and 720p) in one stream: memory, RSS and threads
  # back at their baseline
  local rc=0
  build-gpu/tests/test_video_streams cuda 10000 >"$out/soak_decoders.log" 2>&1 || rc=$?
  local bad; bad=$(grep -E 'ERROR|FAILED' "$out/soak_decoders.log" | head -2 | tr '\n' ' ')
  local dec; dec=$(grep -oE 'decoder soak: .*' "$out/soak_decoders.log")
  local sw; sw=$(grep -oE 'size switches: .*' "$out/soak_decoders.log")
  [ $rc -eq 0 ] && row "soak: 10k decoder open/close (cuda)" PASS "$dec" \
    || row "soak: 10k decoder open/close (cuda)" FAIL "rc=$rc $bad"
  [ $rc -eq 0 ] && [ -n "$sw" ] && row "soak: 1,000 size switches 1080p/720p (cuda)" PASS "$sw" \
    || row "soak: 1,000 size switches 1080p/720p (cuda)" FAIL "rc=$rc ${sw:-no figures} $bad"
  grep -E '^(live|strict|size|decoder)' "$out/soak_decoders.log" || true
}

stage_bench() {
  if [ -x bench/run-gpu.sh ]; then
    bench/run-gpu.sh build-gpu "$out" >"$out/bench.log" 2>&1 && row "benchmarks" PASS "bench.log" \
      || row "benchmarks" FAIL "see bench.log"
    cat "$out/bench.log"
  fi
}

# The graph cache and dynamic shapes beside PyTorch (bench_cache, torch_cache.py).
stage_cache() {
  if build-gpu/bench/bench_cache --json "$out/bench_cache.json" >"$out/cache.log" 2>&1; then
    row "bench_cache" PASS "cache.log"
  else
    row "bench_cache" FAIL "see cache.log"
  fi
  cat "$out/cache.log"
  if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    if PYTHONUNBUFFERED=1 timeout 420 python3 bench/torch_cache.py >"$out/torch_cache.json" \
         2>"$out/torch_cache.log"; then
      row "torch_cache.py" PASS "torch_cache.json"
    else
      row "torch_cache.py" FAIL "see torch_cache.log"; tail -5 "$out/torch_cache.log"
    fi
    python3 bench/report_cache.py "$out/bench_cache.json" "$out/torch_cache.json" || true
  fi
}

# Flows: per-frame overhead against oneTBB, the four-stage GPU flow against
# oneTBB (bench_flow_gpu), and the video example at 3840x2160.
stage_flowbench() {
  { build-gpu/bench/bench_flow 200000
    if [ -x build-gpu/bench/tbb_flow ]; then build-gpu/bench/tbb_flow 200000; fi
  } >"$out/flowbench.log" 2>&1 && row "bench_flow, tbb_flow (empty stages)" PASS "flowbench.log" \
    || row "bench_flow, tbb_flow (empty stages)" FAIL "see flowbench.log"
  if [ -x build-gpu/bench/bench_flow_gpu ]; then
    build-gpu/bench/bench_flow_gpu 20000 256 1024 >>"$out/flowbench.log" 2>&1 \
      && row "bench_flow_gpu (kpipe vs oneTBB)" PASS "flowbench.log" \
      || row "bench_flow_gpu (kpipe vs oneTBB)" FAIL "see flowbench.log"
  else
    row "bench_flow_gpu (kpipe vs oneTBB)" FAIL "not built (oneTBB missing?)"
  fi
  local d="$out/video_4k"
  mkdir -p "$d"
  sed 's/640/3840/g; s/360/2160/g; s/"frames": 60/"frames": 30/' examples/make_clip.json >"$d/make_clip.json"
  sed 's/"path": "clip.y4m"}/"path": "clip.y4m", "loop": true, "frames": 600}/; s#clip_sharp.y4m#/dev/null#' \
    examples/video.json >"$d/video.json"
  sed 's/640/3840/g; s/360/2160/g; s/691200/24883200/' examples/video_enhance.json >"$d/video_enhance.json"
  (cd "$d" && "$OLDPWD/build-gpu/src/kpipe" flow make_clip.json --device cuda --quiet \
     && "$OLDPWD/build-gpu/src/kpipe" flow video.json --device cuda --quiet) >>"$out/flowbench.log" 2>&1 \
    && row "video 3840x2160, 600 frames (cuda)" PASS "$(grep -E 'frames in' "$out/flowbench.log" | tail -1)" \
    || row "video 3840x2160, 600 frames (cuda)" FAIL "see flowbench.log"
  rm -f "$d/clip.y4m"
  cat "$out/flowbench.log"
}

# The host path, three rounds in one run, each with its same-run peers:
# empty flow stages (spinning and not) against oneTBB and the futex wake
# floor; the GPU flow at 256 KiB frames against oneTBB (saturated, 50%
# load, against its slowest stage); time per submit against live regions;
# the Task Bench patterns against CUDASTF's stream context, alternating;
# then the graph cache's misses and the rebind tick's host phases.
# KP_HOSTPATH_PARTS: "flows tasks cache" (the default) or a part of it.
stage_hostpath() {
  local log="$out/hostpath.log" r parts=${KP_HOSTPATH_PARTS:-flows tasks cache}
  : >"$log"
  for r in 1 2 3; do
    echo "== round $r" >>"$log"
    if [[ " $parts " == *" flows "* ]]; then
      build-gpu/bench/bench_flow 200000 >>"$log" 2>&1
      if [ -x build-gpu/bench/tbb_flow ]; then build-gpu/bench/tbb_flow 200000 >>"$log" 2>&1; fi
      if [ -x build-gpu/bench/bench_flow_gpu ]; then
        build-gpu/bench/bench_flow_gpu ${KP_HOSTPATH_FRAMES:-10000} 256 >>"$log" 2>&1
      fi
    fi
    [[ " $parts " == *" tasks "* ]] || continue
    build-gpu/bench/bench_tasks scaling cuda >>"$log" 2>&1
    build-gpu/bench/bench_tasks patterns cuda 16 16 10 >>"$log" 2>&1
    if [ -x .baselines/cccl/task_bench_stream ]; then
      echo "== CUDASTF task_bench, stream context: 16 16 10" >>"$log"
      .baselines/cccl/task_bench_stream 16 16 10 >>"$log" 2>&1
    fi
  done
  row "hostpath: $parts (3 rounds)" PASS "hostpath.log"
  if [[ " $parts " != *" cache "* ]]; then cat "$log"; return 0; fi
  if build-gpu/bench/bench_cache --quick --json "$out/bench_cache.json" >"$out/cache.log" 2>&1; then
    row "bench_cache --quick" PASS "cache.log"
  else
    row "bench_cache --quick" FAIL "see cache.log"
  fi
  python3 bench/report_cache.py "$out/bench_cache.json" >>"$out/cache.log" 2>&1 || true
  cat "$log" "$out/cache.log"
}

# Tasks: the Cholesky test at large sizes, the example against cuSOLVER's
# one call, the Task Bench patterns against CUDASTF's task_bench (built
# into .baselines/ by bench/build-cudastf.sh, when it is there), and time
# per submit against live regions.
stage_taskbench() {
  local log="$out/taskbench.log" n
  build-gpu/tests/test_cholesky cuda BIG >"$out/cholesky_big.log" 2>&1 \
    && row "test_cholesky cuda BIG (to n 4100)" PASS "$(grep -c ' OK ' "$out/cholesky_big.log") tests" \
    || row "test_cholesky cuda BIG (to n 4100)" FAIL "see cholesky_big.log"
  : >"$log"
  for n in 8192 16384; do
    if build-gpu/examples/cholesky $n --nb 1024 --compare --reps 5 >>"$log" 2>&1; then
      row "cholesky $n, tiles 1024 (cuda)" PASS "$(grep 'graph form / cuSOLVER' "$log" | tail -1)"
    else
      row "cholesky $n, tiles 1024 (cuda)" FAIL "see taskbench.log"
    fi
  done
  build-gpu/examples/cholesky 16384 --nb 2048 --compare --reps 3 >>"$log" 2>&1 || true
  build-gpu/bench/bench_tasks patterns cuda 16 16 10 >>"$log" 2>&1 \
    && row "bench_tasks patterns (cuda)" PASS "taskbench.log" || row "bench_tasks patterns (cuda)" FAIL "see taskbench.log"
  local b
  for b in stream graph; do
    if [ -x .baselines/cccl/task_bench_$b ]; then
      echo "== CUDASTF task_bench, $b context: 16 16 10" >>"$log"
      .baselines/cccl/task_bench_$b 16 16 10 >>"$log" 2>&1 \
        && row "CUDASTF task_bench ($b context)" PASS "taskbench.log" \
        || row "CUDASTF task_bench ($b context)" FAIL "see taskbench.log"
    fi
  done
  build-gpu/bench/bench_tasks scaling cuda >>"$log" 2>&1 \
    && row "bench_tasks scaling (cuda)" PASS "taskbench.log" || row "bench_tasks scaling (cuda)" FAIL "see taskbench.log"
  cat "$log"
}

# Two GPUs: the multi-device flow test at 16M floats, its sanitizer runs,
# hand-over bandwidth against cudaMemcpyPeerAsync, replicas and a stage per
# GPU against one GPU, the two-GPU and two-process flows of docs/devices-and-hosts.md, and a
# remote queue over loopback against an in-process queue (cpu and cuda).
stage_multigpu() {
  local log="$out/multigpu.log" n
  : >"$log"
  nvidia-smi topo -m >>"$log" 2>&1
  build-gpu/tests/test_flow_devices cuda BIG >"$out/flow_devices.log" 2>&1 \
    && row "test_flow_devices cuda BIG (to 16M)" PASS "$(grep -c ' OK ' "$out/flow_devices.log") tests" \
    || row "test_flow_devices cuda BIG (to 16M)" FAIL "see flow_devices.log"
  sanitize_one build-gpu/tests/test_flow_devices cuda
  for a in "handoff 64 200" "handoff 256 50" "replicas 4096 400" "replicas 4096 400 round_robin" \
           "staged 4096 400"; do
    build-gpu/bench/bench_flow_devices $a >>"$log" 2>&1 \
      && row "bench_flow_devices $a" PASS "multigpu.log" || row "bench_flow_devices $a" FAIL "see multigpu.log"
  done
  # cuda:0,cuda:1: the receiving process on the second GPU
  for d in cpu cuda cuda:0,cuda:1; do
    for a in "64 20000" "8192 300" "64 2000 1000" "8192 200 50"; do
      build-gpu/bench/bench_remote $d $a >>"$log" 2>&1 \
        && row "bench_remote $d $a" PASS "multigpu.log" || row "bench_remote $d $a" FAIL "see multigpu.log"
    done
  done
  if command -v ucx_perftest >/dev/null; then
    timeout 400 bench/remote_vs_perftest.sh build-gpu cuda:0,cuda:1 64 1024 8192 65536 >>"$log" 2>&1 \
      && row "remote vs ucx_perftest (cuda:0 -> cuda:1)" PASS "multigpu.log" \
      || row "remote vs ucx_perftest (cuda:0 -> cuda:1)" FAIL "see multigpu.log"
  fi
  if (cd "$out" && "$OLDPWD/build-gpu/src/kpipe" flow "$OLDPWD/examples/flow_devices.json" \
        --device cuda >flow_devices_example.log 2>&1); then
    row "kpipe flow examples/flow_devices.json" PASS "$(grep -E 'frames in' "$out/flow_devices_example.log")"
  else
    row "kpipe flow examples/flow_devices.json" FAIL "$(tail -1 "$out/flow_devices_example.log")"
  fi
  cat "$out/flow_devices_example.log" >>"$log"
  (cd "$out" && "$OLDPWD/build-gpu/src/kpipe" flow "$OLDPWD/examples/remote_rx.json" --device cuda:1 \
     >remote_rx.log 2>&1) &
  local rx=$!
  sleep 1
  (cd "$out" && "$OLDPWD/build-gpu/src/kpipe" flow "$OLDPWD/examples/remote_tx.json" --device cuda:0 \
     >remote_tx.log 2>&1)
  local tx_rc=$?
  wait $rx
  local rx_rc=$?
  cat "$out/remote_tx.log" "$out/remote_rx.log" >>"$log"
  [ $tx_rc -eq 0 ] && [ $rx_rc -eq 0 ] \
    && row "two processes: remote_tx -> remote_rx" PASS "$(grep -E 'frames in' "$out/remote_rx.log")" \
    || row "two processes: remote_tx -> remote_rx" FAIL "tx rc $tx_rc, rx rc $rx_rc"
  cat "$log"
}

# Fusion: the fusion tests and their sanitizer rows, then bench_fusion
# twice with a kernel cache directory (the second run loads every group
# from it) and the same work in PyTorch.
stage_fusion() {
  ctest --test-dir build-gpu --output-on-failure -R "fusion|custom_module|pipeline_cuda|dynamic_cuda" \
    >"$out/fusion_ctest.log" 2>&1 \
    && row "ctest fusion, pipeline, dynamic (cuda)" PASS "$(grep -E 'tests passed' "$out/fusion_ctest.log")" \
    || { row "ctest fusion, pipeline, dynamic (cuda)" FAIL "see fusion_ctest.log"; tail -30 "$out/fusion_ctest.log"; }
  sanitize_one build-gpu/tests/test_fusion cuda SMALL
  local cache=/tmp/kp_kernel_cache run
  rm -rf "$cache" && mkdir -p "$cache"
  for run in 1 2; do
    if KP_KERNEL_CACHE_DIR=$cache build-gpu/bench/bench_fusion ${KP_FUSION_TICKS:-20000} \
         >"$out/bench_fusion_$run.md" 2>&1; then
      row "bench_fusion (run $run)" PASS "$(tail -1 "$out/bench_fusion_$run.md")"
    else
      row "bench_fusion (run $run)" FAIL "see bench_fusion_$run.md"
    fi
    cat "$out/bench_fusion_$run.md"
  done
  if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    PYTHONUNBUFFERED=1 timeout 300 python3 bench/torch_fusion.py ${KP_FUSION_TICKS:-20000} \
      >"$out/torch_fusion.md" 2>"$out/torch_fusion.log" \
      && row "torch_fusion.py" PASS "torch_fusion.md" || row "torch_fusion.py" FAIL "see torch_fusion.log"
    cat "$out/torch_fusion.md"; tail -5 "$out/torch_fusion.log"
  fi
}

# Python: the package's suites (cpu with NumPy, cuda with PyTorch), then
# kpipe.torch.graphed against PyTorch's ways (bench/torch_graphed.py) and
# the sample pipeline ticked from Python beside the same from C.
stage_python() {
  local env="KPIPE_LIBRARY=$PWD/build-gpu/src/libkpipe.so"
  if env $env timeout 420 python3 -m pytest -q -p no:cacheprovider -rs python/tests \
       >"$out/pytest.log" 2>&1; then
    row "pytest python/tests (cpu + cuda, torch)" PASS "$(tail -1 "$out/pytest.log")"
  else
    row "pytest python/tests (cpu + cuda, torch)" FAIL "see pytest.log"; tail -40 "$out/pytest.log"
  fi
  if env $env PYTHONPATH=python PYTHONUNBUFFERED=1 timeout 540 python3 bench/torch_graphed.py \
       >"$out/torch_graphed.md" 2>"$out/torch_graphed.log"; then
    row "torch_graphed.py" PASS "torch_graphed.md"
  else
    row "torch_graphed.py" FAIL "see torch_graphed.log"
  fi
  cat "$out/torch_graphed.md"; tail -20 "$out/torch_graphed.log"
  build-gpu/src/kpipe bench examples/sample.json --device cuda --ticks 20000 >"$out/sample_c.txt" 2>&1
  cat "$out/sample_c.txt"
}

# Remote queues against ucx_perftest (ucx-utils, carried in .devdeps), same
# run: 64 KiB to 64 MiB frames on cpu and cuda, saturated and at half load,
# three rounds alternated (KP_REMOTE_ROUNDS); test_remote on both backends
# (under the sanitizers' builds it is part of scripts/test.sh, and its
# frames tests under compute-sanitizer part of the sanitize stage).
stage_remote() {
  local log="$out/remote.log" d
  : >"$log"
  if ! command -v ucx_perftest >/dev/null; then
    row "remote vs ucx_perftest" FAIL "no ucx_perftest (carry ucx-utils)"; return 0
  fi
  for d in cpu cuda; do
    timeout 400 bench/remote_vs_perftest.sh build-gpu $d 64 1024 8192 65536 >>"$log" 2>&1 \
      && row "remote vs ucx_perftest ($d)" PASS "remote.log" \
      || row "remote vs ucx_perftest ($d)" FAIL "see remote.log"
  done
  for d in cpu cuda; do
    build-gpu/tests/test_remote $d >"$out/test_remote_$d.log" 2>&1 \
      && row "test_remote $d (GPU host)" PASS "$(grep -c ' OK ' "$out/test_remote_$d.log") tests" \
      || row "test_remote $d (GPU host)" FAIL "see test_remote_$d.log"
  done
  cat "$log"
}

# The ONNX engine: ONNX's conformance cases on cuda (and cpu, for the counts),
# a build without cuDNN (own convolution kernels) running them again,
# compute-sanitizer over a slice of the cases, and PyTorch models checked
# and timed (bench/onnx_models.py). cuDNN comes from PyTorch's environment.
stage_onnx() {
  local cudnn_lib
  cudnn_lib=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
  export KP_CUDNN_LIBRARY_DIR=$cudnn_lib
  local d
  for d in cuda cpu; do
    build-gpu/tests/test_onnx_conformance --device $d >"$out/onnx_conf_$d.log" 2>&1 \
      && row "onnx conformance ($d)" PASS "$(grep 'conformance total' "$out/onnx_conf_$d.log")" \
      || row "onnx conformance ($d)" FAIL "$(grep 'conformance total' "$out/onnx_conf_$d.log"); $(grep -m3 FAIL "$out/onnx_conf_$d.log" | tr '\n' ' ')"
  done
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/test_onnx_conformance \
      --device cuda --filter conv >"$out/onnx_memcheck.log" 2>&1 \
    && row "compute-sanitizer memcheck: onnx conv cases" PASS "$(grep 'conformance total' "$out/onnx_memcheck.log")" \
    || row "compute-sanitizer memcheck: onnx conv cases" FAIL "see onnx_memcheck.log"
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/test_onnx_conformance \
      --device cuda --filter pytorch >"$out/onnx_memcheck2.log" 2>&1 \
    && row "compute-sanitizer memcheck: onnx pytorch cases" PASS "$(grep 'conformance total' "$out/onnx_memcheck2.log")" \
    || row "compute-sanitizer memcheck: onnx pytorch cases" FAIL "see onnx_memcheck2.log"
  if cmake -S . -B build-nocudnn -G Ninja -DKP_CUDA=ON -DKP_CUDNN=OFF -DCMAKE_BUILD_TYPE=Release \
       -DKP_UCX=OFF -DKP_VIDEO=OFF >"$out/nocudnn.log" 2>&1 && \
     cmake --build build-nocudnn --target test_onnx_conformance >>"$out/nocudnn.log" 2>&1; then
    build-nocudnn/tests/test_onnx_conformance --device cuda >"$out/onnx_conf_nocudnn.log" 2>&1 \
      && row "onnx conformance (cuda, KP_CUDNN=OFF)" PASS "$(grep 'conformance total' "$out/onnx_conf_nocudnn.log")" \
      || row "onnx conformance (cuda, KP_CUDNN=OFF)" FAIL "$(grep 'conformance total' "$out/onnx_conf_nocudnn.log")"
  else
    row "build KP_CUDNN=OFF" FAIL "see nocudnn.log"
  fi
  PYTHONUNBUFFERED=1 KPIPE_LIBRARY=build-gpu/src/libkpipe.so timeout 500 python3 bench/onnx_models.py \
      ${KP_ONNX_QUICK:+--quick} --json "$out/onnx_models.json" >"$out/onnx_models.log" 2>&1 \
    && row "onnx models vs PyTorch (cuda, cpu)" PASS "onnx_models.log" \
    || row "onnx models vs PyTorch (cuda, cpu)" FAIL "see onnx_models.log"
  tail -12 "$out/onnx_models.log"
}

# fp16 convolutions ("precision": "fp16"): their kernels element by element,
# every test model in fp16 against the same device's fp32 and in fp32
# against the cpu device, compute-sanitizer over fp16 runs, and the models
# timed against PyTorch in fp16 channels-last (bench/onnx_models.py --fp16).
stage_fp16() {
  local cudnn_lib m
  cudnn_lib=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
  export KP_CUDNN_LIBRARY_DIR=$cudnn_lib
  build-gpu/tests/test_onnx_half cuda >"$out/onnx_half.log" 2>&1 \
    && row "fp16 kernels (cuda)" PASS "$(tail -1 "$out/onnx_half.log")" \
    || row "fp16 kernels (cuda)" FAIL "$(grep -m3 FAIL "$out/onnx_half.log" | tr '\n' ' ')"
  KP_MODEL_DEVICE=cuda KPIPE_CLI=build-gpu/src/kpipe timeout 400 python3 -m pytest -q -rs -s \
      -p no:cacheprovider tests/models/test_models.py -k "fp16 or cuda_matches or new_size or algo_cache or fused_call" \
      >"$out/onnx_fp16_models.log" 2>&1 \
    && row "models fp16 vs fp32, cuda vs cpu" PASS "$(tail -1 "$out/onnx_fp16_models.log")" \
    || row "models fp16 vs fp32, cuda vs cpu" FAIL "$(grep -E 'FAILED|Error' "$out/onnx_fp16_models.log" | head -5 | tr '\n' ' ')"
  mkdir -p "$out/m" && python3 tests/models/make_models.py "$out/m" >/dev/null 2>&1
  python3 -c "import numpy as n; n.save('$out/m/x.npy', n.random.default_rng(1).uniform(-1,1,(1,3,40,56)).astype(n.float32)); n.save('$out/m/r.npy', n.random.default_rng(1).uniform(-1,1,(1,3,224,224)).astype(n.float32))"
  for tool in memcheck racecheck; do
    timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/src/kpipe run \
        "$out/m/srvgg_x2_shuffle.onnx" --device cuda --precision fp16 --max height=40,width=56 \
        --input frame="$out/m/x.npy" --ticks 2 >"$out/fp16_$tool.log" 2>&1 \
      && timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/src/kpipe run \
        "$out/m/resnet18.onnx" --device cuda --precision fp16 --input input="$out/m/r.npy" \
        >>"$out/fp16_$tool.log" 2>&1 \
      && row "compute-sanitizer $tool: fp16 models" PASS "srvgg_x2_shuffle, resnet18" \
      || row "compute-sanitizer $tool: fp16 models" FAIL "see fp16_$tool.log"
  done
  build-gpu/src/kpipe validate "$out/m/resnet18.onnx" --device cuda --precision fp16 >"$out/fp16_validate.log" 2>&1
  PYTHONUNBUFFERED=1 KPIPE_LIBRARY=build-gpu/src/libkpipe.so timeout 420 python3 bench/onnx_models.py \
      --fp16 --compile default,reduce-overhead ${KP_ONNX_QUICK:+--quick} --reps ${KP_FP16_REPS:-50} \
      --json "$out/onnx_fp16.json" >"$out/onnx_fp16.log" 2>&1 \
    && row "onnx fp16 vs PyTorch fp16" PASS "onnx_fp16.log" \
    || row "onnx fp16 vs PyTorch fp16" FAIL "see onnx_fp16.log"
  tail -16 "$out/onnx_fp16.log"
}

# The example super-resolution model (examples/models/sr_x2.onnx): trained
# by scripts/make_sr_model.py, which fails unless it beats bicubic
# upscaling on held-out frames; the file and its figures land in $out.
stage_srmodel() {
  PYTHONUNBUFFERED=1 timeout 400 python3 scripts/make_sr_model.py --out "$out/sr_x2.onnx" \
      --seconds ${KP_SR_SECONDS:-150} --report "$out/sr_x2.json" >"$out/srmodel.log" 2>&1 \
    && row "sr_x2 model: beats bicubic" PASS "$(python3 -c "import json; d=json.load(open('$out/sr_x2.json')); print('%.2f dB vs bicubic %.2f dB' % (d['model_psnr_db'], d['bicubic_psnr_db']))")" \
    || row "sr_x2 model: beats bicubic" FAIL "see srmodel.log"
  tail -5 "$out/srmodel.log"
}

for stage in ${*:-build test sanitize soak bench cache flowbench taskbench}; do
  case $stage in
    build|test|sanitize|soak|bench|cache|flowbench|taskbench|hostpath|multigpu|video|streams|parallel|fusion|python|remote|onnx|fp16|srmodel) stage_$stage || break ;;
    *) echo "gpu-check: unknown stage $stage"; exit 2 ;;
  esac
done

echo
echo "== gpu-check on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
cat "$rows"
grep -qE ' (FAIL) ' "$rows" && status=1
exit $status
