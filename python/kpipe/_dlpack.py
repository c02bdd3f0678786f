"""DLPack: tensors in (any object with __dlpack__) and out (kpipe.Array).

Both protocols are spoken: the unversioned capsule ("dltensor", DLPack 0.6,
what NumPy 1.24 makes) and the versioned one ("dltensor_versioned", DLPack
1.0), asked for with max_version=(1, 0) and taken when the producer gives it.
A consumed capsule is renamed "used_..." and its deleter is called once,
when kpipe lets go of the tensor.
"""
import ctypes
import sys
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int32, c_int64, c_uint8,
                    c_uint16, c_uint32, c_uint64, c_void_p)

from ._lib import DTYPES, Error

CPU, CUDA, CUDA_HOST, CUDA_MANAGED = 1, 2, 3, 13
DEVICE_NAMES = {CPU: "cpu", CUDA: "cuda", CUDA_HOST: "cuda_host", CUDA_MANAGED: "cuda_managed",
                4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi", 10: "rocm", 11: "rocm_host",
                14: "oneapi"}
READ_ONLY = 1


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    pass


DELETER = CFUNCTYPE(None, POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", DELETER)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    pass


DELETER_V = CFUNCTYPE(None, POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p),
                                     ("deleter", DELETER_V), ("flags", c_uint64),
                                     ("dl_tensor", DLTensor)]

# (code, bits) -> kpipe dtype name; codes: 0 int, 1 uint, 2 float, 4 bfloat
_FROM_DL = {(2, 32): "f32", (2, 16): "f16", (4, 16): "bf16", (0, 32): "i32", (0, 16): "i16",
            (0, 8): "i8", (1, 8): "u8", (0, 64): "i64", (1, 64): "u64", (1, 16): "u16"}
_TO_DL = {v: k for k, v in _FROM_DL.items()}
_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex",
               6: "bool", 7: "float8 (e3m4)"}

_py = ctypes.pythonapi
_py.PyCapsule_New.restype = ctypes.py_object
_py.PyCapsule_New.argtypes = [c_void_p, c_char_p, c_void_p]
_py.PyCapsule_GetName.restype = c_char_p
_py.PyCapsule_GetName.argtypes = [ctypes.py_object]
_py.PyCapsule_GetPointer.restype = c_void_p
_py.PyCapsule_GetPointer.argtypes = [ctypes.py_object, c_char_p]
_py.PyCapsule_SetName.restype = ctypes.c_int
_py.PyCapsule_SetName.argtypes = [ctypes.py_object, c_char_p]
# the capsule destructor gets a raw PyObject*: these take it as such
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, c_void_p, c_char_p)(
    ("PyCapsule_IsValid", _py))
_capsule_pointer = ctypes.PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(("PyCapsule_GetPointer", _py))


# Capsule names: the capsule keeps a pointer to its name, never a copy, so
# these live as long as the module.
NAME, NAME_V = b"dltensor", b"dltensor_versioned"
_USED = {NAME: b"used_dltensor", NAME_V: b"used_dltensor_versioned"}


class Imported:
    """A tensor taken from a producer: its first element's address, dtype,
    shape and strides (in elements), device, and the producer's managed
    tensor, whose deleter runs when this object goes."""
    __slots__ = ("ptr", "dtype", "shape", "strides", "device_type", "device_id", "read_only",
                 "_managed", "_versioned", "_owner", "__weakref__")

    def __del__(self):
        m, self._managed = self._managed, None
        if m:
            if self._versioned:
                t = ctypes.cast(m, POINTER(DLManagedTensorVersioned))
            else:
                t = ctypes.cast(m, POINTER(DLManagedTensor))
            if t.contents.deleter:
                t.contents.deleter(t)

    @property
    def contiguous(self):
        acc = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and s != acc:
                return False
            acc *= n
        return True


def _dlpack_capsule(obj, stream):
    """The producer's capsule, versioned where it speaks DLPack 1.0."""
    f = getattr(obj, "__dlpack__", None)
    if f is None:
        raise Error("KP_ERR_INVALID_ARG", "a %s has no __dlpack__: kpipe takes tensors through "
                    "DLPack (NumPy, PyTorch, CuPy arrays, kpipe.Array)" % type(obj).__name__)
    try:
        try:
            return f(stream=stream, max_version=(1, 0))
        except TypeError:  # a producer of DLPack 0.6 (NumPy 1.24)
            return f(stream=stream) if stream is not None else f()
    except BufferError as e:  # what the producer cannot export (NumPy's bool)
        raise Error("KP_ERR_UNSUPPORTED", "the %s cannot be taken through DLPack (bool?): %s"
                    % (type(obj).__name__, e)) from e


# --- in place, without the exchange ---------------------------------------------------
# A NumPy array or a PyTorch tensor says all DLPack would, in its own
# attributes; asking it through the capsule costs tens of microseconds a
# tensor (PyTorch's export, then ctypes reading the structures back). Where
# the exchange would only restate those attributes, direct() reads them:
# the same record, holding the object itself. Anything else, and every case
# where the producer has a word to say, goes through the exchange: a tensor
# that requires grad, or carries a conjugate or negative bit, a dtype the
# map below lacks, a read-only NumPy array, and a CUDA tensor whose stream is
# not the consumer's (there PyTorch orders the two streams).
_NUMPY_DTYPES = {"<f4": "f32", "<f2": "f16", "<i4": "i32", "<i2": "i16", "|i1": "i8",
                 "|u1": "u8", "<i8": "i64", "<u8": "u64", "<u2": "u16"}
_torch_dtypes = None


def _torch_map(torch):
    global _torch_dtypes
    if _torch_dtypes is None:
        m = {}
        for attr, name in (("float32", "f32"), ("float16", "f16"), ("bfloat16", "bf16"),
                           ("int32", "i32"), ("int16", "i16"), ("int8", "i8"), ("uint8", "u8"),
                           ("int64", "i64"), ("uint64", "u64"), ("uint16", "u16")):
            dt = getattr(torch, attr, None)
            if dt is not None:
                m[dt] = name
        _torch_dtypes = m
    return _torch_dtypes


_torch_raw = None


def torch_raw_stream(torch):
    """index -> the raw handle of PyTorch's current stream on that device,
    without making a torch.cuda.Stream object: torch.cuda.current_stream()
    costs about 6 us a call (H200 host), this 0.1-0.2. The public call where
    the build lacks the private one."""
    global _torch_raw
    if _torch_raw is None:
        _torch_raw = getattr(torch._C, "_cuda_getCurrentRawStream", None) or \
            (lambda index: torch.cuda.current_stream(index).cuda_stream)
    return _torch_raw


def _canonical(shape):
    """Row-major strides, in elements."""
    acc, s = 1, []
    for n in reversed(shape):
        s.append(acc)
        acc *= n
    return tuple(reversed(s))


def _record(obj, ptr, dtype, shape, strides, device_type, device_id):
    t = Imported()
    t._managed, t._versioned, t._owner, t.read_only = None, False, obj, False
    t.ptr, t.dtype, t.shape, t.strides = ptr, dtype, shape, strides
    t.device_type, t.device_id = device_type, device_id
    return t


def direct(obj, stream):
    """The record of a NumPy array or PyTorch tensor read in place, or None
    where the DLPack exchange must decide. `stream` as for import_tensor."""
    np = sys.modules.get("numpy")
    if np is not None and type(obj) is np.ndarray:
        name = _NUMPY_DTYPES.get(obj.dtype.str)
        if name is None or not obj.flags.writeable or obj.ndim > 8:
            return None
        if obj.flags.c_contiguous:  # exported without strides: the canonical ones
            strides = _canonical(obj.shape)
        else:
            size = obj.itemsize
            if any(st < 0 or st % size for st in obj.strides):
                return None
            strides = tuple(st // size for st in obj.strides)
        return _record(obj, obj.__array_interface__["data"][0], name, obj.shape, strides, CPU, 0)
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        return None
    if obj.requires_grad or obj.layout is not torch.strided or obj.is_conj() or obj.is_neg() \
            or obj.dim() > 8:
        return None
    name = _torch_map(torch).get(obj.dtype)
    if name is None:
        return None
    where = obj.device
    if where.type == "cuda":
        # the same stream both sides: DLPack would add no ordering
        if stream is None or torch_raw_stream(torch)(where.index) != stream:
            return None
        kind, index = CUDA, where.index
    elif where.type == "cpu":
        kind, index = CPU, 0
    else:
        return None
    # the tensor's own strides: where PyTorch's export differs (a dimension
    # of one element or none, whose stride means nothing, and which some
    # versions rewrite), kpipe reads the two the same (kp_desc_is_contiguous)
    return _record(obj, obj.data_ptr(), name, tuple(obj.shape), obj.stride(), kind, index)


def import_tensor(obj, stream=None):
    """Takes `obj` through DLPack without a copy. `stream` is the consumer's
    stream (a native handle; None for host memory), on which the producer
    makes the data ready."""
    cap = _dlpack_capsule(obj, stream)
    name = _py.PyCapsule_GetName(cap)
    if name == NAME_V:
        mt = ctypes.cast(_py.PyCapsule_GetPointer(cap, name), POINTER(DLManagedTensorVersioned))
        versioned = True
        if mt.contents.version.major > 1:
            raise Error("KP_ERR_UNSUPPORTED", "DLPack %d.%d: kpipe reads 1.x and 0.6"
                        % (mt.contents.version.major, mt.contents.version.minor))
    elif name == NAME:
        mt = ctypes.cast(_py.PyCapsule_GetPointer(cap, name), POINTER(DLManagedTensor))
        versioned = False
    else:
        raise Error("KP_ERR_INVALID_ARG", "a DLPack capsule named %r (used already?)" % name)
    # from here the tensor is ours: its deleter runs when `t` goes
    name = NAME_V if versioned else NAME
    _py.PyCapsule_SetName(cap, _USED[name])
    t = Imported()
    t._managed, t._versioned = ctypes.cast(mt, c_void_p).value, versioned
    dl = mt.contents.dl_tensor
    t.read_only = bool(versioned and mt.contents.flags & READ_ONLY)
    t.device_type, t.device_id = dl.device.device_type, dl.device.device_id
    dt = dl.dtype
    if dt.lanes != 1:
        raise Error("KP_ERR_UNSUPPORTED", "a vector dtype (%d lanes): kpipe takes scalars"
                    % dt.lanes)
    kd = _FROM_DL.get((dt.code, dt.bits))
    if kd is None:
        raise Error("KP_ERR_UNSUPPORTED", "dtype %s%d: kpipe takes %s"
                    % (_CODE_NAMES.get(dt.code, "code %d" % dt.code), dt.bits,
                       ", ".join(DTYPES)))
    t.dtype = kd
    if dl.ndim < 0 or dl.ndim > 8:
        raise Error("KP_ERR_UNSUPPORTED", "%d dimensions; kpipe takes at most 8" % dl.ndim)
    t.shape = tuple(dl.shape[i] for i in range(dl.ndim))
    if dl.strides:
        t.strides = tuple(dl.strides[i] for i in range(dl.ndim))
    else:
        t.strides = _canonical(t.shape)
    if any(s < 0 for s in t.strides):
        raise Error("KP_ERR_UNSUPPORTED", "strides %s: kpipe takes non-negative strides (a "
                    "flipped view); copy it first" % (t.strides,))
    t.ptr = (dl.data or 0) + dl.byte_offset
    return t


# --- export ---------------------------------------------------------------------------
# Managed tensors handed out and not yet deleted: address -> what keeps the
# memory and the structure alive (the consumer's deleter drops it).
_live = {}


def _drop(addr):
    _live.pop(addr, None)


@DELETER
def _deleter(mt):
    _drop(ctypes.addressof(mt.contents))


@DELETER_V
def _deleter_v(mt):
    _drop(ctypes.addressof(mt.contents))


@ctypes.CFUNCTYPE(None, c_void_p)
def _capsule_destructor(capsule):
    # a capsule never consumed still owns its tensor
    for name, kind in ((NAME, DLManagedTensor), (NAME_V, DLManagedTensorVersioned)):
        if _capsule_is_valid(capsule, name):
            addr = _capsule_pointer(capsule, name)
            mt = ctypes.cast(addr, POINTER(kind))
            mt.contents.deleter(mt)
            return


def export_tensor(ptr, dtype, shape, strides, device_type, device_id, owner, versioned,
                  read_only=False):
    """A capsule over memory kpipe owns; `owner` stays alive until the
    consumer's deleter runs."""
    n = len(shape)
    dims = (c_int64 * max(n, 1))(*shape)
    steps = (c_int64 * max(n, 1))(*strides)
    if versioned:
        mt = DLManagedTensorVersioned()
        mt.version.major, mt.version.minor = 1, 0
        mt.deleter = _deleter_v
        mt.flags = READ_ONLY if read_only else 0
        name = NAME_V
    else:
        mt = DLManagedTensor()
        mt.deleter = _deleter
        name = NAME
    dl = mt.dl_tensor
    dl.data = ptr
    dl.device.device_type, dl.device.device_id = device_type, device_id
    dl.ndim = n
    code, bits = _TO_DL[dtype]
    dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = code, bits, 1
    dl.shape = ctypes.cast(dims, POINTER(c_int64))
    dl.strides = ctypes.cast(steps, POINTER(c_int64))
    dl.byte_offset = 0
    addr = ctypes.addressof(mt)
    _live[addr] = (mt, dims, steps, owner)
    return _py.PyCapsule_New(addr, name, ctypes.cast(_capsule_destructor, c_void_p))


def live_exports():
    """Managed tensors handed out whose consumers hold them still."""
    return len(_live)
