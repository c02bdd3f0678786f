"""kpipe.GraphCache: executable graphs kept per call signature (shapes,
dtypes, literals), for work whose shapes change per call."""
import ctypes
from ctypes import byref, c_int, c_int64, c_uint32, c_void_p

from ._core import (Array, Handle, Inflight, Owned, Stream, any_thread, capture_guard,
                    one_thread, take, take_error)
from ._lib import (DTYPE_NAMES, DTYPES, ENQUEUE_FN, GRAPH_MAX_CAPTURE_SIZES, Error,
                   GraphCacheConfig, GraphCall, GraphStats, PortInfo, check, desc_shape,
                   desc_strides, fill_desc, lib, raise_failed, set_error)

_MISS = {"capture": 0, "fallback": 1, "strict": 2}
IN_PLACE = 1


def cache_config(miss=None, max_graphs=None, max_bytes=None, capture_sizes=(), max_variants=None):
    """A kp_graph_cache_config; the library checks the values when it
    makes the cache."""
    c = GraphCacheConfig()
    c.struct_size = ctypes.sizeof(GraphCacheConfig)
    if miss is None:
        miss = "capture"
    if miss not in _MISS:
        v = c_int()
        check(lib.kp_graph_miss_parse(str(miss).encode(), byref(v)))  # names the text
    c.miss = _MISS[miss]
    for name, v in (("max_graphs", max_graphs), ("max_bytes", max_bytes),
                    ("max_variants", max_variants)):
        if v is not None and int(v) < 0:
            raise Error("KP_ERR_INVALID_ARG", "%s = %d: must not be negative" % (name, v))
    c.max_graphs = 64 if max_graphs is None else int(max_graphs)
    c.max_bytes = 0 if max_bytes is None else int(max_bytes)
    sizes = list(capture_sizes or ())
    if len(sizes) > GRAPH_MAX_CAPTURE_SIZES:
        raise Error("KP_ERR_INVALID_ARG", "%d capture sizes; at most %d"
                    % (len(sizes), GRAPH_MAX_CAPTURE_SIZES))
    for i, n in enumerate(sizes):
        c.capture_sizes[i] = int(n)
    c.n_capture_sizes = len(sizes)
    c.max_variants = 0 if max_variants is None else int(max_variants)
    return c


def stats_dict(g):
    return {k: getattr(g, k) for k, _ in GraphStats._fields_}


def masks(dynamic, n_ports):
    """Per-port dynamic-dimension bit masks from {port index: dims} or a list."""
    m = (c_uint32 * max(1, n_ports))()
    if dynamic is None:
        return None
    items = dynamic.items() if isinstance(dynamic, dict) else enumerate(dynamic)
    for port, dims in items:
        if not 0 <= port < n_ports:
            raise Error("KP_ERR_INVALID_ARG", "dynamic: port %d of %d" % (port, n_ports))
        if isinstance(dims, int):
            dims = (dims,)
        for d in dims or ():
            if not 0 <= d < 8:
                raise Error("KP_ERR_INVALID_ARG", "dynamic: dimension %d of port %d" % (d, port))
            m[port] |= 1 << d
    return m


class GraphCache(Owned):
    """A shape-keyed graph cache for Python work.

        c = kpipe.GraphCache("cpu", capture_sizes=[64, 128, 256])
        def work(stream, ins, outs, literals):    # enqueues on stream
            stream.copy(outs[0], ins[0])
        y, = c.run(work, [x], [("f32", x.shape)], dynamic={0: [0], 1: [0]})

    `fn(stream, inputs, outputs, literals)` enqueues work on `stream`
    reading `inputs` and writing `outputs` (kpipe.Arrays of the cache's
    static buffers, padded shapes); it runs on a miss (captured into a
    graph) or, with miss="fallback", directly. Host work goes in with
    stream.host_func(callable). Outputs come back as views sliced to the
    shapes asked for, valid until the next call.

    kpipe captures fn's work on its own stream, unknown to PyTorch: PyTorch
    work inside fn is not supported (its allocator and DLPack import make
    calls a capture forbids, and the capture fails). For PyTorch code use
    kpipe.torch.graphed, which captures through PyTorch itself.

    Threads: a cache belongs to the first thread that calls run() or
    prepare(); another thread's call raises kpipe.Error("KP_ERR_STATE")
    naming both, every time (its outputs are views of static buffers that
    the next call rewrites, so two threads' calls would read each other's
    results even in turn). An output stays valid until the holder's next
    call. release_thread() in the holder hands it to the next caller; a
    holder that has ended lets go by itself. sync(), stats(), report() and
    close() may come from any thread: they wait for a call in progress. fn
    runs on the calling thread, inside the call: calling the same cache
    from it raises.
    """
    _what = "kpipe.GraphCache"

    def __init__(self, device="cpu", miss="capture", max_graphs=64, max_bytes=0,
                 capture_sizes=(), max_variants=0):
        from . import _core
        self._bind_init()
        self.device = _core.device(device)
        self._cfg = cache_config(miss, max_graphs, max_bytes, capture_sizes, max_variants)
        p = c_void_p()
        check(lib.kp_graph_cache_create(self.device.ptr, byref(self._cfg), byref(p)))
        self._inflight = Inflight(self.device)  # inputs not yet copied; the handle holds them
        self._h = Handle(p.value, lib.kp_graph_cache_destroy, self.device._h, self._inflight)
        self._ids = {}
        self._host_keys = []  # host functions captured graphs call
        self._fn = None
        self._exc = None
        self._error = None  # a host function's exception, for the next call
        self._enqueue_c = ENQUEUE_FN(self._enqueue)

    @property
    def ptr(self):
        if not self._h.ptr:
            raise Error("KP_ERR_STATE", "the graph cache is closed")
        return self._h.ptr

    def _arrays(self, ports, n, stream):
        # stream None for the work function's views: read in stream order
        return [Array(ports[i].data, DTYPE_NAMES[ports[i].desc.dtype], desc_shape(ports[i].desc),
                      desc_strides(ports[i].desc), self.device, stream, self._h)
                for i in range(n)]

    def _enqueue(self, user, s, args):
        try:
            a = args.contents
            stream = Stream(self.device, Handle(s, None), sink=self)
            stream._keep = self._host_keys
            ins = self._arrays(a.inputs, a.n_inputs, None)
            outs = self._arrays(a.outputs, a.n_outputs, None)
            lits = tuple(a.literals[i] for i in range(a.n_literals))
            with capture_guard():  # a miss runs it inside kpipe's capture
                self._fn(stream, ins, outs, lits)
            return 0
        except BaseException as e:  # noqa: B902 - raised again by run()
            self._exc = e
            return set_error("KP_ERR_INVALID_ARG", "the work function raised %s: %s"
                             % (type(e).__name__, e))

    def _call(self, fn, inputs, outputs, dynamic, literals, in_place, stream, call_id):
        n_in, n_out = len(inputs), len(outputs)
        call = GraphCall()
        call.struct_size = ctypes.sizeof(GraphCall)
        if call_id is None:
            call_id = self._ids.setdefault(fn, len(self._ids) + 1)
        call.id = call_id
        call.enqueue = self._enqueue_c
        ins = (PortInfo * max(1, n_in))()
        outs = (PortInfo * max(1, n_out))()
        held = []
        for i, x in enumerate(inputs):
            if x is None:
                raise Error("KP_ERR_INVALID_ARG", "input %d is None" % i)
            t = take(x, self.device, stream, "input %d" % i)
            held.append(t)
            ins[i].data = t.ptr
            fill_desc(ins[i].desc, t.dtype, t.shape, t.strides)
        for i, o in enumerate(outputs):
            try:
                dt, shape = o
            except (TypeError, ValueError):
                raise Error("KP_ERR_INVALID_ARG", "output %d: give (dtype, shape)" % i) from None
            if dt not in DTYPES:
                raise Error("KP_ERR_INVALID_ARG", "output %d: dtype %r; kpipe has %s"
                            % (i, dt, ", ".join(DTYPES)))
            fill_desc(outs[i].desc, dt, shape)
        call.inputs, call.n_inputs = ins, n_in
        call.outputs, call.n_outputs = outs, n_out
        m = masks(dynamic, n_in + n_out)
        if m is not None:
            call.dynamic = m
        lits = (c_int64 * max(1, len(literals)))(*[int(v) for v in literals])
        call.literals, call.n_literals = lits, len(literals)
        call.flags = IN_PLACE if in_place else 0
        return call, (ins, outs, m, lits, held)

    @one_thread
    def run(self, fn, inputs, outputs, dynamic=None, literals=(), stream=None, in_place=False,
            call_id=None):
        """One call: a graph launch on a hit; on a miss, the policy's way."""
        s = self.device.as_stream(stream)
        call, keep = self._call(fn, inputs, outputs, dynamic, literals, in_place, s, call_id)
        self._fn, self._exc = fn, None
        st = lib.kp_graph_cache_run(self.ptr, byref(call), s.ptr)
        self._fn = None
        self._raise(st)
        # the inputs are copied into static buffers or (in place) read by
        # the launch: held until that is done
        self._inflight.add(s, keep)
        return self._arrays(call.outputs, call.n_outputs, s)

    @one_thread
    def prepare(self, fn, calls, stream=None):
        """Makes the graphs of several calls (each a dict of run()'s
        arguments: inputs, outputs, dynamic, literals) ahead of time."""
        s = self.device.as_stream(stream)
        built = [self._call(fn, c.get("inputs", ()), c.get("outputs", ()), c.get("dynamic"),
                            c.get("literals", ()), c.get("in_place", False), s, c.get("call_id"))
                 for c in calls]
        arr = (GraphCall * max(1, len(built)))(*[b[0] for b in built])
        self._fn, self._exc = fn, None
        st = lib.kp_graph_cache_prepare(self.ptr, arr, len(built), s.ptr)
        self._fn = None
        self._raise(st)

    def _raise(self, st):
        err = take_error(self)
        if err is not None and st == 0:
            raise Error("KP_ERR_INVALID_ARG", "a host function raised %s: %s"
                        % (type(err).__name__, err)) from err
        if st != 0:
            exc, self._exc = self._exc, None
            raise_failed(st, exc)

    @any_thread
    def sync(self, stream=None):
        """Waits for the calls' work; raises a host function's exception
        (any thread)."""
        self._inflight.retire(wait=True)
        self.device.as_stream(stream).sync()
        self._raise(0)

    @any_thread
    def stats(self):
        """The counters, as a dict (any thread)."""
        g = GraphStats()
        check(lib.kp_graph_cache_stats(self.ptr, byref(g)))
        return stats_dict(g)

    @any_thread
    def report(self):
        """The text report (any thread)."""
        buf = ctypes.create_string_buffer(1 << 16)
        return lib.kp_graph_cache_report(self.ptr, buf, len(buf)).decode()
