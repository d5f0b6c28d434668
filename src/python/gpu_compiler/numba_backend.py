"""Ahead-of-time compilation of numba-cuda kernel sources to PTX, without a GPU.

Kernel source convention
------------------------
A kernel source is an ordinary Python module that:

* defines kernels with plain ``@cuda.jit`` (optionally with keyword options
  such as ``fastmath=True``, ``lineinfo=True``, ``launch_bounds=...``), **no
  signature**, so importing the module needs no GPU and compiles nothing;
* defines a module-level dict ``AOT_SIGNATURES`` mapping kernel names to the
  list of concrete numba signature strings to compile ahead of time::

      AOT_SIGNATURES = {
          "saxpy": ["void(float32[::1], float32, float32[::1], float32[::1])"],
      }

* may import helper modules (``@cuda.jit(device=True)`` functions) from its
  package; the caller passes the sys.path roots (e.g. ``src/python``) that make
  those imports work, and the module is imported under its dotted name relative
  to the first root containing it (``imaging.kernels.saxpy``). That dotted name
  is part of the kernel's mangled entry name, so it must be stable: pass the
  same roots at build time and at JIT time.

Each (kernel, signature index) becomes one module ``<kernel>__<index>``.

How the compile is made reproducible and GPU-free
-------------------------------------------------
* ``numba.cuda.compile(..., device=False, abi="numba", output="ptx", cc=...)``
  produces the kernel PTX; PTX -> cubin is done by ``gpu_compiler.linker``.
* numba-cuda asks the *current device* for the compute capability when it
  compiles a device function called by a kernel (``CUDADispatcher.
  compile_device``), which fails without a GPU and would use the wrong target
  with one. During our compile that lookup is patched to report the target
  capability.
* numba puts a per-process function counter into mangled names
  (``...B2v1B92...``). It is reset before each compile (and moved past every
  value used afterwards, so the host process never sees a duplicate).
* The kernel module, and any helper modules under the sys.path roots that it
  imports, are imported afresh for every (kernel, signature) and dropped
  afterwards: compiled device functions are cached on their dispatcher object,
  so without this the PTX of one kernel would depend on which kernels (and
  targets) were compiled before it in the same process.
* Line-info ``.file`` paths are made relative to the working directory.

Argument ABI (recorded per argument in metadata.json, used by the runtime to
launch without numba): an array argument is passed as meminfo, parent, nitems,
itemsize, data pointer, shape[ndim], strides[ndim] (bytes) -- all 8-byte
values, ``5 + 2*ndim`` PTX params; a scalar is passed by value (a complex
scalar as two params: real, imag). Only array-of-number and number/boolean
scalar arguments are supported.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import linecache
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from gpu_compiler import ptx as ptxmod
from gpu_spec.capabilities import parse_capability
from gpu_compiler.errors import CompileError
from gpu_compiler.paths import display_path, is_under, relativize_text

AOT_ATTR = "AOT_SIGNATURES"


@dataclass
class NumbaKernelPTX:
    """One compiled (kernel, signature): becomes one output module."""

    module_name: str
    kernel: str
    signature: str
    ptx: str
    entry: str
    args: List[Dict[str, Any]]
    params: List[str] = field(default_factory=list)


# ---------------------------------------------------------------------------
# Importing the kernel source


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


class _Importer:
    """Imports the kernel source in a way that can be undone.

    ``load()`` imports a fresh module object; ``purge()`` drops the kernel
    module and every module first imported since ``__enter__`` that lives
    under one of the sys.path roots (helper modules), restoring any module of
    the same name that was there before. Third-party modules imported on the
    way (numpy submodules etc.) stay: re-importing extension modules is unsafe.
    """

    def __init__(self, source_path: str, sys_path: Sequence[str], module_name: str):
        self.source_path = source_path
        self.sys_path = list(sys_path)
        self.module_name = module_name
        self._saved_path: List[str] = []
        self._before: set = set()
        self._prev_module: Any = None
        self._saved_dont_write = False

    def __enter__(self) -> "_Importer":
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
        return all(
            not _is_compiler_file(p)
            and (any(is_under(p, root) for root in self.sys_path) or _same_file(p, self.source_path))
            for p in files
        )

    def purge(self) -> None:
        # Decide first, delete after: a namespace package's __path__ is
        # recomputed from its parent, which must still be in sys.modules.
        doomed = [
            name
            for name, mod in list(sys.modules.items())
            if name == self.module_name
            or (name not in self._before and self._is_user_module(mod))
        ]
        for name in doomed:
            sys.modules.pop(name, None)
        importlib.invalidate_caches()

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
        spec.loader.exec_module(module)
        return module


def _same_file(a: str, b: str) -> bool:
    return os.path.abspath(a) == os.path.abspath(b)


_COMPILER_DIR = os.path.dirname(os.path.abspath(__file__))


def _is_compiler_file(path: str) -> bool:
    """Modules of gpu_compiler itself (which may sit under a sys.path root too).

    Only files directly in the package directory: sub-directories (test
    fixtures) are ordinary user code.
    """
    return os.path.dirname(os.path.abspath(path)) == _COMPILER_DIR


# ---------------------------------------------------------------------------
# numba process-state helpers


class _TargetDevice:
    """Stands in for the current device: only ``compute_capability`` is read."""

    def __init__(self, cc: Tuple[int, int]):
        self.compute_capability = cc
        self.id = 0
        self.name = b"gpu_compiler AOT target sm_%d%d" % cc


@contextlib.contextmanager
def _target_capability(cc: Tuple[int, int]) -> Iterator[None]:
    """Make numba-cuda's device-function compiles use ``cc`` (no GPU needed)."""
    import numba.cuda.dispatcher as dispatcher

    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: _TargetDevice(cc)  # type: ignore[assignment]
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


class _Counter:
    """One numba process-global, monotonically increasing naming counter.

    Its state is an int attribute or an ``itertools.count`` (whose state is
    the next value it yields); ``initial`` is the state of a fresh process.
    """

    def __init__(self, module: str, owner: str, attr: str, initial: int):
        self.module, self.owner, self.attr, self.initial = module, owner, attr, initial

    def _holder(self) -> Any:
        mod = sys.modules.get(self.module)
        if mod is None:
            return None
        holder = getattr(mod, self.owner, None) if self.owner else mod
        return holder if holder is not None and hasattr(holder, self.attr) else None

    def get(self) -> Optional[int]:
        h = self._holder()
        if h is None:
            return None
        v = getattr(h, self.attr)
        if isinstance(v, itertools.count):
            n = next(v)
            setattr(h, self.attr, itertools.count(n))  # put it back unconsumed
            return n
        return v if isinstance(v, int) else None

    def set(self, state: int) -> None:
        h = self._holder()
        if h is None:
            return
        if isinstance(getattr(h, self.attr), itertools.count):
            setattr(h, self.attr, itertools.count(state))
        else:
            setattr(h, self.attr, state)


# Counters that make generated names depend on what the process compiled
# before (all in numba-cuda 0.30.4):
# - FunctionIdentity._unique_ids: the "v<N>" ABI tag in every mangled name;
# - cudaimpl._unique_smem_id: the N in shared-array symbols "_cudapy_smem_N";
# - ir_utils._unique_var_count / _the_max_label: IR variable names and block
#   labels (not visible in PTX today, reset for good measure).
_COUNTERS = (
    _Counter("numba.cuda.core.bytecode", "FunctionIdentity", "_unique_ids", 1),
    _Counter("numba.core.bytecode", "FunctionIdentity", "_unique_ids", 1),
    _Counter("numba.cuda.cudaimpl", "", "_unique_smem_id", 0),
    _Counter("numba.cuda.core.ir_utils", "", "_unique_var_count", 0),
    _Counter("numba.cuda.core.ir_utils", "_the_max_label", "_value", 0),
)


@contextlib.contextmanager
def _fresh_counters() -> Iterator[None]:
    """Restart numba's process-global naming counters for one compile.

    Afterwards each counter continues past both its old and its new value, so
    names stay unique for anything else the host process compiles (the
    runtime's JIT path shares the process with the application).
    """
    import numba.cuda.cudaimpl  # noqa: F401  (make sure every counter exists)
    import numba.cuda.core.bytecode  # noqa: F401
    import numba.cuda.core.ir_utils  # noqa: F401

    saved = [c.get() for c in _COUNTERS]
    for c, old in zip(_COUNTERS, saved):
        if old is not None:
            c.set(c.initial)
    try:
        yield
    finally:
        for c, old in zip(_COUNTERS, saved):
            now = c.get()
            if old is not None and now is not None:
                c.set(max(old, now))


# ---------------------------------------------------------------------------
# Error locations


def _is_loc(v: Any) -> bool:
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
    exc: BaseException, is_user_file: Any
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


def _exception_text(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    return "%s: %s" % (name, text) if text else name


# ---------------------------------------------------------------------------
# Signatures and ABI


def _find_line(source_text: str, pattern: str) -> Optional[int]:
    rx = re.compile(pattern, re.MULTILINE)
    m = rx.search(source_text)
    if m is None:
        return None
    return source_text.count("\n", 0, m.start()) + 1


def _read_signatures(
    module: Any, source_path: str, source_text: str
) -> List[Tuple[str, List[str]]]:
    aot_line = _find_line(source_text, r"^%s\s*[:=]" % AOT_ATTR)
    where = "%s:%d" % (source_path, aot_line) if aot_line else source_path
    if not hasattr(module, AOT_ATTR):
        raise CompileError(
            "%s: error: no module-level %s dict: a numba kernel source must map each "
            "kernel name to the signatures to compile ahead of time, e.g.\n"
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
            if not isinstance(s, str):
                raise CompileError(
                    "%s: error: %s[%r] contains %r, expected a signature string such "
                    'as "void(float32[::1])"' % (where, AOT_ATTR, name, s),
                    source=source_path,
                    line=aot_line,
                )
        out.append((str(name), list(sigs)))
    return out


def _kernel_dispatcher(module: Any, name: str, source_path: str, source_text: str) -> Any:
    from numba.cuda.dispatcher import CUDADispatcher

    obj = getattr(module, name, None)
    is_kernel = isinstance(obj, CUDADispatcher) and not obj.targetoptions.get("device")
    if is_kernel:
        if obj.targetoptions.get("link"):
            raise CompileError(
                "%s: error: kernel %r uses link=...; linking extra files is not "
                "supported by the AOT compiler" % (source_path, name),
                source=source_path,
            )
        return obj
    kernels = sorted(
        k
        for k, v in vars(module).items()
        if isinstance(v, CUDADispatcher) and not v.targetoptions.get("device")
    )
    line = _find_line(source_text, r"^\s*def\s+%s\s*\(" % re.escape(name)) or _find_line(
        source_text, r"^%s\s*[:=]" % AOT_ATTR
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


def arg_abi(numba_type: Any) -> Dict[str, Any]:
    """Structured numba-ABI description of one kernel argument type."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    scalar_types = (types.Boolean, types.Integer, types.Float, types.Complex)
    if isinstance(numba_type, types.Array):
        if not isinstance(numba_type.dtype, scalar_types):
            raise ValueError("array of %s" % (numba_type.dtype,))
        return {
            "kind": "array",
            "dtype": numpy_support.as_dtype(numba_type.dtype).name,
            "ndim": int(numba_type.ndim),
            "layout": str(numba_type.layout),
        }
    if isinstance(numba_type, scalar_types):
        return {"kind": "scalar", "dtype": numpy_support.as_dtype(numba_type).name}
    raise ValueError(str(numba_type))


def abi_param_count(arg: Dict[str, Any]) -> int:
    """How many PTX kernel params one argument flattens to."""
    if arg["kind"] == "array":
        return 5 + 2 * int(arg["ndim"])
    if arg["dtype"].startswith("complex"):
        return 2
    return 1


# ---------------------------------------------------------------------------
# The backend entry point


def compile_numba_source(
    source_path: str,
    capability: str,
    *,
    sys_path: Sequence[str] = (),
    fast_math: bool = False,
    lineinfo: bool = False,
) -> List[NumbaKernelPTX]:
    """Compile every (kernel, signature) in ``AOT_SIGNATURES`` to PTX.

    Returns one ``NumbaKernelPTX`` per module, ordered by module name. Raises
    CompileError for anything wrong with the source.
    """
    cc = parse_capability(capability)
    try:
        with open(source_path, "rb") as f:
            source_text = f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CompileError("%s: error: cannot read source: %s" % (source_path, e), source=source_path)

    try:
        from numba import cuda
        from numba.cuda.core import sigutils
    except Exception as e:  # pragma: no cover - toolchain problem
        raise CompileError("numba-cuda is not importable in this toolchain: %s" % (e,))

    roots = list(sys_path)
    modname = module_name_for(source_path, roots)

    def is_user_file(path: str) -> bool:
        if _is_compiler_file(path):
            return False
        return _same_file(path, source_path) or any(is_under(path, r) for r in roots)

    def fail(exc: BaseException, what: str) -> CompileError:
        loc = _error_location(exc, is_user_file)
        text = relativize_text(_exception_text(exc))
        if loc is None:
            return CompileError(
                "%s: error: %s\n%s" % (source_path, what, text), source=source_path
            )
        shown = display_path(loc[0], source_path, source_path)
        code = linecache.getline(loc[0], loc[1]).rstrip()
        snippet = "\n    %s" % code.strip() if code.strip() else ""
        return CompileError(
            "%s:%d: error: %s%s\n%s" % (shown, loc[1], what, snippet, text),
            source=shown,
            line=loc[1],
        )

    from numba.cuda.core.compiler_lock import global_compiler_lock

    results: List[NumbaKernelPTX] = []
    # numba's compiler lock (re-entrant) serializes us with any other numba
    # compile in this process: the counters, sys.modules and sys.path
    # changes below are process-global.
    with global_compiler_lock, _Importer(source_path, roots, modname) as importer:
        try:
            module = importer.load()
        except CompileError:
            raise
        except Exception as e:  # SyntaxError, ImportError, anything at import
            what = "importing the kernel source failed"
            if type(e).__name__ == "CudaSupportError":
                what += (
                    " (it needed a GPU: declare kernels with plain @cuda.jit, no "
                    "signature, and list signatures in %s)" % AOT_ATTR
                )
            raise fail(e, what) from None
        table = _read_signatures(module, source_path, source_text)
        for name, _ in table:
            _kernel_dispatcher(module, name, source_path, source_text)

        for name, sigs in table:
            for index, sig in enumerate(sigs):
                module_name = "%s__%d" % (name, index)
                try:
                    module = importer.load()
                except Exception as e:
                    raise fail(e, "importing the kernel source failed") from None
                disp = _kernel_dispatcher(module, name, source_path, source_text)
                opts = disp.targetoptions
                aot_line = _find_line(source_text, r"^%s\s*[:=]" % AOT_ATTR)
                try:
                    argtypes, _ret = sigutils.normalize_signature(sig)
                except Exception as e:
                    raise CompileError(
                        "%s%s: error: invalid signature %r for kernel %r: %s"
                        % (source_path, ":%d" % aot_line if aot_line else "", sig, name,
                           _exception_text(e)),
                        source=source_path,
                        line=aot_line,
                    ) from None
                try:
                    args = [arg_abi(t) for t in argtypes]
                except ValueError as e:
                    raise CompileError(
                        "%s%s: error: kernel %r signature %r has an argument of type %s; "
                        "the AOT ABI supports arrays of numbers and number/boolean scalars"
                        % (source_path, ":%d" % aot_line if aot_line else "", name, sig, e),
                        source=source_path,
                        line=aot_line,
                    ) from None
                fm = True if fast_math else (opts.get("fastmath") or False)
                li = bool(lineinfo or opts.get("lineinfo"))
                try:
                    with _target_capability(cc), _fresh_counters():
                        ptx_text, _resty = cuda.compile(
                            disp.py_func,
                            sig,
                            debug=False,
                            lineinfo=li,
                            device=False,
                            fastmath=fm,
                            cc=cc,
                            opt=bool(opts.get("opt", True)),
                            abi="numba",
                            output="ptx",
                            launch_bounds=opts.get("launch_bounds"),
                        )
                except CompileError:
                    raise
                except Exception as e:
                    raise fail(e, "compiling kernel %r for %s with signature %s failed"
                               % (name, capability, sig)) from None
                results.append(
                    _finish(module_name, name, sig, ptx_text, args, capability, source_path)
                )
    results.sort(key=lambda r: r.module_name)
    return results


def _finish(
    module_name: str,
    kernel: str,
    sig: str,
    ptx_text: str,
    args: List[Dict[str, Any]],
    capability: str,
    source_path: str,
) -> NumbaKernelPTX:
    ptx_text = ptxmod.relativize_file_directives(ptx_text)
    target = ptxmod.ptx_target(ptx_text)
    if target != capability:
        # numba picks the "closest supported" arch when the exact one is not
        # available; an AOT build must not silently change the target.
        raise CompileError(
            "%s: error: numba-cuda generated PTX for %s instead of %s"
            % (source_path, target, capability),
            source=source_path,
        )
    entries = ptxmod.parse_entries(ptx_text)
    if len(entries) != 1:
        raise CompileError(
            "%s: error: expected one kernel entry in the PTX of %s, found %s"
            % (source_path, module_name, sorted(entries) or "none"),
            source=source_path,
        )
    entry, params = next(iter(entries.items()))
    expected = sum(abi_param_count(a) for a in args)
    if expected != len(params):
        raise CompileError(
            "%s: error: kernel %r PTX has %d params but the numba ABI of %s gives %d; "
            "this numba-cuda version's ABI is not what gpu_compiler expects"
            % (source_path, kernel, len(params), sig, expected),
            source=source_path,
        )
    return NumbaKernelPTX(
        module_name=module_name,
        kernel=kernel,
        signature=sig,
        ptx=ptx_text,
        entry=entry,
        args=args,
        params=params,
    )

