"""`DeviceArray`: a minimal device array for apps that have no CuPy, numba or torch.

It owns one `cuMemAlloc` allocation (freed when the object is garbage collected, or by
`free()`), is always C-contiguous, and exposes `__cuda_array_interface__` (v3), so kernels, and
CuPy/numba/torch if present, accept it::

    x = DeviceArray.from_numpy(np.arange(10, dtype=np.float32))
    out = DeviceArray.empty(10, np.float32)
    cache.kernel("saxpy").launch(1, 32, out, np.float32(2), x, x)
    out.to_numpy()

Copies are ordered on `stream` (default: the legacy default stream) and finish before
`from_numpy`/`to_numpy` return.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from gpu_runtime.driver.device import check, driver_api, ensure_context
from gpu_runtime.driver.streams import stream_handle


def _ensure_context(device: Optional[int]) -> int:
    """Make `device`'s primary context current on this thread; return its ordinal."""
    return ensure_context(device)


def _free(ptr: int, device: int) -> None:
    try:
        _ensure_context(device)
        driver_api().cuMemFree(ptr)
    except Exception:  # interpreter shutdown, context gone: nothing useful to do
        pass


def _c_order(array: Any, dtype: Any = None) -> np.ndarray:
    """`array` as a C-contiguous numpy array of its own shape. Not `np.ascontiguousarray`,
    which promotes a 0-d array to shape (1,): numba's `cuda.to_device(np.float32(1))` keeps
    shape (), and a kernel typed `array(float32, 0d, C)` is dispatched on exactly that."""
    return np.asarray(array, dtype=dtype, order="C")


class DeviceArray:
    """A C-contiguous array in device memory. See the module docstring."""

    # _launch: what the launch fast path reads of this array, derived from the interface dict
    # (`gpu_runtime.launch.plan.device_array_entry`); dropped with it by `free()`.
    __slots__ = (
        "shape",
        "dtype",
        "_ptr",
        "_device",
        "_finalizer",
        "_cai",
        "_launch",
        "__weakref__",
    )

    def __init__(
        self,
        shape: Union[int, Sequence[int]],
        dtype: Any = np.float32,
        *,
        device: Optional[int] = None,
    ) -> None:
        self.shape: Tuple[int, ...] = (
            (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
        )
        if any(n < 0 for n in self.shape):
            raise ValueError(f"negative dimension in shape {self.shape}")
        self.dtype = np.dtype(dtype)
        if self.dtype.hasobject:
            raise TypeError("object arrays cannot live on the device")
        self._device = _ensure_context(device)
        self._cai: Optional[dict] = None
        self._launch: Optional[tuple] = None
        self._ptr = 0
        nbytes = self.nbytes
        if nbytes:
            ptr = check(driver_api().cuMemAlloc(nbytes), f"cuMemAlloc({nbytes})")
            self._ptr = int(ptr)
        self._finalizer = (
            weakref.finalize(self, _free, self._ptr, self._device) if self._ptr else None
        )

    # -- constructors -----------------------------------------------------------------------
    @classmethod
    def empty(
        cls,
        shape: Union[int, Sequence[int]],
        dtype: Any = np.float32,
        *,
        device: Optional[int] = None,
    ) -> "DeviceArray":
        return cls(shape, dtype, device=device)

    @classmethod
    def zeros(
        cls,
        shape: Union[int, Sequence[int]],
        dtype: Any = np.float32,
        *,
        device: Optional[int] = None,
        stream: Any = None,
    ) -> "DeviceArray":
        arr = cls(shape, dtype, device=device)
        if arr.nbytes:
            h = stream_handle(stream)
            d = driver_api()
            check(d.cuMemsetD8Async(arr._ptr, 0, arr.nbytes, d.CUstream(h)), "cuMemsetD8Async")
            check(d.cuStreamSynchronize(d.CUstream(h)), "cuStreamSynchronize")
        return arr

    @classmethod
    def from_numpy(
        cls, array: Any, *, device: Optional[int] = None, stream: Any = None
    ) -> "DeviceArray":
        host = _c_order(array)
        arr = cls(host.shape, host.dtype, device=device)
        arr.copy_from_numpy(host, stream=stream)
        return arr

    # -- copies -----------------------------------------------------------------------------
    def copy_from_numpy(self, array: Any, *, stream: Any = None) -> None:
        host = _c_order(array, self.dtype)
        if host.shape != self.shape:
            raise ValueError(f"shape mismatch: device {self.shape}, host {host.shape}")
        if not self.nbytes:
            return
        _ensure_context(self._device)
        d = driver_api()
        s = d.CUstream(stream_handle(stream))
        check(d.cuMemcpyHtoDAsync(self._ptr, host.ctypes.data, self.nbytes, s), "cuMemcpyHtoDAsync")
        check(d.cuStreamSynchronize(s), "cuStreamSynchronize")  # `host` may be a temporary

    def to_numpy(self, *, stream: Any = None) -> np.ndarray:
        """Copy to a new numpy array, after the work queued on `stream` (default: legacy default
        stream, which waits for the blocking streams; pass the stream you launched on if it is a
        non-blocking one)."""
        out = np.empty(self.shape, dtype=self.dtype)
        if not self.nbytes:
            return out
        _ensure_context(self._device)
        d = driver_api()
        s = d.CUstream(stream_handle(stream))
        check(d.cuMemcpyDtoHAsync(out.ctypes.data, self._ptr, self.nbytes, s), "cuMemcpyDtoHAsync")
        check(d.cuStreamSynchronize(s), "cuStreamSynchronize")
        return out

    def free(self) -> None:
        """Release the device memory now (the array must no longer be used by any kernel)."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._ptr = 0
        self._cai = None
        self._launch = None

    # -- properties -------------------------------------------------------------------------
    @property
    def ptr(self) -> int:
        return self._ptr

    @property
    def device_id(self) -> int:
        return self._device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def strides(self) -> Tuple[int, ...]:
        out, acc = [], self.dtype.itemsize
        for n in reversed(self.shape):
            out.append(acc)
            acc *= n
        return tuple(reversed(out))

    @property
    def __cuda_array_interface__(self) -> dict:
        """Built once (read by every launch; consumers must not modify it)."""
        if self._cai is not None:
            return self._cai
        if self.nbytes and not self._ptr:
            raise ValueError("DeviceArray was freed")
        self._cai = {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "descr": self.dtype.descr if self.dtype.fields else [("", self.dtype.str)],
            "data": (self._ptr, False),
            "strides": None,
            "version": 3,
            "stream": None,  # copies are synchronous; kernels order themselves on their stream
        }
        return self._cai

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def __repr__(self) -> str:
        return (
            f"DeviceArray(shape={self.shape}, dtype={self.dtype}, ptr=0x{self._ptr:x}, "
            f"device={self._device})"
        )
