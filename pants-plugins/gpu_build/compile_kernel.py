"""Compile one `gpu_kernel` source for one capability: CompileKernelRequest -> CompiledKernel.

One process per (source, capability), so the process cache holds each variant on its own: editing
a kernel re-runs that kernel's processes only, and a bundle that ships a subset of capabilities
reuses the same cache entries. The process itself is built by `compile_process`, a pure function.
"""

from __future__ import annotations

from dataclasses import dataclass

from pants.backend.python.target_types import PythonSourceField
from pants.backend.python.util_rules.pex import VenvPexProcess
from pants.core.target_types import FileSourceField, ResourceSourceField
from pants.core.util_rules.source_files import SourceFiles, SourceFilesRequest
from pants.engine.addresses import Address
from pants.engine.fs import Digest, RemovePrefix
from pants.engine.process import FallibleProcessResult
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import SourcesField, TransitiveTargets, TransitiveTargetsRequest
from pants.source.source_root import SourceRoot, SourceRootRequest
from pants.util.strutil import softwrap

from gpu_build.compile_process import OUT_DIR, compile_process
from gpu_build.kernel_field_set import GpuKernelFieldSet, KernelCompileOptions
from gpu_build.subsystem import GpuToolchains
from gpu_build.target_types import GpuKernelSourceField
from gpu_build.toolchain import ToolchainPex, ToolchainPexRequest, ToolchainSpec, toolchain_spec
from gpu_spec.errors import SpecError
from gpu_spec.ptx_isa import validate_ptx_version


class GpuKernelCompileError(Exception):
    """A kernel failed to compile: the message names the target, file, capability and log."""


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


def compile_failure(
    address: Address, source: str, capability: str, spec: ToolchainSpec, stderr: bytes
) -> GpuKernelCompileError:
    return GpuKernelCompileError(
        softwrap(
            f"""
            Failed to compile {source} (target {address}) for {capability}
            with the GPU toolchain {spec.name!r}:
            """
        )
        + "\n\n"
        + stderr.decode(errors="replace").strip()
    )


@dataclass(frozen=True)
class KernelSourcesRequest:
    address: Address
    source: str  # the kernel's source file


@dataclass(frozen=True)
class KernelSources:
    """The files a compile reads (the source and its dependencies') and the source's root."""

    digest: Digest
    source_root: str


@rule
async def kernel_sources(request: KernelSourcesRequest) -> KernelSources:
    transitive, source_root = await MultiGet(
        Get(TransitiveTargets, TransitiveTargetsRequest([request.address])),
        Get(SourceRoot, SourceRootRequest, SourceRootRequest.for_file(request.source)),
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
    return KernelSources(sources.snapshot.digest, source_root.path)


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

    source = field_set.source.file_path
    toolchain, sources = await MultiGet(
        Get(ToolchainPex, ToolchainPexRequest(spec)),
        Get(KernelSources, KernelSourcesRequest(address, source)),
    )
    process = compile_process(
        toolchain=toolchain,
        source=source,
        capability=request.capability,
        sys_path=(sources.source_root,),
        options=options,
        input_digest=sources.digest,
    )
    result = await Get(FallibleProcessResult, VenvPexProcess, process)
    if result.exit_code != 0:
        raise compile_failure(address, source, request.capability, spec, result.stderr)
    digest = await Get(Digest, RemovePrefix(result.output_digest, OUT_DIR))
    return CompiledKernel(
        address=address, capability=request.capability, toolchain=spec.name, digest=digest
    )


def rules():
    return collect_rules()
