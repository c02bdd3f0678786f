"""Pipelines from Python on the cpu backend, every element checked against
NumPy: both modes, dynamic shapes, rebinding, sizes from 1 to 16 M, new
and reused inputs, bad inputs named, and views that outlive the pipeline."""
import gc

import numpy as np
import pytest

import kpipe
from conftest import example

rng = np.random.default_rng(1)


def relu_spec(n, mode="graph", dynamic=False, binding="copy"):
    size = {"max": n} if dynamic else n
    return {"kpipe_spec": 1, "name": "relu%d" % n, "execution": mode, "input_binding": binding,
            "modules": [{"type": "relu", "id": "r", "params": {"size": size}}],
            "inputs": {"x": "r.input"}, "outputs": {"y": "r.output"}}


@pytest.mark.parametrize("mode", ["graph", "stream"])
def test_sample_matches_numpy(mode):
    p = kpipe.Pipeline(example("sample.json"), device="cpu", mode=mode)
    assert p.inputs == ["input0", "input1"] and p.outputs == ["output"] and p.mode == mode
    for _ in range(3):  # new inputs each tick
        a = rng.standard_normal(16384, dtype=np.float32)
        b = rng.standard_normal(16384, dtype=np.float32)
        y = np.from_dlpack(p({"input0": a, "input1": b})["output"])
        np.testing.assert_array_equal(y, np.maximum(a + b, 0))
    if mode == "graph":
        s = p.stats()
        assert s["calls"] == 3 and s["hits"] == 3 and s["misses"] == 0  # built at the first tick
    assert p.report()["n_modules"] == 2


@pytest.mark.parametrize("n", [1, 7, 1001, 1 << 20, 1 << 24])
def test_sizes(n):
    p = kpipe.Pipeline(relu_spec(n), device="cpu")
    x = rng.standard_normal(n, dtype=np.float32)
    for reuse in range(2):  # the same buffer twice, its contents changed
        x *= -1
        y = np.from_dlpack(p(x=x)["y"])
        np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_dynamic_shapes_per_tick():
    p = kpipe.Pipeline(relu_spec(4096, dynamic=True), device="cpu")
    for n in [4096, 1, 17, 4095, 1024, 17]:
        x = rng.standard_normal(n, dtype=np.float32)
        out = p(x=x)["y"]
        assert out.shape == (n,)
        np.testing.assert_array_equal(np.from_dlpack(out), np.maximum(x, 0))
    s = p.stats()
    assert s["calls"] == 6 and s["captures"] == 1  # shapes read on the device: one graph
    with pytest.raises(kpipe.Error) as e:
        p(x=np.zeros(4097, np.float32))  # past the declared maximum
    assert e.value.status == "KP_ERR_MISMATCH" and "4097" in e.value.detail


def test_rebind_rotating_inputs():
    p = kpipe.Pipeline(relu_spec(1000, binding="rebind"), device="cpu")
    bufs = [rng.standard_normal(1000, dtype=np.float32) for _ in range(3)]
    for t in range(9):
        x = bufs[t % 3]
        np.testing.assert_array_equal(np.from_dlpack(p(x=x)["y"]), np.maximum(x, 0))
    s = p.stats()
    assert s["calls"] == 9 and s["captures"] == 1 and s["buffer_bytes"] == 0, s  # no copies
    assert p.report()["binding"] == "rebind"


def test_fused_spec_matches_numpy():
    p = kpipe.Pipeline(example("fused.json"), device="cpu")
    n = 12345
    sig = rng.standard_normal(n, dtype=np.float32) * 3
    off = rng.standard_normal(n, dtype=np.float32)
    out = p(signal=sig, offset=off)
    lim = np.clip((sig + off) * np.float32(0.5), -1, 1).astype(np.float32)
    np.testing.assert_array_equal(np.from_dlpack(out["limited"]), lim)
    np.testing.assert_array_equal(np.from_dlpack(out["y"]),
                                  (lim * np.float32(32767)).astype(np.int32))


def test_spec_forms(tmp_path):
    spec = relu_spec(8)
    path = tmp_path / "relu.json"
    import json
    path.write_text(json.dumps(spec))
    x = np.arange(-4, 4, dtype=np.float32)
    for form in (spec, json.dumps(spec), str(path), path):
        y = np.from_dlpack(kpipe.Pipeline(form)(x=x)["y"])
        np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_bad_specs_are_named(tmp_path):
    with pytest.raises(kpipe.Error) as e:
        kpipe.Pipeline('{"kpipe_spec": 1, "modules": [}')
    assert e.value.status == "KP_ERR_PARSE" and "line 1" in e.value.detail
    with pytest.raises(kpipe.Error) as e:
        kpipe.Pipeline(str(tmp_path / "missing.json"))
    assert e.value.status == "KP_ERR_IO" and "missing.json" in e.value.detail
    with pytest.raises(kpipe.Error) as e:
        kpipe.Pipeline(relu_spec(8), mode="fast")
    assert e.value.status == "KP_ERR_INVALID_ARG" and "fast" in e.value.detail
    with pytest.raises(kpipe.Error) as e:
        kpipe.Pipeline(relu_spec(8), miss="sometimes")
    assert e.value.status == "KP_ERR_PARSE" and "sometimes" in e.value.detail
    with pytest.raises(kpipe.Error) as e:
        kpipe.Pipeline(42)
    assert e.value.status == "KP_ERR_INVALID_ARG"
    with pytest.raises(kpipe.Error) as e:
        kpipe.Pipeline(relu_spec(8), device="tpu")
    assert e.value.status in ("KP_ERR_NO_DEVICE", "KP_ERR_INVALID_ARG") and "tpu" in e.value.detail


def test_bad_inputs_are_named_and_change_nothing():
    p = kpipe.Pipeline(relu_spec(8, dynamic=True), device="cpu")
    x = np.arange(-4, 4, dtype=np.float32)
    good = np.from_dlpack(p(x=x)["y"]).copy()
    cases = [
        (dict(x=x.astype(np.float64)), "KP_ERR_UNSUPPORTED", "float64"),
        (dict(x=x.astype(np.bool_)), "KP_ERR_UNSUPPORTED", "bool"),  # NumPy 2: bool8
        (dict(x=x.astype(np.complex64)), "KP_ERR_UNSUPPORTED", "complex"),
        (dict(x=x[::-1]), "KP_ERR_UNSUPPORTED", "strides"),
        (dict(x=x[::2]), "KP_ERR_", "x"),
        (dict(x=x.reshape(2, 4)), "KP_ERR_", "x"),
        (dict(x=x.astype(np.int32)), "KP_ERR_", "x"),
        (dict(), "KP_ERR_INVALID_ARG", "missing ['x']"),
        (dict(x=x, z=x), "KP_ERR_INVALID_ARG", "unknown ['z']"),
        (dict(x=[1.0, 2.0]), "KP_ERR_INVALID_ARG", "__dlpack__"),
    ]
    for feed, status, words in cases:
        with pytest.raises(kpipe.Error) as e:
            p(feed)
        assert e.value.status.startswith(status), (feed, e.value)
        assert words in str(e.value), (words, e.value)
    s = p.stats()
    y = np.from_dlpack(p(x=x)["y"])
    np.testing.assert_array_equal(y, good)
    assert p.stats()["hits"] == s["hits"] + 1


def test_output_outlives_pipeline():
    p = kpipe.Pipeline(relu_spec(1 << 16), device="cpu")
    x = rng.standard_normal(1 << 16, dtype=np.float32)
    view = p(x=x)["y"]
    arr = np.from_dlpack(view)
    p.close()
    with pytest.raises(kpipe.Error) as e:
        p(x=x)
    assert e.value.status == "KP_ERR_STATE" and "closed" in e.value.detail
    del p, view
    gc.collect()
    # the consumer's array still holds the pipeline's memory
    np.testing.assert_array_equal(arr, np.maximum(x, 0))
    del arr
    gc.collect()
    assert kpipe.live_exports() == 0


def test_inputs_held_until_the_tick_is_done():
    # a temporary input, dropped by Python at once: the pipeline still reads it
    p = kpipe.Pipeline(relu_spec(1 << 20, mode="stream"), device="cpu")
    for k in range(4):
        y = p(x=np.full(1 << 20, k - 1.5, np.float32))["y"]
        np.testing.assert_array_equal(np.from_dlpack(y), np.full(1 << 20, max(k - 1.5, 0),
                                                                   np.float32))
    p.sync()
    # the pipeline itself a temporary: its inputs outlive it until the work is done
    for k in range(3):
        y = kpipe.Pipeline(relu_spec(1 << 20, mode="stream"))(x=np.full(1 << 20, k - 1.0,
                                                                         np.float32))["y"]
        np.testing.assert_array_equal(np.from_dlpack(y), np.full(1 << 20, max(k - 1.0, 0),
                                                                   np.float32))


def test_streams_and_kpipe_arrays_as_inputs():
    dev = kpipe.device("cpu")
    s = dev.stream()
    p = kpipe.Pipeline(relu_spec(64), device=dev)
    q = kpipe.Pipeline(relu_spec(64), device=dev)
    x = rng.standard_normal(64, dtype=np.float32)
    y = p(x=x, stream=s)["y"]
    z = q(x=-np.from_dlpack(y), stream=s)["y"]  # NumPy negation of a kpipe output
    assert y.stream is s
    np.testing.assert_array_equal(np.from_dlpack(z), np.zeros(64, np.float32))
    w = q(x=y)["y"]  # a kpipe.Array straight in (DLPack 1.0 capsule)
    np.testing.assert_array_equal(np.from_dlpack(w), np.maximum(x, 0))
    with pytest.raises(kpipe.Error) as e:
        p(x=x, stream=kpipe.device("cpu:1").stream())
    assert "cpu:1" in e.value.detail
    with pytest.raises(kpipe.Error) as e:
        dev.wrap_stream(0)
    assert e.value.status == "KP_ERR_UNSUPPORTED" and "native streams" in e.value.detail
