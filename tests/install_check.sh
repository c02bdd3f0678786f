#!/bin/sh
# Installs the build into a scratch prefix, then builds and runs a program
# against it twice: through find_package(kpipe) and through pkg-config.
#   install_check.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -eu
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/install" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/use"
flags=$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs --static kpipe)
cc "$src/tests/install/use.c" $flags -lm -o "$work/use_pc"
"$work/use_pc"
echo PASS
