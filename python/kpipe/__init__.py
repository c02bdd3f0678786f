"""kpipe from Python: pipelines, flows, tasks and the graph cache over the
shared library (ctypes), with tensors exchanged through DLPack.

    import numpy as np, kpipe
    p = kpipe.Pipeline("examples/sample.json", device="cpu")
    a = np.random.rand(4096).astype(np.float32)
    out = p({"input0": a, "input1": a})
    y = np.from_dlpack(out["output"])

The library is found through KPIPE_LIBRARY, the path `cmake --install`
recorded, or the system's search (see _lib.py).
"""
from ._core import Array, Device, Stream, device
from ._dlpack import live_exports
from ._lib import LIBRARY_PATH, Error, lib
from .flow import Flow, Frame
from .graph_cache import GraphCache
from .pipeline import Pipeline
from .tasks import Tasks
from .video import VideoReader

__version__ = lib.kp_version_str().decode()

__all__ = ["Array", "Device", "Error", "Flow", "Frame", "GraphCache", "Pipeline", "Stream",
           "Tasks", "device", "live_exports", "LIBRARY_PATH", "__version__"]
