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

Threads: a graphed callable belongs to the first thread that calls it
(its outputs are views the next call rewrites, and its replays share one
memory pool); another thread's call raises kpipe.Error("KP_ERR_STATE")
naming both, every time. Make one per thread, or hand it over with
release_thread() from the holder once its outputs were read.

Padding (capture_sizes) runs `fn` on inputs padded along their dynamic
dimensions and slices the outputs: right only where the outputs at real
positions do not depend on padded ones (per-token layers, causal
attention). Without capture_sizes every length is its own key.
"""
import ctypes
import inspect
import threading
from bisect import bisect_left
from ctypes import byref, c_int64, c_uint32, c_void_p

import torch

from . import _dlpack
from ._core import Array, Bound, Handle, _deferred, any_thread, capture_guard, device as _device
from ._lib import (BUILD_FN, DTYPE_NAMES, ENQUEUE_FN, Error, GraphCall, GraphStats, PortInfo,
                   check, fill_desc, lib, raise_failed, set_error)
from .graph_cache import cache_config, stats_dict

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
           torch.int64: "i64"}
_TORCH = {v: k for k, v in _DTYPES.items()}
_POLICIES = ("capture", "fallback", "strict")


# kp_graph_cache_run for the hit path: its own function object without
# argtypes (ctypes' conversion of three declared arguments costs 0.15 us a
# call); every caller passes c_void_p objects and a byref, which go through
# as pointers untouched. lib's own (checked) stays for everything else.
_run = lib["kp_graph_cache_run"]
_run.restype = ctypes.c_int
# the most lengths of one dynamic dimension a prepare lays out ahead
# (Graphed._lay_out): each costs a few microseconds then, and a few
# hundred bytes kept
_LAY_OUT_MAX = 4096
_ident = threading.get_ident
_Tensor = torch.Tensor
# the current stream's raw handle without making a torch.cuda.Stream object
_raw_stream = _dlpack.torch_raw_stream(torch)


def _flatten(res):
    if isinstance(res, torch.Tensor):
        return [res], False
    if isinstance(res, (tuple, list)) and all(isinstance(r, torch.Tensor) for r in res):
        return list(res), True
    raise Error("KP_ERR_UNSUPPORTED", "a graphed function returns a tensor or a tuple of "
                "tensors, not a %s" % type(res).__name__)


def _out_sig(w):
    """Where an entry's outputs are and how they are laid out, read from its
    out_watch after a run or a prepare: each output's pointer and leading
    stride (a fallback run lays them out at the exact shape, a graph at the
    padded one: the leading stride tells them apart)."""
    if len(w) == 1:
        port, strides = w[0]
        return port.data, strides[0]
    return tuple([(port.data, strides[0]) for port, strides in w])


def _hold(x):
    """x's shapes back in its entry's descriptors (inputs and outputs, one
    ctypes buffer): one byte copy, through a memoryview of the buffer (a
    slice write is 0.1 us; ctypes.memmove, a foreign call, 0.5)."""
    e = x.entry
    e.bytes_view[:] = x.ports
    e.current = x


def _set_shape(desc, shape):
    """desc's shape, and its strides for that shape, row-major: two slice
    writes (a ctypes write per element costs as much as the rest)."""
    n = len(shape)
    strides, acc = [0] * n, 1
    for i in range(n - 1, -1, -1):
        strides[i] = acc
        acc *= shape[i]
    desc.shape[:n] = shape
    desc.strides[:n] = strides


def _writes(desc, dims):
    """What _exact writes into a descriptor whose dynamic dimensions are
    dims: (desc, its shape and strides arrays, d, mults), mults the (i, m)
    for each i < d, stride i being m times dimension d's size. d is None
    where there are several (the whole shape is written then)."""
    if len(set(dims)) != 1:
        return desc, desc.shape, desc.strides, None, ()
    d, shape, mults = dims[0], desc.shape[:desc.ndim], []
    for i in range(d):
        m = 1
        for k in range(i + 1, len(shape)):
            if k != d:
                m *= shape[k]
        mults.append((i, m))
    return desc, desc.shape, desc.strides, d, tuple(mults)


def _view(ptr, dtype, shape, strides, dev, owner):
    """A torch tensor over kpipe memory (kept alive by the tensor)."""
    return torch.from_dlpack(Array(ptr, dtype, shape, strides, dev, None, owner))


class _Entry:
    """One padded call signature: its prepared call (ctypes structures the
    library reads) and what the outputs are. Every exact signature inside
    it (_Exact) shares it and writes its own shapes into the descriptors
    when it is not the one they hold (current)."""
    __slots__ = ("call", "ref", "ins", "outs", "masks", "lits", "lit_values", "tuple_out",
                 "n_in", "n_out", "positions", "n_args", "in_dyn", "follows", "padded_numel",
                 "in_ports", "out_watch", "current", "ports", "bytes_view", "in_descs",
                 "out_descs", "out_base", "in_set", "out_set", "out_pstrides", "out_dtypes")


class _Exact:
    """One exact call signature: its entry, the descriptors' bytes at its
    shapes (copied in with one memmove when another length held them), and
    what a call returns (views of the static outputs), with the outputs'
    pointers and leading strides they were made for."""
    __slots__ = ("entry", "ports", "out_shapes", "result", "sig")


class Graphed(Bound):
    """What graphed() returns: call it as `fn`; stats() and report() tell
    how the cache did. It serves one thread (kpipe._core.Bound): the first
    that calls it; release_thread() hands it over; stats() and report()
    come from any thread."""
    _what = "kpipe.torch.graphed"

    def __init__(self, fn, dynamic=None, policy="capture", capture_sizes=(), max_graphs=64,
                 max_bytes=0, warmup=1, prepare=True):
        self._bind_init()
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
        self._dyn_items = tuple(self._dynamic.items())
        one = [(i, d) for i, dims in self._dyn_items for d in dims]
        self._one_dyn = one[0] if len(one) == 1 else None  # (argument, dimension)
        self._warmup = warmup
        self._auto_prepare = prepare and policy != "fallback"
        self._exacts = {}    # exact signature -> _Exact (its entry, its shapes, its views)
        self._meta = {}      # structure -> what fn gives (a probe on zeros, once)
        self._by_padded = {}  # padded signature -> _Entry (the prepared call)
        self._flat = {}      # (buffer, dtype) -> a flat view of an output buffer
        self._cover = {}     # (port, dtype) -> elements its buffer holds (prepared sizes)
        self._sizes = tuple(self._cfg.capture_sizes[i] for i in range(self._cfg.n_capture_sizes))
        self._streams = {}   # raw stream handle -> kpipe stream pointer (c_void_p)
        self._by_uid = []    # entries by call.user - 1
        self._prepared = False
        self._literal_ids = {}
        self._graphs = []  # PyTorch's graphs: they hold the pool the kept graphs use
        self._pool = None
        self._side = None
        self._cache = None
        self._dev = None
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
        self._cache_ptr = p.value
        self._cache_cp = c_void_p(p.value)  # ctypes takes it as it is, on every call
        self._index = t.device.index
        self._pool = torch.cuda.graph_pool_handle()
        self._side = torch.cuda.Stream(t.device)

    def _literal(self, v):
        try:
            return self._literal_ids.setdefault((type(v), v), len(self._literal_ids) + 1)
        except TypeError:
            raise Error("KP_ERR_INVALID_ARG", "a %s argument is neither a tensor nor hashable: "
                        "it cannot be part of the key" % type(v).__name__) from None

    def _padded(self, key):
        """The exact key with the dynamic dimensions padded, as the cache
        pads them (the smallest capture size that holds a dimension, else
        the dimension itself). On the path of every new length: it reads
        the key's shapes, a bisection per dimension."""
        sizes, out = self._sizes, list(key)
        for i, dims in self._dyn_items:
            if i >= len(out) or not isinstance(out[i][0], torch.dtype):
                continue  # past the arguments, or a literal
            dt, shape = out[i]
            shape = list(shape)
            for d in dims:
                if 0 <= d < len(shape):
                    j = bisect_left(sizes, shape[d])
                    if j < len(sizes):
                        shape[d] = sizes[j]
            out[i] = (dt, tuple(shape))
        return tuple(out)

    def _structure(self, args):
        """The key without the dynamic dimensions' sizes (None there): calls
        that differ only there share one probe of fn's outputs."""
        out = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                shape = list(a.shape)
                for d in self._dynamic.get(i, ()):
                    if 0 <= d < len(shape):
                        shape[d] = None
                out.append((a.dtype, tuple(shape)))
            else:
                out.append((type(a), a))
        return tuple(out)

    def _out_meta(self, args, padded):
        """What fn gives: per output its dtype, shape, and for each dimension
        that follows a dynamic input one, that input's (tensor index,
        dimension). fn runs eagerly on zeros (valid indices as well as
        values), once with every dynamic dimension at the smallest capture
        size (the key's own where there are none) and once with dynamic
        dimension j grown by j + 1: an output dimension grown by j + 1
        follows it, the others are fixed. Once per structure (_structure),
        at small sizes: these runs are also the warm-up before the first
        capture (lazy initialization outside it), and they hold little
        memory. A capture checks that its outputs have the shapes derived
        from the probe."""
        dyn = [(i, d) for i, a in enumerate(args) if isinstance(a, torch.Tensor)
               for d in self._dynamic.get(i, ()) if 0 <= d < a.dim()]
        low = min(self._sizes) if self._sizes else None
        probe = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                shape = list(padded[i][1])
                for di, d in dyn:
                    if di == i and low is not None:
                        shape[d] = low
                probe.append(shape)
            else:
                probe.append(None)

        def run(grow, times):
            ex = []
            for i, a in enumerate(args):
                if isinstance(a, torch.Tensor):
                    shape = list(probe[i])
                    for j, (di, d) in enumerate(dyn):
                        if grow and di == i:
                            shape[d] += j + 1
                    ex.append(torch.zeros(shape, dtype=a.dtype, device=a.device))
                else:
                    ex.append(a)
            with torch.no_grad():
                for _ in range(times):
                    res, tup = _flatten(self.fn(*ex))
            return [(r.dtype, tuple(r.shape)) for r in res], tup
        try:
            base, tup = run(False, max(1, self._warmup))
            grown, _ = run(True, 1) if dyn else (base, tup)
        except Error:
            raise
        except Exception as e:
            raise Error("KP_ERR_INVALID_ARG", "%s on zero tensors of shapes %s: %s: %s" % (
                getattr(self.fn, "__name__", type(self.fn).__name__),
                [tuple(p) for p in probe if p is not None], type(e).__name__, e)) from e
        tensor_index = {i: k for k, i in enumerate(i for i, a in enumerate(args)
                                                   if isinstance(a, torch.Tensor))}
        meta = []
        for j, ((dt, shape), (_, g)) in enumerate(zip(base, grown)):
            follows = {}
            for d in range(min(len(shape), len(g))):
                if shape[d] != g[d]:
                    step = g[d] - shape[d]
                    if not 1 <= step <= len(dyn) or shape[d] != probe[dyn[step - 1][0]][
                            dyn[step - 1][1]]:
                        raise Error("KP_ERR_UNSUPPORTED", "output %d dimension %d changes with "
                                    "the dynamic inputs but not one to one: pass exact keys "
                                    "(no capture_sizes) or make it follow one input" % (j, d))
                    i, di = dyn[step - 1]
                    follows[d] = (tensor_index[i], di)
            meta.append((dt, shape, follows))
        return meta, tup

    def _entry(self, args, tensors, padded):
        form = self._structure(args)
        got = self._meta.get(form)
        if got is None:
            got = self._meta[form] = self._out_meta(args, padded)
        outs, tuple_out = got
        e = _Entry()
        e.tuple_out = tuple_out
        e.n_in, e.n_out = len(tensors), len(outs)
        if e.n_in + e.n_out > 16:
            raise Error("KP_ERR_INVALID_ARG", "%d tensors in and out; at most 16"
                        % (e.n_in + e.n_out))
        # inputs then outputs in one buffer: a length's shapes go back with
        # one byte copy (_hold)
        n_in, n_out = max(1, e.n_in), max(1, e.n_out)
        e.ports = (PortInfo * (n_in + n_out))()
        e.ins = (PortInfo * n_in).from_buffer(e.ports)
        e.outs = (PortInfo * n_out).from_buffer(e.ports, n_in * ctypes.sizeof(PortInfo))
        e.masks = (c_uint32 * (e.n_in + e.n_out + 1))()
        e.positions = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
        for k, i in enumerate(e.positions):
            a = args[i]
            if a.dtype not in _DTYPES:
                raise Error("KP_ERR_UNSUPPORTED", "argument %d is %s; kpipe takes %s"
                            % (i, a.dtype, ", ".join(str(d) for d in _DTYPES)))
            fill_desc(e.ins[k].desc, _DTYPES[a.dtype], tuple(a.shape))
            for d in self._dynamic.get(i, ()):
                if not 0 <= d < a.dim():
                    raise Error("KP_ERR_INVALID_ARG", "dynamic: dimension %d of argument %d, "
                                "which has %d" % (d, i, a.dim()))
                e.masks[k] |= 1 << d
        e.in_dyn = tuple((k, tuple(self._dynamic[i])) for k, i in enumerate(e.positions)
                         if self._dynamic.get(i))
        e.follows, e.padded_numel, e.out_pstrides = [], [], []
        for j, (dt, shape, follows) in enumerate(outs):
            if dt not in _DTYPES:
                raise Error("KP_ERR_UNSUPPORTED", "output %d is %s" % (j, dt))
            exact, full = list(shape), list(shape)
            for d, (k, di) in follows.items():
                exact[d] = tensors[k].shape[di]
                full[d] = padded[e.positions[k]][1][di]
                e.masks[e.n_in + j] |= 1 << d
                e.follows.append((j, d, k, di))
            fill_desc(e.outs[j].desc, _DTYPES[dt], exact)
            strides, n = [0] * len(full), 1
            for i in range(len(full) - 1, -1, -1):
                strides[i] = n
                n *= full[i]
            e.padded_numel.append(n)
            e.out_pstrides.append(tuple(strides))
        e.lit_values = [a for a in args if not isinstance(a, torch.Tensor)]
        lit_ids = [self._literal(v) for v in e.lit_values]
        e.lits = (c_int64 * max(1, len(lit_ids)))(*lit_ids)
        e.n_args = len(args)
        self._by_padded[padded] = e
        return self._bind_call(e)

    def _exact(self, e, key):
        """A new exact signature (key) inside entry e: e's descriptors with
        the dynamic dimensions set to the key's (a call of a new length, as
        on a growing trace, costs these few writes and two byte copies, not
        a new probe, validation or ctypes structures). A descriptor with one
        dynamic dimension d takes two writes or so: dimension d, and the
        strides outside it (the others do not change inside an entry)."""
        for pos, desc, sh, st, d, mults in e.in_set:
            shape = key[pos][1]
            if d is None:
                _set_shape(desc, shape)
                continue
            n = shape[d]
            sh[d] = n
            for i, m in mults:
                st[i] = m * n
        shapes = list(e.out_base)
        for j, desc, sh, st, d, pos, di, mults, follows in e.out_set:
            base = e.out_base[j]
            if d is None:
                shape = list(base)
                for dd, k, ddi in follows:
                    shape[dd] = key[e.positions[k]][1][ddi]
                _set_shape(desc, shape)
                shapes[j] = tuple(shape)
                continue
            n = key[pos][1][di]
            sh[d] = n
            for i, m in mults:
                st[i] = m * n
            shapes[j] = base[:d] + (n,) + base[d + 1:]
        x = _Exact()
        x.entry, x.ports, x.result, x.sig = e, bytes(e.ports), None, None
        x.out_shapes = tuple(shapes)
        e.current = x
        return x

    def _bind_call(self, e):
        c = e.call = GraphCall()
        c.struct_size = ctypes.sizeof(GraphCall)
        c.id = 1
        c.enqueue, c.build = self._enqueue_c, self._build_c
        self._by_uid.append(e)
        c.user = len(self._by_uid)  # the callbacks find the entry by it
        c.inputs, c.n_inputs = e.ins, e.n_in
        c.outputs, c.n_outputs = e.outs, e.n_out
        c.dynamic = e.masks
        c.literals, c.n_literals = e.lits, len(e.lit_values)
        e.ref = byref(c)
        # the ports' ctypes views, made once: indexing a ctypes array makes
        # a new object each time, on the path of every hit
        e.in_ports = tuple(zip(e.positions, (e.ins[k] for k in range(e.n_in))))
        e.in_descs = tuple(e.ins[k].desc for k in range(e.n_in))
        e.out_descs = tuple(e.outs[j].desc for j in range(e.n_out))
        e.out_base = tuple(tuple(d.shape[:d.ndim]) for d in e.out_descs)
        e.out_dtypes = tuple(d.dtype for d in e.out_descs)
        follow = {}
        for j, d, k, di in e.follows:
            follow.setdefault(j, []).append((d, k, di))
        e.in_set = tuple((e.positions[k],) + _writes(e.in_descs[k], dims)
                         for k, dims in e.in_dyn)
        out_set = []
        for j, f in follow.items():
            desc, sh, st, d, mults = _writes(e.out_descs[j], [dd for dd, _, _ in f])
            one = d is not None and len(f) == 1
            out_set.append((j, desc, sh, st, d if one else None,
                            e.positions[f[0][1]] if one else None, f[0][2], mults, tuple(f)))
        e.out_set = tuple(out_set)
        e.out_watch = tuple((e.outs[j], e.outs[j].desc.strides) for j in range(e.n_out))
        e.bytes_view = memoryview(e.ports).cast("B")
        e.current = None
        return e

    # --- a miss: PyTorch captures, kpipe keeps the graph -------------------------------
    def _args_on(self, user, a):
        """fn's arguments with the static buffers in the tensors' places."""
        e = self._by_uid[user - 1]
        ins = [_view(a.inputs[i].data, DTYPE_NAMES[a.inputs[i].desc.dtype],
                     [a.inputs[i].desc.shape[d] for d in range(a.inputs[i].desc.ndim)],
                     [a.inputs[i].desc.strides[d] for d in range(a.inputs[i].desc.ndim)],
                     self._dev, self._cache) for i in range(a.n_inputs)]
        outs = [_view(a.outputs[i].data, DTYPE_NAMES[a.outputs[i].desc.dtype],
                      [a.outputs[i].desc.shape[d] for d in range(a.outputs[i].desc.ndim)],
                      [a.outputs[i].desc.strides[d] for d in range(a.outputs[i].desc.ndim)],
                      self._dev, self._cache) for i in range(a.n_outputs)]
        args, lits = [None] * e.n_args, iter(e.lit_values)
        for k, i in enumerate(e.positions):
            args[i] = ins[k]
        for i in range(e.n_args):
            if i not in e.positions:
                args[i] = next(lits)
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
            fargs, outs = self._args_on(user, args.contents)
            cur = torch.cuda.current_stream()
            self._side.wait_stream(cur)
            with torch.cuda.stream(self._side):
                # no eager warm-up here: the probe (_out_meta) ran fn at a
                # small size already, and a warm-up at this size, the
                # largest when prepared, would leave its activations cached
                # in PyTorch's default pool beside the graphs' own
                try:
                    cg = torch.cuda.CUDAGraph(keep_graph=True)
                except TypeError:
                    raise Error("KP_ERR_UNSUPPORTED", "torch %s: graphed() needs "
                                "torch.cuda.CUDAGraph(keep_graph=True) (2.7 or later)"
                                % torch.__version__) from None
                with capture_guard():  # no frees inside the capture
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
            fargs, outs = self._args_on(user, args.contents)
            self._run_into(fargs, outs)
            return 0
        except BaseException as e:  # noqa: B902
            self._exc = e
            return set_error("KP_ERR_INVALID_ARG", "running %s: %s: %s"
                             % (getattr(self.fn, "__name__", "fn"), type(e).__name__, e))

    # --- a call ------------------------------------------------------------------------
    def _label(self):
        return "kpipe.torch.graphed(%s)" % getattr(self.fn, "__name__", type(self.fn).__name__)

    def __call__(self, *args, **kwargs):
        # Bound._enter and _leave, inlined for the holder's call when nothing
        # waits to be freed and no other thread is inside (a hit costs
        # microseconds; two method calls are a tenth of them)
        me = _ident()
        if self._holder_id != me or self._inside is not None or _deferred:
            self._enter()
        else:
            self._lock.acquire()
            self._inside = me
        try:
            if kwargs:
                args = self._bind_args(args, kwargs)
            a = args[0] if len(args) == 1 else None
            if type(a) is _Tensor:  # one tensor: its key without a comprehension (0.13 us)
                key = ((a.dtype, a.shape),)
            else:
                key = tuple([(a.dtype, a.shape) if isinstance(a, _Tensor) else (type(a), a)
                             for a in args])
            x = self._exacts.get(key)
            if x is None:
                x = self._new_exact(args, key)
            e = x.entry
            if e.current is not x:  # another length's shapes are in the descriptors:
                e.bytes_view[:] = x.ports  # _hold, inlined
                e.current = x
            for i, port in e.in_ports:
                t = args[i]
                if not t.is_contiguous():
                    raise Error("KP_ERR_UNSUPPORTED", "argument %d is not contiguous (strides "
                                "%s): pass .contiguous()" % (i, t.stride()))
                port.data = t.data_ptr()
            raw = _raw_stream(self._index)
            s = self._streams.get(raw)
            if s is None:
                s = self._streams[raw] = c_void_p(self._dev.wrap_stream(raw).ptr)
            st = _run(self._cache_cp, e.ref, s)
            if st != 0:
                exc, self._exc = self._exc, None
                raise_failed(st, exc)
            # the views stand while the static outputs stay where they were
            # and laid out as they were: _out_sig, inlined (the call costs a
            # hit 0.1 us, measured)
            w = e.out_watch
            if len(w) == 1:
                port, strides = w[0]
                sig = (port.data, strides[0])
            else:
                sig = tuple([(port.data, strides[0]) for port, strides in w])
            if sig != x.sig:
                self._views(e, x, sig)
            return x.result
        finally:
            self._inside = None
            self._lock.release()

    def _bind_args(self, args, kwargs):
        return tuple(inspect.signature(self.fn.forward if isinstance(self.fn, torch.nn.Module)
                                       else self.fn).bind(*args, **kwargs).args)

    def _new_exact(self, args, key):
        """The first call of an exact signature. Inside a padded size seen
        before (a growing trace's every call): its descriptors only, the
        call's checks being the hit's. Else: the checks, the first call's
        preparation, the cache and the padded entry where needed."""
        if self._cache is not None and (self._prepared or not self._auto_prepare or
                                        not self._sizes):
            e = self._by_padded.get(self._padded(key))
            if e is not None:
                x = self._exacts[key] = self._exact(e, key)
                return x
        for i, a in enumerate(args):
            if isinstance(a, _Tensor) and not a.is_contiguous():
                raise Error("KP_ERR_UNSUPPORTED", "argument %d is not contiguous (strides "
                            "%s): pass .contiguous()" % (i, a.stride()))
        if self._auto_prepare and not self._prepared and self._sizes:
            self._prepare(args, {})
            x = self._exacts.get(key)
            if x is not None:
                return x
        tensors = [a for a in args if isinstance(a, _Tensor)]
        if self._cache is None:
            if not tensors:
                raise Error("KP_ERR_INVALID_ARG", "a graphed call takes one tensor at least")
            self._setup(tensors[0])
        padded = self._padded(key)
        e = self._by_padded.get(padded)
        if e is None:
            e = self._entry(args, tensors, padded)
        x = self._exacts[key] = self._exact(e, key)
        return x

    def _views(self, e, x, sig):
        """x's results: views of e's static outputs where sig (what the
        call reads from e.out_watch after a run) says they are."""
        views = []
        for j, (port, strides) in enumerate(e.out_watch):
            data, s0 = sig if len(e.out_watch) == 1 else sig[j]
            # a graph's layout is the padded shape's; a fallback run's the
            # exact one's, read from the descriptor (rare)
            shape, st = x.out_shapes[j], e.out_pstrides[j]
            if st and s0 != st[0]:
                st = tuple(strides[:len(shape)])
            views.append(self._out_view(e.n_in + j, data, e.out_dtypes[j], e.padded_numel[j],
                                        shape, st))
        x.result = tuple(views) if e.tuple_out else views[0]
        x.sig = sig

    def _lay_out(self, args, sigs):
        """After a prepare: every length of the one dynamic dimension inside
        the capture sizes gets its exact signature and its result views now
        (_exact, _views), so that a call of a new length costs what a hit
        on another length of its padded size does (one byte copy, _hold).
        sigs: each entry's outputs as the prepare set them. Up to
        _LAY_OUT_MAX lengths; past that, or with several dynamic
        dimensions, they are made at their first call."""
        if self._one_dyn is None or not self._sizes or self._sizes[-1] > _LAY_OUT_MAX:
            return
        i, d = self._one_dyn
        a = args[i] if i < len(args) else None
        if not isinstance(a, torch.Tensor) or not 0 <= d < a.dim():
            return
        base = [(t.dtype, t.shape) if isinstance(t, torch.Tensor) else (type(t), t) for t in args]
        shape = list(a.shape)
        for n in range(1, self._sizes[-1] + 1):
            shape[d] = n
            base[i] = (a.dtype, tuple(shape))
            key = tuple(base)
            x = self._exacts.get(key)
            if x is not None and x.sig is not None:
                continue
            e = self._by_padded.get(self._padded(key))
            sig = sigs.get(id(e))
            if sig is None:
                continue
            if x is None:  # (the capture sizes' own came with the prepare, without views)
                x = self._exacts[key] = self._exact(e, key)
            self._views(e, x, sig)

    def _out_view(self, port, p, dtype, numel, shape, strides):
        """A torch view of the output buffer of port `port`, at p, of that
        shape and those strides (in elements of dtype): as_strided over one
        flat view of the buffer, made once per buffer (DLPack import is the
        slow part of a first call).
        The flat view covers the output at its padded shape (numel), which
        holds what the graph writes and an exact-shape fallback run's
        output, or all the prepared sizes did, whichever is more: a trace
        that grows through the sizes imports the buffer once."""
        flat = self._flat.get((p, dtype))
        if flat is None or flat.numel() < numel:
            size = max(numel, self._cover.get((port, dtype), 0), 1)
            flat = _view(p, DTYPE_NAMES[dtype], [size], [1], self._dev, self._cache)
            self._flat[(p, dtype)] = flat
        return flat.as_strided(shape, strides)

    def prepare(self, *args, **kwargs):
        """Captures every capture size ahead, from example arguments (their
        dynamic dimensions set to each size), largest first, so the static
        buffers grow once and a trace inside the sizes captures nothing
        more; with one dynamic dimension, every length up to the largest
        size is laid out too (_lay_out), so a new length costs a hit. The
        first call does it when capture_sizes were given (and prepare was
        not turned off)."""
        self._enter()
        try:
            self._prepare(args, kwargs)
        finally:
            self._leave()

    def _prepare(self, args, kwargs):
        if kwargs:
            args = self._bind_args(args, kwargs)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors:
            raise Error("KP_ERR_INVALID_ARG", "prepare takes the call's arguments")
        if self._cache is None:
            self._setup(tensors[0])
        self._prepared = True
        entries = []
        for c in sorted(self._sizes, reverse=True):
            # each size's arguments carry a shape, a dtype and a device: one
            # element expanded, no memory (tensors of the sizes' own would
            # take the largest one's bytes, 8 MiB and a 20 MiB segment of
            # PyTorch's pool for the bench's block, which the pool then
            # keeps); the library reads no input on a prepare
            ex = []
            for i, a in enumerate(args):
                if isinstance(a, torch.Tensor):
                    shape = list(a.shape)
                    for d in self._dynamic.get(i, ()):
                        shape[d] = c
                    ex.append(a.new_zeros(()).expand(shape))
                else:
                    ex.append(a)
            key = tuple((a.dtype, a.shape) if isinstance(a, torch.Tensor) else (type(a), a)
                        for a in ex)
            x = self._exacts.get(key)
            tensors = [a for a in ex if isinstance(a, torch.Tensor)]
            if x is None:
                padded = self._padded(key)
                e = self._by_padded.get(padded) or self._entry(ex, tensors, padded)
                x = self._exacts[key] = self._exact(e, key)
            elif x.entry.current is not x:
                _hold(x)
            entries.append(x.entry)
        if not entries:
            return
        calls = (GraphCall * len(entries))(*[e.call for e in entries])
        for c in calls:
            for k in range(c.n_inputs):
                c.inputs[k].data = None
        s = self._dev.wrap_stream(_raw_stream(self._index))
        st = lib.kp_graph_cache_prepare(self._cache_ptr, calls, len(entries), s.ptr)
        if st != 0:
            exc, self._exc = self._exc, None
            raise_failed(st, exc)
        # the buffers now hold every prepared size's outputs, and each
        # entry's outputs say where (kp_graph_cache_prepare sets them)
        sigs = {}
        for e in entries:
            for j, (port, _) in enumerate(e.out_watch):
                k = (e.n_in + j, port.desc.dtype)
                self._cover[k] = max(self._cover.get(k, 0), e.padded_numel[j])
            sigs[id(e)] = _out_sig(e.out_watch)
        self._lay_out(args, sigs)

    @any_thread
    def stats(self):
        """The cache's counters, with the memory PyTorch's pool reserves."""
        if self._cache is None:
            return {}
        g = GraphStats()
        check(lib.kp_graph_cache_stats(self._cache.ptr, byref(g)))
        d = stats_dict(g)
        d["torch_graphs"] = len(self._graphs)
        return d

    @any_thread
    def report(self):
        if self._cache is None:
            return ""
        buf = ctypes.create_string_buffer(1 << 16)
        return lib.kp_graph_cache_report(self._cache.ptr, buf, len(buf)).decode()


def graphed(fn, dynamic=None, policy="capture", capture_sizes=(), max_graphs=64, max_bytes=0,
            warmup=1, prepare=True):
    """`fn` (a function or nn.Module over CUDA tensors) run through kpipe's
    graph cache: a hit is one graph launch on the current stream.

    dynamic: {argument name or index: dimensions} that change per call;
    capture_sizes: padding for those dimensions (ascending; a larger size
    is kept exact); policy: "capture" (a miss captures), "fallback" (a miss
    runs fn eagerly) or "strict" (a miss is an error, KP_ERR_NOT_FOUND);
    max_graphs, max_bytes: LRU bounds on graphs kept and on the bytes of
    the cache's buffers and graphs. warmup: eager runs of fn before its
    first capture (one at least: they also tell the output shapes), on
    zeros at the smallest capture size, so fn must accept zeros there (a
    function with state, as a module in training mode, sees them).
    Non-tensor arguments are literals: each
    distinct value (compared in full) is its own key. prepare: the first
    call captures every capture size, largest first (Graphed.prepare), so
    the static buffers grow once and later calls inside the sizes are hits.
    """
    return Graphed(fn, dynamic, policy, capture_sizes, max_graphs, max_bytes, warmup, prepare)
