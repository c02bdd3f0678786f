"""kpipe.torch: the shape-keyed graph cache for PyTorch code.

    block = MyBlock().cuda().eval()
    run = kpipe.torch.graphed(block, dynamic={"x": [1]}, capture_sizes=[64, 128, 256, 512])
    y = run(x)          # x: [batch, seq, hidden]; seq changes per call

How it is safe with PyTorch's caching allocator: a miss captures `fn`
with PyTorch's own capture (torch.cuda.CUDAGraph, keep_graph=True, one
memory pool shared by every capture of this callable), so the allocator
knows the capture and keeps the memory the graph uses in that pool. The
captured graph reads the cache's static input buffers and ends by copying
its results into the cache's static output buffers; PyTorch's own output
tensors are dropped right after, so the next capture reuses their memory
and the pool holds about what the largest capture needs, not the sum.
kpipe's cache then embeds the graph (kp_graph_add_native), and
instantiates, updates and launches it. Replays are serialized on the
caller's stream, which is what makes the shared pool safe: run a graphed
callable from one stream at a time.

Outputs are views of the cache's static output buffers, sliced to the
actual shape: the next call rewrites them (clone() what must outlive it).

Padding (capture_sizes) runs `fn` on inputs padded along their dynamic
dimensions and slices the outputs: right only where the outputs at real
positions do not depend on padded ones (per-token layers, causal
attention). Without capture_sizes every length is its own key.
"""
import ctypes
import inspect
from ctypes import byref, c_int64, c_uint32, c_void_p

import torch

from ._core import Array, Handle, device as _device
from ._lib import (BUILD_FN, DTYPE_NAMES, ENQUEUE_FN, Error, GraphCall, GraphStats, PortInfo,
                   check, fill_desc, lib, set_error)
from .graph_cache import cache_config, stats_dict

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
           torch.int64: "i64"}
_TORCH = {v: k for k, v in _DTYPES.items()}
_POLICIES = ("capture", "fallback", "strict")


def _flatten(res):
    if isinstance(res, torch.Tensor):
        return [res], False
    if isinstance(res, (tuple, list)) and all(isinstance(r, torch.Tensor) for r in res):
        return list(res), True
    raise Error("KP_ERR_UNSUPPORTED", "a graphed function returns a tensor or a tuple of "
                "tensors, not a %s" % type(res).__name__)


def _view(ptr, dtype, shape, strides, dev, owner):
    """A torch tensor over kpipe memory (kept alive by the tensor)."""
    return torch.from_dlpack(Array(ptr, dtype, shape, strides, dev, None, owner))


class _Entry:
    """One exact call signature: its prepared call and what the outputs are."""
    __slots__ = ("call", "ins", "outs", "masks", "lits", "lit_values", "views", "tuple_out",
                 "n_in", "n_out")


class Graphed:
    """What graphed() returns: call it as `fn`; stats() and report() tell
    how the cache did."""

    def __init__(self, fn, dynamic=None, policy="capture", capture_sizes=(), max_graphs=64,
                 max_bytes=0, warmup=1):
        if policy not in _POLICIES:
            raise Error("KP_ERR_INVALID_ARG", "policy %r: capture, fallback or strict" % (policy,))
        self.fn = fn
        self._cfg = cache_config(policy, max_graphs, max_bytes, capture_sizes, 0)
        target = fn.forward if isinstance(fn, torch.nn.Module) else fn
        try:
            self._params = list(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            self._params = []
        self._dynamic = {}
        for k, dims in (dynamic or {}).items():
            if isinstance(k, str):
                if k not in self._params:
                    raise Error("KP_ERR_INVALID_ARG", "dynamic: %r is not an argument of %s "
                                "(%s)" % (k, getattr(target, "__name__", "fn"), self._params))
                k = self._params.index(k)
            self._dynamic[k] = (dims,) if isinstance(dims, int) else tuple(dims)
        self._warmup = warmup
        self._entries = {}
        self._literal_ids = {}
        self._graphs = []  # PyTorch's graphs: they hold the pool the kept graphs use
        self._pool = None
        self._side = None
        self._cache = None
        self._dev = None
        self._current = None
        self._exc = None
        self._build_c = BUILD_FN(self._build)
        self._enqueue_c = ENQUEUE_FN(self._enqueue)

    # --- the key and the prepared call ------------------------------------------------
    def _setup(self, t):
        if not t.is_cuda:
            raise Error("KP_ERR_INVALID_ARG", "graphed inputs live on a CUDA device, not %s"
                        % t.device)
        self._dev = _device("cuda:%d" % t.device.index)
        p = c_void_p()
        check(lib.kp_graph_cache_create(self._dev.ptr, byref(self._cfg), byref(p)))
        self._cache = Handle(p.value, lib.kp_graph_cache_destroy, self._dev._h)
        self._pool = torch.cuda.graph_pool_handle()
        self._side = torch.cuda.Stream(t.device)

    def _literal(self, v):
        try:
            return self._literal_ids.setdefault((type(v), v), len(self._literal_ids) + 1)
        except TypeError:
            raise Error("KP_ERR_INVALID_ARG", "a %s argument is neither a tensor nor hashable: "
                        "it cannot be part of the key" % type(v).__name__) from None

    def _out_meta(self, args):
        """Output dtypes and shapes at these input shapes, and which output
        dimensions follow the dynamic input ones: from PyTorch's fake tensors
        (no device work), at the shapes and with every dynamic one plus 1."""
        from torch._subclasses.fake_tensor import FakeTensorMode

        def shapes(bump):
            with FakeTensorMode(allow_non_fake_inputs=True) as mode:
                fake = []
                for i, a in enumerate(args):
                    if isinstance(a, torch.Tensor):
                        shape = list(a.shape)
                        for d in self._dynamic.get(i, ()) if bump else ():
                            shape[d] += 1
                        fake.append(torch.empty(shape, dtype=a.dtype, device=a.device))
                    else:
                        fake.append(a)
                with torch.no_grad():
                    res, tup = _flatten(self.fn(*fake))
                return [(r.dtype, tuple(r.shape)) for r in res], tup
        exact, tup = shapes(False)
        bumped, _ = shapes(True) if self._dynamic else (exact, tup)
        dyn = [sum(1 << d for d in range(len(s)) if s[d] != b[1][d]) if len(b[1]) == len(s)
               else 0 for (dt, s), b in zip(exact, bumped)]
        return exact, dyn, tup

    def _entry(self, key, args, tensors):
        e = _Entry()
        outs, out_dyn, e.tuple_out = self._out_meta(args)
        e.n_in, e.n_out = len(tensors), len(outs)
        if e.n_in + e.n_out > 16:
            raise Error("KP_ERR_INVALID_ARG", "%d tensors in and out; at most 16"
                        % (e.n_in + e.n_out))
        e.ins = (PortInfo * max(1, e.n_in))()
        e.outs = (PortInfo * max(1, e.n_out))()
        e.masks = (c_uint32 * (e.n_in + e.n_out + 1))()
        k = 0
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                if a.dtype not in _DTYPES:
                    raise Error("KP_ERR_UNSUPPORTED", "argument %d is %s; kpipe takes %s"
                                % (i, a.dtype, ", ".join(str(d) for d in _DTYPES)))
                fill_desc(e.ins[k].desc, _DTYPES[a.dtype], tuple(a.shape))
                for d in self._dynamic.get(i, ()):
                    if not 0 <= d < a.dim():
                        raise Error("KP_ERR_INVALID_ARG", "dynamic: dimension %d of argument "
                                    "%d, which has %d" % (d, i, a.dim()))
                    e.masks[k] |= 1 << d
                k += 1
        for j, (dt, shape) in enumerate(outs):
            if dt not in _DTYPES:
                raise Error("KP_ERR_UNSUPPORTED", "output %d is %s" % (j, dt))
            fill_desc(e.outs[j].desc, _DTYPES[dt], shape)
            e.masks[e.n_in + j] = out_dyn[j]
        e.lit_values = [a for a in args if not isinstance(a, torch.Tensor)]
        lit_ids = [self._literal(v) for v in e.lit_values]
        e.lits = (c_int64 * max(1, len(lit_ids)))(*lit_ids)
        c = e.call = GraphCall()
        c.struct_size = ctypes.sizeof(GraphCall)
        c.id = 1
        c.enqueue, c.build = self._enqueue_c, self._build_c
        c.inputs, c.n_inputs = e.ins, e.n_in
        c.outputs, c.n_outputs = e.outs, e.n_out
        c.dynamic = e.masks
        c.literals, c.n_literals = e.lits, len(lit_ids)
        e.views = [None] * e.n_out
        return e

    # --- a miss: PyTorch captures, kpipe keeps the graph -------------------------------
    def _args_on(self, a):
        """fn's arguments with the static buffers in the tensors' places."""
        ins = [_view(a.inputs[i].data, DTYPE_NAMES[a.inputs[i].desc.dtype],
                     [a.inputs[i].desc.shape[d] for d in range(a.inputs[i].desc.ndim)],
                     [a.inputs[i].desc.strides[d] for d in range(a.inputs[i].desc.ndim)],
                     self._dev, self._cache) for i in range(a.n_inputs)]
        outs = [_view(a.outputs[i].data, DTYPE_NAMES[a.outputs[i].desc.dtype],
                      [a.outputs[i].desc.shape[d] for d in range(a.outputs[i].desc.ndim)],
                      [a.outputs[i].desc.strides[d] for d in range(a.outputs[i].desc.ndim)],
                      self._dev, self._cache) for i in range(a.n_outputs)]
        it, lits = iter(ins), iter(self._current.lit_values)
        args = [next(it) if isinstance(x, torch.Tensor) else next(lits) for x in self._args]
        return args, outs

    def _run_into(self, args, outs):
        with torch.no_grad():
            res, _ = _flatten(self.fn(*args))
        if len(res) != len(outs):
            raise Error("KP_ERR_MISMATCH", "fn gave %d outputs, %d before" % (len(res), len(outs)))
        for o, r in zip(outs, res):
            if o.shape != r.shape:
                raise Error("KP_ERR_MISMATCH", "on padded inputs fn gave an output of shape %s "
                            "where %s was expected: outputs must follow the padded dimensions "
                            "one to one (or use exact keys)" % (tuple(r.shape), tuple(o.shape)))
            o.copy_(r)

    def _build(self, user, g, args, state):
        try:
            a = args.contents
            fargs, outs = self._args_on(a)
            cur = torch.cuda.current_stream()
            self._side.wait_stream(cur)
            with torch.cuda.stream(self._side):
                for _ in range(self._warmup if not self._graphs else 0):
                    self._run_into(fargs, outs)  # lazy initialization outside capture
                try:
                    cg = torch.cuda.CUDAGraph(keep_graph=True)
                except TypeError:
                    raise Error("KP_ERR_UNSUPPORTED", "torch %s: graphed() needs "
                                "torch.cuda.CUDAGraph(keep_graph=True) (2.7 or later)"
                                % torch.__version__) from None
                cg.capture_begin(pool=self._pool, capture_error_mode="thread_local")
                try:
                    self._run_into(fargs, outs)
                finally:
                    cg.capture_end()
            cur.wait_stream(self._side)
            node = c_void_p()
            check(lib.kp_graph_add_native(g, None, 0, c_void_p(cg.raw_cuda_graph()),
                                          byref(node)))
            self._graphs.append(cg)
            return 0
        except BaseException as e:  # noqa: B902 - raised again by the call
            self._exc = e
            return set_error("KP_ERR_INVALID_ARG", "capturing %s: %s: %s"
                             % (getattr(self.fn, "__name__", type(self.fn).__name__),
                                type(e).__name__, e))

    def _enqueue(self, user, s, args):
        try:  # the fallback policy: fn on the stream, no graph
            fargs, outs = self._args_on(args.contents)
            self._run_into(fargs, outs)
            return 0
        except BaseException as e:  # noqa: B902
            self._exc = e
            return set_error("KP_ERR_INVALID_ARG", "running %s: %s: %s"
                             % (getattr(self.fn, "__name__", "fn"), type(e).__name__, e))

    # --- a call ------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if kwargs:
            bound = inspect.signature(self.fn.forward if isinstance(self.fn, torch.nn.Module)
                                      else self.fn).bind(*args, **kwargs)
            args = tuple(bound.args)
        key = tuple((a.dtype, a.shape) if isinstance(a, torch.Tensor) else (type(a), a)
                    for a in args)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if self._cache is None:
            if not tensors:
                raise Error("KP_ERR_INVALID_ARG", "a graphed call takes one tensor at least")
            self._setup(tensors[0])
        e = self._entries.get(key)
        if e is None:
            e = self._entries[key] = self._entry(key, args, tensors)
        for i, t in enumerate(tensors):
            if not t.is_contiguous():
                raise Error("KP_ERR_UNSUPPORTED", "argument %d is not contiguous (strides %s): "
                            "pass .contiguous()" % (i, t.stride()))
            e.ins[i].data = t.data_ptr()
        s = self._dev.wrap_stream(torch.cuda.current_stream().cuda_stream)
        self._current, self._args, self._exc = e, args, None
        st = lib.kp_graph_cache_run(self._cache.ptr, byref(e.call), s.ptr)
        self._current = self._args = None
        if st != 0:
            err = Error(st, lib.kp_last_error().decode(errors="replace"))
            exc, self._exc = self._exc, None
            if exc is not None:
                raise err from exc
            raise err
        res = []
        for j in range(e.n_out):
            o, v = e.outs[j], e.views[j]
            if v is None or v.data_ptr() != o.data:
                d = o.desc
                v = e.views[j] = _view(o.data, DTYPE_NAMES[d.dtype],
                                       [d.shape[k] for k in range(d.ndim)],
                                       [d.strides[k] for k in range(d.ndim)], self._dev,
                                       self._cache)
            res.append(v)
        return tuple(res) if e.tuple_out else res[0]

    def stats(self):
        """The cache's counters, with the memory PyTorch's pool reserves."""
        if self._cache is None:
            return {}
        g = GraphStats()
        check(lib.kp_graph_cache_stats(self._cache.ptr, byref(g)))
        d = stats_dict(g)
        d["torch_graphs"] = len(self._graphs)
        return d

    def report(self):
        if self._cache is None:
            return ""
        buf = ctypes.create_string_buffer(1 << 16)
        return lib.kp_graph_cache_report(self._cache.ptr, buf, len(buf)).decode()


def graphed(fn, dynamic=None, policy="capture", capture_sizes=(), max_graphs=64, max_bytes=0,
            warmup=1):
    """`fn` (a function or nn.Module over CUDA tensors) run through kpipe's
    graph cache: a hit is one graph launch on the current stream.

    dynamic: {argument name or index: dimensions} that change per call;
    capture_sizes: padding for those dimensions (ascending; a larger size
    is kept exact); policy: "capture" (a miss captures), "fallback" (a miss
    runs fn eagerly) or "strict" (a miss is an error, KP_ERR_NOT_FOUND);
    max_graphs, max_bytes: LRU bounds on graphs kept and on the bytes of
    the cache's buffers and graphs. Non-tensor arguments are literals: each
    distinct value (compared in full) is its own key.
    """
    return Graphed(fn, dynamic, policy, capture_sizes, max_graphs, max_bytes, warmup)
