#!/bin/sh
# kpipe validate reads a video source's header and refuses, before the run,
# a flow whose first pipeline cannot take the file's frames.
#   cli_validate_video.sh KPIPE SOURCE_DIR WORK_DIR
set -eu
kpipe=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
cd "$work"
cp "$src/examples/video_mp4.json" "$src/examples/video_enhance_nv12.json" .
# the example's size: the header is printed, the flow is OK
sed 's/"frames": 120/"frames": 3/' "$src/examples/make_clip_mp4.json" > clip720.json
"$kpipe" flow clip720.json --quiet > /dev/null
"$kpipe" validate video_mp4.json > ok.txt
grep -q 'source "decode": clip.mp4: 1280x720 h264, 3 frames' ok.txt || { cat ok.txt; exit 1; }
# a 1080p file: named before the run, with the sizes on both sides
sed 's/"width": 1280, "height": 720, "frames": 120/"width": 1920, "height": 1080, "frames": 3/' \
  "$src/examples/make_clip_mp4.json" > clip1080.json
"$kpipe" flow clip1080.json --quiet > /dev/null
if "$kpipe" validate video_mp4.json > bad.txt 2>&1; then
  echo "a 1080p clip into the 720p pipeline was called valid"; cat bad.txt; exit 1
fi
grep -q 'the source gives 1920x1080 frames (u8\[1620,1920\]), but pipeline video_enhance_nv12.json takes "frame" as u8\[1080,1280\]' bad.txt || { cat bad.txt; exit 1; }
echo "PASS: validate reads the video header and names the size a pipeline cannot take"
