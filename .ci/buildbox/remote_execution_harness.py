"""A local REAPI executor (buildbox-casd with the bubblewrap runner) and Pants runs against it,
for the remote execution integration test and benchmark of issue 33 (not yet written: this
module is not yet owned by a Pants target; import it with gpu_build_testutil on PYTHONPATH).

Standard library only, like gpu_build_testutil.pants_harness under it: it runs under the
`python-default` resolve's CPython and as a plain script. It shells out to
`.ci/buildbox/buildbox.sh` (which installs buildbox and bubblewrap, pinned by sha256, into
./pants' cache) and to `./pants` in clones of the repository, never in the repository itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional, Sequence

from gpu_build_testutil.pants_harness import PantsRun, base_env, bootstrap_cache
from gpu_build_testutil.pants_harness import run_pants as run_pants_in

BUILDBOX_SCRIPT = ".ci/buildbox/buildbox.sh"
REMOTE_EXECUTION_CONFIG = ".ci/remote-execution.toml"


def _script(repo: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", os.path.join(repo, BUILDBOX_SCRIPT), *args],
        capture_output=True,
        text=True,
        env=base_env(),
    )


def install(repo: str) -> str:
    """The directory of buildbox-casd, buildbox-run and bwrap (installed once per machine)."""
    proc = _script(repo, "install")
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


@dataclass
class Executor:
    """A buildbox-casd started by .ci/buildbox/buildbox.sh, stopped (by its pid) by `stop()`."""

    repo: str
    state_dir: str
    jobs: int = 2
    ro_binds: Sequence[str] = field(default_factory=tuple)
    address: str = ""

    def start(self) -> str:
        args = ["start", "--state-dir", self.state_dir, "--jobs", str(self.jobs)]
        for path in self.ro_binds:
            args += ["--ro-bind", path]
        # --watch-pid: should this process die before stop() (a test timeout), casd follows.
        proc = _script(self.repo, *args, "--watch-pid", str(os.getpid()))
        if proc.returncode != 0:
            raise RuntimeError(f"buildbox-casd did not start:\n{proc.stderr}")
        self.address = proc.stdout.strip().splitlines()[-1]
        return self.address

    def stop(self) -> None:
        _script(self.repo, "stop", "--state-dir", self.state_dir)

    def log(self) -> str:
        try:
            with open(os.path.join(self.state_dir, "casd.log")) as f:
                return f.read()
        except OSError:
            return ""


@contextlib.contextmanager
def executor(repo: str, state_dir: str | None = None, jobs: int = 2) -> Iterator[Executor]:
    """A running executor with an empty CAS and ActionCache, stopped however the block ends."""
    owned = state_dir is None
    state_dir = state_dir or tempfile.mkdtemp(prefix="buildbox-state-")
    prefix = pants_interpreter_prefix()
    server = Executor(repo=repo, state_dir=state_dir, jobs=jobs, ro_binds=[prefix] if prefix else [])
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
    address: str | None,
    env: Mapping[str, str] | None = None,
    timeout: float = 1800,
) -> PantsRun:
    """One recorded `./pants` run in repo with its own local store: remote execution on the
    executor at `address`, or a plain local build where it is None."""
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
