"""While a numba kernel source imports, refuse every file it opens outside the inputs.

Why at the open and not by reading the source's ``import`` lines: a kernel can
``sys.path.insert(0, "/opt/vendor")``, import through a ``../`` sys.path entry
or a symlink, or ``exec(open(...).read())``; all of these end in Python opening
a file, and CPython raises an ``open`` audit event for each (``io.open``,
``io.open_code`` that the import system uses for source and bytecode files,
``os.open``). An audit hook sees the path before the file is read, so the
refused file's content never reaches the compile. The refusal is recorded as
well as raised, so a kernel that catches the ImportError still fails.

Allowed: files inside the sandbox (after ``realpath``) and the toolchain: the
standard library, the site-packages of the interpreter's environment (the
toolchain PEX's venv, whose packages the lockfile pins), gpu_compiler's own
modules and gpu_spec. Extension modules are loaded without an ``open`` event,
so the modules an import added are checked after it too.

Audit hooks cannot be removed: one is installed per process on first use and
does nothing unless a guard is active on the calling thread, so other threads
of a host process are never affected.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import threading
from typing import Any, Callable, Iterable, List, Optional, Tuple

from gpu_compiler.errors import CompileError
from gpu_compiler.paths import display_path, is_compiler_file
from gpu_compiler.sandbox import FIX_MODULE, Sandbox

_local = threading.local()
_hook_lock = threading.Lock()
_hook_installed = False


def _toolchain_roots() -> List[str]:
    """Directories whose files belong to the toolchain rather than to the kernel's inputs."""
    paths = sysconfig.get_paths()
    roots = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    try:
        roots += site.getsitepackages()
    except AttributeError:  # pragma: no cover - old virtualenv's site module
        pass
    import gpu_spec

    roots.append(os.path.dirname(os.path.abspath(gpu_spec.__file__)))
    out: List[str] = []
    for r in roots:
        for form in (os.path.abspath(r), os.path.realpath(r)):
            if form not in out:
                out.append(form)
    return out


def _hidden_roots() -> List[str]:
    """A base interpreter's site-packages under the stdlib: not the toolchain (see confine)."""
    from gpu_compiler import confine

    return confine.hidden_dirs()


def toolchain_roots() -> List[str]:
    """The toolchain's directories (standard library, site-packages, gpu_spec)."""
    return _toolchain_roots()


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def is_toolchain_file(path: str, roots: Iterable[str]) -> bool:
    """Under a toolchain root (by name or after realpath), or one of gpu_compiler's modules."""
    absolute = os.path.abspath(path)
    if is_compiler_file(absolute):
        return True
    real = os.path.realpath(path)
    return any(_under(absolute, r) or _under(real, r) for r in roots)


def _module_file(path: str) -> str:
    """The source a ``__pycache__/name.tag.pyc`` is compiled from (the file a user knows)."""
    head, tail = os.path.split(path)
    if os.path.basename(head) == "__pycache__" and tail.endswith(".pyc"):
        return os.path.join(os.path.dirname(head), tail.split(".", 1)[0] + ".py")
    return path


def _audit(event: str, args: Tuple[Any, ...]) -> None:
    if event != "open":
        return
    guard = getattr(_local, "guard", None)
    if guard is None or not args or not isinstance(args[0], (str, bytes)):
        return  # not guarding this thread, or a file descriptor
    from gpu_compiler.confine import opens_for_writing

    guard.on_open(os.fsdecode(args[0]), opens_for_writing(args))


def _install_hook() -> None:
    global _hook_installed
    with _hook_lock:
        if not _hook_installed:
            sys.addaudithook(_audit)
            _hook_installed = True


class ImportGuard:
    """``with guard:`` refuses opens outside the sandbox and toolchain on this thread."""

    def __init__(self, sandbox: Sandbox, source_path: str, is_user_file: Callable[[str], bool]):
        self.sandbox = sandbox
        self.source_path = source_path
        self.is_user_file = is_user_file
        self.refusal: Optional[CompileError] = None
        self._roots = _toolchain_roots() if sandbox.confined else []
        self._hidden = _hidden_roots() if sandbox.confined else []
        self._busy = False

    def __enter__(self) -> "ImportGuard":
        if self.sandbox.confined:
            _install_hook()
            _local.guard = self
        return self

    def __exit__(self, *exc: Any) -> None:
        if getattr(_local, "guard", None) is self:
            _local.guard = None

    def allowed(self, path: str) -> bool:
        if self.sandbox.inside(path):
            return True
        hidden = any(_under(os.path.abspath(path), h) for h in self._hidden)
        return not hidden and is_toolchain_file(path, self._roots)

    def on_open(self, path: str, writes: bool = False) -> None:
        if self._busy:
            return
        self._busy = True  # the checks below must not re-enter through their own events
        try:
            if self.allowed(path):  # a write to an input: the OS sandbox refuses it (EROFS)
                return
            error = self._refuse(path, self._import_site(), writes=writes)
        finally:
            self._busy = False
        if self.refusal is None:
            self.refusal = error
        raise error

    def _import_site(self) -> Optional[Tuple[str, int]]:
        """(file, line) of the innermost user code on the stack: the import statement."""
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if not name.startswith("<") and self.is_user_file(name) and self.sandbox.inside(name):
                return display_path(name, self.source_path), frame.f_lineno
            frame = frame.f_back  # type: ignore[assignment]
        return None

    def _refuse(
        self, path: str, site_: Optional[Tuple[str, int]], module: str = "", writes: bool = False
    ) -> CompileError:
        from gpu_compiler import confine

        what = "module %r from %s" % (module, path) if module else _module_file(path)
        shown = self.sandbox.where(what) if not module else what
        if writes:
            text = confine.refusal_text(shown, "write")
        else:
            is_module = module or what.endswith((".py", ".pyc", ".so"))
            text = (
                "refused to read %s: it is outside the compile's inputs (the sandbox) and the "
                "toolchain (%s); fix: %s"
                % (shown, confine.WHY.split(";")[0], FIX_MODULE if is_module else confine.FIX_READ)
            )
        if site_ is None:
            return CompileError("%s: error: %s" % (self.source_path, text), source=self.source_path)
        return CompileError("%s:%d: error: %s" % (site_[0], site_[1], text), *site_)

    def raise_refusal(self) -> None:
        """Raise what was refused during the import, even if the kernel caught it."""
        if self.refusal is not None:
            raise self.refusal

    def check_modules(self, names: Iterable[str]) -> None:
        """Modules the import added (extension modules load with no ``open`` event)."""
        if not self.sandbox.confined:
            return
        for name in sorted(names):
            f = getattr(sys.modules.get(name), "__file__", None)
            if isinstance(f, str) and not self.allowed(f):
                raise self._refuse(f, None, module=name)
