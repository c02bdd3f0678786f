"""kpipe.torch.graphed against PyTorch's ways of running a transformer block
whose sequence length changes per call: eager, torch.compile(mode=
"reduce-overhead", dynamic=True), and a dict of torch.cuda.CUDAGraph keyed
by the length padded to 64 (captured on first use, one shared pool). The
block: hidden 1024, 16 heads, MLP 4096, causal attention, batch 4, bf16.
Four traces of 300 calls: one length, 8 lengths round-robin, growing
1..1024, 64 random lengths. kpipe runs two ways: its first call captures
all 16 padded sizes (64..1024), largest first ("kpipe"), or each
padded size is captured on its first use ("kpipe, on first use",
prepare=False). Host time is until the call returns, wall time adds a
device sync.
Each approach runs each trace in a process of its own, so no trace
inherits another's memory. Memory is the most PyTorch's allocator
reserved during the trace (plus the cache's own buffers for kpipe), read
before the outputs are checked, and the approach's own share of it: less
what was reserved before its first call (the block's weights and the
trace's input tensors, the same for every approach): the check runs the block eagerly, and its
allocations would otherwise count against every approach. Every 25th
output is kept on the host and compared with eager afterwards; it goes to
the host a batch row at a time, each row contiguous, so the copy needs no
device memory of its own.
"kpipe, compiled fn" is kpipe.torch.graphed over torch.compile(block,
dynamic=True): the same cache around the compiler's kernels, to tell the
memory the cache holds from the memory the kernels need.
Prints a Markdown table.
    python3 bench/torch_graphed.py                  (drives the rest)
    python3 bench/torch_graphed.py APPROACH TRACE   (one run, JSON)
    python3 bench/torch_graphed.py split            (a hit's host time by step, JSON)
    python3 bench/torch_graphed.py lengths          (a hit as the length changes, JSON)
    python3 bench/torch_graphed.py interleaved      (host per hit, one process, JSON)
The driver runs `interleaved` last: host per hit of kpipe, the graph dict
and reduce-overhead in one process, their blocks alternated, ratios taken
round by round. A process's bare launch time moves by up to 1.5x with the
cores it runs on, so ratios between separate processes spread more than
the approaches differ (bench/RESULTS.md).
Also: the sample pipeline ticked from Python with torch tensors, host
time per tick (compare `kpipe bench examples/sample.json --device cuda`)."""
import json
import os
import random
import subprocess
import sys
import time

import torch

F = torch.nn.functional
H, HEADS, MLP, BATCH, MAXLEN, CALLS = 1024, 16, 4096, 4, 1024, 300
PAD = list(range(64, MAXLEN + 1, 64))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = torch.nn.LayerNorm(H), torch.nn.LayerNorm(H)
        self.qkv, self.o = torch.nn.Linear(H, 3 * H), torch.nn.Linear(H, H)
        self.up, self.down = torch.nn.Linear(H, MLP), torch.nn.Linear(MLP, H)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, H))
        return x + self.down(F.gelu(self.up(self.n2(x))))


def traces():
    rnd = random.Random(7)
    pool = rnd.sample(range(1, MAXLEN + 1), 64)
    rr = [100, 200, 300, 400, 500, 600, 700, 800]
    return {"one length": [256] * CALLS,
            "8 round-robin": [rr[i % 8] for i in range(CALLS)],
            "growing": [1 + i * (MAXLEN - 1) // (CALLS - 1) for i in range(CALLS)],
            "64 random": [rnd.choice(pool) for _ in range(CALLS)]}


def pct(v, p):
    v = sorted(v)
    return v[int(p / 100 * (len(v) - 1) + 0.5)] if v else float("nan")


def padded(n):
    return next(p for p in PAD if p >= n)


def dict_graph(m, p, pool, side):
    """One graph of the graph dict: m captured at length p into the shared
    pool (one eager run on a side stream first), with its static input and
    output."""
    xi = torch.zeros(BATCH, p, H, device="cuda", dtype=torch.bfloat16)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        m(xi)
    torch.cuda.current_stream().wait_stream(side)
    cg = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cg, pool=pool):
        yo = m(xi)
    return cg, xi, yo


def graph_dict(m):
    """The graph dict's call (a graph per padded length, captured at its
    first use into one shared pool; the input copied into its static
    buffer, the output sliced), and the dict."""
    graphs, pool, side = {}, torch.cuda.graph_pool_handle(), torch.cuda.Stream()

    def run(x):
        n, p = x.shape[1], padded(x.shape[1])
        g = graphs.get(p)
        if g is None:
            g = graphs[p] = dict_graph(m, p, pool, side)
        g[1][:, :n].copy_(x)
        g[0].replay()
        return g[2][:, :n]
    return run, graphs


def make_run(approach, m):
    """The callable an approach runs, the key a call is a hit under, and
    what tells its graphs held (None where it holds none)."""
    if approach == "eager":
        return m, None, None
    if approach == "compile":
        # cudagraph trees record per shape
        return torch.compile(m, mode="reduce-overhead", dynamic=True), (lambda n: n), None
    if approach == "graph dict":
        run, graphs = graph_dict(m)
        return run, padded, lambda: len(graphs)
    import kpipe.torch as kt
    fn = torch.compile(m, dynamic=True) if approach == "kpipe, compiled fn" else m
    run = kt.graphed(fn, dynamic={0: [1]}, capture_sizes=PAD,
                     prepare=approach != "kpipe, on first use")
    return run, padded, run.stats


def one(approach, trace):
    torch.manual_seed(0)
    m = Block().cuda().to(torch.bfloat16).eval()
    torch.set_grad_enabled(False)
    # "largest": the largest padded length alone, one graph: what the
    # memory target is stated against
    lengths = [MAXLEN] * 20 if trace == "largest" else traces()[trace]
    xs = {n: torch.randn(BATCH, n, H, device="cuda", dtype=torch.bfloat16)
          for n in set(lengths)}
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_reserved()  # the block's weights and the trace's inputs
    run, key, held_of = make_run(approach, m)
    seen, host, wall, hit_host, miss, kept = set(), [], [], [], [], []
    for i, n in enumerate(lengths):
        x = xs[n]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y = run(x)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e6)
        wall.append((t2 - t0) * 1e6)
        k = key(n) if key else None
        if key is None or k in seen:
            hit_host.append((t1 - t0) * 1e6)
        else:
            miss.append((t2 - t0) * 1e6)
            seen.add(k)
        if i % 25 == 0:  # no device memory: the check comes after
            kept.append((n, torch.stack([r.cpu() for r in y.unbind(0)])))
    mem = torch.cuda.max_memory_reserved()
    held, extra = "—", {}
    if approach.startswith("kpipe"):
        extra = held_of()
        held, mem = extra["graphs"], mem + extra["bytes"]
    elif held_of:
        held = held_of()
    # the process's own speed at a bare launch (a one-element add, a sync
    # before each): processes of the same code differ by up to 2x in host
    # time per hit, and this tells the process from the approach
    probe = probe_p50()
    maxdiff = max((y.float() - m(xs[n]).cpu().float()).abs().max().item() for n, y in kept)
    return {"host_hit_p50": pct(hit_host, 50), "wall_p50": pct(wall, 50),
            "wall_p99": pct(wall, 99), "miss_ms": (sum(miss) / len(miss) / 1e3)
            if miss else 0.0, "misses": len(miss), "held": held,
            "reserved_mib": mem / 2**20, "added_mib": (mem - before) / 2**20,
            "max_diff": maxdiff, "stats": extra,
            "first_call_ms": wall[0] / 1e3, "probe_launch_p50": probe}


def python_pipeline():
    import kpipe
    p = kpipe.Pipeline(os.path.join(os.path.dirname(__file__), "..", "examples", "sample.json"),
                       device="cuda")
    a = torch.randn(16384, device="cuda")
    b = torch.randn(16384, device="cuda")
    s = torch.cuda.current_stream()
    for _ in range(1000):
        p(input0=a, input1=b, stream=s)
    torch.cuda.synchronize()
    host = []
    for _ in range(20000):
        t0 = time.perf_counter()
        p(input0=a, input1=b, stream=s)
        host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return {"host_p50": pct(host, 50), "host_p99": pct(host, 99)}


def _cudart():
    """The CUDA runtime, for the bare calls a hit is made of."""
    import ctypes
    import glob
    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    for d in sys.path:
        names += sorted(glob.glob(os.path.join(d, "nvidia", "cu*", "lib", "libcudart.so*")))
    names.append("/usr/local/cuda/lib64/libcudart.so")
    for n in names:
        try:
            return ctypes.CDLL(n)
        except OSError:
            continue
    raise OSError("no libcudart")


def split():
    """Where a hit's host time goes, one length (256, padded 256): the
    whole call; the library call alone (input copy, graph launch, the
    cache's lookup, ctypes); the CUDA runtime's bare 2-D copy and graph
    launch of the same sizes and graph; the graph dict's three steps. Then
    the growing trace with the Python steps of a new length timed. Each
    timed call starts on an idle device (a sync before it), as in the
    traces."""
    import ctypes
    from ctypes import byref, c_int, c_size_t, c_void_p
    import kpipe.torch as kt
    torch.manual_seed(0)
    m = Block().cuda().to(torch.bfloat16).eval()
    torch.set_grad_enabled(False)
    n, reps = 256, 3000
    x = torch.randn(BATCH, n, H, device="cuda", dtype=torch.bfloat16)

    def timed(f):
        v = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            f()
            v.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
        return round(pct(v, 50), 2)

    def loop(f, k=100000):
        t0 = time.perf_counter()
        for _ in range(k):
            f()
        return round((time.perf_counter() - t0) / k * 1e6, 3)
    out = {}
    run = kt.graphed(m, dynamic={"x": [1]}, capture_sizes=PAD)
    run(x)
    out["kpipe call"] = timed(lambda: run(x))
    # what a hit pays when its input moves or its length changes
    xb = torch.randn(BATCH, n, H, device="cuda", dtype=torch.bfloat16)
    x250 = torch.randn(BATCH, 250, H, device="cuda", dtype=torch.bfloat16)
    x512 = torch.randn(BATCH, 512, H, device="cuda", dtype=torch.bfloat16)
    x200 = torch.randn(BATCH, 200, H, device="cuda", dtype=torch.bfloat16)
    for label, pair in (("another input tensor each call", (x, xb)),
                        ("lengths 256 and 250 in turn (one padded size)", (x, x250)),
                        ("lengths 250 and 200 in turn (one padded size)", (x250, x200)),
                        ("lengths 256 and 512 in turn (two padded sizes)", (x, x512))):
        run(pair[1])
        turn = [0]

        def alternate():
            turn[0] ^= 1
            run(pair[turn[0]])
        out["kpipe call, " + label] = timed(alternate)
    e = run._exacts[tuple([(x.dtype, x.shape)])].entry
    raw = torch.cuda.current_stream().cuda_stream
    s = run._streams[raw]
    cache = run._cache_cp
    out["library call alone"] = timed(lambda: kt._run(cache, e.ref, s))
    rt = _cudart()
    rt.cudaMemcpy2DAsync.argtypes = [c_void_p, c_size_t, c_void_p, c_size_t, c_size_t, c_size_t,
                                     c_int, c_void_p]
    rt.cudaGraphInstantiate.argtypes = [ctypes.POINTER(c_void_p), c_void_p, ctypes.c_ulonglong]
    rt.cudaGraphLaunch.argtypes = [c_void_p, c_void_p]
    dst = torch.empty(BATCH, n, H, device="cuda", dtype=torch.bfloat16)
    w = n * H * 2
    args = (dst.data_ptr(), w, x.data_ptr(), w, w, BATCH, 3, raw)
    out["cudaMemcpy2DAsync alone"] = timed(lambda: rt.cudaMemcpy2DAsync(*args))
    cg = run._graphs[sorted(PAD, reverse=True).index(n)]
    ge = c_void_p()
    assert rt.cudaGraphInstantiate(byref(ge), c_void_p(cg.raw_cuda_graph()), 0) == 0
    out["cudaGraphLaunch alone (the same graph)"] = timed(lambda: rt.cudaGraphLaunch(ge, raw))
    libc = ctypes.CDLL(None)
    libc.memcmp.argtypes = [c_void_p, c_void_p, c_size_t]
    out["ctypes call, 3 arguments (memcmp of 0 bytes)"] = loop(lambda: libc.memcmp(cache, cache, 0))
    out["the key (a tuple of dtype and shape)"] = loop(
        lambda: tuple([(a.dtype, a.shape) if isinstance(a, torch.Tensor) else (type(a), a)
                       for a in (x,)]))
    out["is_contiguous + data_ptr"] = loop(lambda: (x.is_contiguous(), x.data_ptr()))
    out["the current raw stream"] = loop(lambda: kt._raw_stream(0))
    out["enter + leave"] = loop(lambda: (run._enter(), run._leave()))
    # the graph dict at the same length
    g, xi, yo = dict_graph(m, n, torch.cuda.graph_pool_handle(), torch.cuda.Stream())
    out["graph dict: copy_ into the static input"] = timed(lambda: xi[:, :n].copy_(x))
    out["graph dict: replay"] = timed(g.replay)
    out["graph dict: slice of the output"] = loop(lambda: yo[:, :n])
    # the growing trace: what a new length costs in Python, step by step
    # (p50 of each step's calls), with Python's cyclic collector on and off
    import gc
    for collect in (True, False):
        spent = {}

        def clock(name, f):
            def w(*a):
                t0 = time.perf_counter()
                try:
                    return f(*a)
                finally:
                    spent.setdefault(name, []).append((time.perf_counter() - t0) * 1e6)
            return w
        run2 = kt.graphed(m, dynamic={"x": [1]}, capture_sizes=PAD)
        run2(x)
        lens = traces()["growing"]
        xs = {k: torch.randn(BATCH, k, H, device="cuda", dtype=torch.bfloat16)
              for k in set(lens)}
        for timed_steps in (False, True):
            if timed_steps:
                run2 = kt.graphed(m, dynamic={"x": [1]}, capture_sizes=PAD)
                run2(x)
                for name in ("_new_exact", "_exact", "_out_view", "_padded"):
                    setattr(run2, name, clock(name, getattr(run2, name)))
            if not collect:
                gc.disable()
            host = []
            for k in lens:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                run2(xs[k])
                host.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
            gc.enable()
            tag = "growing%s%s" % ("" if collect else ", collector off",
                                   ", steps timed" if timed_steps else "")
            out[tag + ": call p50"] = round(pct(host, 50), 2)
        for k2, v in spent.items():
            out["growing%s: %s p50" % ("" if collect else ", collector off", k2)] = \
                round(pct(v, 50), 2)
    return out


def seq_p50(seq, before, f):
    """p50 host time of f over a sequence of lengths, a sync before each
    call; before(k) makes the call's argument outside the clock."""
    v = []
    for k in seq:
        a = before(k)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        f(a)
        v.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return round(pct(v, 50), 2)


def lengths():
    """Why a call whose length changes costs more than a repeated one: the
    same cache, each sequence of lengths timed three ways (p50 of its calls,
    a sync before each): the whole call; the library call alone (the
    Python steps done before the clock starts); and the CUDA runtime's bare
    launch of each padded size's own graph (PyTorch's capture, instantiated
    apart: no input copy, no cache), with the graph's node count. The graph
    dict's whole call on the same sequences beside them. "its objects read
    first": the whole call with the length's laid-out signature, views and
    key read just before the clock (the host's cache warmed), to tell cold
    memory from work."""
    import ctypes
    from ctypes import byref, c_size_t, c_void_p
    import kpipe.torch as kt
    torch.manual_seed(0)
    m = Block().cuda().to(torch.bfloat16).eval()
    torch.set_grad_enabled(False)
    tr = traces()
    seqs = {"one length 64": [64] * CALLS, "one length 256": [256] * CALLS,
            "one length 512": [512] * CALLS, "one length 1024": [1024] * CALLS,
            "256 and 250 in turn": [256, 250] * (CALLS // 2),
            "a new length each call, one padded size (193..256)":
                [193 + i % 64 for i in range(CALLS)],
            "8 round-robin": tr["8 round-robin"], "growing": tr["growing"],
            "64 random": tr["64 random"]}
    xs = {k: torch.randn(BATCH, k, H, device="cuda", dtype=torch.bfloat16)
          for k in set(sum(seqs.values(), []))}
    run = kt.graphed(m, dynamic={"x": [1]}, capture_sizes=PAD)
    run(xs[256])
    raw = torch.cuda.current_stream().cuda_stream
    s, cache = run._streams[raw], run._cache_cp
    rt = _cudart()
    rt.cudaGraphInstantiate.argtypes = [ctypes.POINTER(c_void_p), c_void_p, ctypes.c_ulonglong]
    rt.cudaGraphLaunch.argtypes = [c_void_p, c_void_p]
    rt.cudaGraphGetNodes.argtypes = [c_void_p, c_void_p, ctypes.POINTER(c_size_t)]
    bare, nodes = {}, {}
    for i, p in enumerate(sorted(PAD, reverse=True)):
        g = c_void_p(run._graphs[i].raw_cuda_graph())
        ge, nn = c_void_p(), c_size_t()
        assert rt.cudaGraphInstantiate(byref(ge), g, 0) == 0
        assert rt.cudaGraphGetNodes(g, None, byref(nn)) == 0
        bare[p], nodes[p] = ge, nn.value
    dict_call, _ = graph_dict(m)

    def lib_ready(k):
        x = xs[k]
        ex = run._exacts[((x.dtype, x.shape),)]
        e = ex.entry
        if e.current is not ex:
            kt._hold(ex)
        for _, port in e.in_ports:
            port.data = x.data_ptr()
        return e.ref

    def touched(k):  # the call's own objects read, so that they are in the host's cache
        x = xs[k]
        ex = run._exacts[((x.dtype, x.shape),)]
        _ = (bytes(ex.ports), ex.sig == ex.sig, ex.result.shape, ex.entry.current)
        return x

    out = {"nodes per padded size": nodes}
    for seq in seqs.values():  # every length once: no first use inside the clock
        for k in set(seq):
            run(xs[k])
            dict_call(xs[k])
    torch.cuda.synchronize()
    for rnd in range(2):
        for name, seq in seqs.items():
            r = out.setdefault(name, {})
            r.setdefault("call", []).append(seq_p50(seq, xs.get, run))
            r.setdefault("call, its objects read first", []).append(seq_p50(seq, touched, run))
            r.setdefault("library", []).append(
                seq_p50(seq, lib_ready, lambda ref: kt._run(cache, ref, s)))
            r.setdefault("bare launch", []).append(
                seq_p50(seq, lambda k: bare[padded(k)], lambda ge: rt.cudaGraphLaunch(ge, raw)))
            r.setdefault("graph dict call", []).append(seq_p50(seq, xs.get, dict_call))
    return out


def probe_p50():
    """This process's bare launch now: a one-element add after a sync,
    p50 of 300."""
    z, v = torch.zeros(1, device="cuda"), []
    for _ in range(300):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        z.add_(1)
        v.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return round(pct(v, 50), 2)


def interleaved(rounds=7):
    """Host per hit of kpipe, the graph dict and reduce-overhead in one
    process, their blocks alternated: each round runs every trace through
    each approach (300 calls, p50, a sync before each call), the approaches'
    order turned round by round. Every length of every trace has run through
    each approach before the first round (reduce-overhead three times: a
    warm-up, its recording, a replay), so every timed call is a hit. The
    same process's bare launch changes by up to 1.5x over seconds, with
    the cores it runs on at the time (bench/RESULTS.md),
    so ratios are taken within a round, blocks a fraction of a second
    apart, and their median reported, beside the bare-launch probe before
    each round."""
    import kpipe.torch as kt
    torch.manual_seed(0)
    m = Block().cuda().to(torch.bfloat16).eval()
    torch.set_grad_enabled(False)
    tr = traces()
    xs = {n: torch.randn(BATCH, n, H, device="cuda", dtype=torch.bfloat16)
          for n in set(sum(tr.values(), []))}
    runs = {"kpipe": kt.graphed(m, dynamic={"x": [1]}, capture_sizes=PAD),
            "graph dict": graph_dict(m)[0],
            "reduce-overhead": torch.compile(m, mode="reduce-overhead", dynamic=True)}
    for n in sorted(xs):
        for name, f in runs.items():
            for _ in range(3 if name == "reduce-overhead" else 1):
                f(xs[n])
    torch.cuda.synchronize()
    names = list(runs)
    out = {"probe_launch_p50": [], "traces": {}}
    for r in range(rounds):
        out["probe_launch_p50"].append(probe_p50())
        order = names[r % len(names):] + names[:r % len(names)]
        for t, seq in tr.items():
            row = out["traces"].setdefault(t, {a: [] for a in names})
            for a in order:
                row[a].append(seq_p50(seq, xs.get, runs[a]))
    for t, row in out["traces"].items():
        k = row["kpipe"]
        for a in names[1:]:
            ratios = sorted(x / y for x, y in zip(k, row[a]))
            row["kpipe / " + a] = [round(x, 3) for x in ratios]
            row["kpipe / %s, median" % a] = round(ratios[len(ratios) // 2], 3)
    return out

APPROACHES = ("eager", "compile", "graph dict", "kpipe", "kpipe, on first use",
              "kpipe, compiled fn")
KPIPES = ("kpipe", "kpipe, on first use", "kpipe, compiled fn")


def main():
    if len(sys.argv) > 1:
        modes = {"pipeline": python_pipeline, "split": split, "lengths": lengths,
                 "interleaved": interleaved}
        mode = modes.get(sys.argv[1])
        r = mode() if mode else one(sys.argv[1], sys.argv[2])
        print(json.dumps(r))
        return
    res = {}
    for a in APPROACHES + ("pipeline",):
        for t in traces() if a != "pipeline" else ("",):
            p = subprocess.run([sys.executable, __file__, a, t], capture_output=True, text=True,
                               timeout=300)
            if p.returncode != 0:
                print("%s %s failed:\n%s" % (a, t, p.stderr[-3000:]), file=sys.stderr)
                continue
            res.setdefault(a, {})[t] = json.loads(p.stdout.strip().splitlines()[-1])
    print("| trace | approach | host per hit p50 (µs) | wall p50 (µs) | wall p99 (µs) | "
          "cost per miss (ms) | misses | graphs held | reserved, peak (MiB) | "
          "of which the approach's (MiB) | max diff vs eager |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for t in traces():
        for a in APPROACHES:
            r = res.get(a, {}).get(t)
            if r is None:
                continue
            print("| %s | %s | %.1f | %.1f | %.1f | %.2f | %d | %s | %.0f | %.0f | %.3g |"
                  % (t, a, r["host_hit_p50"], r["wall_p50"], r["wall_p99"], r["miss_ms"],
                     r["misses"], r["held"], r["reserved_mib"], r["added_mib"],
                     r["max_diff"]))
    for a in KPIPES:
        for t in traces():
            k, c = res.get(a, {}).get(t), res.get("compile", {}).get(t)
            if k and c:
                print("%s, %s: host per hit %.3g x reduce-overhead's; reserved %.3g x" % (
                    a, t, k["host_hit_p50"] / c["host_hit_p50"],
                    k["reserved_mib"] / c["reserved_mib"]))
    p = subprocess.run([sys.executable, __file__, "graph dict", "largest"], capture_output=True,
                       text=True, timeout=300)
    alone = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else None
    if alone:
        print("the largest graph alone (graph dict, length %d only): %.0f MiB reserved, %.0f "
              "of them its own" % (MAXLEN, alone["reserved_mib"], alone["added_mib"]))
    for a in KPIPES:
        for t in traces():
            k, g = res.get(a, {}).get(t), res.get("graph dict", {}).get(t)
            if k and g and alone:
                print("%s, %s: its own memory %.3g x the largest graph's alone; host per hit "
                      "%.3g x the graph dict's" % (a, t, k["added_mib"] / alone["added_mib"],
                                                   k["host_hit_p50"] / g["host_hit_p50"]))
    for t in traces():
        if t in res.get("kpipe", {}):
            print("kpipe, %s: the first call (all 16 sizes prepared) %.2f s"
                  % (t, res["kpipe"][t]["first_call_ms"] / 1e3))
            print("kpipe cache stats, %s:" % t, json.dumps(res["kpipe"][t]["stats"]))
    p = subprocess.run([sys.executable, __file__, "interleaved"], capture_output=True,
                       text=True, timeout=400)
    if p.returncode == 0:
        iv = json.loads(p.stdout.strip().splitlines()[-1])
        print("one process, the approaches' blocks alternated (%d rounds; bare launch p50 "
              "per round %s us):" % (len(iv["probe_launch_p50"]), iv["probe_launch_p50"]))
        for t, row in iv["traces"].items():
            print("  %s: kpipe %s us, graph dict %s, reduce-overhead %s; kpipe / graph dict "
                  "median %.3g, kpipe / reduce-overhead median %.3g" % (
                      t, row["kpipe"], row["graph dict"], row["reduce-overhead"],
                      row["kpipe / graph dict, median"],
                      row["kpipe / reduce-overhead, median"]))
    else:
        print("interleaved failed:\n%s" % p.stderr[-3000:], file=sys.stderr)
    if "pipeline" in res:
        r = res["pipeline"][""]
        print("sample pipeline from Python with torch tensors: host per tick p50 %.1f us, "
              "p99 %.1f us" % (r["host_p50"], r["host_p99"]))


if __name__ == "__main__":
    main()
