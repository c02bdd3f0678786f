"""A stream that changes size twice, through examples/enhance_model_x2.json
(the pipeline sized by its frames) unchanged: every output frame is twice
its input's size and equals what the same pipeline makes of its segment
read alone. The source reads the stream with max_width and max_height, so
its frames keep the largest pitch; the pipeline stage packs the narrower
ones at their own width before its modules read them."""
import os

import numpy as np
import pytest

import kpipe

from conftest import example, has_cuda

SIZES = [(160, 96), (128, 72)]  # the stream: A, B, A
PER = 3




DEVICES = ["cpu"] + (["cuda"] if has_cuda() else [])


def enhanced(path, device, source_extra=None):
    """The example pipeline's output frames for the clip at `path`, each
    as a u8 array of its NV12 bytes."""
    got = []

    def keep(frame):
        a = frame.array("u8", [frame.bytes])
        if device == "cpu":
            got.append(np.array(a.numpy()))
        else:  # device memory, read on the frame's stream
            import torch
            with torch.cuda.stream(torch.cuda.ExternalStream(frame.stream.native)):
                got.append(torch.from_dlpack(a).cpu().numpy())

    src = dict({"source": "video", "path": path, "format": "nv12"}, **(source_extra or {}))
    kpipe.Flow.of([src, {"pipeline": example("enhance_model_x2.json")}, keep],
                  device=device).run()
    return got


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    if not kpipe._lib.lib.kp_video_built():
        pytest.skip("kpipe was built without video files (FFmpeg)")
    if not os.path.exists(example("models/sr_x2.onnx")):
        pytest.skip("examples/models/sr_x2.onnx is missing (scripts/make_sr_model.py)")
    d = tmp_path_factory.mktemp("switch")
    seg = []
    for k, (w, h) in enumerate(SIZES):
        p = str(d / ("seg_%d.ts" % k))
        kpipe.Flow.of([{"source": "testsrc", "width": w, "height": h, "frames": PER,
                        "format": "nv12"},
                       {"sink": "video", "path": p, "codec": "h264", "crf": 18,
                        "preset": "veryfast"}]).run()
        seg.append(p)
    joined = str(d / "switching.ts")
    with open(joined, "wb") as out:
        for k in (0, 1, 0):
            with open(seg[k], "rb") as f:
                out.write(f.read())
    return seg, joined


@pytest.mark.parametrize("device", DEVICES)
def test_switching_stream_equals_its_segments(clips, device):
    if device == "cuda":
        pytest.importorskip("torch")
    seg, joined = clips
    alone = [enhanced(p, device) for p in seg]
    w, h = SIZES[0]
    got = enhanced(joined, device, {"max_width": w, "max_height": h})
    want = alone[0] + alone[1] + alone[0]
    assert len(got) == len(want) == 3 * PER
    for i, (g, x) in enumerate(zip(got, want)):
        k = (0, 1, 0)[i // PER]
        ow, oh = 2 * SIZES[k][0], 2 * SIZES[k][1]
        assert g.size == x.size == ow * oh * 3 // 2, "frame %d: %d bytes, expected %dx%d NV12" % (
            i, g.size, ow, oh)
        assert np.array_equal(g, x), "frame %d (%dx%d) differs from its segment's" % (i, ow, oh)
