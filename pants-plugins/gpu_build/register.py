"""The gpu_build backend: `gpu_kernel` (ahead-of-time compiled GPU kernels) for Pants 2.17."""

from __future__ import annotations

from gpu_build import compile_kernel, package_kernel, toolchain
from gpu_build.target_types import GpuKernelTarget


def target_types():
    return [GpuKernelTarget]


def rules():
    return [
        *toolchain.rules(),
        *compile_kernel.rules(),
        *package_kernel.rules(),
    ]
