"""`pants experimental-deploy` on a `device_fleet`: each group's bundle rolled out through Ansible.

The rule packages every `deploy_bundle` the fleet names (as `pants package` does: same cache
entries), and returns an interactive process running `scripts/fleet_tool.py` from a PEX of the
Ansible resolve. That tool generates the playbook and runs it: serial batches, and per device the
single-device deploy (`scripts/deploy_tool.py`, its lock, by-hash delta and atomic switch), the
health check and, on failure, the switch back (see its docstring).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from pants.backend.python.subsystems.setup import PythonSetup
from pants.backend.python.target_types import EntryPoint
from pants.backend.python.util_rules.interpreter_constraints import InterpreterConstraints
from pants.backend.python.util_rules.pex import PexRequest, VenvPex, VenvPexProcess
from pants.backend.python.util_rules.pex_requirements import PexRequirements, Resolve
from pants.base.build_root import BuildRoot
from pants.core.goals.deploy import DeployFieldSet, DeployProcess
from pants.core.goals.package import BuiltPackage, PackageFieldSet
from pants.core.util_rules.distdir import DistDir
from pants.core.util_rules.source_files import SourceFiles, SourceFilesRequest
from pants.core.util_rules.system_binaries import BinaryPathRequest, BinaryPaths
from pants.engine.addresses import Addresses, UnparsedAddressInputs
from pants.engine.env_vars import EnvironmentVars, EnvironmentVarsRequest
from pants.engine.fs import CreateDigest, Digest, FileContent, MergeDigests
from pants.engine.process import InteractiveProcess, Process, ProcessCacheScope
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import WrappedTarget, WrappedTargetRequest
from pants.engine.unions import UnionRule
from pants.util.resources import read_resource

from gpu_build.goals.deploy import abspath_in_build_root, binary_path, openssh_request, tool_sources
from gpu_build.subsystems.deploy import GpuBundleDeploy, GpuFleetDeploy
from gpu_build.target_types import (
    DeviceFleetBundlesField,
    DeviceFleetForksField,
    DeviceFleetHealthCheckField,
    DeviceFleetHealthTimeoutField,
    DeviceFleetInventoryField,
    DeviceFleetMaxFailPercentageField,
    DeviceFleetRolloutField,
)
from gpu_build.util_rules.bundle_field_set import DeployBundleFieldSet
from gpu_build.validation import DeployBundleValidationRequest, ValidatedDeployBundle

# Beside the single-device deploy's scripts: the fleet tool and the Ansible callback it enables.
FLEET_SCRIPTS = ("fleet_tool.py", "ansible_callback/fleet_record.py")
_BATCH = re.compile(r"^[1-9][0-9]*%?$")


class DeviceFleetError(Exception):
    """A fleet cannot be deployed as asked: the message names the target, the field and a fix."""


@dataclass(frozen=True)
class DeviceFleetDeployFieldSet(DeployFieldSet):
    required_fields = (DeviceFleetInventoryField, DeviceFleetBundlesField)

    inventory: DeviceFleetInventoryField
    bundles: DeviceFleetBundlesField
    rollout: DeviceFleetRolloutField
    max_fail_percentage: DeviceFleetMaxFailPercentageField
    forks: DeviceFleetForksField
    health_check: DeviceFleetHealthCheckField
    health_timeout: DeviceFleetHealthTimeoutField


def fleet_field_errors(field_set: DeviceFleetDeployFieldSet) -> list[str]:
    """What is wrong with the fleet's own fields, each naming the field and the fix."""
    errors = []
    if not field_set.bundles.value:
        errors.append('`bundles` is empty: map an inventory group to a bundle, {"orin": ":b"}')
    bad = [b for b in field_set.rollout.value or () if not _BATCH.match(b) or b == "0%"]
    if bad or not field_set.rollout.value:
        errors.append(
            f"`rollout` has {', '.join(map(repr, bad)) or 'no batch'}: each batch is a device "
            'count or a share of the fleet above 0, e.g. ["1", "25%", "100%"]'
        )
    if not 0 <= field_set.max_fail_percentage.value <= 100:
        errors.append(f"`max_fail_percentage` is {field_set.max_fail_percentage.value}: 0-100")
    return errors


@dataclass(frozen=True)
class FleetTool:
    """The fleet tool's PEX: the Ansible resolve's entire lockfile plus the deploy scripts."""

    pex: VenvPex


@rule(desc="Build the fleet deploy tool")
async def fleet_tool_pex(options: GpuFleetDeploy, python_setup: PythonSetup) -> FleetTool:
    resolve = options.ansible_resolve
    if resolve not in python_setup.resolves:
        raise DeviceFleetError(
            f"`[gpu-fleet-deploy].ansible_resolve` is {resolve!r}, which `[python.resolves]` "
            f"does not define: add a resolve whose requirements hold `ansible-core>=2.19` "
            f'(`{resolve} = "3rdparty/python/{resolve}.lock"`) and run '
            f"`pants generate-lockfiles --resolve={resolve}`."
        )
    files = [
        *tool_sources(),
        *(FileContent(name, read_resource("gpu_build.scripts", name)) for name in FLEET_SCRIPTS),
    ]
    ics = python_setup.resolves_to_interpreter_constraints.get(resolve)
    pex = await Get(
        VenvPex,
        PexRequest(
            output_filename="gpu_fleet_deploy.pex",
            internal_only=True,
            # ansible-core and what it needs, not the whole resolve (which may hold test tools).
            requirements=PexRequirements(
                ("ansible-core",),
                from_superset=Resolve(resolve, use_entire_lockfile=False),
                description_of_origin="`[gpu-fleet-deploy].ansible_resolve`",
            ),
            interpreter_constraints=InterpreterConstraints(
                ics or python_setup.interpreter_constraints
            ),
            sources=await Get(Digest, CreateDigest(files)),
            main=EntryPoint("fleet_tool"),
        ),
    )
    return FleetTool(pex)


def fleet_tool_argv(
    field_set: DeviceFleetDeployFieldSet,
    fleet: GpuFleetDeploy,
    deploy: GpuBundleDeploy,
    *,
    bundle_dirs: dict[str, str],
    ssh: str,
    sftp: str,
    summary_json: str,
    build_root: BuildRoot,
) -> list[str]:
    """`scripts/fleet_tool.py`'s arguments: the target's fields, `[gpu-fleet-deploy]`, and how
    ssh reaches a device from `[gpu-bundle-deploy]` (for Ansible and for each device's deploy)."""
    ssh_options = [arg for option in deploy.ssh_options for arg in ("--ssh-option", option)]
    deploy_args = [*("--ssh", ssh, "--sftp", sftp, "--limit-kbps", str(deploy.limit_kbps))]
    deploy_args += ssh_options
    identity = (
        abspath_in_build_root(build_root, deploy.identity_file) if deploy.identity_file else None
    )
    return [
        *("--inventory", field_set.inventory.file_path),
        *(arg for group, path in bundle_dirs.items() for arg in ("--bundle", f"{group}={path}")),
        *(arg for batch in field_set.rollout.value or () for arg in ("--rollout", batch)),
        *("--max-fail-percentage", str(field_set.max_fail_percentage.value)),
        *("--forks", str(field_set.forks.value)),
        *("--health-check", field_set.health_check.value or ""),
        *("--health-timeout", str(field_set.health_timeout.value)),
        *("--remote-python", deploy.remote_python, "--ssh", ssh),
        *(["--identity", identity] if identity else []),
        *ssh_options,
        *(f"--deploy-arg={arg}" for arg in deploy_args),
        *(["--check"] if fleet.check else []),
        *(["--limit", fleet.limit] if fleet.limit else []),
        *("--summary-json", summary_json),
    ]


@dataclass(frozen=True)
class FleetBundles:
    """The fleet's bundles, built: {group: the bundle's directory in `digest`}."""

    dirs: dict[str, str]
    digest: Digest


@rule(desc="Build a fleet's bundles")
async def build_fleet_bundles(field_set: DeviceFleetDeployFieldSet) -> FleetBundles:
    groups: dict[str, str] = dict(field_set.bundles.value or {})
    origin = f"the `bundles` of {field_set.address}"
    addresses = await MultiGet(
        Get(
            Addresses,
            UnparsedAddressInputs(
                [spec], owning_address=field_set.address, description_of_origin=origin
            ),
        )
        for spec in groups.values()
    )
    wrapped = await MultiGet(
        Get(WrappedTarget, WrappedTargetRequest(a[0], description_of_origin=origin))
        for a in addresses
    )
    for group, target in zip(groups, wrapped):
        if not DeployBundleFieldSet.is_applicable(target.target):
            raise DeviceFleetError(
                f"The device_fleet {field_set.address} maps group {group!r} to "
                f"{target.target.address}, a `{target.target.alias}`: `bundles` names "
                "deploy_bundle targets."
            )
    field_sets = [DeployBundleFieldSet.create(w.target) for w in wrapped]
    await MultiGet(
        Get(ValidatedDeployBundle, DeployBundleValidationRequest(fs)) for fs in field_sets
    )
    packages = await MultiGet(Get(BuiltPackage, PackageFieldSet, fs) for fs in field_sets)
    digest = await Get(Digest, MergeDigests(p.digest for p in packages))
    return FleetBundles(dict(zip(groups, (fs.output_dir for fs in field_sets))), digest)


@rule(desc="Deploy a device fleet")
async def deploy_device_fleet(
    field_set: DeviceFleetDeployFieldSet,
    fleet: GpuFleetDeploy,
    deploy: GpuBundleDeploy,
    search: GpuBundleDeploy.EnvironmentAware,
    build_root: BuildRoot,
    distdir: DistDir,
) -> DeployProcess:
    errors = fleet_field_errors(field_set)
    if errors:
        raise DeviceFleetError(
            f"The device_fleet {field_set.address} cannot be deployed: " + "; ".join(errors)
        )
    ssh_request, sftp_request = (
        openssh_request(name, search.executable_search_path) for name in ("ssh", "sftp")
    )
    bundles, inventory, tool, ssh, sftp, env = await MultiGet(
        Get(FleetBundles, DeviceFleetDeployFieldSet, field_set),
        Get(SourceFiles, SourceFilesRequest([field_set.inventory])),
        Get(FleetTool),
        Get(BinaryPaths, BinaryPathRequest, ssh_request),
        Get(BinaryPaths, BinaryPathRequest, sftp_request),
        Get(EnvironmentVars, EnvironmentVarsRequest(deploy.env_vars)),
    )
    summary = os.path.join(
        build_root.path, distdir.relpath, f"{field_set.address.target_name}.fleet-summary.json"
    )
    argv = fleet_tool_argv(
        field_set,
        fleet,
        deploy,
        bundle_dirs=bundles.dirs,
        ssh=binary_path(ssh, ssh_request),
        sftp=binary_path(sftp, sftp_request),
        summary_json=summary,
        build_root=build_root,
    )
    digest = await Get(Digest, MergeDigests([bundles.digest, inventory.snapshot.digest]))
    process = await Get(
        Process,
        VenvPexProcess(
            tool.pex,
            argv=argv,
            input_digest=digest,
            extra_env=dict(env),
            description=f"Deploy {field_set.address} through Ansible",
            cache_scope=ProcessCacheScope.PER_SESSION,
        ),
    )
    return DeployProcess(
        name=str(field_set.address),
        process=InteractiveProcess.from_process(process),
        description=field_set.inventory.file_path,
    )


def rules():
    return [*collect_rules(), UnionRule(DeployFieldSet, DeviceFleetDeployFieldSet)]
