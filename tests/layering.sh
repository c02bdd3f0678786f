#!/bin/sh
# Layers include each other's public headers only: a file in src/LAYER/ may
# include headers of its own layer and core's internal helpers
# (src/core/core-impl.h, shared by every layer), never another layer's
# private header. The pipeline names no built-in module, and modules see
# only public headers and core.
#   layering.sh SOURCE_DIR
set -eu
cd "$1/src"
bad=0
for f in $(find . -name '*.c' -o -name '*.h' -o -name '*.cu' | sed 's|^\./||' | sort); do
  layer=${f%%/*}
  for inc in $(grep -oE '^#include "[^"]+"' "$f" | sed 's/#include "//; s/"$//'); do
    case $inc in
      kpipe/*) continue ;;                       # public headers
    esac
    dir=$(dirname "$f")
    target=$(cd "$dir" && realpath -m --relative-to="$PWD/$(printf '%s' "$dir" | sed 's|[^/]*|..|g')" "$inc" 2>/dev/null || echo "$inc")
    tlayer=${target%%/*}
    if [ "$tlayer" != "$layer" ] && [ "$target" != "core/core-impl.h" ]; then
      echo "FAIL: $f includes $inc ($target), a private header of layer $tlayer"
      bad=1
    fi
  done
done
if grep -rnE 'kp__(engine|relu)_|kp__module_(engine|relu)' pipeline/ backend/ memory/ core/ >/dev/null; then
  echo "FAIL: a lower layer names a built-in module:"
  grep -rnE 'kp__(engine|relu)_|kp__module_(engine|relu)' pipeline/ backend/ memory/ core/
  bad=1
fi
[ $bad -eq 0 ] && echo "PASS: no file includes another layer's private header"
exit $bad
