"""Element types of kernel arguments as JSON, and when two of them describe the same memory.

A dtype in `metadata.json` / `manifest.json` is either a numba scalar name (``"float32"``,
``"uint64"``, ``"bool"``, ``"complex128"``, ...) or, for numpy structured dtypes (numba
``Record``: arrays of records such as numba.cuda.random's xoroshiro128p states), an object::

    {"fields": [["s0", "uint64", 0], ["s1", "uint64", 8]], "itemsize": 16, "aligned": true}

Each field is ``[name, dtype, offset]``, or ``[name, dtype, offset, [shape...]]`` for a subarray
field; a field's dtype is again a name or such an object. Pointer arguments use ``"void"`` for
``voidptr``.

Why the comparison lives here: the compiler writes the form (from numba's types), the runtime
writes it from numpy (``dtype_to_json`` there: this package is standard library only) and both
must agree on what "the same record" means. It means the same bytes: the same fields (by
name), each at the same offset with the same dtype and shape, and the same itemsize. Field
order and the ``"aligned"`` flag are not compared: neither changes where a kernel reads.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple, Union

from gpu_spec.errors import SpecError

DtypeJSON = Union[str, dict]
# (name, dtype key, offset, shape) with dtype keys nested; hashable and order-free.
_Key = Union[str, Tuple[int, Tuple[Tuple[str, Any, int, Tuple[int, ...]], ...]]]


def dtype_problems(value: Any, where: str = "dtype") -> List[str]:
    """Every reason `value` is not a valid dtype JSON form (empty when it is one)."""
    if isinstance(value, str):
        return [] if value else [f"{where}: empty dtype name"]
    if not isinstance(value, dict):
        return [f"{where}: expected a dtype name or a record object, got {type(value).__name__}"]
    out: List[str] = []
    size: Any = value.get("itemsize")
    if not _is_int(size) or size <= 0:
        out.append(f"{where}.itemsize: expected a positive integer, got {size!r}")
    if "aligned" in value and not isinstance(value["aligned"], bool):
        out.append(f"{where}.aligned: expected a boolean")
    fields = value.get("fields")
    if not isinstance(fields, list) or not fields:
        return out + [f"{where}.fields: expected a non-empty array of fields"]
    names = set()
    for i, f in enumerate(fields):
        w = f"{where}.fields[{i}]"
        if not isinstance(f, list) or len(f) not in (3, 4):
            out.append(f"{w}: expected [name, dtype, offset] or [name, dtype, offset, shape]")
            continue
        if not isinstance(f[0], str) or not f[0] or f[0] in names:
            out.append(f"{w}: field name {f[0]!r} is empty, not a string or repeated")
        names.add(f[0])
        out.extend(dtype_problems(f[1], f"{w}.dtype"))
        if not _is_int(f[2]) or f[2] < 0:
            out.append(f"{w}: offset {f[2]!r} is not a non-negative integer")
        if len(f) == 4 and not (
            isinstance(f[3], list) and f[3] and all(_is_int(n) and n > 0 for n in f[3])
        ):
            out.append(f"{w}: subarray shape {f[3]!r} is not a list of positive integers")
    return out


def check_dtype(value: Any, where: str = "dtype") -> DtypeJSON:
    """`value` if it is a valid dtype JSON form; otherwise a `SpecError` listing why not."""
    problems = dtype_problems(value, where)
    if problems:
        raise SpecError("; ".join(problems))
    return value


def same_dtype(a: Any, b: Any) -> bool:
    """Whether two dtype JSON forms describe the same bytes (see the module docstring)."""
    ka, kb = _key(a), _key(b)
    return ka is not None and ka == kb


def is_record(value: Any) -> bool:
    return isinstance(value, dict)


def describe_dtype(value: Any) -> str:
    """A short human form: ``float32`` or ``Record(s0:uint64@0, s1:uint64@8; 16 bytes)``."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict) or dtype_problems(value):
        return repr(value)
    parts = []
    for f in value["fields"]:
        shape = f"[{','.join(map(str, f[3]))}]" if len(f) == 4 else ""
        parts.append(f"{f[0]}:{describe_dtype(f[1])}{shape}@{f[2]}")
    return f"Record({', '.join(parts)}; {value['itemsize']} bytes)"


def _key(value: Any) -> Optional[_Key]:
    if dtype_problems(value):
        return None
    if isinstance(value, str):
        return value
    fields = tuple(
        sorted(
            (f[0], _key(f[1]), f[2], tuple(f[3]) if len(f) == 4 else ()) for f in value["fields"]
        )
    )
    return (value["itemsize"], fields)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
