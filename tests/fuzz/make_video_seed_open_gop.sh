#!/bin/sh
# Makes tests/fuzz/seeds/video/open_gop_h264.mp4 and open_gop_hevc.mp4:
# 24 frames of testsrc at 64x48 with open groups of pictures every 8
# frames: libx264's non-IDR key frames with their recovery point SEI, and
# libx265's CRA key frames with RASL pictures. They take fuzz_video's
# parallel reader through range.c's SEI and leading-picture paths.
#   tests/fuzz/make_video_seed_open_gop.sh build/src/kpipe
set -eu
kpipe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
out=$(cd "$(dirname "$0")/seeds/video" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for codec in h264 hevc; do
    cat > "$tmp/seed.json" <<JSON
{"kpipe_flow": 1, "name": "open_gop_seed", "stages": [
 {"name": "src", "source": "testsrc", "width": 64, "height": 48, "frames": 24},
 {"name": "out", "sink": "video", "path": "$out/open_gop_$codec.mp4", "codec": "$codec",
  "crf": 30, "preset": "ultrafast", "bframes": 3, "gop": 8, "open_gop": true}]}
JSON
    "$kpipe" flow "$tmp/seed.json" --quiet > /dev/null
done
