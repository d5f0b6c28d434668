"""Compile benchmark: the example kernels x 4 capabilities through Pants, in both process layouts.

    python3 tests/bench/compile_bench.py [--runs 3]

Compares, in one run, the two layouts of `[gpu-toolchains].batch_capabilities`: `batched` (the
default: one process per kernel source for all its capabilities) and `per-capability` (one
process per (source, capability)). For each layout, medians over --runs of:
- cold: `./pants --no-pantsd package src/python/imaging/kernels::` from an empty local store (the
  toolchain PEX is rebuilt from Pants' named caches and reported apart), the compile processes it
  runs, the (source, capability) pairs they compile and the sum of their walls;
- rebuild: with pantsd warm and the toolchain PEX cached, the same `package` after a comment was
  appended to every kernel source, so that every kernel's compiles run again;
against, measured in the same run by tests/bench/compile_inprocess.py in the cuda13 toolchain:
- fresh: one fresh process that imports numba and compiles and links saxpy.py for sm_90
  (`python -m gpu_compiler compile`), the yardstick of the goal "rebuilding all example kernels
  after an edit to each costs at most 3x one fresh process";
- in process: every (kernel, capability) compile with the imports already paid (their sum is the
  floor under any layout).
The layouts alternate within each run, so both see the same machine state. A second table gives
per kernel its process walls in each layout (from the cold builds), its in-process sum and sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "pants-plugins"))

from gpu_build_testutil import pants_harness as harness  # noqa: E402
from gpu_build.util_rules.compile_description import parse_compile_description  # noqa: E402

KERNEL_DIR = "src/python/imaging/kernels"
KERNEL_SOURCES = ("saxpy.py", "blur.py", "histogram.py", "sobel.cu", "matmul.cu")
# `[gpu-toolchains].batch_capabilities` of each layout.
LAYOUTS = {"batched": "true", "per-capability": "false"}
# The toolchain PEX's description, as gpu_build/util_rules/toolchain.py writes it.
TOOLCHAIN_BUILD = "Build the GPU kernel toolchain "


@dataclass(frozen=True)
class Build:
    """One `./pants package` of the kernels, read back from its log."""

    wall_s: float
    processes: int  # compile processes that ran
    pairs: int  # (source, capability) pairs they compiled
    process_s: dict[str, float]  # by kernel source file name: the walls of its processes, summed
    toolchain_s: float  # the toolchain PEX build (0 when cached)


def package(repo: str, store: str, layout: str, *, pantsd: bool) -> Build:
    flag = f"--gpu-toolchains-batch-capabilities={LAYOUTS[layout]}"
    args = [flag, "package", f"{KERNEL_DIR}::"]
    run = harness.run_pants(repo, args, local_store=store, pantsd=pantsd)
    if run.returncode != 0:
        sys.exit(f"./pants {' '.join(args)} failed:\n{run.stderr[-4000:]}")
    process_s: dict[str, float] = {}
    toolchain = 0.0
    for description, seconds in harness.log_spans(run.stderr):
        compile = parse_compile_description(description)
        if compile is not None:
            name = os.path.basename(compile.source)
            process_s[name] = process_s.get(name, 0.0) + seconds
        elif description.startswith(TOOLCHAIN_BUILD):
            toolchain += seconds
    ran = run.logged_compiles()
    return Build(run.wall_s, len(ran), len(run.logged_pairs()), process_s, toolchain)


def edit_every_kernel(repo: str, tag: str) -> None:
    """Append a comment to each kernel source: new bytes, the same code."""
    for name in KERNEL_SOURCES:
        comment = "#" if name.endswith(".py") else "//"
        with open(os.path.join(repo, KERNEL_DIR, name), "a") as f:
            f.write(f"{comment} compile_bench edit {tag}\n")


def stop_pantsd(repo: str) -> None:
    """Stop the pantsd the rebuilds started in the copy (its pid file names it)."""
    pid_file = os.path.join(repo, ".pids", "pantsd", "pid")
    if os.path.isfile(pid_file):
        with open(pid_file) as f:
            pid = f.read().strip()
        if pid.isdigit():
            try:
                os.kill(int(pid), signal.SIGTERM)
            except ProcessLookupError:
                pass


def in_process(repo: str, work: str) -> dict:
    """compile_inprocess.py's JSON: fresh-process walls, numba import, each compile's median."""
    inproc_json = os.path.join(work, "inprocess.json")
    args = ["run", "tests/bench/compile_inprocess.py", "--", "--repo", repo, "--json", inproc_json]
    harness.run_pants(repo, args, local_store=None).check()
    with open(inproc_json) as f:
        return json.load(f)


def output_sizes(repo: str, name: str) -> tuple[int, int]:
    """The PTX and cubin bytes of one kernel in dist/, all capabilities."""
    out = os.path.join(repo, "dist", KERNEL_DIR.replace("/", "."), os.path.splitext(name)[0])
    files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
    ptx = sum(os.path.getsize(f) for f in files if f.endswith(".ptx"))
    cubin = sum(os.path.getsize(f) for f in files if f.endswith(".cubin"))
    return ptx, cubin


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def print_layouts(cold: dict[str, list[Build]], rebuild: dict[str, list[Build]], inproc: dict):
    fresh = statistics.median(inproc["fresh_s"])
    inside = sum(c["median_s"] for c in inproc["compiles"].values())
    firsts = sum(c["first_s"] for c in inproc["compiles"].values())
    print(
        f"fresh process (numba import + compile + link saxpy.py sm_90, cuda13): median "
        f"{fresh:.2f} s of {len(inproc['fresh_s'])} ({min(inproc['fresh_s']):.2f}-"
        f"{max(inproc['fresh_s']):.2f}); numba import in process {inproc['import_s']:.2f} s; "
        f"in-process sum of the {len(inproc['compiles'])} compiles {inside:.2f} s warm, "
        f"{firsts:.2f} s first-in-process"
    )
    print()
    print(
        "| layout | cold wall s | toolchain PEX s | processes | pairs | sum of process walls s "
        "| rebuild after editing every kernel, pantsd warm, s | rebuild / fresh process |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for layout in LAYOUTS:
        c, r = cold[layout], rebuild[layout]
        rebuild_s = statistics.median(b.wall_s for b in r)
        print(
            f"| {layout} | {spread([b.wall_s for b in c])} "
            f"| {statistics.median(b.toolchain_s for b in c):.1f} "
            f"| {'/'.join(sorted({str(b.processes) for b in c + r}))} "
            f"| {'/'.join(sorted({str(b.pairs) for b in c + r}))} "
            f"| {statistics.median(sum(b.process_s.values()) for b in c):.1f} "
            f"| {spread([b.wall_s for b in r])} | {rebuild_s / fresh:.1f}x |"
        )


def print_kernels(cold: dict[str, list[Build]], inproc: dict, repo: str) -> None:
    print()
    print(
        "| kernel | batched: its process s | per-capability: its 4 processes, sum s "
        "| in process, 4 capabilities, s | PTX bytes | cubin bytes |"
    )
    print("|---|---|---|---|---|---|")
    for name in KERNEL_SOURCES:
        walls = {
            layout: statistics.median(b.process_s.get(name, 0.0) for b in cold[layout])
            for layout in LAYOUTS
        }
        inside = sum(v["median_s"] for k, v in inproc["compiles"].items() if k.split()[0] == name)
        ptx, cubin = output_sizes(repo, name)
        print(
            f"| {name} | {walls['batched']:.2f} | {walls['per-capability']:.2f} | {inside:.3f} "
            f"| {ptx} | {cubin} |"
        )


def measure(repo: str, work: str, runs: int) -> tuple[dict, dict]:
    """The cold builds, then the rebuilds, each layout in turn within a run."""
    cold: dict[str, list[Build]] = {layout: [] for layout in LAYOUTS}
    rebuild: dict[str, list[Build]] = {layout: [] for layout in LAYOUTS}
    for i in range(runs):
        for layout in LAYOUTS:
            store = os.path.join(work, f"store-{layout}-{i}")
            cold[layout].append(package(repo, store, layout, pantsd=False))
            shutil.rmtree(store, ignore_errors=True)
    warm = os.path.join(work, "store-warm")
    try:
        for layout in LAYOUTS:  # not counted: starts pantsd and caches the toolchain PEX
            package(repo, warm, layout, pantsd=True)
        for i in range(runs):
            for layout in LAYOUTS:
                edit_every_kernel(repo, f"{layout} {i}")
                rebuild[layout].append(package(repo, warm, layout, pantsd=True))
    finally:
        stop_pantsd(repo)
        for name in KERNEL_SOURCES:
            shutil.copy2(os.path.join(REPO, KERNEL_DIR, name), os.path.join(repo, KERNEL_DIR, name))
    return cold, rebuild


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="compile-bench-")
    try:
        repo = harness.copy_checkout(REPO, os.path.join(work, "repo"))
        cold, rebuild = measure(repo, work, args.runs)
        inproc = in_process(repo, work)
        print(f"`./pants package {KERNEL_DIR}::`, medians (min-max) of {args.runs} runs")
        print_layouts(cold, rebuild, inproc)
        print_kernels(cold, inproc, repo)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
