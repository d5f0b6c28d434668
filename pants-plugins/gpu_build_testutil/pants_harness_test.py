"""The harness's reading of a Pants run, on a log written here, and its checkout copy."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpu_build.util_rules.compile_description import CompileDescription, format_compile_description
from gpu_build_testutil.pants_harness import (
    PantsRun,
    base_env,
    copy_checkout,
    log_spans,
    parse_counters,
    run_pants,
    stop_pantsd,
    tree_digests,
)

SAXPY = "src/python/imaging/kernels/saxpy.py"
SOBEL = "src/python/imaging/kernels/sobel.cu"


def compile_line(time: str, event: str, source: str, *capabilities: str) -> str:
    description = format_compile_description(
        source=source, capabilities=capabilities, toolchain="cuda13"
    )
    return f"{time} [INFO] {event}: {description}"


LOG = "\n".join(
    [
        "08:23:10.85 [INFO] Starting: Build the GPU kernel toolchain cuda13 (cuda13)",
        compile_line("08:23:20.00", "Starting", SAXPY, "sm_90"),
        compile_line("08:23:20.10", "Starting", SOBEL, "sm_80", "sm_87"),
        "08:23:20.50 [INFO] Completed: Build the GPU kernel toolchain cuda13 (cuda13)",
        compile_line("08:23:22.60", "Completed", SOBEL, "sm_80", "sm_87"),
        compile_line("08:23:23.25", "Completed", SAXPY, "sm_90"),
        "08:23:45.60 [INFO] Wrote dist/imaging_h200",
        "  app.pex + 14 kernel files for sm_90 (driver 13.0)",
        "08:23:45.61 [INFO] Counters:",
        "  local_cache_requests_cached: 12",
        "  remote_cache_requests: 0",
        "",
    ]
)


def run(stderr: str = LOG, returncode: int = 0) -> PantsRun:
    return PantsRun(("./pants", "package", "::"), returncode, "", stderr, 1.5)


def test_logged_compiles_are_the_completed_ones_in_log_order() -> None:
    assert run().logged_compiles() == [
        CompileDescription(SOBEL, ("sm_80", "sm_87"), "cuda13"),
        CompileDescription(SAXPY, ("sm_90",), "cuda13"),
    ]
    assert run().logged_pairs() == [(SOBEL, "sm_80"), (SOBEL, "sm_87"), (SAXPY, "sm_90")]
    started_only = "\n".join(line for line in LOG.splitlines() if "Completed" not in line)
    assert run(started_only).logged_compiles() == []
    assert run(started_only).logged_pairs() == []


def test_log_spans() -> None:
    spans = [(what, round(seconds, 2)) for what, seconds in log_spans(LOG)]
    assert spans == [
        ("Build the GPU kernel toolchain cuda13 (cuda13)", 9.65),
        (f"Compile {SOBEL} for sm_80, sm_87 (cuda13)", 2.5),
        (f"Compile {SAXPY} for sm_90 (cuda13)", 3.25),
    ]


def test_written_and_counters() -> None:
    assert run().written() == ["dist/imaging_h200"]
    assert parse_counters(LOG) == {"local_cache_requests_cached": 12, "remote_cache_requests": 0}


def test_check() -> None:
    assert run().check().returncode == 0
    logged = r"2 compile processes logged \(3 \(source, capability\) pairs\)"
    with pytest.raises(AssertionError, match=rf"exited 1 .*{logged}"):
        run(returncode=1).check()


def test_base_env_drops_pants_options_and_the_test_process_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {
        "PANTS_CONFIG_FILES": "x.toml",
        "PANTS_PEX_CLI_VERSION": "v2.3.3",
        "PEX_EXTRA_SYS_PATH": "src",
        "GPU_BUILD_REPO_ROOT": "/repo",
        "PANTS_BOOTSTRAP_CACHE": "/cache",
        "PYENV_ROOT": "/pyenv",
        "PATH": "/opt/bin",
    }.items():
        monkeypatch.setenv(name, value)
    env = base_env()
    assert not {"PANTS_CONFIG_FILES", "PANTS_PEX_CLI_VERSION", "PEX_EXTRA_SYS_PATH"} & set(env)
    assert "GPU_BUILD_REPO_ROOT" not in env
    assert env["PANTS_BOOTSTRAP_CACHE"] == "/cache" and env["PYENV_ROOT"] == "/pyenv"
    assert env["PATH"] == os.pathsep.join(["/opt/bin", "/usr/local/bin", "/usr/bin", "/bin"])
    assert env["LANG"] == env["LC_ALL"] == "C.UTF-8"


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=base_env())


def test_copy_checkout_mirrors_the_working_tree(tmp_path: Path) -> None:
    source, dest = tmp_path / "source", tmp_path / "dest"
    source.mkdir()
    (source / ".gitignore").write_text("ignored.txt\n")
    for name in ("pants", "kept.txt", "deleted.txt", "ignored.txt", "sub/new.txt"):
        (source / name).parent.mkdir(exist_ok=True)
        (source / name).write_text(name)
    git(source, "init", "-q")
    git(source, "add", ".gitignore", "pants", "kept.txt", "deleted.txt")
    (source / "deleted.txt").unlink()
    (source / "kept.txt").write_text("edited")
    dest.mkdir()
    (dest / "deleted.txt").write_text("stale")

    assert copy_checkout(source, dest) == str(dest)
    assert tree_digests(dest).keys() == {".gitignore", "pants", "kept.txt", "sub/new.txt"}
    assert (dest / "kept.txt").read_text() == "edited"


FAKE_PANTS = """#!/bin/bash
echo "$@" >> calls
if [ "$1" = --pantsd ]; then
  echo "pants.pantsd.process_manager.ProcessManager.Timeout: exceeded timeout of 60 seconds \
while waiting for pantsd to start" >&2
  exit 1
fi
echo done
"""


def test_a_pantsd_that_does_not_start_in_time_is_done_without(tmp_path: Path) -> None:
    """Pants' client gives a pantsd 60 s to start; past that the run is made without pantsd."""
    (tmp_path / "pants").write_text(FAKE_PANTS)
    (tmp_path / "pants").chmod(0o755)
    run = run_pants(tmp_path, ["package", "::"], local_store=None, pantsd=True)
    assert run.check().stdout == "done\n"
    assert (tmp_path / "calls").read_text().splitlines() == [
        "--pantsd package ::",
        "--no-pantsd package ::",
    ]
    other = run_pants(tmp_path, ["package", "::"], local_store=None, pantsd=False)
    assert other.returncode == 0 and len((tmp_path / "calls").read_text().splitlines()) == 3


def test_stop_pantsd_ends_only_that_repos_pantsd(tmp_path: Path) -> None:
    pid_dir = tmp_path / ".pids" / "abc" / "pantsd"
    pid_dir.mkdir(parents=True)
    (pid_dir / "pid").write_text(str(os.getpid()))  # a stale pid file naming this process
    assert stop_pantsd(tmp_path) == []
    (pid_dir / "pid").write_text("not a pid")
    assert stop_pantsd(tmp_path) == []
    assert stop_pantsd(tmp_path / "nowhere") == []
