"""`pants package` on a `deploy_bundle`: the app PEX plus `cache/` of precompiled kernels.

Like Pants' `archive` target, a package made of other packages: the `pex_binary`'s PEX (rebuilt
for the device's complete platform) and each kernel's compile outputs, laid out as
`gpu_spec.manifest` documents and described by `cache/manifest.json`.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import tarfile
from dataclasses import dataclass
from typing import Iterable

from gpu_build.compile_kernel import CompiledKernel, CompileKernelRequest
from gpu_build.kernel_field_set import GpuKernelFieldSet, kernel_capabilities
from gpu_build.subsystem import GpuToolchains
from gpu_build.toolchain import toolchain_spec
from gpu_build.target_types import (
    DeployBundleArchiveField,
    DeployBundleBinaryField,
    DeployBundleCapabilitiesField,
    DeployBundleCompletePlatformsField,
    DeployBundleDriverVersionField,
    DeployBundleKernelsField,
    DeployBundleOutputPathField,
    DeployBundleToolchainField,
)
from gpu_spec.compatibility import driver_problems
from gpu_spec.errors import ManifestError
from gpu_spec.manifest import dumps_manifest
from gpu_spec.manifest_build import build_manifest
from gpu_spec.metadata import METADATA_FILE
from gpu_spec.paths import variant_dir
from gpu_spec.versions import parse_version
from pants.backend.python.goals.package_pex_binary import PexBinaryFieldSet
from pants.backend.python.target_types import PexCompletePlatformsField
from pants.core.goals.package import BuiltPackage, BuiltPackageArtifact, PackageFieldSet
from pants.engine.addresses import Address, UnparsedAddressInputs
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
from pants.engine.target import Target, Targets, TransitiveTargets, TransitiveTargetsRequest
from pants.engine.unions import UnionRule
from pants.util.logging import LogLevel
from pants.util.strutil import softwrap


class DeployBundleError(Exception):
    """A bundle cannot be built as asked: the message names the bundle, the culprit and a fix."""


@dataclass(frozen=True)
class DeployBundleFieldSet(PackageFieldSet):
    required_fields = (DeployBundleBinaryField, DeployBundleDriverVersionField)

    binary: DeployBundleBinaryField
    kernels: DeployBundleKernelsField
    capabilities: DeployBundleCapabilitiesField
    toolchain: DeployBundleToolchainField
    driver_version: DeployBundleDriverVersionField
    complete_platforms: DeployBundleCompletePlatformsField
    archive: DeployBundleArchiveField
    output_path: DeployBundleOutputPathField


def deterministic_tar_gz(files: Iterable[FileContent]) -> bytes:
    """A .tar.gz of `files` whose bytes depend on their paths and contents only."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for file in sorted(files, key=lambda f: f.path):
                info = tarfile.TarInfo(file.path)
                info.size = len(file.content)
                info.mode = 0o755 if file.is_executable else 0o644
                info.mtime = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(file.content))
    return buffer.getvalue()


def _bundle_kernels(
    field_set: DeployBundleFieldSet, explicit: Targets, closure: Iterable[Target]
) -> tuple[Target, ...]:
    """The bundle's `gpu_kernel` targets: its `kernels` plus those the binary depends on."""
    for tgt in explicit:
        if not GpuKernelFieldSet.is_applicable(tgt):
            raise DeployBundleError(
                f"The `kernels` field of {field_set.address} lists {tgt.address}, which is a "
                f"`{tgt.alias}`, not a `gpu_kernel`."
            )
    found = {
        tgt.address: tgt for tgt in (*explicit, *closure) if GpuKernelFieldSet.is_applicable(tgt)
    }
    if not found:
        raise DeployBundleError(
            f"The deploy_bundle {field_set.address} has no kernels: list `gpu_kernel` targets "
            f"in its `kernels` field or in the binary's dependencies."
        )
    by_name: dict[str, list[str]] = {}
    for address in found:
        by_name.setdefault(address.target_name, []).append(str(address))
    clashes = {name: addrs for name, addrs in by_name.items() if len(addrs) > 1}
    if clashes:
        raise DeployBundleError(
            f"The deploy_bundle {field_set.address} has kernels whose target names clash (the "
            f"runtime finds kernels by target name): {clashes}. Rename one."
        )
    return tuple(found[a] for a in sorted(found))


def _check_capabilities(
    field_set: DeployBundleFieldSet, kernel: GpuKernelFieldSet, subsystem: GpuToolchains
) -> None:
    offered = kernel_capabilities(kernel, subsystem)
    missing = [c for c in field_set.capabilities.value or () if c not in offered]
    if missing:
        raise DeployBundleError(
            softwrap(
                f"""
                The deploy_bundle {field_set.address} ships {', '.join(missing)}, which the
                gpu_kernel {kernel.address} is not compiled for (its capabilities:
                {', '.join(offered)}). Add them to that target's `capabilities`.
                """
            )
        )


def _check_driver(
    field_set: DeployBundleFieldSet,
    kernel: Address,
    toolchain: str,
    toolchain_cuda: str,
    ptx_isa: str,
    capability: str | None = None,
) -> None:
    driver = field_set.driver_version.value or ""
    problems = driver_problems(parse_version(driver), toolchain_cuda, ptx_isa)
    if problems:
        what = f"{kernel} ({capability})" if capability else str(kernel)
        raise DeployBundleError(
            softwrap(
                f"""
                The deploy_bundle {field_set.address} targets a CUDA {driver} driver, which
                cannot load what the GPU toolchain {toolchain!r} builds for {what}:
                {'; '.join(problems)}. Fix: set the bundle's `toolchain` to one of CUDA
                {driver} or older (see `[gpu-toolchains].toolchains`), or raise
                `driver_version` if the device's driver is newer.
                """
            )
        )


@rule(level=LogLevel.DEBUG)
async def package_deploy_bundle(
    field_set: DeployBundleFieldSet, subsystem: GpuToolchains
) -> BuiltPackage:
    address = field_set.address
    binaries, explicit_kernels = await MultiGet(
        Get(Targets, UnparsedAddressInputs, field_set.binary.to_unparsed_address_inputs()),
        Get(Targets, UnparsedAddressInputs, field_set.kernels.to_unparsed_address_inputs()),
    )
    if len(binaries) != 1 or not PexBinaryFieldSet.is_applicable(binaries[0]):
        raise DeployBundleError(
            f"The `binary` field of {address} must name one `pex_binary` target, got "
            f"{[str(t.address) for t in binaries]}."
        )
    binary = binaries[0]
    transitive = await Get(TransitiveTargets, TransitiveTargetsRequest([binary.address]))
    kernels = [
        GpuKernelFieldSet.create(tgt)
        for tgt in _bundle_kernels(field_set, explicit_kernels, transitive.closure)
    ]
    for kernel in kernels:
        _check_capabilities(field_set, kernel, subsystem)
        # Refuse before building anything when the toolchain alone rules the driver out.
        spec = toolchain_spec(
            subsystem,
            field_set.toolchain.value or kernel.toolchain.value,
            origin=f"The target {address}",
        )
        isa = kernel.ptx_version.value or spec.ptx_isa
        _check_driver(field_set, kernel.address, spec.name, spec.cuda, isa)

    pex_field_set = PexBinaryFieldSet.create(binary)
    if field_set.complete_platforms.value:
        pex_field_set = dataclasses.replace(
            pex_field_set,
            complete_platforms=PexCompletePlatformsField(
                field_set.complete_platforms.value, address
            ),
        )
    capabilities = field_set.capabilities.value or ()
    compile_requests = [
        CompileKernelRequest(kernel, capability, toolchain=field_set.toolchain.value)
        for kernel in kernels
        for capability in capabilities
    ]
    pex_package, *compiled = await MultiGet(
        Get(BuiltPackage, PackageFieldSet, pex_field_set),
        *(Get(CompiledKernel, CompileKernelRequest, request) for request in compile_requests),
    )
    metadata_contents = await MultiGet(
        Get(DigestContents, DigestSubset(kernel.digest, PathGlobs([METADATA_FILE])))
        for kernel in compiled
    )
    entries = await MultiGet(Get(DigestEntries, Digest, kernel.digest) for kernel in compiled)

    output_dir = field_set.output_path.value or address.target_name
    cache_dir = f"{output_dir}/cache"
    outputs: dict[str, list[dict]] = {}
    placed = []
    for kernel, contents, kernel_entries in zip(compiled, metadata_contents, entries):
        metadata = json.loads(contents[0].content)
        _check_driver(
            field_set,
            kernel.address,
            kernel.toolchain,
            metadata["toolchain"]["cuda"],
            metadata["ptx_isa"],
            kernel.capability,
        )
        name = kernel.address.target_name
        outputs.setdefault(name, []).append(
            {
                "toolchain": kernel.toolchain,
                "metadata": metadata,
                "digests": {
                    e.path: e.file_digest.fingerprint
                    for e in kernel_entries
                    if isinstance(e, FileEntry) and e.path != METADATA_FILE
                },
            }
        )
        placed.append(
            (kernel, f"{cache_dir}/{variant_dir(name, kernel.toolchain, kernel.capability)}")
        )

    try:
        manifest = build_manifest(
            bundle=address.target_name,
            driver=field_set.driver_version.value or "",
            libraries=[
                {
                    "name": k.address.target_name,
                    "target": str(k.address),
                    "outputs": outputs[k.address.target_name],
                }
                for k in kernels
            ],
            capabilities=capabilities,
        )
    except ManifestError as e:
        raise DeployBundleError(f"Cannot write the manifest of {address}: {e}")

    pex_entries = await Get(DigestEntries, Digest, pex_package.digest)
    pex_files = [e for e in pex_entries if isinstance(e, FileEntry)]
    if len(pex_files) != 1:
        raise DeployBundleError(
            f"The binary {binary.address} of {address} must build one PEX file (not a packed "
            f"or loose directory layout), got {[e.path for e in pex_files]}."
        )
    pex_name = f"{binary.address.target_name}.pex"
    kernel_files = await MultiGet(
        Get(Digest, DigestSubset(kernel.digest, PathGlobs(["*", f"!{METADATA_FILE}"])))
        for kernel in compiled
    )
    parts = await MultiGet(
        Get(Digest, AddPrefix(files, prefix)) for files, (_, prefix) in zip(kernel_files, placed)
    )
    bundle_files = await MultiGet(
        Get(
            Digest,
            CreateDigest(
                [
                    FileEntry(
                        f"{output_dir}/{pex_name}",
                        pex_files[0].file_digest,
                        is_executable=True,
                    )
                ]
            ),
        ),
        Get(
            Digest,
            CreateDigest(
                [FileContent(f"{cache_dir}/manifest.json", dumps_manifest(manifest).encode())]
            ),
        ),
    )
    bundle = await Get(Digest, MergeDigests((*parts, *bundle_files)))
    artifacts = [
        BuiltPackageArtifact(
            output_dir,
            extra_log_lines=(
                f"  {pex_name} + {len(manifest['files'])} kernel files for "
                f"{', '.join(capabilities)} (driver {field_set.driver_version.value})",
            ),
        )
    ]
    if field_set.archive.value == "tar.gz":
        contents = await Get(DigestContents, Digest, bundle)
        archive = await Get(
            Digest,
            CreateDigest([FileContent(f"{output_dir}.tar.gz", deterministic_tar_gz(contents))]),
        )
        bundle = await Get(Digest, MergeDigests([bundle, archive]))
        artifacts.append(BuiltPackageArtifact(f"{output_dir}.tar.gz"))
    return BuiltPackage(bundle, tuple(artifacts))


def rules():
    return [*collect_rules(), UnionRule(PackageFieldSet, DeployBundleFieldSet)]
