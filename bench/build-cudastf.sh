#!/bin/sh
# Builds CUDASTF's own Task Bench program (NVIDIA/cccl,
# cudax/test/stf/stress/task_bench.cu) as the baseline for
# `bench_tasks patterns`, outside the tree in the git-ignored .baselines/:
# task_bench_stream (its default stream context) and task_bench_graph (the
# same file with `context ctx = graph_ctx();`).
#   bench/build-cudastf.sh CCCL_CHECKOUT     (a git clone of NVIDIA/cccl)
# Measured with cccl 571f2fc3bc and nvcc 13.0; the binaries need only the
# CUDA driver, so they can be carried to the GPU machine
# (scripts/gpu-check.sh taskbench runs them when they are there).
set -eu
src=${1:?usage: bench/build-cudastf.sh CCCL_CHECKOUT}
out="$(cd "$(dirname "$0")/.." && pwd)/.baselines/cccl"
mkdir -p "$out"
git -C "$src" archive HEAD cudax/include libcudacxx/include cub/cub thrust/thrust \
  cudax/test/stf/stress/task_bench.cu | tar -x -C "$out"
cd "$out"
sed 's/^  context ctx;$/  context ctx = graph_ctx();/' cudax/test/stf/stress/task_bench.cu >task_bench_graph.cu
grep -q 'graph_ctx()' task_bench_graph.cu || { echo "build-cudastf: no 'context ctx;' line to switch" >&2; exit 1; }
flags="-std=c++17 --extended-lambda --expt-relaxed-constexpr -arch=sm_90 -O2 -Icudax/include -Ilibcudacxx/include -Icub -Ithrust"
/usr/local/cuda/bin/nvcc $flags cudax/test/stf/stress/task_bench.cu -o task_bench_stream -lcuda
/usr/local/cuda/bin/nvcc $flags task_bench_graph.cu -o task_bench_graph -lcuda
echo "built $out/task_bench_stream and $out/task_bench_graph"
