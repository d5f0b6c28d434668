"""Drives BuildGrid and Pants from outside, for the remote cache integration test and benchmark.

Stdlib only: it runs under the `python-default` resolve's CPython (3.10-3.12) and as a plain
script (tests/bench/remote_cache_bench.py). It shells out to git, bash, `.ci/buildgrid/buildgrid.sh`
and `./pants`, each time in a clone of the repository, never in the repository itself.

What it reads back from a Pants run:
- the counters that `--stats-log` prints (`remote_cache_requests_cached`, ...);
- every process of the run, from the workunit logger backend's JSON: its description, its cache
  scope and where its result came from (`Ran`, `HitLocally`, `HitRemotely`), which Pants records in
  the `process` workunit's metadata whether or not the process ran.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

KERNELS_SPEC = "src/python/imaging/kernels::"
COMPILE_PREFIX = "Compile "
REMOTE_CACHE_CONFIG = ".ci/remote-cache.toml"
BUILDGRID_SCRIPT = ".ci/buildgrid/buildgrid.sh"
WORKUNIT_LOGGER_BACKEND = "pants.backend.experimental.tools.workunit_logger"


def repo_root() -> str:
    """The checkout under test: $GPU_BUILD_REPO_ROOT (set by `[test].extra_env_vars`), else ours."""
    root = os.environ.get("GPU_BUILD_REPO_ROOT")
    if not root:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.isfile(os.path.join(root, "pants.toml")):
        raise RuntimeError(
            f"{root} is not the repository root (no pants.toml). Run the test through `./pants test`, "
            "which sets GPU_BUILD_REPO_ROOT via `[test].extra_env_vars`, or set it yourself."
        )
    return root


def base_env() -> dict[str, str]:
    """Our environment without Pants options (PANTS_*): each inner Pants run is configured explicitly.

    PANTS_BOOTSTRAP_CACHE is ./pants' own knob (where the Pants venv lives), not an option: kept.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PANTS_") or k == "PANTS_BOOTSTRAP_CACHE"
    }
    env.pop("GPU_BUILD_REPO_ROOT", None)
    env.setdefault("HOME", os.path.expanduser("~"))
    # Pants in a test sandbox hands us a minimal PATH; git, bash and pyenv live in the usual places.
    path = env.get("PATH", "")
    for extra in ("/usr/local/bin", "/usr/bin", "/bin"):
        if extra not in path.split(os.pathsep):
            path = f"{path}{os.pathsep}{extra}" if path else extra
    env["PATH"] = path
    return env


def _git(args: Sequence[str], cwd: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=base_env()
    ).stdout


def clone_repo(source: str, dest: str) -> str:
    """`git clone` of source at dest, plus source's uncommitted changes (none in CI).

    Copies modified and untracked files that git does not ignore and removes deleted ones, so a
    local run tests the working tree; in CI the tree is committed and this is a plain clone.
    """
    subprocess.run(
        ["git", "clone", "--quiet", source, dest], check=True, capture_output=True, env=base_env()
    )
    changed = _git(["ls-files", "-z", "--modified", "--others", "--exclude-standard"], source)
    deleted = set(filter(None, _git(["ls-files", "-z", "--deleted"], source).split("\0")))
    for rel in filter(None, changed.split("\0")):
        src, dst = os.path.join(source, rel), os.path.join(dest, rel)
        if rel in deleted or not os.path.lexists(src):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.lexists(dst):
            os.remove(dst)
        shutil.copy2(src, dst, follow_symlinks=False)
    for rel in deleted:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(dest, rel))
    return dest


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

    def start(self, port: int | None = None) -> str:
        # --watch-pid: should this process die before stop() (a test timeout), the server follows.
        args = [
            "bash",
            os.path.join(self.repo, BUILDGRID_SCRIPT),
            "start",
            "--state-dir",
            self.state_dir,
            "--watch-pid",
            str(os.getpid()),
        ]
        if port:
            args += ["--port", str(port)]
        proc = subprocess.run(args, capture_output=True, text=True, env=base_env())
        if proc.returncode != 0:
            raise RuntimeError(f"BuildGrid did not start:\n{proc.stderr}")
        self.address = proc.stdout.strip().splitlines()[-1]
        return self.address

    def stop(self) -> None:
        subprocess.run(
            [
                "bash",
                os.path.join(self.repo, BUILDGRID_SCRIPT),
                "stop",
                "--state-dir",
                self.state_dir,
            ],
            capture_output=True,
            text=True,
            env=base_env(),
        )

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])


@contextlib.contextmanager
def buildgrid(repo: str, state_dir: str | None = None) -> Iterator[BuildGrid]:
    """A running BuildGrid with an empty cache, stopped (only that server) however the block ends."""
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


@dataclass(frozen=True)
class ProcessRecord:
    description: str
    source: str  # "Ran", "HitLocally" or "HitRemotely"
    cache_scope: str  # "Always", "Successful", "PerRestartSuccessful", "PerSession", "Never"

    @property
    def cacheable(self) -> bool:
        return self.cache_scope in ("Always", "Successful")


@dataclass
class PantsRun:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    counters: dict[str, int] = field(default_factory=dict)
    processes: list[ProcessRecord] = field(default_factory=list)

    def check(self) -> PantsRun:
        if self.returncode != 0:
            # The log without the counters block, which would bury the error.
            log = self.stderr.split("[INFO] Counters:", 1)[0]
            raise AssertionError(
                f"`{' '.join(self.argv)}` exited {self.returncode} ({self.summary()}):\n{log[-8000:]}"
            )
        return self

    def compiles(self, source: str | None = None) -> list[ProcessRecord]:
        return [
            p
            for p in self.processes
            if p.description.startswith(COMPILE_PREFIX) and (source is None or p.source == source)
        ]

    def written(self) -> list[str]:
        """The dist/ paths the run reported writing (`Wrote dist/...`)."""
        return re.findall(r"\[INFO\] Wrote (dist/\S+)", self.stderr)

    def summary(self) -> str:
        by_source: dict[str, int] = {}
        for p in self.processes:
            by_source[p.source] = by_source.get(p.source, 0) + 1
        compiles = {s: len(self.compiles(s)) for s in ("Ran", "HitLocally", "HitRemotely")}
        keys = (
            "remote_cache_requests",
            "remote_cache_requests_cached",
            "remote_cache_requests_uncached",
            "remote_cache_read_errors",
            "remote_cache_write_successes",
            "remote_cache_write_errors",
            "local_execution_requests",
            "local_cache_requests_cached",
        )
        counters = ", ".join(f"{k}={self.counters.get(k, '?')}" for k in keys)
        return f"{self.wall_s:.1f} s; processes {by_source}; compiles {compiles}; {counters}"


def parse_counters(stderr: str) -> dict[str, int]:
    counters: dict[str, int] = {}
    block = stderr.split("[INFO] Counters:", 1)
    if len(block) == 2:
        for line in block[1].splitlines()[1:]:
            m = re.match(r"^  (\w+): (\d+)$", line)
            if not m:
                break
            counters[m.group(1)] = int(m.group(2))
    return counters


def parse_processes(workunit_dir: str) -> list[ProcessRecord]:
    records = []
    for path in glob.glob(os.path.join(workunit_dir, "*.json")):
        with open(path) as f:
            workunits = json.load(f)
        for wu in workunits:
            meta = wu.get("metadata") or {}
            if wu.get("name") != "process" or "source" not in meta:
                continue
            definition = json.loads(meta.get("definition", "{}"))
            records.append(
                ProcessRecord(
                    description=definition.get("description", wu.get("description", "")),
                    source=meta["source"],
                    cache_scope=definition.get("cache_scope", "?"),
                )
            )
    return records


def run_pants(
    repo: str,
    args: Sequence[str],
    *,
    local_store: str,
    remote_address: str | None,
    named_caches: str | None = None,
    env: Mapping[str, str] | None = None,
    remote_cache: bool = True,
    pantsd: bool = False,
    timeout: float = 1800,
) -> PantsRun:
    """One `./pants` run in repo with its own local store; the remote cache config when asked."""
    workunit_dir = tempfile.mkdtemp(prefix="workunits-")
    argv = ["./pants", "--pantsd" if pantsd else "--no-pantsd", f"--local-store-dir={local_store}"]
    if named_caches:
        argv.append(f"--named-caches-dir={named_caches}")
    if remote_cache:
        argv += [
            f"--pants-config-files={os.path.join(repo, REMOTE_CACHE_CONFIG)}",
            f"--remote-store-address={remote_address}",
        ]
    argv += [
        "--stats-log",
        f"--backend-packages=+['{WORKUNIT_LOGGER_BACKEND}']",
        "--workunit-logger-enabled",
        f"--workunit-logger-logdir={workunit_dir}",
        # --stats-log asks for the hdrhistogram plugin; the counters are all we read.
        "--ignore-warnings=+['Please run with `--plugins=hdrhistogram`']",
        *args,
    ]
    run_env = base_env()
    run_env.update(env or {})
    start = time.perf_counter()
    proc = subprocess.run(
        argv, cwd=repo, capture_output=True, text=True, env=run_env, timeout=timeout
    )
    wall = time.perf_counter() - start
    try:
        processes = parse_processes(workunit_dir)
    finally:
        shutil.rmtree(workunit_dir, ignore_errors=True)
    return PantsRun(
        argv=argv,
        returncode=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        wall_s=wall,
        counters=parse_counters(proc.stderr),
        processes=processes,
    )


def dist_digests(repo: str) -> dict[str, str]:
    """sha256 of every file under repo/dist, by path relative to dist/."""
    dist = os.path.join(repo, "dist")
    digests = {}
    for dirpath, _, filenames in os.walk(dist):
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                digests[os.path.relpath(path, dist)] = hashlib.sha256(f.read()).hexdigest()
    return digests


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
