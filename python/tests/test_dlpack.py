"""DLPack both ways, both protocols, and the lifetimes of what crosses."""
import ctypes
import gc

import numpy as np
import pytest

import kpipe
from kpipe import _dlpack
from conftest import same_strides


def relu(n):
    return kpipe.Pipeline({"kpipe_spec": 1, "modules": [{"type": "relu", "id": "r", "params":
                           {"size": n}}], "inputs": {"x": "r.input"},
                           "outputs": {"y": "r.output"}})


def test_both_capsules():
    p = relu(5)
    y = p(x=np.array([-2, -1, 0, 1, 2], np.float32))["y"]
    assert y.__dlpack_device__() == (1, 0)
    old = y.__dlpack__()  # DLPack 0.6, as NumPy 1.24 asks
    new = y.__dlpack__(max_version=(1, 0))
    assert _dlpack._py.PyCapsule_GetName(old) == b"dltensor"
    assert _dlpack._py.PyCapsule_GetName(new) == b"dltensor_versioned"
    assert kpipe.live_exports() == 2
    t_old = _dlpack.import_tensor(type("P", (), {"__dlpack__": lambda s, stream=None: old})())
    t_new = _dlpack.import_tensor(type("P", (), {"__dlpack__": lambda s, stream=None,
                                                 max_version=None: new})())
    for t in (t_old, t_new):
        assert t.dtype == "f32" and t.shape == (5,) and t.strides == (1,) and t.ptr == y.ptr
        got = (ctypes.c_float * 5).from_address(t.ptr)
        assert list(got) == [0, 0, 0, 1, 2]
    del t, t_old, t_new, old, new
    gc.collect()
    assert kpipe.live_exports() == 0


def test_unconsumed_capsule_frees_its_tensor():
    y = relu(3)(x=np.ones(3, np.float32))["y"]
    for v in (None, (1, 0)):
        cap = y.__dlpack__(max_version=v)
        assert kpipe.live_exports() == 1
        del cap
        assert kpipe.live_exports() == 0


def test_a_capsule_is_taken_once():
    y = relu(3)(x=np.ones(3, np.float32))["y"]
    cap = y.__dlpack__()
    producer = type("P", (), {"__dlpack__": lambda s, stream=None: cap})()
    a = _dlpack.import_tensor(producer)
    with pytest.raises(kpipe.Error) as e:
        _dlpack.import_tensor(producer)
    assert "used" in e.value.detail
    del a


def test_export_refusals():
    y = relu(3)(x=np.ones(3, np.float32))["y"]
    with pytest.raises(BufferError):
        y.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        y.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        y.__dlpack__(stream=5)  # host memory takes no stream
    assert kpipe.live_exports() == 0


def test_numpy_views_of_every_dtype():
    # a pipeline that casts, so outputs of several dtypes come back
    for to, npt in (("i32", np.int32), ("f16", np.float16), ("u8", np.uint8)):
        p = kpipe.Pipeline({"kpipe_spec": 1, "modules": [{"type": "cast", "id": "c", "params": {
            "size": 9, "from": "f32", "to": to}}], "inputs": {"x": "c.input"},
            "outputs": {"y": "c.output"}})
        x = np.arange(9, dtype=np.float32) * 3
        y = p(x=x)["y"]
        assert y.dtype == to and y.nbytes == 9 * np.dtype(npt).itemsize
        np.testing.assert_array_equal(np.from_dlpack(y), x.astype(npt))


def test_numpy_read_in_place_as_dlpack_would():
    # what the direct read gives is what the exchange gives, field by field
    base = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    arrays = [base, base[:, 1], base[..., ::2], base.transpose(3, 0, 2, 1),
              np.array(7, np.float32), np.zeros(0, np.int16), np.arange(9, dtype=np.uint8)[1:],
              np.arange(5, dtype=np.int64), np.arange(5, dtype=np.uint64),
              np.ones(3, np.float16), np.ones(1, np.int8), np.ones(4, np.int32)]
    for a in arrays:
        d = _dlpack.direct(a, None)
        x = _dlpack.import_tensor(a)
        assert d is not None, a.dtype
        assert (d.ptr, d.dtype, d.shape, d.device_type, d.device_id, d.read_only) == \
            (x.ptr, x.dtype, x.shape, x.device_type, x.device_id, x.read_only)
        assert same_strides(d.shape, d.strides, x.strides), (a.shape, d.strides, x.strides)
    # where the producer has a word to say, the exchange decides
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    odd = np.ndarray((3,), np.float32, np.zeros(16, np.uint8).data, 1, (5,))  # 5-byte strides
    for a in (ro, np.ones(4, ">f4"), np.ones(4, np.float32)[::-1], odd, np.ones(3, np.float64),
              np.ones(3, bool), [1.0, 2.0]):
        assert _dlpack.direct(a, None) is None


def test_numpy_inputs_kept_until_their_tick_is_done():
    # the direct read holds the array itself: dropped by the caller, it
    # lives until the tick that reads it has passed
    import weakref
    p = relu(1 << 16)
    x = np.full(1 << 16, -1.0, np.float32)
    for k in range(20):  # more ticks than one event covers
        x = np.full(1 << 16, k - 10.0, np.float32)
        y = p(x=x)["y"]
    w = weakref.ref(x)
    del x
    p.sync()
    gc.collect()
    assert w() is None
    np.testing.assert_array_equal(np.from_dlpack(y), np.full(1 << 16, 9.0, np.float32))
