"""Python and numpy numbers as kernel scalars: checked conversions both ABIs and dispatch share.

Each conversion refuses what the kernel could not mean (a float for an integer parameter, a
string anywhere) with a `DispatchError` naming the argument, instead of letting `struct` or
numpy coerce it silently.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import numpy as np

from gpu_runtime.errors import DispatchError
from gpu_runtime.launch.arrays import describe_value

INT_RANGES: Dict[str, Tuple[int, int]] = {
    f"{p}{b}": ((-(1 << (b - 1)), (1 << (b - 1)) - 1) if p == "int" else (0, (1 << b) - 1))
    for p in ("int", "uint")
    for b in (8, 16, 32, 64)
}

_REALS = (bool, np.bool_, int, float, np.integer, np.floating)
_NUMBERS = _REALS + (complex, np.complexfloating)


# numpy has no bfloat16: ml_dtypes' (when the app has it) is a 2-byte dtype of kind "V" named
# "bfloat16"; without it the signature's "bfloat16" stands for 2 opaque bytes, packed as bits.
BFLOAT16 = "bfloat16"
_BFLOAT16_MAX = 3.3895313892515355e38  # (2 - 2**-7) * 2**127


def scalar_dtype(name: str) -> np.dtype:
    """The numpy dtype of a signature's scalar type name ("bool" and numba's "boolean" too;
    "bfloat16" as 2 opaque bytes, see `bfloat16_bits`)."""
    if name == BFLOAT16:
        return np.dtype((np.void, 2))
    try:
        return np.dtype("bool" if name in ("bool", "boolean", "bool_") else name)
    except TypeError:
        raise DispatchError(f"unsupported scalar type {name!r} in kernel signature") from None


def to_int(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return int(value)
    raise DispatchError(f"{what}: expected an integer, got {describe_value(value)} {value!r}")


def to_float(value: Any, what: str) -> float:
    if isinstance(value, _REALS):
        return float(value)
    raise DispatchError(f"{what}: expected a real number, got {describe_value(value)} {value!r}")


_NARROW = {16: np.float16, 32: np.float32}


def to_narrow_float(value: Any, bits: int, what: str) -> float:
    """`value` for a float16 or float32 parameter, rounded as numpy rounds it.

    A finite value beyond the type's range would become inf, with only numpy's RuntimeWarning
    (or none, under `np.errstate`): refused instead, naming the argument and the range. inf and
    nan pass as themselves; a float64 parameter takes any real.
    """
    f = to_float(value, what)
    narrow = _NARROW.get(bits)
    if narrow is None:
        return f
    with np.errstate(over="ignore"):
        rounded = float(narrow(f))
    if math.isinf(rounded) and math.isfinite(f):
        limit = float(np.finfo(narrow).max)
        raise DispatchError(
            f"{what}: {f!r} does not fit float{bits} (largest finite value {limit:g}); pass a "
            f"smaller value, or inf explicitly"
        )
    return rounded


def to_complex(value: Any, what: str) -> complex:
    if isinstance(value, _NUMBERS):
        return complex(value)
    raise DispatchError(f"{what}: expected a number, got {describe_value(value)} {value!r}")


def float16_bits(value: float) -> int:
    """The 16 bits of `value` as IEEE half precision (how both ABIs pass a float16); `value`
    is already in range (`to_narrow_float`)."""
    with np.errstate(over="ignore"):
        return int(np.array(value, dtype=np.float16).view(np.uint16))


def is_bfloat16(dt: np.dtype) -> bool:
    """ml_dtypes' bfloat16 (found by name and size: ml_dtypes need not be importable here)."""
    return dt.name == BFLOAT16 and dt.itemsize == 2 and dt.fields is None


def bfloat16_bits(value: Any, what: str) -> int:
    """The 16 bits of `value` as bfloat16, rounded to nearest even from float32 as CUDA's
    `__float2bfloat16` and ml_dtypes round. An ml_dtypes bfloat16 scalar passes its own bits; a
    finite value beyond bfloat16's range is refused (as for float16); nan and inf pass."""
    if isinstance(value, np.generic) and is_bfloat16(value.dtype):
        return int(np.frombuffer(value.tobytes(), np.uint16)[0])
    f = to_float(value, what)
    sign = 0x8000 if math.copysign(1.0, f) < 0 else 0
    if math.isnan(f):
        return 0x7FC0 | sign
    if math.isinf(f):
        return 0x7F80 | sign
    with np.errstate(over="ignore"):
        single = np.array(f, dtype=np.float32)
    bits = int(single.view(np.uint32))
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    if (rounded & 0x7FFF) >= 0x7F80:  # beyond float32, or rounded up to inf
        raise DispatchError(
            f"{what}: {f!r} does not fit bfloat16 (largest finite value {_BFLOAT16_MAX:g}); "
            f"pass a smaller value, or inf explicitly"
        )
    return rounded


def unwrap_0d(value: Any) -> Any:
    """A 0-d numpy array stands for its scalar."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value
