"""Remote execution at scale: N generated numba-cuda kernels built locally and on buildbox-casd.

    python3 tests/bench/remote_execution_bench.py [--kernels 200] [--capabilities sm_87,sm_90]

In one clone of the repository it writes `src/python/bench_kernels/` (one distinct numba kernel
and one `gpu_kernel` target per file), then builds `package src/python/bench_kernels::`:

- cold local: an empty local store, no remote anything;
- cold remote, 1 job and 2 jobs: an empty local store and an empty executor each
  (.ci/remote-execution.toml; the toolchain PEX is built on the executor each time);
- warm: the 2-job executor again from another empty local store (its ActionCache hits).

and prints one table: wall time, the compile phase (first compile started to last one done, from
Pants' log), compile processes run, and the per-action cost (compile phase x jobs / actions).
The per-action overhead of remote execution (upload, queue, sandbox, download) is the remote
per-action cost at 1 job minus the median local compile process. From those figures, the wall
time with W workers of c jobs each is modelled (docs/remote-cache-and-ci.md):

    T(W, c) = T_fixed + ceil(A / (W * c)) * (t_compile + t_overhead)

with A actions and T_fixed the build's time outside the compile phase. Several minutes per 100
kernels on 2 cores. Needs user namespaces (bubblewrap).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(REPO, "pants-plugins"), os.path.join(REPO, "tests", "remote_execution")]

import remote_execution_harness as harness  # noqa: E402
from gpu_build_testutil.pants_harness import (  # noqa: E402
    PantsRun,
    clone_checkout,
    log_events,
    log_spans,
)

SPEC = "src/python/bench_kernels::"

KERNEL = '''"""Generated kernel {i} of the remote execution benchmark."""

from numba import cuda


@cuda.jit
def scale_{i}(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] * {factor} + {i}.0


AOT_SIGNATURES = {{"scale_{i}": ["void(float32[::1], float32[::1])"]}}
'''


def write_kernels(repo: str, count: int, capabilities: list[str]) -> None:
    root = os.path.join(repo, "src", "python", "bench_kernels")
    os.makedirs(root)
    build = [f"CAPABILITIES = {capabilities!r}\n"]
    for i in range(count):
        with open(os.path.join(root, f"k{i:03d}.py"), "w") as f:
            f.write(KERNEL.format(i=i, factor=f"{1 + i / 1000:.3f}"))
        build.append(f'gpu_kernel(name="k{i:03d}", source="k{i:03d}.py", capabilities=CAPABILITIES)\n')
    with open(os.path.join(root, "BUILD"), "w") as f:
        f.write("\n".join(build))


def compile_phase_s(run: PantsRun) -> float:
    """Seconds from the first compile's `Starting:` to the last compile's `Completed:`."""
    stamps = [stamp for stamp, _, what in log_events(run.stderr) if what.startswith("Compile ")]
    return (max(stamps) - min(stamps)).total_seconds() if stamps else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=200)
    parser.add_argument("--capabilities", default="sm_87,sm_90")
    args = parser.parse_args()
    reason = harness.sandbox_unavailable(harness.install(REPO))
    if reason:
        sys.exit(f"bubblewrap cannot make a sandbox here: {reason}")
    scratch = tempfile.mkdtemp(prefix="remote-execution-bench-")
    rows = []
    try:
        repo = clone_checkout(REPO, os.path.join(scratch, "checkout"))
        write_kernels(repo, args.kernels, args.capabilities.split(","))

        def package(name: str, address: str | None) -> PantsRun:
            shutil.rmtree(os.path.join(repo, "dist"), ignore_errors=True)
            store = os.path.join(scratch, f"store-{name.replace(' ', '-')}")
            run = harness.run_pants(repo, ["package", SPEC], local_store=store, address=address)
            print(f"[{name}] {run.summary()}", file=sys.stderr)
            return run.check()

        local = package("cold local", None)
        local_jobs = os.cpu_count() or 1  # Pants' default process_execution_local_parallelism
        rows.append(("cold local", local_jobs, local))
        for jobs in (1, 2):
            state = os.path.join(scratch, f"executor-{jobs}")
            with harness.executor(REPO, state_dir=state, jobs=jobs) as server:
                rows.append((f"cold remote, {jobs} job(s)", jobs, package(f"remote {jobs}", server.address)))
                if jobs == 2:
                    rows.append(("warm remote", jobs, package("warm", server.address)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    compile_spans = [s for d, s in log_spans(local.stderr) if d.startswith("Compile ")]
    t_compile = statistics.median(compile_spans)
    print(f"\n{args.kernels} kernels x {args.capabilities}; median local compile process {t_compile:.2f} s\n")
    print("| build | wall s | compile phase s | compiles run | per action s |")
    print("|---|---|---|---|---|")
    per_action = {}
    for name, jobs, run in rows:
        ran = len(run.logged_compiles())
        phase = compile_phase_s(run)
        per_action[name] = phase * jobs / ran if ran else 0.0
        print(f"| {name} | {run.wall_s:.1f} | {phase:.1f} | {ran} | {per_action[name]:.2f} |")
    remote1 = next(r for n, _, r in rows if n.startswith("cold remote, 1"))
    t_action = per_action["cold remote, 1 job(s)"]
    actions = len(remote1.logged_compiles())
    t_fixed = remote1.wall_s - t_action * actions
    print(f"\nremote per-action overhead: {t_action - t_compile:.2f} s over a {t_compile:.2f} s compile")
    print(f"model: T(W, c) = {t_fixed:.1f} + ceil({actions} / (W * c)) * {t_action:.2f} s")
    for workers in (1, 2, 4, 8, 16):
        estimate = t_fixed + math.ceil(actions / (workers * 2)) * t_action
        print(f"  {workers:2d} workers x 2 jobs: {estimate:.0f} s")


if __name__ == "__main__":
    main()
