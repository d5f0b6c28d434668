"""Tests for the pure architecture / PTX ISA tables (no CUDA needed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpu_compiler import arch


def test_capabilities_table():
    for cap in ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_120"):
        assert cap in arch.CAPABILITIES
    # Oldest first, and every entry parses.
    nums = [int(c[3:]) for c in arch.CAPABILITIES]
    assert nums == sorted(nums)


@pytest.mark.parametrize(
    "cap,expected",
    [("sm_75", (7, 5)), ("sm_87", (8, 7)), ("sm_90", (9, 0)), ("sm_100", (10, 0)), ("sm_120", (12, 0))],
)
def test_parse_capability(cap, expected):
    assert arch.parse_capability(cap) == expected
    assert arch.capability_from_tuple(expected) == cap


@pytest.mark.parametrize("bad", ["sm_91", "sm90", "compute_90", "sm_90a", "", "SM_90", None, 90])
def test_parse_capability_rejects_and_lists_valid(bad):
    with pytest.raises(ValueError) as e:
        arch.parse_capability(bad)
    msg = str(e.value)
    assert "sm_75" in msg and "sm_90" in msg and "expected one of" in msg


def test_min_ptx_isa_per_capability():
    assert arch.min_ptx_isa("sm_75") == "6.3"
    assert arch.min_ptx_isa("sm_80") == "7.0"
    assert arch.min_ptx_isa("sm_86") == "7.1"
    assert arch.min_ptx_isa("sm_87") == "7.4"
    assert arch.min_ptx_isa("sm_89") == "7.8"
    assert arch.min_ptx_isa("sm_90") == "7.8"
    assert arch.min_ptx_isa("sm_100") == "8.6"
    assert arch.min_ptx_isa("sm_120") == "8.7"


@pytest.mark.parametrize(
    "isa,driver",
    [
        ("7.4", "11.4"),
        ("7.8", "11.8"),
        ("8.0", "12.0"),
        ("8.1", "12.1"),
        ("8.2", "12.2"),
        ("8.3", "12.3"),
        ("8.4", "12.4"),
        ("8.5", "12.5"),
        ("8.6", "12.7"),
        ("8.7", "12.8"),
        ("8.8", "12.9"),
        ("9.0", "13.0"),
    ],
)
def test_min_driver_for_ptx(isa, driver):
    assert arch.min_driver_for_ptx(isa) == driver


def test_min_driver_unknown_isa():
    with pytest.raises(ValueError, match="unknown PTX ISA"):
        arch.min_driver_for_ptx("8.9")
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        arch.min_driver_for_ptx("nine")


def test_toolchain_ptx_isa():
    assert arch.toolchain_ptx_isa("12.6") == "8.5"
    assert arch.toolchain_ptx_isa("12.5") == "8.5"
    assert arch.toolchain_ptx_isa("13.0") == "9.0"
    assert arch.toolchain_ptx_isa("99.9") is None
    assert arch.toolchain_ptx_isa("garbage") is None


def test_every_capability_isa_is_known_to_driver_table():
    for cap in arch.CAPABILITIES:
        arch.min_driver_for_ptx(arch.min_ptx_isa(cap))


def test_supported_capabilities():
    cu126 = arch.supported_capabilities("8.5")
    assert "sm_87" in cu126 and "sm_90" in cu126
    assert "sm_100" not in cu126 and "sm_120" not in cu126
    assert set(arch.supported_capabilities("9.0")) == set(arch.CAPABILITIES)


def test_validate_ptx_version_accepts():
    assert arch.validate_ptx_version("8.5", "sm_90", "9.0") == "8.5"
    assert arch.validate_ptx_version("7.8", "sm_90", "9.0") == "7.8"
    assert arch.validate_ptx_version("9.0", "sm_90", "9.0") == "9.0"
    assert arch.validate_ptx_version("7.4", "sm_87", "8.5") == "7.4"


def test_validate_ptx_version_too_new():
    with pytest.raises(ValueError) as e:
        arch.validate_ptx_version("9.9", "sm_90", "9.0")
    assert "newer than the toolchain" in str(e.value) and "9.0" in str(e.value)


def test_validate_ptx_version_too_old_for_capability():
    with pytest.raises(ValueError) as e:
        arch.validate_ptx_version("7.4", "sm_90", "9.0")
    msg = str(e.value)
    assert "too old for sm_90" in msg and "7.8" in msg


def test_validate_ptx_version_bad_inputs():
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        arch.validate_ptx_version("8", "sm_90", "9.0")
    with pytest.raises(ValueError, match="invalid GPU capability"):
        arch.validate_ptx_version("8.5", "sm_91", "9.0")
    with pytest.raises(ValueError, match="not a known PTX ISA"):
        arch.validate_ptx_version("8.9", "sm_90", "9.0")


def test_light_imports_pull_in_nothing_heavy():
    """The Pants plugin imports these on CPython 3.9 without any CUDA stack."""
    src_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        "import sys, gpu_compiler, gpu_compiler.arch, gpu_compiler.errors\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numba', 'numpy', 'cuda', 'llvmlite'))\n"
        "assert not heavy, heavy\n"
    )
    env = dict(os.environ, PYTHONPATH=src_root)
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_light_modules_run_on_python39():
    py39 = os.path.expanduser("~/.pyenv/versions/3.9.18/bin/python")
    if not os.path.exists(py39):
        pytest.skip("CPython 3.9 not installed at %s" % py39)
    src_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        "import glob, os, sys\n"
        "import gpu_compiler.arch as a\n"
        "assert a.parse_capability('sm_87') == (8, 7)\n"
        "for path in sorted(glob.glob(os.path.join(sys.argv[1], '*.py'))):\n"
        "    with open(path) as f:\n"
        "        compile(f.read(), path, 'exec')\n"
    )
    env = dict(os.environ, PYTHONPATH=src_root, PYTHONDONTWRITEBYTECODE="1")
    subprocess.run([py39, "-c", code, os.path.join(src_root, "gpu_compiler")], check=True, env=env)
