"""Deploy probes: `deploy_tool` against a real OpenSSH server on 127.0.0.1 (the device: a temp dir).

Each probe deploys a small synthetic bundle with the real tool (ssh, sftp, the device steps of
remote_release.py) and checks what must stay true on the "device" besides what the tool said.
The device's environment is set through `--remote-python` (`env VAR=... python`), as on a device
whose login sets it. Low disk space is simulated two ways: everywhere, a `sitecustomize` on the
device interpreter's PYTHONPATH makes `os.statvfs` report 10 free blocks (no root, no test hook in
the tool); as root only, a real tmpfs of a few MiB is mounted as the destination, filled up while
sftp writes (the write really fails with ENOSPC): CI without root prints that row as skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator, List, Tuple
from unittest import mock

import pytest

from gpu_build_testutil.local_sshd import LocalSshd, SshdUnavailable
from gpu_spec.conftest import library_specs, write_bundle
from gpu_spec.signature import Signature, key_id
from probe_table import findings, held, refused, run_probes

FAKE_STATVFS = """
import os
_real = os.statvfs
def _low(path):
    s = _real(path)
    return os.statvfs_result((s.f_bsize, s.f_frsize, s.f_blocks, 10, 10, 10, s.f_files,
                              s.f_ffree, s.f_favail, s.f_flag, s.f_namemax))
os.statvfs = _low
"""


class Finding(Exception):
    """What should have held did not."""


class Device:
    def __init__(self, sshd: LocalSshd, root: Path) -> None:
        self.sshd, self.root, self.n = sshd, root, 0

    def fresh(self) -> Tuple[Path, Path]:
        """(a new bundle, a new destination)."""
        self.n += 1
        d = self.root / f"p{self.n}"
        return make_bundle(d / "bundle"), d / "device" / "app"

    def argv(self, bundle: Path, dest: Path, python: str = "") -> List[str]:
        argv = [
            "--bundle",
            str(bundle),
            "--destination",
            f"{self.sshd.user}@127.0.0.1:{dest}",
            "--port",
            str(self.sshd.port),
            "--identity",
            str(self.sshd.identity),
            "--remote-python",
            python or sys.executable,
        ]
        for option in self.sshd.ssh_options():
            argv += ["--ssh-option", option]
        return argv

    def deploy(self, bundle: Path, dest: Path, python: str = "") -> Tuple[int, str, str]:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpu_build.scripts.deploy_tool",
                *self.argv(bundle, dest, python),
            ],
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
            capture_output=True,
            text=True,
        )
        if "Traceback" in proc.stderr:
            raise Finding(f"traceback: {proc.stderr.strip().splitlines()[-1]}")
        return proc.returncode, proc.stdout, proc.stderr

    def ok(self, bundle: Path, dest: Path, python: str = "") -> str:
        rc, out, err = self.deploy(bundle, dest, python)
        if rc != 0:
            raise Finding(f"a good deploy failed: {err.strip()}")
        if tree(dest / "current") != tree(bundle):
            raise Finding("`current` does not hold the bundle")
        return out + err

    def refusal(self, bundle: Path, dest: Path, python: str = "") -> str:
        rc, _, err = self.deploy(bundle, dest, python)
        if rc == 0:
            raise Finding("deployed")
        return failure_line(err)


def failure_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if "failed:" in line]
    if len(lines) != 1:
        raise Finding(f"no single failure line: {err.strip()!r}")
    return lines[0]


def make_bundle(root: Path, app_size: int = 64 * 1024) -> Path:
    cache = Path(write_bundle(str(root), library_specs(("saxpy", "sobel"), ("sm_90",))))
    app = os.urandom(app_size)
    (root / "app.pex").write_bytes(app)
    manifest = json.loads((cache / "manifest.json").read_text())
    manifest["bundle_files"] = {"app.pex": hashlib.sha256(app).hexdigest()}
    (cache / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return root


def edit(root: Path, library: str = "saxpy", app_size: int = 0) -> None:
    """A new build: one library's files change (and app.pex when app_size), so the manifest."""
    path = root / "cache" / "manifest.json"
    manifest = json.loads(path.read_text())
    for rel in manifest["files"]:
        if rel.startswith(f"{library}/"):
            data = (root / "cache" / rel).read_bytes() + b"// edited\n"
            (root / "cache" / rel).write_bytes(data)
            manifest["files"][rel] = hashlib.sha256(data).hexdigest()
    if app_size:
        app = os.urandom(app_size)
        (root / "app.pex").write_bytes(app)
        manifest["bundle_files"]["app.pex"] = hashlib.sha256(app).hexdigest()
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True))


def tree(root: Path) -> dict:
    if not root.is_dir():
        return {}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def snapshot(dest: Path) -> dict:
    """Everything under the destination: links by target, files by sha256."""
    out = {}
    for p in sorted(dest.rglob("*")) if dest.exists() else []:
        rel = str(p.relative_to(dest))
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def unchanged(before: dict, dest: Path, what: str) -> None:
    after = snapshot(dest)
    if after != before:
        diff = sorted(set(before.items()) ^ set(after.items()))[:4]
        raise Finding(f"{what} changed the device: {diff}")


# --- signing, with the `openssl` CLI (the plugin's resolve has no `cryptography`) ---


def new_key(path: Path) -> bytes:
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(path)], check=True)
    der = subprocess.run(
        ["openssl", "pkey", "-in", str(path), "-pubout", "-outform", "DER"],
        check=True,
        capture_output=True,
    ).stdout
    return der[-32:]


def sign(bundle: Path, key: Path, public: bytes) -> None:
    manifest = bundle / "cache" / "manifest.json"
    sig = subprocess.run(
        ["openssl", "pkeyutl", "-sign", "-inkey", str(key), "-rawin", "-in", str(manifest)],
        check=True,
        capture_output=True,
    ).stdout
    (bundle / "cache" / "manifest.json.sig").write_bytes(Signature(key_id(public), sig).dumps())


# --- the probes ---


def probe_user_files_in_releases(dev: Device) -> str:
    bundle, dest = dev.fresh()
    mine = {
        "releases/notes.txt": b"mine\n",
        "releases/keep-me/data.bin": b"\0" * 100,
        "releases/old.partial/x": b"a user's dir named like a staging dir\n",
    }
    for rel, data in mine.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    warnings = []
    for i in range(3):  # the first deploy, then two that remove old releases
        if i:
            edit(bundle, "saxpy" if i == 1 else "sobel")
        warnings.append(dev.ok(bundle, dest))
    for rel, data in mine.items():
        if not (dest / rel).is_file() or (dest / rel).read_bytes() != data:
            raise Finding(f"{rel} was lost")
    named = [w for w in warnings[0].splitlines() if w.startswith("warning: left alone")]
    if not named or not all(n in named[0] for n in ("notes.txt", "keep-me", "old.partial")):
        raise Finding(f"the user's entries were not named: {warnings[0]!r}")
    return held(f"3 deploys kept the user's 3 entries under releases/; {named[0][:110]}...")


def probe_corrupted_current_file(dev: Device) -> str:
    bundle, dest = dev.fresh()
    dev.ok(bundle, dest)
    current = dest / "current"
    sobel = sorted((current / "cache" / "sobel").rglob("*.cubin"))[0]
    sobel.write_bytes(b"bit rot")
    (current / "app.pex").unlink()
    edit(bundle, "saxpy")
    err = dev.ok(bundle, dest)  # checks current == bundle, byte for byte
    line = next((w for w in err.splitlines() if "no longer match" in w), "")
    if "app.pex" not in line or sobel.name not in line:
        raise Finding(f"the bad files were not named: {err!r}")
    return held(f"damaged/missing files of `current` re-sent, new release whole: {line[:90]}...")


def probe_links_not_symlinks(dev: Device) -> str:
    lines = []
    for name, kind in (("current", "dir"), ("current", "file"), ("previous", "dir")):
        bundle, dest = dev.fresh()
        dest.mkdir(parents=True)
        if kind == "dir":
            (dest / name).mkdir()
            (dest / name / "hand-copied.txt").write_text("x")
        else:
            (dest / name).write_text("x")
        before = snapshot(dest)
        for _ in range(2):  # and every later deploy the same way, with nothing left behind
            lines.append(dev.refusal(bundle, dest))
            unchanged(before, dest, f"a refused deploy onto a {kind} `{name}`")
        if "move it away" not in lines[-1] or lines[-1] != lines[-2]:
            raise Finding(f"unclear or unstable refusal: {lines[-2:]}")
    return refused(lines[0])


def probe_stray_file_in_releases(dev: Device) -> str:
    bundle, dest = dev.fresh()
    dev.ok(bundle, dest)
    (dest / "releases" / "stray.txt").write_text("x")
    (dest / "releases" / "stray-dir").mkdir()
    for lib in ("saxpy", "sobel", "saxpy"):
        edit(bundle, lib)
        dev.ok(bundle, dest)  # exit 0: the switch is reported as the success it is
    if (
        not (dest / "releases" / "stray.txt").is_file()
        or not (dest / "releases/stray-dir").is_dir()
    ):
        raise Finding("the stray entries were removed")
    owned = [p.name for p in (dest / "releases").iterdir() if not p.name.startswith("stray")]
    if len(owned) != 2:
        raise Finding(f"old releases were not removed: {owned}")
    return held("3 deploys past a stray file and dir in releases/: exit 0, both kept, 2 releases")


def probe_disk_full_fake(dev: Device) -> str:
    bundle, dest = dev.fresh()
    dev.ok(bundle, dest)
    edit(bundle, "saxpy")
    site = dest.parent.parent / "lowspace"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FAKE_STATVFS)
    before = snapshot(dest)
    line = dev.refusal(bundle, dest, f"env PYTHONPATH={site} {sys.executable}")
    unchanged(before, dest, "a deploy refused for space")
    if "disk is full" not in line or "needs" not in line:
        raise Finding(f"not a disk-full line: {line}")
    return refused(line)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[None]:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def probe_disk_full_real(dev: Device) -> str:
    from gpu_build.scripts import deploy_tool

    if os.geteuid() != 0:
        return held("skipped: mounting a tmpfs needs root (the fake-statvfs probe ran)")
    root = dev.root / "tmpfs-probe"
    bundle = make_bundle(root / "bundle", app_size=1024 * 1024)
    dest = root / "device"
    with tmpfs(dest, "4m"):
        dev.ok(bundle, dest)
        edit(bundle, "saxpy", app_size=1024 * 1024)
        before = snapshot(dest)
        real_put = deploy_tool.Remote.put

        def put_onto_a_full_disk(self, local_root, remote_root, paths):
            st = os.statvfs(dest)
            (dest / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize))
            real_put(self, local_root, remote_root, paths)

        err = io.StringIO()
        with mock.patch.object(deploy_tool.Remote, "put", put_onto_a_full_disk):
            with contextlib.redirect_stderr(err):
                rc = deploy_tool.main(dev.argv(bundle, dest))
        (dest / "filler").unlink()
        if rc == 0:
            raise Finding("deployed onto a full disk")
        line = failure_line(err.getvalue())
        unchanged(before, dest, "a deploy that filled the disk")
        if "filled up" not in line:
            raise Finding(f"not a disk-full line: {line}")
        dev.ok(bundle, dest)  # and the next deploy, with room again, completes
    return refused(line)


def probe_missing_interpreter(dev: Device) -> str:
    lines = []
    for python in ("/nonexistent/bin/python3", "no-such-python3", "/etc/hostname"):
        bundle, dest = dev.fresh()
        lines.append(dev.refusal(bundle, dest, python))
        if "remote_python" not in lines[-1] or dest.exists():
            raise Finding(f"unclear refusal, or the device was written: {lines[-1]}")
    return refused(lines[0])


def probe_trust(dev: Device) -> str:
    keys = dev.root / "keys"
    keys.mkdir(exist_ok=True)
    trusted, other = new_key(keys / "trusted.pem"), new_key(keys / "other.pem")
    device = f"env GPU_RUNTIME_TRUSTED_KEYS={trusted.hex()} {sys.executable}"
    lines = []

    def refused_here(bundle: Path, dest: Path, must: str) -> None:
        before = snapshot(dest)
        lines.append(dev.refusal(bundle, dest, device))
        unchanged(before, dest, "a trust-refused deploy")
        if must not in lines[-1]:
            raise Finding(f"expected {must!r}: {lines[-1]}")

    bundle, dest = dev.fresh()
    dev.ok(bundle, dest)  # the device trusted nothing then
    edit(bundle)
    refused_here(bundle, dest, "not signed")
    sign(bundle, keys / "other.pem", other)
    refused_here(bundle, dest, f"signed by key {key_id(other)}")
    sign(bundle, keys / "trusted.pem", trusted)
    manifest = bundle / "cache" / "manifest.json"
    manifest.write_bytes(manifest.read_bytes() + b" ")  # changed after signing: same key id
    refused_here(bundle, dest, "does not match its manifest")
    bad_env = f"env GPU_RUNTIME_TRUSTED_KEYS=not-a-key {sys.executable}"
    lines.append(dev.refusal(bundle, dest, bad_env))
    sign(bundle, keys / "trusted.pem", trusted)
    if "malformed" not in lines[-1]:
        raise Finding(f"a malformed device key was not named: {lines[-1]}")
    out = dev.ok(bundle, dest, device)  # signed by the trusted key: deployed, and verified
    if "signature verified on the device" not in out:
        raise Finding(f"a good signature was not verified: {out!r}")
    return refused(lines[0])


def probe_trust_device_side(dev: Device) -> str:
    """The device's own check, with the tool's early (local) check taken away."""
    from gpu_build.scripts import deploy_tool

    keys = dev.root / "keys2"
    keys.mkdir()
    trusted = new_key(keys / "trusted.pem")
    bundle, dest = dev.fresh()
    dev.ok(bundle, dest)
    edit(bundle)
    before = snapshot(dest)
    err = io.StringIO()
    device = f"env GPU_RUNTIME_TRUSTED_KEYS={trusted.hex()} {sys.executable}"
    with mock.patch.object(deploy_tool, "trust_refusal", lambda bundle, keys: None):
        with contextlib.redirect_stderr(err):
            rc = deploy_tool.main(dev.argv(bundle, dest, device))
    if rc == 0:
        raise Finding("switched to an unsigned release on a device that trusts a key")
    unchanged(before, dest, "a release refused on the device")
    return refused(failure_line(err.getvalue()))


PROBES: List[Tuple[str, Callable[[Device], str]]] = [
    ("first deploy, user files in releases/", probe_user_files_in_releases),
    ("file of current damaged on the device", probe_corrupted_current_file),
    ("current/previous not a symlink", probe_links_not_symlinks),
    ("stray file in releases/", probe_stray_file_in_releases),
    ("disk full (statvfs says 10 blocks)", probe_disk_full_fake),
    ("disk full while sending (real tmpfs)", probe_disk_full_real),
    ("remote interpreter missing", probe_missing_interpreter),
    ("release the device's keys refuse", probe_trust),
    ("unsigned release, device-side check", probe_trust_device_side),
]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSshd]:
    server = LocalSshd(tmp_path_factory.mktemp("sshd"))
    try:
        server.start()
    except SshdUnavailable as e:
        pytest.skip(f"no OpenSSH server for the deploy probes: {e}")
    try:
        yield server
    finally:
        server.stop()


def test_deploy_probes(sshd: LocalSshd, tmp_path: Path) -> None:
    dev = Device(sshd, tmp_path)

    def bound(probe: Callable[[Device], str]) -> Callable[[], str]:
        def run() -> str:
            try:
                result = probe(dev)
            except Finding as e:
                result = f"FINDING: {e}"
            return result.replace(str(tmp_path), "<tmp>")

        return run

    rows = run_probes("deploy", [(name, bound(probe)) for name, probe in PROBES])
    assert findings(rows) == []
