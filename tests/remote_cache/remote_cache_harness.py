"""BuildGrid and Pants with the remote cache, for the remote cache integration test and benchmark.

Built on gpu_build_testutil.pants_harness (pants-plugins/gpu_build_testutil/), the harness of
every whole-`./pants` run, and like it stdlib only: it runs under the `python-default` resolve's
CPython (3.10-3.12) and
as a plain script (tests/bench/remote_cache_bench.py). It shells out to git, bash,
`.ci/buildgrid/buildgrid.sh` and `./pants`, each time in a clone of the repository, never in the
repository itself.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import ContextManager, Mapping, Sequence

from gpu_build_testutil.pants_harness import PantsRun, base_env
from gpu_build_testutil.pants_harness import run_pants as run_pants_in
from gpu_build_testutil.script_server import ScriptServer, script_server

KERNELS_SPEC = "src/python/imaging/kernels::"
# Reading (every job) and writing (trusted jobs): these tests play the trusted job.
REMOTE_CACHE_CONFIGS = (".ci/remote-cache.toml", ".ci/remote-cache-write.toml")
BUILDGRID_SCRIPT = ".ci/buildgrid/buildgrid.sh"


def _git(args: Sequence[str], cwd: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=base_env()
    ).stdout


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


def buildgrid(repo: str, state_dir: str | None = None) -> ContextManager[ScriptServer]:
    """A running BuildGrid with an empty cache (instance `main`), stopped (that one only) however
    the block ends."""
    return script_server(repo, BUILDGRID_SCRIPT, state_dir)


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
