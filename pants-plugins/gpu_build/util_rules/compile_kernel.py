"""Compile one `gpu_kernel` source for its capabilities: CompileKernelRequest -> CompiledKernels.

One process per (source, toolchain) compiles every capability of the target
(`[gpu-toolchains].batch_capabilities`, the default), so numba's start-up is paid once per source,
not once per capability. Each process covers one source, so editing a kernel re-runs that kernel's
process only. A request for a subset of the capabilities (a deploy_bundle's) still runs the
process for the target's whole list and takes its subset from the outputs: it shares the one
cache entry with `pants package` on the kernel. With `batch_capabilities = false` each requested
capability is its own process instead. The process itself is built by `compile_process`, a pure
function. Every compile is then held to the target's resource budget (KernelResourcesRequest ->
KernelResources: each kernel's figures from the compile's `metadata.json`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from pants.backend.python.target_types import PythonSourceField
from pants.backend.python.util_rules.pex import VenvPexProcess
from pants.core.target_types import FileSourceField, ResourceSourceField
from pants.core.util_rules.source_files import SourceFiles, SourceFilesRequest
from pants.engine.addresses import Address
from pants.engine.collection import Collection
from pants.engine.fs import (
    Digest,
    DigestContents,
    DigestSubset,
    MergeDigests,
    PathGlobs,
    RemovePrefix,
    Snapshot,
)
from pants.engine.process import FallibleProcessResult
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import SourcesField, TransitiveTargets, TransitiveTargetsRequest
from pants.source.source_root import SourceRoot, SourceRootRequest
from pants.util.frozendict import FrozenDict
from pants.util.strutil import softwrap

from gpu_build import validation
from gpu_build.subsystems.budgets import GpuResourceBudgets
from gpu_build.subsystems.toolchains import GpuToolchains
from gpu_build.target_types import GpuKernelSourceField
from gpu_build.util_rules.compile_process import OUT_DIR, compile_process
from gpu_build.util_rules.kernel_field_set import (
    GpuKernelFieldSet,
    compile_options,
    resource_budget,
    uncovered_capabilities,
)
from gpu_build.util_rules.toolchain import (
    ToolchainPex,
    ToolchainPexRequest,
    ToolchainSpec,
    toolchain_spec,
)
from gpu_build.validation import GpuKernelValidationRequest, ValidatedGpuKernel
from gpu_spec.compile.options import CompileOptions
from gpu_spec.compile.report import failed_capabilities
from gpu_spec.errors import SpecError
from gpu_spec.metadata import METADATA_FILE
from gpu_spec.ptx_isa import validate_ptx_version
from gpu_spec.resources.budget import ResourceBudget, budget_violations


class GpuKernelCompileError(Exception):
    """A kernel failed to compile: the message names the target, file, capability and log."""


def check_ptx_version(
    address: Address, options: CompileOptions, capability: str, spec: ToolchainSpec
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
    address: Address,
    source: str,
    capabilities: Sequence[str],
    spec: ToolchainSpec,
    stderr: bytes,
) -> GpuKernelCompileError:
    # The compiler names the toolchain's requirements file with a "<toolchain>" placeholder.
    report = stderr.decode(errors="replace").strip().replace("<toolchain>", spec.resolve)
    failed = failed_capabilities(capabilities, report)
    of = "" if len(failed) == len(capabilities) else f" (of {', '.join(capabilities)})"
    return GpuKernelCompileError(
        softwrap(
            f"""
            Failed to compile {source} (target {address}) for {', '.join(failed)}{of}
            with the GPU toolchain {spec.name!r}:
            """
        )
        + "\n\n"
        + report
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
    # The top-level entries of `digest`: the only paths the compile sees besides its toolchain
    # (a remote executor's sandbox is rooted at `/`, where "the working directory" is all of it)
    inputs: tuple[str, ...] = ()


def top_level_entries(files: Iterable[str]) -> tuple[str, ...]:
    """`src` for `src/python/k.py`: what the compile is given to see, each once, sorted."""
    return tuple(sorted({path.split("/", 1)[0] for path in files}))


@rule
async def kernel_sources(request: KernelSourcesRequest) -> KernelSources:
    transitive, source_root = await MultiGet(
        Get(TransitiveTargets, TransitiveTargetsRequest([request.address])),
        Get(SourceRoot, SourceRootRequest, SourceRootRequest.for_file(request.source)),
    )
    kernels = [t for t in transitive.closure if t.has_field(GpuKernelSourceField)]
    others = [t for t in transitive.closure if not t.has_field(GpuKernelSourceField)]
    # Kernel sources as they are: with codegen on, Pants would turn them into JIT mode's
    # resources (`gpu_build.util_rules.jit_index`), whose rule asks for these very sources.
    kernel_files, other_files = await MultiGet(
        Get(
            SourceFiles,
            SourceFilesRequest(
                (t[GpuKernelSourceField] for t in kernels),
                for_sources_types=(GpuKernelSourceField,),
            ),
        ),
        Get(
            SourceFiles,
            SourceFilesRequest(
                (t.get(SourcesField) for t in others),
                for_sources_types=(PythonSourceField, FileSourceField, ResourceSourceField),
                enable_codegen=True,
            ),
        ),
    )
    digest = await Get(
        Digest, MergeDigests([kernel_files.snapshot.digest, other_files.snapshot.digest])
    )
    files = (*kernel_files.snapshot.files, *other_files.snapshot.files)
    return KernelSources(digest, source_root.path, top_level_entries(files))


@dataclass(frozen=True)
class CompileKernelRequest:
    field_set: GpuKernelFieldSet
    # The capabilities wanted, each one of the target's; None means all of the target's.
    capabilities: tuple[str, ...] | None = None
    # A deploy_bundle may pick the toolchain; None means the target's own (or the default).
    toolchain: str | None = None
    # Whether a kernel over the target's resource budget fails (the report asks for figures).
    check_budget: bool = True


@dataclass(frozen=True)
class CompiledKernel:
    address: Address
    source: str  # the target's source file, relative to the build root
    capability: str
    toolchain: str
    # `<module>.ptx`, `<module>.cubin` and `metadata.json` at the digest's root.
    digest: Digest


class CompiledKernels(Collection[CompiledKernel]):
    """One CompiledKernel per capability asked for, in the order asked."""


# A compile's per-kernel resources, read from its `metadata.json`, and the budget check every
# compile of a `gpu_kernel` goes through. The figures are the compiler's (`gpu_compiler.resources`,
# from nvJitLink's info log); what is over a budget is `gpu_spec.resources.budget`'s verdict, the
# same one `pants gpu-resources` marks its report with.


class GpuKernelBudgetError(Exception):
    """A kernel's cubin is over its resource budget, or the budget itself is malformed."""


@dataclass(frozen=True)
class KernelResourceRow:
    """One kernel of one compile (source, capability, toolchain) and its resources."""

    address: Address
    source: str
    toolchain: str
    capability: str
    kernel: str  # the kernel's name in the manifest (`cache.kernel("<library>.<kernel>")`)
    signature: str  # one kernel may be compiled for several signatures (numba), one entry each
    resources: FrozenDict[str, Any]


class KernelResources(Collection[KernelResourceRow]):
    """Every kernel of the compiles asked for, in their order, each module's kernels in turn."""


@dataclass(frozen=True)
class KernelResourcesRequest:
    compiles: tuple[CompiledKernel, ...]


def rows_of(compiled: CompiledKernel, metadata: bytes) -> list[KernelResourceRow]:
    """The kernels of one `metadata.json`; a kernel without `resources` (a compiler before
    they were recorded) has an empty mapping."""
    data = json.loads(metadata)
    return [
        KernelResourceRow(
            address=compiled.address,
            source=compiled.source,
            toolchain=compiled.toolchain,
            capability=compiled.capability,
            kernel=kernel["name"],
            signature=kernel.get("signature") or "",
            resources=FrozenDict(kernel.get("resources") or {}),
        )
        for module in data.get("modules", ())
        for kernel in module.get("kernels", ())
    ]


@rule
async def kernel_resources(request: KernelResourcesRequest) -> KernelResources:
    contents = await MultiGet(
        Get(DigestContents, DigestSubset(c.digest, PathGlobs([METADATA_FILE])))
        for c in request.compiles
    )
    return KernelResources(
        row
        for compiled, files in zip(request.compiles, contents)
        for file in files
        for row in rows_of(compiled, file.content)
    )


def check_resource_budget(
    address: Address, budget: ResourceBudget, rows: Iterable[KernelResourceRow]
) -> None:
    """Raises one error naming every kernel and capability over `budget` (one line each)."""
    problems = budget.problems()
    if problems:
        raise GpuKernelBudgetError(
            f"The resource budget of the gpu_kernel {address} (its `budget_*` fields over "
            f"`[gpu-resource-budgets]`) is malformed: {'; '.join(problems)}."
        )
    lines = [
        f"{row.source} (target {address}): {violation.describe()}"
        for row in rows
        for violation in budget_violations(budget, row.kernel, row.capability, row.resources)
    ]
    if lines:
        raise GpuKernelBudgetError(
            f"The gpu_kernel {address} is over its resource budget "
            f"(`budget_*` fields, `[gpu-resource-budgets]`):\n" + "\n".join(lines)
        )


@dataclass(frozen=True)
class KernelProcessRequest:
    """One compile process: the source of `field_set` for `capabilities` with `spec`."""

    field_set: GpuKernelFieldSet
    spec: ToolchainSpec
    capabilities: tuple[str, ...]


def process_batches(
    wanted: Sequence[str], offered: Sequence[str], batch: bool
) -> tuple[tuple[str, ...], ...]:
    """The capabilities of each process that together cover `wanted`: the target's whole list
    (`offered`) in one process, so that every request for the target shares one cache entry;
    else one process per wanted capability."""
    if not wanted:
        return ()
    return (tuple(offered),) if batch else tuple((c,) for c in wanted)


@rule
async def compile_kernel(
    request: CompileKernelRequest, subsystem: GpuToolchains, budgets: GpuResourceBudgets
) -> CompiledKernels:
    field_set = request.field_set
    address = field_set.address
    await Get(ValidatedGpuKernel, GpuKernelValidationRequest(field_set))
    spec = toolchain_spec(
        subsystem, request.toolchain or field_set.toolchain.value, origin=f"The target {address}"
    )
    offered, missing = uncovered_capabilities(field_set, subsystem, request.capabilities or ())
    wanted = offered if request.capabilities is None else request.capabilities
    if missing:
        raise GpuKernelCompileError(
            f"The gpu_kernel {address} is not compiled for {', '.join(missing)} (its "
            f"capabilities: {', '.join(offered)}). Add them to its `capabilities` field."
        )
    batches = process_batches(wanted, offered, subsystem.batch_capabilities)
    results = await MultiGet(
        Get(CompiledKernels, KernelProcessRequest(field_set, spec, batch)) for batch in batches
    )
    by_capability = {kernel.capability: kernel for result in results for kernel in result}
    compiled = CompiledKernels(by_capability[c] for c in wanted)
    budget = resource_budget(field_set, budgets)
    if request.check_budget and not budget.is_empty():
        rows = await Get(KernelResources, KernelResourcesRequest(tuple(compiled)))
        check_resource_budget(address, budget, rows)
    return compiled


def missing_metadata_error(
    address: Address, source: str, toolchain: str, capabilities: Sequence[str]
) -> GpuKernelCompileError:
    return GpuKernelCompileError(
        f"The compile of {source} (target {address}) with the GPU toolchain {toolchain!r} wrote "
        f"no {METADATA_FILE} for {', '.join(capabilities)} (its entry names, signatures and "
        f"argument ABI, which the bundle's manifest and the runtime need): its compiler is not "
        f"the plugin's `python -m gpu_compiler compile`. Unset `[gpu-toolchains].compiler`, or "
        f"point it at the gpu_compiler of this plugin's version."
    )


def check_compile_outputs(
    address: Address,
    source: str,
    spec: ToolchainSpec,
    files: dict[str, tuple[str, ...]],
    stderr: bytes,
) -> None:
    """Every capability's outputs (`files`, by capability) hold its `metadata.json`."""
    empty = [c for c, names in files.items() if not names]
    if empty:
        raise GpuKernelCompileError(
            f"The compile of {source} (target {address}) with the GPU toolchain {spec.name!r} "
            f"exited 0 but wrote nothing for {', '.join(empty)} under {OUT_DIR}/<capability>/ "
            f"(the layout `python -m gpu_compiler compile` writes). Its stderr:\n\n"
            + stderr.decode(errors="replace").strip()
        )
    no_metadata = [c for c, names in files.items() if METADATA_FILE not in names]
    if no_metadata:
        raise missing_metadata_error(address, source, spec.name, no_metadata)


@rule
async def run_kernel_process(
    request: KernelProcessRequest, subsystem: GpuToolchains
) -> CompiledKernels:
    field_set, spec, capabilities = request.field_set, request.spec, request.capabilities
    address = field_set.address
    source = field_set.source.file_path
    toolchain, sources = await MultiGet(
        Get(ToolchainPex, ToolchainPexRequest(spec)),
        Get(KernelSources, KernelSourcesRequest(address, source)),
    )
    options = compile_options(field_set, sources.source_root)
    for capability in capabilities:
        check_ptx_version(address, options, capability, spec)
    process = compile_process(
        toolchain=toolchain,
        source=source,
        capabilities=capabilities,
        options=options,
        input_digest=sources.digest,
        inputs=sources.inputs,
        timeout=subsystem.compile_timeout,
    )
    result = await Get(FallibleProcessResult, VenvPexProcess, process)
    if result.exit_code != 0:
        raise compile_failure(address, source, capabilities, spec, result.stderr)
    subsets = await MultiGet(
        Get(Digest, DigestSubset(result.output_digest, PathGlobs([f"{OUT_DIR}/{c}/**"])))
        for c in capabilities
    )
    digests = await MultiGet(
        Get(Digest, RemovePrefix(subset, f"{OUT_DIR}/{c}"))
        for subset, c in zip(subsets, capabilities)
    )
    snapshots = await MultiGet(Get(Snapshot, Digest, digest) for digest in digests)
    check_compile_outputs(
        address, source, spec, dict(zip(capabilities, (s.files for s in snapshots))), result.stderr
    )
    return CompiledKernels(
        CompiledKernel(
            address=address, source=source, capability=c, toolchain=spec.name, digest=digest
        )
        for c, digest in zip(capabilities, digests)
    )


def rules():
    return [*collect_rules(), *validation.rules()]
