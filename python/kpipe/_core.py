"""Devices, streams and kpipe's own arrays (views of its memory, exported
through DLPack)."""
import collections
import contextlib
import ctypes
import functools
import gc
import threading
from ctypes import byref, c_void_p

from . import _dlpack
from ._lib import DTYPES, Error, HOST_FN, check, lib


# re-entrant: a collection inside a block below may finalize another Handle
# on this thread
_handles_lock = threading.RLock()
_in_host = threading.local()  # .on: this thread runs a host function or a capture now
_deferred = []                # handles released inside host functions and captures


def flush_deferred():
    """Frees what host functions released (never from inside one)."""
    if not _deferred or getattr(_in_host, "on", False):
        return  # the common case costs one read, no lock
    with _handles_lock:
        if not _deferred:
            return
        todo = _deferred[:]
        del _deferred[:]
    for h in todo:
        h._free_now()


_pause_lock = threading.Lock()
_pauses = [0, False]  # open pauses, whether the collector ran before the first


@contextlib.contextmanager
def capture_guard():
    """A block inside which a stream capture is open on this thread: a
    library free there (a cudaFree, a graph or stream destroyed) is an
    unsafe call that invalidates the capture ("operation failed due to a
    previous error during capture" on its next kernel). Python's cyclic
    collector, which may run at any allocation and finalize an earlier
    object's handles, or PyTorch's graphs, is paused for the block (process
    wide: the last of nested or concurrent blocks restores it), and what this
    thread releases in it is freed at the next release or call after it.
    (torch.cuda.graph collects before each capture instead, which would
    cost each of a first call's sixteen captures a full collection.)"""
    with _pause_lock:
        if not _pauses[0]:
            _pauses[1] = gc.isenabled()
            gc.disable()
        _pauses[0] += 1
    was = getattr(_in_host, "on", False)
    _in_host.on = True
    try:
        yield
    finally:
        _in_host.on = was
        with _pause_lock:
            _pauses[0] -= 1
            if not _pauses[0] and _pauses[1]:
                gc.enable()


class Handle:
    """One library object and how to free it. Python objects that use it
    hold a reference, so it is freed when the last of them goes: an Array
    keeps its pipeline's memory alive after Pipeline.close(). A handle made
    from others (a stream from its device) counts as their child: a parent
    is freed only after its children, whatever order the garbage collector
    finalizes them in (at interpreter exit it picks any)."""
    __slots__ = ("ptr", "_free", "_parents", "_kids", "_dead", "__weakref__")

    def __init__(self, ptr, free, *parents):
        self.ptr, self._free, self._parents = ptr, free, parents
        self._kids, self._dead = 0, False
        with _handles_lock:  # children come and go on any thread
            for q in parents:
                if isinstance(q, Handle):
                    q._kids += 1

    def release(self):
        with _handles_lock:
            if self._dead:
                return
            self._dead = True
            if getattr(_in_host, "on", False):
                # a host function runs on the stream's own worker, and the
                # collector may drop a handle there: a library free may wait
                # for that stream, that is for this very call. Freed later,
                # by the next release or call on another thread.
                _deferred.append(self)
                return
        self._free_now()
        flush_deferred()

    def _free_now(self):
        with _handles_lock:  # one thread frees it; the library call runs outside
            if self._kids or self.ptr is None and not self._parents:
                return
            p, self.ptr = self.ptr, None
            parents, self._parents = self._parents, ()
        if p and self._free:
            self._free(p)
        for q in parents:
            if isinstance(q, Handle):
                with _handles_lock:
                    q._kids -= 1
                    dead = q._dead
                if dead:
                    q._free_now()

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass


def _native_of(s):
    """A native stream handle from what users pass: an int, a torch.cuda.Stream
    (.cuda_stream), a CuPy stream (.ptr)."""
    if isinstance(s, int):
        return s
    for attr in ("cuda_stream", "ptr"):
        v = getattr(s, attr, None)
        if isinstance(v, int):
            return v
    raise Error("KP_ERR_INVALID_ARG", "a %s is not a stream: pass a kpipe.Stream, a native "
                "handle (int), a torch.cuda.Stream or a CuPy stream" % type(s).__name__)


class Device:
    """An open device: "cpu", "cpu:N", "cuda", "cuda:N". kpipe.device(name)
    gives the one shared per name."""

    def __init__(self, name="cpu"):
        p = c_void_p()
        check(lib.kp_device_open(name.encode(), byref(p)))
        self._h = Handle(p.value, lib.kp_device_close)
        self.name = lib.kp_device_name(p).decode()
        self.backend = lib.kp_device_backend(p).decode()
        self._wrapped = {}
        self._default = None
        self._event = None
        self._lock = threading.Lock()  # the event of order()
        # the default stream and the wrapped ones, made once whatever thread
        # asks first (two would split a pipeline's ticks over two streams)
        self._streams_lock = threading.Lock()

    @property
    def ptr(self):
        if not self._h.ptr:
            raise Error("KP_ERR_STATE", "device %s is closed" % self.name)
        return self._h.ptr

    @property
    def dlpack_device(self):
        if self.backend == "cuda":
            return (_dlpack.CUDA, int(self.name.partition(":")[2] or 0))
        return (_dlpack.CPU, 0)

    def stream(self):
        """A new stream of kpipe's own."""
        p = c_void_p()
        check(lib.kp_stream_create(self.ptr, byref(p)))
        return Stream(self, Handle(p.value, lib.kp_stream_destroy, self._h))

    @property
    def default_stream(self):
        s = self._default
        if s is None:
            with self._streams_lock:
                if self._default is None:
                    self._default = self.stream()
                s = self._default
        return s

    def wrap_stream(self, native):
        """The kpipe stream over a native one (PyTorch's current stream's
        .cuda_stream): kept for the device's life, since a pipeline's next
        call on another stream waits for the last one's work."""
        native = _native_of(native)
        s = self._wrapped.get(native)
        if s is None:
            with self._streams_lock:
                s = self._wrapped.get(native)
                if s is None:
                    p = c_void_p()
                    check(lib.kp_stream_wrap(self.ptr, c_void_p(native), byref(p)))
                    s = self._wrapped[native] = Stream(
                        self, Handle(p.value, lib.kp_stream_destroy, self._h), native=native)
        return s

    def as_stream(self, s):
        if s is None:
            return self.default_stream
        if isinstance(s, Stream):
            if s.device is not self:
                raise Error("KP_ERR_INVALID_ARG", "a stream of %s given for %s"
                            % (s.device.name, self.name))
            return s
        return self.wrap_stream(s)

    def sync(self):
        check(lib.kp_device_sync(self.ptr))

    def order(self, producer, consumer_native):
        """Makes a native stream wait, on the device, for `producer`'s work so
        far (DLPack's stream hand-over)."""
        consumer = self.wrap_stream(consumer_native)
        if consumer is producer:
            return
        with self._lock:
            if self._event is None:
                e = c_void_p()
                check(lib.kp_event_create_untimed(self.ptr, byref(e)))
                self._event = Handle(e.value, lib.kp_event_destroy, self._h)
            check(lib.kp_event_record(self._event.ptr, producer.ptr))
            check(lib.kp_stream_wait_event(consumer.ptr, self._event.ptr))

    def __repr__(self):
        return "kpipe.Device(%r)" % self.name


_devices = {}
_devices_lock = threading.Lock()


def device(name="cpu"):
    """The Device of that name, opened once per process."""
    if isinstance(name, Device):
        return name
    with _devices_lock:
        d = _devices.get(name)
        if d is None:
            d = _devices[name] = Device(name)
        return d


# Host functions on streams: one trampoline; `user` is a key into this table.
_host_calls = {}
_host_next = [1]
_host_lock = threading.Lock()


@HOST_FN
def _host_trampoline(user):
    entry = _host_calls.get(user)
    if entry is None:
        return
    fn, once, sink = entry
    if once:
        _host_calls.pop(user, None)
    _in_host.on = True
    try:
        fn()
    except BaseException as e:  # noqa: B902 - kept for the next sync
        with _host_lock:
            if sink._error is None:
                sink._error = e
    finally:
        _in_host.on = False


def take_error(sink):
    """The exception a host function left on `sink` (a stream, a graph
    cache, a task set), handed to one caller only; None if there is none."""
    with _host_lock:
        e, sink._error = sink._error, None
    return e


class Stream:
    """A kpipe stream: its own (Device.stream()) or a native one wrapped
    (Device.wrap_stream). `native` is its cudaStream_t as an int (0 on the
    cpu backend); torch.cuda.ExternalStream(s.native) runs PyTorch on it.

    Threads: any number may use one stream, as in C. Each call's work goes
    in whole, in the order the calls reach the stream (nothing orders two
    threads' calls but the caller); sync() from any thread waits for all
    work so far, and an exception a host function raised comes out of one
    sync() only, the first to find it."""

    def __init__(self, dev, handle, native=None, sink=None):
        self.device, self._h, self._error = dev, handle, None
        self._keep = None  # host functions a capture on this stream holds
        # where a host function's exception goes: the stream, or the graph
        # cache or task set whose graphs replay it
        self._sink = sink if sink is not None else self
        n = lib.kp_stream_native(handle.ptr) if native is None else native
        self.native = n or 0

    @property
    def ptr(self):
        if not self._h.ptr:
            raise Error("KP_ERR_STATE", "the stream is closed")
        return self._h.ptr

    @property
    def cuda_stream(self):
        return self.native

    def sync(self):
        check(lib.kp_stream_sync(self.ptr))
        e = take_error(self)
        if e is not None:
            raise e

    def copy(self, dst, src, nbytes=None):
        """Enqueues a copy between kpipe arrays or addresses."""
        d, s = _addr(dst), _addr(src)
        if nbytes is None:
            nbytes = min(_nbytes(dst), _nbytes(src))
        check(lib.kp_memcpy_async(self.ptr, c_void_p(d), c_void_p(s), nbytes))

    def memset(self, dst, value, nbytes=None):
        check(lib.kp_memset_async(self.ptr, c_void_p(_addr(dst)), int(value),
                                  _nbytes(dst) if nbytes is None else nbytes))

    def host_func(self, fn, keep=None):
        """Enqueues a Python callable, run in the stream's order (on another
        thread: it takes the GIL). In a capture, `keep` (a list the graph's
        owner holds) keeps it for every replay; else it runs once. An
        exception it raises comes out of the next sync() (of the stream, or
        of the graph cache or task set that runs it). It must not wait for
        a stream: read kpipe.Arrays given to work functions directly (they
        carry no stream: the work is already in order)."""
        with _host_lock:
            key = _host_next[0]
            _host_next[0] += 1
            keep = keep if keep is not None else self._keep
            _host_calls[key] = (fn, keep is None, self._sink)
            if keep is not None:
                keep.append(key)
        st = lib.kp_launch_host_func(self.ptr, _host_trampoline, c_void_p(key))
        if st != 0:
            _host_calls.pop(key, None)
            check(st)

    def __repr__(self):
        return "kpipe.Stream(%s, native=%#x)" % (self.device.name, self.native)


def release_host_calls(keys):
    with _host_lock:
        for k in keys:
            _host_calls.pop(k, None)


_claims_lock = threading.Lock()


class Bound:
    """One thread's object: Pipeline, GraphCache, Tasks and
    kpipe.torch.graphed. Their calls return views of the object's memory
    that its next call rewrites, so calls from two threads, even in turn,
    would hand one thread another's results. The object therefore belongs
    to the first thread that calls it, and a call from another raises
    kpipe.Error("KP_ERR_STATE") naming both threads, at once and every
    time, whatever the timing. release_thread() in the holder gives it up
    (the next caller, from any thread, takes it over: a pool of workers
    that take turns), and a holder that has ended lets go by itself.

    Each call holds self._lock while it runs. What any thread may call
    (sync, stats, report, close) takes the lock too: it waits for a call in
    progress rather than read it half done. A call made again from inside
    one of the object's own (a work function, a task) raises instead of
    waiting for itself."""
    _what = "object"

    def _bind_init(self):
        self._lock = threading.Lock()
        self._holder = None     # the threading.Thread that calls it
        self._holder_id = None  # its ident
        self._inside = None     # the ident of the thread inside a call

    def _claim(self, me):
        with _claims_lock:
            t = self._holder
            if t is not None and self._holder_id != me and t.is_alive():
                cur = threading.current_thread()
                raise Error("KP_ERR_STATE", "%s is in use by thread %r (ident %d), the first to "
                            "call it; this is thread %r (ident %d). Its outputs are views that "
                            "its next call rewrites, so it serves one thread: make one per "
                            "thread, or have the holder call release_thread() once it has read "
                            "its outputs" % (self._label(), t.name, self._holder_id, cur.name,
                                             me))
            self._holder, self._holder_id = threading.current_thread(), me

    def _enter(self, bind=True):
        """Returns with self._lock held, for a call from the holder (bind)
        or from any thread."""
        flush_deferred()
        me = threading.get_ident()
        if bind and self._holder_id != me:
            self._claim(me)
        if self._inside == me:
            raise Error("KP_ERR_STATE", "%s: called again from inside one of its own calls "
                        "(a work function or task on this thread); it runs one call at a "
                        "time" % self._label())
        self._lock.acquire()
        self._inside = me

    def _leave(self):
        self._inside = None
        self._lock.release()

    def release_thread(self):
        """Gives the object up from the thread that holds it: the next call,
        from any thread, takes it over. Call it once the outputs were read
        (or copied); after it, another thread's call may rewrite them."""
        me = threading.get_ident()
        with _claims_lock:
            if self._holder is None:
                return
            if self._holder_id != me:
                raise Error("KP_ERR_STATE", "%s: release_thread() from thread %r, but thread %r "
                            "holds it" % (self._label(), threading.current_thread().name,
                                          self._holder.name))
            self._holder = self._holder_id = None

    @property
    def thread(self):
        """The threading.Thread that holds it, or None."""
        return self._holder

    def _label(self):
        return self._what


def one_thread(method):
    """A Bound method only the holder may call (it claims the object)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        self._enter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._leave()
    return call


def any_thread(method):
    """A Bound method any thread may call; it waits for a call in progress."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        self._enter(bind=False)
        try:
            return method(self, *args, **kwargs)
        finally:
            self._leave()
    return call


class Owned(Bound):
    """What Pipeline, GraphCache and Tasks share: a library object behind
    self._h, inputs in flight (self._inflight) and host functions its graphs
    call (self._host_keys). close() (from any thread) waits for a call in
    progress and for the work, lets the object go once no Array of it is
    held, and forgets the host functions."""
    _host_keys = ()

    @any_thread
    def close(self):
        if self._h.ptr:
            self._inflight.retire(wait=True)
            self._h = Handle(None, None)  # freed once no Array of it is held
            release_host_calls(self._host_keys)
            self._host_keys = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _addr(x):
    if isinstance(x, int):
        return x
    if isinstance(x, Array):
        return x.ptr
    raise Error("KP_ERR_INVALID_ARG", "a %s is not an address or a kpipe.Array" % type(x).__name__)


def _nbytes(x):
    if isinstance(x, Array):
        return x.nbytes
    raise Error("KP_ERR_INVALID_ARG", "give nbytes with a plain address")


_NUMPY = {"f32": "float32", "f16": "float16", "i32": "int32", "i16": "int16", "i8": "int8",
          "u8": "uint8", "i64": "int64", "u64": "uint64", "u16": "uint16"}


class Array:
    """A view of kpipe's memory (a pipeline's output, a cache's output
    buffer, a task buffer, a frame): exported through DLPack without a copy
    (numpy.from_dlpack, torch.from_dlpack). It keeps the memory's owner
    alive while it, or a consumer's tensor made from it, lives. Work that
    made it is on `stream`: a consumer on another stream waits for it on
    the device, a host consumer (cpu) waits on the host."""
    __slots__ = ("ptr", "dtype", "shape", "strides", "device", "stream", "owner", "read_only")

    def __init__(self, ptr, dtype, shape, strides, dev, stream, owner, read_only=False):
        self.ptr, self.dtype, self.shape, self.strides = ptr, dtype, tuple(shape), tuple(strides)
        self.device, self.stream, self.owner, self.read_only = dev, stream, owner, read_only

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def itemsize(self):
        return DTYPES[self.dtype][1]

    @property
    def nbytes(self):
        return self.size * self.itemsize

    def __dlpack_device__(self):
        return self.device.dlpack_device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("kpipe arrays are exported without copies (copy=True asked)")
        mine = self.device.dlpack_device
        if dl_device is not None and tuple(dl_device) != mine:
            raise BufferError("a kpipe array on %s cannot be exported to device %s"
                              % (self.device.name, tuple(dl_device)))
        if mine[0] == _dlpack.CPU:
            if stream is not None and stream != -1:
                raise BufferError("stream=%r for host memory: DLPack wants None" % (stream,))
            if self.stream is not None:
                self.stream.sync()
        elif stream != -1 and self.stream is not None:
            # None: the legacy default stream (DLPack's rule for CUDA)
            self.device.order(self.stream, 1 if stream is None else stream)
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        return _dlpack.export_tensor(self.ptr, self.dtype, self.shape, self.strides, mine[0],
                                     mine[1], self, versioned, self.read_only)

    def numpy(self):
        """A writable NumPy view of host memory (the cpu backend), no copy,
        after the work that makes it (numpy.from_dlpack gives a read-only
        one). It keeps the memory's owner alive."""
        import numpy
        if self.device.dlpack_device[0] != _dlpack.CPU:
            raise Error("KP_ERR_INVALID_ARG", "a NumPy view of %s memory: use the device's own "
                        "array library (torch.from_dlpack)" % self.device.name)
        if self.dtype not in _NUMPY:
            raise Error("KP_ERR_UNSUPPORTED", "NumPy has no %s" % self.dtype)
        if self.stream is not None:
            self.stream.sync()
        size = self.itemsize
        extent = size
        for n, s in zip(self.shape, self.strides):
            extent = 0 if n == 0 else extent + (n - 1) * s * size
        buf = (ctypes.c_char * max(extent, 1)).from_address(self.ptr)
        buf.owner = self  # the ndarray's base holds the buffer, which holds this
        return numpy.ndarray(self.shape, _NUMPY[self.dtype], buf, 0,
                             tuple(s * size for s in self.strides))

    def __repr__(self):
        return "kpipe.Array(%s%s on %s)" % (self.dtype, list(self.shape), self.device.name)


def take(obj, dev, stream, what):
    """A tensor (anything with __dlpack__) taken for `dev` without a copy:
    the Imported record, checked to be where the device reads."""
    t = _dlpack.direct(obj, stream.native if dev.backend == "cuda" else None)
    if t is None:
        native = None
        if dev.backend == "cuda":
            # a stream only for a producer on a CUDA device (PyTorch refuses
            # one for host memory)
            where = getattr(obj, "__dlpack_device__", None)
            kind = where()[0] if where is not None else _dlpack.CUDA
            if kind in (_dlpack.CUDA, _dlpack.CUDA_MANAGED):
                native = stream.native if stream.native else 1
        t = _dlpack.import_tensor(obj, native)
    want = dev.dlpack_device
    ok = (t.device_type, t.device_id) == want
    if dev.backend == "cuda" and t.device_type == _dlpack.CUDA_MANAGED:
        ok = True
    if dev.backend != "cuda" and t.device_type in (_dlpack.CPU, _dlpack.CUDA_HOST):
        ok = True
    if not ok:
        where = _dlpack.DEVICE_NAMES.get(t.device_type, "device type %d" % t.device_type)
        raise Error("KP_ERR_INVALID_ARG", "%s is on %s:%d, but runs on %s; move it there first "
                    "(kpipe makes no hidden copies)" % (what, where, t.device_id, dev.name))
    return t


class Inflight:
    """Objects work on the device still reads (inputs taken without a copy),
    each set held until an event recorded after its work has passed.

    An event is recorded once every EVERY sets on a stream, not per set (a
    record and a query cost more than the rest of a tick's Python): the
    sets since the last one wait for the next, for a change of stream, or
    for retire(wait=True). Recorded later, an event still comes after all
    the work its stream had, so a set is never let go before its work.

    Thread-safe: one lock covers the bookkeeping (a sync() or close() from
    another thread meets the owner's ticks here)."""
    EVERY = 8

    def __init__(self, dev):
        self.device = dev
        self._pending = collections.deque()  # (event, [sets])
        self._free = []
        self._loose, self._loose_stream = [], None  # sets with no event yet
        self._lock = threading.Lock()

    def add(self, stream, objs):
        with self._lock:
            if self._loose and stream is not self._loose_stream:
                self._seal()
            self._loose.append(objs)
            self._loose_stream = stream
            if len(self._loose) >= self.EVERY:
                self._seal()
                self._retire(False)

    def _seal(self):
        ev = self._free.pop() if self._free else None
        if ev is None:
            e = c_void_p()
            check(lib.kp_event_create_untimed(self.device.ptr, byref(e)))
            ev = Handle(e.value, lib.kp_event_destroy, self.device._h)
        check(lib.kp_event_record(ev.ptr, self._loose_stream.ptr))
        self._pending.append((ev, self._loose))
        self._loose, self._loose_stream = [], None

    def retire(self, wait=False):
        with self._lock:
            self._retire(wait)

    def _retire(self, wait):
        if wait and self._loose:
            self._seal()
        done = ctypes.c_bool()
        while self._pending:
            ev = self._pending[0][0]
            if wait:
                check(lib.kp_event_sync(ev.ptr))
            else:
                check(lib.kp_event_query(ev.ptr, byref(done)))
                if not done.value:
                    break
            self._pending.popleft()
            self._free.append(ev)

    def __len__(self):
        with self._lock:
            return sum(len(sets) for _, sets in self._pending) + len(self._loose)
