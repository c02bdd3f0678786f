"""Flows that mix built-in stages (their JSON form, as dicts) and Python
callables in one chain (kpipe.Flow.of; kp_flow_create_from_json_with)."""
import os

import numpy as np
import pytest

import kpipe

W, H, N = 64, 48, 10
SRC = {"source": "testsrc", "width": W, "height": H, "frames": N, "format": "nv12"}


def frames_of(path):
    """The frames of a y4m file: (w, h, [u8 arrays of w*h*3/2])."""
    data = open(path, "rb").read()
    head, rest = data.split(b"\n", 1)
    w = int([t for t in head.split() if t.startswith(b"W")][0][1:])
    h = int([t for t in head.split() if t.startswith(b"H")][0][1:])
    size, out = w * h * 3 // 2, []
    while rest:
        assert rest.startswith(b"FRAME")
        rest = rest.split(b"\n", 1)[1]
        out.append(np.frombuffer(rest[:size], np.uint8))
        rest = rest[size:]
    return w, h, out


def test_builtin_source_python_stage_builtin_sink(tmp_path):
    plain, inverted = tmp_path / "plain.y4m", tmp_path / "inverted.y4m"
    kpipe.Flow({"kpipe_flow": 1, "stages": [dict(SRC, name="src"),
                                            {"name": "out", "sink": "y4m", "path": str(plain)}]}
               ).run()
    seen = []

    def invert(fr):
        a = fr.array("u8", [H * 3 // 2, W]).numpy()
        a[:H] = 255 - a[:H]  # the luma plane, in place
        seen.append(fr.seq)

    f = kpipe.Flow.of([SRC, invert, {"sink": "y4m", "path": str(inverted)}])
    f.run()
    assert seen == list(range(N))
    w, h, want = frames_of(plain)
    _, _, got = frames_of(inverted)
    assert (w, h, len(got)) == (W, H, N)
    for a, b in zip(got, want):
        assert np.array_equal(a[:W * H], 255 - b[:W * H])
        assert np.array_equal(a[W * H:], b[W * H:])


def test_python_source_into_builtin_sink(tmp_path):
    out = tmp_path / "last.npy"

    def make(fr):
        if fr.seq >= 5:
            return False
        fr.array("f32", [16]).numpy()[:] = np.arange(16, dtype=np.float32) * fr.seq
        fr.bytes = 64
        return True

    kpipe.Flow.of([make, {"sink": "npy", "path": str(out)}], frame_bytes=64).run()
    assert np.array_equal(np.load(out), np.arange(16, dtype=np.float32) * 4)


def test_a_python_stage_that_raises_fails_the_flow_and_keeps_what_was_written(tmp_path):
    """The frames that reached the sink before the failure stay in its
    file, whole and in order (those still in a queue when it failed are
    not written: how many is the threads' timing)."""
    path, plain = tmp_path / "partial.y4m", tmp_path / "plain.y4m"
    kpipe.Flow({"kpipe_flow": 1, "stages": [dict(SRC, name="src"),
                                            {"name": "out", "sink": "y4m", "path": str(plain)}]}
               ).run()

    def stage(fr):
        if fr.seq == 5:
            raise ValueError("frame five is bad")

    f = kpipe.Flow.of([SRC, stage, {"sink": "y4m", "path": str(path)}], queue=1)
    with pytest.raises(kpipe.Error, match="raised ValueError: frame five is bad") as e:
        f.run()
    assert isinstance(e.value.__cause__, ValueError)
    _, _, want = frames_of(plain)
    _, _, got = frames_of(path)  # parses whole frames only: a cut one fails here
    assert len(got) <= 5
    for a, b in zip(got, want):
        assert len(a) == W * H * 3 // 2 and np.array_equal(a, b)


def test_a_bad_builtin_stage_is_named():
    with pytest.raises(kpipe.Error, match=r"\$\.stages\[0\].*frobs"):
        kpipe.Flow.of([dict(SRC, frobs=1), lambda fr: None, {"sink": "null"}])
    with pytest.raises(kpipe.Error, match="sink"):
        kpipe.Flow.of([SRC, lambda fr: None, {"sink": "teleport"}])
