"""The "c" ABI (CUDA C++ compiled by NVRTC): one value per PTX `.param`, by the parameter's type.

64-bit integer parameters take device pointers (anything with `__cuda_array_interface__`, or an
object with an integer `.handle`/`.ptr`, e.g. a cuda.core Buffer) or integers; narrower integer
parameters take integers of either signedness (NVRTC declares `int` as `.u32`); floating
parameters take numbers; byte-array parameters (`.align A .b8 name[N]`, e.g. a struct by value)
take a numpy scalar or `bytes` of N bytes; where the declared type is one of CUDA's half
types, a number: `__half` (float16) and `__nv_bfloat16` (bfloat16, an ml_dtypes scalar too),
and for `__half2` / `__nv_bfloat162` a pair of numbers (a tuple, or a 2-element array of the
element dtype), each lane rounded as its type rounds.

Where the manifest records the declared C types ("c_types", `gpu_spec.c_types`), they are
checked too: a device array passed for `const float*` must hold float32, an integer passed for
`unsigned int` must not be negative nor one for `int` above 2**31 - 1. Pass a pointer as an int
to reinterpret memory on purpose.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from gpu_runtime.errors import DispatchError
from gpu_runtime.launch.arrays import array_view, describe_value, is_host_array
from gpu_runtime.launch.dtype_json import dtype_fits
from gpu_runtime.launch.params import (
    PackedArgs,
    PackedValue,
    ParamType,
    build_image,
    parse_param_type,
)
from gpu_runtime.launch.scalars import (
    BFLOAT16,
    INT_RANGES,
    bfloat16_bits,
    float16_bits,
    to_int,
    to_narrow_float,
    unwrap_0d,
)
from gpu_spec.c_types import c_pair_dtype, c_pointee_dtype, c_scalar_dtype
from gpu_spec.manifest.model import KernelSpec


def device_pointer(value: Any) -> Optional[int]:
    """The device address of a device array / buffer, or None if `value` is not one."""
    view = array_view(value)
    if view is not None:
        return view.ptr
    for attr in ("handle", "ptr"):
        h = getattr(value, attr, None)
        if h is None or isinstance(value, (int, float, np.generic)):
            continue
        try:
            return int(h)  # int, or a cuda.bindings CUdeviceptr (whose int() is the address)
        except (TypeError, ValueError):
            continue
    return None


def c_param_value(ptext: str, value: Any, what: str, ctype: Optional[str] = None) -> PackedValue:
    """The typed value of one argument for the PTX parameter `ptext`, declared `ctype` in C++
    (None: not recorded)."""
    pt = parse_param_type(ptext)
    value = unwrap_0d(value)
    if ctype is not None:
        _check_declared(ctype, value, what)
    if pt.is_array:
        half = _half_bytes(ctype, pt.size, value, what) if ctype is not None else None
        return (pt.name, half if half is not None else _struct_bytes(pt, ptext, value, what))
    if pt.kind == "f":
        if pt.bits == 16:
            if isinstance(value, np.float16):
                return (pt.name, int(value.view(np.uint16)))
            return (pt.name, float16_bits(to_narrow_float(value, 16, what)))
        return (pt.name, to_narrow_float(value, pt.bits, what))
    return (pt.name, _integer_value(pt, ptext, value, what))


def _check_declared(ctype: str, value: Any, what: str) -> None:
    """What the PTX type cannot tell: a pointer's element dtype, an integer's signedness."""
    pointee = c_pointee_dtype(ctype)
    if pointee is not None:
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            if int(value) < 0:  # packed as 64 bits, -1 would be the address 0xffff...ffff
                raise DispatchError(
                    f"{what}: {int(value)} is not a device address (a pointer is >= 0)"
                )
            return
        view = array_view(value)
        if view is not None:
            why = dtype_fits(pointee, view.dtype)
            if why is not None:
                raise DispatchError(
                    f"{what}: got a device array of {why}; pass an array of {pointee}, or "
                    f"its address as an int to reinterpret it"
                )
        return
    dtype = c_scalar_dtype(ctype)
    if dtype == "bool" and isinstance(value, (int, np.integer)):
        if not isinstance(value, (bool, np.bool_)) and int(value) not in (0, 1):
            # C++ reads a bool byte of 2 as neither true nor false (undefined behaviour)
            raise DispatchError(
                f"{what}: expected a bool, got the integer {int(value)}; pass True/False "
                f"(or 0/1)"
            )
        return
    if (
        dtype in INT_RANGES
        and isinstance(value, (int, np.integer))
        and not isinstance(value, (bool, np.bool_))
    ):
        lo, hi = INT_RANGES[dtype]
        if not lo <= int(value) <= hi:
            raise DispatchError(f"{what}: {int(value)} does not fit in {ctype} ({dtype})")


def _lane_bits(dtype: str, value: Any, what: str) -> int:
    if dtype == BFLOAT16:
        return bfloat16_bits(value, what)
    if isinstance(value, np.float16):
        return int(value.view(np.uint16))
    return float16_bits(to_narrow_float(value, 16, what))


def _half_bytes(ctype: str, size: int, value: Any, what: str) -> Optional[bytes]:
    """The bytes of a by-value `__half`, `__nv_bfloat16`, `__half2` or `__nv_bfloat162` given
    as numbers; None for other declared types, and for bytes / a numpy scalar of the size (as
    any struct takes them)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return None
    value = unwrap_0d(value)
    scalar, pair = c_scalar_dtype(ctype), c_pair_dtype(ctype)
    if scalar in ("float16", BFLOAT16) and size == 2:
        if isinstance(value, np.void):
            return None  # raw bytes: passed as they are
        if isinstance(value, np.integer):
            raise DispatchError(
                f"{what}: expected a number for {ctype}, got {describe_value(value)}; pass the "
                f"16 bits as bytes to reinterpret them"
            )
        return _lane_bits(scalar, value, what).to_bytes(2, "little")
    if pair is not None and size == 4:
        lanes = list(value) if isinstance(value, (tuple, list, np.ndarray)) else None
        if lanes is None or len(lanes) != 2:
            raise DispatchError(
                f"{what}: {ctype} takes a pair of numbers (x, y), got {describe_value(value)}"
            )
        return b"".join(
            _lane_bits(pair, v, f"{what} lane {i}").to_bytes(2, "little")
            for i, v in enumerate(lanes)
        )
    return None


def _struct_bytes(pt: ParamType, ptext: str, value: Any, what: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    elif isinstance(value, np.generic):
        data = value.tobytes()
    elif isinstance(value, float) and pt.size == 2:
        data = np.float16(value).tobytes()
    elif isinstance(value, complex) and pt.size in (8, 16):
        data = (np.complex64(value) if pt.size == 8 else np.complex128(value)).tobytes()
    else:
        raise DispatchError(
            f"{what}: {ptext} takes a numpy scalar or bytes of {pt.size} bytes, "
            f"got {describe_value(value)}"
        )
    if len(data) != pt.size:
        raise DispatchError(f"{what}: {ptext} takes {pt.size} bytes, got {len(data)}")
    return data


def _integer_value(pt: ParamType, ptext: str, value: Any, what: str) -> int:
    """u/s/b parameters: a 64-bit one may take a device pointer; either signedness fits."""
    if pt.bits == 64 and not isinstance(value, (int, np.integer)):
        ptr = device_pointer(value)
        if ptr is not None:
            return ptr
        if is_host_array(value):
            raise DispatchError(
                f"{what}: got a host (numpy) array where a device pointer is "
                f"expected; use gpu_runtime.DeviceArray.from_numpy(a)"
            )
    v = to_int(value, what)
    lo, hi = -(1 << (pt.bits - 1)), (1 << pt.bits) - 1
    if not lo <= v <= hi:
        raise DispatchError(f"{what}: {v} does not fit in {pt.bits} bits ({ptext})")
    mask = (1 << pt.bits) - 1
    if pt.kind == "s":
        v &= mask
        if v >= 1 << (pt.bits - 1):
            v -= 1 << pt.bits
        return v
    return v & mask


def pack_c_args(kernel: KernelSpec, args: Sequence[Any]) -> PackedArgs:
    params = kernel.params
    if params is None:
        raise DispatchError(
            f"kernel {kernel.name} has no recorded PTX parameter types; cannot pack "
            f"its arguments (rebuild the bundle with a current gpu_compiler)"
        )
    if len(args) != len(params):
        raise DispatchError(f"{kernel.describe()} takes {len(params)} arguments, got {len(args)}")
    ctypes = kernel.c_types or (None,) * len(params)
    return build_image(
        [
            c_param_value(p, v, f"argument {i} of {kernel.name} ({c or p})", c)
            for i, (p, c, v) in enumerate(zip(params, ctypes, args))
        ]
    )
