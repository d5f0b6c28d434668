"""The "numba" ABI: arguments as numba-cuda 0.30.4's `_Kernel._prepare_args` passes them.

Each array argument becomes 5 + 2*ndim 8-byte parameters
    meminfo (=0), parent (=0), nitems, itemsize, data pointer, shape[ndim], strides[ndim]
(strides in bytes; C-order strides computed when the array interface gives none). Scalars are
passed by value in the signature's type: int8..uint64 and float32/float64 as such, float16 and
bfloat16 as their 16 bits (`scalars.bfloat16_bits`), bool as one byte, complex64/complex128 as
two parameters (real, imag) of float32/float64, datetime64/timedelta64 as int64. An array of
records (a numpy structured dtype, e.g. numba.cuda.random's xoroshiro128p states) is packed like
any array, its itemsize the record's.
A raw pointer (`CPointer(T)`, `voidptr`) is one 8-byte parameter, the address: numba passes the
integer it is given; here a device array (its data pointer), a buffer with `.handle`/`.ptr`, or
a Python/numpy integer.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np

from gpu_runtime.errors import DispatchError
from gpu_runtime.launch.arrays import (
    ArrayView,
    array_view,
    describe_arg_spec,
    describe_value,
    is_host_array,
    numba_array_type,
)
from gpu_runtime.launch.c_abi import device_pointer
from gpu_runtime.launch.dtype_json import describe_np_dtype, dtype_fits
from gpu_runtime.launch.params import PackedArgs, PackedValue, build_image, parse_param_type
from gpu_runtime.launch.scalars import (
    BFLOAT16,
    INT_RANGES,
    bfloat16_bits,
    float16_bits,
    scalar_dtype,
    to_complex,
    to_int,
    to_narrow_float,
    unwrap_0d,
)
from gpu_spec.manifest.model import ArgSpec, KernelSpec


def _bool_error(what: str, value: Any) -> str:
    """An integer other than 0 and 1 for a bool: most likely a count or a mask passed by
    mistake, whose truth value would be taken silently (an int flag is 0 or 1)."""
    return f"{what}: expected a bool, got the integer {int(value)}; pass True/False (or 0/1)"


def numba_scalar_values(dtype_name: str, value: Any, what: str) -> List[PackedValue]:
    """The PTX-typed values numba passes for one scalar argument."""
    value = unwrap_0d(value)
    if dtype_name == BFLOAT16:
        return [("u16", bfloat16_bits(value, what))]
    dt = scalar_dtype(dtype_name)
    if dt.kind == "b":
        if not isinstance(value, (bool, np.bool_, int, np.integer)):
            raise DispatchError(f"{what}: expected a bool, got {describe_value(value)} {value!r}")
        if not isinstance(value, (bool, np.bool_)) and int(value) not in (0, 1):
            raise DispatchError(_bool_error(what, value))
        return [("u8", 1 if value else 0)]
    if dt.kind in "iu":
        v = to_int(value, what)
        lo, hi = INT_RANGES[dt.name]
        if not lo <= v <= hi:
            raise DispatchError(f"{what}: {v} does not fit in {dt.name}")
        return [(("s" if dt.kind == "i" else "u") + str(dt.itemsize * 8), v)]
    if dt.kind == "f":
        if dt.itemsize in (2, 4, 8):
            return [_float_value(dt.itemsize, to_narrow_float(value, dt.itemsize * 8, what))]
    if dt.kind == "c":
        c = to_complex(value, what)
        if dt.itemsize == 8:
            return [
                ("f32", to_narrow_float(c.real, 32, f"{what} (real part)")),
                ("f32", to_narrow_float(c.imag, 32, f"{what} (imaginary part)")),
            ]
        return [("f64", c.real), ("f64", c.imag)]
    if dt.kind in "mM":
        if isinstance(value, (np.datetime64, np.timedelta64)):
            return [("s64", int(np.array(value, dtype=dt).view(np.int64)))]
        return [("s64", to_int(value, what))]
    raise DispatchError(f"{what}: scalar type {dtype_name!r} is not supported by gpu_runtime")


def _float_value(itemsize: int, v: float) -> PackedValue:
    if itemsize == 2:
        return ("u16", float16_bits(v))
    if itemsize == 4:
        return ("f32", v)  # already rounded to float32 (`to_narrow_float`)
    return ("f64", v)


def numba_array_values(spec: ArgSpec, value: Any, what: str) -> List[PackedValue]:
    view = array_view(value)
    if view is None:
        if is_host_array(value):
            raise DispatchError(
                f"{what}: got a host (numpy) array; kernels take device arrays: copy it with "
                f"gpu_runtime.DeviceArray.from_numpy(a) (or CuPy/numba/torch device arrays)"
            )
        raise DispatchError(
            f"{what}: expected a device array ({describe_arg_spec(spec)}), "
            f"got {describe_value(value)}"
        )
    problem = array_mismatch(spec, view)
    if problem:
        raise DispatchError(f"{what}: {problem}")
    vals: List[PackedValue] = [
        ("u64", 0),
        ("u64", 0),
        ("s64", view.size),
        ("s64", view.itemsize),
        ("u64", view.ptr),
    ]
    vals.extend(("s64", n) for n in view.shape)
    vals.extend(("s64", s) for s in view.strides)
    return vals


def array_mismatch(spec: ArgSpec, view: ArrayView) -> Optional[str]:
    """Why `view` does not fit the array argument `spec` (dtype, ndim, layout), or None."""
    why = dtype_fits(spec.dtype, view.dtype)
    if why is None and view.ndim != spec.ndim:
        why = f"{view.ndim}-D, not {spec.ndim}-D"
    elif why is None and spec.layout in ("C", "F"):
        c, f = view.flags
        if spec.layout == "C" and not c:
            why = "not C-contiguous"
        elif spec.layout == "F" and not f:
            why = "not Fortran-contiguous"
    if why is None:
        return None
    # Described only on a mismatch: this check runs on every launch.
    got = numba_array_type(describe_np_dtype(view.dtype), view.ndim, view.layout)
    return f"expected {describe_arg_spec(spec)}, got {got} ({why})"


def numba_pointer_value(spec: ArgSpec, value: Any, what: str) -> PackedValue:
    """The address numba passes for a `CPointer(T)` / `voidptr` argument."""
    if isinstance(value, (bool, np.bool_)):
        raise DispatchError(f"{what}: expected a device pointer, got a bool")
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if not 0 <= v < 1 << 64:
            raise DispatchError(f"{what}: pointer {v} is not an address (0 <= p < 2**64)")
        return ("u64", v)
    view = array_view(value)
    if view is not None:
        if spec.dtype not in (None, "void"):
            why = dtype_fits(spec.dtype, view.dtype)
            if why is not None:
                raise DispatchError(
                    f"{what}: {describe_arg_spec(spec)} got a device array of {why}; pass "
                    f"its address as an int to reinterpret it"
                )
        return ("u64", view.ptr)
    ptr = device_pointer(value)
    if ptr is not None:
        return ("u64", ptr)
    if is_host_array(value):
        raise DispatchError(
            f"{what}: got a host (numpy) array where a device pointer is expected; use "
            f"gpu_runtime.DeviceArray.from_numpy(a)"
        )
    raise DispatchError(
        f"{what}: expected a device pointer ({describe_arg_spec(spec)}: a device array, a "
        f"buffer or an int address), got {describe_value(value)}"
    )


def pack_numba_args(kernel: KernelSpec, args: Sequence[Any]) -> PackedArgs:
    """Pack `args` for a numba-compiled kernel; DispatchError if they do not fit its signature."""
    specs = kernel.args or ()
    if len(args) != len(specs):
        raise DispatchError(f"{kernel.describe()} takes {len(specs)} arguments, got {len(args)}")
    values: List[PackedValue] = []
    for i, (spec, value) in enumerate(zip(specs, args)):
        what = f"argument {i} of {kernel.name}"
        if spec.kind == "array":
            values.extend(numba_array_values(spec, value, what))
        elif spec.kind == "scalar":
            values.extend(numba_scalar_values(str(spec.dtype), value, what))
        elif spec.kind == "pointer":
            values.append(numba_pointer_value(spec, value, what))
        else:
            raise DispatchError(
                f"{what}: argument kind {spec.kind!r} is not supported by gpu_runtime"
            )
    _check_params(kernel, values)
    return build_image(values)


def _check_params(kernel: KernelSpec, values: Sequence[PackedValue]) -> None:
    """The manifest's PTX parameter list must agree with what this ABI packs, size by size."""
    if kernel.params is None:
        return
    if len(kernel.params) != len(values):
        raise DispatchError(
            f"{kernel.describe()}: the numba ABI gives {len(values)} parameters but the PTX entry "
            f"{kernel.entry} declares {len(kernel.params)}; the bundle and gpu_runtime disagree"
        )
    for i, ((tname, _), ptext) in enumerate(zip(values, kernel.params)):
        if parse_param_type(tname).size != parse_param_type(ptext).size:
            raise DispatchError(
                f"{kernel.describe()}: parameter {i} is {ptext} in PTX but the numba ABI packs "
                f"{tname}"
            )
