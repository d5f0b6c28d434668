"""A compile that does not finish in time stops, saying which of the kernel's files it was in.

Why: a kernel module runs arbitrary Python at import (numba sources are imported to be typed),
and one that blocks (a read of a FIFO, a lock, a `while True`, a network call the sandbox lets
hang) would hold the build, or JIT mode's first launch, forever. Pants' process timeout is the
backstop; this says where the time went: on SIGALRM the main thread's stack is searched for the
innermost frame of a file of the compile's inputs (the working directory, not the toolchain nor
gpu_compiler itself), and the compile fails with that file and line.

`CompileDeadline` derives from BaseException, like KeyboardInterrupt, so that a kernel's own
`except Exception:` (or numba's error translation) cannot swallow it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from types import FrameType
from typing import Iterator, Optional, Tuple

from gpu_compiler.paths import is_compiler_file

FIX = (
    "make the kernel module's top level finish (no blocking reads, locks, loops or network at "
    "import), or raise the limit (`[gpu-toolchains].compile_timeout`, JIT mode's "
    "GPU_RUNTIME_COMPILE_TIMEOUT)"
)


class CompileDeadline(BaseException):
    """The compile ran past its time limit; `where` is (file, line) of the kernel's code it was
    in, relative to the working directory, or None if it was in none (the toolchain's own)."""

    def __init__(self, seconds: float, where: Optional[Tuple[str, int]]) -> None:
        super().__init__(seconds, where)
        self.seconds, self.where = seconds, where

    def report(self, source: str) -> str:
        """One line, ``file:line: error: ...``."""
        limit = "%g s" % self.seconds
        if self.where is None:
            return (
                "%s: error: the compile did not finish within %s (the toolchain was still "
                "working: NVRTC, NVVM or the link); fix: %s" % (source, limit, FIX)
            )
        path, line = self.where
        doing = "" if path == source else " (a module %s imports)" % source
        return (
            "%s:%d: error: the compile did not finish within %s: it was still running line %d of "
            "%s%s; fix: %s" % (path, line, limit, line, path, doing, FIX)
        )


def _kernel_frame(frame: Optional[FrameType]) -> Optional[Tuple[str, int]]:
    """The innermost frame whose file is one of the inputs (under the working directory)."""
    cwd = os.getcwd().rstrip(os.sep) + os.sep
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        real_file = os.path.isfile(path)  # not "<frozen importlib._bootstrap>", "<string>"
        if real_file and path.startswith(cwd) and not is_compiler_file(path):
            return os.path.relpath(path), frame.f_lineno
        frame = frame.f_back
    return None


@contextlib.contextmanager
def deadline(seconds: Optional[float]) -> Iterator[None]:
    """Raise CompileDeadline in the main thread once ``seconds`` have passed (None or 0: no
    limit). A blocking system call is interrupted: the handler raises, so it is not retried."""
    if not seconds or not hasattr(signal, "setitimer"):
        yield
        return
    limit = float(seconds)

    def on_alarm(_signum: int, frame: Optional[FrameType]) -> None:
        raise CompileDeadline(limit, _kernel_frame(frame))

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
