"""Fleet deploy benchmark: a kernel edit rolled out to 6 devices through Ansible (fleet_tool.py)
against 6 single-device deploys (deploy_tool.py) run one after another.

    ./pants run tests/bench/fleet_deploy_bench.py -- [--repeats 5]
    # or with any CPython 3.11/3.12 that has ansible-core (the `ansible` resolve) and pytest:
    PYTHONPATH=pants-plugins:src/spec /path/to/python-with-ansible \\
        tests/bench/fleet_deploy_bench.py [--repeats 5] [--python /path/to/python-with-ansible]

The devices are those of tests/fleet (gpu_build_testutil/fleet.py): six OpenSSH servers on
127.0.0.1 (Debian's sshd, fetched once into the bootstrap cache), two groups of 3 (`orin`,
`h200`) with two different synthetic bundles. Each way of deploying has its own 6 device
directories behind the same servers, all given the first release once before timing; then each
repeat makes a fresh kernel edit (one kernel's sm_90 files and the manifest of both bundles) and
deploys it every way, in a rotating order, so every way starts from the same state (every device
on the previous release) and sends the same files. The ways:

- `sequential`: deploy_tool.py once per device, one after another (what a loop around
  `pants experimental-deploy` of a `deploy_bundle` does);
- `fleet 100%`: fleet_tool.py, one batch of all 6, `--forks 6`;
- `fleet 1,50%,100%`: fleet_tool.py, the canary rollout (batches of 1, 3 and 2), `--forks 6`.

The fleet's walls include what the fleet does beyond the deploy: ansible-playbook's start, a
`ping` per device and the release's `verify` over ssh after each switch (no extra health
command). Prints per way the median wall and bytes sent over the repeats, and the median of the
per-repeat ratios fleet/sequential (each ratio from walls of the same repeat).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

from gpu_build_testutil.fleet import (
    Fleet,
    edit_kernel,
    hosts,
    start_servers,
    stop_servers,
    tool_env,
)
from gpu_build_testutil.local_sshd import LocalSshd

SEQUENTIAL = "sequential"
WAYS: Dict[str, List[str]] = {
    SEQUENTIAL: [],
    "fleet 100%": ["--rollout", "100%", "--forks", "6"],
    "fleet 1,50%,100%": [
        *("--rollout", "1", "--rollout", "50%", "--rollout", "100%"),
        *("--forks", "6"),
    ],
}


def run(argv: List[str], what: str) -> None:
    proc = subprocess.run(argv, env=tool_env(), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(
            f"{what} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )


def fleet_deploy(fleet: Fleet, extra: List[str]) -> Tuple[float, int, int]:
    """One fleet_tool.py run: its wall, bytes and files sent (all devices must switch)."""
    argv = fleet.deploy_argv(*extra, health_check="")
    start = time.monotonic()
    run(argv, "fleet_tool.py")
    wall = time.monotonic() - start
    devices = json.loads(fleet.summary_path().read_text())["devices"]
    if sorted(d["host"] for d in devices) != sorted(hosts()) or any(
        d["outcome"] != "switched" for d in devices
    ):
        sys.exit(f"not every device switched: {devices}")
    return (
        wall,
        sum(d["bytes_sent"] for d in devices),
        sum(d["files_sent"] for d in devices),
    )


def sequential_deploy(fleet: Fleet) -> Tuple[float, int, int]:
    """deploy_tool.py for each device, one after another: the wall of all, bytes and files."""
    reports = [fleet.root / f"report-{host}.json" for host in hosts()]
    start = time.monotonic()
    for host, report in zip(hosts(), reports):
        run(fleet.deploy_one_argv(host, report), f"deploy_tool.py to {host}")
    wall = time.monotonic() - start
    done = [json.loads(r.read_text()) for r in reports]
    if any(d.get("outcome") != "switched" for d in done):
        sys.exit(f"not every device switched: {done}")
    return wall, sum(d["bytes_sent"] for d in done), sum(d["files_sent"] for d in done)


def deploy(way: str, fleet: Fleet) -> Tuple[float, int, int]:
    return sequential_deploy(fleet) if way == SEQUENTIAL else fleet_deploy(fleet, WAYS[way])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5, help="kernel edits, each deployed every way")
    p.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fleet-bench-"))

    def workdir(name: str) -> Path:
        path = work / name
        path.mkdir()
        return path

    servers: Dict[str, LocalSshd] = start_servers(workdir)
    try:
        fleets = {way: Fleet(workdir(f"way-{i}"), servers) for i, way in enumerate(WAYS)}
        for way, fleet in fleets.items():  # the first release on every device, untimed
            deploy(way, fleet)
        walls: Dict[str, List[float]] = {way: [] for way in WAYS}
        sent: Dict[str, List[Tuple[int, int]]] = {way: [] for way in WAYS}
        ways = list(WAYS)
        for n in range(args.repeats):
            for fleet in fleets.values():
                for bundle in fleet.bundles.values():
                    edit_kernel(bundle, 1000 + n)
            order = ways[n % len(ways) :] + ways[: n % len(ways)]
            for way in order:
                wall, nbytes, files = deploy(way, fleets[way])
                walls[way].append(wall)
                sent[way].append((nbytes, files))
            print(
                f"repeat {n + 1}/{args.repeats}: "
                + ", ".join(f"{w} {walls[w][-1]:.2f} s" for w in order),
                file=sys.stderr,
                flush=True,
            )
    finally:
        stop_servers(servers)
        if not args.keep:
            subprocess.run(["rm", "-rf", str(work)])

    print(
        f"Kernel edit to 6 devices (2 groups of 3, sshd on 127.0.0.1), {args.repeats} repeats, "
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    head = ("way", "median s", "min s", "max s", "bytes", "files", "vs sequential")
    print("{:<18} {:>9} {:>7} {:>7} {:>8} {:>6} {:>14}".format(*head))
    for way in WAYS:
        ratios = [w / s for w, s in zip(walls[way], walls[SEQUENTIAL])]
        median_bytes = float(statistics.median([b for b, _ in sent[way]]))
        median_files = float(statistics.median([f for _, f in sent[way]]))
        ratio = "1.00" if way == SEQUENTIAL else f"{statistics.median(ratios):.2f}"
        print(
            f"{way:<18} {statistics.median(walls[way]):>9.2f} {min(walls[way]):>7.2f} "
            f"{max(walls[way]):>7.2f} {median_bytes:>8.0f} {median_files:>6.0f} {ratio:>14}"
        )
    print(
        "vs sequential: median over repeats of (this way's wall / sequential wall of the same "
        "repeat); bytes and files: sent to all 6 devices, median over repeats."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
