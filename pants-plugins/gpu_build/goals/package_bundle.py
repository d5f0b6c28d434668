"""`pants package` on a `deploy_bundle`: the app PEX plus `cache/` of precompiled kernels.

Like Pants' `archive` target, a package made of other packages. This rule ties the parts together:
- gpu_build/validation.py: the bundle's own fields, as every rule that uses a target checks
  them (first);
- bundle_outputs.py: no other `deploy_bundle` writes the same dist/ path (checked next);
- bundle_kernels.py: which `gpu_kernel`s the bundle ships, checked against its capabilities and
  driver before anything is built;
- bundle_signing.py: the public keys pinned into the app, and the manifest's signature;
- bundle_pex.py: the `pex_binary`'s PEX, rebuilt for the device's complete platforms (beside the
  kernel compiles);
- bundle_launcher.py: `<bundle>/app`, which runs the PEX from a venv of it made on first use;
- bundle_cache.py: the kernels compiled into `cache/`, with `cache/manifest.json` listing every
  file with its sha256, the PEX's too;
- bundle_archive.py: the whole bundle as a reproducible `.tar.gz`, when `archive` asks for one.

Pants' `package` goal, not this rule, writes dist/: it deletes each artifact's path, then
materialises the merged digest file by file, with no rename at the end. A killed run can thus
leave a partial bundle, which the runtime and `python -m gpu_runtime verify` call incomplete
(files missing) or tampered (a truncated file's sha256).
"""

from __future__ import annotations

from pants.core.goals.package import BuiltPackage, BuiltPackageArtifact, PackageFieldSet
from pants.engine.addresses import UnparsedAddressInputs
from pants.engine.fs import CreateDigest, Digest, FileContent, MergeDigests
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import Targets
from pants.engine.unions import UnionRule
from pants.util.frozendict import FrozenDict
from pants.util.logging import LogLevel

from gpu_build import validation
from gpu_build.util_rules.bundle_archive import CreateDeterministicTarGz
from gpu_build.util_rules.bundle_cache import (
    BundleCompiles,
    BundleCompilesRequest,
    KernelCache,
    KernelCacheRequest,
)
from gpu_build.util_rules.bundle_field_set import DeployBundleFieldSet
from gpu_build.util_rules.bundle_kernels import BundleKernels, BundleKernelsRequest
from gpu_build.util_rules.bundle_launcher import bundle_launcher, launcher_script, sha256_hex
from gpu_build.util_rules.bundle_outputs import AllBundleOutputs, check_output_clash
from gpu_build.util_rules.bundle_pex import DevicePex, DevicePexRequest, bundle_binary
from gpu_build.util_rules.bundle_signing import (
    ManifestSignature,
    PinnedKeys,
    SignManifestRequest,
)
from gpu_build.validation import DeployBundleValidationRequest, ValidatedDeployBundle


@rule(level=LogLevel.DEBUG)
async def package_deploy_bundle(
    field_set: DeployBundleFieldSet, all_outputs: AllBundleOutputs
) -> BuiltPackage:
    await Get(ValidatedDeployBundle, DeployBundleValidationRequest(field_set))
    output_dir = field_set.output_dir
    check_output_clash(field_set.address, output_dir, all_outputs)
    binaries, explicit_kernels, pins = await MultiGet(
        Get(Targets, UnparsedAddressInputs, field_set.binary.to_unparsed_address_inputs()),
        Get(Targets, UnparsedAddressInputs, field_set.kernels.to_unparsed_address_inputs()),
        Get(PinnedKeys),
    )
    binary = bundle_binary(field_set, binaries)
    launcher = bundle_launcher(field_set.address, binary)
    kernels = await Get(
        BundleKernels, BundleKernelsRequest(field_set, binary.address, explicit_kernels)
    )
    pex, compiles = await MultiGet(
        Get(DevicePex, DevicePexRequest(field_set, binary, pins.keys)),
        Get(BundleCompiles, BundleCompilesRequest(field_set, tuple(kernels))),
    )
    files = dict(pex.files)
    launcher_files = []
    if launcher is not None:
        script = launcher_script(
            pex.filename, pex.identity, init_cuda=field_set.init_cuda_at_start.value
        )
        files[launcher] = sha256_hex(script)
        launcher_files.append(FileContent(f"{output_dir}/{launcher}", script, is_executable=True))
    launcher_digest = await Get(Digest, CreateDigest(launcher_files))
    app_files = FrozenDict(files)
    cache = await Get(
        KernelCache, KernelCacheRequest(field_set, tuple(kernels), compiles, app_files)
    )
    signature = await Get(ManifestSignature, SignManifestRequest(cache.digest, cache.manifest_path))
    bundle = await Get(
        Digest, MergeDigests([pex.digest, launcher_digest, cache.digest, signature.digest])
    )

    capabilities = ", ".join(field_set.capabilities.value or ())
    signed = f"signed by key {signature.key_id}" if signature.key_id else "unsigned"
    artifacts = [
        BuiltPackageArtifact(
            output_dir,
            extra_log_lines=(
                f"  {pex.filename}{f', its launcher {launcher}' if launcher else ''} + "
                f"{cache.file_count} kernel files for {capabilities} "
                f"(driver {field_set.driver_version.value}); {signed}, "
                f"{len(pins.keys)} key(s) pinned",
            ),
        )
    ]
    if field_set.archive.value == "tar.gz":
        archive = await Get(Digest, CreateDeterministicTarGz(bundle, f"{output_dir}.tar.gz"))
        bundle = await Get(Digest, MergeDigests([bundle, archive]))
        artifacts.append(BuiltPackageArtifact(f"{output_dir}.tar.gz"))
    return BuiltPackage(bundle, tuple(artifacts))


def rules():
    return [
        *collect_rules(),
        *validation.rules(),
        UnionRule(PackageFieldSet, DeployBundleFieldSet),
    ]
