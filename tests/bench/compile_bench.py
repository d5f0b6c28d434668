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
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNEL_DIR = "src/python/imaging/kernels"
LINE = re.compile(
    r"^(\d\d:\d\d:\d\d\.\d\d) \[INFO\] (Starting|Completed): (Compile (\S+) for (sm_\d+) \(\w+\)|Build the GPU kernel toolchain \w+)"
)


def copy_repo(dest: str) -> None:
    files = (
        subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, files):
        src = os.path.join(REPO, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))


def cold_build(repo: str, store: str) -> tuple[float, dict[str, float], float]:
    """One `package` from an empty local store: total wall, per-compile walls, toolchain build."""
    start = time.perf_counter()
    proc = subprocess.run(
        ["./pants", "--no-pantsd", f"--local-store-dir={store}", "package", f"{KERNEL_DIR}::"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    total = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"./pants package failed:\n{proc.stderr[-4000:]}")
    started: dict[str, datetime] = {}
    walls: dict[str, float] = {}
    toolchain = 0.0
    for line in proc.stderr.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        stamp = datetime.strptime(m.group(1), "%H:%M:%S.%f")
        what = m.group(3)
        if m.group(2) == "Starting":
            started[what] = stamp
        elif what in started:
            seconds = (stamp - started[what]).total_seconds()
            if m.group(4):
                walls[f"{os.path.basename(m.group(4))} {m.group(5)}"] = seconds
            else:
                toolchain = seconds
    return total, walls, toolchain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="compile-bench-")
    try:
        repo = os.path.join(work, "repo")
        copy_repo(repo)
        totals, toolchains, walls = [], [], {}
        for i in range(args.runs):
            total, run_walls, toolchain = cold_build(repo, os.path.join(work, f"store{i}"))
            shutil.rmtree(os.path.join(work, f"store{i}"), ignore_errors=True)
            totals.append(total)
            toolchains.append(toolchain)
            for key, seconds in run_walls.items():
                walls.setdefault(key, []).append(seconds)
        inproc_json = os.path.join(work, "inprocess.json")
        subprocess.run(
            [
                "./pants",
                "--no-pantsd",
                "run",
                "tests/bench/compile_inprocess.py",
                "--",
                "--repo",
                repo,
                "--json",
                inproc_json,
            ],
            cwd=repo,
            check=True,
            capture_output=True,
        )
        with open(inproc_json) as f:
            inproc = json.load(f)
        dist = os.path.join(repo, "dist", KERNEL_DIR.replace("/", "."))
        print(
            f"cold `./pants package {KERNEL_DIR}::` from an empty local store, median of {args.runs}: "
            f"{statistics.median(totals):.1f} s (toolchain PEX build {statistics.median(toolchains):.1f} s); "
            f"numba import in process: {inproc['import_s']:.2f} s"
        )
        print()
        print(
            "| kernel | cap | Pants process s | in-process s | overhead s | PTX bytes | cubin bytes |"
        )
        print("|---|---|---|---|---|---|---|")
        for key in sorted(walls):
            name, cap = key.split()
            target = os.path.splitext(name)[0]
            out = os.path.join(dist, target, cap)
            ptx = sum(
                os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".ptx")
            )
            cubin = sum(
                os.path.getsize(os.path.join(out, f))
                for f in os.listdir(out)
                if f.endswith(".cubin")
            )
            process = statistics.median(walls[key])
            inside = inproc["compiles"][key]["median_s"]
            print(
                f"| {name} | {cap} | {process:.2f} | {inside:.3f} | {process - inside:.2f} | {ptx} | {cubin} |"
            )
        all_proc = [statistics.median(v) for v in walls.values()]
        all_in = [inproc["compiles"][k]["median_s"] for k in walls]
        print(
            f"| all {len(walls)} | | sum {sum(all_proc):.1f} | sum {sum(all_in):.2f} | median {statistics.median(p - q for p, q in zip(all_proc, all_in)):.2f} | | |"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
