#!/usr/bin/env python3
"""kpipe.VideoReader timed: 100 random frames of a 1080p H.264 clip (B-frames,
a key frame every 30), p50 and p99 ms per frame, and a sequential read in
frames/s against the hand loop (kp_video_reader_next into one buffer, the
same decoder, no Python object per frame), in one run.

    KPIPE_LIBRARY=build-gpu/src/libkpipe.so python3 bench/video_reader.py [--device cuda] [--json F]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import kpipe  # noqa: E402
from kpipe._lib import VideoFrame, VideoReaderConfig, VideoReaderInfo, check, lib  # noqa: E402


def make_clip(path, frames):
    kpipe.Flow({"kpipe_flow": 1, "stages": [
        {"name": "src", "source": "testsrc", "width": 1920, "height": 1080, "frames": frames,
         "format": "nv12"},
        {"name": "out", "sink": "video", "path": path, "encoder": "libx264", "crf": 23,
         "bframes": 3, "gop": 30}]}).run()


def hand_loop(path, dev):
    """Every frame through the C reader into one device buffer."""
    cfg = VideoReaderConfig()
    cfg.format = 2  # NV12
    r = ctypes.c_void_p()
    check(lib.kp_video_reader_open(dev.ptr, path.encode(), ctypes.byref(cfg), ctypes.byref(r)))
    info = VideoReaderInfo()
    check(lib.kp_video_reader_get_info(r, ctypes.byref(info)))
    buf = ctypes.c_void_p()
    check(lib.kp_malloc(dev.ptr, info.frame_bytes, ctypes.byref(buf)))
    s = dev.stream()
    f, eos, n = VideoFrame(), ctypes.c_bool(), 0
    t0 = time.perf_counter()
    while True:
        check(lib.kp_video_reader_next(r, s.ptr, buf, info.frame_bytes, ctypes.byref(f),
                                       ctypes.byref(eos)))
        if eos.value:
            break
        n += 1
    s.sync()
    dt = time.perf_counter() - t0
    lib.kp_free(dev.ptr, buf)
    lib.kp_video_reader_close(r)
    return n / dt, info.decoder.decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = kpipe.device(a.device)
    row = {"device": a.device}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "clip1080.mp4")
        make_clip(path, a.frames)
        row["hand_fps"], row["decoder"] = hand_loop(path, dev)
        r = kpipe.VideoReader(path, device=a.device, format="nv12", dtype="u8")
        t0 = time.perf_counter()
        n = len(r)
        row["index_ms"] = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        for i in range(n):
            r[i]
        dev.sync()
        row["reader_fps"] = n / (time.perf_counter() - t0)
        import random
        random.seed(1)
        times = []
        for i in random.sample(range(n), min(100, n)):
            t = time.perf_counter()
            r[i]
            dev.sync()
            times.append((time.perf_counter() - t) * 1e3)
        times.sort()
        row["random_p50_ms"] = statistics.median(times)
        row["random_p99_ms"] = times[min(len(times) - 1, int(0.99 * len(times)))]
        rgb = kpipe.VideoReader(path, device=a.device, format="rgb", dtype="f16")
        t0 = time.perf_counter()
        for i in range(n):
            rgb[i]
        dev.sync()
        row["rgb_f16_fps"] = n / (time.perf_counter() - t0)
        r.close()
        rgb.close()
    print(json.dumps(row))
    print("%s (%s): sequential %.0f frames/s (hand loop %.0f, %.2fx); 100 random frames p50 "
          "%.2f ms, p99 %.2f ms; RGB f16 %.0f frames/s; index scan %.1f ms" % (
              a.device, row["decoder"], row["reader_fps"], row["hand_fps"],
              row["reader_fps"] / row["hand_fps"], row["random_p50_ms"], row["random_p99_ms"],
              row["rgb_f16_fps"], row["index_ms"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
