"""kpipe.Flow: stages on threads joined by bounded queues, from a JSON flow
or from Python callables."""
import ctypes
import json
import os
import tempfile
import threading
from ctypes import byref, c_size_t, c_void_p

from ._core import Array, Handle, Stream
from ._lib import (DTYPES, FLOW_SNAPSHOT_BYTES, STAGE_FN, Error, FlowConfig, FlowStage, check,
                   fill_desc, lib, raise_failed, set_error)
from .pipeline import spec_text

_POLICIES = {"block": 0, "drop_oldest": 1, "drop_newest": 2}


class Frame:
    """A frame as a Python stage sees it, valid during the call: its
    sequence number, bytes in use, four user integers, its buffer as an
    array (array(dtype, shape) views the first bytes), and the stage's
    stream (work on the frame goes there)."""
    __slots__ = ("_f", "_flow", "stream", "stage")

    @property
    def seq(self):
        return self._f.seq

    @property
    def capacity(self):
        return self._f.capacity

    @property
    def bytes(self):
        return self._f.bytes

    @bytes.setter
    def bytes(self, n):
        if not 0 <= n <= self._f.capacity:
            raise Error("KP_ERR_INVALID_ARG", "%d bytes in a frame of %d" % (n, self._f.capacity))
        self._f.bytes = n

    @property
    def user(self):
        return self._f.user

    def array(self, dtype="u8", shape=None):
        """The frame's buffer as a kpipe.Array (DLPack), no copy; the shape
        is also recorded in the frame's descriptor for the stages after."""
        size = DTYPES[dtype][1]
        if shape is None:
            shape = (self._f.capacity // size,)
        n = size
        for d in shape:
            n *= int(d)
        if n > self._f.capacity:
            raise Error("KP_ERR_INVALID_ARG", "%s%s is %d bytes; the frame holds %d"
                        % (dtype, list(shape), n, self._f.capacity))
        fill_desc(self._f.desc, dtype, shape)
        return Array(self._f.data, dtype, shape, tuple(self._f.desc.strides[i]
                                                        for i in range(len(shape))),
                     self._flow.device, self.stream, self._flow._h)


class Flow:
    """A flow from its JSON form (a dict, text or path), or from Python
    stages with Flow.of().

        f = kpipe.Flow("examples/flow.json", device="cpu")
        f.run()                       # start and wait
        print(f.health()["frames"])   # the health report as a dict

    Threads: a flow is made for them, and every method may come from any
    thread. start() starts it once (a second start, from any thread,
    raises KP_ERR_STATE); wait() may be called by several threads at once,
    each returning once every stage has stopped, with the same outcome (a
    stage's exception is raised from each); cancel() and health() at any
    time; trace() and write_trace() once it was waited for. close() from
    one thread while another waits lets the flow go once that wait
    returns. Stage functions run on the flow's own threads: a Frame is
    valid during its call only.
    """

    def __init__(self, spec=None, device="cpu", trace_events=0, _config=None):
        from . import _core
        self.device = _core.device(device)
        self._exc = None  # the first stage exception, raised by every wait()
        self._exc_lock = threading.Lock()
        self._snap_lock = threading.Lock()  # the snapshot buffer health() fills
        self._keep = None
        p = c_void_p()
        if _config is not None and _config[0] == "json":
            _, text, arr, self._keep = _config
            self._status(lib.kp_flow_create_from_json_with(self.device.ptr, text.encode(), arr,
                                                           len(arr), byref(p)))
        elif _config is not None:
            cfg, self._keep = _config
            cfg.dev = self.device.ptr
            self._status(lib.kp_flow_create(byref(cfg), byref(p)))
        else:
            text, path = spec_text(spec, "flow")
            if text is not None:
                if trace_events:
                    raise Error("KP_ERR_INVALID_ARG", "trace_events needs the flow from a file")
                check(lib.kp_flow_create_from_json(self.device.ptr, text.encode(), byref(p)))
            else:
                check(lib.kp_flow_create_from_file_traced(self.device.ptr, path.encode(),
                                                          int(trace_events), byref(p)))
        self._h = Handle(p.value, lib.kp_flow_destroy, self.device._h)
        self._snap = ctypes.create_string_buffer(FLOW_SNAPSHOT_BYTES)

    @classmethod
    def of(cls, stages, device="cpu", frame_bytes=0, queue=4, policy="block", budget_bytes=0,
           trace_events=0):
        """A chain of stages: stages[0] is the source, fn(frame) -> True
        while it made a frame, False at the end; the others fn(frame). Each
        entry is a callable, (name, callable), or a built-in stage in its
        JSON form, a dict ({"source": "video", "path": "in.mp4"}, {"pipeline":
        "enhance.json"}, {"sink": "video", "path": "out.mp4"}): built-in
        stages and Python ones mix in one chain, the built-in ones read as a
        JSON flow's are. A Python stage holds the GIL only while it runs."""
        from . import _core
        dev = _core.device(device)
        if len(stages) < 2:
            raise Error("KP_ERR_INVALID_ARG", "a flow has 2 stages at least, not %d"
                        % len(stages))
        if policy not in _POLICIES:
            raise Error("KP_ERR_INVALID_ARG", "policy %r: block, drop_oldest or drop_newest"
                        % (policy,))
        if any(isinstance(st, dict) for st in stages):
            return cls._mixed(stages, dev, frame_bytes, queue, policy, budget_bytes, trace_events)
        arr = (FlowStage * len(stages))()
        keep = {"names": [], "fns": []}
        flow = cls.__new__(cls)
        for i, st in enumerate(stages):
            name, fn = st if isinstance(st, tuple) else (getattr(st, "__name__", "stage%d" % i),
                                                         st)
            cb = STAGE_FN(flow._stage(fn, i == 0, dev))
            keep["names"].append(name.encode())
            keep["fns"].append(cb)
            s = arr[i]
            s.name, s.fn = keep["names"][-1], cb
            s.queue_capacity = 0 if i == 0 else int(queue)
            s.policy = _POLICIES[policy]
            s.source = i == 0
        cfg = FlowConfig()
        cfg.struct_size = ctypes.sizeof(FlowConfig)
        cfg.stages, cfg.n_stages = arr, len(stages)
        cfg.frame_bytes, cfg.budget_bytes = int(frame_bytes), int(budget_bytes)
        cfg.trace_events = int(trace_events)
        keep["stages"] = arr
        flow.__init__(device=dev, _config=(cfg, keep))
        return flow

    @classmethod
    def _mixed(cls, stages, dev, frame_bytes, queue, policy, budget_bytes, trace_events):
        """Built-in stages (dicts) and Python ones in one chain: a JSON flow
        whose Python stages are callbacks (kp_flow_create_from_json_with)."""
        flow = cls.__new__(cls)
        doc, names, fns = [], [], []
        for i, st in enumerate(stages):
            q = {"capacity": int(queue), "policy": policy}
            if isinstance(st, dict):
                d = dict(st)
                d.setdefault("name", "stage%d" % i)
                if i and "queue" not in d:
                    d["queue"] = q
                doc.append(d)
                continue
            name, fn = st if isinstance(st, tuple) else (getattr(st, "__name__", "stage%d" % i),
                                                         st)
            entry = {"name": name, "callback": name}
            if i:
                entry["queue"] = q
            if frame_bytes:
                entry["frame_bytes"] = int(frame_bytes)
            doc.append(entry)
            names.append(name.encode())
            fns.append(STAGE_FN(flow._stage(fn, i == 0, dev)))
        arr = (FlowStage * max(len(fns), 1))()
        for k, (n, f) in enumerate(zip(names, fns)):
            arr[k].name, arr[k].fn = n, f
        top = {"kpipe_flow": 1, "stages": doc}
        if budget_bytes:
            top["budget_bytes"] = int(budget_bytes)
        if trace_events:
            top["trace_events"] = int(trace_events)
        keep = {"names": names, "fns": fns, "stages": arr}
        flow.__init__(device=dev, _config=("json", json.dumps(top), (FlowStage * len(fns))(
            *arr[:len(fns)]), keep))
        return flow

    def _stage(self, fn, source, dev):
        def call(user, ctx, frame, eos):
            try:
                fr = Frame()
                fr._f, fr._flow = frame.contents, self
                c = ctx.contents
                fr.stage = c.name.decode()
                fr.stream = Stream(dev, Handle(c.stream, None))
                r = fn(fr)
                if source and not r:
                    eos[0] = True
                return 0
            except BaseException as e:  # noqa: B902 - raised again by wait()
                with self._exc_lock:
                    if self._exc is None:
                        self._exc = e
                return set_error("KP_ERR_INVALID_ARG", "stage %s raised %s: %s"
                                 % (ctx.contents.name.decode(), type(e).__name__, e))
        return call

    def _status(self, st):
        if st != 0:
            with self._exc_lock:
                exc = self._exc
            raise_failed(st, exc)

    @property
    def ptr(self):
        if not self._h.ptr:
            raise Error("KP_ERR_STATE", "the flow is closed")
        return self._h.ptr

    def _held(self):
        """The handle, held by the caller for its call: a close() from
        another thread meanwhile frees the flow only once the call is done."""
        h = self._h
        if not h.ptr:
            raise Error("KP_ERR_STATE", "the flow is closed")
        return h

    def start(self):
        h = self._held()
        self._status(lib.kp_flow_start(h.ptr))

    def wait(self):
        h = self._held()
        self._status(lib.kp_flow_wait(h.ptr))

    def run(self):
        self.start()
        self.wait()
        return self.health()

    def cancel(self):
        h = self._held()
        check(lib.kp_flow_cancel(h.ptr))

    def health(self):
        """The health report (frames, drops, per stage counts, times,
        copies and queues, links) as a dict, at any time."""
        h = self._held()
        with self._snap_lock:
            check(lib.kp_flow_health(h.ptr, self._snap))
            n = c_size_t()
            buf = ctypes.create_string_buffer(1 << 16)
            st = lib.kp_flow_health_json(self._snap, buf, len(buf), byref(n))
            if st != 0 and n.value > len(buf):
                buf = ctypes.create_string_buffer(n.value)
                st = lib.kp_flow_health_json(self._snap, buf, len(buf), byref(n))
            check(st)
        return json.loads(buf.value.decode())

    def write_trace(self, path):
        h = self._held()
        check(lib.kp_flow_write_trace(h.ptr, str(path).encode()))

    def trace(self):
        """The trace (Chrome trace format) as a dict."""
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            self.write_trace(path)
            with open(path) as f:
                return json.load(f)
        finally:
            os.unlink(path)

    def write_dot(self, path):
        h = self._held()
        check(lib.kp_flow_write_dot(h.ptr, str(path).encode()))

    def close(self):
        if self._h.ptr:
            self._h = Handle(None, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
