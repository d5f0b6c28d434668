"""`[gpu-resource-budgets]`: the repo's default resource budget of every `gpu_kernel`.

A target's `budget_*` fields win over these; a figure set in neither is not limited.
"""

from __future__ import annotations

from pants.option.option_types import FloatOption, IntOption
from pants.option.subsystem import Subsystem
from pants.util.strutil import softwrap

from gpu_spec.resources.budget import ResourceBudget


class GpuResourceBudgets(Subsystem):
    options_scope = "gpu-resource-budgets"
    help = softwrap(
        """
        Default resource budgets of `gpu_kernel` targets (each target's `budget_*` fields win).
        A kernel whose cubin exceeds one, on any capability it is compiled for, fails its
        compile with one line naming the target, kernel, capability, figure, budget and fix.
        Unset: no limit.
        """
    )

    registers = IntOption(default=None, help="Registers per thread, at most.")
    spill_bytes = IntOption(
        default=None, help="Register spill store plus load bytes per thread, at most (0: none)."
    )
    shared_bytes = IntOption(default=None, help="Static shared memory per block, at most.")
    local_bytes = IntOption(default=None, help="Local memory (stack frame) per thread, at most.")
    min_occupancy = FloatOption(
        default=None,
        help="Theoretical occupancy (0 to 1) at `block_size` (or the best block size), at least.",
    )
    block_size = IntOption(
        default=None,
        help=softwrap(
            """
            Threads per block at which `min_occupancy` is checked and `pants gpu-resources`
            reports occupancy; unset: the block size with the best occupancy.
            """
        ),
    )

    def budget(self) -> ResourceBudget:
        return ResourceBudget(
            registers=self.registers,
            spill_bytes=self.spill_bytes,
            shared_bytes=self.shared_bytes,
            local_bytes=self.local_bytes,
            min_occupancy=self.min_occupancy,
            block_size=self.block_size,
        )
