"""A local REAPI executor (buildbox-casd with the bubblewrap runner) and Pants runs against it,
for the remote execution integration test and benchmark (tests/bench/remote_execution_bench.py).

Standard library only, like gpu_build_testutil under it: it runs under the `python-default`
resolve's CPython and as a plain script. It runs `.ci/buildbox/buildbox.sh` (which installs
buildbox and bubblewrap, pinned by sha256, into ./pants' cache) through gpu_build_testutil's
script_server, the one client of the .ci server scripts, and `./pants` in clones of the
repository, never in the repository itself.
"""

from __future__ import annotations

import os
import subprocess
from typing import ContextManager, Mapping, Optional, Sequence

from gpu_build_testutil.pants_harness import PantsRun, bootstrap_cache
from gpu_build_testutil.pants_harness import run_pants as run_pants_in
from gpu_build_testutil.script_server import ScriptServer, run_script, script_server

KERNELS_SPEC = "src/python/imaging/kernels::"
BUILDBOX_SCRIPT = ".ci/buildbox/buildbox.sh"
REMOTE_EXECUTION_CONFIG = ".ci/remote-execution.toml"


def install(repo: str) -> str:
    """The directory of buildbox-casd, buildbox-run and bwrap (installed once per machine)."""
    proc = run_script(repo, BUILDBOX_SCRIPT, "install")
    if proc.returncode != 0:
        raise RuntimeError(f"buildbox did not install:\n{proc.stderr}")
    return proc.stdout.strip().splitlines()[-1]


def sandbox_unavailable(bin_dir: str) -> Optional[str]:
    """Why bubblewrap cannot make a sandbox here (no user namespaces for an unprivileged user),
    or None where it can."""
    proc = subprocess.run(
        [os.path.join(bin_dir, "bwrap"), "--ro-bind", "/", "/", "--unshare-pid", "true"],
        capture_output=True,
        text=True,
    )
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")


def pants_interpreter_prefix() -> Optional[str]:
    """The prefix of the CPython 3.9 that runs Pants (./pants' venv), which Pants 2.17 names by
    its absolute path in every pex process: a worker must have it at that path. None if it is
    under /usr (every worker binds the system directories)."""
    cfg = bootstrap_cache("pants-2.17.1-py39") / "pyvenv.cfg"
    home = None
    for line in cfg.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            home = os.path.realpath(value.strip())
    if home is None:
        raise RuntimeError(f"{cfg} names no `home`")
    prefix = os.path.dirname(home)
    return None if prefix == "/usr" or prefix.startswith("/usr/") else prefix


def executor(
    repo: str, state_dir: str | None = None, jobs: int = 2
) -> ContextManager[ScriptServer]:
    """A running buildbox-casd with an empty CAS and ActionCache and `jobs` parallel actions,
    stopped by its pid however the block ends. Its workers see the system directories and
    Pants' interpreter (see pants_interpreter_prefix)."""
    args = ["--jobs", str(jobs)]
    prefix = pants_interpreter_prefix()
    if prefix:
        args += ["--ro-bind", prefix]
    return script_server(repo, BUILDBOX_SCRIPT, state_dir, start_args=args)


def run_pants(
    repo: str,
    args: Sequence[str],
    *,
    local_store: str | None,
    address: str | None,
    env: Mapping[str, str] | None = None,
    timeout: float = 1800,
) -> PantsRun:
    """One recorded `./pants` run in repo with its own local store (None: Pants' default one):
    remote execution on the executor at `address`, or a plain local build where it is None."""
    options = []
    if address:
        options = [
            f"--pants-config-files={os.path.join(repo, REMOTE_EXECUTION_CONFIG)}",
            f"--remote-store-address={address}",
            f"--remote-execution-address={address}",
        ]
    return run_pants_in(
        repo, [*options, *args], local_store=local_store, env=env, record=True, timeout=timeout
    )
