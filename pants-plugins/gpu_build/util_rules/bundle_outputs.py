"""Where a `deploy_bundle` writes under dist/, and refusing two bundles that would write there.

Pants' `package` goal merges every package's digest and writes it itself (clearing each
artifact's path first): two bundles with one output path either replace each other from run to
run or fail the merge with an error that names neither. A bundle's default path is its target
name alone (not prefixed by its directory, as other packages' are), so two bundles of one name
in two directories clash. So every bundle's path is compared with every other `deploy_bundle`'s
before anything is built.

The scan is `AllTargets`, as Pants' Python dependency inference (which every bundle's
`pex_binary` runs) reads it: constructing a target runs only Pants' own checks, the plugin's
checks run where a rule uses a target (`gpu_build/validation.py`), so an invalid `gpu_kernel`
or `deploy_bundle` elsewhere in the repo fails neither. A BUILD file Pants cannot read, or a
field of the wrong type, fails this scan as it fails Pants' own inference.
"""

from __future__ import annotations

from dataclasses import dataclass

from pants.engine.addresses import Address
from pants.engine.collection import Collection
from pants.engine.rules import collect_rules, rule
from pants.engine.target import AllTargets
from pants.util.logging import LogLevel

from gpu_build.target_types import DeployBundleOutputPathField, DeployBundleTarget
from gpu_build.util_rules.bundle_field_set import DeployBundleError


@dataclass(frozen=True)
class BundleOutput:
    address: Address
    output_dir: str  # under dist/


class AllBundleOutputs(Collection[BundleOutput]):
    """Every `deploy_bundle` of the repo, with its dist/ path."""


@rule(desc="Find every deploy_bundle's output path", level=LogLevel.DEBUG)
def all_bundle_outputs(targets: AllTargets) -> AllBundleOutputs:
    return AllBundleOutputs(
        BundleOutput(t.address, t[DeployBundleOutputPathField].value_or_default(file_ending=None))
        for t in targets
        if isinstance(t, DeployBundleTarget)
    )


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
