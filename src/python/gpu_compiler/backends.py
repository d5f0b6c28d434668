"""Running the backend for a source's language, and bringing its output to one shape.

Why: the numba and NVRTC backends each describe their PTX modules and kernels
their own way; what follows them (``.version`` relabelling, linking, resources,
metadata) is the same for both and works on ``StagedModule``s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from gpu_compiler.compile_result import CompileOptions
from gpu_compiler.numba.links import LinkPart, PartCompiler
from gpu_spec.metadata import LANG_NUMBA


class StagedKernel(NamedTuple):
    """A kernel as a backend found it, before linking gives it resources."""

    name: str
    entry: str
    signature: Optional[str]
    abi: str
    args: Optional[List[Dict[str, Any]]]
    params: List[str]
    cooperative: bool = False
    c_types: Optional[List[str]] = None  # CUDA C++: declared parameter types (gpu_spec.c_types)


@dataclass
class StagedModule:
    """One module's PTX as a backend produced it, not yet relabelled or linked, and the
    parts (``gpu_compiler.numba.links``) linked with it."""

    name: str
    ptx: str
    kernels: List[StagedKernel]
    parts: List[LinkPart] = field(default_factory=list)


def stage_modules(
    source_path: str, language: str, capability: str, options: CompileOptions
) -> Tuple[List[StagedModule], List[str]]:
    """Every module the source compiles to, and the backend's warnings."""
    if language == LANG_NUMBA:
        return _stage_numba(source_path, capability, options)
    return _stage_cuda(source_path, capability, options)


def _stage_numba(
    source_path: str, capability: str, options: CompileOptions
) -> Tuple[List[StagedModule], List[str]]:
    """One module per (kernel, signature); nothing from numba is collected as a warning."""
    from gpu_compiler.numba.backend import compile_numba_source

    compiled = compile_numba_source(source_path, capability, options)
    parts = PartCompiler(
        source_path,
        capability,
        options,
        taken=tuple("%s.%s" % (k.module_name, x) for k in compiled for x in ("ptx", "cubin")),
    )
    staged = [
        StagedModule(
            k.module_name,
            k.ptx,
            [
                StagedKernel(
                    k.kernel, k.entry, k.signature, "numba", k.args, k.params, k.cooperative
                )
            ],
            parts.parts_for(k.kernel, k.link, k.cooperative),
        )
        for k in compiled
    ]
    return staged, []


def _stage_cuda(
    source_path: str, capability: str, options: CompileOptions
) -> Tuple[List[StagedModule], List[str]]:
    """One module named after the file's stem; NVRTC's log is the first warning."""
    from gpu_compiler.cuda_cpp.backend import compile_cuda_source

    cu = compile_cuda_source(source_path, capability, options)
    stem = os.path.splitext(os.path.basename(source_path))[0]
    kernels = [
        StagedKernel(k.name, k.entry, None, "c", None, k.params, c_types=k.c_types)
        for k in cu.kernels
    ]
    return [StagedModule(stem, cu.ptx, kernels)], [cu.log] if cu.log else []
