"""The numba kernel argument ABI, as recorded per argument in metadata.json.

Why record it: the runtime launches numba kernels without numba, so it needs to
know how each argument is flattened into PTX params. An array argument is
passed as meminfo, parent, nitems, itemsize, data pointer, shape[ndim],
strides[ndim] (bytes) -- all 8-byte values, ``5 + 2*ndim`` PTX params; a scalar
is passed by value (a complex scalar as two params: real, imag); a raw pointer
(``CPointer(T)``, ``voidptr``) as one 8-byte param. Arrays may have 0 dimensions
and numpy structured dtypes (numba ``Record``: numba.cuda.random's states), written
as gpu_spec.dtypes' record objects. numba-cuda's ``bfloat16`` (``numba.cuda.types.bfloat16``, no
numpy dtype of its own) is recorded as ``"bfloat16"``, ml_dtypes' name: 2 bytes, passed as its
bits. Other argument types are refused.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from gpu_compiler.errors import CompileError


def arg_abi(numba_type: Any) -> Dict[str, Any]:
    """Structured numba-ABI description of one kernel argument type."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    # numba.cuda.types sets these names at import time, out of mypy's sight.
    t: Any = types
    scalar_types = (t.Boolean, t.Integer, t.Float, t.Complex)
    if isinstance(numba_type, t.Array):
        if _is_bfloat16(numba_type.dtype):
            dtype: Any = BFLOAT16
        elif isinstance(numba_type.dtype, scalar_types + (t.Record,)):
            dtype = dtype_json(numpy_support.as_dtype(numba_type.dtype))
        else:
            raise ValueError("array of %s" % (numba_type.dtype,))
        return {
            "kind": "array",
            "dtype": dtype,
            "ndim": int(numba_type.ndim),
            "layout": str(numba_type.layout),
        }
    if _is_bfloat16(numba_type):
        return {"kind": "scalar", "dtype": BFLOAT16}
    if isinstance(numba_type, scalar_types):
        return {"kind": "scalar", "dtype": numpy_support.as_dtype(numba_type).name}
    if isinstance(numba_type, t.CPointer):
        target = numba_type.dtype
        if isinstance(target, t.NoneType) or target == t.void:
            return {"kind": "pointer", "dtype": "void"}
        if not isinstance(target, scalar_types + (t.Record,)):
            raise ValueError("pointer to %s" % (target,))
        return {"kind": "pointer", "dtype": dtype_json(numpy_support.as_dtype(target))}
    if numba_type == t.voidptr:
        return {"kind": "pointer", "dtype": "void"}
    raise ValueError(str(numba_type))


BFLOAT16 = "bfloat16"


def _is_bfloat16(numba_type: Any) -> bool:
    """numba-cuda's bfloat16 (`numba.cuda.types.bfloat16`, absent from older numba-cuda)."""
    from numba.cuda import types

    bf16 = getattr(types, "bfloat16", None)
    return bf16 is not None and numba_type == bf16


def dtype_json(dt: Any) -> Any:
    """A numpy dtype in gpu_spec.dtypes' JSON form: a name, or a record object."""
    if dt.fields is None:
        return dt.name
    fields = []
    for name in dt.names:
        sub, offset = dt.fields[name][:2]
        if sub.subdtype is not None:
            base, shape = sub.subdtype
            fields.append([name, dtype_json(base), int(offset), [int(n) for n in shape]])
        else:
            fields.append([name, dtype_json(sub), int(offset)])
    return {"fields": fields, "itemsize": int(dt.itemsize), "aligned": bool(dt.isalignedstruct)}


def abi_param_count(arg: Dict[str, Any]) -> int:
    """How many PTX kernel params one argument flattens to."""
    if arg["kind"] == "array":
        return 5 + 2 * int(arg["ndim"])
    if arg["kind"] == "pointer":
        return 1
    if arg["dtype"].startswith("complex"):
        return 2
    return 1


def describe_args(
    argtypes: Sequence[Any], kernel: str, sig: str, source_path: str, aot_line: Optional[int]
) -> List[Dict[str, Any]]:
    """``arg_abi`` of every argument; a CompileError at the table for an unsupported one."""
    try:
        return [arg_abi(t) for t in argtypes]
    except ValueError as e:
        raise CompileError(
            "%s%s: error: kernel %r signature %r has an argument of type %s; "
            "the AOT ABI supports arrays (of numbers, bfloat16 or records, any ndim including "
            "0), number/boolean/bfloat16 scalars and raw pointers (CPointer(T), voidptr)"
            % (source_path, ":%d" % aot_line if aot_line else "", kernel, sig, e),
            source=source_path,
            line=aot_line,
        ) from None


def check_param_count(
    params: Sequence[str], args: Sequence[Dict[str, Any]], kernel: str, sig: str, source_path: str
) -> None:
    """The PTX entry must have exactly the params the recorded ABI says it has."""
    expected = sum(abi_param_count(a) for a in args)
    if expected != len(params):
        raise CompileError(
            "%s: error: kernel %r PTX has %d params but the numba ABI of %s gives %d; "
            "this numba-cuda version's ABI is not what gpu_compiler expects"
            % (source_path, kernel, len(params), sig, expected),
            source=source_path,
        )
