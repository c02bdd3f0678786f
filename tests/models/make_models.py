#!/usr/bin/env python3
"""Whole models for the engine's tests, built with the onnx package from
their layer lists, with seeded random weights (no download is possible
here). Each builder returns an onnx.ModelProto; `write_all(folder)` saves
them all.

    python3 tests/models/make_models.py OUT_DIR
    python3 tests/models/make_models.py --examples examples/models

The shapes follow the real networks: torchvision's ResNet-18 (BatchNorm
kept as its own node), an SRVGGNetCompact x2 (PReLU, pixel shuffle,
nearest upsampling of the input added back), a MobileNetV3-style block
(depthwise convolution, HardSwish, squeeze-and-excitation), a YOLO-style
detector head (SiLU, Concat, Resize, Split, Softmax) and a transformer block
whose reshapes are computed from Shape at run time (Shape -> Gather ->
Concat -> Reshape), as exporters write them.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


class Builder:
    """Collects nodes and initializers; names values uniquely."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return "%s_%d" % (base, self.n)

    def const(self, arr, base="c"):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def op(self, op_type, inputs, n_out=1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def weight(self, *shape, fan_in=None):
        fan_in = fan_in or int(np.prod(shape[1:]))
        return self.const((self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32), "w")

    def conv(self, x, cin, cout, k, stride=1, pad=None, group=1, bias=True):
        pad = k // 2 if pad is None else pad
        ins = [x, self.weight(cout, cin // group, k, k)]
        if bias:
            ins.append(self.const((self.rng.standard_normal(cout) * 0.1).astype(np.float32), "b"))
        return self.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad] * 4, group=group)

    def bn(self, x, c):
        r = self.rng
        return self.op("BatchNormalization", [
            x, self.const((1 + 0.1 * r.standard_normal(c)).astype(np.float32), "gamma"),
            self.const((0.1 * r.standard_normal(c)).astype(np.float32), "beta"),
            self.const((0.1 * r.standard_normal(c)).astype(np.float32), "mean"),
            self.const((1 + 0.2 * r.random(c)).astype(np.float32), "var")], epsilon=1e-5)

    def model(self, inputs, outputs, name, opset=OPSET):
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="kpipe-tests")
        m.ir_version = 7
        onnx.checker.check_model(m)
        return m


def tensor(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def resnet18(classes=1000):
    b = Builder(18)
    x = b.op("Relu", [b.bn(b.conv("input", 3, 64, 7, 2, 3, bias=False), 64)])
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        for blk in range(2):
            s = stride if blk == 0 else 1
            y = b.op("Relu", [b.bn(b.conv(x, cin, cout, 3, s, bias=False), cout)])
            y = b.bn(b.conv(y, cout, cout, 3, 1, bias=False), cout)
            short = x
            if s != 1 or cin != cout:
                short = b.bn(b.conv(x, cin, cout, 1, s, 0, bias=False), cout)
            x = b.op("Relu", [b.op("Add", [y, short])])
            cin = cout
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    w = b.const((b.rng.standard_normal((classes, 512)) * 0.05).astype(np.float32), "fc_w")
    fb = b.const((b.rng.standard_normal(classes) * 0.05).astype(np.float32), "fc_b")
    b.nodes.append(helper.make_node("Gemm", [x, w, fb], ["logits"], name="fc", transB=1))
    return b.model([tensor("input", [1, 3, 224, 224])], [tensor("logits", [1, classes])], "resnet18")


def conv_patterns():
    """Every chain the engine fuses into a convolution (src/onnx/fuse.c), and
    chains it must leave alone: Conv without bias -> BatchNormalization ->
    Relu; Conv -> Add (a residual, no Relu); Conv -> Relu; Conv ->
    BatchNormalization -> Add -> Relu; a Conv whose output is also a graph
    output; an Add that broadcasts; two Convs sharing one weight."""
    b = Builder(5)
    a = b.op("Relu", [b.bn(b.conv("input", 3, 16, 3, bias=False), 16)])
    r = b.op("Add", [b.conv(a, 16, 16, 3), a])
    c = b.op("Relu", [b.conv(r, 16, 16, 1, pad=0)])
    d = b.op("Relu", [b.op("Add", [c, b.bn(b.conv(c, 16, 16, 3), 16)])])
    t = b.conv(d, 16, 16, 3)
    b.nodes.append(helper.make_node("Relu", [t], ["tap"], name="tap_relu"))
    t = b.nodes[-2].output[0]
    bias = b.const((b.rng.standard_normal((16, 1, 1)) * 0.1).astype(np.float32), "bcast")
    e = b.op("Relu", [b.op("Add", [b.conv("tap", 16, 16, 3), bias])])
    w = b.weight(16, 16, 3, 3)
    f = b.op("Conv", [e, w], kernel_shape=[3, 3], pads=[1] * 4)
    f = b.op("Relu", [b.op("Conv", [f, w], kernel_shape=[3, 3], pads=[1] * 4)])
    b.nodes.append(helper.make_node("Identity", [f], ["out"], name="out_id"))
    return b.model([tensor("input", [2, 3, 20, 28])],
                   [tensor("out", [2, 16, 20, 28]), tensor(t, [2, 16, 20, 28])], "conv_patterns")


def conv_epilogues():
    """Every activation the engine fuses into a convolution's epilogue
    (src/onnx/fuse.c), with and without a residual Add before it, and
    chains it must leave alone: a PRelu whose slope is not one per channel,
    a Mul by another value's Sigmoid, a Clip whose bound the input sets."""
    b = Builder(6)
    c = lambda x, ci=8, co=8: b.conv(x, ci, co, 3)
    chan = lambda: b.const(
        (0.2 + 0.05 * b.rng.standard_normal((8, 1, 1))).astype(np.float32), "slope")
    x = b.op("PRelu", [c("input", 3), chan()])
    x = b.op("LeakyRelu", [b.bn(c(x), 8)], alpha=0.2)
    lo, hi = b.const(np.array(-0.5, np.float32)), b.const(np.array(0.75, np.float32))
    x = b.op("Clip", [c(x), lo, hi])
    x = b.op("HardSwish", [b.op("Add", [c(x), x])])
    x = b.op("Sigmoid", [c(x)])
    x = b.op("HardSigmoid", [c(x)], alpha=0.3, beta=0.4)
    y = c(x)
    x = b.op("Mul", [y, b.op("Sigmoid", [y])])                                   # SiLU
    x = b.op("PRelu", [c(x), b.const(np.array([0.3], np.float32), "slope")])   # one slope
    x = b.op("Relu", [b.op("Add", [b.bn(c(x), 8), x])])
    # left alone
    y = c(x)
    full = b.const((0.1 * b.rng.standard_normal((8, 20, 28))).astype(np.float32))
    x = b.op("PRelu", [y, full])
    y = c(x)
    x = b.op("Mul", [y, b.op("Sigmoid", [x])])
    hi = b.op("ReduceMax", ["input"], keepdims=0)
    x = b.op("Clip", [c(x), b.const(np.array(-0.25, np.float32)), hi])
    b.nodes.append(helper.make_node("Identity", [x], ["out"], name="out_id"))
    return b.model([tensor("input", [2, 3, 20, 28])], [tensor("out", [2, 8, 20, 28])],
                   "conv_epilogues", opset=14)


def srvgg_x2(convs=16, feat=64, shuffle="DepthToSpace"):
    """SRVGGNetCompact: body of 3x3 convs with PReLU, then pixel shuffle, plus
    the nearest-upsampled input. H and W are symbolic."""
    b = Builder(2)
    slope = lambda: b.const(np.full((feat, 1, 1), 0.25, np.float32) + 0.01 * b.rng.standard_normal((feat, 1, 1)).astype(np.float32), "slope")
    x = b.op("PRelu", [b.conv("frame", 3, feat, 3), slope()])
    for _ in range(convs):
        x = b.op("PRelu", [b.conv(x, feat, feat, 3), slope()])
    x = b.conv(x, feat, 3 * 4, 3)
    if shuffle == "DepthToSpace":
        x = b.op("DepthToSpace", [x], blocksize=2, mode="CRD")
    else:  # as exporters wrote pixel_shuffle before opset 11: Reshape + Transpose
        shp = b.op("Shape", ["frame"])
        h = b.op("Gather", [shp, b.const(np.array(2, np.int64))], axis=0)
        w = b.op("Gather", [shp, b.const(np.array(3, np.int64))], axis=0)
        u = lambda v: b.op("Unsqueeze", [v, b.const(np.array([0], np.int64))])
        c = lambda *v: b.const(np.array(v, np.int64))
        s6 = b.op("Concat", [c(1, 3, 2, 2), u(h), u(w)], axis=0)
        x = b.op("Transpose", [b.op("Reshape", [x, s6])], perm=[0, 1, 4, 2, 5, 3])
        two = b.const(np.array(2, np.int64))
        s4 = b.op("Concat", [c(1, 3), u(b.op("Mul", [h, two])), u(b.op("Mul", [w, two]))], axis=0)
        x = b.op("Reshape", [x, s4])
    up = b.op("Resize", ["frame", "", b.const(np.array([1, 1, 2, 2], np.float32))], mode="nearest")
    b.nodes.append(helper.make_node("Add", [x, up], ["enhanced"], name="residual"))
    return b.model([tensor("frame", [1, 3, "height", "width"])],
                   [tensor("enhanced", [1, 3, "height2", "width2"])], "srvgg_x2")


def mobilenet_block():
    b = Builder(3)
    hs = lambda v: b.op("HardSwish", [v])
    x = hs(b.bn(b.conv("input", 3, 16, 3, 2, bias=False), 16))
    x = b.op("Clip", [b.conv(x, 16, 64, 1, 1, 0), b.const(np.array(0, np.float32)),
                      b.const(np.array(6, np.float32))])
    x = hs(b.conv(x, 64, 64, 5, 2, 2, group=64))
    se = b.op("GlobalAveragePool", [x])
    se = b.op("HardSigmoid", [b.conv(b.op("Relu", [b.conv(se, 64, 16, 1, 1, 0)]), 16, 64, 1, 1, 0)],
              alpha=1.0 / 6, beta=0.5)
    x = b.conv(b.op("Mul", [x, se]), 64, 24, 1, 1, 0)
    x = b.op("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.op("Flatten", [x])
    w = b.const((b.rng.standard_normal((24 * 14 * 14, 10)) * 0.01).astype(np.float32))
    b.nodes.append(helper.make_node("Softmax", [b.op("MatMul", [x, w])], ["probs"], name="softmax",
                                    axis=-1))
    return b.model([tensor("input", [1, 3, 112, 112])], [tensor("probs", [1, 10])], "mobilenet_block",
                   opset=14)


def yolo_head():
    """Two scales: backbone convs with SiLU, an upsampled top-down path,
    Concat, then boxes and classes split and decoded."""
    b = Builder(4)
    silu = lambda v: b.op("Mul", [v, b.op("Sigmoid", [v])])
    p3 = silu(b.conv("images", 3, 16, 3, 2))
    p4 = silu(b.conv(p3, 16, 32, 3, 2))
    p5 = silu(b.conv(p4, 32, 64, 3, 2))
    up = b.op("Resize", [p5, "", b.const(np.array([1, 1, 2, 2], np.float32))], mode="nearest")
    f4 = silu(b.conv(b.op("Concat", [up, p4], axis=1), 96, 32, 3))
    outs = []
    for f, c in [(f4, 32), (p5, 64)]:
        o = b.conv(f, c, 4 + 8, 1, 1, 0)  # 4 box + 8 classes per cell
        o = b.op("Reshape", [o, b.const(np.array([1, 12, -1], np.int64))])
        outs.append(o)
    y = b.op("Concat", outs, axis=2)
    box, cls = b.op("Split", [y, b.const(np.array([4, 8], np.int64))], n_out=2, axis=1)
    box = b.op("Div", [b.op("Sub", [box, b.const(np.array(0.5, np.float32))]),
                       b.const(np.array(2.0, np.float32))])
    cls = b.op("Softmax", [cls], axis=1)
    b.nodes.append(helper.make_node("Concat", [box, cls], ["detections"], name="out", axis=1))
    b.nodes.append(helper.make_node("Transpose", ["detections"], ["detections_t"], name="t",
                                    perm=[0, 2, 1]))
    return b.model([tensor("images", [1, 3, 64, 64])], [tensor("detections_t", [1, 80, 12])],
                   "yolo_head")


def transformer_block(dim=64, heads=4):
    b = Builder(5)
    d = dim // heads
    w = lambda i, o: b.const((b.rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32))
    ln = lambda v: b.op("LayerNormalization", [v, b.const(np.ones(dim, np.float32)),
                                                b.const(np.zeros(dim, np.float32))], axis=-1,
                        epsilon=1e-5)
    x = "tokens"
    shp = b.op("Shape", [x])
    seq = b.op("Unsqueeze", [b.op("Gather", [shp, b.const(np.array(1, np.int64))], axis=0),
                             b.const(np.array([0], np.int64))])
    head_shape = b.op("Concat", [b.const(np.array([1], np.int64)), seq,
                                 b.const(np.array([heads, d], np.int64))], axis=0)
    h = ln(x)
    q, k, v = [b.op("Transpose", [b.op("Reshape", [b.op("MatMul", [h, w(dim, dim)]), head_shape])],
                    perm=[0, 2, 1, 3]) for _ in range(3)]
    att = b.op("Div", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                       b.const(np.array(np.sqrt(d), np.float32))])
    # causal mask from Range, as decoders build it
    n = b.op("Squeeze", [seq, b.const(np.array([0], np.int64))])
    r = b.op("Range", [b.const(np.array(0, np.int64)), n, b.const(np.array(1, np.int64))])
    mask = b.op("Less", [b.op("Unsqueeze", [r, b.const(np.array([0], np.int64))]),
                         b.op("Unsqueeze", [r, b.const(np.array([1], np.int64))])])
    att = b.op("Where", [mask, b.const(np.array(-1e4, np.float32)), att])
    o = b.op("MatMul", [b.op("Softmax", [att], axis=-1), v])
    o = b.op("Reshape", [b.op("Transpose", [o], perm=[0, 2, 1, 3]),
                         b.op("Concat", [b.const(np.array([1], np.int64)), seq,
                                         b.const(np.array([dim], np.int64))], axis=0)])
    x = b.op("Add", [x, b.op("MatMul", [o, w(dim, dim)])])
    m = b.op("MatMul", [ln(x), w(dim, 4 * dim)])
    gelu = b.op("Mul", [b.op("Mul", [m, b.const(np.array(0.5, np.float32))]),
                        b.op("Add", [b.op("Erf", [b.op("Div", [m, b.const(np.array(np.sqrt(2), np.float32))])]),
                                     b.const(np.array(1, np.float32))])])
    y = b.op("MatMul", [gelu, w(4 * dim, dim)])
    b.nodes.append(helper.make_node("Add", [x, y], ["hidden"], name="residual2"))
    return b.model([tensor("tokens", [1, "seq", dim])], [tensor("hidden", [1, "seq", dim])],
                   "transformer_block", opset=17)


def sharpen_rgb(width=640, height=360, amount=0.5):
    """A designed, not trained, network for the examples: planar RGB in
    [0, 1] as the video modules give it (f32[3*h*w]), a depthwise 3x3
    sharpening convolution (the centre 1 + 4a, the four neighbours -a), then
    Clip to [0, 1] and back to the flat layout."""
    b = Builder(6)
    a = amount
    k = np.array([[0, -a, 0], [-a, 1 + 4 * a, -a], [0, -a, 0]], np.float32)
    w = b.const(np.stack([k[None]] * 3).astype(np.float32), "sharpen_w")
    x = b.op("Reshape", ["rgb", b.const(np.array([1, 3, height, width], np.int64))])
    x = b.op("Conv", [x, w], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=3)
    x = b.op("Clip", [x, b.const(np.array(0, np.float32)), b.const(np.array(1, np.float32))])
    b.nodes.append(helper.make_node("Reshape", [x, b.const(np.array([-1], np.int64))], ["sharp"],
                                    name="flat"))
    n = 3 * width * height
    return b.model([tensor("rgb", [n])], [tensor("sharp", [n])], "sharpen_rgb")


def signal_classifier(samples=1024, classes=8):
    """The shape of a modulation classifier over a block of samples: 1-D
    convolutions with ReLU and pooling, global average, a linear layer and
    Softmax. Its weights are seeded random ones: it shows wiring, not skill."""
    b = Builder(7)
    x = b.op("Reshape", ["samples", b.const(np.array([1, 1, samples], np.int64))])
    cin = 1
    for cout in (16, 32, 32):
        x = b.op("Conv", [x, b.weight(cout, cin, 7), b.const(np.zeros(cout, np.float32))],
                 kernel_shape=[7], pads=[3, 3])
        x = b.op("MaxPool", [b.op("Relu", [x])], kernel_shape=[2], strides=[2])
        cin = cout
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    x = b.op("Gemm", [x, b.weight(classes, cin), b.const(np.zeros(classes, np.float32))], transB=1)
    x = b.op("Softmax", [x], axis=-1)
    b.nodes.append(helper.make_node("Reshape", [x, b.const(np.array([classes], np.int64))],
                                    ["probs"], name="flat"))
    return b.model([tensor("samples", [samples])], [tensor("probs", [classes])], "signal_classifier")


EXAMPLES = {"sharpen_rgb": sharpen_rgb, "signal_classifier": signal_classifier}

MODELS = {
    "resnet18": (resnet18, {"input": [1, 3, 224, 224]}, {}),
    "srvgg_x2": (srvgg_x2, {"frame": [1, 3, 48, 64]}, {"height": 48, "width": 64}),
    "srvgg_x2_shuffle": (lambda: srvgg_x2(convs=4, shuffle="reshape"), {"frame": [1, 3, 40, 56]},
                         {"height": 40, "width": 56}),
    "mobilenet_block": (mobilenet_block, {"input": [1, 3, 112, 112]}, {}),
    "conv_patterns": (conv_patterns, {"input": [2, 3, 20, 28]}, {}),
    "conv_epilogues": (conv_epilogues, {"input": [2, 3, 20, 28]}, {}),
    "yolo_head": (yolo_head, {"images": [1, 3, 64, 64]}, {}),
    "transformer_block": (transformer_block, {"tokens": [1, 37, 64]}, {"seq": 64}),
    "sharpen_rgb": (sharpen_rgb, {"rgb": [3 * 360 * 640]}, {}),
    "signal_classifier": (signal_classifier, {"samples": [1024]}, {}),
}


def write_all(folder):
    os.makedirs(folder, exist_ok=True)
    for name, (make, _, _) in MODELS.items():
        onnx.save(make(), os.path.join(folder, name + ".onnx"))


def write_examples(folder):
    """The models examples/ uses (examples/models/*.onnx are this output)."""
    os.makedirs(folder, exist_ok=True)
    for name, make in EXAMPLES.items():
        onnx.save(make(), os.path.join(folder, name + ".onnx"))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--examples":
        write_examples(sys.argv[2])
    else:
        write_all(sys.argv[1] if len(sys.argv) > 1 else "models")
