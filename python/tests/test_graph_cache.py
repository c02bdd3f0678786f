"""kpipe.GraphCache with Python work on the cpu backend: hits, padding,
policies, bounds, errors from the work, bad configurations."""
import gc
import threading

import numpy as np
import pytest

import kpipe

rng = np.random.default_rng(3)


def double(stream, ins, outs, lits):
    # host work in stream order (captured as a host node of the graph)
    x, y = ins[0], outs[0]
    stream.host_func(lambda: np.multiply(x.numpy(), 2, out=y.numpy()))


def copy(stream, ins, outs, lits):
    stream.copy(outs[0], ins[0])


def test_hits_and_exact_keys():
    c = kpipe.GraphCache("cpu")
    # the largest first: the static buffers grow once, no graph goes stale
    for n in [1 << 20, 9, 5, 5, 9, 1 << 20, 1]:
        x = rng.standard_normal(n, dtype=np.float32)
        y, = c.run(double, [x], [("f32", (n,))])
        assert y.shape == (n,)
        np.testing.assert_array_equal(np.from_dlpack(y), x * 2)
    s = c.stats()
    assert (s["calls"], s["hits"], s["misses"], s["captures"]) == (7, 3, 4, 4), s
    assert s["invalidations"] == 0
    assert "hits" in c.report()


def test_padding_and_slicing():
    c = kpipe.GraphCache("cpu", capture_sizes=[16, 64, 256])
    for n in [3, 16, 17, 64, 200, 256, 300]:
        x = rng.standard_normal((n, 4), dtype=np.float32)
        y, = c.run(copy, [x], [("f32", (n, 4))], dynamic={0: [0], 1: [0]})
        assert y.shape == (n, 4)
        np.testing.assert_array_equal(np.from_dlpack(y), x)
    s = c.stats()
    assert s["captures"] == 4, s  # 16, 64, 256 and 300 (past the largest: exact)


def test_literals_join_the_key():
    c = kpipe.GraphCache("cpu")
    x = np.ones(8, np.float32)

    def scale(stream, ins, outs, lits):
        k = lits[0]
        stream.host_func(lambda: np.multiply(ins[0].numpy(), k, out=outs[0].numpy()))
    for k in (2, 3, 2):
        y, = c.run(scale, [x], [("f32", (8,))], literals=[k])
        np.testing.assert_array_equal(np.from_dlpack(y), x * k)
    assert c.stats()["captures"] == 2


def test_policies():
    x = np.ones(4, np.float32)
    c = kpipe.GraphCache("cpu", miss="strict")
    with pytest.raises(kpipe.Error) as e:
        c.run(copy, [x], [("f32", (4,))])
    assert e.value.status == "KP_ERR_NOT_FOUND"
    c.prepare(copy, [{"inputs": [x], "outputs": [("f32", (4,))]}])
    y, = c.run(copy, [x], [("f32", (4,))])
    np.testing.assert_array_equal(np.from_dlpack(y), x)
    f = kpipe.GraphCache("cpu", miss="fallback")
    y, = f.run(copy, [x], [("f32", (4,))])
    np.testing.assert_array_equal(np.from_dlpack(y), x)
    assert f.stats()["fallbacks"] == 1 and f.stats()["graphs"] == 0


def test_lru_bound():
    c = kpipe.GraphCache("cpu", max_graphs=2)
    for n in (3, 1, 2, 3):  # 2 takes the least recently used graph (3's)
        x = rng.standard_normal(n, dtype=np.float32)
        y, = c.run(copy, [x], [("f32", (n,))])
        np.testing.assert_array_equal(np.from_dlpack(y), x)
        assert c.stats()["graphs"] <= 2
    s = c.stats()
    assert s["misses"] == 4 and s["updates"] + s["evictions"] >= 2, s


def test_work_errors_come_back():
    c = kpipe.GraphCache("cpu")

    def broken(stream, ins, outs, lits):
        raise ValueError("no such layer")
    with pytest.raises(kpipe.Error) as e:
        c.run(broken, [np.ones(2, np.float32)], [("f32", (2,))])
    assert isinstance(e.value.__cause__, ValueError) and "no such layer" in e.value.detail
    assert c.stats()["graphs"] == 0
    y, = c.run(copy, [np.ones(2, np.float32)], [("f32", (2,))])  # the cache still works

    def bad_host(stream, ins, outs, lits):
        stream.host_func(lambda: 1 / 0)
    with pytest.raises(kpipe.Error) as e:  # raised once: by this call, sync or a later one
        c.run(bad_host, [np.ones(3, np.float32)], [("f32", (3,))])
        c.sync()
    assert isinstance(e.value.__cause__, ZeroDivisionError)
    c.run(copy, [np.ones(2, np.float32)], [("f32", (2,))])


def test_work_runs_with_the_collector_paused():
    """The work function may run inside a capture, where a collection could
    free what the capture must not see freed: the collector is paused
    while it runs (every thread's), restored after, also when it raises;
    off before stays off; two caches' work functions on two threads at
    once restore it only when both are done."""
    seen = []

    def work(stream, ins, outs, lits):
        seen.append(gc.isenabled())
        stream.copy(outs[0], ins[0])
    x = np.arange(6, dtype=np.float32)
    c = kpipe.GraphCache("cpu")
    assert gc.isenabled()
    y, = c.run(work, [x], [("f32", (6,))])
    np.testing.assert_array_equal(np.from_dlpack(y), x)
    assert seen == [False] and gc.isenabled()

    def fails(stream, ins, outs, lits):
        raise ValueError("no")
    with pytest.raises(kpipe.Error):
        c.run(fails, [x], [("f32", (6,))])
    assert gc.isenabled()
    gc.disable()
    try:
        c.run(work, [x + 1], [("f32", (6,))], literals=[1])
        assert not gc.isenabled()
    finally:
        gc.enable()
    # two at once: the first to finish leaves the collector paused
    inside, release, after = threading.Barrier(2), threading.Event(), []

    def slow(stream, ins, outs, lits):
        inside.wait(5)
        release.wait(5)
        stream.copy(outs[0], ins[0])

    def quick(stream, ins, outs, lits):
        inside.wait(5)
        stream.copy(outs[0], ins[0])

    def other():
        kpipe.GraphCache("cpu").run(slow, [x], [("f32", (6,))])
    t = threading.Thread(target=other)
    t.start()
    kpipe.GraphCache("cpu").run(quick, [x], [("f32", (6,))])
    after.append(gc.isenabled())
    release.set()
    t.join(10)
    assert after == [False] and gc.isenabled()


def test_bad_configs_and_calls():
    for kw, words in (({"capture_sizes": [64, 16]}, "capture_sizes"),
                      ({"capture_sizes": [0]}, "capture_sizes"),
                      ({"miss": "maybe"}, "maybe"),
                      ({"max_graphs": -1}, "max_graphs")):
        with pytest.raises(kpipe.Error) as e:
            kpipe.GraphCache("cpu", **kw)
        assert words in e.value.detail, e.value
    c = kpipe.GraphCache("cpu")
    x = np.ones(4, np.float32)
    with pytest.raises(kpipe.Error):
        c.run(copy, [x], [("f64", (4,))])
    with pytest.raises(kpipe.Error):
        c.run(copy, [x], [("f32", (4,))], dynamic={5: [0]})
    with pytest.raises(kpipe.Error):
        c.run(copy, [x], [("f32", (-1,))])
    assert c.stats()["calls"] == 0  # refused calls change nothing
