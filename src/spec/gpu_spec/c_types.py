"""Declared C parameter types of CUDA C++ kernels, as metadata.json and the manifest spell them.

PTX loses what the runtime needs to check a C kernel's arguments: NVRTC declares `int` and
`unsigned int` alike as `.u32`, and every pointer as `.u64`. gpu_compiler records each kernel's
declared parameter types ("c_types", one per PTX parameter) in this spelling: a builtin's C name
(`int`, `unsigned int`, `unsigned long long`, `float`, `__half`), a class by its qualified name
(`ns::Params`), `const T` / `volatile T`, and `T*` for pointers (`const float*`,
`float* const*`). The runtime reads them here: the dtype a scalar has, and the element dtype a
pointer points to. Absent from manifests of older compilers (the runtime then checks the PTX
types only).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

# C builtin spelling -> numpy dtype name. Plain `char` is absent on purpose: its signedness is
# the host ABI's (signed on x86-64, unsigned on aarch64), so neither int8 nor uint8 is checked.
C_TYPE_DTYPES: Dict[str, str] = {
    "bool": "bool",
    "signed char": "int8",
    "unsigned char": "uint8",
    "short": "int16",
    "unsigned short": "uint16",
    "int": "int32",
    "unsigned int": "uint32",
    "long": "int64",  # LP64: every CUDA host of this project (x86-64, aarch64 Linux)
    "unsigned long": "uint64",
    "long long": "int64",
    "unsigned long long": "uint64",
    "float": "float32",
    "double": "float64",
    "__half": "float16",
    "_Float16": "float16",
    "__nv_bfloat16": "bfloat16",  # ml_dtypes' name; numpy itself has no bfloat16
}

# CUDA's two-lane vector types: a pair of the element type in 4 bytes (`.align 4 .b8 [4]` by
# value). A pointer to one points at pairs of elements: an array of the element dtype.
C_PAIR_TYPES: Dict[str, str] = {
    "__half2": "float16",
    "__nv_bfloat162": "bfloat16",
}

_QUALIFIERS = ("const ", "volatile ")


def _unqualified(ctype: str) -> str:
    """`ctype` without top-level const/volatile (`const int` -> `int`)."""
    t = ctype.strip()
    changed = True
    while changed:
        changed = False
        for q in _QUALIFIERS:
            if t.startswith(q):
                t, changed = t[len(q) :].strip(), True
        for q in (" const", " volatile"):
            if t.endswith(q):
                t, changed = t[: -len(q)].strip(), True
    return t


def split_pointer(ctype: str) -> Tuple[str, bool]:
    """(the pointee type, True) for a pointer type, else (the unqualified type, False)."""
    t = _unqualified(ctype)
    if t.endswith("*"):
        return _unqualified(t[:-1]), True
    return t, False


def c_scalar_dtype(ctype: str) -> Optional[str]:
    """The numpy dtype name of a by-value builtin parameter, None for others (pointers,
    classes, plain char)."""
    t, is_pointer = split_pointer(ctype)
    return None if is_pointer else C_TYPE_DTYPES.get(t)


def c_pair_dtype(ctype: str) -> Optional[str]:
    """The element dtype name of a by-value `__half2` / `__nv_bfloat162`, None for others."""
    t, is_pointer = split_pointer(ctype)
    return None if is_pointer else C_PAIR_TYPES.get(t)


def c_pointee_dtype(ctype: str) -> Optional[str]:
    """The numpy dtype name a pointer parameter's elements have (`const float*` -> float32,
    `__half2*` -> float16: its pairs' elements), None when it says none (void*, char*, a class,
    a pointer to pointer, not a pointer)."""
    t, is_pointer = split_pointer(ctype)
    if not is_pointer:
        return None
    return C_TYPE_DTYPES.get(t) or C_PAIR_TYPES.get(t)


def c_type_problem(ctype: object) -> Optional[str]:
    """Why `ctype` is not a declared-type string of the manifest, or None."""
    if not isinstance(ctype, str) or not ctype.strip():
        return f"expected a C type string, got {ctype!r}"
    if len(ctype) > 512 or any(c in ctype for c in "\n\r\t\0"):
        return f"{ctype[:40]!r}... is not a C type spelling"
    return None
