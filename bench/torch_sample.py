"""ReLU(input0 + input1) in PyTorch on the same GPU: eager, and a CUDAGraph
replay with the inputs copied into its static tensors. Latency is one tick
with a host wait, as kpipe measures it. Prints JSON."""
import json
import sys
import time

import torch


def stats(v):
    v = sorted(v)
    pick = lambda p: v[int(p / 100.0 * (len(v) - 1) + 0.5)]
    return {"min_us": v[0], "p50_us": pick(50), "p99_us": pick(99), "max_us": v[-1]}


def bench(fn, ticks, warmup):
    for _ in range(warmup):
        fn()
        torch.cuda.synchronize()
    lat = []
    for _ in range(ticks):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        lat.append((time.perf_counter() - t0) * 1e6)
    return stats(lat)


def run(n, ticks):
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.rand(n, device="cuda", generator=g) * 2 - 1
    b = torch.rand(n, device="cuda", generator=g) * 2 - 1
    want = torch.clamp_min(a + b, 0)
    rows = []
    eager = bench(lambda: torch.relu(a + b), ticks, ticks // 10)
    assert torch.equal(torch.relu(a + b), want)
    rows.append(dict(variant="torch eager", n=n, **eager))

    sa, sb = torch.empty_like(a), torch.empty_like(b)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            torch.relu(sa + sb)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.relu(sa + sb)

    def replay():
        sa.copy_(a)
        sb.copy_(b)
        graph.replay()

    replayed = bench(replay, ticks, ticks // 10)
    assert torch.equal(out, want)
    rows.append(dict(variant="torch graph", n=n, **replayed))
    return rows


def main():
    ticks = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    rows = run(16384, ticks) + run(16777216, max(ticks // 10, 10))
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                      "results": rows}, indent=2))


if __name__ == "__main__":
    main()
