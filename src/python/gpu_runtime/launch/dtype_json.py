"""numpy dtypes in the JSON form of kernel signatures (`gpu_spec.dtypes`), and matching them.

gpu_spec is standard library only, so the numpy side lives here: `dtype_to_json` writes what
gpu_compiler writes from numba's types (a scalar name such as "uint64", or for a structured
dtype {"fields": [[name, dtype, offset(, shape)]...], "itemsize": N, "aligned": bool}), and
`dtype_fits` decides with `gpu_spec.dtypes.same_dtype` whether an array's dtype is the one a
kernel signature names, by the bytes (field names, offsets, types, itemsize).
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import numpy as np

from gpu_runtime.launch.scalars import BFLOAT16, is_bfloat16
from gpu_spec.dtypes import DtypeJSON, describe_dtype, is_record, same_dtype

__all__ = ["dtype_to_json", "dtype_fits", "describe_np_dtype"]


def dtype_to_json(dt: Any) -> DtypeJSON:
    """The signature form of numpy dtype `dt` (names as numba spells them: "bool", "uint64")."""
    dt = np.dtype(dt)
    if dt.fields is None:
        if dt.subdtype is not None:
            raise TypeError(f"a subarray dtype {dt} is only valid as a field of a record")
        if dt.kind == "V":
            raise TypeError(f"an unstructured void dtype {dt} has no signature form")
        return dt.name
    fields = []
    for name in dt.names or ():
        fdt, offset = dt.fields[name][:2]
        if fdt.subdtype is not None:
            base, shape = fdt.subdtype
            fields.append([name, dtype_to_json(base), int(offset), [int(n) for n in shape]])
        else:
            fields.append([name, dtype_to_json(fdt), int(offset)])
    return {"fields": fields, "itemsize": int(dt.itemsize), "aligned": bool(dt.isalignedstruct)}


@functools.lru_cache(maxsize=256)
def _json_of(dt: np.dtype) -> Optional[DtypeJSON]:
    try:
        return dtype_to_json(dt)
    except TypeError:
        return None


def describe_np_dtype(dt: np.dtype) -> str:
    """`float32`, or a record as `Record(s0:uint64@0, s1:uint64@8; 16 bytes)`."""
    if dt.fields is None:
        return str(dt)
    return describe_dtype(_json_of(dt))


def dtype_fits(want: Any, got: np.dtype) -> Optional[str]:
    """None if an array of dtype `got` fits the signature dtype `want`, else why not.

    For a record `want`, an unstructured void dtype of the same itemsize also fits: numba's
    own device arrays export records as typestr "|V16" without a "descr", so their fields
    cannot be told; the bytes are the kernel's to read.
    """
    if is_record(want):
        if got.fields is None:
            if got.kind == "V" and got.itemsize == want.get("itemsize"):
                return None
            return f"dtype {got}, not the record {describe_dtype(want)}"
        have = _json_of(got)
        if have is None or not same_dtype(have, want):
            return f"record {describe_dtype(have)}, not {describe_dtype(want)}"
        return None
    if got.fields is not None:
        return f"record dtype {describe_np_dtype(got)}, not {want}"
    if want == BFLOAT16:
        # ml_dtypes' bfloat16, or 2 opaque bytes: the array interface spells bfloat16 "<V2"
        # (numba's and CuPy's device arrays of it too), as it spells records "|V16"
        if is_bfloat16(got) or (got.kind == "V" and got.itemsize == 2):
            return None
        return f"dtype {got}, not bfloat16"
    try:
        expected = _scalar_dtype(str(want))
    except TypeError:
        return f"unsupported array dtype {want!r} in kernel signature"
    return None if got == expected else f"dtype {got}, not {expected}"


@functools.lru_cache(maxsize=None)
def _scalar_dtype(name: str) -> np.dtype:
    return np.dtype("bool" if name in ("boolean", "bool_") else name)
