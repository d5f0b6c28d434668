"""Whole `./pants` runs, in a copy of the checkout: signed bundles, clashing bundles, deploys.

- `package` with `[gpu-bundle-signing].key_file` (a key made by `openssl genpkey` outside the
  repo) writes `cache/manifest.json.sig`, which OpenSSL accepts for the manifest's exact bytes;
  the manifest lists the sha256 of every file of the packed app.pex, and the PEX carries the key
  pinned in its code (`gpu_bundle_pinned_keys.py`), not in its environment.
- A key file inside the repository is refused.
- Two `deploy_bundle`s that would write one dist/ path are refused before anything is built,
  naming both.
- `experimental-deploy` to a real sshd on 127.0.0.1: the first deploy sends every file, the
  second, after editing one kernel, only that kernel's files and the manifest and signature.
- `experimental-deploy` of a `device_fleet` (Ansible from the repo's `ansible` resolve) to two
  sshds on 127.0.0.1 in batches of 1 and 100%: both switched, each checked by the runtime's
  `verify` against the key pinned in the signed app, the summary JSON in dist/; then its
  `--gpu-fleet-deploy-check` dry run changes nothing.

The first three runs (the package, the key inside the repo, the first deploy) share a pantsd
(nothing Pants reads in the repo changes between them, so pantsd's file watcher has nothing to
catch up with); it is stopped before the first edit of the repo (the deploy's kernel edit), and
the later runs start Pants afresh. The tests run in this order.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from gpu_build_testutil.local_sshd import LocalSshd, SshdUnavailable
from gpu_build_testutil.pants_harness import (
    copy_checkout,
    find_cpython,
    repo_root,
    run_pants,
    stop_pantsd,
)

APP = "src/python/imaging"
BUNDLE = f"{APP}:imaging_h200"


@dataclass(frozen=True)
class Checkout:
    repo: Path
    key: Path
    public_hex: str


def openssl(*args: str) -> bytes:
    return subprocess.run(["openssl", *args], check=True, capture_output=True).stdout


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Checkout]:
    if not shutil.which("openssl"):
        pytest.skip("openssl makes the test's signing key")
    tmp = tmp_path_factory.mktemp("gpu_build_trust")
    repo = tmp / "repo"
    copy_checkout(repo_root(), repo)
    key = tmp / "keys" / "signing.pem"
    key.parent.mkdir()
    openssl("genpkey", "-algorithm", "ed25519", "-out", str(key))
    der = openssl("pkey", "-in", str(key), "-pubout", "-outform", "DER")
    try:
        yield Checkout(repo, key, der[-32:].hex())
    finally:
        stop_pantsd(repo)
        shutil.rmtree(tmp, ignore_errors=True)


def tree(root: Path) -> dict:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


def signing(checkout: Checkout) -> list:
    return [f"--gpu-bundle-signing-key-file={checkout.key}"]


def test_package_signs_the_manifest_and_pins_the_key(checkout: Checkout) -> None:
    run_pants(
        checkout.repo, ["package", *signing(checkout), BUNDLE], local_store=None, pantsd=True
    ).check()
    bundle = checkout.repo / "dist" / "imaging_h200"
    manifest = bundle / "cache" / "manifest.json"
    sig = json.loads((bundle / "cache" / "manifest.json.sig").read_text())
    pub = checkout.key.parent / "public.pem"
    pub.write_bytes(openssl("pkey", "-in", str(checkout.key), "-pubout"))
    raw_sig = checkout.key.parent / "manifest.sig"
    raw_sig.write_bytes(bytes.fromhex(sig["signature"]))
    openssl(
        "pkeyutl",
        "-verify",
        "-pubin",
        "-inkey",
        str(pub),
        "-rawin",
        "-in",
        str(manifest),
        "-sigfile",
        str(raw_sig),
    )  # raises unless OpenSSL accepts the signature of the manifest's exact bytes
    assert sig["key_id"] == hashlib.sha256(bytes.fromhex(checkout.public_hex)).hexdigest()[:16]
    app = bundle / "app.pex"  # packed: a directory
    listed = json.loads(manifest.read_text())["bundle_files"]
    launcher = bundle / "app"
    assert listed == {
        **{f"app.pex/{rel}": sha for rel, sha in tree(app).items()},
        "app": hashlib.sha256(launcher.read_bytes()).hexdigest(),
    }
    pex_info = json.loads((app / "PEX-INFO").read_text())
    assert any(p.name.startswith("cryptography-") for p in (app / ".deps").iterdir())
    pinned = (app / "gpu_bundle_pinned_keys.py").read_text()
    # The key is part of the app's code, not of its environment (which could remove it).
    assert f"PINNED_KEYS = (\n    {checkout.public_hex!r},\n)" in pinned
    assert "GPU_RUNTIME_PINNED_KEYS" not in pex_info.get("inject_env", {})


def test_a_key_inside_the_repo_is_refused(checkout: Checkout) -> None:
    inside = checkout.repo / "signing.pem"
    shutil.copy(checkout.key, inside)
    try:
        # The key file is read by the option's check, not by Pants' file watching: pantsd is safe.
        run = run_pants(
            checkout.repo,
            ["package", "--gpu-bundle-signing-key-file=signing.pem", BUNDLE],
            local_store=None,
            pantsd=True,
        )
    finally:
        inside.unlink()  # not a file Pants reads: the pantsd stays for the first deploy
    assert run.returncode != 0
    assert "inside the repository" in " ".join(run.stderr.split())


def test_deploy_sends_only_what_changed(checkout: Checkout, tmp_path: Path) -> None:
    sshd = LocalSshd(tmp_path)
    try:
        sshd.start()
    except SshdUnavailable as e:
        pytest.skip(f"no OpenSSH server for the deploy test: {e}")
    dest = tmp_path / "device" / "imaging"
    options = [
        *signing(checkout),
        f"--gpu-bundle-deploy-destination={sshd.user}@127.0.0.1:{dest}",
        f"--gpu-bundle-deploy-port={sshd.port}",
        f"--gpu-bundle-deploy-identity-file={sshd.identity}",
        f"--gpu-bundle-deploy-ssh-options={sshd.ssh_options()!r}",
    ]
    saxpy = checkout.repo / APP / "kernels" / "saxpy.py"
    original = saxpy.read_text()
    try:
        # Through the pantsd of the runs before (the repo is as they left it); stopped after it,
        # before the edit.
        first = run_pants(
            checkout.repo, ["experimental-deploy", *options, BUNDLE], local_store=None, pantsd=True
        ).check()
        stop_pantsd(checkout.repo)
        sent = re.search(r"Sent (\d+) files, (\d+) bytes", first.stdout + first.stderr)
        assert sent, first.stdout
        current = tree(dest / "current")
        # app.pex's files, its launcher, 22 kernel files, the manifest and its signature, and
        # nothing else: the release's prepare wrote no bytecode into the bundle
        assert len(current) == len(tree(dest / "current" / "app.pex")) + 25
        assert int(sent.group(1)) == len(current), (sorted(current), first.stdout)
        assert not [p for p in current if "__pycache__" in p], sorted(current)
        assert os.access(dest / "current" / "app", os.X_OK)  # the launcher stays executable
        saxpy.write_text(original.replace("a * x[i] + y[i]", "y[i] + a * x[i]"))
        second = run_pants(
            checkout.repo, ["experimental-deploy", *options, BUNDLE], local_store=None
        ).check()
        out = second.stdout + second.stderr
        print(out[-2000:])
        sent = re.search(r"Sent (\d+) files, (\d+) bytes", out)
        assert sent, out
        # Exactly the files whose bytes changed went: saxpy's PTX and cubin, the manifest and its
        # signature; nothing of the app (which carries no kernel source), nor of other kernels.
        old, new = tree(dest / "previous"), tree(dest / "current")
        changed = sorted(p for p in new if old.get(p) != new[p])
        assert int(sent.group(1)) == len(changed), (changed, out)
        saxpy_files = [p for p in changed if p.startswith("cache/saxpy/")]
        assert len(saxpy_files) == 2, changed
        assert set(changed) - set(saxpy_files) <= {
            "cache/manifest.json",
            "cache/manifest.json.sig",
        }, changed
        assert int(sent.group(2)) <= 100_000, out  # issue 22's goal for a saxpy edit
    finally:
        saxpy.write_text(original)
        sshd.stop()


FLEET_BUILD = """
device_fleet(
    name="fleet",
    inventory="devices.ini",
    bundles={"h200": "src/python/imaging:imaging_h200"},
    rollout=["1", "100%"],
    health_check="test -x ./app && test -f cache/manifest.json.sig",
)
"""


def test_fleet_deploy_through_ansible(checkout: Checkout, tmp_path: Path) -> None:
    python = find_cpython("3.12")  # the H200 bundle's platform: its app runs on CPython 3.12
    if not python:
        pytest.skip("the fleet's devices run the H200 bundle's app, which needs a CPython 3.12")
    servers = [LocalSshd(tmp_path / f"sshd-{n}") for n in (1, 2)]
    try:
        for server in servers:
            server.dir.mkdir()
            server.start()
    except SshdUnavailable as e:
        pytest.skip(f"no OpenSSH server for the fleet test: {e}")
    try:
        fleet = checkout.repo / "src" / "python" / "fleet_test"
        fleet.mkdir()
        (fleet / "BUILD").write_text(FLEET_BUILD)
        (fleet / "devices.ini").write_text(
            "[h200]\n"
            + "".join(
                f"h200-{n} ansible_host=127.0.0.1 ansible_port={s.port} ansible_user={s.user} "
                f"ansible_ssh_private_key_file={s.identity} ansible_python_interpreter={python} "
                f"gpu_remote_python={python} gpu_bundle_path={tmp_path / f'device-{n}'}\n"
                for n, s in enumerate(servers, 1)
            )
        )
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text("".join(s.known_hosts.read_text() for s in servers))
        options = [
            *signing(checkout),
            f"--gpu-bundle-deploy-ssh-options={[f'UserKnownHostsFile={known_hosts}']!r}",
        ]
        target = "src/python/fleet_test:fleet"
        run = run_pants(checkout.repo, ["experimental-deploy", *options, target], local_store=None)
        print(run.stdout[-3000:], run.stderr[-3000:])
        run.check()
        summary_path = checkout.repo / "dist" / "fleet.fleet-summary.json"
        devices = {d["host"]: d for d in json.loads(summary_path.read_text())["devices"]}
        assert sorted(devices) == ["h200-1", "h200-2"]
        for n in (1, 2):
            d = devices[f"h200-{n}"]
            current = tmp_path / f"device-{n}" / "current"
            assert d["outcome"] == "switched", d
            assert d["release"] == os.path.basename(os.readlink(current))
            assert d["files_sent"] == len(tree(current)) and d["health_s"] is not None, d
            assert (current / "cache" / "manifest.json.sig").is_file()
        assert run.stdout.count("PLAY [Roll out GPU bundles]") == 2  # batches of 1, then the rest

        check = run_pants(
            checkout.repo,
            ["experimental-deploy", *options, "--gpu-fleet-deploy-check", target],
            local_store=None,
        ).check()
        checked = json.loads(summary_path.read_text())
        assert checked["check"] is True, check.stdout
        assert {d["outcome"] for d in checked["devices"]} == {"unchanged"}, checked
    finally:
        for server in servers:
            server.stop()


def test_bundles_writing_one_dist_path_are_refused(checkout: Checkout) -> None:
    stop_pantsd(checkout.repo)  # the deploy test stops it, unless it skipped before its first run
    other = checkout.repo / APP / "copy"
    other.mkdir()
    (other / "BUILD").write_text(
        'deploy_bundle(name="imaging_h200", binary="src/python/imaging:app", '
        'capabilities=["sm_90"], driver_version="13.0")\n'
    )
    try:
        run = run_pants(checkout.repo, ["package", f"{APP}/copy:imaging_h200"], local_store=None)
    finally:
        shutil.rmtree(other)
    message = " ".join(run.stderr.split())
    assert run.returncode != 0
    assert f"The deploy_bundle {APP}/copy:imaging_h200 would write dist/imaging_h200/" in message
    assert f"{BUNDLE} (dist/imaging_h200)" in message
    assert "Compile " not in run.stderr  # refused before building
