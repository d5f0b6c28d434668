"""A numba kernel source's signatures: eager ones (``@cuda.jit(sig)``) and the
``AOT_SIGNATURES`` table of lazy kernels, and the kernels they name.

Why check it all up front: a wrong entry (a missing kernel, a device function,
a signature that is not a signature) is a mistake in the source, so it is reported
as ``path:line: error:`` at the table or the ``def``, before any slow compile.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional, Tuple

from gpu_compiler.errors import CompileError
from gpu_compiler.numba.eager import eager_signatures, is_signature_like
from gpu_compiler.numba.errors import exception_text

AOT_ATTR = "AOT_SIGNATURES"


def find_line(source_text: str, pattern: str) -> Optional[int]:
    """1-based line of the first match of ``pattern`` (multiline), or None."""
    rx = re.compile(pattern, re.MULTILINE)
    m = rx.search(source_text)
    if m is None:
        return None
    return source_text.count("\n", 0, m.start()) + 1


def aot_table_line(source_text: str) -> Optional[int]:
    """Line of the ``AOT_SIGNATURES = ...`` assignment, where signature errors point."""
    return find_line(source_text, r"^%s\s*[:=]" % AOT_ATTR)


def eager_kernels(module: Any) -> List[Tuple[str, List[Any]]]:
    """Kernels declared with signatures (``@cuda.jit(sig)``), in definition order."""
    out: List[Tuple[str, List[Any]]] = []
    seen = set()
    for name, obj in vars(module).items():
        sigs = eager_signatures(obj)
        if sigs is None or id(obj) in seen or obj.targetoptions.get("device"):
            continue
        seen.add(id(obj))
        out.append((name, sigs))
    return out


def read_signatures(module: Any, source_path: str, source_text: str) -> List[Tuple[str, List[Any]]]:
    """``[(kernel name, [signature, ...]), ...]``: eager kernels, then the table's order."""
    aot_line = aot_table_line(source_text)
    where = "%s:%d" % (source_path, aot_line) if aot_line else source_path
    eager = eager_kernels(module)
    if not hasattr(module, AOT_ATTR):
        if eager:
            return eager
        raise CompileError(
            "%s: error: no kernel has a signature: give each kernel its signatures in "
            '@cuda.jit (e.g. @cuda.jit("void(float32[::1], float32)")), or declare it with '
            "plain @cuda.jit and map its name to signatures in a module-level %s dict, e.g.\n"
            '    %s = {"my_kernel": ["void(float32[::1], float32)"]}'
            % (source_path, AOT_ATTR, AOT_ATTR),
            source=source_path,
        )
    table = getattr(module, AOT_ATTR)
    if not isinstance(table, dict) or not table:
        raise CompileError(
            "%s: error: %s must be a non-empty dict of kernel name -> list of "
            "signature strings, got %r" % (where, AOT_ATTR, table),
            source=source_path,
            line=aot_line,
        )
    out = []
    for name, sigs in table.items():
        if isinstance(sigs, str) or not isinstance(sigs, (list, tuple)) or not sigs:
            raise CompileError(
                "%s: error: %s[%r] must be a non-empty list of signature strings, got %r"
                % (where, AOT_ATTR, name, sigs),
                source=source_path,
                line=aot_line,
            )
        for s in sigs:
            if not is_signature_like(s):
                raise CompileError(
                    "%s: error: %s[%r] contains %r, expected a signature such as "
                    '"void(float32[::1])" or types.void(types.float32[::1])'
                    % (where, AOT_ATTR, name, s),
                    source=source_path,
                    line=aot_line,
                )
        if name in dict(eager):
            raise CompileError(
                "%s: error: kernel %r has signatures in @cuda.jit(...) and in %s: give them "
                "in one place" % (where, name, AOT_ATTR),
                source=source_path,
                line=aot_line,
            )
        out.append((str(name), list(sigs)))
    return eager + out


def kernel_dispatcher(module: Any, name: str, source_path: str, source_text: str) -> Any:
    """The ``@cuda.jit`` kernel (not device function) the table names ``name``."""
    from numba.cuda.dispatcher import CUDADispatcher

    obj: Any = getattr(module, name, None)
    is_kernel = isinstance(obj, CUDADispatcher) and not obj.targetoptions.get("device")
    if is_kernel:
        return obj
    kernels = sorted(
        k
        for k, v in vars(module).items()
        if isinstance(v, CUDADispatcher) and not v.targetoptions.get("device")
    )
    line = find_line(source_text, r"^\s*def\s+%s\s*\(" % re.escape(name)) or aot_table_line(
        source_text
    )
    if obj is None:
        what = "is not defined in the module"
    elif isinstance(obj, CUDADispatcher):
        what = "is a device function (@cuda.jit(device=True)), not a kernel"
    else:
        what = "is not a @cuda.jit kernel (it is a %s)" % type(obj).__name__
    raise CompileError(
        "%s%s: error: %s names %r, which %s; kernels in this module: %s"
        % (
            source_path,
            ":%d" % line if line else "",
            AOT_ATTR,
            name,
            what,
            ", ".join(kernels) if kernels else "(none)",
        ),
        source=source_path,
        line=line,
    )


def signature_argtypes(
    sig: Any, kernel: str, source_path: str, aot_line: Optional[int]
) -> Tuple[Any, ...]:
    """The numba argument types of one signature string."""
    from numba.cuda.core import sigutils

    try:
        argtypes, _ret = sigutils.normalize_signature(sig)
    except Exception as e:
        raise CompileError(
            "%s%s: error: invalid signature %r for kernel %r: %s"
            % (source_path, ":%d" % aot_line if aot_line else "", sig, kernel, exception_text(e)),
            source=source_path,
            line=aot_line,
        ) from None
    return argtypes
