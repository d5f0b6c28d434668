"""The one error type the compiler reports to its callers.

Why a dedicated type: the CLI turns exactly this into "message on stderr, exit
1, no outputs", while anything else is a bug in the compiler and should show a
traceback. It lives in its own light module so the Pants plugin and the
runtime can catch it without importing numba or the CUDA bindings.
"""

from __future__ import annotations

from typing import Iterator, Optional


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and each exception it was raised from or during (``__cause__``, else
    ``__context__``), each once: where a kernel's error hides what the compile was refused."""
    seen = set()
    cur: Optional[BaseException] = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


class CompileError(Exception):
    """A kernel source failed to compile; ``str(err)`` is the user-facing text.

    ``source`` and ``line`` locate the problem when it is known (the path is the
    relative path as given to the compiler, never an absolute sandbox path).
    """

    def __init__(self, message: str, source: Optional[str] = None, line: Optional[int] = None):
        super().__init__(message)
        self.message = message
        self.source = source
        self.line = line

    def __str__(self) -> str:
        return self.message
