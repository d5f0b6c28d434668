"""Keep absolute (sandbox) paths out of outputs and messages.

Why: the compiler runs inside a Pants sandbox whose absolute path changes from
run to run; an absolute path in a PTX ``.file`` directive or an error message
would make outputs differ between identical builds and leak machine details.
Everything under the working directory is shown relative to it.
"""

from __future__ import annotations

import os
from typing import Optional


def display_path(path: str, given: Optional[str] = None) -> str:
    """How to show ``path`` to a user.

    If ``path`` is the same file as ``given`` (the source path as the caller
    gave it), show ``given`` so messages match the command line. Otherwise a
    path under the cwd is shown relative to it.
    """
    if given is not None and same_file(path, given):
        return given
    if os.path.isabs(path):
        cwd = os.getcwd().rstrip(os.sep) + os.sep
        norm = os.path.normpath(path)
        if norm.startswith(cwd):
            return norm[len(cwd) :]
    return path


def relativize_text(text: str) -> str:
    """Replace ``<cwd>/`` prefixes in free text (compiler logs) with nothing."""
    cwd = os.getcwd().rstrip(os.sep)
    if not cwd or cwd == os.sep:
        return text
    out = text.replace(cwd + os.sep, "")
    real = os.path.realpath(cwd)
    if real != cwd:
        out = out.replace(real + os.sep, "")
    return out


def is_under(path: str, root: str) -> bool:
    """True if ``path`` is ``root`` or inside it (both resolved to absolute)."""
    p = os.path.abspath(path)
    r = os.path.abspath(root)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def same_file(a: str, b: str) -> bool:
    """The same path once both are made absolute (no symlinks resolved)."""
    return os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


# gpu_compiler's own code: the package and its subpackages. Anything else under its directory
# (testdata/) is ordinary user code, held to the sandbox like any kernel source.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_CODE_DIRS = frozenset(
    os.path.join(_PACKAGE_DIR, sub) if sub else _PACKAGE_DIR
    for sub in ("", "numba", "cuda_cpp", "link", "walls")
)


def is_compiler_file(path: str) -> bool:
    """A module of gpu_compiler itself (which may sit under a sys.path root too)."""
    return os.path.dirname(os.path.abspath(path)) in _CODE_DIRS
