"""`pants run` on a `deploy_bundle`: its app, run from the packaged bundle, strictly.

As Pants users expect of a deployable: what runs is what `pants package` writes (the PEX beside
its `cache/`), and `GPU_RUNTIME_STRICT=1` makes any kernel or capability the bundle lacks an
error instead of a compile, exactly as on the device. (`pants run` of the `pex_binary` itself is
JIT mode: see `gpu_build.util_rules.jit_index`.)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pants.core.goals.package import BuiltPackage
from pants.core.goals.run import RunFieldSet, RunInSandboxBehavior, RunRequest
from pants.engine.addresses import UnparsedAddressInputs
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import Targets

from gpu_build.util_rules.bundle_field_set import DeployBundleFieldSet
from gpu_build.util_rules.bundle_pex import bundle_binary

STRICT_ENV = {"GPU_RUNTIME_STRICT": "1"}


@dataclass(frozen=True)
class DeployBundleRunFieldSet(DeployBundleFieldSet, RunFieldSet):
    # A device app is no build step: `experimental_run_in_sandbox` has no use for it.
    run_in_sandbox_behavior = RunInSandboxBehavior.NOT_SUPPORTED

    def package_field_set(self) -> DeployBundleFieldSet:
        return DeployBundleFieldSet(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(DeployBundleFieldSet)}
        )


def bundle_run_request(package: BuiltPackage, output_dir: str, pex_name: str) -> RunRequest:
    """Runs `<output_dir>/<pex_name>` from the materialised bundle, strict."""
    return RunRequest(
        digest=package.digest,
        args=(f"{{chroot}}/{output_dir}/{pex_name}",),
        extra_env=STRICT_ENV,
    )


@rule
async def run_deploy_bundle(field_set: DeployBundleRunFieldSet) -> RunRequest:
    package, binaries = await MultiGet(
        Get(BuiltPackage, DeployBundleFieldSet, field_set.package_field_set()),
        Get(Targets, UnparsedAddressInputs, field_set.binary.to_unparsed_address_inputs()),
    )
    binary = bundle_binary(field_set, binaries)
    return bundle_run_request(package, field_set.output_dir, f"{binary.address.target_name}.pex")


def rules():
    return [*collect_rules(), *DeployBundleRunFieldSet.rules()]
