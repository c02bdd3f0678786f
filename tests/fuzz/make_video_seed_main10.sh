#!/bin/sh
# Makes tests/fuzz/seeds/video/main10_16.mp4: three 16x16 frames of testsrc
# as P016, encoded as HEVC Main10 (libx265), the smallest input that takes
# fuzz_video through the 10-bit path.
#   tests/fuzz/make_video_seed_main10.sh build/src/kpipe
set -eu
kpipe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
out=$(cd "$(dirname "$0")/seeds/video" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/seed.json" <<JSON
{"kpipe_flow": 1, "name": "main10_seed", "stages": [
 {"name": "src", "source": "testsrc", "width": 16, "height": 16, "frames": 3, "format": "p016"},
 {"name": "out", "sink": "video", "path": "$out/main10_16.mp4", "codec": "hevc", "crf": 30,
  "preset": "ultrafast", "bframes": 1}]}
JSON
"$kpipe" flow "$tmp/seed.json" --quiet > /dev/null
