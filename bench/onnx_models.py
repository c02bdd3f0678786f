#!/usr/bin/env python3
"""Models exported by PyTorch, run by kpipe's engine, checked against
PyTorch's own outputs and timed against PyTorch in the same run (GPU
machine; fp32, TF32 off on both sides).

    KPIPE_LIBRARY=build-gpu/src/libkpipe.so python3 bench/onnx_models.py [--quick] [--json F]
    ... bench/onnx_models.py --fp16 --compile default,reduce-overhead [--json F]

For each model: the relative L2 error of kpipe (cuda) against torch (cuda),
of kpipe (cpu) against torch (cpu) where the model is small enough, the
setup time (file to first result) against torch.compile's first call, the
p50/p99 latency of one synchronised call for torch eager, torch.compile
(default) and kpipe (graph mode), and peak device memory: torch's
max_memory_allocated against kpipe's pipeline arena.

--fp16 runs the fp16 comparison instead: kpipe's "precision": "fp16"
against PyTorch in fp16 on channels-last tensors, each one's error against
the fp32 reference (BatchNorm statistics calibrated on random batches, so
activations stay in fp16's range as a trained network's do), and the
floor (FLOPs at the dense fp16 rate, bytes at the copy bandwidth measured
in the same run).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import kpipe  # noqa: E402
from kpipe.pipeline import model_spec  # noqa: E402


class SRVGGx2(nn.Module):
    """SRVGGNetCompact, scale 2: 3x3 convs with PReLU, pixel shuffle, plus
    the nearest-upsampled input."""

    def __init__(self, feat=64, convs=16):
        super().__init__()
        layers = [nn.Conv2d(3, feat, 3, 1, 1), nn.PReLU(feat)]
        for _ in range(convs):
            layers += [nn.Conv2d(feat, feat, 3, 1, 1), nn.PReLU(feat)]
        layers += [nn.Conv2d(feat, 3 * 4, 3, 1, 1)]
        self.body = nn.Sequential(*layers)
        self.shuffle = nn.PixelShuffle(2)

    def forward(self, x):
        up = nn.functional.interpolate(x, scale_factor=2, mode="nearest")
        return self.shuffle(self.body(x)) + up


class TinyYolo(nn.Module):
    """A YOLO-style detector: strided conv blocks with SiLU, a top-down path
    with upsampling and concat, and per-scale heads flattened and joined."""

    def __init__(self, classes=80):
        super().__init__()
        c = lambda i, o, s=1: nn.Sequential(nn.Conv2d(i, o, 3, s, 1), nn.BatchNorm2d(o), nn.SiLU())
        self.s1, self.s2, self.s3 = nn.Sequential(c(3, 16, 2), c(16, 32, 2)), c(32, 64, 2), c(64, 128, 2)
        self.lat = c(128 + 64, 64)
        self.h3 = nn.Conv2d(128, 4 + classes, 1)
        self.h2 = nn.Conv2d(64, 4 + classes, 1)

    def forward(self, x):
        a = self.s1(x)
        b = self.s2(a)
        t = self.s3(b)
        m = self.lat(torch.cat([nn.functional.interpolate(t, scale_factor=2.0, mode="nearest"), b], 1))
        out = torch.cat([self.h2(m).flatten(2), self.h3(t).flatten(2)], 2)
        box, cls = out.split([4, out.shape[1] - 4], 1)
        return torch.cat([box, cls.sigmoid()], 1).transpose(1, 2)


def models(quick):
    import torchvision
    m = {
        "resnet18": (lambda: torchvision.models.resnet18(), (1, 3, 224, 224), None),
        "resnet50_b16": (lambda: torchvision.models.resnet50(), (16, 3, 224, 224), None),
        "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(), (1, 3, 224, 224), None),
        "srvgg_x2_1080p": (SRVGGx2, (1, 3, 1080, 1920), {"frame": {2: "height", 3: "width"}}),
        "yolo_tiny_640": (TinyYolo, (1, 3, 640, 640), None),
        "yolo_tiny_640_b16": (TinyYolo, (16, 3, 640, 640), None),
    }
    if quick:
        m = {k: m[k] for k in ("resnet18", "srvgg_x2_1080p")}
    return m


def calibrate(net, shape):
    """BatchNorm statistics from a few random batches, as training leaves a
    network: with a fresh network's (mean 0, variance 1) the activations of
    a deep model grow past fp16's range (65504), and no fp16 result means
    anything."""
    bns = [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # a plain average over the batches
    net.train()
    with torch.no_grad():
        for _ in range(4):
            net(torch.rand(max(shape[0], 4), *shape[1:]) * 2 - 1)
    net.eval()


def export(name, make, shape, dyn, folder, calibrated=False):
    torch.manual_seed(0)
    net = make().eval()
    if calibrated:
        calibrate(net, shape)
    x = torch.randn(*shape)
    path = os.path.join(folder, name + ".onnx")
    in_name = "frame" if dyn else "input"
    torch.onnx.export(net, (x,), path, input_names=[in_name], output_names=["output"],
                      opset_version=17, dynamic_axes=dyn, dynamo=False)
    return net, path, in_name


def timed(fn, n, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    v = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        v.append((time.perf_counter() - t) * 1e3)
    v.sort()
    return statistics.median(v), v[min(len(v) - 1, int(0.99 * len(v)))]


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


def cli_check(path, in_name, x, ref, folder, device):
    """`kpipe run MODEL.onnx --input ... --output ...` as a user types it:
    the relative L2 error of its output file against torch's."""
    import subprocess
    cli = os.environ.get("KPIPE_CLI", "build-gpu/src/kpipe")
    xin, yout = os.path.join(folder, "x.npy"), os.path.join(folder, "y.npy")
    np.save(xin, x.cpu().numpy())
    r = subprocess.run([cli, "run", path, "--device", device, "--input", "%s=%s" % (in_name, xin),
                        "--output", "output=%s" % yout], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("kpipe run: " + (r.stderr or r.stdout)[-500:])
    return rel(torch.from_numpy(np.load(yout)), ref.cpu())


def one(name, spec, folder, reps, compile_modes):
    make, shape, dyn = spec
    net, path, in_name = export(name, make, shape, dyn, folder)
    row = {"model": name, "shape": list(shape)}
    torch.manual_seed(1)
    x = torch.rand(*shape) * 2 - 1
    maxes = {"height": shape[2], "width": shape[3]} if dyn else None
    # cpu: kpipe against torch, on the smaller models
    if shape[0] == 1 and shape[2] <= 224:
        with torch.no_grad():
            ref = net(x)
        p = kpipe.Pipeline(path, device="cpu", max=maxes)
        got = torch.from_dlpack(p({in_name: x})["output"]).clone()
        row["err_cpu"] = rel(got, ref)
        p.close()
        if name == "resnet18":
            row["err_cli_cpu"] = cli_check(path, in_name, x, ref, folder, "cpu")
    netc = net.cuda()
    xc = x.cuda()
    with torch.no_grad():
        ref = netc(xc)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    p = kpipe.Pipeline(path, device="cuda", max=maxes)
    out = p({in_name: xc})["output"]
    torch.cuda.synchronize()
    row["kpipe_setup_ms"] = (time.perf_counter() - t0) * 1e3
    got = torch.from_dlpack(out).clone()
    row["err_cuda"] = rel(got, ref)
    if name == "resnet18":
        row["err_cli_cuda"] = cli_check(path, in_name, x, ref, folder, "cuda")
    row["finite"] = bool(torch.isfinite(got).all())
    rep = p.report()
    row["kpipe_arena_mib"] = (rep.get("tensor_bytes", 0) + rep.get("workspace_bytes", 0)) / 2**20
    row["kpipe_p50_ms"], row["kpipe_p99_ms"] = timed(lambda: p({in_name: xc}), reps)
    p.close()
    with torch.no_grad():
        torch.cuda.reset_peak_memory_stats()
        row["eager_p50_ms"], row["eager_p99_ms"] = timed(lambda: netc(xc), reps)
        row["eager_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        for mode in compile_modes:
            torch._dynamo.reset()
            f = torch.compile(netc, mode=mode)
            t0 = time.perf_counter()
            f(xc)
            torch.cuda.synchronize()
            key = "compile" if mode == "default" else mode
            row[key + "_first_s"] = time.perf_counter() - t0
            row[key + "_p50_ms"], row[key + "_p99_ms"] = timed(lambda: f(xc), reps)
    tf32(row, netc, path, in_name, xc, ref, maxes, reps, compile_modes)
    return row


def tf32(row, netc, path, in_name, xc, ref, maxes, reps, compile_modes):
    """kpipe's "precision": "tf32" against PyTorch with TF32 on (its cuDNN
    default), error against the fp32 reference."""
    p = kpipe.Pipeline(path, device="cuda", max=maxes, precision="tf32")
    got = torch.from_dlpack(p({in_name: xc})["output"]).clone()
    row["tf32_err_cuda"] = rel(got, ref)
    row["tf32_finite"] = bool(torch.isfinite(got).all())
    row["tf32_kpipe_p50_ms"], row["tf32_kpipe_p99_ms"] = timed(lambda: p({in_name: xc}), reps)
    p.close()
    # "tune": cuDNN's algorithms measured at setup, in fp32 and in tf32
    for prec, key in (("fp32", "tuned"), ("tf32", "tf32_tuned")):
        spec = model_spec(path, maxes, prec)
        spec["modules"][0]["params"]["tune"] = "on"
        t0 = time.perf_counter()
        p = kpipe.Pipeline(spec, device="cuda")
        got = torch.from_dlpack(p({in_name: xc})["output"]).clone()
        torch.cuda.synchronize()
        row[key + "_setup_ms"] = (time.perf_counter() - t0) * 1e3
        row[key + "_err_cuda"] = rel(got, ref)
        row[key + "_kpipe_p50_ms"], _ = timed(lambda: p({in_name: xc}), reps)
        p.close()
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        with torch.no_grad():
            row["tf32_eager_p50_ms"], _ = timed(lambda: netc(xc), reps)
            for mode in compile_modes:
                torch._dynamo.reset()
                f = torch.compile(netc, mode=mode)
                f(xc)
                key = "tf32_compile" if mode == "default" else "tf32_" + mode
                row[key + "_p50_ms"], _ = timed(lambda: f(xc), reps)
    finally:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False


DENSE_FP16 = 989e12  # H100 and H200 SXM: dense fp16 tensor-core FLOP/s (no sparsity)


def copy_bandwidth():
    """Device-to-device copy bandwidth in bytes/s (read + write), measured."""
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms, _ = timed(lambda: b.copy_(a), 20)
    return 2 * a.numel() / (ms * 1e-3)


def flops(net, x):
    from torch.utils.flop_counter import FlopCounterMode
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        net(x)
    return fc.get_total_flops()


def fp16(name, spec, folder, reps, compile_modes, bw):
    """kpipe's "precision": "fp16" (f32 ports) against PyTorch in fp16 with
    channels-last tensors (eager, torch.compile's modes), the error of each
    against the fp32 reference, and the floor: FLOPs at the dense fp16
    rate, bytes in and out at the measured copy bandwidth."""
    import copy
    make, shape, dyn = spec
    net, path, in_name = export(name, make, shape, dyn, folder, calibrated=True)
    row = {"model": name, "shape": list(shape)}
    torch.manual_seed(1)
    x = (torch.rand(*shape) * 2 - 1).cuda()
    net = net.cuda()
    maxes = {"height": shape[2], "width": shape[3]} if dyn else None
    with torch.no_grad():
        ref = net(x)
    row["gflop"] = flops(net, x) / 1e9
    io_bytes = 2 * (x.numel() + ref.numel())  # fp16 in and out
    row["floor_ms"] = max(row["gflop"] * 1e9 / DENSE_FP16, io_bytes / bw) * 1e3
    # setup twice: with the algorithm cache empty, then with what the first
    # run left there (a second process would find the same file)
    cache = os.path.join(folder, name + "_algos")
    for key in ("kpipe_setup_ms", "kpipe_setup_warm_ms"):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        p = kpipe.Pipeline(path, device="cuda", max=maxes, precision="fp16",
                           model_params={"algo_cache": cache})
        got = torch.from_dlpack(p({in_name: x})["output"]).clone()
        torch.cuda.synchronize()
        row[key] = (time.perf_counter() - t0) * 1e3
        if key == "kpipe_setup_ms":
            p.close()
    row["kpipe_err"] = rel(got, ref)
    row["kpipe_finite"] = bool(torch.isfinite(got).all())
    if name.startswith("srvgg"):
        # the output is the upsampled input plus what the network adds; the
        # error of that part alone, which the upsampled input would dilute
        up = nn.functional.interpolate(x, scale_factor=2, mode="nearest")
        row["kpipe_err_body"] = rel(got - up, ref - up)
    rep = p.report()
    row["kpipe_mib"] = (rep.get("tensor_bytes", 0) + rep.get("workspace_bytes", 0)) / 2**20
    row["kpipe_p50_ms"], row["kpipe_p99_ms"] = timed(lambda: p({in_name: x}), reps)
    if dyn:
        # 1,000 calls alternating the maximum size and one of two thirds of
        # it: after the first of each, no new plan and no new capture
        small = (x[:, :, :shape[2] * 2 // 3, :shape[3] * 2 // 3]).contiguous()
        k = [0]

        def alternate():
            k[0] += 1
            p({in_name: small if k[0] % 2 else x})
        row["alternate_p50_ms"], row["alternate_p99_ms"] = timed(alternate, 1000, warm=4)
        row["alternate_sizes"] = [list(small.shape), list(x.shape)]
    p.close()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()  # peak memory counts the fp16 weights and input too
    nh = copy.deepcopy(net).half().to(memory_format=torch.channels_last)
    xh = x.half().contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        got = nh(xh).float()
        row["eager_err"] = rel(got, ref)
        if name.startswith("srvgg"):
            row["eager_err_body"] = rel(got - up, ref - up)
        row["eager_p50_ms"], row["eager_p99_ms"] = timed(lambda: nh(xh), reps)
        row["eager_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        row["eager_weights_mib"] = sum(t.numel() * 2 for t in nh.parameters()) / 2**20
        for mode in compile_modes:
            torch._dynamo.reset()
            f = torch.compile(nh, mode=mode)
            t0 = time.perf_counter()
            f(xh)
            torch.cuda.synchronize()
            key = "compile" if mode == "default" else mode
            row[key + "_first_s"] = time.perf_counter() - t0
            row[key + "_p50_ms"], row[key + "_p99_ms"] = timed(lambda: f(xh), reps)
    del nh
    torch.cuda.empty_cache()
    return row


def fp16_table(rows):
    print("\nfp16 (kpipe precision fp16, f32 ports; torch fp16 channels-last)")
    print("%-20s %8s %8s %8s %8s %8s %8s %8s %7s %7s %8s %8s" % (
        "model", "err kp", "err pt", "kp p50", "kp p99", "eager", "compile", "reduce", "floor",
        "kp/best", "kp MiB", "pt MiB"))
    for r in rows:
        if "error" in r:
            print("%-20s ERROR %s" % (r["model"], r["error"][:200]))
            continue
        best = min(r.get(k, 1e9) for k in ("compile_p50_ms", "reduce-overhead_p50_ms"))
        print("%-20s %8.1e %8.1e %6.2fms %6.2fms %6.2fms %6s %6s %5.2fms %7.2f %8.0f %8.0f" % (
            r["model"], r["kpipe_err"], r["eager_err"], r["kpipe_p50_ms"], r["kpipe_p99_ms"],
            r["eager_p50_ms"],
            "%.2fms" % r["compile_p50_ms"] if "compile_p50_ms" in r else "-",
            "%.2fms" % r["reduce-overhead_p50_ms"] if "reduce-overhead_p50_ms" in r else "-",
            r["floor_ms"], r["kpipe_p50_ms"] / best if best < 1e9 else float("nan"),
            r["kpipe_mib"], r["eager_mib"]))
    print("setup: kpipe file to first result (algorithm cache empty, then warm); "
          "torch.compile's first call")
    for r in rows:
        if "kpipe_setup_ms" in r:
            print("%-20s kpipe %.2fs (warm %.2fs), compile %s, reduce-overhead %s" % (
                r["model"], r["kpipe_setup_ms"] / 1e3, r["kpipe_setup_warm_ms"] / 1e3,
                "%.1fs" % r["compile_first_s"] if "compile_first_s" in r else "-",
                "%.1fs" % r["reduce-overhead_first_s"] if "reduce-overhead_first_s" in r else "-"))


def main_fp16(a, modes):
    rows = []
    bw = copy_bandwidth()
    print("copy bandwidth %.0f GB/s; dense fp16 %.0f TFLOP/s" % (bw / 1e9, DENSE_FP16 / 1e12))
    with tempfile.TemporaryDirectory() as d:
        for name, spec in models(a.quick).items():
            try:
                rows.append(fp16(name, spec, d, a.reps, modes, bw))
            except Exception as e:  # a model that fails is reported, the rest still run
                rows.append({"model": name, "error": "%s: %s" % (type(e).__name__, e)})
            print(json.dumps(rows[-1]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"copy_gbps": bw / 1e9, "rows": rows}, f, indent=1)
    fp16_table(rows)
    for r in rows:
        if "alternate_p99_ms" in r:
            print("%s: 1000 calls alternating %s and %s: p50 %.2f ms, p99 %.2f ms "
                  "(one size: p99 %.2f ms)" % (
                      r["model"], "x".join(map(str, r["alternate_sizes"][0][2:])),
                      "x".join(map(str, r["alternate_sizes"][1][2:])), r["alternate_p50_ms"],
                      r["alternate_p99_ms"], r["kpipe_p99_ms"]))
    for r in rows:
        if "kpipe_err_body" in r:
            print("%s: the network's part alone: kpipe %.1e, PyTorch fp16 %.1e" % (
                r["model"], r["kpipe_err_body"], r["eager_err_body"]))
    # fp16 within 2e-2 relative L2 of fp32 or within 1.5x PyTorch's own fp16
    # error (a deep network's logits move ~3e-2 in both), and finite (no
    # black frames)
    bad = [r for r in rows if "error" in r or not r["kpipe_finite"]
           or r["kpipe_err"] > max(2e-2, 1.5 * r["eager_err"])]
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--compile", default="default", help="comma-separated torch.compile modes, or none")
    ap.add_argument("--fp16", action="store_true",
                    help="the fp16 comparison only (torch.compile default and reduce-overhead)")
    a = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    modes = [] if a.compile == "none" else a.compile.split(",")
    if a.fp16:
        return main_fp16(a, modes)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, spec in models(a.quick).items():
            try:
                rows.append(one(name, spec, d, a.reps, modes))
            except Exception as e:  # a model that fails is reported, the rest still run
                rows.append({"model": name, "error": "%s: %s" % (type(e).__name__, e)})
            print(json.dumps(rows[-1]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("\n%-20s %9s %9s %8s %8s %9s %9s %9s %9s" % ("model", "err cuda", "err cpu", "setup", "kp p50",
                                                       "eager p50", "compile", "kp MiB", "eager MiB"))
    for r in rows:
        if "error" in r:
            print("%-20s ERROR %s" % (r["model"], r["error"][:200]))
            continue
        print("%-20s %9.2e %9s %6.0fms %6.2fms %7.2fms %7s %9.0f %9.0f" % (
            r["model"], r["err_cuda"], "%.2e" % r["err_cpu"] if "err_cpu" in r else "-",
            r["kpipe_setup_ms"], r["kpipe_p50_ms"], r["eager_p50_ms"],
            "%.2fms" % r["compile_p50_ms"] if "compile_p50_ms" in r else "-",
            r["kpipe_arena_mib"], r["eager_peak_mib"]))
    print("\nTF32 (kpipe precision tf32; torch with TF32 on)")
    print("%-20s %9s %8s %9s %9s %9s %9s" % ("model", "err fp32", "kp p50", "tuned", "setup",
                                             "eager p50", "compile"))
    for r in rows:
        if "tf32_kpipe_p50_ms" in r:
            print("%-20s %9.2e %6.2fms %7.2fms %7.0fms %7.2fms %7s" % (
                r["model"], r["tf32_err_cuda"], r["tf32_kpipe_p50_ms"],
                r["tf32_tuned_kpipe_p50_ms"], r["tf32_tuned_setup_ms"], r["tf32_eager_p50_ms"],
                "%.2fms" % r["tf32_compile_p50_ms"] if "tf32_compile_p50_ms" in r else "-"))
    print("\nfp32 tuned (\"tune\": \"on\")")
    for r in rows:
        if "tuned_kpipe_p50_ms" in r:
            print("%-20s %6.2fms (heuristics %.2fms), setup %.0fms" % (
                r["model"], r["tuned_kpipe_p50_ms"], r["kpipe_p50_ms"], r["tuned_setup_ms"]))
    bad = [r for r in rows if "error" in r or r["err_cuda"] > 1e-4 or not r["finite"]
           or r.get("err_cpu", 0) > 1e-4 or r.get("err_cli_cuda", 0) > 1e-4
           or r.get("err_cli_cpu", 0) > 1e-4
           or r.get("tf32_err_cuda", 0) > 1e-2 or not r.get("tf32_finite", True)
           or r.get("tuned_err_cuda", 0) > 1e-4 or r.get("tf32_tuned_err_cuda", 0) > 1e-2]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
