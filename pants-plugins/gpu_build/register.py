"""The gpu_build backend for Pants 2.17: `gpu_kernel` (kernels compiled ahead of time),
`deploy_bundle` (an app PEX plus its precompiled kernels for one device), `device_fleet` (bundles
rolled out to many devices through Ansible) and `gpu_toolchain` (a compile toolchain as one PEX,
for JIT mode)."""

from __future__ import annotations

from gpu_build.dependency_inference import rules as dependency_inference
from gpu_build.goals import (
    deploy,
    deploy_fleet,
    gpu_resources,
    package_bundle,
    package_kernel,
    package_toolchain,
    run_bundle,
)
from gpu_build.scripts import process_tool
from gpu_build.target_types import (
    DeployBundleTarget,
    DeviceFleetTarget,
    GpuKernelTarget,
    GpuToolchainTarget,
)
from gpu_build.util_rules import (
    bundle_archive,
    bundle_cache,
    bundle_kernels,
    bundle_outputs,
    bundle_pex,
    bundle_signing,
    compile_kernel,
    jit_index,
    toolchain,
)


def target_types():
    return [GpuKernelTarget, DeployBundleTarget, DeviceFleetTarget, GpuToolchainTarget]


def kernel_rules():
    """The `gpu_kernel` half: toolchains, compiles, dependency inference, JIT mode's index.
    Tests of that half install these alone: the bundle half needs Pants' pex_binary rules."""
    return [
        *toolchain.rules(),
        *compile_kernel.rules(),
        *dependency_inference.rules(),
        *package_kernel.rules(),
        *jit_index.rules(),
    ]


def bundle_rules():
    """The `deploy_bundle` half: the app PEX, kernels, cache/, signature, archive, run, deploy
    (one device, or a `device_fleet`);
    and `gpu_toolchain`'s package, which shares the app PEX's strip step."""
    return [
        *bundle_kernels.rules(),
        *bundle_outputs.rules(),
        *bundle_pex.rules(),
        *bundle_signing.rules(),
        *bundle_cache.rules(),
        *bundle_archive.rules(),
        *process_tool.rules(),
        *package_bundle.rules(),
        *run_bundle.rules(),
        *deploy.rules(),
        *deploy_fleet.rules(),
        *package_toolchain.rules(),
    ]


def rules():
    return [*kernel_rules(), *gpu_resources.rules(), *bundle_rules()]
