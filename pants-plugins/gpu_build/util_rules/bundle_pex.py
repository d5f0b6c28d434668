"""The bundle's app: its `pex_binary`, rebuilt for the device's complete platforms."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pants.backend.python.goals.package_pex_binary import PexBinaryFieldSet
from pants.backend.python.target_types import PexCompletePlatformsField, PexEnvField
from pants.core.goals.package import BuiltPackage, PackageFieldSet
from pants.engine.fs import CreateDigest, Digest, DigestEntries, FileEntry
from pants.engine.rules import Get, collect_rules, rule
from pants.engine.target import Target, Targets

from gpu_build.util_rules.bundle_field_set import DeployBundleError, DeployBundleFieldSet
from gpu_spec.signature import PINNED_KEYS_ENV


def bundle_binary(field_set: DeployBundleFieldSet, binaries: Targets) -> Target:
    """The one `pex_binary` the `binary` field names."""
    if len(binaries) != 1 or not PexBinaryFieldSet.is_applicable(binaries[0]):
        raise DeployBundleError(
            f"The `binary` field of {field_set.address} must name one `pex_binary` target, got "
            f"{[str(t.address) for t in binaries]}."
        )
    return binaries[0]


def device_pex_field_set(
    field_set: DeployBundleFieldSet, binary: Target, pinned_keys: tuple[str, ...] = ()
) -> PexBinaryFieldSet:
    """The binary's field set, with the bundle's `complete_platforms` when it sets them, and the
    trusted public keys frozen into its environment (pex sets them when the app starts)."""
    pex_field_set = PexBinaryFieldSet.create(binary)
    if pinned_keys:
        env = {**(pex_field_set.env.value or {}), PINNED_KEYS_ENV: ",".join(pinned_keys)}
        pex_field_set = dataclasses.replace(pex_field_set, env=PexEnvField(env, binary.address))
    if not field_set.complete_platforms.value:
        return pex_field_set
    return dataclasses.replace(
        pex_field_set,
        complete_platforms=PexCompletePlatformsField(
            field_set.complete_platforms.value, field_set.address
        ),
    )


@dataclass(frozen=True)
class DevicePexRequest:
    field_set: DeployBundleFieldSet
    binary: Target
    pinned_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class DevicePex:
    digest: Digest  # the PEX at `<output_dir>/<filename>`
    filename: str  # `<binary target name>.pex`
    sha256: str


@rule
async def device_pex(request: DevicePexRequest) -> DevicePex:
    field_set, binary = request.field_set, request.binary
    package = await Get(
        BuiltPackage,
        PackageFieldSet,
        device_pex_field_set(field_set, binary, request.pinned_keys),
    )
    entries = await Get(DigestEntries, Digest, package.digest)
    files = [e for e in entries if isinstance(e, FileEntry)]
    if len(files) != 1:
        raise DeployBundleError(
            f"The binary {binary.address} of {field_set.address} must build one PEX file (not a "
            f"packed or loose directory layout), got {[e.path for e in files]}."
        )
    filename = f"{binary.address.target_name}.pex"
    path = f"{field_set.output_dir}/{filename}"
    digest = await Get(
        Digest, CreateDigest([FileEntry(path, files[0].file_digest, is_executable=True)])
    )
    return DevicePex(digest, filename, files[0].file_digest.fingerprint)


def rules():
    return collect_rules()
