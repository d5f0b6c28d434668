from __future__ import annotations

import pytest

from gpu_spec.resources.budget import ResourceBudget, budget_violations, figures

LEAN = {"registers": 16, "shared_bytes": 0, "local_bytes": 0, "spill_stores": 0, "spill_loads": 0}
FAT = {
    "registers": 255,
    "shared_bytes": 40960,
    "local_bytes": 512,
    "spill_stores": 64,
    "spill_loads": 32,
    "const_bytes": 256,
}


def test_figures_add_spills_and_occupancy() -> None:
    got = figures("sm_90", FAT, block_size=128)
    assert got["spill_bytes"] == 96 and got["const_bytes"] == 256
    assert got["block_size"] == 128 and 0 <= got["occupancy"] <= 1
    assert figures("sm_90", LEAN)["occupancy"] == 1.0  # 16 registers, no shared: a full SM


@pytest.mark.parametrize(
    "budget, figure",
    [
        (ResourceBudget(registers=128), "registers"),
        (ResourceBudget(spill_bytes=0), "spill_bytes"),
        (ResourceBudget(shared_bytes=32768), "shared_bytes"),
        (ResourceBudget(local_bytes=256), "local_bytes"),
        (ResourceBudget(min_occupancy=0.5, block_size=1024), "occupancy"),
    ],
)
def test_each_figure_over_its_budget_is_named_with_a_fix(
    budget: ResourceBudget, figure: str
) -> None:
    (violation,) = budget_violations(budget, "fat", "sm_90", FAT)
    assert violation.figure == figure
    text = violation.describe()
    assert text.startswith("kernel fat on sm_90: ") and "budget" in text and "(fix: " in text
    assert budget_violations(budget, "lean", "sm_90", LEAN) == []


def test_no_budget_and_no_resources_fail_nothing() -> None:
    assert budget_violations(ResourceBudget(), "fat", "sm_90", FAT) == []
    assert budget_violations(ResourceBudget(registers=1), "old", "sm_90", {}) == []


def test_a_targets_fields_win_over_the_repos_defaults() -> None:
    merged = ResourceBudget(registers=64).over(ResourceBudget(registers=32, spill_bytes=0))
    assert merged == ResourceBudget(registers=64, spill_bytes=0)
    assert ResourceBudget(block_size=256).is_empty()


def test_a_malformed_budget_is_named() -> None:
    problems = ResourceBudget(registers=-1, min_occupancy=1.5, block_size=0).problems()
    assert problems == [
        "registers is -1, below 0",
        "min_occupancy is 1.5: a share of the SM, 0 to 1",
        "block_size is 0: threads per block, above 0",
    ]
