"""Device arrays as kernels see them: `__cuda_array_interface__` read into an `ArrayView`.

Any object exposing the interface (CuPy, numba, torch, `DeviceArray`) is a device array here;
nothing else about the producing library is assumed. Also how arrays and arguments are spelled
in messages, in numba's notation (`float32[:, ::1]`), so that a dispatch error reads like the
kernel's signature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

import numpy as np
from numpy.lib.format import descr_to_dtype

from gpu_runtime.errors import DispatchError
from gpu_spec.dtypes import describe_dtype
from gpu_spec.manifest.model import ArgSpec

# The __cuda_array_interface__ versions whose fields this module reads as they are (v3 adds
# "stream", which a launch on the caller's stream needs no help with); a later version may
# change a field's meaning, so it is refused rather than guessed at.
CAI_VERSIONS = (0, 1, 2, 3)


@dataclass(frozen=True)
class ArrayView:
    """What the kernel needs of a device array, from its `__cuda_array_interface__`."""

    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  # bytes; C-order ones computed if the interface gives none
    dtype: np.dtype
    readonly: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def flags(self) -> Tuple[bool, bool]:
        """(C-contiguous, F-contiguous), by numba's rules (numpy's UpdateContiguousFlags)."""
        return contiguity(self.shape, self.strides, self.itemsize)

    @property
    def layout(self) -> str:
        c, f = self.flags
        return "C" if c else ("F" if f else "A")


def contiguity(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> Tuple[bool, bool]:
    """(C-contiguous, F-contiguous), by numba's rules (numpy's UpdateContiguousFlags)."""
    if not shape or math.prod(shape) == 0:
        return (True, True)
    if any(s == 0 for s in strides):
        return (False, False)
    c = f = True
    sd = itemsize
    for n, st in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if st != sd:
                c = False
            sd *= n
    sd = itemsize
    for n, st in zip(shape, strides):
        if n != 1:
            if st != sd:
                f = False
                break
            sd *= n
    return (c, f)


def c_strides(shape: Sequence[int], itemsize: int) -> Tuple[int, ...]:
    out = []
    acc = itemsize
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def array_view(obj: Any) -> Optional[ArrayView]:
    """ArrayView of a device array (CuPy, numba, torch, DeviceArray...), None if `obj` is none."""
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        return None
    except Exception as e:  # e.g. torch raising for a tensor that requires grad
        raise DispatchError(
            f"cannot read __cuda_array_interface__ of {type(obj).__name__}: {e}"
        ) from e
    what = type(obj).__name__
    try:
        shape = tuple(int(n) for n in cai["shape"])
        dtype = np.dtype(cai["typestr"])
        descr = cai.get("descr")
        if dtype.kind == "V" and descr and any(d[0] for d in descr):  # a record's fields
            dtype = descr_to_dtype(descr)  # drops the padding entries ("", "|V7") of aligned ones
        elif dtype.kind == "V":  # "<V2" for ml_dtypes' bfloat16: the array's own dtype says so
            dtype = _own_dtype(obj, dtype)
        ptr, readonly = cai["data"]
        strides = cai.get("strides")
    except (KeyError, TypeError, ValueError) as e:
        raise DispatchError(f"malformed __cuda_array_interface__ on {what}: {e}") from e
    version = cai.get("version")
    if version is not None and (isinstance(version, bool) or version not in CAI_VERSIONS):
        raise DispatchError(
            f"__cuda_array_interface__ version {version!r} of {what} is not one this runtime "
            f"reads ({', '.join(map(str, CAI_VERSIONS))}): its meaning may differ; pass an "
            f"array whose library speaks version 3"
        )
    if cai.get("mask") is not None:
        raise DispatchError(f"masked device arrays are not supported ({what})")
    if not dtype.isnative and dtype.itemsize > 1:
        raise DispatchError(f"device array of non-native byte order {dtype.str} is not supported")
    strides = (
        c_strides(shape, dtype.itemsize) if strides is None else tuple(int(s) for s in strides)
    )
    if len(strides) != len(shape):
        raise DispatchError(
            f"__cuda_array_interface__ of {what}: {len(shape)} dims but {len(strides)} strides"
        )
    address = int(ptr or 0)
    if address < 0 or address >= 1 << 64:
        raise DispatchError(
            f"__cuda_array_interface__ of {what}: data pointer {address} is no address"
        )
    if address == 0 and 0 not in shape:  # only an empty array may have no data (the spec)
        raise DispatchError(
            f"{what} is a null device array (data pointer 0, shape {shape}): it was freed or "
            f"never allocated; pass an allocated device array"
        )
    return ArrayView(
        ptr=address, shape=shape, strides=strides, dtype=dtype, readonly=bool(readonly)
    )


def _own_dtype(obj: Any, void: np.dtype) -> np.dtype:
    """The dtype the object itself declares where the array interface can only say "V<n>" (an
    extension dtype such as ml_dtypes' bfloat16), if it is one of that size; else `void`."""
    own = getattr(obj, "dtype", None)
    if isinstance(own, np.dtype) and own.itemsize == void.itemsize and own.fields is None:
        return own
    return void


def is_host_array(obj: Any) -> bool:
    """A numpy (or other host) array: worth a hint that kernels take device arrays."""
    if isinstance(obj, np.generic):
        return False
    return isinstance(obj, np.ndarray) or (
        hasattr(obj, "__array_interface__") and not hasattr(obj, "__cuda_array_interface__")
    )


def numba_array_type(dtype: str, ndim: int, layout: str) -> str:
    """numba's spelling: float32[::1], float32[:, ::1], float32[::1, :], float32[:, :]; a 0-d
    array as numba prints it (`array(float32, 0d, C)`), which has no slice spelling."""
    if ndim == 0:
        return f"array({dtype}, 0d, {layout})"
    dims = [":"] * ndim
    if layout == "C":
        dims[-1] = "::1"
    elif layout == "F":
        dims[0] = "::1"
    return f"{dtype}[{', '.join(dims)}]"


def describe_value(v: Any) -> str:
    view = array_view(v)
    if view is not None:
        return f"{numba_array_type(str(view.dtype), view.ndim, view.layout)} device array"
    if isinstance(v, np.ndarray):
        layout = "C" if v.flags.c_contiguous else "A"
        return f"{numba_array_type(str(v.dtype), v.ndim, layout)} HOST array"
    if isinstance(v, np.generic):
        return f"numpy {v.dtype}"
    return type(v).__name__


def describe_arg_spec(a: ArgSpec) -> str:
    dtype = describe_dtype(a.dtype)
    if a.kind == "array":
        return numba_array_type(dtype, a.ndim or 0, a.layout or "A")
    if a.kind == "scalar":
        return dtype
    if a.kind == "pointer":
        return "voidptr" if a.dtype == "void" else f"CPointer({dtype})"
    return a.kind
