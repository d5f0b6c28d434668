"""A fleet deploy through Ansible to seven devices: six OpenSSH servers on 127.0.0.1, one gone.

The devices are temp directories behind real sshd processes (gpu_build_testutil/local_sshd.py),
in two inventory groups that run two different bundles (`orin`, `h200`; synthetic bundles of
`gpu_spec.conftest` with an `app` whose `verify` checks every file's sha256 against the
manifest, as the real launcher's does): the fixture code is gpu_build_testutil/fleet.py, which
tests/bench/fleet_deploy_bench.py shares. `fleet_tool.py` runs ansible-playbook from this test's
resolve (`ansible`). Runs, each summary checked device by device:

1. a first rollout to all six;
2. a kernel edit rolled out in batches 1, 50%, 100%: only the changed files go;
3. the next edit, where one device of the second batch fails its health check: that device is
   back on `previous`, the batch fails, the third batch is not started (its devices still run
   the release of run 2), the deploy exits 1, and every device still holds a whole release;
4. `--check`: what would be sent, nothing changed; with `--limit`, only the devices it names;
5. one device unreachable (a port nothing listens on) and one device's disk full: both named,
   the others switched.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Dict, Iterator

import pytest

from gpu_build_testutil.fleet import (
    Fleet,
    edit_kernel,
    group_of,
    hosts,
    start_servers,
    stop_servers,
)
from gpu_build_testutil.local_sshd import SshdUnavailable, free_port


def changed_bytes(bundle: Path, fleet: Fleet, host: str) -> int:
    """The size of the bundle's files whose content `previous` on the device does not hold."""

    def digests(root: Path) -> Dict[str, int]:
        return {
            hashlib.sha256(p.read_bytes()).hexdigest(): p.stat().st_size
            for p in root.rglob("*")
            if p.is_file()
        }

    old = digests(fleet.base(host) / "previous")
    return sum(size for sha, size in digests(bundle).items() if sha not in old)


def by_host(summary: dict) -> Dict[str, dict]:
    return {d["host"]: d for d in summary["devices"]}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    try:
        servers = start_servers(tmp_path_factory.mktemp)
    except SshdUnavailable as e:
        pytest.skip(f"no OpenSSH server for the fleet test: {e}")
    try:
        yield Fleet(tmp_path_factory.mktemp("fleet"), servers)
    finally:
        stop_servers(servers)


def test_fleet_rollouts(fleet: Fleet) -> None:
    # 1. First rollout: every device gets its group's bundle, every file sent.
    rc, summary, _ = fleet.deploy("--rollout", "100%")
    assert rc == 0
    first = by_host(summary)
    assert set(first) == set(hosts())
    for host, d in first.items():
        assert d["outcome"] == "switched", d
        assert d["release"] == fleet.current(host)
        assert d["files_sent"] > 3 and d["health_s"] is not None
        fleet.check_whole(host)
    release_1 = {h: fleet.current(h) for h in hosts()}
    assert release_1["orin-1"] != release_1["h200-1"]  # two bundles

    # 2. A kernel edit in batches 1, 50%, 100%: the changed files only.
    for bundle in fleet.bundles.values():
        edit_kernel(bundle, 2)
    rc, summary, out = fleet.deploy("--rollout", "1", "--rollout", "50%", "--rollout", "100%")
    assert rc == 0
    assert out.count("PLAY [Roll out GPU bundles]") == 3  # three batches
    second = by_host(summary)
    for host, d in second.items():
        assert d["outcome"] == "switched", d
        assert fleet.current(host) == d["release"] != release_1[host]
        assert fleet.previous(host) == release_1[host]
        assert 1 <= d["files_sent"] <= 4, d  # the edited kernel's files and the manifest
        assert d["bytes_sent"] == changed_bytes(fleet.bundles[group_of(host)], fleet, host)
    release_2 = {h: fleet.current(h) for h in hosts()}

    # 3. One device of the second batch fails its health check.
    for bundle in fleet.bundles.values():
        edit_kernel(bundle, 3)
    order = hosts()  # the play's hosts in inventory order: orin-*, then h200-*
    failing = order[2]  # batches of 6: [1], [2, 3, 4] (50%), [5, 6]
    (fleet.base(failing) / "UNHEALTHY").write_text("")
    rc, summary, _ = fleet.deploy("--rollout", "1", "--rollout", "50%", "--rollout", "100%")
    (fleet.base(failing) / "UNHEALTHY").unlink()
    assert rc == 1
    third = by_host(summary)
    for host in order[:4]:
        if host == failing:
            assert third[host]["outcome"] == "rolled back", third[host]
            assert fleet.current(host) == release_2[host] == third[host]["release"]
            assert "health" in third[host]["detail"]
        else:
            assert third[host]["outcome"] == "switched", third[host]
            assert fleet.current(host) == third[host]["release"] != release_2[host]
            assert fleet.runs_bundle(host)
    for host in order[4:]:
        assert third[host]["outcome"] == "skipped", third[host]
        assert fleet.current(host) == release_2[host]
    for host in order:
        fleet.check_whole(host)

    # 4. --check: the rest would switch; nothing sent, nothing switched.
    before = {h: (fleet.current(h), fleet.previous(h)) for h in hosts()}
    rc, summary, _ = fleet.deploy("--check")
    assert rc == 0
    checked = by_host(summary)
    assert {checked[h]["outcome"] for h in order[4:] + [failing]} == {"would switch"}
    assert {checked[h]["outcome"] for h in order[:4] if h != failing} == {"unchanged"}
    assert before == {h: (fleet.current(h), fleet.previous(h)) for h in hosts()}
    # --limit picks devices by Ansible's host patterns: the others are not in the summary.
    rc, summary, _ = fleet.deploy("--check", "--limit", f"{failing}:{order[5]}")
    assert rc == 0 and sorted(by_host(summary)) == sorted([failing, order[5]]), summary
    assert before == {h: (fleet.current(h), fleet.previous(h)) for h in hosts()}

    # 5. One device unreachable, one device's disk full; the others switch.
    dead = f"h200-gone ansible_host=127.0.0.1 ansible_port={free_port()} gpu_bundle_path=/none"
    full = order[5]
    inventory = fleet.inventory(extra=dead, disk_full=full)
    rc, summary, _ = fleet.deploy("--max-fail-percentage", "50", inventory=inventory)
    assert rc == 1
    last = by_host(summary)
    assert last["h200-gone"]["outcome"] == "unreachable", last["h200-gone"]
    assert last[full]["outcome"] == "failed" and "disk is full" in last[full]["detail"]
    assert last[full]["release"] == release_2[full]  # the release it kept, named as it runs
    assert fleet.current(full) == release_2[full]
    for host in order[:5]:
        assert last[host]["outcome"] in ("switched", "unchanged"), last[host]
        assert fleet.current(host) == last[host]["release"]
        assert fleet.runs_bundle(host)
        fleet.check_whole(host)
