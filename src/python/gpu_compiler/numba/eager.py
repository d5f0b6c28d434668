"""Eager signatures, ``@cuda.jit("void(float32[::1])")``, compiled ahead of time without a GPU.

numba-cuda compiles an eagerly-typed kernel at decoration time, which needs a GPU (its driver
initialises for the current device). While gpu_compiler imports a kernel source, ``cuda.jit`` is
replaced by ``aot_jit``: given signatures (a string, a numba signature or tuple of types, or a
list of these), it builds the same dispatcher lazily, with the same options, and records the
signatures on it; given a function (plain ``@cuda.jit``), it is numba's ``jit`` unchanged. The
backend then compiles each recorded signature for the target capability, exactly as written.

Only the import is affected: ``numba.cuda.jit`` and ``numba.cuda.decorators.jit`` are restored
afterwards (the host process of the runtime's JIT mode may use numba itself).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, List, Optional

# Set on a dispatcher built from an eager signature: the signatures, as written.
EAGER_ATTR = "_gpu_compiler_eager_signatures"


def is_signature_like(value: Any) -> bool:
    """A signature numba accepts: a string, a Signature, or a tuple of types."""
    from numba.cuda.core import sigutils

    return sigutils.is_signature(value)


def _signatures(func_or_sig: Any) -> Optional[List[Any]]:
    if is_signature_like(func_or_sig):
        return [func_or_sig]
    if isinstance(func_or_sig, list):
        return list(func_or_sig)
    return None


def eager_signatures(obj: Any) -> Optional[List[Any]]:
    """The signatures an ``@cuda.jit(sig)`` dispatcher was declared with, or None."""
    sigs = getattr(obj, EAGER_ATTR, None)
    return list(sigs) if sigs is not None else None


@contextlib.contextmanager
def lazy_eager_jit() -> Iterator[None]:
    """While active, ``cuda.jit(sig)`` records ``sig`` instead of compiling on a GPU."""
    import numba.cuda
    import numba.cuda.decorators as decorators

    original = decorators.jit

    def aot_jit(func_or_sig: Any = None, *args: Any, **kwargs: Any) -> Any:
        signatures = _signatures(func_or_sig)
        if signatures is None:
            return original(func_or_sig, *args, **kwargs)

        recorded = tuple(signatures)

        def decorate(func: Any) -> Any:
            disp = original(func, *args, **kwargs)
            setattr(disp, EAGER_ATTR, recorded)
            return disp

        return decorate

    saved = numba.cuda.jit
    numba.cuda.jit = aot_jit
    decorators.jit = aot_jit
    try:
        yield
    finally:
        numba.cuda.jit = saved
        decorators.jit = original


def signature_text(sig: Any) -> str:
    """How metadata.json records a signature: a string as written, a type object as numba
    prints it (``void(CPointer(uint8), uint32)``)."""
    if isinstance(sig, str):
        return sig
    from numba.cuda.core import sigutils

    argtypes, _restype = sigutils.normalize_signature(sig)  # a kernel's is void
    return "void(%s)" % ", ".join(_type_text(t) for t in argtypes)


def _type_text(t: Any) -> str:
    from numba.cuda import types

    tt: Any = types
    if isinstance(t, tt.CPointer):
        return "CPointer(%s)" % _type_text(t.dtype)
    if isinstance(t, tt.Array) and not isinstance(t.dtype, tt.Record):
        return "%s[%s]" % (t.dtype, _array_dims(t.ndim, t.layout))
    return str(t)


def _array_dims(ndim: int, layout: str) -> str:
    """numba's slice notation of an array type: ``::1`` marks the contiguous dimension."""
    if ndim == 0:
        return "()"
    dims = [":"] * ndim
    if layout == "C":
        dims[-1] = "::1"
    elif layout == "F":
        dims[0] = "::1"
    return ", ".join(dims)
