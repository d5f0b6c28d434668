"""Importing a numba kernel source, in isolation and undoably.

Why import afresh for every (kernel, signature), and drop the modules after:
numba caches compiled device functions on their dispatcher objects, so with one
shared import the PTX of one kernel would depend on which kernels (and targets)
were compiled before it in the same process. The host process (the runtime's
JIT path shares it with the application) must also get its ``sys.path`` and
``sys.modules`` back as they were.

The module is imported under its dotted name relative to the first sys.path
root that contains it: that name is part of every mangled entry name.

In a hermetic compile (a ``sandbox_root``) the source and the sys.path roots
must be inside the sandbox, and each import runs under
``gpu_compiler.numba.import_guard``, which refuses any file opened outside the
sandbox and the toolchain.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from typing import Any, List, Optional, Sequence

from gpu_compiler.errors import CompileError
from gpu_compiler.numba.eager import lazy_eager_jit
from gpu_compiler.numba.import_guard import ImportGuard
from gpu_compiler.paths import is_compiler_file, is_under, same_file
from gpu_compiler.sandbox import FIX_MODULE, Sandbox


def read_source_text(source_path: str) -> str:
    """The kernel source as text (used to point error messages at its lines)."""
    try:
        with open(source_path, "rb") as f:
            return f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CompileError(
            "%s: error: cannot read source: %s" % (source_path, e), source=source_path
        ) from e


def module_name_for(source_path: str, sys_path: Sequence[str]) -> str:
    """Dotted module name of ``source_path`` relative to the first containing root.

    Falls back to the file stem when no root contains the file (or the
    relative path is not a valid dotted name).
    """
    src = os.path.abspath(source_path)
    for root in sys_path:
        if is_under(src, root):
            rel = os.path.relpath(src, os.path.abspath(root))
            if rel.endswith(".py"):
                parts = rel[:-3].split(os.sep)
                if parts and all(p.isidentifier() for p in parts):
                    return ".".join(parts)
    stem = os.path.splitext(os.path.basename(source_path))[0]
    stem = re.sub(r"\W", "_", stem)
    if not stem or stem[0].isdigit():
        stem = "_" + stem
    return stem


class SourceImporter:
    """Imports the kernel source in a way that can be undone.

    ``load()`` imports a fresh module object; ``purge()`` drops the kernel
    module and every module first imported since ``__enter__`` that lives
    under one of the sys.path roots (helper modules), restoring any module of
    the same name that was there before. Third-party modules imported on the
    way (numpy submodules etc.) stay: re-importing extension modules is unsafe.
    """

    def __init__(
        self, source_path: str, sys_path: Sequence[str], sandbox_root: Optional[str] = "."
    ):
        self.source_path = source_path
        self.sys_path = list(sys_path)
        self.module_name = module_name_for(source_path, self.sys_path)
        self.sandbox = Sandbox(sandbox_root)
        self._guard = ImportGuard(self.sandbox, source_path, self._is_sandbox_code)
        self._saved_path: List[str] = []
        self._before: set = set()
        self._prev_module: Any = None
        self._saved_dont_write = False

    def _is_sandbox_code(self, path: str) -> bool:
        return not is_compiler_file(path) and self.sandbox.inside(path)

    def _check_roots(self) -> None:
        """The source and its import roots must be inputs themselves."""
        if not self.sandbox.inside(self.source_path):
            raise CompileError(
                "%s: error: the kernel source resolves to %s, outside the compile's inputs "
                "(the sandbox); keep kernel sources inside the repo"
                % (self.source_path, self.sandbox.where(self.source_path)),
                source=self.source_path,
            )
        for root in self.sys_path:
            if not self.sandbox.inside(root):
                raise CompileError(
                    "%s: error: sys.path root %r resolves to %s, outside the compile's inputs "
                    "(the sandbox); fix: %s"
                    % (self.source_path, root, self.sandbox.where(root), FIX_MODULE),
                    source=self.source_path,
                )

    def __enter__(self) -> "SourceImporter":
        self._check_roots()
        self._saved_path = list(sys.path)
        sys.path[:0] = list(self.sys_path)  # first, so they win over anything else
        self._before = set(sys.modules)
        self._prev_module = sys.modules.get(self.module_name)
        # Do not scatter __pycache__ into the source tree / sandbox.
        self._saved_dont_write = sys.dont_write_bytecode
        sys.dont_write_bytecode = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.purge()
        if self._prev_module is not None:
            sys.modules[self.module_name] = self._prev_module
        sys.path[:] = self._saved_path
        sys.dont_write_bytecode = self._saved_dont_write

    def is_user_file(self, path: str) -> bool:
        """The kernel source, or a file under a sys.path root that is not gpu_compiler's."""
        if is_compiler_file(path):
            return False
        return same_file(path, self.source_path) or any(is_under(path, r) for r in self.sys_path)

    def _is_user_module(self, mod: Any) -> bool:
        try:
            f = getattr(mod, "__file__", None)
            if f:
                files = [f]
            else:  # namespace package: its search locations
                spec = getattr(mod, "__spec__", None)
                locs = getattr(spec, "submodule_search_locations", None) if spec else None
                files = list(getattr(locs, "_path", None) or locs or [])
        except Exception:
            return False
        if not files:
            return False
        return all(self.is_user_file(p) for p in files)

    def purge(self) -> None:
        # Decide first, delete after: a namespace package's __path__ is
        # recomputed from its parent, which must still be in sys.modules.
        doomed = [
            name
            for name, mod in list(sys.modules.items())
            if name == self.module_name or (name not in self._before and self._is_user_module(mod))
        ]
        for name in doomed:
            sys.modules.pop(name, None)
        importlib.invalidate_caches()

    def _exited(self, e: SystemExit) -> CompileError:
        """A kernel module that exits while imported would end the compile with nothing
        written and, for `sys.exit(0)`, a success: said instead, at the line that exited."""
        shown = os.path.normpath(self.source_path)
        line = None
        tb = e.__traceback__
        while tb is not None:
            if os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(shown):
                line = tb.tb_lineno
            tb = tb.tb_next
        where = "%s:%d" % (shown, line) if line else shown
        return CompileError(
            "%s: error: the kernel module called sys.exit(%r) while it was imported; fix: a "
            "kernel module is imported to be typed and must not exit (keep script code under "
            '`if __name__ == "__main__":`)' % (where, e.code),
            source=shown,
            line=line,
        )

    def load(self) -> Any:
        self.purge()
        spec = importlib.util.spec_from_file_location(self.module_name, self.source_path)
        if spec is None or spec.loader is None:
            raise CompileError(
                "%s: error: cannot import kernel source" % (self.source_path,),
                source=self.source_path,
            )
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.module_name] = module
        before = set(sys.modules)
        with self._guard, lazy_eager_jit():
            try:
                spec.loader.exec_module(module)
            except SystemExit as e:
                self._guard.raise_refusal()
                raise self._exited(e) from None
            except BaseException:
                self._guard.raise_refusal()  # the refusal is the cause, whatever it led to
                raise
        self._guard.raise_refusal()
        self._guard.check_modules(set(sys.modules) - before)
        return module
