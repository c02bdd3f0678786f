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
# mode, the engine's fusion (--fuse off: every node as the file has it), and
# its precision: on cuda, fp16 convolutions too (within FP16_TOL)
VARIANTS = [("graph", "on", "fp32")] if QUICK else [
    ("graph", "on", "fp32"), ("stream", "on", "fp32"), ("graph", "off", "fp32")]
if DEVICE == "cuda":
    VARIANTS += [("graph", "on", "fp16"), ("stream", "off", "fp16")]
# fp16 storage between convolutions: each element within 2e-2 of the
# reference's largest magnitude, the whole within 5e-3 relative L2 error
FP16_TOL = (2e-2, 5e-3)
ORT_DIR = os.environ.get("KP_ORT_DIR", os.path.join(HERE, "..", "..", "build-deps", "ort"))


def ort_available():
    if not shutil.which("node"):
        return "node is not installed"
    if not os.path.isdir(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")):
        return "onnxruntime-node is not installed in %s (scripts/bootstrap.sh installs it)" % ORT_DIR
    return None


def run_kpipe(model, inputs, outputs, extra=(), env=None):
    cmd = [CLI, "run", model, "--device", DEVICE] + list(extra)
    for name, files in inputs.items():
        for f in files if isinstance(files, list) else [files]:
            cmd += ["--input", "%s=%s" % (name, f)]
    for name, f in outputs.items():
        cmd += ["--output", "%s=%s" % (name, f)]
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, **env) if env else None)
    assert r.returncode == 0, "kpipe run failed:\n%s\n%s" % (r.stdout, r.stderr)
    return r


def run_ort(model, inputs, outputs):
    cmd = ["node", os.path.join(HERE, "ort_run.js"), model]
    cmd += ["%s=%s" % kv for kv in inputs.items()] + ["--"]
    cmd += ["%s=%s" % kv for kv in outputs.items()]
    env = dict(os.environ, KP_ORT_DIR=ORT_DIR)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert r.returncode == 0, "onnxruntime failed:\n%s" % r.stderr


def close(got, want, name, tol=(1e-3, 1e-4)):
    """Every element within 1e-3 of the reference's largest magnitude (float32
    sums in another order), and the whole within 1e-4 relative L2 error; or
    the tolerances `tol` gives."""
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (name, got.shape, want.shape)
    assert np.isfinite(got).all(), "%s: NaN or Inf in the output" % name
    scale = max(float(np.abs(want).max()), 1e-6)
    err = np.abs(got.astype(np.float64) - want)
    worst = int(err.argmax())
    assert err.max() <= tol[0] * scale, "%s: element %d is %r, expected %r" % (
        name, worst, got.flat[worst], want.flat[worst])
    rel = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-12)
    assert rel < tol[1], "%s: relative L2 error %.3g" % (name, rel)
    print("%s: max error %.3g of the largest magnitude, relative L2 %.3g" % (
        name, err.max() / scale, rel))


def max_args(bounds):
    return ["--max", ",".join("%s=%d" % kv for kv in bounds.items())] if bounds else []


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    make_models.write_all(str(d))
    return d


@pytest.fixture(scope="module")
def models(model_files):
    why = ort_available()
    if why:
        pytest.skip(why)
    return model_files


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode,fuse,precision", VARIANTS)
def test_model_matches_onnxruntime(models, tmp_path, name, mode, fuse, precision):
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
    run_kpipe(model, ins, got, ["--mode", mode, "--fuse", fuse, "--precision", precision]
              + max_args(bounds))
    run_ort(model, ins, want)
    for o in outs:
        close(np.load(got[o]), np.load(want[o]), "%s.%s" % (name, o),
              FP16_TOL if precision == "fp16" else (1e-3, 1e-4))


@pytest.mark.parametrize("precision", ["fp32", "fp16"] if DEVICE == "cuda" else ["fp32"])
def test_new_size_within_max(models, tmp_path, precision):
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
              ["--ticks", "2", "--precision", precision] + max_args(bounds))
    run_ort(model, {"frame": str(b)}, {"enhanced": str(want)})
    close(np.load(got), np.load(want), name + " at 30x42",
          FP16_TOL if precision == "fp16" else (1e-3, 1e-4))


def random_inputs(name, tmp_path):
    _, shapes, _ = make_models.MODELS[name]
    rng = np.random.default_rng(7)
    ins = {}
    for inp, shape in shapes.items():
        f = tmp_path / (inp + ".npy")
        np.save(f, rng.uniform(-1, 1, shape).astype(np.float32))
        ins[inp] = str(f)
    return ins


def two_runs(model_files, tmp_path, name, ref_args, got_args, label, tol=(1e-3, 1e-4),
             got_env=None):
    """Model `name` on the same random inputs run twice, with ref_args and
    with got_args (its bounds added to both): every output of the second
    within `tol` of the first's. The second run's process comes back."""
    model = str(model_files / (name + ".onnx"))
    bounds = make_models.MODELS[name][2]
    ins = random_inputs(name, tmp_path)
    import onnx
    outs = [o.name for o in onnx.load(model).graph.output]
    ref = {o: str(tmp_path / ("ref_" + o + ".npy")) for o in outs}
    got = {o: str(tmp_path / ("got_" + o + ".npy")) for o in outs}
    run_kpipe(model, ins, ref, list(ref_args) + max_args(bounds))
    r = run_kpipe(model, ins, got, list(got_args) + max_args(bounds), env=got_env)
    for o in outs:
        close(np.load(got[o]), np.load(ref[o]), "%s.%s %s" % (name, o, label), tol)
    return r


def has_cudnn(model):
    """Whether the cuda device runs this model's convolutions on cuDNN."""
    r = subprocess.run([CLI, "validate", model, "--device", "cuda"], capture_output=True,
                       text=True)
    return r.returncode == 0 and "cuDNN" in r.stdout


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode,fuse", [("graph", "on"), ("stream", "off")])
def test_fp16_matches_fp32(model_files, tmp_path, name, mode, fuse):
    """On cuda, where ONNX Runtime may be absent: every model in fp16
    against the same device's fp32 (itself checked against ONNX Runtime on
    cpu and against PyTorch on cuda), within FP16_TOL, with no NaN or Inf."""
    if DEVICE != "cuda":
        pytest.skip("fp16 runs on cuda")
    two_runs(model_files, tmp_path, name, ["--mode", mode, "--fuse", fuse],
             ["--mode", mode, "--fuse", fuse, "--precision", "fp16"], "fp16", FP16_TOL)


@pytest.mark.parametrize("name", NAMES)
def test_cuda_matches_cpu(model_files, tmp_path, name):
    """On cuda, where ONNX Runtime may be absent: fp32 with every fusion
    against the cpu device's (checked against ONNX Runtime where it is)."""
    if DEVICE != "cuda":
        pytest.skip("compares the cuda device with cpu")
    two_runs(model_files, tmp_path, name, ["--device", "cpu"], [], "cuda")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_algo_cache(model_files, tmp_path, precision):
    """On cuda with cuDNN: the first run chooses every convolution's
    algorithm and saves the choices; the next run finds them all there and
    gives the same outputs; a damaged file is ignored and rewritten."""
    if DEVICE != "cuda":
        pytest.skip("the algorithm cache is cuda's (cuDNN)")
    model = str(model_files / "conv_patterns.onnx")
    cache = tmp_path / "algos"
    env = dict(os.environ, KP_ALGO_CACHE_DIR=str(cache))
    cmd = [CLI, "validate", model, "--device", "cuda", "--precision", precision]

    def validate():
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
        line = [l for l in r.stdout.splitlines() if "algorithm cache:" in l]
        if not line and "cuDNN" not in r.stdout:
            pytest.skip("no cuDNN on this machine")
        assert len(line) == 1, r.stdout
        return line[0], r.stdout

    first, _ = validate()
    assert "(0 convolution shapes found there" in first, first
    files = list(cache.glob("conv-*.algos"))
    assert len(files) == 1, files
    second, out = validate()
    assert ", 0 chosen afresh" in second and "(0 convolution" not in second, second
    assert "from the cache" in out
    files[0].write_text("kpipe algorithms 1\nmodel 00\n")
    third, _ = validate()
    assert "(0 convolution shapes found there" in third, third
    fourth, _ = validate()
    assert ", 0 chosen afresh" in fourth, fourth
    two_runs(model_files, tmp_path, "conv_patterns",
             ["--precision", precision, "--algo-cache", "off"],
             ["--precision", precision, "--algo-cache", str(cache)], "cached",
             FP16_TOL if precision == "fp16" else (1e-5, 1e-6))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_fused_call_refused(model_files, tmp_path, precision):
    """On cuda with cuDNN: where cuDNN refuses its fused convolution call
    (bias, residual and ReLU in one), the convolution runs unfused, says so,
    and gives what the fused call gives. KP_CUDNN_REFUSE_FUSED makes the
    call answer as a refusing cuDNN does."""
    if DEVICE != "cuda":
        pytest.skip("cuDNN's fused call is cuda's")
    if not has_cudnn(str(model_files / "conv_patterns.onnx")):
        pytest.skip("no cuDNN on this machine")
    r = two_runs(model_files, tmp_path, "conv_patterns", ["--precision", precision],
                 ["--precision", precision], "unfused",
                 FP16_TOL if precision == "fp16" else (1e-5, 1e-6),
                 got_env={"KP_CUDNN_REFUSE_FUSED": "1", "KP_LOG_LEVEL": "info"})
    assert "fused convolution call refused" in r.stderr, r.stderr


def test_fp16_needs_cuda(models, tmp_path):
    """fp16 convolutions are cuda's (cuDNN): a cpu device refuses them by
    name instead of running fp32 quietly."""
    if DEVICE == "cuda":
        pytest.skip("the cpu device's refusal")
    model = str(models / "conv_patterns.onnx")
    r = subprocess.run([CLI, "run", model, "--device", "cpu", "--precision", "fp16"],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "fp16" in r.stderr and "cuda" in r.stderr, r.stderr
