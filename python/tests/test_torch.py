"""On the GPU with PyTorch: pipelines fed torch tensors on torch streams,
DLPack across streams, and kpipe.torch.graphed on an MLP and a causal
attention block with lengths changing per call, against eager."""
import gc

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for PyTorch", allow_module_level=True)

import kpipe  # noqa: E402
import kpipe.torch as kt  # noqa: E402
from conftest import example, same_strides  # noqa: E402

F = torch.nn.functional


def relu_spec(n, mode="graph"):
    return {"kpipe_spec": 1, "execution": mode, "modules": [{"type": "relu", "id": "r",
            "params": {"size": n}}], "inputs": {"x": "r.input"}, "outputs": {"y": "r.output"}}


@pytest.mark.parametrize("mode", ["graph", "stream"])
@pytest.mark.parametrize("n", [1, 7, 1 << 20, 1 << 24])
def test_cuda_pipeline_on_torch_stream(mode, n):
    p = kpipe.Pipeline(relu_spec(n, mode), device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for k in range(3):  # new tensors, then one reused and rewritten
            x = torch.randn(n, device="cuda") if k < 2 else x.neg_()
            y = torch.from_dlpack(p(x=x, stream=s)["y"])
            assert torch.equal(y, torch.relu(x))
    s.synchronize()


def test_sample_graph_and_cpu_agree():
    a = torch.randn(16384, device="cuda")
    b = torch.randn(16384, device="cuda")
    g = torch.from_dlpack(kpipe.Pipeline(example("sample.json"), device="cuda")(
        input0=a, input1=b)["output"])
    c = kpipe.Pipeline(example("sample.json"), device="cpu")(input0=a.cpu(), input1=b.cpu())
    torch.testing.assert_close(g.cpu(), torch.from_dlpack(c["output"]))


def test_dlpack_across_streams_and_refusals():
    p = kpipe.Pipeline(relu_spec(1 << 20), device="cuda")
    own = kpipe.device("cuda").stream()
    x = torch.randn(1 << 20, device="cuda")
    out = p(x=x, stream=own)["y"]          # runs on kpipe's stream
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):         # torch waits for it on the device
        y = torch.from_dlpack(out) * 1
    other.synchronize()
    assert torch.equal(y, torch.relu(x))
    with torch.cuda.stream(torch.cuda.ExternalStream(own.native)):
        z = torch.from_dlpack(p(x=x, stream=own)["y"]) + 0
    own.sync()
    assert torch.equal(z, torch.relu(x))
    for bad, words in ((torch.randn(1 << 20), "cpu"),
                       (torch.randn(1 << 20).pin_memory(), "cpu"),
                       (torch.randn(1 << 20, device="cuda", dtype=torch.float64), "float64"),
                       (torch.randn(1 << 21, device="cuda")[::2], "x")):
        with pytest.raises(kpipe.Error) as e:
            p(x=bad)
        assert words in str(e.value)


def test_tensors_read_in_place_as_dlpack_would():
    from kpipe import _dlpack
    own = kpipe.device("cuda").stream()
    cur = torch.cuda.current_stream().cuda_stream
    x = torch.randn(6, 5, 4, device="cuda")
    cases = [x, x[:, 1], x[..., ::2], x.permute(2, 0, 1), x.flatten()[::7][:1], x[0, 0, 0],
             torch.zeros(0, device="cuda"), x.to(torch.bfloat16), x.to(torch.int8),
             x.to(torch.float16), torch.arange(5, dtype=torch.int64)]
    for t in cases:
        d = _dlpack.direct(t, cur if t.is_cuda else None)
        m = _dlpack.import_tensor(t, (cur or 1) if t.is_cuda else None)
        assert d is not None, t
        assert (d.ptr, d.dtype, d.shape, d.device_type, d.device_id) == \
            (m.ptr, m.dtype, m.shape, m.device_type, m.device_id), t
        assert same_strides(d.shape, d.strides, m.strides), (t.shape, d.strides, m.strides)
    # the exchange decides where PyTorch has a word to say: another stream
    # (it orders the two), gradients, dtypes outside kpipe's
    g = torch.randn(4, device="cuda", requires_grad=True)
    for t, stream in ((x, own.native), (x, None), (g, cur), (x.double(), cur), (x > 0, cur),
                      (torch.randn(3, dtype=torch.complex64, device="cuda").conj(), cur)):
        assert _dlpack.direct(t, stream) is None


def test_current_stream_read_raw():
    # direct() asks for the current stream's raw handle (no Stream object
    # made): it must be the stream torch would name, inside a stream context
    # too, or a tensor could be read in place unordered
    from kpipe import _dlpack
    raw = _dlpack.torch_raw_stream(torch)
    x = torch.randn(4, device="cuda")
    assert raw(x.device.index) == torch.cuda.current_stream(x.device).cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert raw(x.device.index) == side.cuda_stream
        assert _dlpack.direct(x, side.cuda_stream) is not None
        assert _dlpack.direct(x, torch.cuda.default_stream().cuda_stream) is None
    assert _dlpack.direct(x, side.cuda_stream) is None


def test_inputs_made_on_another_stream_are_ordered():
    # a tensor written on torch's stream, read by kpipe on its own: the
    # exchange (not the direct read) makes kpipe's stream wait for it
    n = 1 << 22
    p = kpipe.Pipeline(relu_spec(n), device="cuda")
    own = kpipe.device("cuda").stream()
    for k in range(4):
        x = torch.full((n,), -1.0, device="cuda")
        torch.cuda._sleep(2_000_000)  # the fill below lands late on torch's stream
        x.fill_(float(k + 1))
        y = torch.from_dlpack(p(x=x, stream=own)["y"]).clone()
        own.sync()
        assert torch.equal(y, torch.full((n,), float(k + 1), device="cuda"))


class MLP(torch.nn.Module):
    def __init__(self, h=256):
        super().__init__()
        self.up, self.down = torch.nn.Linear(h, 4 * h), torch.nn.Linear(4 * h, h)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(x)))


class Attn(torch.nn.Module):
    def __init__(self, h=256, heads=4):
        super().__init__()
        self.h, self.heads = h, heads
        self.qkv, self.o = torch.nn.Linear(h, 3 * h), torch.nn.Linear(h, h)
        self.norm = torch.nn.LayerNorm(h)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.o(a.transpose(1, 2).reshape(b, s, self.h))


@pytest.mark.parametrize("block,dtype,tol", [(MLP, torch.float32, 1e-4),
                                             (Attn, torch.float32, 1e-4),
                                             (Attn, torch.bfloat16, 2e-2)])
def test_graphed_blocks_with_changing_lengths(block, dtype, tol):
    torch.manual_seed(0)
    m = block().cuda().to(dtype).eval()
    run = kt.graphed(m, dynamic={"x": [1]}, capture_sizes=[16, 32, 64, 128])
    lengths = [5, 17, 64, 1, 100, 17, 33, 128, 5, 64, 17, 2, 200]
    for s in lengths:
        x = torch.randn(2, s, 256, device="cuda", dtype=dtype)
        y = run(x)
        with torch.no_grad():
            ref = m(x)
        assert y.shape == ref.shape
        torch.testing.assert_close(y, ref, atol=tol, rtol=tol)
    st = run.stats()
    # the first call captured 16, 32, 64 and 128, largest first; every call
    # inside them was a hit; 200, past the largest, is a key of its own
    assert st["captures"] == 5 and st["hits"] == len(lengths) - 1, (st, run.report())
    # 200 grew the static buffers: the four graphs made on them went stale
    assert st["invalidations"] == 4 and st["graphs"] <= 5, st


def test_graphed_every_length_growing_and_back():
    """A new length inside a padded size is a copy of that size's call, its
    outputs views of the static buffers: every length, up and down and past
    the largest size (the buffers grow and move), every element checked."""
    def f(x):
        return x * 2 + 1, x[:, :, :3] - 1
    run = kt.graphed(f, dynamic={"x": [1]}, capture_sizes=[8, 16])
    lengths = list(range(1, 21)) + list(range(20, 0, -3)) + [16, 8, 1]
    outs = []
    for s in lengths:
        x = torch.randn(2, s, 5, device="cuda")
        a, b = run(x)
        assert a.shape == (2, s, 5) and b.shape == (2, s, 3)
        assert torch.equal(a, x * 2 + 1) and torch.equal(b, x[:, :, :3] - 1), s
        outs.append(a)
    # outputs are views the next call rewrites: the last one is current
    assert outs[-1].data_ptr() == run(torch.zeros(2, 1, 5, device="cuda"))[0].data_ptr()


def test_graphed_outputs_follow_the_layout_of_each_run():
    """Under policy fallback a miss runs fn eagerly and lays the outputs out
    at the exact shape, a graph at the padded one. One exact length meets
    both in turn (its graph evicted by another literal's, then prepared
    again): its outputs are right after each, and its lengths alternate
    inside one padded size."""
    def f(x, s):
        return x * s - 1
    run = kt.graphed(f, dynamic={"x": [1]}, policy="fallback", capture_sizes=[8, 16],
                     max_graphs=2)
    xs = [torch.randn(2, n, 5, device="cuda") for n in (12, 9, 12, 16, 9)]
    z = torch.zeros(2, 16, 5, device="cuda")
    for lit, graphs in ((1.0, True), (2.0, False), (1.0, True)):
        run.prepare(z, lit)
        for x in xs:
            before = run.stats()["fallbacks"]
            y = run(x, 1.0)
            assert y.shape == x.shape and torch.equal(y, x - 1), (lit, x.shape)
            assert (run.stats()["fallbacks"] == before) == graphs, run.report()


def test_graphed_policies_literals_and_bounds():
    m = MLP(64).cuda().eval()

    def f(x, scale):
        return m(x) * scale
    run = kt.graphed(f, dynamic={"x": [0]}, capture_sizes=[8, 16], max_graphs=2, prepare=False)
    x = torch.randn(5, 64, device="cuda")
    for scale in (1.0, 2.0, 1.0):
        torch.testing.assert_close(run(x, scale), f(x, scale).detach())
    assert run.stats()["captures"] == 2, run.report()  # the literal is part of the key
    for n in (9, 3, 12):
        run(torch.randn(n, 64, device="cuda"), 1.0)
        assert run.stats()["graphs"] <= 2
    strict = kt.graphed(f, policy="strict")
    with pytest.raises(kpipe.Error) as e:
        strict(x, 1.0)
    assert e.value.status == "KP_ERR_NOT_FOUND"
    fb = kt.graphed(f, policy="fallback")
    torch.testing.assert_close(fb(x, 3.0), f(x, 3.0).detach())
    assert fb.stats()["fallbacks"] == 1 and fb.stats()["graphs"] == 0
    with pytest.raises(kpipe.Error) as e:
        run(torch.randn(16, 64, device="cuda").t(), 1.0)
    assert "contiguous" in e.value.detail
    with pytest.raises(kpipe.Error):
        kt.graphed(f, dynamic={"y": [0]})
    with pytest.raises(kpipe.Error):
        kt.graphed(f, policy="sometimes")


def test_no_collection_inside_a_capture():
    """Python's cyclic collector never runs inside a capture: there it may
    finalize an earlier graphed callable (a reference cycle), whose frees
    break the capture ("operation failed due to a previous error during
    capture", seen when a suite's earlier tests left theirs as garbage).
    With the threshold at 1 it would run at nearly every allocation of the
    block's forward; an earlier callable is left as garbage for it."""
    seen = []

    def watch(phase, info):
        if phase == "start":
            seen.append(torch.cuda.is_current_stream_capturing())
    m = MLP(64).cuda().eval()
    gone = kt.graphed(m, dynamic={"x": [0]}, capture_sizes=[4])
    gone(torch.randn(3, 64, device="cuda"))
    old = gc.get_threshold()
    gc.callbacks.append(watch)
    gc.set_threshold(1, 50, 50)
    try:
        del gone
        run = kt.graphed(m, dynamic={"x": [0]}, capture_sizes=[8, 16])
        for n in (5, 16, 3, 20):
            x = torch.randn(n, 64, device="cuda")
            with torch.no_grad():
                torch.testing.assert_close(run(x), m(x))
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(watch)
    assert seen and not any(seen), "%d of %d collections inside a capture" % (sum(seen), len(seen))
    assert run.stats()["captures"] == 3


def test_graph_cache_on_cuda_with_torch_tensors():
    # torch tensors in and out through DLPack; the work is kpipe's own
    # (PyTorch work inside a kpipe capture is not supported: graphed() is
    # the way for PyTorch code)
    c = kpipe.GraphCache("cuda", capture_sizes=[1024, 1 << 20])

    def work(stream, ins, outs, lits):
        stream.memset(outs[0], 0)
        stream.copy(outs[0], ins[0], ins[0].nbytes)
    for n in (1000, 1 << 20, 7, 1000, 1 << 20):
        x = torch.randn(n, device="cuda")
        y, = c.run(work, [x], [("f32", (n,))], dynamic={0: [0], 1: [0]},
                   stream=torch.cuda.current_stream())
        assert torch.equal(torch.from_dlpack(y), x)
    assert c.stats()["hits"] >= 2
