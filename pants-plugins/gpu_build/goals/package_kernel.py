"""`pants package` on a `gpu_kernel`: its PTX, cubins and metadata under `dist/`, per capability."""

from __future__ import annotations

from dataclasses import dataclass

from pants.core.goals.package import BuiltPackage, BuiltPackageArtifact, PackageFieldSet
from pants.engine.fs import AddPrefix, Digest, MergeDigests
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.unions import UnionRule
from pants.util.logging import LogLevel

from gpu_build.target_types import GpuKernelOutputPathField
from gpu_build.util_rules.compile_kernel import CompiledKernels, CompileKernelRequest
from gpu_build.util_rules.kernel_field_set import GpuKernelFieldSet


@dataclass(frozen=True)
class GpuKernelPackageFieldSet(GpuKernelFieldSet, PackageFieldSet):
    output_path: GpuKernelOutputPathField


@rule(level=LogLevel.DEBUG)
async def package_gpu_kernel(field_set: GpuKernelPackageFieldSet) -> BuiltPackage:
    # Every capability of the target (one process for them all, see compile_kernel.py).
    compiled = await Get(CompiledKernels, CompileKernelRequest(field_set))
    output_dir = field_set.output_path.value_or_default(file_ending=None)
    prefixed = await MultiGet(
        Get(Digest, AddPrefix(kernel.digest, f"{output_dir}/{kernel.capability}"))
        for kernel in compiled
    )
    digest = await Get(Digest, MergeDigests(prefixed))
    # One artifact for the whole directory: `package` clears it first, so a capability dropped
    # from the target leaves no stale files behind.
    return BuiltPackage(
        digest,
        (
            BuiltPackageArtifact(
                output_dir,
                extra_log_lines=tuple(f"  {kernel.capability}" for kernel in compiled),
            ),
        ),
    )


def rules():
    return [*collect_rules(), UnionRule(PackageFieldSet, GpuKernelPackageFieldSet)]
