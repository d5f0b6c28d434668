"""The compiler's fingerprint: what the JIT cache keys on besides a kernel's inputs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from gpu_compiler.fingerprint import code_sha256, fingerprint


def test_cli_prints_what_the_function_returns() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run(
        [sys.executable, "-m", "gpu_compiler", "fingerprint"],
        env=env,
        stdout=subprocess.PIPE,
        check=True,
        universal_newlines=True,
    ).stdout
    assert json.loads(out) == fingerprint()
    assert fingerprint()["toolchain"]["nvrtc"] == "13.0.88"  # the cuda13 toolchain's NVRTC wheel


def test_code_hash_covers_each_module(tmp_path, monkeypatch) -> None:
    import gpu_compiler

    before = code_sha256()
    fake_pkg = tmp_path / "gpu_compiler"
    shutil.copytree(
        os.path.dirname(gpu_compiler.__file__),
        fake_pkg,
        ignore=shutil.ignore_patterns("__pycache__", "*_test.py"),
    )
    monkeypatch.setattr(gpu_compiler, "__file__", str(fake_pkg / "__init__.py"))
    assert code_sha256() == before
    for module in ("compile.py", "numba/backend.py"):  # the package's and a subpackage's
        path = fake_pkg / module
        path.write_bytes(path.read_bytes() + b"\n# x\n")
        assert code_sha256() != before
        path.write_bytes(path.read_bytes()[:-5])
        assert code_sha256() == before
    (fake_pkg / "compile_test.py").write_bytes(b"changed")  # tests are not compiler code
    (fake_pkg / "testdata").mkdir(exist_ok=True)  # nor is a directory that is no package
    (fake_pkg / "testdata" / "kernel.py").write_bytes(b"changed")
    assert code_sha256() == before
