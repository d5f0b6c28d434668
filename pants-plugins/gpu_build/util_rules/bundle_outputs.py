"""Where a `deploy_bundle` writes under dist/, and refusing two bundles that would write there.

Pants' `package` goal merges every package's digest and writes it itself (clearing each
artifact's path first): two bundles with one output path either replace each other from run to
run or fail the merge with an error that names neither. A bundle's default path is its target
name alone (not prefixed by its directory, as other packages' are), so two bundles of one name
in two directories clash. So every bundle's path is compared with every other `deploy_bundle`'s
before anything is built.

The scan reads the repo's BUILD files one directory at a time (not `AllTargets`, which fails on
any invalid target), and a directory whose BUILD file or targets are invalid is left out of it,
so the check itself does not fail a bundle on a broken target elsewhere. That directory's own
bundles are still compared with the rest when one of them is packaged; a clash between two
bundles that each live beside an invalid target is the one case it cannot see. (Pants' Python
dependency inference, which every bundle's `pex_binary` runs, still reads `AllTargets`.)
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from pants.base.specs import DirLiteralSpec, RawSpecsWithoutFileOwners, RecursiveGlobSpec
from pants.engine.addresses import Address
from pants.engine.collection import Collection
from pants.engine.fs import PathGlobs, Paths
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import UnexpandedTargets
from pants.option.global_options import GlobalOptions
from pants.util.logging import LogLevel

from gpu_build.target_types import DeployBundleOutputPathField, DeployBundleTarget
from gpu_build.util_rules.bundle_field_set import DeployBundleError

logger = logging.getLogger(__name__)

_ORIGIN = "the deploy_bundle output-clash check"


@dataclass(frozen=True)
class BundleOutput:
    address: Address
    output_dir: str  # under dist/


class AllBundleOutputs(Collection[BundleOutput]):
    """Every `deploy_bundle` of the directories whose targets are valid, with its dist/ path."""


@dataclass(frozen=True)
class _DirectoryBundlesRequest:
    directory: str


class _DirectoryBundles(Collection[BundleOutput]):
    pass


@rule(desc="Find the deploy_bundles of a directory", level=LogLevel.DEBUG)
async def directory_bundles(request: _DirectoryBundlesRequest) -> _DirectoryBundles:
    spec = RawSpecsWithoutFileOwners(
        dir_literals=(DirLiteralSpec(request.directory),), description_of_origin=_ORIGIN
    )
    try:
        targets = await Get(UnexpandedTargets, RawSpecsWithoutFileOwners, spec)
    except Exception as e:  # any reason the directory's targets cannot be made: not ours to fail
        logger.debug(f"{_ORIGIN} leaves out {request.directory or '//'}: {e}")
        return _DirectoryBundles()
    return _DirectoryBundles(
        BundleOutput(t.address, t[DeployBundleOutputPathField].value_or_default(file_ending=None))
        for t in targets
        if isinstance(t, DeployBundleTarget)
    )


@rule(desc="Find every deploy_bundle's output path", level=LogLevel.DEBUG)
async def all_bundle_outputs(global_options: GlobalOptions) -> AllBundleOutputs:
    # The BUILD files `AllTargets` reads, by Pants' own globs.
    every_directory = RawSpecsWithoutFileOwners(
        recursive_globs=(RecursiveGlobSpec(""),), description_of_origin=_ORIGIN
    )
    build_files, _ = every_directory.to_build_file_path_globs_tuple(
        build_patterns=global_options.build_patterns,
        build_ignore_patterns=global_options.build_ignore,
    )
    paths = await Get(Paths, PathGlobs, build_files)
    directories = sorted({os.path.dirname(f) for f in paths.files})
    found = await MultiGet(Get(_DirectoryBundles, _DirectoryBundlesRequest(d)) for d in directories)
    return AllBundleOutputs(output for bundles in found for output in bundles)


def _overlap(a: str, b: str) -> bool:
    return a == b or a.startswith(f"{b}/") or b.startswith(f"{a}/")


def check_output_clash(address: Address, output_dir: str, outputs: AllBundleOutputs) -> None:
    clashes = sorted(
        (str(o.address), o.output_dir)
        for o in outputs
        if o.address != address and _overlap(o.output_dir, output_dir)
    )
    if clashes:
        others = ", ".join(f"{a} (dist/{d})" for a, d in clashes)
        raise DeployBundleError(
            f"The deploy_bundle {address} would write dist/{output_dir}/, where {others} "
            f"writes too: one would silently replace the other. Give them different names or "
            f"set `output_path` on one of them."
        )


def rules():
    return collect_rules()
