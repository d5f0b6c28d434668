"""A compile's per-kernel resources, read from its `metadata.json`: KernelResourcesRequest ->
KernelResources; and the budget check every compile of a `gpu_kernel` goes through.

The figures are the compiler's (`gpu_compiler.resources`, from nvJitLink's info log, per kernel
and capability); what is over a budget is `gpu_spec.resources.budget`'s verdict, the same one
`pants gpu-resources` marks its report with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

from pants.engine.addresses import Address
from pants.engine.collection import Collection
from pants.engine.fs import Digest, DigestContents, DigestSubset, PathGlobs
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.util.frozendict import FrozenDict

from gpu_spec.metadata import METADATA_FILE
from gpu_spec.resources.budget import ResourceBudget, budget_violations


class GpuKernelBudgetError(Exception):
    """A kernel's cubin is over its resource budget, or the budget itself is malformed."""


@dataclass(frozen=True)
class KernelResourceRow:
    """One kernel of one compile (source, capability, toolchain) and its resources."""

    address: Address
    source: str
    toolchain: str
    capability: str
    kernel: str  # the kernel's name in the manifest (`cache.kernel("<library>.<kernel>")`)
    signature: str  # one kernel may be compiled for several signatures (numba), one entry each
    resources: FrozenDict[str, Any]


class KernelResources(Collection[KernelResourceRow]):
    """Every kernel of the compiles asked for, in their order, each module's kernels in turn."""


@dataclass(frozen=True)
class CompiledForResources:
    """What the rows are read from: (address, source, toolchain, capability, digest) each."""

    address: Address
    source: str
    toolchain: str
    capability: str
    digest: Digest


@dataclass(frozen=True)
class KernelResourcesRequest:
    compiles: tuple[CompiledForResources, ...]


def rows_of(compiled: CompiledForResources, metadata: bytes) -> list[KernelResourceRow]:
    """The kernels of one `metadata.json`; a kernel without `resources` (a compiler before
    they were recorded) has an empty mapping."""
    data = json.loads(metadata)
    return [
        KernelResourceRow(
            address=compiled.address,
            source=compiled.source,
            toolchain=compiled.toolchain,
            capability=compiled.capability,
            kernel=kernel["name"],
            signature=kernel.get("signature") or "",
            resources=FrozenDict(kernel.get("resources") or {}),
        )
        for module in data.get("modules", ())
        for kernel in module.get("kernels", ())
    ]


@rule
async def kernel_resources(request: KernelResourcesRequest) -> KernelResources:
    contents = await MultiGet(
        Get(DigestContents, DigestSubset(c.digest, PathGlobs([METADATA_FILE])))
        for c in request.compiles
    )
    return KernelResources(
        row
        for compiled, files in zip(request.compiles, contents)
        for file in files
        for row in rows_of(compiled, file.content)
    )


def check_resource_budget(
    address: Address, budget: ResourceBudget, rows: Iterable[KernelResourceRow]
) -> None:
    """Raises one error naming every kernel and capability over `budget` (one line each)."""
    problems = budget.problems()
    if problems:
        raise GpuKernelBudgetError(
            f"The resource budget of the gpu_kernel {address} (its `budget_*` fields over "
            f"`[gpu-resource-budgets]`) is malformed: {'; '.join(problems)}."
        )
    lines = [
        f"{row.source} (target {address}): {violation.describe()}"
        for row in rows
        for violation in budget_violations(budget, row.kernel, row.capability, row.resources)
    ]
    if lines:
        raise GpuKernelBudgetError(
            f"The gpu_kernel {address} is over its resource budget "
            f"(`budget_*` fields, `[gpu-resource-budgets]`):\n" + "\n".join(lines)
        )


def rules():
    return collect_rules()
