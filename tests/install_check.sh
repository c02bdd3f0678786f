#!/bin/sh
# Installs kpipe into scratch prefixes -- the build under test (a static
# library) and a shared-library build of the same sources -- then builds and
# runs a program against each, through find_package(kpipe) and through
# pkg-config, linking with exactly the flags the installed package gives.
#   install_check.sh BUILD_DIR SOURCE_DIR WORK_DIR KP_CUDA
set -eu
build=$1 src=$2 work=$3 cuda=$4
rm -rf "$work"
mkdir -p "$work"

consume() { # PREFIX LABEL [--static]
  prefix=$1 label=$2 static=${3:-}
  cmake -S "$src/tests/install" -B "$work/consumer-$label" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$work/consumer-$label" >/dev/null
  "$work/consumer-$label/use"
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs $static kpipe)
  echo "pkg-config --libs $static kpipe: $flags"
  cc "$src/tests/install/use.c" $flags -o "$work/use_pc-$label"
  LD_LIBRARY_PATH="$prefix/lib" "$work/use_pc-$label"
}

cmake --install "$build" --prefix "$work/static" >/dev/null
consume "$work/static" static --static
# by hand: the archive itself and the libraries it needs, no linker flags
# of kpipe's (the built-in modules are kept by the registry's table)
libs=$(PKG_CONFIG_PATH="$work/static/lib/pkgconfig" pkg-config --static --libs-only-L --libs-only-l kpipe |
  sed 's/-lkpipe//')
cc "$src/tests/install/use.c" -I"$work/static/include" "$work/static/lib/libkpipe.a" $libs \
  -o "$work/use_by_hand"
echo "cc use.c libkpipe.a $libs"
"$work/use_by_hand"

gen=""
command -v ninja >/dev/null && gen="-G Ninja"
cmake -S "$src" -B "$work/shared-build" $gen -DBUILD_SHARED_LIBS=ON -DKP_BUILD_TESTS=OFF \
  -DKP_CUDA="$cuda" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/shared-build" >/dev/null
cmake --install "$work/shared-build" --prefix "$work/shared" >/dev/null
[ -e "$work/shared/lib/libkpipe.so" ] || { echo "no libkpipe.so installed"; exit 1; }
consume "$work/shared" shared
echo PASS
