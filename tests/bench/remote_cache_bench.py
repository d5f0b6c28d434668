"""Remote cache benchmark: cold build, remote-hit build on an empty local store, no-op build.

    python3 tests/bench/remote_cache_bench.py [--runs 3] [--spec src/python/imaging/kernels::]

Each run starts its own BuildGrid (.ci/buildgrid/buildgrid.sh, empty action cache and CAS) on
127.0.0.1 and times `./pants --no-pantsd package <spec>` with .ci/remote-cache.toml in two
clones of this checkout (at different paths):

  cold        clone A, empty local store, empty server: everything runs, results are uploaded
  remote hit  clone B, empty local store: everything comes from the server
  no-op       clone B again, same local store: everything is a local hit
  no-op pantsd  the same with pantsd, second of two runs (the daemon already warm)

Pants' named caches (~/.cache/pants/named_caches: downloaded wheels, pex venvs) are shared, as on a
CI runner that keeps them, so "cold" means no cached *process results*, not an empty disk.
Prints one table: median wall time over --runs (min-max beside it), and for the last run the
processes by where their result came from and the `Compile ...` processes that ran.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(REPO, "pants-plugins"), os.path.join(REPO, "tests", "remote_cache")]

import remote_cache_harness as harness  # noqa: E402
from gpu_build_testutil.pants_harness import PantsRun, clone_checkout  # noqa: E402

SCENARIOS = ("cold", "remote hit", "no-op", "no-op pantsd")


def kill_pantsd(repo: str) -> None:
    """Stops the pantsd this benchmark started in repo (pid from its .pids/ dir)."""
    pids_dir = os.path.join(repo, ".pids")
    for dirpath, _, filenames in os.walk(pids_dir):
        if os.path.basename(dirpath) == "pantsd" and "pid" in filenames:
            with open(os.path.join(dirpath, "pid")) as f:
                pid = int(f.read().strip() or 0)
            if pid:
                try:
                    os.kill(pid, 15)
                except ProcessLookupError:
                    continue
                for _ in range(100):
                    try:
                        os.kill(pid, 0)
                    except ProcessLookupError:
                        break
                    time.sleep(0.1)


def one_run(scratch: str, repo_a: str, repo_b: str, spec: str, i: int) -> dict[str, PantsRun]:
    runs: dict[str, PantsRun] = {}
    with harness.buildgrid(REPO, state_dir=os.path.join(scratch, f"buildgrid-{i}")) as server:

        def package(repo: str, store: str, **kwargs) -> PantsRun:
            return harness.run_pants(
                repo,
                ["package", spec],
                local_store=os.path.join(scratch, store),
                remote_address=server.address,
                **kwargs,
            ).check()

        runs["cold"] = package(repo_a, f"store-a-{i}")
        runs["remote hit"] = package(repo_b, f"store-b-{i}")
        runs["no-op"] = package(repo_b, f"store-b-{i}")
        try:
            package(repo_b, f"store-b-{i}", pantsd=True)
            runs["no-op pantsd"] = package(repo_b, f"store-b-{i}", pantsd=True)
        finally:
            kill_pantsd(repo_b)
    for store in (f"store-a-{i}", f"store-b-{i}"):
        shutil.rmtree(os.path.join(scratch, store), ignore_errors=True)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spec", default=harness.KERNELS_SPEC)
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="remote-cache-bench-")
    try:
        repo_a = clone_checkout(REPO, os.path.join(scratch, "checkout-a"))
        repo_b = clone_checkout(REPO, os.path.join(scratch, "elsewhere", "checkout-b"))
        all_runs: list[dict[str, PantsRun]] = []
        for i in range(args.runs):
            runs = one_run(scratch, repo_a, repo_b, args.spec, i)
            all_runs.append(runs)
            print(
                f"run {i + 1}/{args.runs}: "
                + ", ".join(f"{k} {r.wall_s:.1f} s" for k, r in runs.items()),
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    last = all_runs[-1]
    print(
        f"\n`./pants package {args.spec}` with .ci/remote-cache.toml and BuildGrid 0.9.1 on 127.0.0.1; "
        f"n={args.runs}, {os.cpu_count()} CPUs\n"
    )
    header = f"| {'build':<13} | {'median s':>8} | {'min-max s':>11} | {'processes (last run)':<36} | {'compiles run':>12} | {'remote hits':>11} |"
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for name in SCENARIOS:
        walls = [r[name].wall_s for r in all_runs]
        run = last[name]
        by_source: dict[str, int] = {}
        for p in run.processes:
            by_source[p.source] = by_source.get(p.source, 0) + 1
        sources = ", ".join(f"{k} {v}" for k, v in sorted(by_source.items())) or "none"
        print(
            f"| {name:<13} | {statistics.median(walls):8.1f} | {min(walls):5.1f}-{max(walls):<5.1f} | "
            f"{sources:<36} | {len(run.compile_processes('Ran')):>12} | "
            f"{run.counters.get('remote_cache_requests_cached', 0):>11} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
