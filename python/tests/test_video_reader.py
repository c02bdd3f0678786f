"""kpipe.VideoReader on the cpu device (software decode): frames by index,
slice, batch and time equal to sequential decode, byte for byte, on clips
with B-frames and open or closed groups of pictures; named errors out of
range; RGB against a conversion computed here; open and close a thousand
times with no growth. (The cuda device's NVDEC path: scripts/gpu-check.sh.)"""
import gc
import os
import threading
import time

import numpy as np
import pytest

import kpipe

from conftest import has_cuda

W, H, N = 160, 96, 60

if not kpipe.lib.kp_video_built():
    pytest.skip("this kpipe has no video files", allow_module_level=True)


def make_clip(path, open_gop):
    kpipe.Flow({"kpipe_flow": 1, "stages": [
        {"name": "src", "source": "testsrc", "width": W, "height": H, "frames": N,
         "format": "nv12"},
        {"name": "out", "sink": "video", "path": str(path), "encoder": "libx264", "crf": 30,
         "bframes": 3, "gop": 10, "open_gop": open_gop}]}).run()


@pytest.fixture(scope="module", params=[False, True], ids=["closed_gop", "open_gop"])
def clip(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("video") / ("clip_%d.mp4" % request.param)
    make_clip(path, request.param)
    return str(path)


def sequential(path):
    with kpipe.VideoReader(path, format="nv12", dtype="u8") as r:
        return [np.from_dlpack(f).copy() for f in r]


def test_metadata(clip):
    with kpipe.VideoReader(clip, format="nv12", dtype="u8") as r:
        assert len(r) == N
        assert (r.width, r.height) == (W, H)
        assert r.codec == "h264" and r.pixel_format == "nv12"
        assert r.fps == pytest.approx(30.0)
        assert r.duration == pytest.approx(N / 30.0)
        assert r.color == {"matrix": "bt601", "range": "limited"}
        assert np.from_dlpack(r[0]).shape == (H * 3 // 2, W)


def test_random_access_equals_sequential(clip):
    want = sequential(clip)
    assert len(want) == N
    rng = np.random.default_rng(5)
    with kpipe.VideoReader(clip, format="nv12", dtype="u8") as r:
        for i in rng.integers(0, N, 200):
            got = np.from_dlpack(r[int(i)])
            assert np.array_equal(got, want[i]), "frame %d after a seek" % i
        assert np.array_equal(np.from_dlpack(r[-1]), want[-1])


def test_slices_batches_and_time(clip):
    want = sequential(clip)
    with kpipe.VideoReader(clip, format="nv12", dtype="u8") as r:
        b = np.from_dlpack(r[5:40:7])
        assert b.shape == (5, H * 3 // 2, W)
        for k, i in enumerate(range(5, 40, 7)):
            assert np.array_equal(b[k], want[i])
        b = np.from_dlpack(r.frames([33, 2, 33, 59]))
        for k, i in enumerate([33, 2, 33, 59]):
            assert np.array_equal(b[k], want[i])
        for i in (0, 17, 59):
            assert np.array_equal(np.from_dlpack(r.at(i / 30.0)), want[i])
            assert np.array_equal(np.from_dlpack(r.at(i / 30.0 + 0.01)), want[i])


def test_out_of_range_is_named(clip):
    with kpipe.VideoReader(clip, format="nv12", dtype="u8") as r:
        with pytest.raises(kpipe.Error, match="frame 60 is out of range"):
            r[N]
        with pytest.raises(kpipe.Error, match="out of range"):
            r[-N - 1]
        with pytest.raises(kpipe.Error, match="out of range"):
            r.at(-0.1)
        with pytest.raises(kpipe.Error, match="out of range"):
            r.at(N / 30.0 + 0.5)
        assert np.from_dlpack(r[3]).shape == (H * 3 // 2, W)  # still reads
    with pytest.raises(kpipe.Error, match="format"):
        kpipe.VideoReader(clip, format="yuv")
    with pytest.raises(kpipe.Error, match="KP_ERR_IO|cannot open"):
        kpipe.VideoReader(clip + ".missing")


def bt601_limited(nv):
    """Planar RGB [3, H, W] of an NV12 frame's samples on the 8-bit scale
    (floats), BT.601 limited range, computed here apart from the library."""
    y = nv[:H]
    uv = nv[H:].reshape(H // 2, W // 2, 2).repeat(2, axis=0).repeat(2, axis=1)
    yp = (y - 16) / 219.0
    u, v = (uv[..., 0] - 128) / 224.0, (uv[..., 1] - 128) / 224.0
    kr, kb = 0.299, 0.114
    kg = 1 - kr - kb
    return np.stack([yp + 2 * (1 - kr) * v,
                     yp - 2 * kb * (1 - kb) / kg * u - 2 * kr * (1 - kr) / kg * v,
                     yp + 2 * (1 - kb) * u])


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_rgb_matches_bt601_limited(clip, dtype):
    """Planar RGB from the NV12 frame, BT.601 limited range, each channel
    within 2e-3 (f32; f16 within its rounding) of the conversion here."""
    want = bt601_limited(sequential(clip)[11].astype(np.float64))
    with kpipe.VideoReader(clip, format="rgb", dtype=dtype) as r:
        got = np.from_dlpack(r[11]).astype(np.float64)
    assert got.shape == (3, H, W)
    tol = 2e-3 if dtype == "f32" else 4e-3
    inside = (want > tol) & (want < 1 - tol)  # the conversion may clamp to [0, 1]
    assert np.abs(got - want)[inside].max() <= tol


def _threads():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def _rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_thousand_readers_leave_nothing(clip):
    """1,000 readers opened, read and closed, after 500 that warm the
    allocator up (the decoders' threads leave memory in malloc's arenas,
    which it keeps and reuses: a plateau, not a leak): threads back to
    their count before, and resident memory grown by less than 8 MiB (a
    frame kept per reader would be 23 MiB, a decoder far more). Under
    AddressSanitizer freed memory stays resident in its quarantine, so only
    the threads are counted there."""
    def cycle():
        r = kpipe.VideoReader(clip, format="nv12", dtype="u8")
        np.from_dlpack(r[7])
        r.close()

    def settled(limit):  # threads that end after a close are given up to 5 s
        for _ in range(250):
            gc.collect()
            n = _threads()
            if n <= limit:
                break
            time.sleep(0.02)
        return n

    for _ in range(500):
        cycle()
    threads = settled(10 ** 6)
    gc.collect()
    rss = _rss_kib()
    for _ in range(1000):
        cycle()
    gc.collect()
    assert settled(threads) <= threads, "threads: %d before, %d after" % (threads, _threads())
    if "asan" not in os.environ.get("LD_PRELOAD", ""):
        assert _rss_kib() - rss < 8 * 1024, "RSS grew %d KiB over 1,000 readers" % (
            _rss_kib() - rss)


def test_threads_take_turns(clip):
    """Two threads on one reader: calls take turns, each result its own."""
    want = sequential(clip)
    r = kpipe.VideoReader(clip, format="nv12", dtype="u8")
    bad = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for i in rng.integers(0, N, 40):
            if not np.array_equal(np.from_dlpack(r[int(i)]), want[i]):
                bad.append(int(i))
    ts = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    r.close()
    assert not bad




@pytest.mark.skipif(not has_cuda(), reason="no CUDA device")
def test_cuda_reader_equals_cpu(clip):
    """On cuda (NVDEC for H.264): random frames equal the cpu reader's
    sequential decode byte for byte (NV12), and RGB agrees within f32
    rounding; the frames live on the device."""
    want = sequential(clip)
    rng = np.random.default_rng(9)
    with kpipe.VideoReader(clip, device="cuda", format="nv12", dtype="u8") as r:
        assert r.decoder == "nvdec"
        for i in rng.integers(0, N, 100):
            a = r[int(i)]
            assert a.__dlpack_device__()[0] == 2  # kDLCUDA
            got = np.empty(a.shape, np.uint8)
            kpipe.lib.kp_memcpy_dtoh(a.device.ptr, got.ctypes.data, a.ptr, a.nbytes)
            assert np.array_equal(got, want[i]), "frame %d after a seek on NVDEC" % i
    with kpipe.VideoReader(clip, device="cuda", format="rgb", dtype="f32") as g, \
            kpipe.VideoReader(clip, format="rgb", dtype="f32") as c:
        a = g[23]
        got = np.empty(a.shape, np.float32)
        g.device.sync()
        kpipe.lib.kp_memcpy_dtoh(a.device.ptr, got.ctypes.data, a.ptr, a.nbytes)
        assert np.abs(got - np.from_dlpack(c[23])).max() <= 1e-5


# --- streams of more than 8 bits -------------------------------------------------------
@pytest.fixture(scope="module")
def main10(tmp_path_factory):
    """An HEVC Main10 clip: testsrc's picture as P016, encoded by libx265 at
    10 bits with B-frames and open groups of pictures."""
    path = tmp_path_factory.mktemp("video10") / "main10.mp4"
    kpipe.Flow({"kpipe_flow": 1, "stages": [
        {"name": "src", "source": "testsrc", "width": W, "height": H, "frames": N,
         "format": "p016"},
        {"name": "out", "sink": "video", "path": str(path), "codec": "hevc", "crf": 20,
         "bframes": 3, "gop": 10, "open_gop": True}]}).run()
    return str(path)


def test_main10_frames_are_16_bit(main10, clip):
    """pixel_format p016, u16 [H*3/2, W], each value in the high bits;
    random access equals sequential decode; nv12 gives each sample rounded
    to 8 bits; p016 refuses an 8-bit clip by name."""
    with kpipe.VideoReader(main10, format="p016") as r:
        assert (r.codec, r.pixel_format, r.bits, len(r)) == ("hevc", "p016", 10, N)
        want = [np.from_dlpack(f).copy() for f in r]
        assert want[0].dtype == np.uint16 and want[0].shape == (H * 3 // 2, W)
        assert all(not (f & 63).any() for f in want)
        # testsrc's luma lies in 48 .. 200 on the 8-bit scale
        assert 40 * 256 <= want[7][:H].min() and want[7][:H].max() <= 208 * 256
        rng = np.random.default_rng(3)
        for i in rng.integers(0, N, 60):
            assert np.array_equal(np.from_dlpack(r[int(i)]), want[i]), "frame %d" % i
        b = np.from_dlpack(r[3:30:9])
        assert b.shape == (3, H * 3 // 2, W) and b.dtype == np.uint16
        assert np.array_equal(b[1], want[12])
    with kpipe.VideoReader(main10, format="nv12") as r8:
        assert (r8.pixel_format, r8.bits) == ("nv12", 10)
        got = np.from_dlpack(r8[7])
        assert got.dtype == np.uint8
        assert np.array_equal(got, np.minimum(((want[7] >> 6) + 2) >> 2, 255))
    with pytest.raises(kpipe.Error, match="8-bit"):
        kpipe.VideoReader(clip, format="p016")
    with pytest.raises(kpipe.Error, match="u16"):
        kpipe.VideoReader(main10, format="p016", dtype="u8")


def test_main10_rgb_matches_conversion(main10):
    """RGB from the 10-bit frames (the p016_rgb module): BT.601 limited
    range from the 16-bit samples, within 2e-3 of the conversion here."""
    with kpipe.VideoReader(main10, format="p016") as r:
        p = np.from_dlpack(r[11]).astype(np.float64) / 256.0
    want = bt601_limited(p)
    with kpipe.VideoReader(main10, format="rgb") as r:
        assert r.pixel_format == "p016" and r.bits == 10
        got = np.from_dlpack(r[11]).astype(np.float64)
    assert got.shape == (3, H, W)
    inside = (want > 2e-3) & (want < 1 - 2e-3)
    assert np.abs(got - want)[inside].max() <= 2e-3
