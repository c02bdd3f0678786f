"""Tasks with Python bodies (dependencies from regions, a graph of them, the
DOT file) and flows (JSON, and Python stages with frames as arrays)."""
import time

import numpy as np
import pytest

import kpipe
from conftest import example


def test_tasks_regions_and_dependencies(tmp_path):
    t = kpipe.Tasks("cpu", streams=2)
    n = 1 << 20
    x = np.arange(n, dtype=np.float32)
    a = t.tensor("f32", (n,))          # memory from its first writer

    def fill(stream, v):               # a <- x
        out = v[0]
        stream.host_func(lambda: np.copyto(out.numpy(), x))

    def halves(stream, v):             # a[:n/2] += a[n/2:]
        lo, hi = v
        stream.host_func(lambda: np.add(lo.numpy(), hi.numpy(), out=lo.numpy()))

    def scale(stream, v):
        s = np.frombuffer(v[1], np.float32)[0]
        stream.host_func(lambda: np.multiply(v[0].numpy(), s, out=v[0].numpy()))
    t.submit(fill, ("out", a))
    t.submit(halves, ("inout", a, (0,), (n // 2,)), ("in", a, (n // 2,), (n // 2,)))
    t.submit(scale, ("inout", a, (0,), (n // 2,)), np.float32(0.5).tobytes())
    edges = t.edges()
    assert (0, 1, "raw", a.buffer) in [(f, to, h, b) for f, to, h, b in edges]
    assert any(to == 2 for _, to, _, _ in edges)
    t.run()
    t.sync()
    got = t.data(a).numpy()
    half = (x[: n // 2] + x[n // 2:]) * np.float32(0.5)
    np.testing.assert_array_equal(got[: n // 2], half)
    np.testing.assert_array_equal(got[n // 2:], x[n // 2:])
    assert t.stats()["runs"] == 1
    dot = tmp_path / "tasks.dot"
    t.submit(fill, ("out", a))
    t.write_dot(dot)
    assert "digraph" in dot.read_text()


def test_tasks_graph_replays_and_wraps_caller_memory():
    t = kpipe.Tasks("cpu")
    buf = np.zeros(1001, np.float32)  # odd size, the caller's memory

    def inc(stream, v):
        stream.host_func(lambda: np.add(v[0].numpy(), 1, out=v[0].numpy()))
    for _ in range(3):
        t.submit(inc, ("inout", buf))
    t.instantiate()
    for _ in range(4):
        t.launch()
    t.sync()
    np.testing.assert_array_equal(buf, np.full(1001, 12, np.float32))


def test_tasks_errors():
    t = kpipe.Tasks("cpu")
    a = t.tensor("f32", (8,))
    with pytest.raises(kpipe.Error) as e:
        t.submit(lambda s, v: None, ("sideways", a))
    assert "sideways" in e.value.detail
    with pytest.raises(kpipe.Error) as e:
        t.submit(lambda s, v: None, ("in", a, (9,), (1,)))
    assert e.value.status.startswith("KP_ERR_")
    with pytest.raises(kpipe.Error) as e:
        t.tensor("f128", (4,))
    assert "f128" in e.value.detail

    def boom(stream, v):
        raise RuntimeError("bad body")
    t.submit(boom, ("out", a))
    with pytest.raises(kpipe.Error) as e:
        t.run()
    assert isinstance(e.value.__cause__, RuntimeError)
    with pytest.raises(kpipe.Error):
        kpipe.Tasks("cpu", streams=0)


def test_json_flow_health_and_trace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example's sink writes flow_out.npy where it runs
    f = kpipe.Flow(example("flow.json"), device="cpu", trace_events=256)
    h = f.run()
    assert (tmp_path / "flow_out.npy").is_file()
    assert h["frames"] == 2000 and h["dropped"] == 0 and h["consistent"]
    assert [s["name"] for s in h["stages"]][0] == "source"
    assert h["stages"][1]["queue"]["policy"] == "block"
    tr = f.trace()
    assert any(e.get("ph") == "X" for e in tr["traceEvents"])
    with pytest.raises(kpipe.Error) as e:
        kpipe.Flow('{"kpipe_flow": 1, "stages": [}')
    assert e.value.status == "KP_ERR_PARSE"


def test_python_stages_every_frame():
    n_frames, n = 500, 257
    seen = []

    def source(frame):
        if frame.seq >= n_frames:
            return False
        a = frame.array("f32", (n,)).numpy()
        a[:] = np.arange(n, dtype=np.float32) + frame.seq
        frame.bytes = n * 4
        return True

    def double(frame):
        a = frame.array("f32", (n,)).numpy()
        a *= 2

    def sink(frame):
        a = frame.array("f32", (n,)).numpy()
        ok = np.array_equal(a, (np.arange(n, dtype=np.float32) + frame.seq) * 2)
        seen.append((frame.seq, ok))
    f = kpipe.Flow.of([source, double, sink], device="cpu", frame_bytes=n * 4, queue=4)
    t0 = time.perf_counter()
    h = f.run()
    dt = time.perf_counter() - t0
    assert sorted(s for s, _ in seen) == list(range(n_frames)) and all(ok for _, ok in seen)
    assert h["frames"] == n_frames and [s["name"] for s in h["stages"]] == \
        ["source", "double", "sink"]
    print("python stages: %.1f us per frame through 3 stages" % (dt / n_frames * 1e6))


def test_python_stage_errors_stop_the_flow():
    def source(frame):
        return frame.seq < 100

    def bad(frame):
        if frame.seq == 7:
            raise KeyError("frame 7")
    f = kpipe.Flow.of([source, ("bad", bad), lambda fr: None], device="cpu", frame_bytes=64)
    with pytest.raises(kpipe.Error) as e:
        f.run()
    assert isinstance(e.value.__cause__, KeyError) and "bad" in e.value.detail
    with pytest.raises(kpipe.Error):
        kpipe.Flow.of([source], device="cpu")
