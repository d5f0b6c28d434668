"""Choosing among the signatures of one kernel name by the launch arguments.

A kernel compiled for several signatures (say `uint8[::1]` and `uint8[:]`) is one name in the
manifest; each launch scores every signature against the arguments and takes the best fit:
an exact match beats a safe conversion of the same kind, which beats a conversion across kinds
(an `int` into a `float32`). Ties go to the signature listed first, as numba's own dispatcher
does. Only numba-ABI kernels carry argument types; a C kernel fits whenever the count does.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from gpu_runtime.errors import DispatchError
from gpu_runtime.launch.arrays import array_view, describe_arg_spec, describe_value
from gpu_runtime.launch.numba_abi import array_mismatch, numba_pointer_value
from gpu_runtime.launch.scalars import INT_RANGES, scalar_dtype, unwrap_0d
from gpu_spec.manifest.model import ArgSpec, KernelSpec

_EXACT, _SAME_KIND, _CONVERT = 3, 2, 1


def _numpy_scalar_score(vdt: np.dtype, dt: np.dtype) -> Optional[int]:
    if vdt == dt:
        return _EXACT
    if not np.can_cast(vdt, dt, "safe"):
        return None
    return _SAME_KIND if vdt.kind == dt.kind else _CONVERT


def _python_scalar_score(value: Any, dt: np.dtype) -> Optional[int]:
    if isinstance(value, bool):
        return _EXACT if dt.kind == "b" else (_CONVERT if dt.kind in "iu" else None)
    if isinstance(value, int):
        if dt.kind in "iu":
            lo, hi = INT_RANGES[dt.name]
            if not lo <= value <= hi:
                return None
            return _EXACT if dt.name == "int64" else _SAME_KIND
        return _CONVERT if dt.kind in "fc" else None
    if isinstance(value, float):
        if dt.kind == "f":
            return _EXACT if dt.itemsize == 8 else _SAME_KIND
        return _CONVERT if dt.kind == "c" else None
    if isinstance(value, complex) and dt.kind == "c":
        return _EXACT if dt.itemsize == 16 else _SAME_KIND
    return None


def _scalar_score(dtype_name: str, value: Any) -> Optional[int]:
    value = unwrap_0d(value)
    try:
        dt = scalar_dtype(dtype_name)
    except DispatchError:
        return None
    if array_view(value) is not None or isinstance(value, np.ndarray):
        return None
    if isinstance(value, np.generic):
        return _numpy_scalar_score(value.dtype, dt)
    return _python_scalar_score(value, dt)


def _array_score(spec: ArgSpec, value: Any) -> Optional[int]:
    view = array_view(value)
    if view is None or array_mismatch(spec, view):
        return None
    return _EXACT if spec.layout == view.layout else _CONVERT


def _pointer_score(spec: ArgSpec, value: Any) -> Optional[int]:
    try:
        numba_pointer_value(spec, value, "")
    except DispatchError:
        return None
    return _EXACT if array_view(value) is not None else _CONVERT


def match_score(kernel: KernelSpec, args: Sequence[Any]) -> Tuple[Optional[int], str]:
    """(score, "") if `args` fit `kernel` (higher is a better fit), else (None, why not)."""
    if kernel.abi != "numba":
        n = len(kernel.params) if kernel.params is not None else None
        if n is None or n == len(args):
            return 1, ""
        return None, f"takes {n} arguments, got {len(args)}"
    specs = kernel.args or ()
    if len(specs) != len(args):
        return None, f"takes {len(specs)} arguments, got {len(args)}"
    total = 0
    for i, (spec, value) in enumerate(zip(specs, args)):
        if spec.kind == "array":
            s = _array_score(spec, value)
        elif spec.kind == "scalar":
            s = _scalar_score(str(spec.dtype), value)
        elif spec.kind == "pointer":
            s = _pointer_score(spec, value)
        else:
            s = None
        if s is None:
            return None, f"argument {i} is {describe_value(value)}, not {describe_arg_spec(spec)}"
        total += s
    return total, ""


def select_overload(
    kernels: Sequence[KernelSpec], args: Sequence[Any], name: str = ""
) -> KernelSpec:
    """The signature that fits `args` best (ties: the first listed); DispatchError if none."""
    if len(kernels) == 1:
        # One signature: nothing to choose; packing checks every argument against it.
        return kernels[0]
    best: Optional[Tuple[int, int]] = None
    reasons = []
    for idx, k in enumerate(kernels):
        score, why = match_score(k, args)
        if score is None:
            reasons.append(f"    {k.describe()}: {why}")
        elif best is None or score > best[0]:
            best = (score, idx)
    if best is not None:
        return kernels[best[1]]
    given = ", ".join(describe_value(a) for a in args) or "no arguments"
    raise DispatchError(
        f"no signature of kernel {name or kernels[0].name!r} matches the arguments ({given});"
        f" its signatures:\n" + "\n".join(reasons)
    )
