"""The sandbox: the directory whose files are the compile's inputs, and nothing else.

Why: the Pants rule runs the compiler in a sandbox holding exactly the process's
input files, and caches the result (locally and remotely) under a key made of
those inputs. A file read from anywhere else (``/opt/vendor/x.cuh``, ``../``
out of the sandbox, a symlink pointing out of it) is invisible to that key:
editing it would still give a cache hit with the old code, and with a remote
cache one machine's copy would reach every runner. So each file the compile
opens is checked here first, after ``realpath`` (symlinks count).

``Sandbox(None)`` confines nothing: the runtime's JIT mode compiles a
developer's checkout in their own process, where no cache key depends on it.
"""

from __future__ import annotations

import os
from typing import Optional

from gpu_compiler.paths import display_path

# The fix, as every refusal states it.
FIX_HEADER = (
    "put the header inside the repo and add the target that owns it to `dependencies` "
    "(or let inference find it); absolute or out-of-repo includes are not inputs of the "
    "hermetic compile"
)
FIX_MODULE = (
    "put the module inside the repo under a source root and add the target that owns it to "
    "`dependencies` (or let inference find it); modules imported from outside the repo "
    "(absolute or `../` sys.path entries) are not inputs of the hermetic compile"
)


def _real(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class Sandbox:
    """Answers "is this path one of the inputs?" for one root (None: everything is)."""

    def __init__(self, root: Optional[str]):
        self.root = root
        self._abs = os.path.normcase(os.path.abspath(root)) if root is not None else ""
        self._real = _real(root) if root is not None else ""

    @property
    def confined(self) -> bool:
        return self.root is not None

    def lexically_inside(self, path: str) -> bool:
        """``path`` (relative to the cwd) names a place inside the root before symlinks."""
        if self.root is None:
            return True
        return _under(os.path.normcase(os.path.abspath(path)), self._abs)

    def really_inside(self, path: str) -> bool:
        """``path`` is inside the root after resolving every symlink on the way."""
        if self.root is None:
            return True
        return _under(_real(path), self._real)

    def inside(self, path: str) -> bool:
        """Both: the name stays inside, and so does what it points to."""
        return self.lexically_inside(path) and self.really_inside(path)

    def where(self, path: str) -> str:
        """Where ``path`` resolves, for a message: a host path, or relative inside the root.

        ``through a symlink`` is said when only the resolved path is outside.
        """
        real = os.path.realpath(path)
        shown = display_path(real) if self.really_inside(path) else real
        if self.lexically_inside(path) and not self.really_inside(path):
            return "%s (through a symlink at %s)" % (shown, os.path.normpath(path))
        return shown
