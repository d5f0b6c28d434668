"""The gpu_build backend for Pants 2.17: `gpu_kernel` (kernels compiled ahead of time) and
`deploy_bundle` (an app PEX plus its precompiled kernels for one device)."""

from __future__ import annotations

from gpu_build import (
    bundle_archive,
    bundle_cache,
    bundle_kernels,
    bundle_pex,
    bundle_signing,
    compile_kernel,
    dependency_inference,
    deploy_bundle,
    deploy_remote,
    jit_index,
    package_kernel,
    run_bundle,
    toolchain,
)
from gpu_build.target_types import DeployBundleTarget, GpuKernelTarget


def target_types():
    return [GpuKernelTarget, DeployBundleTarget]


def rules():
    return [
        *toolchain.rules(),
        *compile_kernel.rules(),
        *dependency_inference.rules(),
        *package_kernel.rules(),
        *bundle_kernels.rules(),
        *bundle_pex.rules(),
        *bundle_signing.rules(),
        *bundle_cache.rules(),
        *bundle_archive.rules(),
        *deploy_bundle.rules(),
        *jit_index.rules(),
        *run_bundle.rules(),
        *deploy_remote.rules(),
    ]
