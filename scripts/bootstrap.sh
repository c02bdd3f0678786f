#!/usr/bin/env bash
# Installs what kpipe needs (Debian 12; idempotent), then configures and
# builds into ./build. Extra arguments go to cmake's configure step;
# KP_BUILD_DIR picks another build directory, KP_PACKAGES adds packages.
#   scripts/bootstrap.sh [-DKP_CUDA=ON ...]
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(cmake ninja-build pkg-config gcc libcmocka-dev libjansson-dev libucx-dev
      libavformat-dev libavcodec-dev libavutil-dev libffmpeg-nvenc-dev
      python3 python3-numpy python3-pytest python3-setuptools python3-pip python3-venv python3-wheel
      python3-onnx libonnx-testdata ${KP_PACKAGES:-})
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "bootstrap: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ONNX Runtime for Node.js: the outside reference the model tests compare
# with (tests/models). --ignore-scripts: its install script fetches a GPU
# provider, which is not needed for the CPU runtime the package ships.
if command -v npm >/dev/null && [ ! -d build-deps/ort/node_modules/onnxruntime-node ]; then
  mkdir -p build-deps/ort
  npm install --silent --no-audit --no-fund --ignore-scripts --prefix build-deps/ort \
    onnxruntime-node@1.30.0 >/dev/null || echo "bootstrap: onnxruntime-node not installed; model tests will skip"
fi

build=${KP_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${KP_BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
cmake --build "$build"
