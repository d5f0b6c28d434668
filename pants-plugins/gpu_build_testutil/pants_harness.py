"""Whole `./pants` runs in a copy of the checkout, for the integration tests and the benchmarks.

Used by the plugin's integration tests (resolve `pants-plugins`, CPython 3.9), by tests/remote_cache
(resolve `python-default`, CPython 3.10-3.12) and by the scripts in tests/bench (plain `python3`,
with pants-plugins/ on sys.path). Standard library only, so each of them can import it;
pants-plugins/BUILD gives it one owner per resolve.

What it reads back from a run:
- the compile processes that really ran, from Pants' log: a compile process is logged at INFO
  (`Completed: <description>`) only when it runs, never on a cache hit; one process may compile
  a source for several capabilities (`logged_pairs` counts those (source, capability) pairs);
- how long each logged process took, from its `Starting:` and `Completed:` lines;
- with `record=True`: every process of the run, from the workunit logger backend's JSON (its
  description, its cache scope and where its result came from: `Ran`, `HitLocally`,
  `HitRemotely`, which Pants records whether or not the process ran), and the counters that
  `--stats-log` prints (`remote_cache_requests_cached`, ...).
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

from gpu_build.util_rules.compile_description import CompileDescription, parse_compile_description

StrPath = Union[str, "os.PathLike[str]"]

WORKUNIT_LOGGER_BACKEND = "pants.backend.experimental.tools.workunit_logger"
# `HH:MM:SS.ss [INFO] Starting: <description>`, and `Completed:` when the process ends.
_LOG_LINE = re.compile(
    r"^(?P<time>\d\d:\d\d:\d\d\.\d\d) \[INFO\] (?P<event>Starting|Completed): (?P<what>.*)$",
    re.MULTILINE,
)
# ./pants' own knobs (where its venv lives, which CPython 3.9 runs Pants), not Pants options.
_PANTS_SCRIPT_VARS = ("PANTS_BOOTSTRAP_CACHE", "PANTS_PYTHON39")


def repo_root() -> str:
    """The checkout under test: $GPU_BUILD_REPO_ROOT (set by `[test].extra_env_vars`), else the
    checkout this file is in."""
    root = os.environ.get("GPU_BUILD_REPO_ROOT")
    if not root:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not all(os.path.exists(os.path.join(root, name)) for name in ("pants.toml", ".git")):
        raise RuntimeError(
            f"{root} is not a git checkout of the repository (no pants.toml or .git). Run the "
            "test through `./pants test`, which sets GPU_BUILD_REPO_ROOT via "
            "`[test].extra_env_vars`, or set it yourself."
        )
    return root


def base_env() -> dict[str, str]:
    """The nested Pants' environment: ours without Pants options (PANTS_*) and without what the
    outer Pants set for its test process (PEX_*, GPU_BUILD_REPO_ROOT); each run is configured
    explicitly."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith(("PANTS_", "PEX_")) or k == "GPU_BUILD_REPO_ROOT")
        or k in _PANTS_SCRIPT_VARS
    }
    env.setdefault("HOME", os.path.expanduser("~"))
    # Pants in a test sandbox hands us a minimal PATH; git, bash and pyenv live in the usual places.
    path = env.get("PATH", "")
    for extra in ("/usr/local/bin", "/usr/bin", "/bin"):
        if extra not in path.split(os.pathsep):
            path = f"{path}{os.pathsep}{extra}" if path else extra
    env["PATH"] = path
    env["LANG"] = env["LC_ALL"] = "C.UTF-8"
    return env


def find_cpython(minor: str) -> Optional[str]:
    """A CPython `minor` ("3.12") on base_env()'s PATH or under PYENV_ROOT, checked by running it
    (a pyenv shim may exist yet fail); None if there is none."""
    path = base_env()["PATH"]
    pyenv = os.path.join(os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv")), "versions")
    candidates = [shutil.which(f"python{minor}", path=path)]
    candidates += sorted(glob.glob(os.path.join(pyenv, f"{minor}.*", "bin", "python3")))
    for python in filter(None, candidates):
        probe = subprocess.run(
            [python, "-c", f"import sys; assert sys.version.startswith('{minor}.')"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if probe.returncode == 0:
            return python
    return None


def clone_checkout(source: StrPath, dest: StrPath) -> str:
    """`git clone` of source at dest, plus source's uncommitted changes (none in CI).

    The working tree's files are copied over the clone and the deleted ones removed, so a local
    run tests the working tree; in CI the tree is committed and this is a plain clone.
    """
    subprocess.run(
        ["git", "clone", "--quiet", os.fspath(source), os.fspath(dest)],
        check=True,
        capture_output=True,
        env=base_env(),
    )
    return copy_checkout(source, dest)


def copy_checkout(source: StrPath, dest: StrPath) -> str:
    """Makes dest's tracked and untracked-but-not-ignored files those of source's working tree:
    copies them as they are on disk and removes those deleted there. Returns dest."""
    source, dest = os.fspath(source), os.fspath(dest)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=source,
        check=True,
        stdout=subprocess.PIPE,
        env=base_env(),
    ).stdout.decode()
    copied = 0
    for rel in sorted(set(filter(None, listed.split("\0")))):
        src, dst = os.path.join(source, rel), os.path.join(dest, rel)
        if os.path.lexists(dst):
            os.remove(dst)
        if not os.path.lexists(src):
            continue  # deleted in the working tree
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)
        copied += 1
    if not copied or not os.path.isfile(os.path.join(dest, "pants")):
        raise RuntimeError(f"nothing to copy from {source}")
    return dest


@dataclass(frozen=True)
class ProcessRecord:
    description: str
    source: str  # "Ran", "HitLocally" or "HitRemotely"
    cache_scope: str  # "Always", "Successful", "PerRestartSuccessful", "PerSession", "Never"

    @property
    def cacheable(self) -> bool:
        return self.cache_scope in ("Always", "Successful")

    @property
    def compile(self) -> Optional[CompileDescription]:
        return parse_compile_description(self.description)


@dataclass(frozen=True)
class PantsRun:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    recorded: bool = False  # run with `record=True`: `counters` and `processes` are filled in
    counters: Mapping[str, int] = field(default_factory=dict)
    processes: tuple[ProcessRecord, ...] = ()

    def check(self) -> PantsRun:
        if self.returncode != 0:
            # The log without the counters block, which would bury the error.
            log = self.stderr.split("[INFO] Counters:", 1)[0]
            raise AssertionError(
                f"`{' '.join(self.argv)}` exited {self.returncode} ({self.summary()}):\n"
                f"{log[-8000:]}"
            )
        return self

    def logged_compiles(self) -> list[CompileDescription]:
        """Every compile process that really ran (not a cache hit), in log order."""
        completed = (what for _, event, what in log_events(self.stderr) if event == "Completed")
        return [c for c in map(parse_compile_description, completed) if c is not None]

    def logged_pairs(self) -> list[tuple[str, str]]:
        """(source, capability) of every compile done by the processes that really ran."""
        return [pair for c in self.logged_compiles() for pair in c.pairs()]

    def compile_processes(self, source: str | None = None) -> list[ProcessRecord]:
        """The recorded compile processes, or those whose result came from `source`."""
        return [
            p
            for p in self.processes
            if p.compile is not None and (source is None or p.source == source)
        ]

    def written(self) -> list[str]:
        """The dist/ paths the run reported writing (`Wrote dist/...`)."""
        return re.findall(r"\[INFO\] Wrote (dist/\S+)", self.stderr)

    def summary(self) -> str:
        text = (
            f"{self.wall_s:.1f} s; {len(self.logged_compiles())} compile processes logged "
            f"({len(self.logged_pairs())} (source, capability) pairs)"
        )
        if not self.recorded:
            return text
        by_source: dict[str, int] = {}
        for p in self.processes:
            by_source[p.source] = by_source.get(p.source, 0) + 1
        compiles = {s: len(self.compile_processes(s)) for s in ("Ran", "HitLocally", "HitRemotely")}
        counters = ", ".join(f"{k}={self.counters.get(k, '?')}" for k in _SUMMARY_COUNTERS)
        return f"{text}; processes {by_source}; compiles {compiles}; {counters}"


_SUMMARY_COUNTERS = (
    "remote_cache_requests",
    "remote_cache_requests_cached",
    "remote_cache_requests_uncached",
    "remote_cache_read_errors",
    "remote_cache_write_successes",
    "remote_cache_write_errors",
    "local_execution_requests",
    "local_cache_requests_cached",
)


def log_events(stderr: str) -> list[tuple[datetime, str, str]]:
    """(time, `Starting` or `Completed`, description) of each process line Pants logged."""
    return [
        (datetime.strptime(m["time"], "%H:%M:%S.%f"), m["event"], m["what"])
        for m in _LOG_LINE.finditer(stderr)
    ]


def log_spans(stderr: str) -> list[tuple[str, float]]:
    """(description, seconds from `Starting:` to `Completed:`) of each logged process."""
    started: dict[str, datetime] = {}
    spans = []
    for stamp, event, what in log_events(stderr):
        if event == "Starting":
            started[what] = stamp
        elif what in started:
            spans.append((what, (stamp - started.pop(what)).total_seconds()))
    return spans


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


def record_options(workunit_dir: str) -> list[str]:
    """The options that make a run print its counters and log its workunits to workunit_dir."""
    return [
        "--stats-log",
        f"--backend-packages=+['{WORKUNIT_LOGGER_BACKEND}']",
        "--workunit-logger-enabled",
        f"--workunit-logger-logdir={workunit_dir}",
        # --stats-log asks for the hdrhistogram plugin; the counters are all we read.
        "--ignore-warnings=+['Please run with `--plugins=hdrhistogram`']",
    ]


def run_pants(
    repo: StrPath,
    args: Sequence[str],
    *,
    local_store: StrPath | None,
    env: Mapping[str, str] | None = None,
    wrapper: Sequence[str] = (),
    pantsd: bool = False,
    record: bool = False,
    timeout: float = 1800,
    launcher: StrPath = "./pants",
) -> PantsRun:
    """One `./pants` run in repo, with its own local store (None: Pants' default one).

    env: set over `base_env()`; wrapper: a command line that runs `./pants ...` (its arguments);
    pantsd: run through repo's pantsd, started by the first such run (`stop_pantsd` ends it):
    only for runs between which nothing Pants reads in repo changes (pantsd learns of edits from
    its file watcher, asynchronously); record: fill in the run's counters and processes (see the
    module's docstring); launcher: the script that runs Pants (another checkout's `pants`, for a
    repo that has none of its own)."""
    run = _run_pants(repo, args, local_store, env, wrapper, pantsd, record, timeout, launcher)
    if pantsd and run.returncode != 0 and _PANTSD_START_TIMEOUT in run.stderr:
        # Pants' client gives the pantsd it launches 60 s to start (fixed in Pants 2.17.1); a
        # loaded machine can take longer (seen: 65 s at a load of 9 on 2 cores). The same run
        # without it; the pantsd, once up, serves the later runs.
        print(f"pantsd did not start within Pants' 60 s: `{' '.join(args)}` again without it")
        run = _run_pants(repo, args, local_store, env, wrapper, False, record, timeout, launcher)
    return run


_PANTSD_START_TIMEOUT = "seconds while waiting for pantsd"  # to start, socket to be opened


def _run_pants(
    repo: StrPath,
    args: Sequence[str],
    local_store: StrPath | None,
    env: Mapping[str, str] | None,
    wrapper: Sequence[str],
    pantsd: bool,
    record: bool,
    timeout: float,
    launcher: StrPath,
) -> PantsRun:
    workunit_dir = tempfile.mkdtemp(prefix="workunits-")
    argv = [os.fspath(launcher), "--pantsd" if pantsd else "--no-pantsd"]
    if local_store is not None:
        argv.append(f"--local-store-dir={os.fspath(local_store)}")
    argv += [*(record_options(workunit_dir) if record else ()), *args]
    run_env = {**base_env(), **(env or {})}
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [*wrapper, *argv],
            cwd=repo,
            env=run_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
            timeout=timeout,
        )
        wall = time.perf_counter() - start
        processes = parse_processes(workunit_dir) if record else []
    finally:
        shutil.rmtree(workunit_dir, ignore_errors=True)
    return PantsRun(
        argv=tuple(argv),
        returncode=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        wall_s=wall,
        recorded=record,
        counters=parse_counters(proc.stderr) if record else {},
        processes=tuple(processes),
    )


def _cpu_seconds(pid: int) -> Optional[float]:
    """CPU time of a process and its reaped children (Linux /proc), None if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def stop_pantsd(repo: StrPath, wait_s: float = 30.0) -> list[int]:
    """Ends the pantsd that `run_pants(repo, ..., pantsd=True)` left running in repo (the one
    whose pid Pants recorded under repo/.pids), by its pid: SIGTERM, then SIGKILL after wait_s.
    Prints the CPU time it used (its work is not in the test process's children's). Returns the
    pids signalled."""
    stopped = []
    for pid_file in glob.glob(os.path.join(os.fspath(repo), ".pids", "*", "pantsd", "pid")):
        try:
            with open(pid_file) as f:
                pid = int(f.read().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().decode(errors="replace")
            if not title.startswith(f"pantsd [{os.path.realpath(repo)}]"):
                continue  # not that pantsd (any more): a stale pid file
            cpu = _cpu_seconds(pid)
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            continue  # gone already, or no pid written
        print(f"stopped pantsd {pid} of {repo}: {cpu if cpu is None else round(cpu, 1)} s CPU")
        stopped.append(pid)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.2)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return stopped


def bootstrap_cache(name: str) -> Path:
    """Where the tests keep what they fetch once (`$PANTS_BOOTSTRAP_CACHE`, default
    ~/.cache/gpu_build_bootstrap): one directory `name` each (openssh-server, aarch64)."""
    root = os.environ.get("PANTS_BOOTSTRAP_CACHE") or os.path.expanduser(
        "~/.cache/gpu_build_bootstrap"
    )
    return Path(root) / name


def has_cuda_driver() -> bool:
    """Whether this machine's driver library loads (where it does, apps really run)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def tree_digests(path: StrPath) -> dict[str, str]:
    """sha256 of every file under path, by path relative to it."""
    digests = {}
    for dirpath, _, filenames in os.walk(path):
        for name in sorted(filenames):
            file = os.path.join(dirpath, name)
            with open(file, "rb") as f:
                digests[os.path.relpath(file, path)] = hashlib.sha256(f.read()).hexdigest()
    return dict(sorted(digests.items()))
