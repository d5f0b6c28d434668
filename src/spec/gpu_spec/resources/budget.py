"""A kernel's resource budget and the one check of a compile's figures against it.

Why here: the plugin's compile fails a kernel over budget, its `gpu-resources` report marks the
same kernels and diffs them against a baseline; both take their figures and their verdict from
these functions, so a report and a build never disagree on what is over.

The figures of one kernel on one capability (`figures`) come from the compiler's `resources`
(registers per thread, spill store and load bytes, static shared bytes, local bytes per thread,
user constant bytes) plus the theoretical occupancy (`gpu_spec.resources.occupancy`) at the
budget's block size, or at the best block size where it names none. `spill_bytes` is stores
plus loads: any spill at all is what a budget of 0 refuses.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Dict, List, Mapping, Optional

from gpu_spec.resources import occupancy as occupancy_calculator

# The budget's limits, in the order reports print them, and what each figure is read from.
LIMITS = ("registers", "spill_bytes", "shared_bytes", "local_bytes")
# How a figure over budget is fixed, per figure.
FIXES = {
    "registers": "cap them with `max_registers` (spills may follow), keep less state live "
    "across the kernel, or raise the budget",
    "spill_bytes": "raise or drop `max_registers`, keep less state live, or raise the budget",
    "shared_bytes": "use smaller shared arrays (or dynamic shared memory sized at launch), or "
    "raise the budget",
    "local_bytes": "avoid large per-thread arrays and dynamic indexing into local arrays, or "
    "raise the budget",
    "occupancy": "use fewer registers or less shared memory per block (see the limiter), "
    "another block size, or lower the budget",
}


@dataclass(frozen=True)
class ResourceBudget:
    """What each kernel of a target may use on each capability; None: no limit."""

    registers: Optional[int] = None
    spill_bytes: Optional[int] = None
    shared_bytes: Optional[int] = None
    local_bytes: Optional[int] = None
    min_occupancy: Optional[float] = None  # 0..1, at `block_size`
    block_size: Optional[int] = None  # threads per block for `min_occupancy`; None: the best

    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self) if f.name != "block_size")

    def over(self, defaults: "ResourceBudget") -> "ResourceBudget":
        """This budget, with `defaults` where it sets nothing (a target's fields over the repo's
        options)."""
        unset = {
            f.name: getattr(defaults, f.name) for f in fields(self) if getattr(self, f.name) is None
        }
        return replace(self, **unset)

    def problems(self) -> List[str]:
        """What is wrong with the budget itself (negative figures, an occupancy outside 0-1)."""
        out = [f"{name} is {getattr(self, name)}, below 0" for name in LIMITS if _neg(self, name)]
        if self.min_occupancy is not None and not 0 <= self.min_occupancy <= 1:
            out.append(f"min_occupancy is {self.min_occupancy}: a share of the SM, 0 to 1")
        if self.block_size is not None and self.block_size <= 0:
            out.append(f"block_size is {self.block_size}: threads per block, above 0")
        return out


def _neg(budget: ResourceBudget, name: str) -> bool:
    value = getattr(budget, name)
    return value is not None and value < 0


def figures(
    capability: str, resources: Mapping[str, Any], block_size: Optional[int] = None
) -> Dict[str, Any]:
    """One kernel's figures on one capability: the compiler's resources, `spill_bytes`, and
    the occupancy (`block_size`, or the best block size) with what limits it."""
    registers = int(resources.get("registers", 0))
    shared = int(resources.get("shared_bytes", 0))
    bound = int(resources.get("launch_bound_threads", 0) or 0)
    if block_size:
        occ = occupancy_calculator.occupancy(
            capability, registers=registers, shared_bytes=shared, block_size=block_size
        )
    else:
        occ = occupancy_calculator.best_block_size(
            capability, registers=registers, shared_bytes=shared, launch_bound_threads=bound
        )
    return {
        "registers": registers,
        "spill_bytes": int(resources.get("spill_stores", 0)) + int(resources.get("spill_loads", 0)),
        "shared_bytes": shared,
        "local_bytes": int(resources.get("local_bytes", 0)),
        "const_bytes": int(resources.get("const_bytes", 0)),
        "block_size": occ.block_size,
        "occupancy": round(occ.occupancy, 4),
        "limiter": occ.limiter,
        "max_threads_per_block": occupancy_calculator.max_threads_per_block(
            capability, registers=registers, launch_bound_threads=bound
        ),
    }


@dataclass(frozen=True)
class BudgetViolation:
    kernel: str
    capability: str
    figure: str  # one of LIMITS, or "occupancy"
    value: Any
    budget: Any
    detail: str = ""

    def describe(self) -> str:
        if self.figure == "occupancy":
            return (
                f"kernel {self.kernel} on {self.capability}: occupancy {self.value:.0%} at "
                f"{self.detail} < budget {self.budget:.0%} (fix: {FIXES['occupancy']})"
            )
        return (
            f"kernel {self.kernel} on {self.capability}: {self.figure} {self.value} > budget "
            f"{self.budget} (fix: {FIXES[self.figure]})"
        )


def budget_violations(
    budget: ResourceBudget, kernel: str, capability: str, resources: Mapping[str, Any]
) -> List[BudgetViolation]:
    """Each figure of `kernel` on `capability` over `budget`, in LIMITS order, then occupancy."""
    if budget.is_empty() or not resources:
        return []
    got = figures(capability, resources, budget.block_size)
    out = [
        BudgetViolation(kernel, capability, name, got[name], getattr(budget, name))
        for name in LIMITS
        if getattr(budget, name) is not None and got[name] > getattr(budget, name)
    ]
    if budget.min_occupancy is not None and got["occupancy"] < budget.min_occupancy:
        where = f"{got['block_size']} threads per block, limited by {got['limiter']}"
        out.append(
            BudgetViolation(
                kernel, capability, "occupancy", got["occupancy"], budget.min_occupancy, where
            )
        )
    return out
