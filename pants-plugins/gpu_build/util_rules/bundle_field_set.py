"""The `deploy_bundle` field set and error, shared by the bundle's rule modules."""

from __future__ import annotations

from dataclasses import dataclass

from pants.core.goals.package import PackageFieldSet

from gpu_build.target_types import (
    DeployBundleAppLayoutField,
    DeployBundleArchiveField,
    DeployBundleBinaryField,
    DeployBundleCapabilitiesField,
    DeployBundleCompletePlatformsField,
    DeployBundleDriverVersionField,
    DeployBundleInitCudaAtStartField,
    DeployBundleJitFallbackField,
    DeployBundleKernelsField,
    DeployBundleOutputPathField,
    DeployBundleToolchainField,
)


class DeployBundleError(Exception):
    """A bundle cannot be built as asked: the message names the bundle, the culprit and a fix."""


@dataclass(frozen=True)
class DeployBundleFieldSet(PackageFieldSet):
    required_fields = (DeployBundleBinaryField, DeployBundleDriverVersionField)

    binary: DeployBundleBinaryField
    kernels: DeployBundleKernelsField
    capabilities: DeployBundleCapabilitiesField
    toolchain: DeployBundleToolchainField
    driver_version: DeployBundleDriverVersionField
    complete_platforms: DeployBundleCompletePlatformsField
    archive: DeployBundleArchiveField
    init_cuda_at_start: DeployBundleInitCudaAtStartField
    app_layout: DeployBundleAppLayoutField
    jit_fallback: DeployBundleJitFallbackField
    output_path: DeployBundleOutputPathField

    @property
    def output_dir(self) -> str:
        """The bundle's directory under dist/ (and `<it>.tar.gz` for the archive)."""
        return self.output_path.value_or_default(file_ending=None)
