#!/usr/bin/env python3
"""Makes examples/models/sr_x2.onnx: a small SRVGGNetCompact-style network
that upscales RGB frames twice, trained here with PyTorch (a GPU makes it a
few minutes; a cpu works, slowly).

    python3 scripts/make_sr_model.py [--out examples/models/sr_x2.onnx]
        [--seconds 150] [--report sr_x2.json]

The data are frames this script draws: gradients, 1/f-noise textures,
shapes with soft and hard edges, gratings, strokes and film grain, each
frame at a scale of its own, drawn at twice the size and averaged down so
edges are anti-aliased as a camera's are. Each frame is the target; the
network's input is the same frame downscaled twice (area, bilinear or
bicubic) and mostly compressed as JPEG at a random quality, as a video's
frames are. Held-out frames (another seed) measure it: PSNR of the
network's output against the originals, beside bicubic upscaling's.

The network: a 3x3 convolution to FEAT channels, BODY more with PReLU
between, one to 12 channels, PixelShuffle(2), plus the input upsampled by
nearest neighbour (what the network learns is the difference). The ONNX
file takes "frame" f32 [1, 3, height, width] in [0, 1] (planar RGB, as
nv12_rgb makes it) and gives "output" f32 [1, 3, 2 height, 2 width], any
size (the flow bounds it with "max").
"""
import argparse
import io
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

FEAT, BODY = 32, 8


class SRx2(nn.Module):
    def __init__(self, feat=FEAT, body=BODY):
        super().__init__()
        layers = [nn.Conv2d(3, feat, 3, 1, 1), nn.PReLU(feat)]
        for _ in range(body):
            layers += [nn.Conv2d(feat, feat, 3, 1, 1), nn.PReLU(feat)]
        layers += [nn.Conv2d(feat, 12, 3, 1, 1)]
        self.body = nn.Sequential(*layers)
        self.shuffle = nn.PixelShuffle(2)

    def forward(self, x):
        base = F.interpolate(x, scale_factor=2, mode="nearest")
        return self.shuffle(self.body(x)) + base


def pink(n, s, gen, device):
    """Noise with a 1/f amplitude spectrum, [n, 3, s, s], roughly in [-1, 1]:
    the statistics of natural images' textures (foliage, gravel, fabric)."""
    fy = torch.fft.fftfreq(s, device=device).view(s, 1)
    fx = torch.fft.rfftfreq(s, device=device).view(1, s // 2 + 1)
    amp = 1.0 / torch.clamp(torch.sqrt(fx * fx + fy * fy), min=1.0 / s)
    re = torch.randn(n, 3, s, s // 2 + 1, generator=gen, device=device)
    im = torch.randn(n, 3, s, s // 2 + 1, generator=gen, device=device)
    x = torch.fft.irfft2(torch.complex(re, im) * amp, s=(s, s))
    return x / (x.flatten(1).std(dim=1).view(n, 1, 1, 1) * 3 + 1e-6)


def draw(n, size, gen, device):
    """n RGB frames [n, 3, size, size] in [0, 1], drawn at 2x and averaged.
    Each frame has a scale of its own (shapes from a few pixels to most of
    the frame), so detail comes at every size, as in video of any
    resolution."""
    s = 2 * size
    yy, xx = torch.meshgrid(torch.linspace(0, 1, s, device=device),
                            torch.linspace(0, 1, s, device=device), indexing="ij")

    def rnd(*shape):
        return torch.rand(*shape, generator=gen, device=device)

    scale = torch.exp(rnd(n, 1, 1, 1) * math.log(8.0)) / 4  # 0.25 .. 2
    # backgrounds: a gradient, low-frequency colour and a 1/f texture
    img = rnd(n, 3, 1, 1) * 0.6 + 0.2
    img = img + (rnd(n, 3, 1, 1) - 0.5) * xx + (rnd(n, 3, 1, 1) - 0.5) * yy
    low = F.interpolate(rnd(n, 3, 6, 6) - 0.5, size=(s, s), mode="bicubic", align_corners=False)
    img = img + 0.3 * low + pink(n, s, gen, device) * rnd(n, 1, 1, 1) * 0.3
    for _ in range(16):
        kind = int(rnd(1).item() * 5)
        cx, cy = rnd(n, 1, 1, 1), rnd(n, 1, 1, 1)
        colour = rnd(n, 3, 1, 1)
        if kind == 0:  # rectangles, hard edges
            w, h = (rnd(n, 1, 1, 1) * 0.3 + 0.02) * scale, (rnd(n, 1, 1, 1) * 0.3 + 0.02) * scale
            m = (((xx - cx).abs() < w) & ((yy - cy).abs() < h)).float()
        elif kind == 1:  # ellipses, edges soft to hard
            rx = (rnd(n, 1, 1, 1) * 0.25 + 0.02) * scale
            ry = (rnd(n, 1, 1, 1) * 0.25 + 0.02) * scale
            d = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2
            soft = rnd(n, 1, 1, 1) * 0.3 + 0.01
            m = torch.sigmoid((1 - d) / soft)
        elif kind == 2:  # strokes: thin bars at an angle, as text and wires
            a = rnd(n, 1, 1, 1) * math.pi
            u = (xx - cx) * torch.cos(a) + (yy - cy) * torch.sin(a)
            v = -(xx - cx) * torch.sin(a) + (yy - cy) * torch.cos(a)
            m = ((u.abs() < (rnd(n, 1, 1, 1) * 0.3 + 0.05) * scale) &
                 (v.abs() < (rnd(n, 1, 1, 1) * 0.006 + 0.002) * scale.sqrt())).float()
        elif kind == 3:  # gratings in a disc: fine periodic detail
            a = rnd(n, 1, 1, 1) * math.pi
            f = (rnd(n, 1, 1, 1) * 60 + 10) / scale
            g = 0.5 + 0.5 * torch.sin(2 * math.pi * f * (xx * torch.cos(a) + yy * torch.sin(a)))
            r = (rnd(n, 1, 1, 1) * 0.2 + 0.05) * scale
            m = (((xx - cx) ** 2 + (yy - cy) ** 2) < r * r).float() * g
        else:  # a textured patch with a soft outline
            r = (rnd(n, 1, 1, 1) * 0.3 + 0.05) * scale
            d = ((xx - cx) ** 2 + (yy - cy) ** 2) / (r * r)
            m = torch.sigmoid((1 - d) / 0.1)
            colour = (colour + pink(n, s, gen, device) * 0.5).clamp(0, 1)
        img = img * (1 - m) + colour * m
    img = img + (rnd(n, 1, s, s) - 0.5) * 0.02 * rnd(n, 1, 1, 1)  # grain
    return F.avg_pool2d(img.clamp(0, 1), 2)


def degrade(hr, gen):
    """Downscaling by 2, with a kernel drawn per frame (area, bilinear or
    bicubic, anti-aliased), then JPEG at quality 30-95 for most frames and
    plain 8-bit rounding for the rest: the losses of video that was scaled
    and compressed by someone else's tools."""
    from torchvision.io import decode_jpeg, encode_jpeg
    out = []
    for i in range(hr.shape[0]):
        k = int(torch.rand(1, generator=gen).item() * 3)
        x = hr[i:i + 1]
        if k == 0:
            lr = F.avg_pool2d(x, 2)
        else:
            lr = F.interpolate(x, scale_factor=0.5, mode=("bilinear", "bicubic")[k - 1],
                               antialias=True, align_corners=False)
        u8 = (lr.clamp(0, 1)[0] * 255).round().to(torch.uint8).cpu()
        if torch.rand(1, generator=gen).item() < 0.75:
            q = 30 + int(torch.rand(1, generator=gen).item() * 66)
            u8 = decode_jpeg(encode_jpeg(u8, quality=q))
        out.append(u8)
    return torch.stack(out).to(hr.device).float() / 255


def psnr(a, b):
    mse = ((a.clamp(0, 1) - b) ** 2).mean().item()
    return 10 * math.log10(1.0 / max(mse, 1e-12))


def make_set(n, size, seed, device):
    g_dev = torch.Generator(device=device).manual_seed(seed)
    g_cpu = torch.Generator().manual_seed(seed)
    hr, lr = [], []
    for k in range(0, n, 64):
        h = draw(min(64, n - k), size, g_dev, device)
        hr.append(h)
        lr.append(degrade(h, g_cpu))
    return torch.cat(hr), torch.cat(lr)


def evaluate(net, hr, lr):
    with torch.no_grad():
        out = torch.cat([net(lr[i:i + 16]) for i in range(0, len(lr), 16)])
    bic = F.interpolate(lr, scale_factor=2, mode="bicubic", align_corners=False)
    near = F.interpolate(lr, scale_factor=2, mode="nearest")
    return {"model_psnr_db": psnr(out, hr), "bicubic_psnr_db": psnr(bic, hr),
            "nearest_psnr_db": psnr(near, hr)}


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "examples", "models", "sr_x2.onnx"))
    ap.add_argument("--seconds", type=float, default=150.0, help="training time")
    ap.add_argument("--steps", type=int, default=30000, help="at most this many steps")
    ap.add_argument("--report", help="a JSON file for the figures")
    ap.add_argument("--train-frames", type=int, default=3072)
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    t0 = time.time()
    hr, lr = make_set(a.train_frames, 192, 1, dev)
    test_hr, test_lr = make_set(256, 256, 2, dev)
    t_data = time.time() - t0
    net = SRx2().to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=5e-4)
    gen = torch.Generator(device=dev).manual_seed(3)
    step, t1, crop = 0, time.time(), 48  # LR crops; HR twice that
    while step < a.steps and time.time() - t1 < a.seconds:
        # the learning rate falls as a cosine over the time or steps given
        frac = max(step / a.steps, (time.time() - t1) / a.seconds)
        for g in opt.param_groups:
            g["lr"] = 5e-4 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
        idx = torch.randint(0, len(lr), (64,), generator=gen, device=dev)
        oy = torch.randint(0, lr.shape[2] - crop + 1, (1,), generator=gen, device=dev).item()
        ox = torch.randint(0, lr.shape[3] - crop + 1, (1,), generator=gen, device=dev).item()
        x = lr[idx, :, oy:oy + crop, ox:ox + crop]
        y = hr[idx, :, 2 * oy:2 * oy + 2 * crop, 2 * ox:2 * ox + 2 * crop]
        if step % 2:
            x, y = x.flip(3), y.flip(3)
        loss = F.l1_loss(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
    t_train = time.time() - t1
    net.eval()
    figures = evaluate(net, test_hr, test_lr)
    figures.update({"steps": step, "train_s": round(t_train, 1), "data_s": round(t_data, 1),
                    "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                    "feat": FEAT, "body": BODY, "train_frames": a.train_frames,
                    "test_frames": len(test_hr), "torch": torch.__version__})
    net = net.cpu()
    x = torch.rand(1, 3, 64, 96)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    torch.onnx.export(net, (x,), a.out, input_names=["frame"], output_names=["output"],
                      opset_version=17, dynamo=False,
                      dynamic_axes={"frame": {2: "height", 3: "width"},
                                    "output": {2: "height2", 3: "width2"}})
    figures["onnx_bytes"] = os.path.getsize(a.out)
    print(json.dumps(figures, indent=1))
    if a.report:
        with open(a.report, "w") as f:
            json.dump(figures, f, indent=1)
    # the claim the example makes: better than bicubic on frames it never saw
    return 0 if figures["model_psnr_db"] > figures["bicubic_psnr_db"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
