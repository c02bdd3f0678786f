#!/usr/bin/env bash
# Installs what kpipe needs (Debian 12; idempotent), then configures and
# builds into ./build. Extra arguments go to cmake's configure step;
# KP_BUILD_DIR picks another build directory, KP_PACKAGES adds packages.
#   scripts/bootstrap.sh [-DKP_CUDA=ON ...]
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(cmake ninja-build pkg-config gcc libcmocka-dev libjansson-dev libucx-dev
      libavformat-dev libavcodec-dev libavutil-dev libffmpeg-nvenc-dev
      python3 python3-numpy python3-pytest python3-setuptools python3-pip python3-venv ${KP_PACKAGES:-})
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

build=${KP_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${KP_BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
cmake --build "$build"
