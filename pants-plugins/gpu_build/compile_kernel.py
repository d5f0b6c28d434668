"""Compile one `gpu_kernel` source for one compute capability: CompileKernelRequest -> CompiledKernel.

One process per (source, capability), so the process cache holds each variant on its own: editing
a kernel re-runs that kernel's processes only, and a bundle that ships a subset of capabilities
reuses the same cache entries. The argv is built by a pure function, tested without the engine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpu_build.subsystem import GpuToolchains
from gpu_build.target_types import (
    GpuKernelCapabilitiesField,
    GpuKernelDefinesField,
    GpuKernelDependenciesField,
    GpuKernelFastMathField,
    GpuKernelIncludeDirsField,
    GpuKernelLineInfoField,
    GpuKernelMaxRegistersField,
    GpuKernelNameExpressionsField,
    GpuKernelPtxVersionField,
    GpuKernelSourceField,
    GpuKernelToolchainField,
)
from gpu_build.toolchain import ToolchainPex, ToolchainPexRequest, ToolchainSpec, toolchain_spec
from gpu_spec.errors import SpecError
from gpu_spec.ptx_isa import validate_ptx_version
from pants.backend.python.target_types import PythonSourceField
from pants.backend.python.util_rules.pex import VenvPexProcess
from pants.core.target_types import FileSourceField, ResourceSourceField
from pants.core.util_rules.source_files import SourceFiles, SourceFilesRequest
from pants.engine.addresses import Address
from pants.engine.fs import Digest, RemovePrefix
from pants.engine.process import FallibleProcessResult
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import FieldSet, SourcesField, TransitiveTargets, TransitiveTargetsRequest
from pants.source.source_root import SourceRoot, SourceRootRequest
from pants.util.logging import LogLevel
from pants.util.strutil import softwrap

OUT_DIR = "__gpu_out"


class GpuKernelCompileError(Exception):
    """A kernel failed to compile: the message names the target, file, capability and log."""


@dataclass(frozen=True)
class GpuKernelFieldSet(FieldSet):
    required_fields = (GpuKernelSourceField,)

    source: GpuKernelSourceField
    capabilities: GpuKernelCapabilitiesField
    ptx_version: GpuKernelPtxVersionField
    toolchain: GpuKernelToolchainField
    fast_math: GpuKernelFastMathField
    lineinfo: GpuKernelLineInfoField
    max_registers: GpuKernelMaxRegistersField
    defines: GpuKernelDefinesField
    include_dirs: GpuKernelIncludeDirsField
    name_expressions: GpuKernelNameExpressionsField
    dependencies: GpuKernelDependenciesField


def kernel_capabilities(field_set: GpuKernelFieldSet, subsystem: GpuToolchains) -> tuple[str, ...]:
    """The target's capabilities, or the configured default (checked like the field)."""
    if field_set.capabilities.value is not None:
        return field_set.capabilities.value
    return (
        GpuKernelCapabilitiesField.compute_value(
            tuple(subsystem.default_capabilities), field_set.address
        )
        or ()
    )


@dataclass(frozen=True)
class KernelCompileOptions:
    fast_math: bool = False
    lineinfo: bool = False
    max_registers: int | None = None
    ptx_version: str | None = None
    defines: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    name_expressions: tuple[str, ...] = ()

    @classmethod
    def from_field_set(cls, field_set: GpuKernelFieldSet) -> KernelCompileOptions:
        spec_path = field_set.address.spec_path
        return cls(
            fast_math=field_set.fast_math.value,
            lineinfo=field_set.lineinfo.value,
            max_registers=field_set.max_registers.value,
            ptx_version=field_set.ptx_version.value,
            defines=tuple(field_set.defines.value or ()),
            include_dirs=tuple(
                os.path.normpath(os.path.join(spec_path, d))
                for d in (field_set.include_dirs.value or ())
            ),
            name_expressions=tuple(field_set.name_expressions.value or ()),
        )


def compile_argv(
    *,
    source: str,
    capability: str,
    out_dir: str,
    sys_path: tuple[str, ...],
    options: KernelCompileOptions,
) -> tuple[str, ...]:
    """The `python -m gpu_compiler` arguments for one compile; paths are buildroot-relative."""
    argv = ["compile", "--source", source, "--capability", capability, "--out-dir", out_dir]
    for path in sys_path:
        argv += ["--sys-path", path]
    if options.ptx_version:
        argv += ["--ptx-version", options.ptx_version]
    if options.fast_math:
        argv.append("--fast-math")
    if options.lineinfo:
        argv.append("--lineinfo")
    if options.max_registers is not None:
        argv += ["--max-registers", str(options.max_registers)]
    for define in options.defines:
        argv += ["--define", define]
    for include_dir in options.include_dirs:
        argv += ["--include-dir", include_dir]
    for expression in options.name_expressions:
        argv += ["--name-expression", expression]
    return tuple(argv)


def check_ptx_version(
    address: Address, options: KernelCompileOptions, capability: str, spec: ToolchainSpec
) -> None:
    """Refuses a `ptx_version` the toolchain cannot emit for this capability, before compiling."""
    if not options.ptx_version:
        return
    try:
        validate_ptx_version(options.ptx_version, capability, spec.ptx_isa)
    except SpecError as e:
        raise GpuKernelCompileError(
            f"The `ptx_version` field in target {address} cannot be used with the GPU toolchain "
            f"{spec.name!r} (CUDA {spec.cuda}, PTX ISA {spec.ptx_isa}) for {capability}: {e}"
        ) from e


@dataclass(frozen=True)
class CompileKernelRequest:
    field_set: GpuKernelFieldSet
    capability: str
    # A deploy_bundle may pick the toolchain; None means the target's own (or the default).
    toolchain: str | None = None


@dataclass(frozen=True)
class CompiledKernel:
    address: Address
    capability: str
    toolchain: str
    # `<module>.ptx`, `<module>.cubin` and `metadata.json` at the digest's root.
    digest: Digest


@rule
async def compile_kernel(request: CompileKernelRequest, subsystem: GpuToolchains) -> CompiledKernel:
    field_set = request.field_set
    address = field_set.address
    spec = toolchain_spec(
        subsystem, request.toolchain or field_set.toolchain.value, origin=f"The target {address}"
    )
    options = KernelCompileOptions.from_field_set(field_set)
    check_ptx_version(address, options, request.capability, spec)

    source_path = field_set.source.file_path
    toolchain, transitive, source_root = await MultiGet(
        Get(ToolchainPex, ToolchainPexRequest(spec)),
        Get(TransitiveTargets, TransitiveTargetsRequest([address])),
        Get(SourceRoot, SourceRootRequest, SourceRootRequest.for_file(source_path)),
    )
    sources = await Get(
        SourceFiles,
        SourceFilesRequest(
            (tgt.get(SourcesField) for tgt in transitive.closure),
            for_sources_types=(
                GpuKernelSourceField,
                PythonSourceField,
                FileSourceField,
                ResourceSourceField,
            ),
            enable_codegen=True,
        ),
    )
    argv = compile_argv(
        source=source_path,
        capability=request.capability,
        out_dir=OUT_DIR,
        sys_path=(source_root.path,),
        options=options,
    )
    result = await Get(
        FallibleProcessResult,
        VenvPexProcess(
            toolchain.pex,
            argv=argv,
            input_digest=sources.snapshot.digest,
            output_directories=(OUT_DIR,),
            description=f"Compile {source_path} for {request.capability} ({spec.name})",
            # INFO: each compile that really runs (not a cache hit) shows up in the log.
            level=LogLevel.INFO,
        ),
    )
    if result.exit_code != 0:
        raise GpuKernelCompileError(
            softwrap(
                f"""
                Failed to compile {source_path} (target {address}) for {request.capability}
                with the GPU toolchain {spec.name!r}:
                """
            )
            + "\n\n"
            + result.stderr.decode(errors="replace").strip()
        )
    digest = await Get(Digest, RemovePrefix(result.output_digest, OUT_DIR))
    return CompiledKernel(
        address=address, capability=request.capability, toolchain=spec.name, digest=digest
    )


def rules():
    return collect_rules()
