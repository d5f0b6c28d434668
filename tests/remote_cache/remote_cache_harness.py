"""BuildGrid and Pants with the remote cache, for the remote cache integration test and benchmark.

Built on gpu_build_testutil.pants_harness (pants-plugins/gpu_build_testutil/), the harness of
every whole-`./pants` run, and like it stdlib only: it runs under the `python-default` resolve's
CPython (3.10-3.12) and
as a plain script (tests/bench/remote_cache_bench.py). It shells out to git, bash,
`.ci/buildgrid/buildgrid.sh` and `./pants`, each time in a clone of the repository, never in the
repository itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

from gpu_build_testutil.pants_harness import PantsRun, base_env, copy_checkout
from gpu_build_testutil.pants_harness import run_pants as run_pants_in

KERNELS_SPEC = "src/python/imaging/kernels::"
# Reading (every job) and writing (trusted jobs): these tests play the trusted job.
REMOTE_CACHE_CONFIGS = (".ci/remote-cache.toml", ".ci/remote-cache-write.toml")
BUILDGRID_SCRIPT = ".ci/buildgrid/buildgrid.sh"


def _git(args: Sequence[str], cwd: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=base_env()
    ).stdout


def clone_repo(source: str, dest: str) -> str:
    """`git clone` of source at dest, plus source's uncommitted changes (none in CI).

    The working tree's files are copied over the clone and the deleted ones removed, so a local
    run tests the working tree; in CI the tree is committed and this is a plain clone.
    """
    subprocess.run(
        ["git", "clone", "--quiet", source, dest], check=True, capture_output=True, env=base_env()
    )
    return copy_checkout(source, dest)


def commit_all(repo: str, message: str) -> None:
    _git(["add", "-A"], repo)
    _git(
        [
            "-c",
            "user.name=remote-cache-test",
            "-c",
            "user.email=ci@localhost",
            "commit",
            "--quiet",
            "--allow-empty",
            "-m",
            message,
        ],
        repo,
    )


@dataclass
class BuildGrid:
    """A BuildGrid server started by .ci/buildgrid/buildgrid.sh, stopped by `stop()`."""

    repo: str
    state_dir: str
    address: str = ""

    def _script(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", os.path.join(self.repo, BUILDGRID_SCRIPT), *args],
            capture_output=True,
            text=True,
            env=base_env(),
        )

    def start(self) -> str:
        # --watch-pid: should this process die before stop() (a test timeout), the server follows.
        proc = self._script("start", "--state-dir", self.state_dir, "--watch-pid", str(os.getpid()))
        if proc.returncode != 0:
            raise RuntimeError(f"BuildGrid did not start:\n{proc.stderr}")
        self.address = proc.stdout.strip().splitlines()[-1]
        return self.address

    def stop(self) -> None:
        self._script("stop", "--state-dir", self.state_dir)


@contextlib.contextmanager
def buildgrid(repo: str, state_dir: str | None = None) -> Iterator[BuildGrid]:
    """A running BuildGrid with an empty cache, stopped (that one only) however the block ends."""
    owned = state_dir is None
    state_dir = state_dir or tempfile.mkdtemp(prefix="buildgrid-state-")
    server = BuildGrid(repo=repo, state_dir=state_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        if owned:
            shutil.rmtree(state_dir, ignore_errors=True)


def run_pants(
    repo: str,
    args: Sequence[str],
    *,
    local_store: str,
    remote_address: str | None,
    env: Mapping[str, str] | None = None,
    remote_cache: bool = True,
    pantsd: bool = False,
    timeout: float = 1800,
) -> PantsRun:
    """One recorded `./pants` run in repo with its own local store; the remote cache config when
    asked."""
    options = []
    if remote_cache:
        options = [
            *(f"--pants-config-files={os.path.join(repo, c)}" for c in REMOTE_CACHE_CONFIGS),
            f"--remote-store-address={remote_address}",
        ]
    return run_pants_in(
        repo,
        [*options, *args],
        local_store=local_store,
        env=env,
        pantsd=pantsd,
        record=True,
        timeout=timeout,
    )


def relocated_bootstrap_cache(dest: str) -> str:
    """A copy of ./pants' bootstrap cache (Pants venv + pex CLI) at dest, for PANTS_BOOTSTRAP_CACHE.

    The copy is a second place for the Pants venv to live; with it, ./pants runs Pants from dest.
    """
    source = os.environ.get("PANTS_BOOTSTRAP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "gpu_build_bootstrap",
    )
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(source):
        if re.fullmatch(r"pants-[\d.]+-py39|pex-[\d.]+", name):
            src = os.path.join(source, name)
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(dest, name), symlinks=True)
            else:
                shutil.copy2(src, os.path.join(dest, name))
    return dest
