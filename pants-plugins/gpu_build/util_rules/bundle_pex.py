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

from pants.backend.python.goals.package_pex_binary import (
    PexBinaryFieldSet,
    PexFromTargetsRequestForBuiltPackage,
)
from pants.backend.python.subsystems.setup import PythonSetup
from pants.backend.python.target_types import EntryPoint, PexCompletePlatformsField
from pants.backend.python.util_rules.interpreter_constraints import InterpreterConstraints
from pants.backend.python.util_rules.pex import PexRequest, VenvPex, VenvPexProcess
from pants.core.goals.package import BuiltPackage, PackageFieldSet
from pants.engine.fs import (
    CreateDigest,
    Digest,
    DigestEntries,
    FileContent,
    FileEntry,
    MergeDigests,
    RemovePrefix,
)
from pants.engine.process import ProcessResult
from pants.engine.rules import Get, collect_rules, rule
from pants.engine.target import Target, Targets
from pants.util.resources import read_resource

from gpu_build.subsystems.bundle import GpuBundle
from gpu_build.util_rules.bundle_field_set import DeployBundleError, DeployBundleFieldSet
from gpu_spec.signature import PINNED_KEYS_FILE, pinned_keys_module_source

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


def device_pex_field_set(field_set: DeployBundleFieldSet, binary: Target) -> PexBinaryFieldSet:
    """The binary's field set, with the bundle's `complete_platforms` when it sets them."""
    pex_field_set = PexBinaryFieldSet.create(binary)
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


def pinned_keys_source(pinned_keys: Sequence[str]) -> FileContent:
    """The module holding the pinned keys, at the root of the app PEX's sources.

    Part of the app's code (not its environment, where an empty or different value would
    remove or replace the keys): the runtime imports it, and the PEX that carries it is hashed
    into the signed manifest.
    """
    return FileContent(PINNED_KEYS_FILE, pinned_keys_module_source(pinned_keys).encode())


@rule
async def device_pex(request: DevicePexRequest) -> DevicePex:
    field_set, binary = request.field_set, request.binary
    pex_field_set = device_pex_field_set(field_set, binary)
    if request.pinned_keys:
        # Pants' own pex_binary request, with the pinned keys added to its sources (a module
        # of the same name in the app's own sources is a merge conflict, not a silent pick).
        built = await Get(PexFromTargetsRequestForBuiltPackage, PexBinaryFieldSet, pex_field_set)
        keys = await Get(Digest, CreateDigest([pinned_keys_source(request.pinned_keys)]))
        if built.request.additional_sources:
            keys = await Get(Digest, MergeDigests([built.request.additional_sources, keys]))
        with_keys = dataclasses.replace(built.request, additional_sources=keys)
        package = await Get(
            BuiltPackage,
            PexFromTargetsRequestForBuiltPackage,
            PexFromTargetsRequestForBuiltPackage(with_keys),
        )
    else:
        package = await Get(BuiltPackage, PackageFieldSet, pex_field_set)
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
