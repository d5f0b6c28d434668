"""The deploy tool against a real OpenSSH server on 127.0.0.1 (gpu_build_testutil/local_sshd.py).

A synthetic bundle (cache/ of fake kernel files, a 3 MB app.pex, the manifest listing both):
the first deploy sends every file; after one kernel is edited only its two files and the
manifest go; a transfer killed half-way leaves `current` on the old release, and the next
deploy completes and keeps the old release as `previous`. A fleet's per-device steps: `--check`
says what would go and changes nothing, `--rollback` puts `previous` back only while `current` is
still the release that failed, and `--report` records each as JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from gpu_build_testutil.local_sshd import LocalSshd, SshdUnavailable
from gpu_spec.conftest import library_specs, write_bundle

APP_SIZE = 3 * 1024 * 1024


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSshd]:
    server = LocalSshd(tmp_path_factory.mktemp("sshd"))
    try:
        server.start()
    except SshdUnavailable as e:
        pytest.skip(f"no OpenSSH server for the deploy test: {e}")
    try:
        yield server
    finally:
        server.stop()


def make_bundle(root: Path) -> Path:
    cache = Path(write_bundle(str(root), library_specs()))
    app = os.urandom(APP_SIZE)
    (root / "app.pex").write_bytes(app)
    manifest = json.loads((cache / "manifest.json").read_text())
    manifest["bundle_files"] = {"app.pex": hashlib.sha256(app).hexdigest()}
    (cache / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return root


def edit_kernel(root: Path, library: str = "saxpy") -> None:
    """A new build of one kernel: its files' bytes change, and so the manifest."""
    manifest_path = root / "cache" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for rel in manifest["files"]:
        if rel.startswith(f"{library}/") and "/sm_90/" in rel:
            data = (root / "cache" / rel).read_bytes() + b"// edited\n"
            (root / "cache" / rel).write_bytes(data)
            manifest["files"][rel] = hashlib.sha256(data).hexdigest()
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))


def tool_argv(sshd: LocalSshd, bundle: Path, dest: Path, *extra: str) -> list:
    argv = [
        sys.executable,
        "-m",
        "gpu_build.scripts.deploy_tool",
        "--bundle",
        str(bundle),
        "--destination",
        f"{sshd.user}@127.0.0.1:{dest}",
        "--port",
        str(sshd.port),
        "--identity",
        str(sshd.identity),
        "--remote-python",
        sys.executable,
        *extra,
    ]
    for option in sshd.ssh_options():
        argv += ["--ssh-option", option]
    return argv


def tool_env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


def deploy(sshd: LocalSshd, bundle: Path, dest: Path) -> str:
    proc = subprocess.run(
        tool_argv(sshd, bundle, dest), env=tool_env(), capture_output=True, text=True
    )
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def sent(out: str) -> tuple:
    m = re.search(r"Sent (\d+) files, (\d+) bytes", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def tree(root: Path) -> dict:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_deploys_only_what_changed_and_survives_a_cut_transfer(sshd, tmp_path):
    bundle, dest = make_bundle(tmp_path / "bundle"), tmp_path / "device" / "imaging"
    files = len(tree(bundle))

    out = deploy(sshd, bundle, dest)
    assert sent(out)[0] == files
    assert tree(dest / "current") == tree(bundle)
    first = os.readlink(dest / "current")

    edit_kernel(bundle)
    out = deploy(sshd, bundle, dest)
    n, size = sent(out)
    assert n == 3, out  # saxpy's sm_90 ptx and cubin, and the manifest
    assert size < 100_000
    assert tree(dest / "current") == tree(bundle)
    second = os.readlink(dest / "current")
    assert os.readlink(dest / "previous") == first != second

    # A new app.pex, sent at 2 Mbit/s (~12 s): killed once its upload has started.
    (bundle / "app.pex").write_bytes(os.urandom(APP_SIZE))
    manifest = json.loads((bundle / "cache" / "manifest.json").read_text())
    manifest["bundle_files"]["app.pex"] = hashlib.sha256(
        (bundle / "app.pex").read_bytes()
    ).hexdigest()
    (bundle / "cache" / "manifest.json").write_text(json.dumps(manifest, sort_keys=True))
    before = tree(dest / "current")
    proc = subprocess.Popen(
        tool_argv(sshd, bundle, dest, "--limit-kbps", "2000"),
        env=tool_env(),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        partial = None
        while time.monotonic() < deadline and proc.poll() is None:
            found = list((dest / "releases").glob("*.partial/app.pex"))
            if found and found[0].stat().st_size > 0:
                partial = found[0]
                break
            time.sleep(0.05)
        assert partial is not None, "the transfer of app.pex never started"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert partial.stat().st_size < APP_SIZE  # really cut off half-way
    assert os.readlink(dest / "current") == second
    assert tree(dest / "current") == before

    out = deploy(sshd, bundle, dest)
    assert sent(out)[0] == 2  # app.pex and the manifest
    assert tree(dest / "current") == tree(bundle)
    assert os.readlink(dest / "previous") == second
    assert not list((dest / "releases").glob("*.partial"))
    assert sorted(p.name for p in (dest / "releases").iterdir()) == sorted(
        [os.path.basename(second), os.path.basename(os.readlink(dest / "current"))]
    )


def run_tool(sshd: LocalSshd, bundle: Path, dest: Path, report: Path, *extra: str):
    argv = tool_argv(sshd, bundle, dest, "--report", str(report), *extra)
    proc = subprocess.run(argv, env=tool_env(), capture_output=True, text=True)
    print(proc.stdout, proc.stderr)
    return proc, json.loads(report.read_text())


def logins(sshd: LocalSshd) -> int:
    """The logins the server has accepted so far (sshd logs one line per authentication)."""
    return (sshd.dir / "sshd.log").read_text().count("Accepted publickey for ")


def test_a_deploy_logs_in_once_and_leaves_no_control_socket(sshd, tmp_path):
    """Every step of a deploy (state, stage, the sftp batch, commit) is a session multiplexed
    on the lock's connection: one login, where each step once made its own; and the master's
    socket directory goes with the deploy."""
    bundle, dest = make_bundle(tmp_path / "bundle"), tmp_path / "device" / "imaging"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    before = logins(sshd)
    proc = subprocess.run(
        tool_argv(sshd, bundle, dest),
        env=dict(tool_env(), TMPDIR=str(scratch)),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert sent(proc.stdout)[0] == len(tree(bundle))
    assert logins(sshd) - before == 1, (sshd.dir / "sshd.log").read_text()[-2000:]
    assert list(scratch.iterdir()) == []


def test_check_changes_nothing_and_rollback_goes_back_once(sshd, tmp_path):
    bundle, dest = make_bundle(tmp_path / "bundle"), tmp_path / "device" / "imaging"
    report = tmp_path / "report.json"
    proc, first = run_tool(sshd, bundle, dest, report)
    assert proc.returncode == 0 and first["outcome"] == "switched", first
    assert first["files_sent"] == first["files_total"] == len(tree(bundle))
    assert first["release"] == os.path.basename(os.readlink(dest / "current"))

    # Nothing to roll back to on a device's first release: refused, `current` kept.
    proc, refused = run_tool(sshd, bundle, dest, report, "--rollback", first["release"])
    assert proc.returncode == 1 and refused["outcome"] == "failed", refused
    assert "no `previous` release" in refused["error"]
    assert os.path.basename(os.readlink(dest / "current")) == first["release"]

    edit_kernel(bundle)
    before = tree(dest)
    proc, checked = run_tool(sshd, bundle, dest, report, "--check")
    assert proc.returncode == 0 and checked["outcome"] == "would switch", checked
    assert checked["files_sent"] == 3 and 0 < checked["bytes_sent"] < 100_000, checked
    assert tree(dest) == before  # nothing sent, nothing switched

    proc, second = run_tool(sshd, bundle, dest, report)
    assert second["outcome"] == "switched" and second["previous"].endswith(first["release"])
    assert (second["files_sent"], second["bytes_sent"]) == (3, checked["bytes_sent"])

    # A rollback names the release that failed: another one in `current` is left alone.
    proc, wrong = run_tool(sshd, bundle, dest, report, "--rollback", first["release"])
    assert proc.returncode == 1 and "another deploy switched it" in wrong["error"], wrong
    proc, back = run_tool(sshd, bundle, dest, report, "--rollback", second["release"])
    assert proc.returncode == 0 and back["outcome"] == "rolled back", back
    assert os.path.basename(os.readlink(dest / "current")) == first["release"] == back["release"]
    assert tree(dest / "current") != tree(bundle)  # the old release, whole
    assert (dest / "releases" / second["release"]).is_dir()  # kept until the next deploy


def test_a_release_that_does_not_verify_is_not_switched_to(sshd, tmp_path, monkeypatch):
    from gpu_build.scripts import deploy_tool

    bundle, dest = make_bundle(tmp_path / "bundle"), tmp_path / "device" / "app"
    deploy(sshd, bundle, dest)
    first = os.readlink(dest / "current")
    edit_kernel(bundle)
    real_put = deploy_tool.Remote.put

    def corrupting_put(self, local_root, remote_root, paths):
        real_put(self, local_root, remote_root, paths)
        Path(remote_root, paths[0]).write_bytes(b"corrupted on the way")

    monkeypatch.setattr(deploy_tool.Remote, "put", corrupting_put)
    argv = tool_argv(sshd, bundle, dest)[3:]
    assert deploy_tool.main(argv) == 1
    assert os.readlink(dest / "current") == first


def test_destination_must_be_user_host_path():
    from gpu_build.scripts.deploy_tool import DeployError, parse_destination

    assert parse_destination("jetson@10.0.0.5:/opt/app/") == ("jetson@10.0.0.5", "/opt/app")
    with pytest.raises(DeployError, match="user@host:/absolute/path"):
        parse_destination("host:relative/path")
    for odd in ('a"b', "a\\b", "a*b", "a[1]"):  # sftp's batch language would cut these
        with pytest.raises(DeployError, match="not allowed in a destination path"):
            parse_destination(f"host:/opt/{odd}")


def test_the_ledger_is_data_not_paths(tmp_path):
    from gpu_build.scripts.remote_release import LEDGER, ReleaseError, read_ledger

    good = ["20261202T150452Z-62ab0123cdef", "20261202T150452Z-62ab0123cdef.partial"]
    (tmp_path / LEDGER).write_text(json.dumps({"releases": good}))
    assert read_ledger(str(tmp_path)) == good
    for name in ("", ".", "..", "../x", "/etc", "a/b", good[0] + "\n", good[0] + "/..", 7):
        (tmp_path / LEDGER).write_text(json.dumps({"releases": [good[0], name]}))
        with pytest.raises(ReleaseError, match=f"{LEDGER}.*is damaged.*move it away"):
            read_ledger(str(tmp_path))


def test_a_failed_prepare_is_named_by_its_cause():
    from gpu_build.scripts.remote_release import cause

    out = b'  unpacking wheel 1\nTraceback (most recent call last):\n  File "x.py", line 1\n'
    out += b"OSError: [Errno 28] No space left on device\n  ... 913 more ...\n\n"
    assert cause(out) == "OSError: [Errno 28] No space left on device"
    assert cause(b"step 1\nstep 2\n... 3 more ...\n") == "step 2"
    assert cause(b"") == "no output"


@pytest.mark.parametrize("version", ["3.8", "3.7"])
def test_the_device_program_runs_on_the_python_it_claims(tmp_path, version):
    """The device steps (remote_release.py and gpu_spec, as sent) on a real CPython 3.8, the
    oldest the docs claim; on 3.7 the runner's check answers in one line which is needed."""
    import argparse

    from gpu_build.scripts.deploy_tool import Remote
    from gpu_build_testutil.pants_harness import find_cpython

    python = find_cpython(version)
    if python is None:
        pytest.skip(f"no CPython {version} here (on PATH or under $PYENV_ROOT)")
    args = argparse.Namespace(
        destination=f"gpu@device:{tmp_path}/app",
        port=22,
        ssh_option=[],
        identity=None,
        ssh="ssh",
        sftp="sftp",
        limit_kbps=0,
        remote_python=python,
    )
    program = Remote(args).program("state", {"files": {}})
    run = subprocess.run(
        [python, "-"], input=program, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr
    answer = json.loads(run.stdout.strip().splitlines()[-1])
    if version == "3.7":
        assert answer["error"].startswith("python 3.7.")
        assert "on the device is too old (3.8 or newer" in answer["error"]
    else:
        assert "error" not in answer, answer
        assert answer["current"] is None and answer["foreign"] == [] and answer["free"] > 0
