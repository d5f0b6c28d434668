"""The app PEX's stripping process, built purely and asserted without the engine (as Pants' own
docker_binary_test does); scripts/strip_pex_test.py tests what it runs."""

from __future__ import annotations

import types

import pytest
from pants.engine.fs import Digest

from gpu_build.subsystems.bundle import DEFAULT_STRIP
from gpu_build.util_rules.bundle_field_set import DeployBundleError
from gpu_build.util_rules.bundle_pex import (
    OUT_DIR,
    pinned_keys_source,
    refuse_jit_fallback_if_signed,
    strip_process,
)
from gpu_build_testutil.venv_pex import fake_venv_pex
from gpu_spec.signature import SignatureFormatError, pinned_keys_of


def test_strip_process_reads_the_pex_and_writes_it_under_its_own_directory() -> None:
    tool = fake_venv_pex("gpu_bundle_strip_pex.pex")
    pex = Digest("2" * 64, 300)
    process = strip_process(
        tool, pex, "imaging_h200/app.pex", DEFAULT_STRIP, -1, "src/python/imaging:imaging_h200"
    )
    assert process.venv_pex is tool and process.input_digest is pex
    assert process.argv == (
        "imaging_h200/app.pex",
        "__stripped/imaging_h200/app.pex",
        "--max-install-jobs",
        "-1",
        "*.pyx",
        "*.pxd",
        "*.pxi",
        "*.c",
        "*.cpp",
    )
    assert process.output_directories == (OUT_DIR,) and process.output_files is None
    # A gpu_toolchain's PEX: nothing stripped and PEX-INFO's install jobs left alone, but the
    # process still runs (it drops PEX_ROOT's bytecode and normalises modes).
    plain = strip_process(tool, pex, "a/t.pex", (), None, "a:t")
    assert plain.argv == ("a/t.pex", "__stripped/a/t.pex")
    assert process.description == (
        "Normalise and strip the wheels in imaging_h200/app.pex "
        "(src/python/imaging:imaging_h200)"
    )


def test_pinned_keys_are_a_module_of_the_app_that_the_runtime_reads_back() -> None:
    keys = ("ab" * 32, "0123456789abcdef" * 4)
    source = pinned_keys_source(keys)
    assert source.path == "gpu_bundle_pinned_keys.py" and not source.is_executable
    module = types.ModuleType("gpu_bundle_pinned_keys")
    exec(compile(source.content, source.path, "exec"), module.__dict__)
    assert pinned_keys_of(module, source.path) == tuple(bytes.fromhex(k) for k in keys)
    assert pinned_keys_source(keys).content == source.content  # the same bytes every build


def test_a_pinned_key_that_is_not_one_is_refused() -> None:
    with pytest.raises(SignatureFormatError, match="not an ed25519 public key"):
        pinned_keys_source(["'); import os; os.system('true'); ('"])


def test_jit_fallback_on_a_signed_bundle_is_refused_naming_the_bundle_and_both_fixes() -> None:
    refuse_jit_fallback_if_signed("src/app:bundle", jit_fallback=True, signed=False)
    refuse_jit_fallback_if_signed("src/app:bundle", jit_fallback=False, signed=True)
    with pytest.raises(DeployBundleError) as e:
        refuse_jit_fallback_if_signed("src/app:bundle", jit_fallback=True, signed=True)
    message = str(e.value)
    assert "\n" not in message
    assert "src/app:bundle" in message and "never JIT-compiles" in message
    assert "Remove `jit_fallback=True`" in message and "unsigned" in message
