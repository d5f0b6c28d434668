"""`pants package` on a `deploy_bundle`: the app PEX plus `cache/` of precompiled kernels.

Like Pants' `archive` target, a package made of other packages. This rule ties the parts together:
- bundle_kernels.py: which `gpu_kernel`s the bundle ships, checked against its capabilities and
  driver before anything is built;
- bundle_pex.py: the `pex_binary`'s PEX, rebuilt for the device's complete platforms;
- bundle_cache.py: the kernels compiled into `cache/`, with `cache/manifest.json`;
- bundle_archive.py: the whole bundle as a reproducible `.tar.gz`, when `archive` asks for one.
"""

from __future__ import annotations

from pants.core.goals.package import BuiltPackage, BuiltPackageArtifact, PackageFieldSet
from pants.engine.addresses import UnparsedAddressInputs
from pants.engine.fs import Digest, MergeDigests
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import Targets
from pants.engine.unions import UnionRule
from pants.util.logging import LogLevel

from gpu_build.bundle_archive import CreateDeterministicTarGz
from gpu_build.bundle_cache import KernelCache, KernelCacheRequest
from gpu_build.bundle_field_set import DeployBundleFieldSet
from gpu_build.bundle_kernels import BundleKernels, BundleKernelsRequest
from gpu_build.bundle_pex import DevicePex, DevicePexRequest, bundle_binary


@rule(level=LogLevel.DEBUG)
async def package_deploy_bundle(field_set: DeployBundleFieldSet) -> BuiltPackage:
    binaries, explicit_kernels = await MultiGet(
        Get(Targets, UnparsedAddressInputs, field_set.binary.to_unparsed_address_inputs()),
        Get(Targets, UnparsedAddressInputs, field_set.kernels.to_unparsed_address_inputs()),
    )
    binary = bundle_binary(field_set, binaries)
    kernels = await Get(
        BundleKernels, BundleKernelsRequest(field_set, binary.address, explicit_kernels)
    )
    pex, cache = await MultiGet(
        Get(DevicePex, DevicePexRequest(field_set, binary)),
        Get(KernelCache, KernelCacheRequest(field_set, tuple(kernels))),
    )
    bundle = await Get(Digest, MergeDigests([pex.digest, cache.digest]))

    output_dir = field_set.output_dir
    capabilities = ", ".join(field_set.capabilities.value or ())
    artifacts = [
        BuiltPackageArtifact(
            output_dir,
            extra_log_lines=(
                f"  {pex.filename} + {cache.file_count} kernel files for {capabilities} "
                f"(driver {field_set.driver_version.value})",
            ),
        )
    ]
    if field_set.archive.value == "tar.gz":
        archive = await Get(Digest, CreateDeterministicTarGz(bundle, f"{output_dir}.tar.gz"))
        bundle = await Get(Digest, MergeDigests([bundle, archive]))
        artifacts.append(BuiltPackageArtifact(f"{output_dir}.tar.gz"))
    return BuiltPackage(bundle, tuple(artifacts))


def rules():
    return [*collect_rules(), UnionRule(PackageFieldSet, DeployBundleFieldSet)]
