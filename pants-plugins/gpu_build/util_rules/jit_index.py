"""JIT mode's input: each `gpu_kernel` a Python target depends on, as resources for its PEX or
test sandbox, so the runtime can compile it on first use with no bundle and no setting.

A codegen rule from `GpuKernelSourceField` to `ResourceSourceField`: Pants' Python backend runs
it for every `gpu_kernel` in the closure of a `pex_binary`, `python_test` or `python_source`
(and `pants export-codegen` writes it out for a plain checkout). For a kernel under source root
`src/python` it generates, beside the root's other resources:

    src/python/__gpu_kernels__/<address>.json   the index entry (`jit_entry`)
    src/python/__gpu_kernels__/<address>/...     the exact files the compile process reads

The entry holds the library name, target, source and its source root, the
`python -m gpu_compiler compile` flags that the build step passes (`CompileOptions.argv`, one
implementation for both modes) and each file's sha256, so the runtime's key is the input
closure as Pants resolved it, and a copy that `export-codegen` left behind is refused once the
checkout's files differ from it (`gpu_runtime.jit.sources`).
"""

from __future__ import annotations

import json
from typing import Mapping

from pants.core.target_types import ResourceSourceField
from pants.engine.fs import (
    AddPrefix,
    CreateDigest,
    Digest,
    DigestEntries,
    FileContent,
    FileEntry,
    MergeDigests,
)
from pants.engine.internals.native_engine import Snapshot
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import GeneratedSources, GenerateSourcesRequest
from pants.engine.unions import UnionRule

from gpu_build import validation
from gpu_build.subsystems.toolchains import GpuToolchains
from gpu_build.target_types import GpuKernelSourceField
from gpu_build.util_rules.compile_kernel import KernelSources, KernelSourcesRequest
from gpu_build.util_rules.kernel_field_set import (
    GpuKernelFieldSet,
    compile_options,
    kernel_capabilities,
)
from gpu_build.util_rules.toolchain import toolchain_spec
from gpu_build.validation import GpuKernelValidationRequest, ValidatedGpuKernel
from gpu_spec.jit_index import JIT_INDEX_SCHEMA, entry_paths


class GenerateJitIndexRequest(GenerateSourcesRequest):
    input = GpuKernelSourceField
    output = ResourceSourceField


def jit_entry(
    field_set: GpuKernelFieldSet,
    toolchain: str,
    capabilities: tuple[str, ...],
    flags: tuple[str, ...],
    files: Mapping[str, str],
    source_root: str,
) -> bytes:
    """The index entry's bytes: sorted keys, so the same inputs give the same file. `files`:
    each input's path and sha256 (the engine's own digest of it)."""
    source = field_set.source.file_path
    data = {
        "schema": JIT_INDEX_SCHEMA,
        "library": field_set.address.target_name,
        "target": str(field_set.address),
        "toolchain": toolchain,
        "capabilities": list(capabilities),
        "source": source,
        "source_root": "" if source_root == "." else source_root,
        "flags": list(flags),
        "files": dict(files),
    }
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


@rule
async def generate_jit_index(
    request: GenerateJitIndexRequest, subsystem: GpuToolchains
) -> GeneratedSources:
    field_set = GpuKernelFieldSet.create(request.protocol_target)
    await Get(ValidatedGpuKernel, GpuKernelValidationRequest(field_set))
    sources = await Get(
        KernelSources, KernelSourcesRequest(field_set.address, field_set.source.file_path)
    )
    entries = await Get(DigestEntries, Digest, sources.digest)
    flags = compile_options(field_set, sources.source_root).argv()
    toolchain = toolchain_spec(
        subsystem, field_set.toolchain.value, origin=f"The target {field_set.address}"
    ).name
    entry = jit_entry(
        field_set,
        toolchain,
        kernel_capabilities(field_set, subsystem),
        flags,
        {e.path: e.file_digest.fingerprint for e in entries if isinstance(e, FileEntry)},
        sources.source_root,
    )
    index_file, files_dir = entry_paths(sources.source_root, field_set.address.path_safe_spec)
    index, files = await MultiGet(
        Get(Digest, CreateDigest([FileContent(index_file, entry)])),
        Get(Digest, AddPrefix(sources.digest, files_dir)),
    )
    snapshot = await Get(Snapshot, MergeDigests([index, files]))
    return GeneratedSources(snapshot)


def rules():
    return [
        *collect_rules(),
        *validation.rules(),
        UnionRule(GenerateSourcesRequest, GenerateJitIndexRequest),
    ]
