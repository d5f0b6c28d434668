"""A server that one of the repository's own scripts starts and stops (BuildGrid through
.ci/buildgrid/buildgrid.sh, buildbox-casd through .ci/buildbox/buildbox.sh), for the integration
tests and the benchmarks that need a real REAPI server on 127.0.0.1.

Both scripts speak one protocol, which this module is the one client of (run_script runs any
subcommand; `install` prints what it installed as its last line of stdout):
`SCRIPT start --state-dir DIR --watch-pid PID [ARGS...]` prints the server's address as its last
line of stdout (`grpc://127.0.0.1:PORT`); `SCRIPT stop --state-dir DIR` stops the server whose
pid that state dir holds, and no other. `--watch-pid` makes the server follow this process should
it die before `stop` (a test killed at its timeout). Standard library only, like pants_harness.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

from gpu_build_testutil.pants_harness import base_env


def run_script(repo: str, script: str, *args: str) -> subprocess.CompletedProcess:
    """`bash SCRIPT ARGS...` (script: a path in repo), its output captured, in the environment of
    every run the harness makes (base_env)."""
    return subprocess.run(
        ["bash", os.path.join(repo, script), *args],
        capture_output=True,
        text=True,
        env=base_env(),
    )


@dataclass
class ScriptServer:
    """One server of `script` (a path in repo), with its state (pid, log, storage) in state_dir."""

    repo: str
    script: str
    state_dir: str
    start_args: Sequence[str] = field(default_factory=tuple)
    address: str = ""

    def run_script(self, *args: str) -> subprocess.CompletedProcess:
        return run_script(self.repo, self.script, *args)

    def start(self) -> str:
        proc = self.run_script(
            "start",
            "--state-dir",
            self.state_dir,
            *self.start_args,
            "--watch-pid",
            str(os.getpid()),
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{self.script} start failed:\n{proc.stderr}")
        self.address = proc.stdout.strip().splitlines()[-1]
        return self.address

    def stop(self) -> None:
        self.run_script("stop", "--state-dir", self.state_dir)

    def read_state(self, name: str) -> str:
        """A file of the state dir (the server's log), or "" where there is none."""
        try:
            with open(os.path.join(self.state_dir, name)) as f:
                return f.read()
        except OSError:
            return ""


@contextlib.contextmanager
def script_server(
    repo: str,
    script: str,
    state_dir: Optional[str] = None,
    start_args: Sequence[str] = (),
) -> Iterator[ScriptServer]:
    """A running server with empty storage, stopped (that one only) however the block ends; a
    state dir made here is removed after."""
    owned = state_dir is None
    state_dir = state_dir or tempfile.mkdtemp(prefix=f"{os.path.basename(script)}-state-")
    server = ScriptServer(repo=repo, script=script, state_dir=state_dir, start_args=start_args)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        if owned:
            shutil.rmtree(state_dir, ignore_errors=True)
