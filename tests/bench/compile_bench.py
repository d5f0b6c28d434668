"""Compile benchmark: every example kernel x 4 capabilities, through Pants and in process.

    python3 tests/bench/compile_bench.py [--runs 3]

Prints one table: per (kernel, capability) the median wall time of its compile process in a cold
`./pants package` (fresh local store, so nothing is cached; the toolchain PEX build is reported
apart), the median in-process compile time with imports already paid, their difference (the
per-process overhead: interpreter + imports + sandbox), and the PTX / cubin sizes. Medians over
--runs cold builds; every figure of a row comes from the same runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "pants-plugins"))

from gpu_build import pants_harness as harness  # noqa: E402
from gpu_build.compile_description import parse_compile_description  # noqa: E402

KERNEL_DIR = "src/python/imaging/kernels"
# The toolchain PEX's description, as gpu_build/toolchain.py writes it.
TOOLCHAIN_BUILD = "Build the GPU kernel toolchain "


def cold_build(repo: str, store: str) -> tuple[float, dict[str, float], float]:
    """One `package` from an empty local store: total wall, per-compile walls, toolchain build."""
    run = harness.run_pants(repo, ["package", f"{KERNEL_DIR}::"], local_store=store)
    if run.returncode != 0:
        sys.exit(f"./pants package failed:\n{run.stderr[-4000:]}")
    walls: dict[str, float] = {}
    toolchain = 0.0
    for description, seconds in harness.log_spans(run.stderr):
        compile = parse_compile_description(description)
        if compile is not None:
            walls[f"{os.path.basename(compile.source)} {compile.capability}"] = seconds
        elif description.startswith(TOOLCHAIN_BUILD):
            toolchain = seconds
    return run.wall_s, walls, toolchain


def in_process(repo: str, work: str) -> dict:
    """compile_inprocess.py's JSON: the numba import time and each compile's median."""
    inproc_json = os.path.join(work, "inprocess.json")
    args = ["run", "tests/bench/compile_inprocess.py", "--", "--repo", repo, "--json", inproc_json]
    harness.run_pants(repo, args, local_store=None).check()
    with open(inproc_json) as f:
        return json.load(f)


def output_sizes(repo: str, key: str) -> tuple[int, int]:
    """The PTX and cubin bytes of one (kernel, capability) in dist/."""
    name, cap = key.split()
    out = os.path.join(repo, "dist", KERNEL_DIR.replace("/", "."), os.path.splitext(name)[0], cap)
    files = [os.path.join(out, f) for f in os.listdir(out)]
    ptx = sum(os.path.getsize(f) for f in files if f.endswith(".ptx"))
    cubin = sum(os.path.getsize(f) for f in files if f.endswith(".cubin"))
    return ptx, cubin


def print_table(
    runs: int,
    totals: list[float],
    toolchains: list[float],
    walls: dict[str, list[float]],
    inproc: dict,
    repo: str,
) -> None:
    print(
        f"cold `./pants package {KERNEL_DIR}::` from an empty local store, median of {runs}: "
        f"{statistics.median(totals):.1f} s (toolchain PEX build "
        f"{statistics.median(toolchains):.1f} s); "
        f"numba import in process: {inproc['import_s']:.2f} s"
    )
    print()
    print(
        "| kernel | cap | Pants process s | in-process s | overhead s | PTX bytes | cubin bytes |"
    )
    print("|---|---|---|---|---|---|---|")
    for key in sorted(walls):
        name, cap = key.split()
        ptx, cubin = output_sizes(repo, key)
        process = statistics.median(walls[key])
        inside = inproc["compiles"][key]["median_s"]
        print(
            f"| {name} | {cap} | {process:.2f} | {inside:.3f} | {process - inside:.2f} "
            f"| {ptx} | {cubin} |"
        )
    all_proc = [statistics.median(v) for v in walls.values()]
    all_in = [inproc["compiles"][k]["median_s"] for k in walls]
    overhead = statistics.median(p - q for p, q in zip(all_proc, all_in))
    print(
        f"| all {len(walls)} | | sum {sum(all_proc):.1f} | sum {sum(all_in):.2f} "
        f"| median {overhead:.2f} | | |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="compile-bench-")
    try:
        repo = harness.copy_checkout(REPO, os.path.join(work, "repo"))
        totals, toolchains, walls = [], [], {}
        for i in range(args.runs):
            total, run_walls, toolchain = cold_build(repo, os.path.join(work, f"store{i}"))
            shutil.rmtree(os.path.join(work, f"store{i}"), ignore_errors=True)
            totals.append(total)
            toolchains.append(toolchain)
            for key, seconds in run_walls.items():
                walls.setdefault(key, []).append(seconds)
        print_table(args.runs, totals, toolchains, walls, in_process(repo, work), repo)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
