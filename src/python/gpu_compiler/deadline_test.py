"""The compile's time limit: it stops a blocked import and names the kernel file it was in."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

import pytest

from gpu_compiler.deadline import CompileDeadline, deadline


def _load(path: str) -> None:
    spec = importlib.util.spec_from_file_location("blocked_kernel", path)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_a_blocked_import_is_stopped_at_its_file_and_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open("k.py", "w") as f:
        f.write("import time\n\ntry:\n    time.sleep(30)\nexcept Exception:\n    pass\n")
    start = time.monotonic()
    with pytest.raises(CompileDeadline) as info:
        with deadline(0.5):
            _load("k.py")
    assert (
        time.monotonic() - start < 10
    )  # not the 30 s sleep, and `except Exception` did not hold it
    assert info.value.where == ("k.py", 4)
    text = info.value.report("k.py")
    assert text.startswith("k.py:4: error: the compile did not finish within 0.5 s: it was still")
    assert "[gpu-toolchains].compile_timeout" in text and "\n" not in text


def test_a_module_the_kernel_imports_is_named_with_the_kernel(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = CompileDeadline(2.0, ("helpers/slow.py", 7))
    assert err.report("k.py").startswith(
        "helpers/slow.py:7: error: the compile did not finish within 2 s: it was still running "
        "line 7 of helpers/slow.py (a module k.py imports); fix: "
    )
    assert CompileDeadline(2.0, None).report("k.cu").startswith("k.cu: error: the compile did")


def test_no_limit_and_the_alarm_is_cleared_after(tmp_path):
    with deadline(None):
        time.sleep(0.01)
    with deadline(5):
        pass
    time.sleep(0.01)  # a stale alarm would fire into this test's process later
    import signal

    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_a_bad_limit_is_a_usage_error(tmp_path, value):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.path.join(here, "..", "spec")]))
    env["GPU_COMPILER_TIMEOUT"] = value
    argv = ["compile", "--source", "k.py", "--capability", "sm_90", "--out-dir", "out"]
    p = subprocess.run(
        [sys.executable, "-m", "gpu_compiler", *argv],
        cwd=str(tmp_path),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
    )
    assert p.returncode == 2, p.stderr
    assert (
        "$GPU_COMPILER_TIMEOUT: expected a positive number of seconds, got %r" % value in p.stderr
    )
