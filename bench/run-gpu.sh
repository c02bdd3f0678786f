#!/usr/bin/env bash
# Runs the comparison benchmarks on the GPU machine and prints one table.
#   bench/run-gpu.sh BUILD_DIR OUT_DIR [TICKS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1 out=$2 ticks=${3:-20000}
"$build/bench/bench_sample" . --json "$out/bench_kp.json" --ticks "$ticks"
echo
"$build/bench/bench_alloc" --json "$out/bench_alloc.json"
echo
"$build/src/kpipe" bench examples/sample.json --device cuda --ticks "$ticks" --warmup 1000
echo
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  PYTHONUNBUFFERED=1 python3 bench/torch_sample.py "$ticks" >"$out/bench_torch.json"
  python3 bench/report.py "$out/bench_kp.json" "$out/bench_torch.json"
else
  echo "PyTorch with CUDA not found: the table has no PyTorch rows"
  python3 bench/report.py "$out/bench_kp.json"
fi
