"""Where JIT mode's compiler comes from ($GPU_RUNTIME_TOOLCHAIN, this interpreter, neither)."""

from __future__ import annotations

import hashlib
import sys
import zipfile

import pytest

from gpu_runtime.jit.compiler import (
    Compiler,
    CompilerNotFoundError,
    EarlyStartUnsupported,
    compiler_from,
    find_compiler,
)


def test_a_toolchain_pex_is_identified_by_its_pex_info(tmp_path) -> None:
    pex = tmp_path / "toolchain.pex"
    with zipfile.ZipFile(pex, "w") as z:
        z.writestr("PEX-INFO", b'{"code_hash": "c1", "distributions": {"numba": "d1"}}')
        z.writestr("__main__.py", "raise SystemExit('must not run for a fingerprint')")
    compiler = compiler_from(str(pex), {})
    assert compiler.command == (str(pex),) and compiler.env["PEX_MODULE"] == "gpu_compiler"
    expected = hashlib.sha256(b'{"code_hash": "c1", "distributions": {"numba": "d1"}}')
    assert compiler.fingerprint() == {"toolchain_pex": expected.hexdigest()}


def test_an_interpreter_or_venv_runs_gpu_compiler_as_a_module(tmp_path) -> None:
    assert compiler_from(sys.executable, {}).command == (sys.executable, "-m", "gpu_compiler")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    assert compiler_from(str(venv), {}).command[0] == str(venv / "bin" / "python")


def test_something_else_is_refused_with_the_fix(tmp_path) -> None:
    junk = tmp_path / "junk.txt"
    junk.write_text("x")
    with pytest.raises(CompilerNotFoundError, match="toolchain-cuda13"):
        compiler_from(str(junk), {})


def test_the_variable_wins_and_nothing_is_run_to_find_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("gpu_runtime.jit.compiler._importable_here", lambda: False)
    assert find_compiler({}) is None
    compiler = find_compiler({"GPU_RUNTIME_TOOLCHAIN": sys.executable})
    assert compiler is not None and compiler.command[0] == sys.executable


OLD_COMPILER = """
import argparse, sys
p = argparse.ArgumentParser(prog="python -m gpu_compiler")
p.add_argument("command")
p.add_argument("--source")
p.add_argument("--capability", required=True)
p.add_argument("--out-dir")
p.parse_args()
"""


def test_a_toolchain_older_than_the_early_start_is_named_with_the_fix(tmp_path) -> None:
    """A toolchain PEX built before `--capability-from-stdin` existed: its own error (JIT mode
    then compiles the usual way, cache_test), one line saying to rebuild it, not argparse's."""
    compiler = Compiler((sys.executable, "-c", OLD_COMPILER), {}, "the toolchain PEX old.pex")
    pending = compiler.start(["--source", "k.py", "--out-dir", "o"], str(tmp_path), "compiling k")
    with pytest.raises(EarlyStartUnsupported) as e:
        pending.finish("sm_90")
    assert "is older than this gpu_runtime" in str(e.value)
    assert "pants package src/python/gpu_compiler:toolchain-cuda13" in str(e.value)
    pending.cancel()  # after finish: nothing left to end


def test_the_compiler_sees_no_home_and_no_user_site() -> None:
    """HOME would add ~/.local/lib/pythonX.Y/site-packages to the compiler's imports and let it
    read the user's files, none of which a JIT key covers: the compiler gets a fixed HOME and
    the PEX_ROOT the app would use."""
    from gpu_runtime.jit.compiler import compiler_environment

    app = {"HOME": "/home/u", "PATH": "/bin", "NUMBA_OPT": "0", "TMPDIR": "/t"}
    env = compiler_environment(app, "/src")
    assert env == {
        "PATH": "/bin",
        "TMPDIR": "/t",
        "PEX_ROOT": "/home/u/.pex",
        "HOME": "/nonexistent",
        "PYTHONNOUSERSITE": "1",
        "GPU_COMPILER_TIMEOUT": "600",
        "PYTHONPATH": "/src",
    }
    assert compiler_environment(dict(app, HOME="/elsewhere", PEX_ROOT="/p"))["PEX_ROOT"] == "/p"
    # two users' environments give the compiler the same environment but for PEX_ROOT
    one = compiler_environment(dict(app, HOME="/home/a", PEX_ROOT="/p"))
    two = compiler_environment(dict(app, HOME="/home/b", PEX_ROOT="/p"))
    assert one == two
