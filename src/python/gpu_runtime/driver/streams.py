"""Streams: reading any stream object as a raw `CUstream`, and a small owned `Stream`.

Kernels, copies and graph capture take a stream as a cuda.core `Stream`, anything with
`__cuda_stream__` (the CUDA stream protocol), a CuPy/numba stream (`.ptr`/`.handle`), a raw
handle (int) or None (the legacy default stream). `Stream` is what the runtime creates itself
when asked (`KernelCache.create_stream()`), so that capturing a graph needs no other library.
"""

from __future__ import annotations

import weakref
from typing import Any

from gpu_runtime.errors import DeviceError


def stream_handle(stream: Any) -> int:
    """The raw CUstream handle of `stream` (0: the legacy default stream)."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise DeviceError("a bool is not a CUDA stream")
    if isinstance(stream, int):
        return stream
    try:
        proto = stream.__cuda_stream__
    except AttributeError:
        proto = None
    if proto is not None:
        return int(proto()[1])
    for attr in ("handle", "ptr"):
        h = getattr(stream, attr, None)
        if h is not None:
            try:
                return int(getattr(h, "value", h) or 0)
            except (TypeError, ValueError):
                break
    raise DeviceError(
        f"cannot use {type(stream).__name__} as a CUDA stream (expected a cuda.core Stream, an "
        f"object with __cuda_stream__, a CuPy/numba stream, a raw handle or None)"
    )


def _destroy(handle: int) -> None:
    try:
        from cuda.bindings import driver

        driver.cuStreamDestroy(handle)
    except Exception:  # interpreter shutdown, context gone: nothing useful to do
        pass


class Stream:
    """A non-blocking CUDA stream owned by this object (destroyed when it is collected).

    The primary context must be current (`CudaBackend.create_stream` makes it so).
    """

    __slots__ = ("handle", "_finalizer", "__weakref__")

    def __init__(self) -> None:
        from gpu_runtime.driver.device import check, driver_api

        drv = driver_api()
        flags = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
        self.handle = int(check(drv.cuStreamCreate(flags), "cuStreamCreate"))
        self._finalizer = weakref.finalize(self, _destroy, self.handle)

    def __cuda_stream__(self):
        return (0, self.handle)

    def synchronize(self) -> None:
        from gpu_runtime.driver.device import check, driver_api

        check(driver_api().cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def __repr__(self) -> str:
        return f"<gpu_runtime.Stream 0x{self.handle:x}>"
