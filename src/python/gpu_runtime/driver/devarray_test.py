"""DeviceArray against a fake driver whose "device memory" is host memory (no GPU needed).

The real driver calls run on a GPU: the self-test (`app.pex --self-test`) and tests/gpu/.
"""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

from gpu_runtime.driver import devarray
from gpu_runtime.driver.devarray import DeviceArray, stream_handle
from gpu_runtime.errors import DeviceError
from gpu_runtime.launch.arrays import array_view
from gpu_runtime_testutil.fake_driver import FakeDriver


@pytest.fixture
def driver(monkeypatch):
    d = FakeDriver()
    monkeypatch.setattr(devarray, "driver_api", lambda: d)
    monkeypatch.setattr(devarray, "_ensure_context", lambda device: 0 if device is None else device)
    return d


def test_round_trip(driver):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    d = DeviceArray.from_numpy(a)
    assert (d.shape, d.dtype, d.nbytes, d.strides, d.ndim, len(d)) == (
        (2, 3, 4),
        np.float32,
        96,
        (48, 16, 4),
        3,
        2,
    )
    np.testing.assert_array_equal(d.to_numpy(), a)


def test_non_contiguous_input_is_copied_contiguous(driver):
    a = np.arange(20, dtype=np.int32).reshape(4, 5)[:, ::2]
    np.testing.assert_array_equal(DeviceArray.from_numpy(a).to_numpy(), a)


def test_cuda_array_interface(driver):
    d = DeviceArray.from_numpy(np.zeros((3, 4), np.float64))
    cai = d.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f8" and cai["strides"] is None
    assert cai["data"] == (d.ptr, False) and cai["version"] == 3
    view = array_view(d)
    assert view is not None
    assert (view.ptr, view.strides, view.layout) == (d.ptr, (32, 8), "C")


def test_zeros_empty_and_streams(driver):
    z = DeviceArray.zeros(5, np.uint8, stream=7)
    assert z.to_numpy().tolist() == [0] * 5
    assert 7 in driver.syncs
    e = DeviceArray.empty((0, 3), np.float32)
    assert e.ptr == 0 and e.to_numpy().shape == (0, 3)


def test_free_and_gc(driver):
    d = DeviceArray.from_numpy(np.ones(4, np.float32))
    ptr = d.ptr
    d.free()
    assert driver.freed == [ptr] and d.ptr == 0
    with pytest.raises(ValueError, match="freed"):
        _ = d.__cuda_array_interface__
    d.free()  # idempotent
    e = DeviceArray.from_numpy(np.ones(4, np.float32))
    ptr = e.ptr
    del e
    gc.collect()
    assert driver.freed[-1] == ptr


@pytest.mark.parametrize(
    "host", [np.float32(2.5), np.array(2.5, np.float32), np.array([[2.5]], np.float32)[0, 0]]
)
def test_zero_d_arrays_keep_shape_empty(driver, host):
    """As numba's `cuda.to_device`: a 0-d array (or numpy scalar) stays 0-d, one element."""
    d = DeviceArray.from_numpy(host)
    assert (d.shape, d.ndim, d.size, d.nbytes, d.strides) == ((), 0, 1, 4, ())
    back = d.to_numpy()
    assert back.shape == () and back.dtype == np.float32 and back[()] == np.float32(2.5)
    view = array_view(d)
    assert view is not None and (view.shape, view.strides, view.size) == ((), (), 1)
    with pytest.raises(TypeError, match="0-d"):
        len(d)


def test_zero_d_empty_zeros_and_copies(driver):
    e = DeviceArray.empty(())
    assert e.shape == () and e.nbytes == 4 and e.ptr != 0
    e.copy_from_numpy(np.array(7, np.int64))  # converted to the array's dtype, as 1-d copies
    assert e.to_numpy()[()] == np.float32(7)
    e.copy_from_numpy(3.0)
    assert e.to_numpy()[()] == np.float32(3)
    assert DeviceArray.zeros((), np.int32).to_numpy().tolist() == 0
    for wrong in (np.zeros(1, np.float32), np.zeros((1, 1), np.float32)):
        with pytest.raises(ValueError, match=r"shape mismatch: device \(\), host \(1,"):
            e.copy_from_numpy(wrong)
    with pytest.raises(ValueError, match=r"shape mismatch: device \(1,\), host \(\)"):
        DeviceArray.empty(1).copy_from_numpy(np.float32(1))


def test_copy_shape_mismatch(driver):
    d = DeviceArray.empty(4, np.float32)
    with pytest.raises(ValueError, match="shape mismatch"):
        d.copy_from_numpy(np.zeros(5, np.float32))


def test_stream_handle():
    class CoreStream:
        def __cuda_stream__(self):
            return (0, 1234)

    class CupyStream:
        ptr = 99

    class NumbaStream:
        handle = ctypes.c_void_p(77)

    assert stream_handle(None) == 0
    assert stream_handle(5) == 5
    assert stream_handle(CoreStream()) == 1234
    assert stream_handle(CupyStream()) == 99
    assert stream_handle(NumbaStream()) == 77
    with pytest.raises(DeviceError, match="cannot use object as a CUDA stream"):
        stream_handle(object())


def test_rejects_object_dtype_and_negative_shape(driver):
    with pytest.raises(TypeError):
        DeviceArray.empty(3, object)
    with pytest.raises(ValueError):
        DeviceArray.empty((-1,), np.float32)
