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
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, List, Tuple
from unittest import mock

import pytest

from gpu_build_testutil.local_sshd import LocalSshd, SshdUnavailable, disk_full_site
from gpu_spec.conftest import library_specs, write_bundle
from gpu_spec.signature import Signature, key_id
from probe_table import findings, held, refused, run_probes

DEPLOY_TIMEOUT_S = 120  # a good deploy here takes 1-2 s; a hung one is a finding, not a hung suite


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

    def command(self, bundle: Path, dest: Path, python: str = "", *extra: str) -> List[str]:
        return [
            sys.executable,
            "-m",
            "gpu_build.scripts.deploy_tool",
            *self.argv(bundle, dest, python),
            *extra,
        ]

    def start(self, bundle: Path, dest: Path, *extra: str) -> "subprocess.Popen[str]":
        """A deploy running in the background (stdout and stderr to pipes, read at its end)."""
        return subprocess.Popen(
            self.command(bundle, dest, "", *extra),
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def deploy(
        self,
        bundle: Path,
        dest: Path,
        python: str = "",
        *extra: str,
        timeout: float = DEPLOY_TIMEOUT_S,
    ) -> Tuple[int, str, str]:
        try:
            proc = subprocess.run(
                self.command(bundle, dest, python, *extra),
                env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise Finding(f"the deploy hung (killed after {timeout} s)") from None
        if "Traceback" in proc.stderr:
            raise Finding(f"traceback: {proc.stderr.strip().splitlines()[-1]}")
        return proc.returncode, proc.stdout, proc.stderr

    def ok(
        self,
        bundle: Path,
        dest: Path,
        python: str = "",
        *extra: str,
        timeout: float = DEPLOY_TIMEOUT_S,
    ) -> str:
        rc, out, err = self.deploy(bundle, dest, python, *extra, timeout=timeout)
        if rc != 0:
            raise Finding(f"a good deploy failed: {err.strip()}")
        if tree(dest / "current") != tree(bundle):
            raise Finding("`current` does not hold the bundle")
        return out + err

    def refusal(
        self,
        bundle: Path,
        dest: Path,
        python: str = "",
        *extra: str,
        timeout: float = DEPLOY_TIMEOUT_S,
    ) -> str:
        rc, _, err = self.deploy(bundle, dest, python, *extra, timeout=timeout)
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
    return refused(lines[0], "move it away")


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
    site = disk_full_site(dest.parent.parent / "lowspace")
    before = snapshot(dest)
    line = dev.refusal(bundle, dest, f"env PYTHONPATH={site} {sys.executable}")
    unchanged(before, dest, "a deploy refused for space")
    if "disk is full" not in line or "needs" not in line:
        raise Finding(f"not a disk-full line: {line}")
    return refused(line, "disk is full")


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
    return refused(line, "filled up while sending")


def probe_missing_interpreter(dev: Device) -> str:
    lines = []
    for python in ("/nonexistent/bin/python3", "no-such-python3", "/etc/hostname"):
        bundle, dest = dev.fresh()
        lines.append(dev.refusal(bundle, dest, python))
        if "remote_python" not in lines[-1] or dest.exists():
            raise Finding(f"unclear refusal, or the device was written: {lines[-1]}")
    return refused(lines[0], "is not on the device")


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
    return refused(lines[0], "the device trusts only bundles signed by key")


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
    return refused(failure_line(err.getvalue()), "would be refused by the device's runtime")


LEDGER = ".deploy-releases.json"


def probe_damaged_ledger(dev: Device) -> str:
    """The ledger is data: no entry of it may name anything but a release of this tool."""
    bundle, dest = dev.fresh()
    dev.ok(bundle, dest)
    edit(bundle, "saxpy")
    dev.ok(bundle, dest)  # a `current` and a `previous`
    good = (dest / LEDGER).read_text()
    outside = dev.root / "outside-of-every-destination"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    (dest / "x").mkdir()
    (dest / "x" / "keep.txt").write_text("x")
    names = ["", ".", "..", "../x", "../../x", str(outside), "a/b", "releases", "x\\0"]
    ledgers = [json.dumps({"releases": [name]}) for name in names] + [
        "not json {",
        json.dumps(["20261202T000000Z-0123456789ab"]),
        json.dumps({"releases": "20261202T000000Z-0123456789ab"}),
        json.dumps({"releases": [1]}),
        json.dumps({"releases": ["20261202T000000Z-0123456789ab"] * 100_000}),  # 3 MB
        "[" * 100_000 + "]" * 100_000,  # deeper than json's recursion limit
    ]
    edit(bundle, "sobel")
    lines = []
    for text in ledgers:
        (dest / LEDGER).write_text(text)
        before = snapshot(dest)
        lines.append(dev.refusal(bundle, dest))
        unchanged(before, dest, f"a deploy past the ledger {text[:40]!r}")
        if not (outside / "keep.txt").is_file():
            raise Finding(f"the ledger {text[:40]!r} removed a directory outside the destination")
        if LEDGER not in lines[-1] or "is damaged" not in lines[-1]:
            raise Finding(f"the damaged ledger {text[:40]!r} was not named: {lines[-1]}")
    (dest / LEDGER).write_text(good)
    dev.ok(bundle, dest)  # mended, deploys go on
    return refused(lines[0], "is damaged")


def bundle_of(root: Path, app_size: int) -> Path:
    return make_bundle(root, app_size=app_size)


def wait_for_sending(dest: Path, proc: "subprocess.Popen[str]") -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        found = list((dest / "releases").glob("*.partial/app.pex"))
        if found and found[0].stat().st_size > 0:
            return
        time.sleep(0.05)
    raise Finding("the first deploy never started sending app.pex")


def finished(proc: "subprocess.Popen[str]", what: str) -> str:
    try:
        out, err = proc.communicate(timeout=DEPLOY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise Finding(f"{what} hung") from None
    if proc.returncode != 0 or "Traceback" in err:
        raise Finding(f"{what} failed: {err.strip()[-300:]!r}")
    return out + err


SLOW = ("--limit-kbps", "8000")  # a 2 MiB app.pex takes about 2 s to send


def probe_concurrent_deploys(dev: Device) -> str:
    """Two deploys to one destination at once: the second waits for the first (or refuses,
    naming it); neither removes what the other staged."""
    root = dev.root / "concurrent"
    a = bundle_of(root / "a", 2 * 1024 * 1024)
    b = bundle_of(root / "b", 2 * 1024 * 1024)
    dest = root / "device" / "app"
    first = dev.start(a, dest, *SLOW)
    wait_for_sending(dest, first)
    second = dev.start(b, dest)
    finished(first, "the first of two deploys at once")
    finished(second, "the second of two deploys at once")
    if tree(dest / "current") != tree(b) or tree(dest / "previous") != tree(a):
        raise Finding("two deploys at once did not end as one after the other")
    # the same bundle twice at once: one deploys it, the other finds it there
    edit(a, "saxpy", app_size=2 * 1024 * 1024)
    first = dev.start(a, dest, *SLOW)
    wait_for_sending(dest, first)
    second = dev.start(a, dest)
    outs = [finished(first, "a deploy"), finished(second, "the same deploy at once")]
    if tree(dest / "current") != tree(a) or tree(dest / "previous") != tree(b):
        raise Finding(f"the same bundle deployed twice at once lost `previous`: {outs}")
    if not any("already holds this bundle" in out for out in outs):
        raise Finding(f"neither deploy said the second had nothing to do: {outs}")
    # and one that will not wait long enough is refused, naming the deploy that holds the lock
    edit(a, "sobel", app_size=2 * 1024 * 1024)
    first = dev.start(a, dest, *SLOW)
    wait_for_sending(dest, first)
    line = dev.refusal(b, dest, "", "--lock-wait", "0")
    finished(first, "the deploy that held the lock")
    if "another deploy" not in line or f"pid {first.pid}" not in line:
        raise Finding(f"the refusal does not name the deploy holding the lock: {line}")
    if tree(dest / "current") != tree(a):
        raise Finding("a refused deploy changed `current`")
    return refused(line, "another deploy to")


def probe_identical_redeploy(dev: Device) -> str:
    bundle, dest = dev.fresh()
    dev.ok(bundle, dest)
    first = os.readlink(dest / "current")
    edit(bundle, "saxpy")
    dev.ok(bundle, dest)
    second = os.readlink(dest / "current")
    before = snapshot(dest)
    out = dev.ok(bundle, dest)
    unchanged(before, dest, "redeploying the bundle `current` holds")
    if os.readlink(dest / "previous") != first or os.readlink(dest / "current") != second:
        raise Finding("redeploying the bundle `current` holds moved `previous`")
    line = next((x for x in out.splitlines() if "already holds this bundle" in x), "")
    if not line:
        raise Finding(f"an identical redeploy was not called a no-op: {out!r}")
    return held(f"`previous` kept; {line[:110]}...")


def probe_local_manifest_not_json(dev: Device) -> str:
    bundle, dest = dev.fresh()
    (bundle / "cache" / "manifest.json").write_text("{ not json")
    line = dev.refusal(bundle, dest)
    if "manifest.json" not in line or "not JSON" not in line or dest.parent.exists():
        raise Finding(f"unclear refusal, or the device was written: {line}")
    return refused(line, "is not JSON")


def probe_local_special_files(dev: Device) -> str:
    """A FIFO (open() would block) or a symlink (open() would follow it) in the local bundle."""
    secret = dev.root / "secret.txt"
    secret.write_text("not part of any bundle\n")
    lines = []
    for name, make, must in (
        ("fifo", lambda p: os.mkfifo(p), "not a regular file"),
        ("link", lambda p: os.symlink(secret, p), "is a symlink"),
        ("linked-dir", lambda p: os.symlink(dev.root, p), "is a symlink"),
    ):
        bundle, dest = dev.fresh()
        make(bundle / "cache" / name)
        lines.append(dev.refusal(bundle, dest))
        if f"cache/{name}" not in lines[-1] or must not in lines[-1] or dest.parent.exists():
            raise Finding(f"unclear refusal of a {name}, or the device was written: {lines[-1]}")
    return refused(lines[0], "in the bundle is a")


def probe_destination_with_quote(dev: Device) -> str:
    lines = []
    for odd in ('a"b', "a\\b", "a*b"):
        bundle, dest = dev.fresh()
        dest = dest.parent / odd / "app"
        lines.append(dev.refusal(bundle, dest))
        if "destination" not in lines[-1] or "not allowed" not in lines[-1]:
            raise Finding(f"unclear refusal: {lines[-1]}")
        if dest.parent.parent.exists():
            raise Finding(f"a refused destination {odd!r} was written: {lines[-1]}")
    return refused(lines[0], "not allowed in a destination path")


LAUNCHER = """#!/bin/sh
# a bundle launcher (knows GPU_BUNDLE_PREPARE_ONLY); this one fails to prepare
if [ "${GPU_BUNDLE_PREPARE_ONLY:-}" = 1 ]; then
    i=0
    while [ $i -lt 1000 ]; do echo "  unpacking wheel $i"; i=$((i + 1)); done
    echo "%(cause)s" >&2
    echo "  ... 913 more ..."
    exit %(status)d
fi
"""


def with_launcher(bundle: Path, cause: str, status: int) -> None:
    launcher = bundle / "app"
    launcher.write_text(LAUNCHER % {"cause": cause, "status": status})
    launcher.chmod(0o755)
    path = bundle / "cache" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["bundle_files"]["app"] = hashlib.sha256(launcher.read_bytes()).hexdigest()
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True))


def probe_prepare_fails(dev: Device) -> str:
    """The cause of a failed prepare in one line; a launcher that refuses its app.pex (exit 2,
    the bundle is damaged) is not switched to."""
    bundle, dest = dev.fresh()
    dev.ok(bundle, dest)
    edit(bundle, "saxpy")
    tampered = "error: app.pex has sha256 0123, not 4567 as this bundle was built: it is damaged"
    with_launcher(bundle, tampered, 2)
    before = snapshot(dest)
    line = dev.refusal(bundle, dest)
    unchanged(before, dest, "a release whose launcher refuses its app.pex")
    if "has sha256 0123" not in line or "913 more" in line or "not switched" not in line:
        raise Finding(f"the launcher's refusal was not reported as the cause: {line}")
    cause = "OSError: [Errno 28] No space left on device: '/home/gpu/.pex/venvs'"
    with_launcher(bundle, cause, 1)
    out = dev.ok(bundle, dest)  # any other failure to prepare: a warning, as before
    warning = next((x for x in out.splitlines() if "could not prepare" in x), "")
    if cause not in warning or "913 more" in warning:
        raise Finding(f"the cause of a failed prepare was not named: {warning or out!r}")
    return refused(line, "was not switched to")


HANG_S = 30  # a deploy here takes 1-2 s: one that blocks on a FIFO is killed after this


@contextlib.contextmanager
def fifo_at(path: Path) -> Iterator[None]:
    """A FIFO at `path`; afterwards, whatever still blocks opening it is let go (its reader's
    open returns and reads EOF), so that a hung device step does not outlive the probe."""
    path.unlink()
    os.mkfifo(path)
    try:
        yield
    finally:
        for _ in range(20):
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                break  # ENXIO: nobody is reading it
            time.sleep(0.05)
        path.unlink()


def probe_device_fifos(dev: Device) -> str:
    """A FIFO on the device as the ledger (refused, naming it), or as `current`'s manifest
    (read as "no usable manifest": every file is sent); nothing blocks."""
    bundle, dest = dev.fresh()
    dev.ok(bundle, dest)
    edit(bundle, "saxpy")
    good = (dest / LEDGER).read_text()
    with fifo_at(dest / LEDGER):
        before = snapshot(dest)
        line = dev.refusal(bundle, dest, timeout=HANG_S)
        unchanged(before, dest, "a deploy past a FIFO ledger")
    (dest / LEDGER).write_text(good)
    if LEDGER not in line or "is a FIFO, not a regular file" not in line:
        raise Finding(f"the FIFO ledger was not named: {line}")
    with fifo_at(dest / "current" / "cache" / "manifest.json"):
        out = dev.ok(bundle, dest, timeout=HANG_S)
    sending = re.search(r"Sending (\d+) of (\d+) files", out)
    if not sending or sending.group(1) != sending.group(2):
        raise Finding(f"past a FIFO manifest, not every file was sent: {out!r}")
    return refused(line, "is a FIFO, not a regular file")


def probe_deep_current_manifest(dev: Device) -> str:
    """`current`'s manifest on the device nested 100,000 deep: the tool reads it as unusable
    (one warning, every file sent), never a RecursionError."""
    bundle, dest = dev.fresh()
    dev.ok(bundle, dest)
    edit(bundle, "saxpy")
    (dest / "current" / "cache" / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    out = dev.ok(bundle, dest)
    warning = next((x for x in out.splitlines() if x.startswith("warning: ")), "")
    if "nested deeper than 64 levels" not in warning or "sending every file" not in warning:
        raise Finding(f"no one-line warning naming the nesting: {out!r}")
    return held(f"deployed, {warning[9:130]}...")


def probe_huge_local_signature(dev: Device) -> str:
    """A 100 MiB (sparse) manifest.json.sig in the local bundle: refused by size, unread."""
    bundle, dest = dev.fresh()
    with open(bundle / "cache" / "manifest.json.sig", "wb") as f:
        f.truncate(100 * 1024 * 1024)
    line = dev.refusal(bundle, dest)
    if "over the limit of 65536" not in line or "manifest.json.sig" not in line:
        raise Finding(f"not refused by its size: {line}")
    return refused(line, "over the limit of 65536")


def probe_signing_key_files(dev: Device) -> str:
    """The signing tool (`sign_manifest`, run by `pants package`) given a FIFO or a huge file as
    the private key: one line, before the key is parsed; never a hang."""
    lines = []
    for kind, must in (("fifo", "is a FIFO, not a regular file"), ("huge", "over the limit")):
        key = dev.root / f"signing-{kind}.pem"
        if kind == "fifo":
            os.mkfifo(key)
        else:
            with open(key, "wb") as f:
                f.truncate(10 * 1024 * 1024)
        code = "import sys; from gpu_build.scripts.sign_manifest import main; main(sys.argv[1:])"
        try:
            run = subprocess.run(
                [sys.executable, "-c", code, "public-key", str(key)],
                env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
                capture_output=True,
                text=True,
                timeout=HANG_S,
            )
        except subprocess.TimeoutExpired:
            raise Finding(f"the signing tool hung on a {kind} key file") from None
        err = run.stderr.strip()
        if run.returncode == 0 or "Traceback" in err or must not in err:
            raise Finding(f"a {kind} key file: exit {run.returncode}: {err.splitlines()[-1:]}")
        lines.append(err)
    return refused(lines[0], "is a FIFO, not a regular file")


# A device whose deploy user cannot read one file of `current` (simulated: the probes may run as
# root, whom no mode keeps out): every read-only open of a path with this name fails EACCES.
FAKE_UNREADABLE = """
import builtins, errno, os
NAME = %r
def _denied(path):
    return os.path.basename(os.fspath(path)) == NAME and ".partial" not in os.fspath(path)
_open, _os_open = builtins.open, os.open
def _builtin_open(file, mode="r", *a, **k):
    reading = not set(mode) & set("wax+")
    if isinstance(file, (str, bytes, os.PathLike)) and _denied(file) and reading:
        raise PermissionError(errno.EACCES, "Permission denied", os.fspath(file))
    return _open(file, mode, *a, **k)
def _open_fd(path, flags, *a, **k):
    if _denied(path) and flags & os.O_ACCMODE == os.O_RDONLY:
        raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
    return _os_open(path, flags, *a, **k)
builtins.open, os.open = _builtin_open, _open_fd
"""


def probe_unreadable_current_file(dev: Device) -> str:
    """A file of `current` the deploy copies (unchanged in the new build) cannot be read: the
    refusal says "cannot read <it>", not "cannot write"."""
    bundle, dest = dev.fresh()
    dev.ok(bundle, dest)
    edit(bundle, "saxpy")
    sobel = sorted((dest / "current" / "cache" / "sobel").rglob("*.cubin"))[0]
    site = dest.parent.parent / "unreadable"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FAKE_UNREADABLE % sobel.name)
    before = snapshot(dest)
    line = dev.refusal(bundle, dest, f"env PYTHONPATH={site} {sys.executable}")
    unchanged(before, dest, "a deploy refused for an unreadable file")
    if f"cannot read {dest}/" not in line or sobel.name not in line or "read access" not in line:
        raise Finding(f"not named as unreadable: {line}")
    return refused(line, "cannot read")


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
    ("damaged or hostile release ledger", probe_damaged_ledger),
    ("two deploys to one destination at once", probe_concurrent_deploys),
    ("identical bundle redeployed", probe_identical_redeploy),
    ("local manifest not JSON", probe_local_manifest_not_json),
    ("FIFO or symlink in the local bundle", probe_local_special_files),
    ("destination with a quote or glob", probe_destination_with_quote),
    ("launcher refuses/fails its prepare", probe_prepare_fails),
    ("FIFO on the device (ledger, current's manifest)", probe_device_fifos),
    ("current's manifest nested 100,000 deep", probe_deep_current_manifest),
    ("local manifest.json.sig of 100 MiB", probe_huge_local_signature),
    ("signing key file a FIFO or 10 MiB", probe_signing_key_files),
    ("file of current unreadable on the device", probe_unreadable_current_file),
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
