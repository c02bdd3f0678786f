"""examples/enhance_model.json as a user runs it: `kpipe flow` from the
folder of their clip, at any size up to the example's bound, with the
model that scripts/make_sr_model.py trained.

Frames are drawn here (shapes, strokes and gratings, anti-aliased), each
size's clip is their 2x downscale encoded as H.264, and the flow's 2x
output is compared with the drawn originals: its luma PSNR must beat
bicubic upscaling of the same decoded clip (PyTorch's bicubic, a = -0.75)
at every size but the smallest, where it must tie (see below).

Environment: KPIPE_CLI (the kpipe program), KP_MODEL_DEVICE (cpu by
default; cuda on the GPU machine). Skipped where kpipe has no video files.
"""
import os
import shutil
import subprocess

import pytest

np = pytest.importorskip("numpy")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
CLI = os.path.abspath(os.environ.get("KPIPE_CLI", "build/src/kpipe"))
DEVICE = os.environ.get("KP_MODEL_DEVICE", "cpu")
FLOW = os.path.join(ROOT, "examples", "enhance_model.json")


def tile(rng, n):
    """An RGB tile [3, n, n] in [0, 1], drawn at twice the size and averaged."""
    N = 2 * n
    yy, xx = np.meshgrid(np.linspace(0, 1, N), np.linspace(0, 1, N), indexing="ij")
    img = rng.uniform(0.2, 0.8, (3, 1, 1)) + rng.uniform(-0.5, 0.5, (3, 1, 1)) * xx \
        + rng.uniform(-0.5, 0.5, (3, 1, 1)) * yy
    for _ in range(10):
        kind = rng.integers(4)
        cx, cy, colour = rng.uniform(), rng.uniform(), rng.uniform(0, 1, (3, 1, 1))
        if kind == 0:
            m = (np.abs(xx - cx) < rng.uniform(0.02, 0.3)) & (np.abs(yy - cy) < rng.uniform(0.02, 0.3))
        elif kind == 1:
            d = ((xx - cx) / rng.uniform(0.02, 0.25)) ** 2 + ((yy - cy) / rng.uniform(0.02, 0.25)) ** 2
            m = 1 / (1 + np.exp(-np.clip((1 - d) / rng.uniform(0.01, 0.3), -50, 50)))
        elif kind == 2:
            a = rng.uniform(0, np.pi)
            u = (xx - cx) * np.cos(a) + (yy - cy) * np.sin(a)
            v = -(xx - cx) * np.sin(a) + (yy - cy) * np.cos(a)
            m = (np.abs(u) < rng.uniform(0.05, 0.35)) & (np.abs(v) < rng.uniform(0.004, 0.012))
        else:
            a, f = rng.uniform(0, np.pi), rng.uniform(5, 30)
            g = 0.5 + 0.5 * np.sin(2 * np.pi * f * (xx * np.cos(a) + yy * np.sin(a)))
            m = (((xx - cx) ** 2 + (yy - cy) ** 2) < rng.uniform(0.05, 0.25) ** 2) * g
        m = np.asarray(m, dtype=np.float64)
        img = img * (1 - m) + colour * m
    return np.clip(img, 0, 1).reshape(3, n, 2, n, 2).mean(axis=(2, 4))


def draw(h, w, seed, n=128):
    """An RGB frame [3, h, w]: a mosaic of n x n tiles, so its detail is at
    the scale of pixels whatever the frame's size, as a camera's is."""
    rng = np.random.default_rng(seed)
    rows = [np.concatenate([tile(rng, n) for _ in range(-(-w // n))], axis=2)
            for _ in range(-(-h // n))]
    return np.concatenate(rows, axis=1)[:, :h, :w]


def to_i420(rgb):
    """BT.709 limited range, 4:2:0 from each 2x2 block's mean."""
    r, g, b = rgb
    y = 16 + 219 * (0.2126 * r + 0.7152 * g + 0.0722 * b)
    m = rgb.reshape(3, rgb.shape[1] // 2, 2, rgb.shape[2] // 2, 2).mean(axis=(2, 4))
    ym = 0.2126 * m[0] + 0.7152 * m[1] + 0.0722 * m[2]
    u = 128 + 224 * (m[2] - ym) / 1.8556
    v = 128 + 224 * (m[0] - ym) / 1.5748
    return [np.clip(np.rint(p), 0, 255).astype(np.uint8) for p in (y, u, v)]


def write_y4m(path, frames):
    h, w = frames[0].shape[1:]
    with open(path, "wb") as f:
        f.write(b"YUV4MPEG2 W%d H%d F30:1 Ip A1:1 C420jpeg\n" % (w, h))
        for fr in frames:
            f.write(b"FRAME\n")
            for p in to_i420(fr):
                f.write(p.tobytes())


def read_y4m_luma(path):
    with open(path, "rb") as f:
        data = f.read()
    head, rest = data.split(b"\n", 1)
    tok = {t[:1]: t[1:] for t in head.split()[1:]}
    w, h = int(tok[b"W"]), int(tok[b"H"])
    size = w * h * 3 // 2
    out = []
    while rest.startswith(b"FRAME"):
        rest = rest.split(b"\n", 1)[1]
        out.append(np.frombuffer(rest[:w * h], np.uint8).reshape(h, w).astype(np.float64))
        rest = rest[size:]
    return out


def bicubic2x(img):
    """2x upscaling with the cubic kernel a = -0.75 (PyTorch's bicubic,
    align_corners False), edges clamped."""
    def kernel(t):
        a, t = -0.75, np.abs(t)
        return np.where(t <= 1, (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1,
                        np.where(t < 2, a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a, 0))

    def axis(x, n):
        out_pos = (np.arange(2 * n) + 0.5) / 2 - 0.5
        base = np.floor(out_pos).astype(int)
        acc = 0
        for k in range(-1, 3):
            idx = np.clip(base + k, 0, n - 1)
            wgt = kernel(out_pos - (base + k))
            acc = acc + np.take(x, idx, axis=-1) * wgt
        return acc
    h, w = img.shape
    rows = axis(img, w)                    # along width
    return axis(rows.T, h).T               # along height


def psnr(a, b):
    mse = np.mean((np.clip(a, 0, 255) - b) ** 2)
    return 10 * np.log10(255.0 ** 2 / max(mse, 1e-12))


def flow(cwd, text_or_path):
    path = text_or_path
    if text_or_path.lstrip().startswith("{"):
        path = os.path.join(cwd, "f.json")
        with open(path, "w") as f:
            f.write(text_or_path)
    r = run_flow(cwd, path)
    assert r.returncode == 0, "kpipe flow %s failed:\n%s\n%s" % (path, r.stdout, r.stderr)
    return r.stdout


def run_flow(cwd, path):
    """`kpipe flow PATH` in cwd; skips where the build or machine cannot."""
    r = subprocess.run([CLI, "flow", path, "--device", DEVICE, "--quiet"], cwd=cwd,
                       capture_output=True, text=True)
    if r.returncode != 0 and "built without video" in r.stderr + r.stdout:
        pytest.skip("kpipe was built without video files")
    if r.returncode != 0 and 'device "%s"' % DEVICE in r.stderr and "0 devices" in r.stderr:
        pytest.skip("no %s device here: %s" % (DEVICE, r.stderr.strip()))
    return r


def encode(cwd, src, dst):
    flow(cwd, '{"kpipe_flow": 1, "name": "enc", "stages": ['
              '{"name": "read", "source": "y4m", "path": "%s"},'
              '{"name": "encode", "sink": "video", "path": "%s", "codec": "h264", "crf": 18,'
              ' "preset": "veryfast"}]}' % (src, dst))


def decode(cwd, src, dst):
    flow(cwd, '{"kpipe_flow": 1, "name": "dec", "stages": ['
              '{"name": "decode", "source": "video", "path": "%s", "format": "i420"},'
              '{"name": "write", "sink": "y4m", "path": "%s"}]}' % (src, dst))


# (output width, height): the clips are half of each; odd multiples of
# two, wide and tall; 128x128 is the smallest clip the example is for
# (64x64), and 64x64 a 32x32 clip below it. cpu runs the small ones.
SIZES = [(64, 64), (128, 128), (132, 76), (320, 180), (516, 292), (640, 1136), (1280, 720)]


@pytest.fixture(scope="module")
def have_model():
    if not os.path.exists(os.path.join(ROOT, "examples", "models", "sr_x2.onnx")):
        pytest.skip("examples/models/sr_x2.onnx is missing (scripts/make_sr_model.py)")


@pytest.mark.parametrize("size", SIZES, ids=["%dx%d" % s for s in SIZES])
def test_enhance_beats_bicubic(have_model, tmp_path, size):
    """Each size through the example unchanged: the output is twice the
    clip's size, and closer to the originals than bicubic upscaling."""
    w, h = size
    frames = [draw(h, w, seed) for seed in range(2)]
    small = [f.reshape(3, h // 2, 2, w // 2, 2).mean(axis=(2, 4)) for f in frames]
    write_y4m(str(tmp_path / "lr.y4m"), small)
    encode(str(tmp_path), "lr.y4m", "clip.mp4")
    out = flow(str(tmp_path), FLOW)
    assert os.path.exists(tmp_path / "clip_x2.mp4"), out
    decode(str(tmp_path), "clip_x2.mp4", "x2.y4m")
    decode(str(tmp_path), "clip.mp4", "lr_dec.y4m")
    got, lr = read_y4m_luma(str(tmp_path / "x2.y4m")), read_y4m_luma(str(tmp_path / "lr_dec.y4m"))
    want = [to_i420(f)[0].astype(np.float64) for f in frames]
    assert len(got) == len(want) and got[0].shape == want[0].shape, (
        "%d frames of %s, expected %d of %s" % (len(got), got[0].shape, len(want), want[0].shape))
    model = np.mean([psnr(g, t) for g, t in zip(got, want)])
    bicubic = np.mean([psnr(bicubic2x(l), t) for l, t in zip(lr, want)])
    print("%dx%d: model %.2f dB, bicubic %.2f dB" % (w, h, model, bicubic))
    # A 64x64 output is a 32x32 clip, below the sizes the example is for: a
    # corner of one tile, mostly smooth colour where bicubic is all but
    # exact and there is no detail to restore; there the model must tie
    # (0.1 dB). From the 64x64 clip (128x128 out) up it must beat it.
    margin = -0.1 if w * h <= 64 * 64 else 0.0
    assert model > bicubic + margin, (
        "%dx%d: the model's %.2f dB is not above bicubic's %.2f dB" % (w, h, model, bicubic))


def test_main10_clip_runs_unchanged(have_model, tmp_path):
    """An HEVC Main10 clip through the example unchanged: its source names
    NV12, so each sample is rounded to 8 bits, and the output is twice the
    size, every frame there, and (to 8 bits) the picture the model makes of
    the same clip read as 8-bit frames first."""
    w, h, n = 96, 64, 3
    flow(str(tmp_path), '{"kpipe_flow": 1, "name": "m10", "stages": ['
         '{"name": "src", "source": "testsrc", "width": %d, "height": %d, "frames": %d,'
         ' "format": "p016"},'
         '{"name": "out", "sink": "video", "path": "clip.mp4", "codec": "hevc", "crf": 16,'
         ' "preset": "ultrafast"}]}' % (w, h, n))
    flow(str(tmp_path), FLOW)
    decode(str(tmp_path), "clip_x2.mp4", "x2.y4m")
    got = read_y4m_luma(str(tmp_path / "x2.y4m"))
    assert len(got) == n and got[0].shape == (2 * h, 2 * w)
    # the same frames, rounded to 8 bits first and written as H.264 (crf 0)
    flow(str(tmp_path), '{"kpipe_flow": 1, "name": "to8", "stages": ['
         '{"name": "src", "source": "video", "path": "clip.mp4", "format": "nv12"},'
         '{"name": "out", "sink": "video", "path": "clip8.mp4", "crf": 0}]}')
    os.rename(tmp_path / "clip_x2.mp4", tmp_path / "main10_x2.mp4")
    os.rename(tmp_path / "clip.mp4", tmp_path / "main10.mp4")
    os.rename(tmp_path / "clip8.mp4", tmp_path / "clip.mp4")
    flow(str(tmp_path), FLOW)
    decode(str(tmp_path), "clip_x2.mp4", "x2_8.y4m")
    want = read_y4m_luma(str(tmp_path / "x2_8.y4m"))
    for g, t in zip(got, want):
        assert psnr(g, t) > 40.0


def test_odd_size_refused(have_model, tmp_path):
    """4:2:0 needs even sizes: an odd clip is refused by name, before any
    frame is written."""
    h, w = 45, 61
    with open(tmp_path / "odd.y4m", "wb") as f:
        f.write(b"YUV4MPEG2 W%d H%d F30:1 Ip C420jpeg\nFRAME\n" % (w, h))
        f.write(bytes(w * h + 2 * ((w + 1) // 2) * ((h + 1) // 2)))
    with open(tmp_path / "odd.json", "w") as f:
        f.write('{"kpipe_flow": 1, "name": "odd", "stages": ['
                '{"name": "read", "source": "y4m", "path": "odd.y4m"},'
                '{"name": "write", "sink": "video", "path": "odd.mp4"}]}')
    r = run_flow(str(tmp_path), "odd.json")
    assert r.returncode != 0
    assert "61x45" in r.stderr and "even" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "odd.mp4")


def test_cpu_and_cuda_agree(have_model, tmp_path):
    """The same clip through the example's pipeline on cpu (fp32) and on
    cuda (fp16 on tensor cores): the frames, before any encoder, within a
    few levels of each other. Runs where there is a cuda device."""
    if DEVICE != "cuda":
        pytest.skip("compares the cuda device with cpu (KP_MODEL_DEVICE=cuda)")
    w, h = 320, 180
    frames = [draw(h, w, seed) for seed in range(2)]
    write_y4m(str(tmp_path / "lr.y4m"), [f.reshape(3, h // 2, 2, w // 2, 2).mean(axis=(2, 4))
                                         for f in frames])
    encode(str(tmp_path), "lr.y4m", "clip.mp4")
    pipe = os.path.join(ROOT, "examples", "enhance_model_x2.json")
    out = {}
    for dev in ("cpu", "cuda"):
        with open(tmp_path / ("%s.json" % dev), "w") as f:
            f.write('{"kpipe_flow": 1, "name": "x2", "stages": ['
                    '{"name": "decode", "source": "video", "path": "clip.mp4", "format": "nv12"},'
                    '{"name": "enhance", "pipeline": "%s"},'
                    '{"name": "write", "sink": "y4m", "path": "%s.y4m"}]}' % (pipe, dev))
        r = subprocess.run([CLI, "flow", "%s.json" % dev, "--device", dev, "--quiet"],
                           cwd=str(tmp_path), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out[dev] = np.frombuffer(open(tmp_path / ("%s.y4m" % dev), "rb").read(), np.uint8)
    a, b = out["cpu"].astype(int), out["cuda"].astype(int)
    assert a.shape == b.shape
    diff = np.abs(a - b)
    print("cpu vs cuda: max %d, %.4f%% of bytes differ by more than 1" % (
        diff.max(), 100.0 * np.mean(diff > 1)))
    assert diff.max() <= 4 and np.mean(diff > 1) < 0.01
