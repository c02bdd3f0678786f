"""The README's Python example: the sample pipeline, ReLU(input0 + input1),
ticked with NumPy arrays, then a model file as a pipeline of one module."""
import numpy as np
import kpipe

p = kpipe.Pipeline("examples/sample.json", device="cpu")   # or "cuda"
a = np.random.rand(16384).astype(np.float32)
b = np.random.rand(16384).astype(np.float32) - 0.5
out = p({"input0": a, "input1": b})          # any __dlpack__ tensors
y = np.from_dlpack(out["output"])            # a view of kpipe's memory
assert np.array_equal(y, np.maximum(a + b, 0))
print(p.stats())                             # the graph cache's counters

net = kpipe.Pipeline("examples/models/signal_classifier.onnx", device="cpu")
probs = np.from_dlpack(net({"samples": np.random.randn(1024).astype(np.float32)})["probs"])
print("class probabilities:", np.round(probs, 3))
assert abs(float(probs.sum()) - 1) < 1e-5
