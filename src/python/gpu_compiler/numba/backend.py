"""Ahead-of-time compilation of numba-cuda kernel sources to PTX, without a GPU.

Kernel source convention
------------------------
A kernel source is an ordinary Python module that:

* defines kernels with ``@cuda.jit`` (optionally with keyword options such as
  ``fastmath=True``, ``lineinfo=True``, ``launch_bounds=...``, ``link=[...]``), each
  with its signatures either in the decorator, as numba's docs write them
  (``@cuda.jit("void(float32[::1])")``, ``@cuda.jit(types.void(types.CPointer(types.uint8)))``
  or a list of either: ``gpu_compiler.numba.eager`` keeps the import GPU-free), or with
  no signature and a module-level dict ``AOT_SIGNATURES`` mapping kernel names to
  the list of signatures (strings or numba type objects) to compile ahead of time::

      AOT_SIGNATURES = {
          "saxpy": ["void(float32[::1], float32, float32[::1], float32[::1])"],
      }

* may call CUDA C++ through ``cuda.declare_device(name, sig, link="file.cu")`` (or
  ``@cuda.jit(link=[...])``): those files are compiled with NVRTC and linked
  (``gpu_compiler.numba.links``); kernels using grid sync are linked with libcudadevrt;

* may import helper modules (``@cuda.jit(device=True)`` functions) from its
  package; the caller passes the sys.path roots (e.g. ``src/python``) that make
  those imports work, and the module is imported under its dotted name relative
  to the first root containing it (``imaging.kernels.saxpy``). That dotted name
  is part of the kernel's mangled entry name, so it must be stable: pass the
  same roots at build time and at JIT time.

Each (kernel, signature index) becomes one module ``<kernel>__<index>``.

How the compile is made reproducible and GPU-free
-------------------------------------------------
* ``gpu_compiler.numba.ptx``: the PTX of one (kernel, signature), with the
  current device patched to report the target capability.
* ``gpu_compiler.numba.counters``: numba's per-process naming counters are
  reset before each compile (and moved past every value used afterwards, so
  the host process never sees a duplicate).
* ``gpu_compiler.numba.source``: the kernel module, and any helper modules
  under the sys.path roots that it imports, are imported afresh for every
  (kernel, signature) and dropped afterwards.
* Line-info ``.file`` paths are made relative to the working directory.

The argument ABI recorded in metadata.json is ``gpu_compiler.numba.abi``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Tuple

from gpu_compiler.errors import CompileError
from gpu_compiler.numba import link_order as numba_link_order
from gpu_compiler.numba.abi import describe_args
from gpu_compiler.numba.eager import signature_text
from gpu_compiler.numba.errors import import_failure, located_error
from gpu_compiler.numba.ptx import NumbaKernelPTX, compile_kernel_ptx, kernel_ptx
from gpu_compiler.numba.signatures import (
    aot_table_line,
    kernel_dispatcher,
    read_signatures,
    signature_argtypes,
)
from gpu_compiler.numba.source import SourceImporter, read_source_text
from gpu_spec.capabilities import parse_capability
from gpu_spec.compile.options import CompileOptions


@dataclass(frozen=True)
class _Target:
    """What every (kernel, signature) of one source is compiled for."""

    capability: str
    cc: Tuple[int, int]
    fast_math: bool
    lineinfo: bool


def compile_numba_source(
    source_path: str, capability: str, options: CompileOptions
) -> List[NumbaKernelPTX]:
    """Compile every (kernel, signature) in ``AOT_SIGNATURES`` to PTX.

    Returns one ``NumbaKernelPTX`` per module, ordered by module name. Raises
    CompileError for anything wrong with the source, including an import of a
    file outside ``options.sandbox_root`` and the toolchain (None: no such check).
    """
    cc = parse_capability(capability)
    target = _Target(capability, cc, options.fast_math, options.lineinfo)
    source_text = read_source_text(source_path)
    require_numba()
    from numba.cuda.core.compiler_lock import global_compiler_lock

    results: List[NumbaKernelPTX] = []
    # numba's compiler lock (re-entrant) serializes us with any other numba
    # compile in this process: the counters, sys.modules and sys.path
    # changes below are process-global.
    with global_compiler_lock, SourceImporter(
        source_path, options.sys_path, options.sandbox_root
    ) as importer:
        table = _checked_table(importer, source_text)
        for name, sigs in table:
            for index, sig in enumerate(sigs):
                results.append(_compile_one(importer, source_text, name, index, sig, target))
    results.sort(key=lambda r: r.module_name)
    return results


def require_numba() -> None:
    """A broken toolchain is a CompileError saying so, not an ImportError traceback."""
    try:
        from numba import cuda  # noqa: F401
        from numba.cuda.core import sigutils  # noqa: F401

        _load_numba_registries()
        numba_link_order.install()
    except Exception as e:  # pragma: no cover - toolchain problem
        raise CompileError("numba-cuda is not importable in this toolchain: %s" % (e,)) from e


def _load_numba_registries() -> None:
    """Import numba-cuda's typing and lowering registries now, before a kernel source is.

    Why: numba loads them (cudaimpl, arrayobj, mathimpl, fp16, ... about 70 modules) on its
    first compile, which runs inside ``SourceImporter`` with bytecode writing off, so their
    ``.pyc`` were never written and every compile process compiled them from source again
    (~0.3 s of each). Loaded here, the toolchain's ``__pycache__`` keeps them after one run.
    """
    from numba.cuda.descriptor import cuda_target

    cuda_target.typing_context.refresh()
    cuda_target.target_context.refresh()


def _checked_table(importer: SourceImporter, source_text: str) -> List[Tuple[str, List[Any]]]:
    """Import the source once and check its whole table before compiling anything."""
    source_path = importer.source_path
    try:
        module = importer.load()
    except CompileError:
        raise
    except Exception as e:  # SyntaxError, ImportError, anything at import
        raise import_failure(e, source_path, importer.is_user_file, importer.sys_path) from None
    table = read_signatures(module, source_path, source_text)
    for name, _ in table:
        kernel_dispatcher(module, name, source_path, source_text)
    return table


def _compile_one(
    importer: SourceImporter, source_text: str, name: str, index: int, sig: Any, target: _Target
) -> NumbaKernelPTX:
    """Module ``<name>__<index>``: kernel ``name`` compiled for ``sig``, in a fresh import."""
    source_path = importer.source_path
    try:
        module = importer.load()
    except CompileError:
        raise
    except Exception as e:
        raise import_failure(e, source_path, importer.is_user_file, importer.sys_path) from None
    disp = kernel_dispatcher(module, name, source_path, source_text)
    sig = _same_signature(module, name, index, sig)
    text = signature_text(sig)
    aot_line = aot_table_line(source_text)
    argtypes = signature_argtypes(sig, name, source_path, aot_line)
    args = describe_args(argtypes, name, text, source_path, aot_line)
    try:
        code = compile_kernel_ptx(
            disp, sig, target.cc, fast_math=target.fast_math, lineinfo=target.lineinfo
        )
    except CompileError:
        raise
    except Exception as e:
        what = "compiling kernel %r for %s with signature %s" % (name, target.capability, text)
        raise located_error(e, what + " failed", source_path, importer.is_user_file) from None
    module_name = "%s__%d" % (name, index)
    return kernel_ptx(module_name, name, text, code, args, target.capability, source_path)


def _same_signature(module: Any, name: str, index: int, sig: Any) -> Any:
    """The signature as this fresh import made it: type objects (records, say) belong to
    the import that created them."""
    if isinstance(sig, str):
        return sig
    for kernel, sigs in read_signatures(module, "", ""):
        if kernel == name and index < len(sigs):
            return sigs[index]
    return sig
