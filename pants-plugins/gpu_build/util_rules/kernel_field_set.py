"""What a `gpu_kernel` target says about its compiles: the field set, capabilities and options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from pants.engine.target import FieldSet

from gpu_build.subsystems.budgets import GpuResourceBudgets
from gpu_build.subsystems.toolchains import GpuToolchains
from gpu_build.target_types import (
    GpuKernelBudgetBlockSizeField,
    GpuKernelBudgetLocalBytesField,
    GpuKernelBudgetMinOccupancyField,
    GpuKernelBudgetRegistersField,
    GpuKernelBudgetSharedBytesField,
    GpuKernelBudgetSpillBytesField,
    GpuKernelCapabilitiesField,
    GpuKernelDefinesField,
    GpuKernelDependenciesField,
    GpuKernelFastMathField,
    GpuKernelIncludeDirsField,
    GpuKernelLineInfoField,
    GpuKernelMaxRegistersField,
    GpuKernelNameExpressionsField,
    GpuKernelPtxVersionField,
    GpuKernelSourceField,
    GpuKernelToolchainField,
)
from gpu_spec.compile.options import CompileOptions
from gpu_spec.resources.budget import ResourceBudget


@dataclass(frozen=True)
class GpuKernelFieldSet(FieldSet):
    required_fields = (GpuKernelSourceField,)

    source: GpuKernelSourceField
    capabilities: GpuKernelCapabilitiesField
    ptx_version: GpuKernelPtxVersionField
    toolchain: GpuKernelToolchainField
    fast_math: GpuKernelFastMathField
    lineinfo: GpuKernelLineInfoField
    max_registers: GpuKernelMaxRegistersField
    defines: GpuKernelDefinesField
    include_dirs: GpuKernelIncludeDirsField
    name_expressions: GpuKernelNameExpressionsField
    dependencies: GpuKernelDependenciesField
    budget_registers: GpuKernelBudgetRegistersField
    budget_spill_bytes: GpuKernelBudgetSpillBytesField
    budget_shared_bytes: GpuKernelBudgetSharedBytesField
    budget_local_bytes: GpuKernelBudgetLocalBytesField
    budget_min_occupancy: GpuKernelBudgetMinOccupancyField
    budget_block_size: GpuKernelBudgetBlockSizeField


def kernel_capabilities(field_set: GpuKernelFieldSet, subsystem: GpuToolchains) -> tuple[str, ...]:
    """The target's capabilities, or `[gpu-toolchains].default_capabilities` (checked there)."""
    if field_set.capabilities.value is not None:
        return field_set.capabilities.value
    return subsystem.checked_default_capabilities()


def uncovered_capabilities(
    field_set: GpuKernelFieldSet, subsystem: GpuToolchains, wanted: Iterable[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(what the kernel is compiled for, which of `wanted` it is not): the one coverage rule of
    a bundle's capabilities and of a compile asked for some."""
    offered = kernel_capabilities(field_set, subsystem)
    return offered, tuple(c for c in wanted if c not in offered)


def compile_options(field_set: GpuKernelFieldSet, source_root: str) -> CompileOptions:
    """The target's compile options, the one value its compiles and JIT mode's index take;
    `source_root` is where a numba source's imports resolve."""
    return CompileOptions(
        fast_math=field_set.fast_math.value,
        lineinfo=field_set.lineinfo.value,
        max_registers=field_set.max_registers.value,
        ptx_version=field_set.ptx_version.value,
        defines=tuple(field_set.defines.value or ()),
        include_dirs=field_set.include_dirs.resolved(field_set.address.spec_path),
        name_expressions=tuple(field_set.name_expressions.value or ()),
        sys_path=(source_root,),
    )


def resource_budget(field_set: GpuKernelFieldSet, defaults: GpuResourceBudgets) -> ResourceBudget:
    """The target's `budget_*` fields over `[gpu-resource-budgets]`: the one budget its
    compiles are held to and its report is marked by."""
    own = ResourceBudget(
        registers=field_set.budget_registers.value,
        spill_bytes=field_set.budget_spill_bytes.value,
        shared_bytes=field_set.budget_shared_bytes.value,
        local_bytes=field_set.budget_local_bytes.value,
        min_occupancy=field_set.budget_min_occupancy.value,
        block_size=field_set.budget_block_size.value,
    )
    return own.over(defaults.budget())
