#!/usr/bin/env bash
# Packs this host's perf, with every library it loads (its C library and
# loader included), into DIR, for a machine whose image has no perf:
#   scripts/perf-bundle.sh DIR
#   DIR/perf record -F 2999 -o p.data -- CMD ARGS...   (there)
#   DIR/perf report -i p.data --no-children --sort pid,dso,sym --stdio
# DIR/perf runs the packed perf under the packed loader, so it needs
# nothing of the machine's libraries; what it runs keeps its own. About 35
# MB. Sampling one's own processes needs kernel.perf_event_paranoid <= 2
# (user and kernel time of the processes started under it).
set -euo pipefail
dir=${1:?usage: scripts/perf-bundle.sh DIR}
perf=$(readlink -f "$(command -v perf)")
mkdir -p "$dir/lib"
cp "$perf" "$dir/perf.bin"
ldd "$perf" | awk '$3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | while read -r lib; do
  cp -L "$lib" "$dir/lib/"
done
loader=$(basename "$(ldd "$perf" | awk '$1 ~ /^\/.*ld-linux/ { print $1 }')")
cat >"$dir/perf" <<WRAP
#!/bin/sh
here=\$(dirname "\$0")
exec "\$here/lib/$loader" --library-path "\$here/lib" "\$here/perf.bin" "\$@"
WRAP
chmod +x "$dir/perf"
echo "$dir: $(du -sh "$dir" | cut -f1)"
