"""Dependency inference for `gpu_kernel`: `#include`s, first-party imports and the `.cu`/`.ptx`
files a numba source links (`cuda.declare_device(..., link=...)`) become dependencies.

As Pants' Python backend does for imports, each reference resolves to the file the compiler would
read (the first candidate that exists, in the compiler's search order) and then to the targets
that own that file. Headers and helper modules are usually owned by `files` targets, which infer
nothing of their own, so the kernel's rule follows their references too, transitively: every file
the compile reads becomes a dependency of the kernel, and so lands in its sandbox.

The `.cu` files a numba source links find `#include <...>` in the target's `include_dirs` and in
the directories the module puts in numba's `config.CUDA_NVRTC_EXTRA_SEARCH_PATHS`
(`gpu_build.dependency_inference.search_paths`): both are searched for their headers.

Ambiguous owners warn and are skipped (unless `!` ignores leave one), through Pants' own helpers.
A reference with no owner is reported per `[gpu-toolchains].unowned_dependency_behavior` when its
file exists but no target owns it, or when it should exist: a quoted include, a relative import,
or an absolute import whose top-level package is first-party (a directory or `.py` file of that
name directly under a source root). Angle includes found nowhere (NVRTC's and the toolkit's
headers) and imports of other packages (numba, numpy, the standard library) are silently not
dependencies.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional

from pants.backend.python.dependency_inference.rules import UnownedDependencyError
from pants.backend.python.dependency_inference.subsystem import UnownedDependencyUsage
from pants.engine.addresses import Address
from pants.engine.collection import Collection
from pants.engine.fs import DigestContents, PathGlobs, Paths
from pants.engine.internals.graph import Owners, OwnersRequest
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import (
    DependenciesRequest,
    ExplicitlyProvidedDependencies,
    FieldSet,
    InferDependenciesRequest,
    InferredDependencies,
)
from pants.engine.unions import UnionRule
from pants.source.source_root import AllSourceRoots, SourceRoot, SourceRootRequest
from pants.util.logging import LogLevel
from pants.util.strutil import bullet_list, softwrap

from gpu_build.dependency_inference.references import (
    NO_INFER_DEP,
    Reference,
    parse_imports,
    parse_includes,
    parse_links,
)
from gpu_build.dependency_inference.search_paths import parse_search_paths
from gpu_build.subsystems.toolchains import GpuToolchains
from gpu_build.target_types import (
    GpuKernelDependenciesField,
    GpuKernelIncludeDirsField,
    GpuKernelSourceField,
)
from gpu_spec.metadata import LANG_NUMBA, language_of

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuKernelInferenceFieldSet(FieldSet):
    required_fields = (GpuKernelSourceField, GpuKernelDependenciesField)

    source: GpuKernelSourceField
    include_dirs: GpuKernelIncludeDirsField
    dependencies: GpuKernelDependenciesField


class InferGpuKernelDependencies(InferDependenciesRequest):
    infer_from = GpuKernelInferenceFieldSet


# -----------------------------------------------------------------------------------------------
# One file's references, and where one reference leads


@dataclass(frozen=True)
class FileReferencesRequest:
    path: str
    include_dirs: tuple[str, ...]  # build-root relative
    source_root: str  # the kernel's: the compile's only `sys.path` entry


class FileReferences(Collection[Reference]):
    pass


@rule(level=LogLevel.DEBUG)
async def file_references(request: FileReferencesRequest) -> FileReferences:
    """Reads the file through the engine (so its edits invalidate this) and parses it."""
    contents = await Get(DigestContents, PathGlobs([request.path]))
    text = contents[0].content.decode(errors="replace") if contents else ""
    if language_of(request.path) == LANG_NUMBA:
        return FileReferences(
            parse_imports(request.path, text, request.source_root) + parse_links(request.path, text)
        )
    return FileReferences(parse_includes(request.path, text, request.include_dirs))


@dataclass(frozen=True)
class IncludeDirsRequest:
    source: str  # the kernel's
    spec_path: str  # its BUILD file's directory
    include_dirs: tuple[str, ...]  # the target's field, relative to spec_path


class IncludeDirs(Collection[str]):
    """Where `#include <...>` looks, build-root relative, in the compiler's order."""


@rule(level=LogLevel.DEBUG)
async def include_dirs_of(request: IncludeDirsRequest) -> IncludeDirs:
    """The target's `include_dirs` (build-root relative, as `compile_options` gives them to
    the compiler); for a numba source (whose linked `.cu` files they serve), then the
    directories it puts in numba's CUDA_NVRTC_EXTRA_SEARCH_PATHS."""
    own = tuple(
        GpuKernelIncludeDirsField.build_root_relative(request.spec_path, d)
        for d in request.include_dirs
    )
    if language_of(request.source) != LANG_NUMBA:
        return IncludeDirs(own)
    contents = await Get(DigestContents, PathGlobs([request.source]))
    text = contents[0].content.decode(errors="replace") if contents else ""
    return IncludeDirs(dict.fromkeys((*own, *parse_search_paths(request.source, text))))


@dataclass(frozen=True)
class ResolvedReference:
    reference: Reference
    path: Optional[str]  # the first candidate that exists; None when none does
    owners: tuple[Address, ...]


@rule(level=LogLevel.DEBUG)
async def resolve_reference(reference: Reference) -> ResolvedReference:
    # Existence first: Owners also matches paths that do not exist (for deleted files), so a
    # `*.cuh` glob would claim every candidate, not the one the compiler reads.
    paths = await Get(Paths, PathGlobs(reference.candidates))
    path = next((c for c in reference.candidates if c in paths.files), None)
    if path is None:
        return ResolvedReference(reference, None, ())
    owners = await Get(Owners, OwnersRequest((path,)))
    return ResolvedReference(reference, path, tuple(sorted(owners)))


@dataclass(frozen=True)
class FirstPartyPackageRequest:
    top_level: str


@dataclass(frozen=True)
class FirstPartyPackage:
    top_level: str
    first_party: bool


@rule(level=LogLevel.DEBUG)
async def first_party_package(
    request: FirstPartyPackageRequest, source_roots: AllSourceRoots
) -> FirstPartyPackage:
    """Whether a top-level package is the repository's own: `<root>/<name>.py` or a non-empty
    `<root>/<name>/` under some source root. Only then is an unresolved import worth a warning."""
    name = request.top_level
    globs = [
        os.path.normpath(os.path.join(root.path, pattern))
        for root in source_roots
        for pattern in (f"{name}.py", f"{name}/*")
    ]
    paths = await Get(Paths, PathGlobs(globs))
    return FirstPartyPackage(name, bool(paths.files or paths.dirs))


# -----------------------------------------------------------------------------------------------
# Everything the kernel's source reaches


def chosen_owners(
    explicit: ExplicitlyProvidedDependencies, owners: tuple[Address, ...]
) -> tuple[Address, ...]:
    """The owner to infer: the only one (unless `!`-ignored), or the one that `!` ignores leave
    of several. None when explicit `dependencies` already cover an ambiguous file."""
    if len(owners) == 1:
        return tuple(
            explicit.remaining_after_disambiguation(owners, owners_must_be_ancestors=False)
        )
    disambiguated = explicit.disambiguated(owners)
    return (disambiguated,) if disambiguated else ()


@dataclass(frozen=True)
class KernelReferencesRequest:
    source: str
    include_dirs: tuple[str, ...]
    source_root: str
    explicit: ExplicitlyProvidedDependencies


class KernelReferences(Collection[ResolvedReference]):
    pass


@rule(desc="Following a gpu_kernel's includes and imports", level=LogLevel.DEBUG)
async def kernel_references(request: KernelReferencesRequest) -> KernelReferences:
    """Every reference of the source and of the files it reaches, breadth first.

    A file is followed when the kernel will depend on one of its owners (inferred or explicit):
    only then is it in the compile's sandbox.
    """
    seen = {request.source}
    frontier = [request.source]
    resolved_all: list[ResolvedReference] = []
    while frontier:
        per_file = await MultiGet(
            Get(
                FileReferences,
                FileReferencesRequest(path, request.include_dirs, request.source_root),
            )
            for path in frontier
        )
        references = [reference for in_file in per_file for reference in in_file]
        resolved = await MultiGet(Get(ResolvedReference, Reference, r) for r in references)
        resolved_all.extend(resolved)
        frontier = []
        for res in resolved:
            if res.path is None or res.path in seen or not res.owners:
                continue
            explicit = request.explicit
            if chosen_owners(explicit, res.owners) or explicit.any_are_covered_by_includes(
                res.owners
            ):
                seen.add(res.path)
                frontier.append(res.path)
    return KernelReferences(resolved_all)


def unowned_message(address: Address, unowned: list[ResolvedReference]) -> str:
    def line(res: ResolvedReference) -> str:
        if res.path is not None:
            return f"{res.reference.describe()}: {res.path} exists, but no target owns it"
        searched = ", ".join(res.reference.candidates) or "no path inside the repository"
        return f"{res.reference.describe()}: searched {searched}"

    return softwrap(
        f"""
        Pants cannot infer owners for the following includes and imports of the target
        {address}:

        {bullet_list(line(res) for res in unowned)}

        Give each file a target that owns it (e.g. `files(name="headers", sources=["*.cuh"])`
        beside headers, `python_sources()` or `files` beside helper modules), check the
        target's `include_dirs`, or add the dependency to its `dependencies`. If a reference
        is not meant to be inferred (a header the compiler provides), add a comment with
        `{NO_INFER_DEP}` on its line.
        """
    )


@rule(desc="Inferring gpu_kernel dependencies from includes and imports", level=LogLevel.DEBUG)
async def infer_gpu_kernel_dependencies(
    request: InferGpuKernelDependencies, subsystem: GpuToolchains
) -> InferredDependencies:
    field_set = request.field_set
    address = field_set.address
    source = field_set.source.file_path
    explicit, source_root, include_dirs = await MultiGet(
        Get(ExplicitlyProvidedDependencies, DependenciesRequest(field_set.dependencies)),
        Get(SourceRoot, SourceRootRequest, SourceRootRequest.for_file(source)),
        Get(
            IncludeDirs,
            IncludeDirsRequest(source, address.spec_path, field_set.include_dirs.value or ()),
        ),
    )
    resolved = await Get(
        KernelReferences,
        KernelReferencesRequest(source, tuple(include_dirs), source_root.path, explicit),
    )
    unowned = [res for res in resolved if not res.owners]
    first_party = await MultiGet(
        Get(FirstPartyPackage, FirstPartyPackageRequest(top_level))
        for top_level in sorted({r.reference.top_level for r in unowned if r.reference.top_level})
    )
    first_party_names = {p.top_level for p in first_party if p.first_party}
    report = [
        res
        for res in unowned
        if res.path is not None  # in the repository, but not in the compile's sandbox
        or res.reference.expect_owner
        or res.reference.top_level in first_party_names
    ]
    behavior = subsystem.unowned_dependency_behavior
    if report and behavior is UnownedDependencyUsage.LogWarning:
        logger.warning(unowned_message(address, report))
    elif report and behavior is UnownedDependencyUsage.RaiseError:
        raise UnownedDependencyError(unowned_message(address, report))

    inferred: set[Address] = set()
    warned: set[str] = set()
    for res in resolved:
        if len(res.owners) > 1 and res.path not in warned:
            warned.add(res.path or "")
            explicit.maybe_warn_of_ambiguous_dependency_inference(
                res.owners,
                address,
                import_reference="file",
                context=f"The target {address} refers to {res.reference.describe()}",
            )
        inferred.update(chosen_owners(explicit, res.owners))
    return InferredDependencies(sorted(inferred))


def rules():
    return (
        *collect_rules(),
        UnionRule(InferDependenciesRequest, InferGpuKernelDependencies),
    )
