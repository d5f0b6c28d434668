"""`ParamBuffer`: a kernel's parameter image in C memory, plus the `void**` the driver reads.

`cuLaunchKernel(..., kernelParams, ...)` takes an array of N pointers, one to each parameter's
bytes; the driver copies the values before it returns (also while a stream is being captured
into a graph), so one buffer can be rewritten for the next launch as soon as the call is back.
A buffer is allocated once per (launch plan, thread) and then only its changing bytes are
rewritten (`gpu_runtime.launch.plan`).
"""

from __future__ import annotations

import ctypes
from typing import Optional, Sequence, Tuple

from gpu_runtime.launch.params import PackedArgs


class ParamBuffer:
    """`data`: the parameters laid out at `offsets`; `address`: the `void**` (0 if none).

    `arrays`: the `DeviceArray` entries whose values the image holds (kept alive, so compared by
    identity), set by a launch plan's repack after it wrote them; None when unknown.
    `scalars`: likewise the scalar objects whose values it holds, beside those arrays.
    """

    __slots__ = ("data", "pointers", "address", "offsets", "sizes", "nbytes", "arrays", "scalars")

    def __init__(self, offsets: Sequence[int], sizes: Sequence[int], nbytes: int) -> None:
        self.offsets: Tuple[int, ...] = tuple(offsets)
        self.sizes: Tuple[int, ...] = tuple(sizes)
        self.nbytes = nbytes
        self.data = ctypes.create_string_buffer(max(nbytes, 1))
        base = ctypes.addressof(self.data)
        n = len(self.offsets)
        self.pointers = (ctypes.c_void_p * max(n, 1))(*[base + o for o in self.offsets])
        self.address = ctypes.addressof(self.pointers) if n else 0
        self.arrays: Optional[tuple] = None
        self.scalars: Optional[tuple] = None

    @classmethod
    def from_packed(cls, packed: PackedArgs) -> "ParamBuffer":
        """A buffer holding `packed`'s image (the slow path's launch)."""
        image = packed.image
        buf = cls(packed.offsets, packed.sizes, len(image))
        ctypes.memmove(buf.data, image, len(image))
        return buf

    def image(self) -> bytes:
        return self.data.raw[: self.nbytes]

    def param_bytes(self) -> Tuple[bytes, ...]:
        """Each parameter's bytes, read through the `void**` as the driver reads them."""
        return tuple(
            ctypes.string_at(self.pointers[i] or 0, size) for i, size in enumerate(self.sizes)
        )
