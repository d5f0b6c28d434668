"""The single compile entry point shared by the CLI and the runtime JIT path.

``compile_source(source_path, capability, options)`` dispatches on the file
suffix (``.py`` -> numba-cuda, ``.cu`` -> NVRTC), assembles every module's PTX
to a cubin with nvJitLink, and returns a ``CompileResult`` holding the bytes and
the ``metadata.json`` content (``gpu_compiler.compile_result``).
``write_outputs(result, out_dir)`` (``gpu_compiler.outputs``) writes them;
``write_outputs_by_capability`` writes several capabilities' results at once.

Keeping compile and write separate is what makes "a failed compile writes
nothing" easy: nothing touches the output directory until every module has
compiled, and the directory is then published with one rename.

The data model and ``write_outputs`` are importable from here too: callers
(the CLI, the runtime's JIT mode, benches) know this module only.
"""

from __future__ import annotations

import hashlib
import os
from typing import List, Optional, Tuple

from gpu_compiler import ptx as ptxmod
from gpu_compiler.backends import StagedModule, stage_modules
from gpu_compiler.compile_result import CompileOptions, CompileResult, KernelInfo, ModuleOutput
from gpu_compiler.errors import CompileError
from gpu_compiler.numba.links import LinkPart
from gpu_compiler.outputs import write_outputs, write_outputs_by_capability
from gpu_compiler.resources import RESOURCE_KEYS, module_resources
from gpu_spec.capabilities import check_max_registers, parse_capability
from gpu_spec.errors import SpecError
from gpu_spec.metadata import LANG_NUMBA, language_of
from gpu_spec.ptx_isa import (
    min_driver_for_ptx,
    toolchain_ptx_isa,
    unknown_toolchain,
    validate_ptx_version,
)

__all__ = [
    "CompileOptions",
    "CompileResult",
    "KernelInfo",
    "ModuleOutput",
    "compile_source",
    "write_outputs",
    "write_outputs_by_capability",
]


def _language_of(source_path: str) -> str:
    """The backend is chosen by the file suffix alone (gpu_spec.metadata.language_of)."""
    language = language_of(source_path)
    if language is not None:
        return language
    ext = os.path.splitext(source_path)[1].lower()
    raise CompileError(
        "%s: unsupported kernel source type %r: expected .py (numba-cuda) or .cu (CUDA C++)"
        % (source_path, ext or "(none)")
    )


def _validate_options(
    source_path: str, language: str, capability: str, options: CompileOptions
) -> None:
    """Refuse bad options before anything slow runs, numba-cuda's import included."""
    try:
        parse_capability(capability)
    except SpecError as e:
        raise CompileError(str(e)) from None
    if options.max_registers is not None:
        try:
            check_max_registers(options.max_registers)
        except SpecError as e:
            raise CompileError(str(e)) from None
    if language == LANG_NUMBA:
        extra = options.cuda_only_set()
        if extra:
            raise CompileError(
                "%s: %s apply only to CUDA C++ (.cu) sources" % (source_path, ", ".join(extra))
            )


def _override_ptx_version(requested: str, capability: str, toolchain_isa: str) -> str:
    try:
        return validate_ptx_version(requested, capability, toolchain_isa)
    except SpecError as e:
        raise CompileError(str(e)) from None


def compile_source(
    source_path: str, capability: str, options: Optional[CompileOptions] = None
) -> CompileResult:
    """Compile one kernel source for one capability.

    ``source_path`` is used as given (keep it relative to the working
    directory for reproducible outputs). Raises CompileError on any problem
    with the source or options; nothing is written anywhere.
    """
    options = options or CompileOptions()
    language = _language_of(source_path)
    _validate_options(source_path, language, capability, options)
    if not os.path.isfile(source_path):
        raise CompileError("%s: error: no such file" % (source_path,), source=source_path)

    from gpu_compiler import toolchain

    toolchain_isa = toolchain_ptx_isa(toolchain.cuda_version())
    requested_isa: Optional[str] = None
    if options.ptx_version is not None:
        if toolchain_isa is None:
            # Not a guess at what the toolchain writes: the override cannot be checked.
            raise CompileError(
                "%s: error: ptx_version %s: %s"
                % (source_path, options.ptx_version, unknown_toolchain(toolchain.cuda_version())),
                source=source_path,
            )
        # Fail fast, before the (slower) compile.
        requested_isa = _override_ptx_version(options.ptx_version, capability, toolchain_isa)

    with open(source_path, "rb") as f:
        source_sha256 = hashlib.sha256(f.read()).hexdigest()

    staged, warnings = stage_modules(source_path, language, capability, options)
    modules = _link_modules(staged, source_path, capability, options, requested_isa, warnings)
    ptx_isa = _single_ptx_isa(modules, source_path)
    try:
        min_driver = min_driver_for_ptx(ptx_isa)
    except SpecError as e:
        raise CompileError(str(e)) from None

    return CompileResult(
        source=source_path,
        source_sha256=source_sha256,
        language=language,
        capability=capability,
        ptx_isa=ptx_isa,
        min_driver=min_driver,
        toolchain=toolchain.versions(),
        options=options,
        modules=modules,
        warnings=warnings,
    )


def _link_modules(
    staged: List[StagedModule],
    source_path: str,
    capability: str,
    options: CompileOptions,
    requested_isa: Optional[str],
    warnings: List[str],
) -> List[ModuleOutput]:
    """Relabel each module's ``.version`` if asked, then link it; appends ptxas' warnings."""
    modules: List[ModuleOutput] = []
    for stage in staged:
        emitted = ptxmod.ptx_version(stage.ptx)
        ptx_text = stage.ptx
        if options.ptx_version is not None:
            if requested_isa is None:  # toolchain not in the table: bound by what it emitted
                requested_isa = _override_ptx_version(options.ptx_version, capability, emitted)
            ptx_text = ptxmod.set_ptx_version(ptx_text, requested_isa)
        parts = [_relabelled(p, requested_isa) for p in stage.parts]
        link_log, cubin = _link(
            stage.name, ptx_text, parts, emitted, requested_isa, source_path, capability, options
        )
        for line in link_log.splitlines():
            if "warning" in line.lower():
                warnings.append("%s: %s" % (stage.name, line.strip()))
        resources = module_resources(link_log, cubin)
        infos = [
            KernelInfo(
                name=k.name,
                entry=k.entry,
                signature=k.signature,
                abi=k.abi,
                args=k.args,
                params=list(k.params),
                resources=resources.get(k.entry, {key: 0 for key in RESOURCE_KEYS}),
                cooperative=k.cooperative,
                c_types=k.c_types,
            )
            for k in stage.kernels
        ]
        modules.append(
            ModuleOutput(
                name=stage.name,
                ptx=ptx_text,
                cubin=cubin,
                kernels=infos,
                link_log=link_log,
                parts=parts,
            )
        )
    return modules


def _relabelled(part: LinkPart, requested_isa: Optional[str]) -> LinkPart:
    """A linked PTX part gets the module's ``.version`` too (ptx_version option)."""
    if part.kind != "ptx" or requested_isa is None:
        return part
    text = ptxmod.set_ptx_version(part.data.decode("utf-8"), requested_isa)
    return LinkPart(part.file, part.kind, text.encode("utf-8"))


def _link(
    name: str,
    ptx_text: str,
    parts: List[LinkPart],
    emitted: str,
    requested_isa: Optional[str],
    source_path: str,
    capability: str,
    options: CompileOptions,
) -> Tuple[str, bytes]:
    """(nvJitLink's info log, cubin); a relabelled module's failure says why it may fail."""
    from gpu_compiler.link.linker import LinkInput, link_ptx

    try:
        linked = link_ptx(
            ptx_text,
            capability,
            parts=[LinkInput(p.kind, p.data, p.file) for p in parts],
            options=options,
            module_name=name,
            source=source_path,
        )
    except CompileError as e:
        if options.ptx_version is None or requested_isa == emitted:
            raise
        raise CompileError(
            "%s\n(the PTX was generated as ISA %s and relabelled .version %s by the "
            "ptx_version option; it uses features PTX ISA %s does not have: use a "
            "newer ptx_version)" % (e, emitted, requested_isa, requested_isa),
            source=e.source,
            line=e.line,
        ) from None
    return linked.info_log, linked.cubin


def _single_ptx_isa(modules: List[ModuleOutput], source_path: str) -> str:
    """metadata.json records one ``ptx_isa`` for the whole source."""
    isas = {ptxmod.ptx_version(m.ptx) for m in modules}
    if len(isas) != 1:  # pragma: no cover - one toolchain emits one ISA
        raise CompileError("%s: modules disagree on PTX ISA: %s" % (source_path, sorted(isas)))
    return isas.pop()
