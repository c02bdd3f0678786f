"""Whole models through `kpipe run MODEL.onnx`, checked against ONNX Runtime
(onnxruntime-node, CPU) on the same inputs: every element of every output.

Environment: KPIPE_CLI (the kpipe program), KP_ORT_DIR (the folder where
scripts/bootstrap.sh installed onnxruntime-node), KP_MODEL_DEVICE (cpu by
default; cuda on the GPU machine). Without onnx, numpy, node or
onnxruntime-node the tests are skipped, each naming what is missing.
"""
import os
import shutil
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
sys.path.insert(0, os.path.dirname(__file__))
import make_models  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CLI = os.environ.get("KPIPE_CLI", "build/src/kpipe")
DEVICE = os.environ.get("KP_MODEL_DEVICE", "cpu")
# Sanitizer builds run a sized-down set (KP_MODELS_QUICK=1): graph mode only,
# without the ResNet-18 and the 16-convolution SRVGG, whose 1.8 and 1.2 GFLOP
# take minutes under instrumentation (srvgg_x2_shuffle keeps the family, at
# 4 convolutions); the plain build runs every model in both modes.
QUICK = os.environ.get("KP_MODELS_QUICK") == "1"
NAMES = sorted(n for n in make_models.MODELS if not (QUICK and n in ("resnet18", "srvgg_x2")))
# mode, and the engine's fusion (--fuse off: every node as the file has it)
VARIANTS = [("graph", "on")] if QUICK else [("graph", "on"), ("stream", "on"), ("graph", "off")]
ORT_DIR = os.environ.get("KP_ORT_DIR", os.path.join(HERE, "..", "..", "build-deps", "ort"))


def ort_available():
    if not shutil.which("node"):
        return "node is not installed"
    if not os.path.isdir(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")):
        return "onnxruntime-node is not installed in %s (scripts/bootstrap.sh installs it)" % ORT_DIR
    return None


def run_kpipe(model, inputs, outputs, extra=()):
    cmd = [CLI, "run", model, "--device", DEVICE] + list(extra)
    for name, files in inputs.items():
        for f in files if isinstance(files, list) else [files]:
            cmd += ["--input", "%s=%s" % (name, f)]
    for name, f in outputs.items():
        cmd += ["--output", "%s=%s" % (name, f)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, "kpipe run failed:\n%s\n%s" % (r.stdout, r.stderr)
    return r.stdout


def run_ort(model, inputs, outputs):
    cmd = ["node", os.path.join(HERE, "ort_run.js"), model]
    cmd += ["%s=%s" % kv for kv in inputs.items()] + ["--"]
    cmd += ["%s=%s" % kv for kv in outputs.items()]
    env = dict(os.environ, KP_ORT_DIR=ORT_DIR)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert r.returncode == 0, "onnxruntime failed:\n%s" % r.stderr


def close(got, want, name):
    """Every element within 1e-3 of the reference's largest magnitude (float32
    sums in another order), and the whole within 1e-4 relative L2 error."""
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (name, got.shape, want.shape)
    assert np.isfinite(got).all(), "%s: NaN or Inf in the output" % name
    scale = max(float(np.abs(want).max()), 1e-6)
    err = np.abs(got.astype(np.float64) - want)
    worst = int(err.argmax())
    assert err.max() <= 1e-3 * scale, "%s: element %d is %r, expected %r" % (
        name, worst, got.flat[worst], want.flat[worst])
    rel = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-12)
    assert rel < 1e-4, "%s: relative L2 error %.3g" % (name, rel)


def max_args(bounds):
    return ["--max", ",".join("%s=%d" % kv for kv in bounds.items())] if bounds else []


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    why = ort_available()
    if why:
        pytest.skip(why)
    d = tmp_path_factory.mktemp("models")
    make_models.write_all(str(d))
    return d


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode,fuse", VARIANTS)
def test_model_matches_onnxruntime(models, tmp_path, name, mode, fuse):
    _, shapes, bounds = make_models.MODELS[name]
    model = str(models / (name + ".onnx"))
    rng = np.random.default_rng(7)
    ins = {}
    for inp, shape in shapes.items():
        f = tmp_path / (inp + ".npy")
        np.save(f, rng.uniform(-1, 1, shape).astype(np.float32))
        ins[inp] = str(f)
    import onnx
    outs = [o.name for o in onnx.load(model).graph.output]
    got = {o: str(tmp_path / ("kp_" + o + ".npy")) for o in outs}
    want = {o: str(tmp_path / ("ort_" + o + ".npy")) for o in outs}
    run_kpipe(model, ins, got, ["--mode", mode, "--fuse", fuse] + max_args(bounds))
    run_ort(model, ins, want)
    for o in outs:
        close(np.load(got[o]), np.load(want[o]), "%s.%s" % (name, o))


def test_new_size_within_max(models, tmp_path):
    """A second input size under the same bounds: the engine re-infers and,
    in graph mode, captures one more graph; the output is the new size's."""
    name = "srvgg_x2_shuffle" if QUICK else "srvgg_x2"
    model = str(models / (name + ".onnx"))
    bounds = make_models.MODELS[name][2]
    rng = np.random.default_rng(3)
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(a, rng.uniform(-1, 1, [1, 3, bounds["height"], bounds["width"]]).astype(np.float32))
    np.save(b, rng.uniform(-1, 1, [1, 3, 30, 42]).astype(np.float32))
    got, want = tmp_path / "got.npy", tmp_path / "want.npy"
    run_kpipe(model, {"frame": [str(a), str(b)]}, {"enhanced": str(got)},
              ["--ticks", "2"] + max_args(bounds))
    run_ort(model, {"frame": str(b)}, {"enhanced": str(want)})
    close(np.load(got), np.load(want), name + " at 30x42")
