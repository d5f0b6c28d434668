"""The bundle's `cache/`: each kernel compiled for each shipped capability, plus its manifest.

The shipped capabilities are taken from the compiles of each kernel's whole capability list (one
process per kernel source and toolchain), so a bundle reuses the cache entries of
`pants package` on its kernels.

Each compile's files go to `cache/<variant_dir>/` (`gpu_spec.manifest.paths`), and
`cache/manifest.json` (`gpu_spec.manifest.build`) lists them with their sha256, which the runtime
checks on the device, and the app PEX's ("bundle_files"): the compiles run beside the PEX build,
and the manifest is written once both are done.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pants.engine.collection import Collection
from pants.engine.fs import (
    AddPrefix,
    CreateDigest,
    Digest,
    DigestContents,
    DigestEntries,
    DigestSubset,
    FileContent,
    FileEntry,
    MergeDigests,
    PathGlobs,
)
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.util.frozendict import FrozenDict

from gpu_build.util_rules.bundle_field_set import DeployBundleError, DeployBundleFieldSet
from gpu_build.util_rules.bundle_kernels import check_driver
from gpu_build.util_rules.compile_kernel import (
    CompiledKernel,
    CompiledKernels,
    CompileKernelRequest,
    missing_metadata_error,
)
from gpu_build.util_rules.kernel_field_set import GpuKernelFieldSet
from gpu_spec.errors import ManifestError
from gpu_spec.manifest.build import build_manifest
from gpu_spec.manifest.model import MANIFEST_NAME, dumps_manifest
from gpu_spec.manifest.paths import variant_dir
from gpu_spec.metadata import METADATA_FILE


@dataclass(frozen=True)
class CompiledKernelFiles:
    """One compile's outputs, read back: its metadata.json and the other files' sha256."""

    kernel: CompiledKernel
    metadata: bytes
    sha256: FrozenDict[str, str]  # by file name, metadata.json left out
    files: Digest  # the files, metadata.json left out

    def manifest_output(self) -> dict[str, Any]:
        """The compile as an output of its library, for `build_manifest`."""
        return {
            "toolchain": self.kernel.toolchain,
            "metadata": json.loads(self.metadata),
            "digests": dict(self.sha256),
        }


@rule
async def compiled_kernel_files(kernel: CompiledKernel) -> CompiledKernelFiles:
    metadata, entries, files = await MultiGet(
        Get(DigestContents, DigestSubset(kernel.digest, PathGlobs([METADATA_FILE]))),
        Get(DigestEntries, Digest, kernel.digest),
        Get(Digest, DigestSubset(kernel.digest, PathGlobs(["*", f"!{METADATA_FILE}"]))),
    )
    sha256 = {
        e.path: e.file_digest.fingerprint
        for e in entries
        if isinstance(e, FileEntry) and e.path != METADATA_FILE
    }
    if not metadata:  # run_kernel_process checks it: a guard, not a second check
        raise missing_metadata_error(
            kernel.address, kernel.source, kernel.toolchain, (kernel.capability,)
        )
    return CompiledKernelFiles(kernel, metadata[0].content, FrozenDict(sha256), files)


def check_compiled_driver(field_set: DeployBundleFieldSet, compiled: CompiledKernelFiles) -> None:
    """The driver check again, from what the compile reports it built."""
    metadata = json.loads(compiled.metadata)
    kernel = compiled.kernel
    check_driver(
        field_set,
        kernel.address,
        kernel.toolchain,
        metadata["toolchain"]["cuda"],
        metadata["ptx_isa"],
        kernel.capability,
    )


def bundle_manifest(
    field_set: DeployBundleFieldSet,
    kernels: Sequence[GpuKernelFieldSet],
    compiled: Sequence[CompiledKernelFiles],
    bundle_files: Mapping[str, str],
) -> Mapping[str, Any]:
    outputs: dict[str, list[dict[str, Any]]] = {}
    for files in compiled:
        outputs.setdefault(files.kernel.address.target_name, []).append(files.manifest_output())
    libraries = [
        {
            "name": k.address.target_name,
            "target": str(k.address),
            "outputs": outputs[k.address.target_name],
        }
        for k in kernels
    ]
    try:
        return build_manifest(
            bundle=field_set.address.target_name,
            driver=field_set.driver_version.value or "",
            libraries=libraries,
            capabilities=field_set.capabilities.value or (),
            bundle_files=bundle_files,
        )
    except ManifestError as e:
        raise DeployBundleError(f"Cannot write the manifest of {field_set.address}: {e}") from e


def variant_dir_of(kernel: CompiledKernel) -> str:
    return variant_dir(kernel.address.target_name, kernel.toolchain, kernel.capability)


@dataclass(frozen=True)
class BundleCompilesRequest:
    field_set: DeployBundleFieldSet
    kernels: tuple[GpuKernelFieldSet, ...]


class BundleCompiles(Collection[CompiledKernelFiles]):
    """Every (kernel, shipped capability) compile of a bundle, read back and driver-checked."""


@rule
async def bundle_compiles(request: BundleCompilesRequest) -> BundleCompiles:
    field_set = request.field_set
    # The shipped subset of each kernel's capabilities: the compile rule runs the process for
    # the target's full list, the one `pants package` on the kernel runs (and caches).
    by_kernel = await MultiGet(
        Get(
            CompiledKernels,
            CompileKernelRequest(
                kernel,
                capabilities=tuple(field_set.capabilities.value or ()),
                toolchain=field_set.toolchain.value,
            ),
        )
        for kernel in request.kernels
    )
    compiled = [kernel for kernels in by_kernel for kernel in kernels]
    files = await MultiGet(Get(CompiledKernelFiles, CompiledKernel, k) for k in compiled)
    for compiled_files in files:
        check_compiled_driver(field_set, compiled_files)
    return BundleCompiles(files)


@dataclass(frozen=True)
class KernelCacheRequest:
    field_set: DeployBundleFieldSet
    kernels: tuple[GpuKernelFieldSet, ...]
    compiles: BundleCompiles
    bundle_files: FrozenDict[str, str]  # the app PEX's name and sha256


@dataclass(frozen=True)
class KernelCache:
    digest: Digest  # `<output_dir>/cache/...`, manifest.json included
    file_count: int  # the kernel files the manifest lists
    manifest_path: str  # `<output_dir>/cache/manifest.json`


@rule
async def kernel_cache(request: KernelCacheRequest) -> KernelCache:
    field_set, files = request.field_set, request.compiles
    manifest = bundle_manifest(field_set, request.kernels, files, request.bundle_files)
    cache_dir = f"{field_set.output_dir}/cache"
    placed = await MultiGet(
        Get(Digest, AddPrefix(f.files, f"{cache_dir}/{variant_dir_of(f.kernel)}")) for f in files
    )
    manifest_path = f"{cache_dir}/{MANIFEST_NAME}"
    manifest_file = FileContent(manifest_path, dumps_manifest(manifest).encode())
    manifest_digest = await Get(Digest, CreateDigest([manifest_file]))
    digest = await Get(Digest, MergeDigests((*placed, manifest_digest)))
    return KernelCache(digest, len(manifest["files"]), manifest_path)


def rules():
    return collect_rules()
