"""The seams probe suite's table: each probe is held, refused with a clear error, or a finding.

A probe tries one bad input or fault at a seam (sandbox, trust, reproducibility, deploy, JIT
cache, the runtime's inputs) and returns what happened, in one line:
- "held: <what stayed true>": the bad thing could not happen;
- "refused: <the one-line error the user saw>": it was refused with a clear error.
Anything else (a traceback, a wrong result, an error of many lines) is a finding, and fails the
test that ran it. Each `*_probes_test.py` runs its class's probes with `run_probes`, which prints
the table and records each row as a property of the test (conftest.py), so that the JUnit report
carries it: `.ci/run` prints every class's table from there (`.ci/test_summary.py`).
"""

from __future__ import annotations

import concurrent.futures
import traceback
from typing import Any, Callable, List, Sequence, Tuple

Probe = Callable[[], str]
Row = Tuple[str, str, str]
PROPERTY = "probe"  # the JUnit property of one row: "<probe> | <class> | <result>"
CURRENT_NODE: Any = None  # the running pytest item (conftest.py), None outside pytest


def held(what: str) -> str:
    return f"held: {what}"


def refused(error: object, expect: str) -> str:
    """A refusal, by the error's text: it must be one line (a multi-line error is a finding)
    and hold the phrase the probe expects (another one-line error, a broken toolchain's say,
    is a finding too). "" only where the probe checked the text itself before."""
    text = str(error).strip()
    if not text or "\n" in text or "Traceback" in text:
        return f"FINDING: unclear error: {text!r}"
    if expect and expect not in text:
        return f"FINDING: expected a refusal saying {expect!r}, got: {text}"
    return f"refused: {text}"


def _run_one(probe: Probe) -> str:
    try:
        return probe()
    except Exception:  # a probe that crashes is a finding, not a crash of the suite
        return "FINDING: crashed: " + traceback.format_exc(limit=3).strip().splitlines()[-1]


def run_probes(
    probe_class: str, probes: Sequence[Tuple[str, Probe]], workers: int = 1
) -> List[Row]:
    """Runs each probe (a crash in one is that probe's finding), prints the table, returns rows.

    workers > 1: that many probes at a time, in threads, started in the order given (put the
    longest first); only for probes that share nothing (each its own directories and processes).
    The rows are in the order given either way."""
    if workers > 1:
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_run_one, [probe for _, probe in probes]))
    else:
        results = [_run_one(probe) for _, probe in probes]
    rows: List[Row] = [(name, probe_class, result) for (name, _), result in zip(probes, results)]
    print_table(rows)
    if CURRENT_NODE is not None:
        CURRENT_NODE.user_properties.extend((PROPERTY, " | ".join(row)) for row in rows)
    return rows


def print_table(rows: Sequence[Row]) -> None:
    width = max([len(name) for name, _, _ in rows] + [5])
    print(f"\n{'probe'.ljust(width)} | class | result")
    for name, probe_class, result in rows:
        print(f"{name.ljust(width)} | {probe_class} | {result}")


def findings(rows: Sequence[Row]) -> List[Row]:
    """The rows that neither held nor were refused clearly."""
    return [r for r in rows if not r[2].startswith(("held: ", "refused: "))]
