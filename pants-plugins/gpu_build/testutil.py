"""Helpers of the integration tests that drive whole `./pants` runs in a copy of the checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import pytest

COMPILE_LINE = re.compile(r"Completed: Compile (\S+) for (sm_\d+) \((\w+)\)")


@dataclass(frozen=True)
class PantsRun:
    args: Sequence[str]
    returncode: int
    stderr: str
    seconds: float

    @property
    def compiles(self) -> list[tuple[str, str]]:
        """(source, capability) of every compile process that really ran."""
        return [(m.group(1), m.group(2)) for m in COMPILE_LINE.finditer(self.stderr)]

    def check(self) -> PantsRun:
        assert self.returncode == 0, f"./pants {' '.join(self.args)} failed:\n{self.stderr[-8000:]}"
        return self


def base_env() -> dict[str, str]:
    """The nested Pants' environment: only what finds Python and Pants' caches, no test env."""
    env = {k: os.environ[k] for k in ("HOME", "PATH", "PYENV_ROOT") if k in os.environ}
    env["LANG"] = env["LC_ALL"] = "C.UTF-8"
    return env


def run_pants(
    repo: Path,
    store: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    wrapper: Sequence[str] = (),
) -> PantsRun:
    argv = [*wrapper, "./pants", "--no-pantsd", f"--local-store-dir={store}", *args]
    start = time.monotonic()
    proc = subprocess.run(
        argv,
        cwd=repo,
        env=dict(env if env is not None else base_env()),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        timeout=300,
    )
    run = PantsRun(args, proc.returncode, proc.stderr, time.monotonic() - start)
    print(f"./pants {' '.join(args)}: {run.seconds:.1f}s, {len(run.compiles)} compiles")
    return run


def copy_checkout(source: Path, dest: Path) -> None:
    """Tracked plus untracked-but-not-ignored files of `source`, as they are on disk."""
    listed = subprocess.run(
        ["git", "-C", str(source), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        stdout=subprocess.PIPE,
    ).stdout.decode()
    copied = 0
    for rel in sorted(set(filter(None, listed.split("\0")))):
        src = source / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
        copied += 1
    assert copied and (dest / "pants").is_file(), f"nothing to copy from {source}"


def repo_root() -> Path:
    """The checkout under test: `[test].extra_env_vars` passes it as GPU_BUILD_REPO_ROOT."""
    root = os.environ.get("GPU_BUILD_REPO_ROOT")
    if not root:
        pytest.fail(
            "GPU_BUILD_REPO_ROOT is not set: add `GPU_BUILD_REPO_ROOT=%(buildroot)s` to "
            "`[test].extra_env_vars` in pants.toml."
        )
    return Path(root)
