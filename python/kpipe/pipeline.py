"""kpipe.Pipeline: a pipeline from its JSON spec, ticked with a dict of
tensors, giving a dict of kpipe.Array views."""
import ctypes
import json
import os
from ctypes import byref, c_void_p

from ._core import Array, Handle, Inflight, Owned, any_thread, take
from ._lib import (DTYPE_NAMES, Error, GraphStats, PipelineOptions,
                   PipelineReport, PortInfo, check, desc_shape, desc_strides, lib)
from .graph_cache import cache_config, stats_dict

_MODES = {"graph": 0, "stream": 1}
_BINDINGS = {"copy": 0, "rebind": 1}


def model_spec(path, max=None, precision=None, params=None):
    """The spec of one `onnx` module running the model file at `path`: its
    ports become the pipeline's inputs and outputs, by their port names.
    `params` adds the module's other parameters ({"tune": "on",
    "algo_cache": "off"}; docs/models.md lists them)."""
    params = dict(params or {}, model=os.path.abspath(path))
    if max:
        params["max"] = {str(k): int(v) for k, v in max.items()}
    if precision is not None:
        params["precision"] = precision
    return {"kpipe_spec": 1, "name": os.path.basename(path),
            "modules": [{"type": "onnx", "id": "model", "params": params}]}


def spec_text(spec, what):
    """(json text, None) or (None, path) from a dict, JSON text or a path."""
    if isinstance(spec, dict):
        return json.dumps(spec), None
    if isinstance(spec, os.PathLike):
        return None, os.fspath(spec)
    if isinstance(spec, str):
        return (spec, None) if spec.lstrip().startswith("{") else (None, spec)
    raise Error("KP_ERR_INVALID_ARG", "a %s spec must be a dict, JSON text or a path, not a %s"
                % (what, type(spec).__name__))


class Pipeline(Owned):
    """A pipeline built from its spec: a dict, JSON text or a file path.

        p = kpipe.Pipeline("examples/sample.json", device="cpu")
        out = p({"input0": a, "input1": b})       # any __dlpack__ tensors
        y = numpy.from_dlpack(out["output"])

    Outputs are views of the pipeline's memory, rewritten by the next tick
    (copy what must outlive it); each keeps the pipeline's memory alive, so
    one may outlive close() (which waits for the ticks). Inputs are read in place; they are kept alive
    until the tick's work is done. `stream`: None (the device's default
    kpipe stream), a kpipe.Stream, or a native stream (torch.cuda.Stream,
    an int): the tick then runs on the caller's stream.

    Threads: a pipeline belongs to the first thread that calls it. A call
    from another thread raises kpipe.Error("KP_ERR_STATE") naming both
    threads, every time, whether or not a call is in progress: its outputs
    are views of memory that the next tick rewrites, so calls from two
    threads would hand one thread the other's results even in turn, and a
    lock could only make that rarer. An output stays valid until the
    holder's next call. For several threads make one pipeline each (they
    share the device); for workers that take turns, the holder calls
    release_thread() once it has read its outputs, and the next caller
    takes the pipeline over. A holder that has ended lets go by itself.
    sync(), stats(), report() and close() may come from any thread: they
    wait for a call in progress.

    An ONNX model file runs as a pipeline of one `onnx` module:

        p = kpipe.Pipeline("model.onnx", device="cuda", max={"batch": 16})
        out = p({"input": x})       # ports named after the model's inputs

    `max` bounds the model's symbolic dimensions by name; `precision` is
    "fp32" (the default), "tf32", or "fp16" (cuda: fp16 convolutions on
    channels-last tensors; the ports stay f32); `model_params` adds the
    module's other parameters, such as {"tune": "on"} or {"algo_cache":
    "off"} (docs/models.md).
    """

    def __init__(self, spec, device="cpu", mode=None, binding=None, fuse=None, miss=None,
                 max_graphs=None, max_bytes=None, max_variants=None, max=None, precision=None,
                 model_params=None):
        from . import _core
        self._bind_init()
        self.device = _core.device(device)
        if isinstance(spec, (str, os.PathLike)) and os.fspath(spec).endswith(".onnx"):
            spec = model_spec(os.fspath(spec), max, precision, model_params)
        elif max is not None or precision is not None or model_params is not None:
            raise Error("KP_ERR_INVALID_ARG",
                        "max, precision and model_params are for an .onnx model file")
        text, path = spec_text(spec, "pipeline")
        opts = PipelineOptions(ctypes.sizeof(PipelineOptions), -1, -1, None, -1)
        if mode is not None:
            if mode not in _MODES:
                raise Error("KP_ERR_INVALID_ARG", "mode %r: graph or stream" % (mode,))
            opts.mode = _MODES[mode]
        if binding is not None:
            if binding not in _BINDINGS:
                raise Error("KP_ERR_INVALID_ARG", "binding %r: copy or rebind" % (binding,))
            opts.binding = _BINDINGS[binding]
        if fuse is not None:
            opts.fuse = 1 if fuse else 0
        if any(v is not None for v in (miss, max_graphs, max_bytes, max_variants)):
            self._cfg = cache_config(miss, max_graphs, max_bytes, (), max_variants)
            opts.graph_cache = ctypes.pointer(self._cfg)
        p = c_void_p()
        dev = self.device.ptr
        # inputs of ticks not yet done: held by the handle, so they outlive
        # this object until the library has waited for the work
        self._inflight = Inflight(self.device)
        if text is not None:
            check(lib.kp_pipeline_create_from_json_opts(dev, text.encode(), byref(opts), byref(p)))
        else:
            check(lib.kp_pipeline_create_from_file_opts(dev, path.encode(), byref(opts), byref(p)))
        self._h = Handle(p.value, lib.kp_pipeline_destroy, self.device._h, self._inflight)
        check(lib.kp_pipeline_setup(self._h.ptr))
        self.name = lib.kp_pipeline_name(self._h.ptr).decode()
        self.mode = "stream" if lib.kp_pipeline_mode(self._h.ptr) == 1 else "graph"
        r = self._report()
        self.inputs = [self._port_name(lib.kp_pipeline_input_info, i) for i in range(r.n_inputs)]
        self.outputs = [self._port_name(lib.kp_pipeline_output_info, i)
                        for i in range(r.n_outputs)]
        # (`max` here is the model's bounds, not the builtin)
        self._in = (PortInfo * (len(self.inputs) or 1))()
        self._out = (PortInfo * (len(self.outputs) or 1))()
        self._names = [n.encode() for n in self.inputs + self.outputs]
        n_in = len(self.inputs)  # the names, set once: the library only reads them
        for i in range(n_in):
            self._in[i].name = self._names[i]
        for i in range(len(self.outputs)):
            self._out[i].name = self._names[n_in + i]
        self._in_set = frozenset(self.inputs)
        self._in_keys = [None] * len(self.inputs)  # what each input port holds
        self._views = [None] * len(self.outputs)
        self._ready = False

    def _port_name(self, fn, i):
        info = PortInfo()
        check(fn(self._h.ptr, i, byref(info)))
        return info.name.decode()

    @property
    def ptr(self):
        if not self._h.ptr:
            raise Error("KP_ERR_STATE", "pipeline %s is closed" % self.name)
        return self._h.ptr

    def _report(self):
        r = PipelineReport()
        check(lib.kp_pipeline_report_get(self.ptr, byref(r)))
        return r

    def _label(self):
        return "kpipe.Pipeline %r" % self.name

    def __call__(self, inputs=None, stream=None, **named):
        self._enter()
        try:
            return self._tick(inputs, stream, named)
        finally:
            self._leave()

    def _tick(self, inputs, stream, named):
        p = self.ptr
        feed = dict(inputs, **named) if inputs else named
        s = self.device.as_stream(stream)
        if feed.keys() != self._in_set:
            missing = [n for n in self.inputs if n not in feed]
            extra = [n for n in feed if n not in self.inputs]
            raise Error("KP_ERR_INVALID_ARG", "pipeline %s takes inputs %s; %s" % (
                self.name, self.inputs, ("missing %s" % missing) if missing
                else ("unknown %s" % extra)))
        held = []
        keys = self._in_keys
        for i, n in enumerate(self.inputs):
            t = take(feed[n], self.device, s, "input %r" % n)
            held.append(t)
            # a port is written only where its tensor differs from the last
            # tick's (a rotating input set, from Python, is the common case)
            key = (t.ptr, t.dtype, t.shape, t.strides)
            if key == keys[i]:
                continue
            port = self._in[i]
            port.data = t.ptr
            d = port.desc
            d.dtype = _dtype_value(t.dtype)
            d.ndim = len(t.shape)
            for k, (m, st) in enumerate(zip(t.shape, t.strides)):
                d.shape[k], d.strides[k] = m, st
            d.offset = 0
            keys[i] = key
        check(lib.kp_pipeline_configure_io(p, self._in, len(self.inputs), self._out,
                                           len(self.outputs), s.ptr))
        if not self._ready:
            check(lib.kp_pipeline_warmup(p, s.ptr))
            if self.mode == "graph":
                check(lib.kp_pipeline_build_graph(p))
            self._ready = True
        if self.mode == "graph":
            check(lib.kp_pipeline_execute_graph(p, s.ptr))
        else:
            check(lib.kp_pipeline_execute_stream(p, s.ptr))
        self._inflight.add(s, held)
        out = {}
        for i, n in enumerate(self.outputs):
            o = self._out[i]
            shape, strides = desc_shape(o.desc), desc_strides(o.desc)
            v = self._views[i]
            if v is None or v.ptr != o.data or v.shape != shape or v.strides != strides or \
                    v.stream is not s:
                v = self._views[i] = Array(o.data, DTYPE_NAMES[o.desc.dtype], shape, strides,
                                           self.device, s, self._h)
            out[n] = v
        return out

    @any_thread
    def sync(self):
        """Waits for every tick, and lets go of their inputs (any thread)."""
        self._inflight.retire(wait=True)

    @any_thread
    def stats(self):
        """The graph cache's counters (graph mode), as a dict (any thread)."""
        c = lib.kp_pipeline_graph_cache(self.ptr)
        if not c:
            return {}
        g = GraphStats()
        check(lib.kp_graph_cache_stats(c, byref(g)))
        return stats_dict(g)

    @any_thread
    def report(self):
        """Sizes and counts (kp_pipeline_report) and the graph cache's text
        report under "graph_cache" (any thread)."""
        r = self._report()
        d = {k: getattr(r, k) for k, _ in PipelineReport._fields_}
        d["binding"] = {0: "copy", 1: "rebind"}.get(r.binding, r.binding)
        c = lib.kp_pipeline_graph_cache(self.ptr)
        if c:
            buf = ctypes.create_string_buffer(1 << 16)
            d["graph_cache"] = lib.kp_graph_cache_report(c, buf, len(buf)).decode()
        return d

    def __repr__(self):
        return "kpipe.Pipeline(%r, %s, %s)" % (self.name, self.device.name, self.mode)


_DTYPE_VALUES = {v: k for k, v in DTYPE_NAMES.items()}


def _dtype_value(name):
    return _DTYPE_VALUES[name]
