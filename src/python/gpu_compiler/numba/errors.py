"""numba's exceptions as CompileErrors that point at the user's file and line.

Why search for the location: the build reports ``relative/path:line: error:``
like any compiler, but numba's exceptions carry their location in different
places (``.loc``, a SyntaxError's fields, or only in the traceback's frames),
and their text may hold absolute sandbox paths.
"""

from __future__ import annotations

import linecache
import os
import traceback
from typing import Any, Callable, Optional, Sequence, Tuple, TypeGuard

from gpu_compiler.errors import CompileError, exception_chain
from gpu_compiler.paths import display_path, relativize_text


def _is_loc(v: Any) -> TypeGuard[Any]:
    return (
        v is not None
        and isinstance(getattr(v, "filename", None), str)
        and isinstance(getattr(v, "line", None), int)
    )


def _error_location(
    exc: BaseException, is_user_file: Callable[[str], bool]
) -> Optional[Tuple[str, int]]:
    """Best (file, line) in user code for ``exc``.

    numba errors normally carry ``.loc``; but a ``numba.core.errors.TypingError``
    raised under numba-cuda's type inference escapes without one (numba-cuda
    only annotates its own TypingError class), so the traceback is searched
    too: the innermost frame with a ``loc`` (numba IR location) in user code,
    or else the innermost user-code frame (import-time errors).
    """
    for e in exception_chain(exc):
        loc = getattr(e, "loc", None)
        if _is_loc(loc) and is_user_file(loc.filename):
            return loc.filename, loc.line
        if isinstance(e, SyntaxError) and e.filename and e.lineno and is_user_file(e.filename):
            return e.filename, e.lineno
    best: Optional[Tuple[str, int]] = None
    for e in exception_chain(exc):
        for frame, lineno in traceback.walk_tb(e.__traceback__):
            name = frame.f_code.co_filename
            if not name.startswith("<") and is_user_file(name):  # not "<frozen genericpath>"
                best = (frame.f_code.co_filename, lineno)
            for name in ("loc", "constraint", "inst", "stmt"):
                v = frame.f_locals.get(name)
                if v is not None and not _is_loc(v):
                    v = getattr(v, "loc", None)
                if _is_loc(v) and is_user_file(v.filename):
                    best = (v.filename, v.line)
        if best is not None:
            return best
    return None


def exception_text(exc: BaseException) -> str:
    """``"TypeName: message"``, or just the type name when the message is empty."""
    text = str(exc).strip()
    name = type(exc).__name__
    return "%s: %s" % (name, text) if text else name


def located_error(
    exc: BaseException, what: str, source_path: str, is_user_file: Callable[[str], bool]
) -> CompileError:
    """A CompileError saying ``what`` failed, at the user code ``exc`` points to.

    The location is shown as the source path the caller gave when it is the
    kernel source itself (so messages match the command line), followed by
    the offending line and numba's own (relativized) text. A read the OS sandbox denied is
    said as such, in one line.
    """
    refused = denied_refusal(exc, source_path, is_user_file)
    if refused is not None:
        return refused
    loc = _error_location(exc, is_user_file)
    text = relativize_text(exception_text(exc))
    if loc is None:
        return CompileError("%s: error: %s\n%s" % (source_path, what, text), source=source_path)
    shown = display_path(loc[0], source_path)
    code = linecache.getline(loc[0], loc[1]).rstrip()
    snippet = "\n    %s" % code.strip() if code.strip() else ""
    return CompileError(
        "%s:%d: error: %s%s\n%s" % (shown, loc[1], what, snippet, text),
        source=shown,
        line=loc[1],
    )


def denied_refusal(
    exc: BaseException, source_path: str, is_user_file: Callable[[str], bool]
) -> Optional[CompileError]:
    """A read the OS sandbox denied (``gpu_compiler.confine``), at the user code that tried it:
    one line naming the file, whatever the kernel made of the error."""
    from gpu_compiler import confine

    text = confine.denial(exc)
    if text is None:
        module = _denied_module(exc)
        if module is None:
            return None
        text = confine.refusal_text(module)
    loc = _error_location(exc, is_user_file)
    if loc is None:
        return CompileError("%s: error: %s" % (source_path, text), source=source_path)
    shown = display_path(loc[0], source_path)
    return CompileError("%s:%d: error: %s" % (shown, loc[1], text), source=shown, line=loc[1])


# The plugin replaces "<toolchain>" with the toolchain's resolve (the compiler runs inside the
# toolchain and does not know its name).
REQUIREMENTS = "3rdparty/python/<toolchain>-requirements.txt"


def import_failure(
    exc: BaseException,
    source_path: str,
    is_user_file: Callable[[str], bool],
    sys_path: Sequence[str] = (),
) -> CompileError:
    """Importing the kernel source failed: say why in the terms of this build."""
    what = "importing the kernel source failed"
    missing = _missing_package(exc)
    if missing and _first_party(missing, sys_path):
        what += (
            "\n  %r is first-party code that is not among the compile's inputs: the "
            "gpu_kernel target must depend on a target owning it (inferred from the import, "
            "or listed in `dependencies`)" % missing
        )
    elif missing:
        what += (
            "\n  %r is not installed in the compile toolchain: the toolchain's packages come "
            "from %s (pinned in its lockfile), not from the machine or the app's resolve."
            "\n  fix: if the kernel needs it at compile time, add a pinned line such as "
            "`%s==<version>` to that file and run `./pants generate-lockfiles "
            "--resolve=<toolchain>`; if only host code needs it, import it outside the "
            "kernel source" % (missing, REQUIREMENTS, missing)
        )
    elif type(exc).__name__ == "CudaSupportError":
        what += (
            " (it needed a GPU: something at import time used the CUDA driver, e.g. "
            "cuda.to_device or cuda.device_array; kernels with signatures in @cuda.jit(...) "
            "need none, but device arrays cannot be created ahead of time)"
        )
    return located_error(exc, what, source_path, is_user_file)


def _denied_module(exc: BaseException) -> Optional[str]:
    """The file of a module the import did not find because the OS sandbox hid its directory.

    Why: Python's path finder lists each sys.path directory and takes a denied listing for an
    empty one, so ``sys.path.insert(0, "/opt/vendor"); import vendmod`` fails as "no module
    named vendmod". The file is found here by ``stat``, which the sandbox does not deny.
    """
    import sys
    from importlib.machinery import all_suffixes

    from gpu_compiler import confine

    conf = confine.active()
    name = _missing_package(exc)
    if conf is None or not name:
        return None
    for entry in sys.path:
        base = os.path.join(entry or ".", name)
        for cand in [base + s for s in all_suffixes()] + [os.path.join(base, "__init__.py")]:
            if os.path.isfile(cand) and not conf.is_input(cand):
                return cand
    # In the namespaces the directory is not there at all: an entry the kernel added that the
    # compile cannot see is where the module would have come from.
    for entry in confine.added_unseen_sys_path():
        return os.path.join(entry, name)
    return None


def _first_party(top_level: str, sys_path: Sequence[str]) -> bool:
    return any(
        os.path.isdir(os.path.join(root, top_level))
        or os.path.isfile(os.path.join(root, top_level + ".py"))
        for root in sys_path
    )


def _missing_package(exc: BaseException) -> str:
    """The top-level package a ModuleNotFoundError names."""
    for e in exception_chain(exc):
        if isinstance(e, ModuleNotFoundError) and e.name:
            return e.name.split(".")[0]
    return ""
