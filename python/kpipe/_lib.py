"""The shared library, its structures and its status codes, bound with ctypes.

Finding the library, in order: the KPIPE_LIBRARY environment variable (a
path to libkpipe.so); the path `cmake --install` wrote into _install.py
beside this file; the system's search (ctypes.util.find_library, then
the loader's own search for libkpipe.so.0).
"""
import ctypes
import ctypes.util
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char_p, c_double, c_float, c_int,
                    c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p)

MAX_DIMS = 8

# status values and names, as core.h's KP_STATUS_MAP has them
STATUS_NAMES = {
    0: "KP_OK", 1: "KP_ERR_INVALID_ARG", 2: "KP_ERR_OUT_OF_MEMORY", 3: "KP_ERR_NO_DEVICE",
    4: "KP_ERR_UNSUPPORTED", 5: "KP_ERR_DEVICE", 6: "KP_ERR_STATE", 7: "KP_ERR_PARSE",
    8: "KP_ERR_NOT_FOUND", 9: "KP_ERR_MISMATCH", 10: "KP_ERR_IO", 11: "KP_ERR_INTERNAL",
}
STATUS = {v: k for k, v in STATUS_NAMES.items()}

# kp_dtype, in tensor.h's order: name -> (enum value, bytes)
DTYPES = {"f32": (0, 4), "f16": (1, 2), "bf16": (2, 2), "i32": (3, 4), "i16": (4, 2),
          "i8": (5, 1), "u8": (6, 1), "i64": (7, 8), "u64": (8, 8), "u16": (9, 2)}
DTYPE_NAMES = {v[0]: k for k, v in DTYPES.items()}


class Error(Exception):
    """A kpipe failure: `status` is the kp_status name ("KP_ERR_INVALID_ARG"),
    `code` its value and `detail` the sentence that says what failed."""

    def __init__(self, status, detail):
        code = STATUS[status] if isinstance(status, str) else int(status)
        self.code = code
        self.status = STATUS_NAMES.get(code, "KP_ERR_INTERNAL")
        self.detail = detail
        super().__init__("%s: %s" % (self.status, detail))


class TensorDesc(Structure):
    _fields_ = [("dtype", c_int), ("ndim", c_int), ("shape", c_int64 * MAX_DIMS),
                ("strides", c_int64 * MAX_DIMS), ("offset", c_int64)]


class PortInfo(Structure):
    _fields_ = [("name", c_char_p), ("data", c_void_p), ("desc", TensorDesc)]


GRAPH_MAX_CAPTURE_SIZES = 64


class GraphCacheConfig(Structure):
    _fields_ = [("struct_size", c_size_t), ("miss", c_int), ("max_graphs", c_size_t),
                ("max_bytes", c_size_t), ("capture_sizes", c_int64 * GRAPH_MAX_CAPTURE_SIZES),
                ("n_capture_sizes", c_size_t), ("max_variants", c_size_t)]


class GraphArgs(Structure):
    _fields_ = [("inputs", POINTER(PortInfo)), ("n_inputs", c_size_t),
                ("outputs", POINTER(PortInfo)), ("n_outputs", c_size_t),
                ("literals", POINTER(c_int64)), ("n_literals", c_size_t)]


ENQUEUE_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, POINTER(GraphArgs))
BUILD_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, POINTER(GraphArgs), c_void_p)


class GraphCall(Structure):
    _fields_ = [("struct_size", c_size_t), ("id", c_uint64), ("enqueue", ENQUEUE_FN),
                ("build", BUILD_FN), ("bind", c_void_p), ("user", c_void_p),
                ("state_bytes", c_size_t), ("inputs", POINTER(PortInfo)), ("n_inputs", c_size_t),
                ("outputs", POINTER(PortInfo)), ("n_outputs", c_size_t),
                ("dynamic", POINTER(c_uint32)), ("literals", POINTER(c_int64)),
                ("n_literals", c_size_t), ("flags", c_int), ("retarget", c_void_p)]


class GraphStats(Structure):
    _fields_ = [(n, c_uint64) for n in ("calls", "hits", "misses", "captures", "updates",
                                        "instantiations", "failed_updates", "fallbacks",
                                        "invalidations", "evictions", "grows")] + \
               [(n, c_size_t) for n in ("graphs", "stale", "buffer_bytes", "graph_bytes", "bytes",
                                        "peak_bytes")]


class PipelineOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("mode", c_int), ("binding", c_int),
                ("graph_cache", POINTER(GraphCacheConfig)), ("fuse", c_int)]


class PipelineReport(Structure):
    _fields_ = [(n, c_size_t) for n in ("n_modules", "n_connections", "n_inputs", "n_outputs",
                                        "tensor_bytes", "workspace_bytes", "static_desc_bytes",
                                        "dynamic_desc_bytes", "arena_bytes", "pinned_bytes",
                                        "graph_nodes")] + \
               [("binding", c_int), ("n_dynamic_dims", c_size_t)]


class TaskArg(Structure):
    _fields_ = [("access", c_int), ("buffer", c_uint32), ("desc", TensorDesc),
                ("scalar", c_void_p), ("scalar_bytes", c_size_t)]


class TaskView(Structure):
    _fields_ = [("access", c_int), ("data", c_void_p), ("desc", TensorDesc),
                ("scalar", c_void_p), ("scalar_bytes", c_size_t)]


TASK_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, POINTER(TaskView), c_size_t)


class TaskKernel(Structure):
    _fields_ = [("name", c_char_p), ("fn", TASK_FN), ("user", c_void_p), ("launch", c_void_p)]


class TaskEdge(Structure):
    _fields_ = [("from_", c_uint64), ("to", c_uint64), ("hazard", c_int), ("buffer", c_uint32)]


class TasksStats(Structure):
    _fields_ = [(n, c_uint64) for n in ("tasks", "edges_found", "edges", "regions_live",
                                        "overlap_tests", "runs", "graph_builds", "graph_updates")]


class Frame(Structure):
    """The leading fields of kp_frame (flow.h): a stage gets a pointer to one
    and reads or writes these; the ones after them are never touched here."""
    _fields_ = [("seq", c_uint64), ("data", c_void_p), ("capacity", c_size_t),
                ("bytes", c_size_t), ("desc", TensorDesc), ("user", c_int64 * 4)]


class StageCtx(Structure):
    _fields_ = [("dev", c_void_p), ("stream", c_void_p), ("name", c_char_p), ("index", c_size_t),
                ("replica", c_size_t), ("flow", c_void_p)]


STAGE_FN = CFUNCTYPE(c_int, c_void_p, POINTER(StageCtx), POINTER(Frame), POINTER(c_bool))


class VideoFrame(Structure):  # kp_video_frame
    _fields_ = [("format", c_int), ("width", c_int32), ("height", c_int32), ("pitch", c_int64),
                ("pts", c_int64), ("time_base", c_int32 * 2), ("rate", c_int32 * 2),
                ("full_range", c_bool), ("matrix", c_int32)]


class VideoReaderConfig(Structure):  # kp_video_reader_config
    _fields_ = [("decoder", c_int), ("pitch", c_int64), ("threads", c_int), ("format", c_int),
                ("timeout_ms", c_int), ("interrupt", c_void_p), ("interrupt_user", c_void_p),
                ("parallel", c_int), ("max_width", c_int32), ("max_height", c_int32),
                ("options", c_char_p)]


class VideoReaderInfo(Structure):  # kp_video_reader_info
    _fields_ = [("width", c_int32), ("height", c_int32), ("pitch", c_int64), ("format", c_int),
                ("frame_bytes", c_size_t), ("max_width", c_int32), ("max_height", c_int32),
                ("time_base", c_int32 * 2), ("rate", c_int32 * 2), ("frames", c_int64),
                ("codec", ctypes.c_char * 32), ("decoder", ctypes.c_char * 48),
                ("fallback", ctypes.c_char * 160), ("depth", c_int32)]


class FlowStage(Structure):
    _fields_ = [("name", c_char_p), ("fn", STAGE_FN), ("user", c_void_p),
                ("queue_capacity", c_size_t), ("policy", c_int), ("batch_fn", c_void_p),
                ("max_batch", c_size_t), ("deadline_us", c_uint32), ("end_fn", c_void_p),
                ("dev", c_void_p), ("handoff", c_int), ("replicas", c_void_p),
                ("n_replicas", c_size_t), ("replica_users", c_void_p), ("deal", c_int),
                ("free_fn", c_void_p), ("from_", c_void_p), ("n_from", c_size_t),
                ("source", c_bool), ("streams", c_size_t), ("stream_users", c_void_p),
                ("route", c_int)]


class FlowConfig(Structure):
    _fields_ = [("struct_size", c_size_t), ("dev", c_void_p), ("stages", POINTER(FlowStage)),
                ("n_stages", c_size_t), ("frame_bytes", c_size_t), ("budget_bytes", c_size_t),
                ("trace_events", c_size_t), ("spin_us", c_int),
                ("strict_no_host_copies", c_bool), ("carry_us", c_int)]


HOST_FN = CFUNCTYPE(None, c_void_p)


def _find_library():
    env = os.environ.get("KPIPE_LIBRARY")
    if env:
        return env
    try:
        from . import _install  # written by cmake --install
        if os.path.exists(_install.LIBRARY):
            return _install.LIBRARY
    except ImportError:
        pass
    return ctypes.util.find_library("kpipe") or "libkpipe.so.0"


def _load():
    path = _find_library()
    try:
        return ctypes.CDLL(path), path
    except OSError as e:
        raise ImportError("kpipe: cannot load the library %r (%s); set KPIPE_LIBRARY to the path "
                          "of libkpipe.so" % (path, e)) from None


lib, LIBRARY_PATH = _load()

vp, st, sz = c_void_p, c_int, c_size_t
PV = POINTER(c_void_p)
_PROTOS = {
    # core
    "kp_status_name": (c_char_p, [c_int]),
    "kp_last_error": (c_char_p, []),
    "kp_clear_error": (None, []),
    "kp_set_error": (st, [c_int, c_char_p, c_char_p]),
    "kp_version_str": (c_char_p, []),
    "kp_dtype_size": (sz, [c_int]),
    "kp_desc_validate": (st, [POINTER(TensorDesc)]),
    "kp_desc_bytes_needed": (c_int64, [POINTER(TensorDesc)]),
    "kp_desc_is_contiguous": (c_bool, [POINTER(TensorDesc)]),
    # devices, streams, events, graphs
    "kp_device_open": (st, [c_char_p, PV]),
    "kp_device_close": (None, [vp]),
    "kp_device_name": (c_char_p, [vp]),
    "kp_device_backend": (c_char_p, [vp]),
    "kp_device_sync": (st, [vp]),
    "kp_malloc": (st, [vp, sz, PV]),
    "kp_free": (None, [vp, vp]),
    "kp_memcpy_dtoh": (st, [vp, vp, vp, sz]),
    "kp_malloc_host": (st, [vp, sz, PV]),
    "kp_free_host": (None, [vp, vp]),
    "kp_stream_create": (st, [vp, PV]),
    "kp_stream_wrap": (st, [vp, vp, PV]),
    "kp_stream_destroy": (None, [vp]),
    "kp_stream_sync": (st, [vp]),
    "kp_stream_native": (vp, [vp]),
    "kp_stream_is_capturing": (c_bool, [vp]),
    "kp_memcpy_async": (st, [vp, vp, vp, sz]),
    "kp_memset_async": (st, [vp, vp, c_int, sz]),
    "kp_launch_host_func": (st, [vp, HOST_FN, vp]),
    "kp_event_create_untimed": (st, [vp, PV]),
    "kp_event_destroy": (None, [vp]),
    "kp_event_record": (st, [vp, vp]),
    "kp_event_query": (st, [vp, POINTER(c_bool)]),
    "kp_event_sync": (st, [vp]),
    "kp_stream_wait_event": (st, [vp, vp]),
    "kp_graph_add_native": (st, [vp, PV, sz, vp, PV]),
    # pipelines
    "kp_pipeline_create_from_json_opts": (st, [vp, c_char_p, POINTER(PipelineOptions), PV]),
    "kp_pipeline_create_from_file_opts": (st, [vp, c_char_p, POINTER(PipelineOptions), PV]),
    "kp_pipeline_setup": (st, [vp]),
    "kp_pipeline_configure_io": (st, [vp, POINTER(PortInfo), sz, POINTER(PortInfo), sz, vp]),
    "kp_pipeline_warmup": (st, [vp, vp]),
    "kp_pipeline_build_graph": (st, [vp]),
    "kp_pipeline_execute_stream": (st, [vp, vp]),
    "kp_pipeline_execute_graph": (st, [vp, vp]),
    "kp_pipeline_graph_cache": (vp, [vp]),
    "kp_pipeline_destroy": (None, [vp]),
    "kp_pipeline_mode": (c_int, [vp]),
    "kp_pipeline_name": (c_char_p, [vp]),
    "kp_pipeline_report_get": (st, [vp, POINTER(PipelineReport)]),
    "kp_pipeline_input_info": (st, [vp, sz, POINTER(PortInfo)]),
    "kp_pipeline_output_info": (st, [vp, sz, POINTER(PortInfo)]),
    # graph cache
    "kp_graph_miss_parse": (st, [c_char_p, POINTER(c_int)]),
    "kp_graph_cache_create": (st, [vp, POINTER(GraphCacheConfig), PV]),
    "kp_graph_cache_destroy": (None, [vp]),
    "kp_graph_cache_run": (st, [vp, POINTER(GraphCall), vp]),
    "kp_graph_cache_prepare": (st, [vp, POINTER(GraphCall), sz, vp]),
    "kp_graph_cache_stats": (st, [vp, POINTER(GraphStats)]),
    "kp_graph_cache_report": (c_char_p, [vp, c_char_p, sz]),
    # tasks
    "kp_tasks_create": (st, [vp, sz, PV]),
    "kp_tasks_destroy": (None, [vp]),
    "kp_tasks_buffer": (st, [vp, sz, POINTER(c_uint32)]),
    "kp_tasks_buffer_wrap": (st, [vp, vp, sz, POINTER(c_uint32)]),
    "kp_tasks_buffer_data": (st, [vp, c_uint32, PV]),
    "kp_tasks_submit": (st, [vp, POINTER(TaskKernel), POINTER(TaskArg), sz, POINTER(c_uint64)]),
    "kp_tasks_run": (st, [vp, vp]),
    "kp_tasks_instantiate": (st, [vp]),
    "kp_tasks_launch": (st, [vp, vp]),
    "kp_tasks_edges": (st, [vp, POINTER(TaskEdge), sz, POINTER(c_size_t)]),
    "kp_tasks_stats_get": (st, [vp, POINTER(TasksStats)]),
    "kp_tasks_write_dot": (st, [vp, c_char_p]),
    # video files
    "kp_video_built": (c_bool, []),
    "kp_video_reader_open": (st, [vp, c_char_p, POINTER(VideoReaderConfig), PV]),
    "kp_video_reader_get_info": (st, [vp, POINTER(VideoReaderInfo)]),
    "kp_video_reader_next": (st, [vp, vp, vp, sz, POINTER(VideoFrame), POINTER(c_bool)]),
    "kp_video_reader_count": (st, [vp, POINTER(c_int64)]),
    "kp_video_reader_seek": (st, [vp, c_int64]),
    "kp_video_reader_frame_at": (st, [vp, ctypes.c_double, POINTER(c_int64)]),
    "kp_video_reader_close": (None, [vp]),
    # flows
    "kp_flow_create": (st, [POINTER(FlowConfig), PV]),
    "kp_flow_create_from_json": (st, [vp, c_char_p, PV]),
    "kp_flow_create_from_json_with": (st, [vp, c_char_p, POINTER(FlowStage), sz, PV]),
    "kp_flow_create_from_file_traced": (st, [vp, c_char_p, sz, PV]),
    "kp_flow_start": (st, [vp]),
    "kp_flow_wait": (st, [vp]),
    "kp_flow_cancel": (st, [vp]),
    "kp_flow_cancelled": (c_bool, [vp]),
    "kp_flow_health_json": (st, [vp, c_char_p, sz, POINTER(c_size_t)]),
    "kp_flow_write_trace": (st, [vp, c_char_p]),
    "kp_flow_write_dot": (st, [vp, c_char_p]),
    "kp_flow_destroy": (None, [vp]),
}
for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args

# kp_flow_health takes a kp_flow_snapshot, a large structure read here only
# as JSON (kp_flow_health_json): its size, generously.
FLOW_SNAPSHOT_BYTES = 1 << 18  # health_json.c asserts it holds one
lib.kp_flow_health.restype = c_int
lib.kp_flow_health.argtypes = [vp, vp]


def last_error():
    d = lib.kp_last_error()
    return d.decode(errors="replace") if d else ""


def check(status, what=None):
    """Raises Error for a failed status, with the library's detail."""
    if status != 0:
        detail = last_error() or what or "no detail"
        raise Error(status, detail)


def raise_failed(status, cause=None):
    """Raises Error for a failed status with the library's detail, chained
    to the Python exception a callback raised (if one did)."""
    err = Error(status, last_error() or "no detail")
    if cause is not None:
        raise err from cause
    raise err


def set_error(status, detail):
    """Records a detail as the library's own (for a callback that fails), and
    returns the status's value."""
    code = STATUS[status] if isinstance(status, str) else int(status)
    lib.kp_set_error(code, b"%s", detail.encode(errors="replace")[:900])
    return code


def fill_desc(desc, dtype, shape, strides=None, offset=0):
    """A kp_tensor_desc from Python values, checked by the library."""
    if len(shape) > MAX_DIMS:
        raise Error("KP_ERR_INVALID_ARG", "%d dimensions; kpipe takes at most %d"
                    % (len(shape), MAX_DIMS))
    desc.dtype = DTYPES[dtype][0] if isinstance(dtype, str) else int(dtype)
    desc.ndim = len(shape)
    if strides is None:
        strides, acc = [0] * len(shape), 1
        for i in range(len(shape) - 1, -1, -1):
            strides[i] = acc
            acc *= int(shape[i])
    for i in range(len(shape)):
        desc.shape[i] = int(shape[i])
        desc.strides[i] = int(strides[i])
    for i in range(len(shape), MAX_DIMS):
        desc.shape[i] = 0
        desc.strides[i] = 0
    desc.offset = int(offset)
    check(lib.kp_desc_validate(ctypes.byref(desc)))
    return desc


def desc_shape(desc):
    return tuple(desc.shape[:desc.ndim])


def desc_strides(desc):
    return tuple(desc.strides[:desc.ndim])


__all__ = ["Error", "lib", "check", "set_error", "fill_desc", "desc_shape", "desc_strides"]
