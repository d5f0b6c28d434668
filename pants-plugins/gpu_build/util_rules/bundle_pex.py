"""The bundle's app: its `pex_binary`, rebuilt for the device's complete platforms, with the
build-only files of its wheels left out (`[gpu-bundle].strip_wheel_files`) and the number of
processes its first run installs them with set (`[gpu-bundle].max_install_jobs`).

The stripping is our stdlib-only `scripts/strip_pex.py`, run in a PEX as a hermetic process, like
Pants' own Dockerfile parser: the PEX in, the stripped PEX out, cached like any process.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from pants.backend.python.goals.package_pex_binary import PexBinaryFieldSet
from pants.backend.python.subsystems.setup import PythonSetup
from pants.backend.python.target_types import (
    EntryPoint,
    PexCompletePlatformsField,
    PexEnvField,
)
from pants.backend.python.util_rules.interpreter_constraints import InterpreterConstraints
from pants.backend.python.util_rules.pex import PexRequest, VenvPex, VenvPexProcess
from pants.core.goals.package import BuiltPackage, PackageFieldSet
from pants.engine.fs import (
    CreateDigest,
    Digest,
    DigestEntries,
    FileContent,
    FileEntry,
    RemovePrefix,
)
from pants.engine.process import ProcessResult
from pants.engine.rules import Get, collect_rules, rule
from pants.engine.target import Target, Targets
from pants.util.resources import read_resource

from gpu_build.subsystems.bundle import GpuBundle
from gpu_build.util_rules.bundle_field_set import DeployBundleError, DeployBundleFieldSet
from gpu_spec.signature import PINNED_KEYS_ENV

SCRIPT = "strip_pex.py"
OUT_DIR = "__stripped"


def strip_process(
    tool: VenvPex,
    digest: Digest,
    path: str,
    patterns: Sequence[str],
    max_install_jobs: int,
    target: str,
) -> VenvPexProcess:
    """The process that writes the PEX at `path`, stripped and with PEX-INFO's
    `max_install_jobs` set, to `OUT_DIR/<path>`."""
    return VenvPexProcess(
        tool,
        argv=(path, f"{OUT_DIR}/{path}", "--max-install-jobs", str(max_install_jobs), *patterns),
        input_digest=digest,
        output_directories=(OUT_DIR,),
        description=f"Leave build-only files out of the wheels in {path} ({target})",
    )


@dataclass(frozen=True)
class StripPexRequest:
    digest: Digest  # holding the PEX at `path`
    path: str
    target: str  # the bundle's address, for the process description


@dataclass(frozen=True)
class StrippedPex:
    digest: Digest  # the PEX at the same path, executable
    sha256: str


@dataclass(frozen=True)
class StripToolRequest:
    pass


@dataclass(frozen=True)
class StripTool:
    pex: VenvPex


@rule(desc="Build the PEX-stripping tool")
async def strip_tool(_: StripToolRequest, python_setup: PythonSetup) -> StripTool:
    script = FileContent(SCRIPT, read_resource("gpu_build.scripts", SCRIPT))
    pex = await Get(
        VenvPex,
        PexRequest(
            output_filename="gpu_bundle_strip_pex.pex",
            internal_only=True,
            interpreter_constraints=InterpreterConstraints(python_setup.interpreter_constraints),
            sources=await Get(Digest, CreateDigest([script])),
            main=EntryPoint(SCRIPT[: -len(".py")]),
        ),
    )
    return StripTool(pex)


@rule(desc="Strip a bundle's app PEX")
async def strip_pex(request: StripPexRequest, bundle: GpuBundle) -> StrippedPex:
    if not bundle.strip_wheel_files and bundle.max_install_jobs == 1:  # pex's own PEX as it is
        entries = await Get(DigestEntries, Digest, request.digest)
        return StrippedPex(request.digest, _only_file(entries).file_digest.fingerprint)
    tool = await Get(StripTool, StripToolRequest())
    process = strip_process(
        tool.pex,
        request.digest,
        request.path,
        bundle.strip_wheel_files,
        bundle.max_install_jobs,
        request.target,
    )
    result = await Get(ProcessResult, process)
    out = await Get(Digest, RemovePrefix(result.output_digest, OUT_DIR))
    stripped = _only_file(await Get(DigestEntries, Digest, out))
    digest = await Get(
        Digest, CreateDigest([FileEntry(request.path, stripped.file_digest, is_executable=True)])
    )
    return StrippedPex(digest, stripped.file_digest.fingerprint)


def _only_file(entries: DigestEntries) -> FileEntry:
    files = [e for e in entries if isinstance(e, FileEntry)]
    assert len(files) == 1, f"one PEX expected, got {[e.path for e in files]}"
    return files[0]


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
    stripped = await Get(StrippedPex, StripPexRequest(digest, path, str(field_set.address)))
    return DevicePex(stripped.digest, filename, stripped.sha256)


def rules():
    return collect_rules()
