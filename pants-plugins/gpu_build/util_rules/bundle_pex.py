"""The bundle's app: its `pex_binary`, rebuilt for the device's complete platforms in the
bundle's `app_layout` (packed by default: each wheel one file), from the binary's sources less
what only its kernels use (unless `jit_fallback`), with the build-only files of its wheels left
out (`[gpu-bundle].strip_wheel_files`) and the number of processes its first run installs them
with set (`[gpu-bundle].max_install_jobs`).

Why the sources are chosen here and not by Pants' `pex_binary`: that PEX carries every kernel's
source as JIT mode's index (`jit_index.py`), so one kernel edit changed `app.pex` and a deploy
re-sent all of it (34.5 MB for a one-line saxpy change). The bundle ships those kernels compiled.

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
from pants.backend.python.target_types import PexCompletePlatformsField, PexLayout
from pants.backend.python.util_rules.pex import Pex, VenvPex, VenvPexProcess
from pants.backend.python.util_rules.pex_from_targets import PexFromTargetsRequest
from pants.backend.python.util_rules.python_sources import (
    PythonSourceFiles,
    PythonSourceFilesRequest,
    StrippedPythonSourceFiles,
)
from pants.engine.addresses import Address, Addresses
from pants.engine.fs import (
    AddPrefix,
    CreateDigest,
    Digest,
    DigestEntries,
    FileContent,
    FileEntry,
    MergeDigests,
    RemovePrefix,
)
from pants.engine.process import ProcessResult
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import Dependencies, DependenciesRequest, Target, Targets
from pants.util.frozendict import FrozenDict

from gpu_build.scripts.process_tool import ScriptTool, ScriptToolRequest
from gpu_build.subsystems.bundle import GpuBundle
from gpu_build.target_types import GpuKernelSourceField
from gpu_build.util_rules.bundle_field_set import DeployBundleError, DeployBundleFieldSet
from gpu_build.util_rules.bundle_launcher import app_pex_filename, pex_identity
from gpu_spec.signature import PINNED_KEYS_FILE, pinned_keys_module_source

SCRIPT = "strip_pex.py"
OUT_DIR = "__stripped"


def strip_process(
    tool: VenvPex,
    digest: Digest,
    path: str,
    patterns: Sequence[str],
    max_install_jobs: int | None,
    target: str,
) -> VenvPexProcess:
    """The process that writes the PEX at `path`, normalised, stripped and with PEX-INFO's
    `max_install_jobs` set (None: left as pex wrote it), to `OUT_DIR/<path>`."""
    jobs = () if max_install_jobs is None else ("--max-install-jobs", str(max_install_jobs))
    return VenvPexProcess(
        tool,
        argv=(path, f"{OUT_DIR}/{path}", *jobs, *patterns),
        input_digest=digest,
        output_directories=(OUT_DIR,),
        description=f"Normalise and strip the wheels in {path} ({target})",
    )


@dataclass(frozen=True)
class StripPexRequest:
    """A PEX to normalise (always: bytecode out of its wheels, modes by rule) and to strip of
    the wheel files `patterns` match. Used for a bundle's app and for a `gpu_toolchain`."""

    digest: Digest  # holding the PEX at `path`
    path: str
    target: str  # the target's address, for the process description
    patterns: tuple[str, ...] = ()
    max_install_jobs: int | None = None  # None: PEX-INFO's as pex wrote it


@dataclass(frozen=True)
class StrippedPex:
    digest: Digest  # the PEX at the same path: one executable file, or a packed directory
    files: FrozenDict[str, str]  # {path under the PEX ("" for a zipapp): sha256}


@rule(desc="Strip a PEX's wheels")
async def strip_pex(request: StripPexRequest) -> StrippedPex:
    """Always run, even with nothing to strip: pex copies whatever bytecode an earlier run left
    in its installed wheels under PEX_ROOT, and the modes of whichever umask installed them, so
    only the normalised PEX is the same bytes on every machine (see scripts/strip_pex.py)."""
    tool = await Get(ScriptTool, ScriptToolRequest(SCRIPT))
    process = strip_process(
        tool.pex,
        request.digest,
        request.path,
        request.patterns,
        request.max_install_jobs,
        request.target,
    )
    result = await Get(ProcessResult, process)
    digest = await Get(Digest, RemovePrefix(result.output_digest, OUT_DIR))
    entries = await Get(DigestEntries, Digest, digest)
    files = pex_files(request.path, entries)
    if "" in files:  # a zipapp: the file is run as a program
        digest = await Get(
            Digest, CreateDigest([dataclasses.replace(entries[0], is_executable=True)])
        )
    return StrippedPex(digest, files)


def pex_files(path: str, entries: DigestEntries) -> FrozenDict[str, str]:
    """{path under the PEX at `path`: sha256}, "" naming a zipapp PEX (the file `path` itself)."""
    files = {}
    for entry in entries:
        if not isinstance(entry, FileEntry):
            continue
        if entry.path == path:
            files[""] = entry.file_digest.fingerprint
        elif entry.path.startswith(f"{path}/"):
            files[entry.path[len(path) + 1 :]] = entry.file_digest.fingerprint
        else:
            raise AssertionError(f"{entry.path}: not the PEX {path} nor under it")
    assert files and ("" not in files or len(files) == 1), f"no PEX at {path}: {sorted(files)}"
    return FrozenDict(sorted(files.items()))


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
    digest: Digest  # the PEX at `<output_dir>/<filename>`: a file, or a packed directory
    filename: str  # `<binary target name>.pex`
    files: FrozenDict[str, str]  # {path relative to the bundle directory: sha256}
    identity: str  # what the launcher checks: `bundle_launcher.pex_identity`


def pinned_keys_source(pinned_keys: Sequence[str]) -> FileContent:
    """The module holding the pinned keys, at the root of the app PEX's sources.

    Part of the app's code (not its environment, where an empty or different value would
    remove or replace the keys): the runtime imports it, and the PEX that carries it is hashed
    into the signed manifest.
    """
    return FileContent(PINNED_KEYS_FILE, pinned_keys_module_source(pinned_keys).encode())


def refuse_jit_fallback_if_signed(address: object, jit_fallback: bool, signed: bool) -> None:
    """`jit_fallback` ships the kernels' sources for the runtime to compile; a signed bundle's
    runtime never compiles (no signature covers the compiler, its output or the JIT cache: see
    `gpu_runtime.api.open_cache`), so on a signed bundle the field would ship sources that are
    never used, and read as a promise of a fallback that cannot happen. Refused at build time."""
    if jit_fallback and signed:
        raise DeployBundleError(
            f"The deploy_bundle {address} sets `jit_fallback=True` and is signed "
            f"(`[gpu-bundle-signing].key_file` is set): a signed bundle never JIT-compiles, "
            f"since no signature covers the compiler or what it writes, so the kernels' "
            f"sources would ship unused. Remove `jit_fallback=True`, or build this bundle "
            f"unsigned (no `key_file`)."
        )


@dataclass(frozen=True)
class AppSourcesRequest:
    binary: Address


@dataclass(frozen=True)
class AppSources:
    digest: Digest  # the app's modules and resources, source roots stripped (as in a PEX)


@rule(desc="Find the app's sources, less what only its kernels use")
async def app_sources(request: AppSourcesRequest) -> AppSources:
    """The binary's transitive sources, without descending into `gpu_kernel` targets: a kernel's
    source, JIT index and whatever only a kernel depends on (a header, a helper module) stay
    out, so that editing them leaves the app PEX's bytes as they were."""
    closure = {t.address: t for t in await Get(Targets, Addresses([request.binary]))}
    frontier = list(closure.values())
    while frontier:
        found = await MultiGet(
            Get(Targets, DependenciesRequest(t.get(Dependencies))) for t in frontier
        )
        new = {t.address: t for deps in found for t in deps if t.address not in closure}
        frontier = [t for t in new.values() if not t.has_field(GpuKernelSourceField)]
        closure.update((t.address, t) for t in frontier)
    sources = await Get(PythonSourceFiles, PythonSourceFilesRequest(closure.values()))
    stripped = await Get(StrippedPythonSourceFiles, PythonSourceFiles, sources)
    return AppSources(stripped.stripped_source_files.snapshot.digest)


@rule
async def device_pex(request: DevicePexRequest, bundle: GpuBundle) -> DevicePex:
    field_set, binary = request.field_set, request.binary
    refuse_jit_fallback_if_signed(
        field_set.address, field_set.jit_fallback.value, bool(request.pinned_keys)
    )
    pex_field_set = device_pex_field_set(field_set, binary)
    built = await Get(PexFromTargetsRequestForBuiltPackage, PexBinaryFieldSet, pex_field_set)
    sources = [built.request.additional_sources] if built.request.additional_sources else []
    if request.pinned_keys:  # a module of the same name in the app's sources: a merge conflict
        sources.append(await Get(Digest, CreateDigest([pinned_keys_source(request.pinned_keys)])))
    include_source_files = built.request.include_source_files
    if include_source_files and not field_set.jit_fallback.value:
        sources.append((await Get(AppSources, AppSourcesRequest(binary.address))).digest)
        include_source_files = False  # they are in `sources`, less the kernels'
    filename = app_pex_filename(binary)
    path = f"{field_set.output_dir}/{filename}"
    pex = await Get(
        Pex,
        PexFromTargetsRequest,
        dataclasses.replace(
            built.request,
            output_filename=filename,
            layout=PexLayout(field_set.app_layout.value),
            include_source_files=include_source_files,
            additional_sources=await Get(Digest, MergeDigests(sources)) if sources else None,
        ),
    )
    placed = await Get(Digest, AddPrefix(pex.digest, field_set.output_dir))
    stripped = await Get(
        StrippedPex,
        StripPexRequest(
            placed,
            path,
            str(field_set.address),
            tuple(bundle.strip_wheel_files),
            bundle.max_install_jobs,
        ),
    )
    files = {f"{filename}/{rel}" if rel else filename: sha for rel, sha in stripped.files.items()}
    return DevicePex(stripped.digest, filename, FrozenDict(files), pex_identity(stripped.files))


def rules():
    return collect_rules()
