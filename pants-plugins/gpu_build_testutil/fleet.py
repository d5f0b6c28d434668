"""A fleet of devices for the fleet deploy's test and bench: OpenSSH servers on 127.0.0.1.

Each device is a temp directory behind a real sshd (`local_sshd.py`), in two inventory groups
that run two different bundles (`orin`, `h200`; synthetic bundles of `gpu_spec.conftest` with an
`app` whose `verify` checks every file's sha256 against the manifest, as the real launcher's
does). `Fleet.deploy` runs `scripts/fleet_tool.py` (ansible-playbook with this interpreter: it
needs ansible-core); `Fleet.deploy_one_argv` is the single-device deploy (`deploy_tool.py`) of one
device, with the arguments the fleet's play gives it. Used by tests/fleet and tests/bench
(`fleet_deploy_bench.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List

from gpu_build_testutil.local_sshd import LocalSshd, disk_full_site
from gpu_spec.conftest import library_specs, write_bundle

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "pants-plugins" / "gpu_build" / "scripts"
FLEET_TOOL = SCRIPTS / "fleet_tool.py"
DEPLOY_TOOL = SCRIPTS / "deploy_tool.py"
GROUPS = {"orin": ["orin-1", "orin-2", "orin-3"], "h200": ["h200-1", "h200-2", "h200-3"]}
# The fleet's own health check in the test: a device with ../../UNHEALTHY fails it.
HEALTH_CHECK = "test ! -e ../../UNHEALTHY"
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


def hosts() -> List[str]:
    """Every device, in inventory order: orin-*, then h200-*."""
    return [h for group in GROUPS.values() for h in group]


def group_of(host: str) -> str:
    return next(g for g, members in GROUPS.items() if host in members)


def start_servers(workdir: Callable[[str], Path]) -> Dict[str, LocalSshd]:
    """One sshd per device, each in `workdir(name)`; raises `SshdUnavailable` where there is no
    sshd (the ones started by then are stopped)."""
    servers: Dict[str, LocalSshd] = {}
    try:
        for host in hosts():
            servers[host] = LocalSshd(workdir(f"sshd-{host}")).start()
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def stop_servers(servers: Dict[str, LocalSshd]) -> None:
    for server in servers.values():
        server.stop()


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


def tool_env() -> Dict[str, str]:
    """The environment the tools run in: this interpreter's sys.path, absolute (Ansible runs
    the deploy tool from its own working directory)."""
    python_path = os.pathsep.join(os.path.abspath(p) for p in sys.path)
    return dict(os.environ, PYTHONPATH=python_path)


class Fleet:
    def __init__(self, root: Path, servers: Dict[str, LocalSshd]) -> None:
        self.root, self.servers = root, servers
        self.bundles = {g: make_bundle(root / f"bundle-{g}", g) for g in GROUPS}
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text("".join(s.known_hosts.read_text() for s in servers.values()))
        self.lowspace = disk_full_site(root / "lowspace")

    def base(self, host: str) -> Path:
        return self.root / "devices" / host / "app"

    def inventory(self, extra: str = "", disk_full: str = "") -> Path:
        lines = []
        for group, members in GROUPS.items():
            lines.append(f"[{group}]")
            for host in members:
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

    def summary_path(self) -> Path:
        return self.root / "summary.json"

    def deploy_argv(
        self, *extra: str, inventory: Path | None = None, health_check: str = HEALTH_CHECK
    ) -> List[str]:
        """fleet_tool.py's command line: this fleet's inventory, bundles and known hosts."""
        return [
            sys.executable,
            str(FLEET_TOOL),
            *("--inventory", str(inventory or self.inventory())),
            *(a for g, b in self.bundles.items() for a in ("--bundle", f"{g}={b}")),
            *("--ssh-option", f"UserKnownHostsFile={self.known_hosts}"),
            *("--ssh-option", "StrictHostKeyChecking=yes"),
            f"--deploy-arg=--ssh-option=UserKnownHostsFile={self.known_hosts}",
            *(("--health-check", health_check) if health_check else ()),
            *("--summary-json", str(self.summary_path())),
            *extra,
        ]

    def deploy(self, *extra: str, inventory: Path | None = None) -> tuple[int, dict, str]:
        """Runs fleet_tool.py; its exit status, its JSON summary and its stdout."""
        argv = self.deploy_argv(*extra, inventory=inventory)
        proc = subprocess.run(argv, env=tool_env(), capture_output=True, text=True, timeout=600)
        print(proc.stdout, proc.stderr, sep="\n")
        return proc.returncode, json.loads(self.summary_path().read_text()), proc.stdout

    def deploy_one_argv(self, host: str, report: Path) -> List[str]:
        """deploy_tool.py's command line for one device: what the fleet's play runs for it."""
        s = self.servers[host]
        return [
            sys.executable,
            str(DEPLOY_TOOL),
            *("--bundle", str(self.bundles[group_of(host)])),
            *("--destination", f"{s.user}@127.0.0.1:{self.base(host)}"),
            *("--port", str(s.port)),
            *("--identity", str(s.identity)),
            *("--remote-python", sys.executable),
            f"--ssh-option=UserKnownHostsFile={self.known_hosts}",
            *("--report", str(report)),
        ]

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
