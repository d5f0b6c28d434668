"""The resource report of `pants gpu-resources`: one row per (kernel, capability, toolchain),
its table, its JSON, and what grew against a baseline (an earlier report, or a bundle manifest).

Why here: the figures and the budget verdict are `gpu_spec.resources.budget`'s; the report and
its diff are defined once beside them, so CI (`--baseline` with `--changed-since`) and a reader
of the JSON see the same keys the build checks.

Report JSON (schema 1)::

    {"schema": 1, "kernels": [{"target": "src/k:saxpy", "source": "src/k/saxpy.py",
      "toolchain": "cuda13", "capability": "sm_90", "kernel": "saxpy",
      "signature": "saxpy(float32[::1], float32, float32[::1], float32[::1])", "registers": 16,
      "spill_bytes": 0, "shared_bytes": 0, "local_bytes": 0, "const_bytes": 0,
      "block_size": 256, "occupancy": 1.0, "limiter": "warps", "max_threads_per_block": 1024,
      "over_budget": []}, ...]}
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from gpu_spec.manifest.parse import parse_manifest
from gpu_spec.resources.budget import ResourceBudget, budget_violations, figures

REPORT_SCHEMA = 1
# The figures a row shows, in table order; those that are worse when larger.
COLUMNS = ("registers", "spill_bytes", "shared_bytes", "local_bytes", "const_bytes")
Key = Tuple[str, str, str, str, str]  # (target, kernel, signature, capability, toolchain)


def report_row(
    target: str,
    source: str,
    toolchain: str,
    capability: str,
    kernel: str,
    resources: Mapping[str, Any],
    budget: ResourceBudget,
    signature: str = "",
) -> Dict[str, Any]:
    """One kernel's row (one compiled signature of it): its figures, at the budget's block
    size, and what is over budget."""
    row: Dict[str, Any] = dict(
        target=target,
        source=source,
        toolchain=toolchain,
        capability=capability,
        kernel=kernel,
        signature=signature,
    )
    if not resources:  # a compiler that recorded none
        return dict(row, over_budget=[])
    row.update(figures(capability, resources, budget.block_size))
    violations = budget_violations(budget, kernel, capability, resources)
    row["over_budget"] = [v.describe() for v in violations]
    return row


def report_json(rows: Iterable[Mapping[str, Any]]) -> str:
    return json.dumps({"schema": REPORT_SCHEMA, "kernels": list(rows)}, indent=1, sort_keys=True)


def key_of(row: Mapping[str, Any]) -> Key:
    return (
        row["target"],
        row["kernel"],
        row.get("signature", ""),
        row["capability"],
        row["toolchain"],
    )


def table(rows: Iterable[Mapping[str, Any]]) -> str:
    """The report as a text table, one line per row, over-budget rows marked."""
    head = ("kernel", "capability", "regs", "spills", "shared", "local", "const", "occupancy")
    lines = ["{:<44} {:<10} {:>5} {:>7} {:>7} {:>6} {:>6}  {}".format(*head)]
    for r in rows:
        name = f"{r['target']} {r['kernel']}"
        if "registers" not in r:
            lines.append(f"{name:<44} {r['capability']:<10} (no resources recorded)")
            continue
        occupancy = f"{r['occupancy']:.0%} at {r['block_size']} ({r['limiter']})"
        lines.append(
            f"{name:<44} {r['capability']:<10} {r['registers']:>5} {r['spill_bytes']:>7} "
            f"{r['shared_bytes']:>7} {r['local_bytes']:>6} {r['const_bytes']:>6}  {occupancy}"
            + ("  OVER BUDGET" if r["over_budget"] else "")
            + (f"  {r['signature']}" if r.get("signature") else "")
        )
    return "\n".join(lines)


def baseline_rows(data: Any, origin: str) -> Dict[Key, Dict[str, Any]]:
    """The rows of a baseline: a report of this module, or a bundle's `cache/manifest.json`
    (its kernels' resources, at the best block size). Anything else is refused by a
    ValueError naming `origin`."""
    if isinstance(data, dict) and data.get("schema") == REPORT_SCHEMA and "kernels" in data:
        return {key_of(r): dict(r) for r in data["kernels"] if isinstance(r, dict)}
    if isinstance(data, dict) and "libraries" in data:
        manifest = parse_manifest(data, origin)
        rows = {}
        for lib in manifest.libraries:
            for variant in lib.variants:
                for module in variant.modules:
                    for k in module.kernels:
                        row = report_row(
                            lib.target,
                            lib.source,
                            variant.toolchain,
                            variant.capability,
                            k.name,
                            k.resources,
                            ResourceBudget(),
                            k.signature or "",
                        )
                        rows[key_of(row)] = row
        return rows
    raise ValueError(
        f"{origin} is neither a `pants gpu-resources` report (schema {REPORT_SCHEMA}) nor a "
        "bundle's cache/manifest.json: give one of those as the baseline"
    )


def growth(
    rows: Iterable[Mapping[str, Any]], baseline: Mapping[Key, Mapping[str, Any]]
) -> List[str]:
    """One line per figure that grew (occupancy: fell) from the baseline's row of the same
    kernel, capability and toolchain; kernels the baseline lacks are new, not growth."""
    out = []
    for row in rows:
        old: Optional[Mapping[str, Any]] = baseline.get(key_of(row))
        if not old or "registers" not in row or "registers" not in old:
            continue
        where = f"{row['target']} {row['kernel']} on {row['capability']} ({row['toolchain']})"
        for name in COLUMNS:
            if row.get(name, 0) > old.get(name, 0):
                out.append(f"{where}: {name} {old.get(name, 0)} -> {row[name]}")
        if row["block_size"] == old.get("block_size") and row["occupancy"] < old["occupancy"]:
            out.append(
                f"{where}: occupancy {old['occupancy']:.0%} -> {row['occupancy']:.0%} at "
                f"{row['block_size']} threads per block ({row['limiter']})"
            )
    return out
