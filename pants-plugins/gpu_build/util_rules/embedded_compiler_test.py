"""The compiler the plugin wheel embeds, read by the rule that feeds the toolchain PEX: what
`embedded_files` takes and leaves, the Digest `compiler_sources` returns with
`[gpu-toolchains].compiler` unset, and the error in a source checkout, which has no
`gpu_build/_embedded/` (the wheel itself is checked by plugin_wheel_integration_test)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pants.backend.python import target_types_rules
from pants.backend.python.util_rules import python_sources
from pants.core.util_rules import source_files
from pants.engine.fs import Digest, DigestContents
from pants.engine.internals.scheduler import ExecutionError
from pants.testutil.rule_runner import QueryRule, RuleRunner

from gpu_build import register
from gpu_build.util_rules import embedded_compiler
from gpu_build.util_rules.embedded_compiler import EMBEDDED_DIR, embedded_files
from gpu_build.util_rules.toolchain import CompilerSources


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def fake_package(tmp_path: Path) -> Path:
    """A gpu_build package directory as pip installs the wheel: _embedded/ with bytecode."""
    write(
        tmp_path / "gpu_build" / EMBEDDED_DIR,
        {
            "gpu_compiler/__init__.py": "",
            "gpu_compiler/__main__.py": "print('compiler')\n",
            "gpu_compiler/__pycache__/cli.cpython-39.pyc": "bytecode",
            "gpu_spec/ptx_isa.py": "ISA = {}\n",
            "gpu_spec/README.md": "not code",
        },
    )
    return tmp_path / "gpu_build"


def test_embedded_files_are_the_python_files_without_bytecode(tmp_path: Path) -> None:
    files = embedded_files(fake_package(tmp_path) / EMBEDDED_DIR)
    assert [f.path for f in files] == [
        "gpu_compiler/__init__.py",
        "gpu_compiler/__main__.py",
        "gpu_spec/ptx_isa.py",
    ]
    assert files[1].content == b"print('compiler')\n"
    assert embedded_files(tmp_path / "missing") == []


@pytest.fixture
def rule_runner() -> RuleRunner:
    return RuleRunner(
        rules=[
            *register.kernel_rules(),
            *source_files.rules(),
            *python_sources.rules(),
            *target_types_rules.rules(),
            QueryRule(CompilerSources, []),
            QueryRule(DigestContents, [Digest]),
        ],
    )


def test_compiler_unset_takes_the_embedded_compiler(
    rule_runner: RuleRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = fake_package(tmp_path)
    monkeypatch.setattr(embedded_compiler, "embedded_root", lambda: package / EMBEDDED_DIR)
    sources = rule_runner.request(CompilerSources, [])
    contents = rule_runner.request(DigestContents, [sources.digest])
    assert {c.path: c.content for c in contents} == {
        "gpu_compiler/__init__.py": b"",
        "gpu_compiler/__main__.py": b"print('compiler')\n",
        "gpu_spec/ptx_isa.py": b"ISA = {}\n",
    }


def test_a_source_checkout_has_no_embedded_compiler(rule_runner: RuleRunner) -> None:
    with pytest.raises(ExecutionError) as e:
        rule_runner.request(CompilerSources, [])
    message = " ".join(str(e.value).split())
    assert "gpu_build/_embedded/gpu_compiler/__main__.py is missing" in message
    assert "Fix: set `[gpu-toolchains].compiler`" in message
