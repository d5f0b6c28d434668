from __future__ import annotations

import json

import pytest

from gpu_spec.conftest import library_specs, write_bundle
from gpu_spec.resources.budget import ResourceBudget
from gpu_spec.resources.report import baseline_rows, growth, report_json, report_row, table

RESOURCES = {"registers": 32, "shared_bytes": 1024, "local_bytes": 0, "spill_stores": 0}


NO_BUDGET = ResourceBudget()


def row(resources: dict, budget: ResourceBudget = NO_BUDGET) -> dict:
    return report_row("src/k:k", "src/k/k.cu", "cuda13", "sm_90", "k", resources, budget)


def test_a_row_carries_figures_and_budget_marks() -> None:
    r = row(RESOURCES, ResourceBudget(registers=16))
    assert r["registers"] == 32 and r["over_budget"][0].startswith("kernel k on sm_90: registers")
    assert "OVER BUDGET" in table([r]) and "src/k:k k" in table([r])
    assert row({})["over_budget"] == [] and "no resources recorded" in table([row({})])


def test_growth_names_each_figure_that_grew_and_fell() -> None:
    before = row(RESOURCES)
    after = row(dict(RESOURCES, registers=40, local_bytes=16))
    baseline = baseline_rows(json.loads(report_json([before])), "old.json")
    # 40 registers a thread fill the register file with fewer warps: occupancy falls too.
    assert growth([after], baseline) == [
        "src/k:k k on sm_90 (cuda13): registers 32 -> 40",
        "src/k:k k on sm_90 (cuda13): local_bytes 0 -> 16",
        f"src/k:k k on sm_90 (cuda13): occupancy 100% -> 75% at {before['block_size']} threads "
        "per block (registers)",
    ]
    assert growth([before], baseline) == []
    assert growth([dict(after, kernel="new")], baseline) == []  # a new kernel is not growth


def test_a_manifest_is_a_baseline_too(tmp_path) -> None:
    cache = write_bundle(str(tmp_path), library_specs())
    with open(f"{cache}/manifest.json") as f:
        rows = baseline_rows(json.load(f), "cache/manifest.json")
    assert rows and all(key[3].startswith("sm_") for key in rows)


def test_anything_else_is_refused_as_a_baseline() -> None:
    with pytest.raises(ValueError, match="neither a `pants gpu-resources` report"):
        baseline_rows({"hello": 1}, "x.json")
