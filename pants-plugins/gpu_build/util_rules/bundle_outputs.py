"""Where a `deploy_bundle` writes under dist/, and refusing two bundles that would write there.

Pants' `package` goal merges every package's digest and writes it itself (clearing each
artifact's path first): two bundles with one output path either replace each other from run to
run or fail the merge with an error that names neither. So every bundle's path is compared with
every other `deploy_bundle`'s before anything is built.
"""

from __future__ import annotations

from pants.engine.addresses import Address
from pants.engine.target import AllTargets, Target

from gpu_build.target_types import DeployBundleTarget
from gpu_build.util_rules.bundle_field_set import DeployBundleError, DeployBundleFieldSet


def _dir_of(target: Target) -> str:
    return DeployBundleFieldSet.create(target).output_dir


def _overlap(a: str, b: str) -> bool:
    return a == b or a.startswith(f"{b}/") or b.startswith(f"{a}/")


def check_output_clash(address: Address, output_dir: str, all_targets: AllTargets) -> None:
    clashes = sorted(
        (str(t.address), _dir_of(t))
        for t in all_targets
        if isinstance(t, DeployBundleTarget)
        and t.address != address
        and _overlap(_dir_of(t), output_dir)
    )
    if clashes:
        others = ", ".join(f"{a} (dist/{d})" for a, d in clashes)
        raise DeployBundleError(
            f"The deploy_bundle {address} would write dist/{output_dir}/, where {others} "
            f"writes too: one would silently replace the other. Give them different names or "
            f"set `output_path` on one of them."
        )
