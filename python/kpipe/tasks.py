"""kpipe.Tasks: data-flow tasks over tensor regions, their dependencies
found from the regions, run on a stream pool or as one graph."""
import ctypes
from ctypes import byref, c_size_t, c_uint32, c_uint64, c_void_p

from ._core import (Array, Handle, Inflight, Owned, Stream, any_thread, one_thread, take,
                    take_error)
from ._lib import (DTYPE_NAMES, DTYPES, TASK_FN, Error, TaskArg, TaskEdge, TaskKernel, TasksStats,
                   check, desc_shape, desc_strides, fill_desc, lib, raise_failed, set_error)

_ACCESS = {"in": 1, "out": 2, "inout": 3}
_HAZARDS = {1: "raw", 2: "war", 3: "waw"}


class Tensor:
    """A tasks buffer seen as a tensor: made by Tasks.tensor() (memory from
    its first writer) or Tasks.wrap() (the caller's memory, kept alive)."""
    __slots__ = ("buffer", "dtype", "shape", "strides", "_keep")

    def __init__(self, buffer, dtype, shape, strides, keep=None):
        self.buffer, self.dtype, self.shape, self.strides = buffer, dtype, shape, strides
        self._keep = keep


def _contiguous(shape):
    acc, s = 1, []
    for n in reversed(shape):
        s.append(acc)
        acc *= n
    return tuple(reversed(s))


class Tasks(Owned):
    """Tasks whose bodies are Python callables that enqueue on a stream.

        t = kpipe.Tasks("cpu", streams=2)
        a = t.tensor("f32", (1024,))
        b = t.wrap(numpy_array)                  # the caller's memory
        def fill(stream, views): stream.host_func(lambda: ...)
        t.submit(fill, ("out", a))               # (access, tensor, offsets, shape, strides)
        t.submit(work, ("in", a, (0,), (512,)), ("inout", b))
        t.run(); t.sync(); t.write_dot("tasks.dot")

    A region is (access, tensor[, offsets[, shape[, strides]]]): offsets
    per dimension from the tensor's start, the region's shape (default:
    the rest of the tensor) and strides in elements (default: the
    tensor's). A bytes object is a scalar argument. fn(stream, views) gets
    a kpipe.Array per region (bytes per scalar).

    Threads: a task set belongs to the first thread that builds or runs it
    (tensor, wrap, submit, run, instantiate, launch, data): program order
    decides what each task reads, and two threads' submits have none.
    Another thread's such call raises kpipe.Error("KP_ERR_STATE") naming
    both, every time; release_thread() in the holder hands the set to the
    next caller, and a holder that has ended lets go by itself. sync(),
    edges(), stats(), write_dot() and close() may come from any thread:
    they wait for a call in progress. Task functions run on the calling
    thread, inside run() or instantiate(): calling the same set from one
    raises.
    """
    _what = "kpipe.Tasks"

    def __init__(self, device="cpu", streams=1):
        from . import _core
        self._bind_init()
        self.device = _core.device(device)
        p = c_void_p()
        check(lib.kp_tasks_create(self.device.ptr, int(streams), byref(p)))
        self._wrapped = {}   # address -> Tensor; the handle keeps their memory
        self._h = Handle(p.value, lib.kp_tasks_destroy, self.device._h, self._wrapped)
        self._fns = {}       # user key -> callable, for the set being built
        self._next = 1
        self._host_keys = []  # host functions in captured task graphs
        self._exc = None
        self._error = None  # a host function's exception, for sync()
        self._fn_c = TASK_FN(self._call)
        self._inflight = Inflight(self.device)
        self._stream = None

    @property
    def ptr(self):
        if not self._h.ptr:
            raise Error("KP_ERR_STATE", "the task set is closed")
        return self._h.ptr

    @one_thread
    def tensor(self, dtype, shape):
        if dtype not in DTYPES:
            raise Error("KP_ERR_INVALID_ARG", "dtype %r; kpipe has %s" % (dtype, ", ".join(DTYPES)))
        n = DTYPES[dtype][1]
        for d in shape:
            n *= int(d)
        b = c_uint32()
        check(lib.kp_tasks_buffer(self.ptr, n, byref(b)))
        return Tensor(b.value, dtype, tuple(int(d) for d in shape), _contiguous(shape))

    @one_thread
    def wrap(self, x):
        """A tensor (anything with __dlpack__) as a buffer, kept alive with
        the task set; the same memory wrapped twice is one buffer."""
        return self._wrap(x)

    def _wrap(self, x):
        t = take(x, self.device, self.device.default_stream, "a wrapped tensor")
        if t.read_only:
            raise Error("KP_ERR_INVALID_ARG", "a read-only tensor cannot be a task buffer")
        size = DTYPES[t.dtype][1]
        extent = size
        for n, s in zip(t.shape, t.strides):
            if n == 0:
                extent = 0
                break
            extent += (n - 1) * s * size
        key = (t.ptr, extent)
        w = self._wrapped.get(key)
        if w is None:
            b = c_uint32()
            check(lib.kp_tasks_buffer_wrap(self.ptr, c_void_p(t.ptr), max(extent, 1), byref(b)))
            w = self._wrapped[key] = Tensor(b.value, t.dtype, t.shape, t.strides, keep=t)
        return w

    def _arg(self, a, region, i):
        if isinstance(region, (bytes, bytearray)):
            a.access = 4
            buf = ctypes.create_string_buffer(bytes(region), len(region))
            a.scalar, a.scalar_bytes = ctypes.cast(buf, c_void_p), len(region)
            return buf
        try:
            access, x, *rest = region
        except (TypeError, ValueError):
            raise Error("KP_ERR_INVALID_ARG", "argument %d: give (access, tensor, offsets, shape, "
                        "strides) or bytes" % i) from None
        if access not in _ACCESS:
            raise Error("KP_ERR_INVALID_ARG", "argument %d: access %r; in, out or inout"
                        % (i, access))
        if not isinstance(x, Tensor):
            x = self._wrap(x)
        offsets = rest[0] if len(rest) > 0 and rest[0] is not None else (0,) * len(x.shape)
        strides = rest[2] if len(rest) > 2 and rest[2] is not None else x.strides
        shape = rest[1] if len(rest) > 1 and rest[1] is not None else \
            tuple(n - o for n, o in zip(x.shape, offsets))
        if len(offsets) != len(x.shape):
            raise Error("KP_ERR_INVALID_ARG", "argument %d: %d offsets for a %d-dimensional "
                        "tensor" % (i, len(offsets), len(x.shape)))
        if any(o < 0 for o in offsets):
            raise Error("KP_ERR_INVALID_ARG", "argument %d: negative offsets %s" % (i, offsets))
        a.access, a.buffer = _ACCESS[access], x.buffer
        start = sum(int(o) * s for o, s in zip(offsets, x.strides))
        fill_desc(a.desc, x.dtype, shape, strides, start)
        return None

    @one_thread
    def submit(self, fn, *regions, name=None):
        """Submits a task; returns its id."""
        if len(regions) > 32:
            raise Error("KP_ERR_INVALID_ARG", "%d arguments; a task takes at most 32"
                        % len(regions))
        args = (TaskArg * max(1, len(regions)))()
        keep = [self._arg(args[i], r, i) for i, r in enumerate(regions)]
        key = self._next
        self._next += 1
        label = (name or getattr(fn, "__name__", "task")).encode()
        k = TaskKernel(label, self._fn_c, c_void_p(key), None)
        self._fns[key] = fn
        tid = c_uint64()
        st = lib.kp_tasks_submit(self.ptr, byref(k), args, len(regions), byref(tid))
        if st != 0:
            self._fns.pop(key, None)
            check(st)
        del keep
        return tid.value

    def _call(self, user, s, views, n):
        try:
            stream = Stream(self.device, Handle(s, None), sink=self)
            if lib.kp_stream_is_capturing(s):
                stream._keep = self._host_keys
            vs = []
            for i in range(n):
                v = views[i]
                if v.access == 4:
                    vs.append(ctypes.string_at(v.scalar, v.scalar_bytes))
                    continue
                size = DTYPES[DTYPE_NAMES[v.desc.dtype]][1]
                vs.append(Array(v.data + v.desc.offset * size, DTYPE_NAMES[v.desc.dtype],
                                desc_shape(v.desc), desc_strides(v.desc), self.device, None,
                                self._h))
            self._fns[user](stream, vs)
            return 0
        except BaseException as e:  # noqa: B902 - raised again by run()
            if self._exc is None:
                self._exc = e
            return set_error("KP_ERR_INVALID_ARG", "a task raised %s: %s" % (type(e).__name__, e))

    def _do(self, f, *a):
        self._exc = None
        st = f(self.ptr, *a)
        exc, self._exc = self._exc, None
        if st != 0:
            raise_failed(st, exc)

    @one_thread
    def run(self, stream=None):
        """Enqueues the tasks submitted since the last run, as if in order on
        `stream`."""
        s = self.device.as_stream(stream)
        self._do(lib.kp_tasks_run, s.ptr)
        self._inflight.add(s, list(self._wrapped.values()))
        self._fns.clear()
        self._stream = s

    @one_thread
    def instantiate(self):
        """The tasks since the last run as one graph (updated in place when its
        shape is the one before)."""
        self._do(lib.kp_tasks_instantiate)
        self._fns.clear()

    @one_thread
    def launch(self, stream=None):
        s = self.device.as_stream(stream)
        self._do(lib.kp_tasks_launch, s.ptr)
        self._inflight.add(s, list(self._wrapped.values()))
        self._stream = s

    @any_thread
    def sync(self):
        self._inflight.retire(wait=True)
        if self._stream is not None:
            self._stream.sync()
        err = take_error(self)
        if err is not None:
            raise Error("KP_ERR_INVALID_ARG", "a task's host function raised %s: %s"
                        % (type(err).__name__, err)) from err

    @one_thread
    def data(self, t):
        """A kpipe.Array over a tensor's memory (once its first writer ran)."""
        p = c_void_p()
        check(lib.kp_tasks_buffer_data(self.ptr, t.buffer, byref(p)))
        return Array(p.value, t.dtype, t.shape, t.strides, self.device, self._stream, self._h)

    @any_thread
    def edges(self):
        n = c_size_t()
        check(lib.kp_tasks_edges(self.ptr, None, 0, byref(n)))
        rows = (TaskEdge * max(1, n.value))()
        check(lib.kp_tasks_edges(self.ptr, rows, n.value, byref(n)))
        return [(r.from_, r.to, _HAZARDS.get(r.hazard, r.hazard), r.buffer)
                for r in rows[:n.value]]

    @any_thread
    def stats(self):
        s = TasksStats()
        check(lib.kp_tasks_stats_get(self.ptr, byref(s)))
        return {k: getattr(s, k) for k, _ in TasksStats._fields_}

    @any_thread
    def write_dot(self, path):
        check(lib.kp_tasks_write_dot(self.ptr, str(path).encode()))
