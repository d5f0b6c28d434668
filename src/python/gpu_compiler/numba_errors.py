"""numba's exceptions as CompileErrors that point at the user's file and line.

Why search for the location: the build reports ``relative/path:line: error:``
like any compiler, but numba's exceptions carry their location in different
places (``.loc``, a SyntaxError's fields, or only in the traceback's frames),
and their text may hold absolute sandbox paths.
"""

from __future__ import annotations

import linecache
import traceback
from typing import Any, Callable, Iterator, Optional, Tuple, TypeGuard

from gpu_compiler.errors import CompileError
from gpu_compiler.paths import display_path, relativize_text


def _is_loc(v: Any) -> TypeGuard[Any]:
    return (
        v is not None
        and isinstance(getattr(v, "filename", None), str)
        and isinstance(getattr(v, "line", None), int)
    )


def _walk_exceptions(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    cur: Optional[BaseException] = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


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
    for e in _walk_exceptions(exc):
        loc = getattr(e, "loc", None)
        if _is_loc(loc) and is_user_file(loc.filename):
            return loc.filename, loc.line
        if isinstance(e, SyntaxError) and e.filename and e.lineno and is_user_file(e.filename):
            return e.filename, e.lineno
    best: Optional[Tuple[str, int]] = None
    for e in _walk_exceptions(exc):
        for frame, lineno in traceback.walk_tb(e.__traceback__):
            if is_user_file(frame.f_code.co_filename):
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
    the offending line and numba's own (relativized) text.
    """
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
