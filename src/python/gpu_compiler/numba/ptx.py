"""One numba kernel and one signature to PTX, without a GPU.

numba-cuda's ``_compile_pyfunc_with_fixup`` (what ``numba.cuda.compile(..., device=False,
abi="numba", output="ptx")`` runs) produces the kernel's code library; PTX -> cubin is
``gpu_compiler.link.linker``'s job. Why the internal function: ``cuda.compile`` returns the PTX
alone and drops what the library says must be linked with it: the files of
``cuda.declare_device(...,
link=...)`` and whether grid sync made it cooperative (libcudadevrt). The numba-cuda version is
pinned by the toolchain lockfile. Why the current device is patched: numba-cuda asks the
*current device* for the compute capability when it compiles a device function called by a kernel
(``CUDADispatcher.compile_device``), which fails without a GPU and would use
the wrong target with one.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Tuple

from gpu_compiler import ptx as ptxmod
from gpu_compiler.errors import CompileError
from gpu_compiler.numba import shared_lowering as numba_shared_lowering
from gpu_compiler.numba.abi import check_param_count
from gpu_compiler.numba.counters import fresh_counters


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
    # Uses grid sync: linked with libcudadevrt, launched cooperatively.
    cooperative: bool = False
    # Files to link (paths or numba LinkableCode objects), as numba-cuda collected them.
    link: List[Any] = field(default_factory=list)


@dataclass
class KernelCode:
    """What numba generated for one (kernel, signature)."""

    ptx: str
    cooperative: bool
    link: List[Any]


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
    dispatcher.get_current_device = lambda: _TargetDevice(cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


def compile_kernel_ptx(
    dispatcher: Any, sig: Any, cc: Tuple[int, int], *, fast_math: bool, lineinfo: bool
) -> KernelCode:
    """The PTX numba-cuda generates for ``dispatcher``'s kernel with signature ``sig``, and
    what must be linked with it.

    ``fast_math`` and ``lineinfo`` add to the kernel's own ``@cuda.jit`` options,
    never take them away; ``opt`` and ``launch_bounds`` are the kernel's own.
    """
    from numba.cuda.compiler import _compile_pyfunc_with_fixup  # type: ignore[attr-defined]

    opts = dispatcher.targetoptions
    lineinfo = bool(lineinfo or opts.get("lineinfo"))
    fastmath = True if fast_math else (opts.get("fastmath") or False)

    def lower() -> Any:
        with _target_capability(cc), fresh_counters():
            lib, _resty = _compile_pyfunc_with_fixup(
                dispatcher.py_func,
                sig,
                debug=False,
                lineinfo=lineinfo,
                device=False,
                fastmath=fastmath,
                cc=cc,
                opt=bool(opts.get("opt", True)),
                abi="numba",
                launch_bounds=opts.get("launch_bounds"),
            )
        return lib

    if numba_shared_lowering.active():  # a batched compile: lowered once for its capabilities
        code = dispatcher.py_func.__code__
        key = (code.co_filename, code.co_firstlineno, dispatcher.py_func.__qualname__, str(sig))
        ptxs, lib = numba_shared_lowering.ptx_for(key + (lineinfo, fastmath), cc, lower)
    else:
        lib = lower()
        ptxs = lib.get_asm_strs(cc=cc)
    if len(ptxs) != 1:  # pragma: no cover - numba emits one PTX per kernel library
        raise CompileError("numba-cuda produced %d PTX modules for one kernel" % len(ptxs))
    link = list(opts.get("link") or ()) + sorted(lib._linking_files, key=str)
    link += _numba_helper_files(ptxs[0])
    return KernelCode(ptxs[0], bool(lib.use_cooperative), list(dict.fromkeys(link)))


def _numba_helper_files(ptx_text: str) -> List[str]:
    """numba-cuda's own CUDA C++ helpers the kernel calls (array reshape), which its
    dispatcher links when it finds their names in the PTX, as done here."""
    import os

    import numba.cuda.dispatcher as dispatcher

    names = getattr(dispatcher, "reshape_funcs", ())
    if any(n in ptx_text for n in names):
        return [os.path.join(os.path.dirname(dispatcher.__file__), "reshape_funcs.cu")]
    return []


def kernel_ptx(
    module_name: str,
    kernel: str,
    sig: str,
    code: KernelCode,
    args: List[Dict[str, Any]],
    capability: str,
    source_path: str,
) -> NumbaKernelPTX:
    """Check the generated PTX is what an AOT build needs, with ``.file`` paths relative (and
    numba-cuda's own modules, inlined with ``lineinfo``, shown as ``<toolchain>/...``)."""
    from gpu_compiler.cuda_cpp import toolchain_headers

    ptx_text = toolchain_headers.relabel(ptxmod.relativize_file_directives(code.ptx))
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
    check_param_count(params, args, kernel, sig, source_path)
    return NumbaKernelPTX(
        module_name=module_name,
        kernel=kernel,
        signature=sig,
        ptx=ptx_text,
        entry=entry,
        args=args,
        params=params,
        cooperative=code.cooperative,
        link=code.link,
    )
