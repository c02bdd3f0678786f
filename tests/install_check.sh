#!/bin/sh
# Installs kpipe into scratch prefixes -- the build under test (a static
# library) and a shared-library build of the same sources -- then builds and
# runs a program against each, through find_package(kpipe) and through
# pkg-config, linking with exactly the flags the installed package gives.
# Then the Python package as a user meets it: from the shared install (it
# finds the library without KPIPE_LIBRARY) and through pip into a folder of
# its own, each making a pipeline in a fresh interpreter.
#   install_check.sh BUILD_DIR SOURCE_DIR WORK_DIR [PYTHON]
set -eu
build=$1 src=$(cd "$2" && pwd) work=$3 py=${4:-python3}
rm -rf "$work"
mkdir -p "$work"
t0=$(date +%s)
took() { echo "-- $1 took $(($(date +%s) - t0)) s"; t0=$(date +%s); }

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
took "the static install and its consumers"
echo "cc use.c libkpipe.a $libs"
"$work/use_by_hand"

gen=""
command -v ninja >/dev/null && gen="-G Ninja"
# The shared build leaves CUDA out: its link flags reach consumers only
# through the static package (checked above, with CUDA where the build
# under test has it), the build tree's own libkpipe.so (the Python tests'
# library) is built with CUDA, and compiling the CUDA sources again here
# took two of this test's three minutes.
cmake -S "$src" -B "$work/shared-build" $gen -DBUILD_SHARED_LIBS=ON -DKP_BUILD_TESTS=OFF \
  -DKP_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/shared-build" >/dev/null
took "the shared-library build"
cmake --install "$work/shared-build" --prefix "$work/shared" >/dev/null
[ -e "$work/shared/lib/libkpipe.so" ] || { echo "no libkpipe.so installed"; exit 1; }
consume "$work/shared" shared
took "the shared install and its consumers"

# Python (the interpreter the tests use): pip's form where pip, setuptools
# and wheel are there, as on Debian (no network, no build isolation)
py_check() { # LABEL PYTHONPATH [KPIPE_LIBRARY]
  (cd "$work" && env -u KPIPE_LIBRARY PYTHONPATH="$2" ${3:+KPIPE_LIBRARY=$3} "$py" -c "
import kpipe, sys
p = kpipe.Pipeline(sys.argv[1], device='cpu')
print('$1: import kpipe from', kpipe.__file__, '-', type(p).__name__, 'made')" \
    "$src/examples/sample.json")
}
if command -v "$py" >/dev/null; then
  pkg=$(dirname "$(find "$work/shared/lib" -path '*/kpipe/__init__.py' | head -1)")
  [ -f "$pkg/_install.py" ] || { echo "cmake --install put no kpipe package (or _install.py)"; exit 1; }
  py_check "cmake --install" "$(dirname "$pkg")"
  if "$py" -m pip --version >/dev/null 2>&1 && "$py" -c "import setuptools, wheel" 2>/dev/null; then
    cp -r "$src/python" "$work/py-src" # pip builds in the tree it is given
    "$py" -m pip install -q --root-user-action=ignore --no-build-isolation --no-deps --no-index \
      --target "$work/pip" "$work/py-src" >/dev/null
    py_check "pip install" "$work/pip" "$work/shared/lib/libkpipe.so"
  fi
fi
took "the Python package's installs"
echo PASS
