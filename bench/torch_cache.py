"""The PyTorch side of bench_cache, on the same GPU: shapes that change per
tick through torch.compile(mode="reduce-overhead", dynamic=True) and through a
dict of torch.cuda.CUDAGraph keyed by padded size (the pattern vLLM and
SGLang use), for the sample (ReLU(a + b)) and a chain of 8 ReLUs; the per-hit
host cost of reduce-overhead; and torch.compile's default mode (one fused
kernel) on 2 and 3 rotating input sets at 16 K and 16 M elements. Latency is
one tick with a host wait. Prints JSON.
    python3 bench/torch_cache.py [--quick]"""
import json
import random
import sys
import time

import torch

QUICK = "--quick" in sys.argv
MAX = 65536
PAD_SIZES = [256 << i for i in range(9)]  # 256 .. 65536


def stats(v):
    v = sorted(v)
    pick = lambda p: v[int(p / 100.0 * (len(v) - 1) + 0.5)]
    return {"p50_us": pick(50), "p99_us": pick(99)}


def sample(a, b):
    return torch.relu(a + b)


def chain8(a, b):
    x = a
    for _ in range(8):
        x = torch.relu(x)
    return x


def shapes_of(kind, ticks):
    eight = [4096, 8192, 12288, 16384, 24576, 32768, 49152, 65536]
    if kind == "A":
        return [16384] * ticks
    if kind == "B":
        return [eight[t % 8] for t in range(ticks)]
    if kind == "C":
        grow = [256 * (i + 1) for i in range(256)]
        return [grow[t * 256 // ticks] for t in range(ticks)]
    rnd = random.Random(7)
    sizes = [rnd.randint(1, MAX) for _ in range(64)]
    return [sizes[rnd.randrange(64)] for _ in range(ticks)]


class PaddedGraphs:
    """One CUDAGraph per capture size; inputs copied into static buffers."""

    def __init__(self, fn):
        self.fn, self.graphs = fn, {}
        self.sa = torch.zeros(MAX, device="cuda")
        self.sb = torch.zeros(MAX, device="cuda")

    def __call__(self, a, b):
        n = a.numel()
        size = next(s for s in PAD_SIZES if s >= n)
        self.sa[:n].copy_(a)
        self.sb[:n].copy_(b)
        if size not in self.graphs:
            xa, xb = self.sa[:size], self.sb[:size]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self.fn(xa, xb)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = self.fn(xa, xb)
            self.graphs[size] = (g, out)
        g, out = self.graphs[size]
        g.replay()
        return out[:n]


def trace(fn_name, fn, variant, kind, ticks):
    torch._dynamo.reset()
    if variant == "reduce-overhead":
        f = torch.compile(fn, mode="reduce-overhead", dynamic=True)
    else:
        f = PaddedGraphs(fn)
    a = torch.randint(-1000, 1001, (MAX,), device="cuda").float()
    b = torch.randint(-1000, 1001, (MAX,), device="cuda").float()
    lat, misses, miss_us, seen = [], 0, 0.0, set()
    torch.cuda.synchronize()
    for n in shapes_of(kind, ticks):
        key = n if variant == "reduce-overhead" else next(s for s in PAD_SIZES if s >= n)
        t0 = time.perf_counter()
        out = f(a[:n], b[:n])
        torch.cuda.synchronize()
        us = (time.perf_counter() - t0) * 1e6
        lat.append(us)
        if key not in seen:
            seen.add(key)
            misses += 1
            miss_us += us
        ref = fn(a[:n], b[:n])
    assert torch.equal(out, ref)
    s = stats(lat)
    return dict(pipeline=fn_name, variant=variant, trace=kind, ticks=ticks, misses=misses,
                per_miss_us=miss_us / misses - s["p50_us"] if misses else 0.0,
                graphs=len(seen) if variant != "reduce-overhead" else None,
                bytes_reserved=torch.cuda.memory_reserved(), **s)


def hit_cost():
    """Host time per call of reduce-overhead on a repeated shape, 8 elementwise ops."""
    torch._dynamo.reset()
    f = torch.compile(chain8, mode="reduce-overhead", dynamic=True)
    a = torch.randn(16384, device="cuda")
    for _ in range(20):
        f(a, a)
    torch.cuda.synchronize()
    reps = 200 if QUICK else 2000
    host = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f(a, a)
        host.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    return stats(host)["p50_us"]


def rotating(n, sets, ticks):
    torch._dynamo.reset()
    f = torch.compile(sample)
    ins = [(torch.randint(-1000, 1001, (n,), device="cuda").float(),
            torch.randint(-1000, 1001, (n,), device="cuda").float()) for _ in range(sets)]
    for t in range(ticks // 10):
        f(*ins[t % sets])
    torch.cuda.synchronize()
    lat = []
    for t in range(ticks):
        t0 = time.perf_counter()
        out = f(*ins[t % sets])
        torch.cuda.synchronize()
        lat.append((time.perf_counter() - t0) * 1e6)
    assert torch.equal(out, sample(*ins[(ticks - 1) % sets]))
    return dict(variant="torch.compile", n=n, sets=sets, **stats(lat))


def main():
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
           "hit_host_us": hit_cost(), "traces": [], "rotating": []}
    tb = 400 if QUICK else 2000
    for name, fn in (("sample", sample), ("chain8", chain8)):
        for variant in ("reduce-overhead", "padded graphs"):
            for kind in "ABCD":
                res["traces"].append(trace(name, fn, variant, kind, 2048 if kind == "C" else tb))
                print(json.dumps(res["traces"][-1]), file=sys.stderr)
    for sets in (2, 3):
        for n in (16384, 1 << 24):
            res["rotating"].append(rotating(n, sets, (200 if QUICK else 2000) if n > 10 ** 6
                                            else (2000 if QUICK else 20000)))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
