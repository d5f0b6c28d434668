"""A fleet deploy through Ansible to seven devices: six OpenSSH servers on 127.0.0.1, one gone.

The devices are temp directories behind real sshd processes (gpu_build_testutil/local_sshd.py),
in two inventory groups that run two different bundles (`orin`, `h200`; synthetic bundles of
`gpu_spec.conftest` with an `app` whose `verify` checks every file's sha256 against the
manifest, as the real launcher's does). `fleet_tool.py` runs ansible-playbook from this test's
resolve (`ansible`). Runs, each summary checked device by device:

1. a first rollout to all six;
2. a kernel edit rolled out in batches 1, 50%, 100%: only the changed files go;
3. the next edit, where one device of the second batch fails its health check: that device is
   back on `previous`, the batch fails, the third batch is not started (its devices still run
   the release of run 2), the deploy exits 1, and every device still holds a whole release;
4. `--check`: what would be sent, nothing changed;
5. one device unreachable (a port nothing listens on) and one device's disk full: both named,
   the others switched.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from gpu_build_testutil.local_sshd import LocalSshd, SshdUnavailable, free_port
from gpu_spec.conftest import library_specs, write_bundle

REPO = Path(__file__).resolve().parents[2]
FLEET_TOOL = REPO / "pants-plugins" / "gpu_build" / "scripts" / "fleet_tool.py"
GROUPS = {"orin": ["orin-1", "orin-2", "orin-3"], "h200": ["h200-1", "h200-2", "h200-3"]}
# The device's `python3` reports 10 free blocks (no root needed): its disk is full.
FAKE_STATVFS = """
import os
_real = os.statvfs
def _low(path):
    s = _real(path)
    return os.statvfs_result((s.f_bsize, s.f_frsize, s.f_blocks, 10, 10, 10, s.f_files,
                              s.f_ffree, s.f_favail, s.f_flag, s.f_namemax))
os.statvfs = _low
"""
# The bundle's `app`: `PEX_MODULE=gpu_runtime app verify .` checks every file the manifest lists,
# as the runtime's `verify` does.
APP = """#!{python}
import hashlib, json, os, sys
root = os.path.dirname(os.path.abspath(__file__))
manifest = json.load(open(os.path.join(root, "cache", "manifest.json")))
bad = [p for p, sha in manifest["files"].items()
       if hashlib.sha256(open(os.path.join(root, "cache", p), "rb").read()).hexdigest() != sha]
bad += [p for p, sha in manifest.get("bundle_files", {{}}).items() if p != "app"
        and hashlib.sha256(open(os.path.join(root, p), "rb").read()).hexdigest() != sha]
print("REFUSED " + " ".join(bad) if bad else "OK")
asked = sys.argv[1:] == ["verify", "."] and os.environ.get("PEX_MODULE") == "gpu_runtime"
sys.exit(1 if bad or not asked else 0)
"""


def make_bundle(root: Path, flavour: str) -> Path:
    cache = Path(write_bundle(str(root), library_specs()))
    pex = hashlib.sha256(flavour.encode()).digest() * 4096  # 128 KiB, one per bundle
    (root / "app.pex").write_bytes(pex)
    (root / "app").write_text(APP.format(python=sys.executable))
    (root / "app").chmod(0o755)
    manifest = json.loads((cache / "manifest.json").read_text())
    manifest["bundle_files"] = {
        name: hashlib.sha256((root / name).read_bytes()).hexdigest() for name in ("app", "app.pex")
    }
    (cache / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return root


def edit_kernel(root: Path, n: int) -> None:
    """A new build of one kernel (its sm_90 files' bytes), and so a new manifest."""
    manifest_path = root / "cache" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for rel in manifest["files"]:
        if rel.startswith("saxpy/") and "/sm_90/" in rel:
            path = root / "cache" / rel
            path.write_bytes(path.read_bytes() + f"// edit {n}\n".encode())
            manifest["files"][rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))


class Fleet:
    def __init__(self, root: Path, servers: Dict[str, LocalSshd]) -> None:
        self.root, self.servers = root, servers
        self.bundles = {g: make_bundle(root / f"bundle-{g}", g) for g in GROUPS}
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text("".join(s.known_hosts.read_text() for s in servers.values()))
        self.lowspace = root / "lowspace"
        self.lowspace.mkdir()
        (self.lowspace / "sitecustomize.py").write_text(FAKE_STATVFS)

    def base(self, host: str) -> Path:
        return self.root / "devices" / host / "app"

    def inventory(self, extra: str = "", disk_full: str = "") -> Path:
        lines = []
        for group, hosts in GROUPS.items():
            lines.append(f"[{group}]")
            for host in hosts:
                s = self.servers[host]
                python = sys.executable
                if host == disk_full:
                    python = f"env PYTHONPATH={self.lowspace} {sys.executable}"
                lines.append(
                    f"{host} ansible_host=127.0.0.1 ansible_port={s.port} ansible_user={s.user} "
                    f"ansible_ssh_private_key_file={s.identity} gpu_bundle_path={self.base(host)} "
                    f"ansible_python_interpreter={sys.executable} gpu_remote_python='{python}'"
                )
            if group == "h200" and extra:
                lines.append(extra)
        path = self.root / "inventory.ini"
        path.write_text("\n".join(lines) + "\n")
        return path

    def deploy(self, *extra: str, inventory: Path | None = None) -> tuple[int, dict, str]:
        summary = self.root / "summary.json"
        argv = [
            sys.executable,
            str(FLEET_TOOL),
            *("--inventory", str(inventory or self.inventory())),
            *(a for g, b in self.bundles.items() for a in ("--bundle", f"{g}={b}")),
            *("--ssh-option", f"UserKnownHostsFile={self.known_hosts}"),
            *("--ssh-option", "StrictHostKeyChecking=yes"),
            f"--deploy-arg=--ssh-option=UserKnownHostsFile={self.known_hosts}",
            *("--health-check", "test ! -e ../../UNHEALTHY"),
            *("--summary-json", str(summary)),
            *extra,
        ]
        # Absolute: Ansible runs the deploy tool from its own working directory.
        python_path = os.pathsep.join(os.path.abspath(p) for p in sys.path)
        env = dict(os.environ, PYTHONPATH=python_path)
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        print(proc.stdout, proc.stderr, sep="\n")
        return proc.returncode, json.loads(summary.read_text()), proc.stdout

    def current(self, host: str) -> str | None:
        link = self.base(host) / "current"
        return os.path.basename(os.readlink(link)) if link.is_symlink() else None

    def previous(self, host: str) -> str | None:
        link = self.base(host) / "previous"
        return os.path.basename(os.readlink(link)) if link.is_symlink() else None

    def runs_bundle(self, host: str) -> bool:
        """The device's current release is its group's bundle as it is now (same manifest)."""
        manifest = "cache/manifest.json"
        device = (self.base(host) / "current" / manifest).read_bytes()
        return device == (self.bundles[group_of(host)] / manifest).read_bytes()

    def check_whole(self, host: str) -> None:
        """The device's current release passes its own `verify`."""
        current = self.base(host) / "current"
        env = dict(os.environ, PEX_MODULE="gpu_runtime")
        verify = subprocess.run(["./app", "verify", "."], cwd=current, env=env, capture_output=True)
        assert verify.returncode == 0, (host, verify.stdout)


def group_of(host: str) -> str:
    return next(g for g, members in GROUPS.items() if host in members)


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
    servers: Dict[str, LocalSshd] = {}
    try:
        for host in (h for hosts in GROUPS.values() for h in hosts):
            servers[host] = LocalSshd(tmp_path_factory.mktemp(f"sshd-{host}")).start()
    except SshdUnavailable as e:
        pytest.skip(f"no OpenSSH server for the fleet test: {e}")
    try:
        yield Fleet(tmp_path_factory.mktemp("fleet"), servers)
    finally:
        for server in servers.values():
            server.stop()


def hosts() -> List[str]:
    return [h for group in GROUPS.values() for h in group]


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

    # 5. One device unreachable, one device's disk full; the others switch.
    dead = f"h200-gone ansible_host=127.0.0.1 ansible_port={free_port()} gpu_bundle_path=/none"
    full = order[5]
    inventory = fleet.inventory(extra=dead, disk_full=full)
    rc, summary, _ = fleet.deploy("--max-fail-percentage", "50", inventory=inventory)
    assert rc == 1
    last = by_host(summary)
    assert last["h200-gone"]["outcome"] == "unreachable", last["h200-gone"]
    assert last[full]["outcome"] == "failed" and "disk is full" in last[full]["detail"]
    assert fleet.current(full) == release_2[full]
    for host in order[:5]:
        assert last[host]["outcome"] in ("switched", "unchanged"), last[host]
        assert fleet.current(host) == last[host]["release"]
        assert fleet.runs_bundle(host)
        fleet.check_whole(host)
