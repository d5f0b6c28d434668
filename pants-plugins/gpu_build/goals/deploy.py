"""`pants experimental-deploy` on a `deploy_bundle`: the built bundle sent to a device over ssh.

The rule packages the bundle as `pants package` does (same cache entries) and returns an
interactive process running `scripts/deploy_tool.py` on it, with the device-side steps of
`scripts/remote_release.py`; they decide what to send by sha256 (see their docstrings).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pants.backend.python.target_types import EntryPoint
from pants.backend.python.util_rules.pex import PexRequest, VenvPex, VenvPexProcess
from pants.base.build_root import BuildRoot
from pants.core.goals.deploy import DeployFieldSet, DeployProcess
from pants.core.goals.package import BuiltPackage, PackageFieldSet
from pants.core.util_rules.system_binaries import (
    BinaryPathRequest,
    BinaryPaths,
    BinaryPathTest,
)
from pants.engine.env_vars import EnvironmentVars, EnvironmentVarsRequest
from pants.engine.fs import CreateDigest, Digest, FileContent
from pants.engine.process import InteractiveProcess, Process, ProcessCacheScope
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import WrappedTarget, WrappedTargetRequest
from pants.engine.unions import UnionRule
from pants.util.resources import read_resource

import gpu_spec
from gpu_build import validation
from gpu_build.subsystems.deploy import GpuBundleDeploy
from gpu_build.target_types import (
    DeployBundleBinaryField,
    DeployBundleDestinationField,
    DeployBundleDriverVersionField,
    DeployBundleIdentityFileField,
    DeployBundleSshPortField,
)
from gpu_build.util_rules.bundle_field_set import DeployBundleError, DeployBundleFieldSet
from gpu_build.validation import DeployBundleValidationRequest, ValidatedDeployBundle

# The tool's sources in its PEX: its two scripts, and gpu_spec (standard library only) whole, so
# that whatever `gpu_spec.bundle_files` imports comes along.
TOOL_SCRIPTS = ("deploy_tool.py", "remote_release.py")


def tool_sources() -> list[FileContent]:
    spec = gpu_spec.module_paths()
    return [
        *(FileContent(name, read_resource("gpu_build.scripts", name)) for name in TOOL_SCRIPTS),
        *(FileContent(f"gpu_spec/{path}", read_resource("gpu_spec", path)) for path in spec),
    ]


@dataclass(frozen=True)
class DeployBundleDeployFieldSet(DeployFieldSet):
    required_fields = (DeployBundleBinaryField, DeployBundleDriverVersionField)

    destination: DeployBundleDestinationField
    ssh_port: DeployBundleSshPortField
    identity_file: DeployBundleIdentityFileField


@dataclass(frozen=True)
class DeployTool:
    """The deploy tool's PEX (its own type: a rule of no input must not produce a bare VenvPex)."""

    pex: VenvPex


@rule(desc="Build the bundle deploy tool")
async def deploy_tool_pex() -> DeployTool:
    files = tool_sources()
    sources = await Get(Digest, CreateDigest(files))
    pex = await Get(
        VenvPex,
        PexRequest(
            output_filename="gpu_bundle_deploy.pex",
            internal_only=True,
            sources=sources,
            main=EntryPoint("deploy_tool"),
        ),
    )
    return DeployTool(pex)


def openssh_request(name: str, search_path: tuple[str, ...]) -> BinaryPathRequest:
    """`ssh` or `sftp` on `[gpu-bundle-deploy].executable_search_paths`; `ssh -V` must run."""
    test = BinaryPathTest(args=["-V"]) if name == "ssh" else None
    return BinaryPathRequest(binary_name=name, search_path=search_path, test=test)


def binary_path(paths: BinaryPaths, request: BinaryPathRequest) -> str:
    if not paths.first_path:
        raise DeployBundleError(
            f"`{request.binary_name}` (OpenSSH's client) is needed to deploy, and not on PATH "
            f"(searched: `[gpu-bundle-deploy].executable_search_paths`, "
            f"{', '.join(request.search_path) or 'nothing'})."
        )
    return paths.first_path.path


def abspath_in_build_root(build_root: BuildRoot, path: str) -> str:
    return os.path.abspath(os.path.join(build_root.path, os.path.expanduser(path)))


def deploy_tool_argv(
    field_set: DeployBundleDeployFieldSet,
    options: GpuBundleDeploy,
    *,
    bundle_dir: str,
    destination: str,
    ssh: str,
    sftp: str,
    build_root: BuildRoot,
) -> list[str]:
    """`scripts/deploy_tool.py`'s arguments: the target's fields, else `[gpu-bundle-deploy]`."""
    identity = field_set.identity_file.value or options.identity_file
    return [
        *("--bundle", bundle_dir, "--destination", destination),
        *("--port", str(field_set.ssh_port.value or options.port)),
        *("--remote-python", options.remote_python, "--limit-kbps", str(options.limit_kbps)),
        *("--ssh", ssh, "--sftp", sftp),
        *(["--identity", abspath_in_build_root(build_root, identity)] if identity else []),
        *(arg for option in options.ssh_options for arg in ("--ssh-option", option)),
    ]


@rule(desc="Deploy a device bundle")
async def deploy_device_bundle(
    field_set: DeployBundleDeployFieldSet,
    options: GpuBundleDeploy,
    search: GpuBundleDeploy.EnvironmentAware,
    build_root: BuildRoot,
) -> DeployProcess:
    wrapped = await Get(
        WrappedTarget, WrappedTargetRequest(field_set.address, description_of_origin="<deploy>")
    )
    package_field_set = DeployBundleFieldSet.create(wrapped.target)
    # The bundle's own fields first (as `package` checks them), then where it goes.
    await Get(ValidatedDeployBundle, DeployBundleValidationRequest(package_field_set))
    destination = field_set.destination.value or options.destination
    if not destination:
        raise DeployBundleError(
            f"The deploy_bundle {field_set.address} has no `destination` and "
            f"`[gpu-bundle-deploy].destination` is unset: give `user@host:/absolute/path`."
        )
    ssh_request, sftp_request = (
        openssh_request(name, search.executable_search_path) for name in ("ssh", "sftp")
    )
    package, tool, ssh, sftp, env = await MultiGet(
        Get(BuiltPackage, PackageFieldSet, package_field_set),
        Get(DeployTool),
        Get(BinaryPaths, BinaryPathRequest, ssh_request),
        Get(BinaryPaths, BinaryPathRequest, sftp_request),
        Get(EnvironmentVars, EnvironmentVarsRequest(options.env_vars)),
    )
    argv = deploy_tool_argv(
        field_set,
        options,
        bundle_dir=package_field_set.output_dir,
        destination=destination,
        ssh=binary_path(ssh, ssh_request),
        sftp=binary_path(sftp, sftp_request),
        build_root=build_root,
    )
    process = await Get(
        Process,
        VenvPexProcess(
            tool.pex,
            argv=argv,
            input_digest=package.digest,
            extra_env=dict(env),
            description=f"Deploy {field_set.address} to {destination}",
            cache_scope=ProcessCacheScope.PER_SESSION,
        ),
    )
    return DeployProcess(
        name=str(field_set.address),
        process=InteractiveProcess.from_process(process),
        description=destination,
    )


def rules():
    return [
        *collect_rules(),
        *validation.rules(),
        UnionRule(DeployFieldSet, DeployBundleDeployFieldSet),
    ]
