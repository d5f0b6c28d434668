"""Device-loop benchmark: what an edit costs to build and to ship, as a user iterating on a device.

    python3 tests/bench/device_loop_bench.py [--runs 3] [--bundle imaging_h200]

In a copy of this checkout (its own pantsd, the machine's named caches), with a real OpenSSH
server on 127.0.0.1 as the device (pants-plugins/gpu_build_testutil/local_sshd.py), each run:

  first deploy   `pants experimental-deploy` of the bundle to an empty device directory
  kernel edit    saxpy.py's body changed (`a * x[i] + y[i]` -> `a * x[i] + y[i] * <nonce>.0`, code
                 never compiled before), then `pants package` of the bundle, timed, then a deploy
  app edit       a line added to the app's app.py, then `pants package`, timed, then a deploy

For each deploy: the files and bytes it sent (its own "Sent N files, B bytes" line; it sends
only files whose sha256 the device lacks). For each package: its wall time, and for the kernel
edit the compile process alone (the sandbox Pants kept with `--keep-sandboxes=always`, its
`__run.sh` run again and timed), so the difference is what Pants adds around the compile.
Prints one table of medians over --runs (min-max beside), against issue 22's goals: a saxpy
edit ships at most 100 KB, an app edit at most 1 MB.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "pants-plugins"), str(Path(__file__).parent)]

from gpu_build_testutil.local_sshd import LocalSshd  # noqa: E402
from gpu_build_testutil.pants_harness import base_env, copy_checkout, run_pants  # noqa: E402
from remote_cache_bench import kill_pantsd  # noqa: E402

APP = "src/python/imaging"
SENT = re.compile(r"Sent (\d+) files, (\d+) bytes")
KEPT = re.compile(r"Preserving local process execution dir (\S+) for \"?(\w+)")
# Every run keeps its sandboxes: `--keep-sandboxes` is a bootstrap option, and a run that changed
# it would restart pantsd (a minute of scheduler start on a loaded machine, measured as "package")
KEEP = "--keep-sandboxes=always"
GOALS = {"kernel edit": 100_000, "app edit": 1_000_000}


def deploy(repo: Path, sshd: LocalSshd, dest: Path, bundle: str) -> tuple[int, int]:
    options = [
        f"--gpu-bundle-deploy-destination={sshd.user}@127.0.0.1:{dest}",
        f"--gpu-bundle-deploy-port={sshd.port}",
        f"--gpu-bundle-deploy-identity-file={sshd.identity}",
        f"--gpu-bundle-deploy-ssh-options={sshd.ssh_options()!r}",
    ]
    run = run_pants(
        repo, [KEEP, "experimental-deploy", *options, f"{APP}:{bundle}"], local_store=None, pantsd=True
    ).check()
    remove_kept(run.stderr)
    found = SENT.search(run.stdout + run.stderr)
    assert found, (run.stdout + run.stderr)[-3000:]
    return int(found.group(1)), int(found.group(2))


def package(repo: Path, bundle: str) -> tuple[float, list[str]]:
    """Wall seconds of `pants package`, and the compile sandboxes it kept."""
    run = run_pants(
        repo,
        [KEEP, "package", f"{APP}:{bundle}"],
        local_store=None,
        pantsd=True,
    ).check()
    compiles = [path for path, what in KEPT.findall(run.stderr) if what == "Compile"]
    remove_kept(run.stderr, keep=compiles)
    return run.wall_s, compiles


def remove_kept(log: str, keep: Sequence[str] = ()) -> None:
    for path, _ in KEPT.findall(log):
        if path not in keep:
            shutil.rmtree(path, ignore_errors=True)


def compile_alone(sandboxes: list[str]) -> float:
    """Seconds of the kept compile sandboxes' `__run.sh`, run again one after another."""
    total = 0.0
    for sandbox in sandboxes:
        start = time.monotonic()
        subprocess.run(
            ["bash", "__run.sh"], cwd=sandbox, env=base_env(), check=True, capture_output=True
        )
        total += time.monotonic() - start
    return total


def one_run(repo: Path, sshd: LocalSshd, dest: Path, bundle: str, i: int) -> dict[str, float]:
    saxpy, app = repo / APP / "kernels" / "saxpy.py", repo / APP / "app.py"
    out: dict[str, float] = {}
    shutil.rmtree(dest, ignore_errors=True)
    out["first deploy files"], out["first deploy bytes"] = deploy(repo, sshd, dest, bundle)
    # a change of code, new in every run (an edit back to an earlier text would be a cache hit)
    body = re.compile(r"out\[i\] = a \* x\[i\] \+ y\[i\].*")
    nonce = time.time_ns() % 1_000_003  # unlike any earlier run's, even in Pants' shared cache
    saxpy.write_text(body.sub(f"out[i] = a * x[i] + y[i] * {nonce}.0", saxpy.read_text()))
    out["kernel edit package s"], kept = package(repo, bundle)
    out["kernel edit compile s"] = compile_alone(kept)
    for sandbox in kept:
        shutil.rmtree(sandbox, ignore_errors=True)
    out["kernel edit files"], out["kernel edit bytes"] = deploy(repo, sshd, dest, bundle)
    app.write_text(app.read_text() + f"\n# device_loop_bench edit {i} {time.time()}\n")
    out["app edit package s"], kept = package(repo, bundle)
    for sandbox in kept:
        shutil.rmtree(sandbox, ignore_errors=True)
    out["app edit files"], out["app edit bytes"] = deploy(repo, sshd, dest, bundle)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bundle", default="imaging_h200")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="device_loop_bench."))
    repo = scratch / "repo"
    copy_checkout(REPO, repo)
    (scratch / "sshd").mkdir()
    sshd = LocalSshd(scratch / "sshd").start()
    try:
        package(repo, args.bundle)  # warm: pantsd, toolchains, the first bundle
        runs = [one_run(repo, sshd, scratch / "device", args.bundle, i) for i in range(args.runs)]
    finally:
        sshd.stop()
        kill_pantsd(str(repo))
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nDevice loop, {args.bundle}, median of {args.runs} (min-max)")
    print(f"{'measure':<26} {'median':>12}  {'min-max':>23}  goal")
    for key in runs[0]:
        values = [r[key] for r in runs]
        fmt = "{:.2f}" if key.endswith(" s") else "{:.0f}"
        median = fmt.format(statistics.median(values))
        spread = f"{fmt.format(min(values))}-{fmt.format(max(values))}"
        edit = key.rsplit(" ", 1)[0]
        goal = GOALS.get(edit) if key.endswith("bytes") else None
        mark = "" if goal is None else f"<= {goal} {'met' if max(values) <= goal else 'MISSED'}"
        print(f"{key:<26} {median:>12}  {spread:>23}  {mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
