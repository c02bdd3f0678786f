"""The work of bench_fusion in PyTorch on the same GPU: ReLU(x + b), and the
8-step chain add(b) -> *0.75 -> clamp(-2, 3) -> *c -> relu -> *0.75 -> +b ->
clamp(-2, 3), at 16 K and 16 M elements, eager and through torch.compile
(default and reduce-overhead). Latency is one tick with a host wait, the
median, as bench_fusion measures it. Prints a markdown table."""
import sys

import torch

from torch_sample import bench


def add_relu(x, b, c):
    return torch.relu(x + b)


def chain8(x, b, c):
    v = torch.clamp((x + b) * 0.75, -2.0, 3.0)
    v = torch.relu(v * c) * 0.75
    return torch.clamp(v + b, -2.0, 3.0)


def main():
    ticks = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}\n")
    print("| work | elements | variant | µs per tick (p50) |\n|---|---|---|---|")
    for name, f in (("add_relu", add_relu), ("chain8", chain8)):
        for n in (16384, 16777216):
            tk = ticks if n < 1 << 20 else max(ticks // 10, 10)
            g = torch.Generator(device="cuda").manual_seed(n)
            x, b, c = (torch.rand(n, device="cuda", generator=g) * 8 - 4 for _ in range(3))
            want = f(x, b, c)
            variants = [("eager", f),
                        ("torch.compile default", torch.compile(f)),
                        ("torch.compile reduce-overhead", torch.compile(f, mode="reduce-overhead"))]
            for vname, fn in variants:
                got = fn(x, b, c)
                assert torch.allclose(got, want, atol=1e-6), vname
                us = bench(lambda: fn(x, b, c), tk, max(tk // 10, 3))["p50_us"]
                print(f"| {name} | {n} | {vname} | {us:.1f} |", flush=True)


if __name__ == "__main__":
    main()
