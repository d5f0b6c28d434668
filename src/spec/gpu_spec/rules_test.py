"""The shared rules: capabilities, versions, PTX ISA and what a driver loads."""

from __future__ import annotations

import ast
import pathlib

import pytest

from gpu_spec import capabilities as caps
from gpu_spec import ptx_isa
from gpu_spec.versions import driver_version, parse_version


def test_capabilities_table():
    for cap in ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_120"):
        assert cap in caps.CAPABILITIES
    # Oldest first, and every entry parses.
    assert caps.CAPABILITIES.index("sm_90") < caps.CAPABILITIES.index("sm_100")
    assert caps.sort_capabilities(["sm_100", "sm_90", "sm_90"]) == ["sm_90", "sm_100"]


@pytest.mark.parametrize(
    "cap,expected",
    [
        ("sm_75", (7, 5)),
        ("sm_87", (8, 7)),
        ("sm_90", (9, 0)),
        ("sm_100", (10, 0)),
        ("sm_120", (12, 0)),
    ],
)
def test_parse_capability(cap, expected):
    assert caps.parse_capability(cap) == expected
    assert caps.capability_name(expected) == cap


@pytest.mark.parametrize("bad", ["sm_91", "sm90", "compute_90", "sm_90a", "", "SM_90", None, 90])
def test_parse_capability_rejects_and_lists_valid(bad):
    with pytest.raises(ValueError) as e:
        caps.parse_capability(bad)
    msg = str(e.value)
    assert "sm_75" in msg and "sm_90" in msg and "expected one of" in msg


def test_min_ptx_isa_per_capability():
    assert caps.min_ptx_isa("sm_75") == "6.3"
    assert caps.min_ptx_isa("sm_80") == "7.0"
    assert caps.min_ptx_isa("sm_86") == "7.1"
    assert caps.min_ptx_isa("sm_87") == "7.4"
    assert caps.min_ptx_isa("sm_89") == "7.8"
    assert caps.min_ptx_isa("sm_90") == "7.8"
    assert caps.min_ptx_isa("sm_100") == "8.6"
    assert caps.min_ptx_isa("sm_120") == "8.7"


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
        ("9.1", "13.1"),
    ],
)
def test_min_driver_for_ptx(isa, driver):
    assert ptx_isa.min_driver_for_ptx(isa) == driver


def test_min_driver_unknown_isa():
    with pytest.raises(ValueError, match="unknown PTX ISA"):
        ptx_isa.min_driver_for_ptx("8.9")
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        ptx_isa.min_driver_for_ptx("nine")


def test_toolchain_ptx_isa():
    assert ptx_isa.toolchain_ptx_isa("12.6") == "8.5"
    assert ptx_isa.toolchain_ptx_isa("12.5") == "8.5"
    assert ptx_isa.toolchain_ptx_isa("13.0") == "9.0"
    assert ptx_isa.toolchain_ptx_isa("13.1") == "9.1"
    assert ptx_isa.toolchain_ptx_isa("99.9") is None
    assert ptx_isa.toolchain_ptx_isa("garbage") is None


def test_only_documented_rows():
    # NVIDIA documents PTX ISA 9.1 = CUDA 13.1 as the newest (the PTX ISA release history); no
    # row beyond it is kept, so a newer toolchain or ISA is refused, never extrapolated.
    assert ptx_isa.NEWEST_PTX_ISA == "9.1" and ptx_isa.NEWEST_TOOLCHAIN == "13.1"
    for cuda in ("13.2", "13.3", "13.4", "13.5"):
        assert ptx_isa.toolchain_ptx_isa(cuda) is None
    with pytest.raises(ValueError, match="newer than the newest gpu_spec knows"):
        ptx_isa.min_driver_for_ptx("9.2")
    assert "CUDA 13.2 is not in gpu_spec's PTX ISA table" in ptx_isa.unknown_toolchain("13.2")


def test_every_capability_isa_is_known_to_driver_table():
    for cap in caps.CAPABILITIES:
        ptx_isa.min_driver_for_ptx(caps.min_ptx_isa(cap))


def test_supported_capabilities():
    cu126 = ptx_isa.supported_capabilities("8.5")
    assert "sm_87" in cu126 and "sm_90" in cu126
    assert "sm_100" not in cu126 and "sm_120" not in cu126
    assert set(ptx_isa.supported_capabilities("9.0")) == set(caps.CAPABILITIES)


def test_validate_ptx_version_accepts():
    assert ptx_isa.validate_ptx_version("8.5", "sm_90", "9.0") == "8.5"
    assert ptx_isa.validate_ptx_version("7.8", "sm_90", "9.0") == "7.8"
    assert ptx_isa.validate_ptx_version("9.0", "sm_90", "9.0") == "9.0"
    assert ptx_isa.validate_ptx_version("7.4", "sm_87", "8.5") == "7.4"


def test_validate_ptx_version_too_new():
    with pytest.raises(ValueError) as e:
        ptx_isa.validate_ptx_version("9.9", "sm_90", "9.0")
    assert "newer than the toolchain" in str(e.value) and "9.0" in str(e.value)


def test_validate_ptx_version_too_old_for_capability():
    with pytest.raises(ValueError) as e:
        ptx_isa.validate_ptx_version("7.4", "sm_90", "9.0")
    msg = str(e.value)
    assert "too old for sm_90" in msg and "7.8" in msg


def test_validate_ptx_version_bad_inputs():
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        ptx_isa.validate_ptx_version("8", "sm_90", "9.0")
    with pytest.raises(ValueError, match="invalid GPU capability"):
        ptx_isa.validate_ptx_version("8.5", "sm_91", "9.0")
    with pytest.raises(ValueError, match="not a known PTX ISA"):
        ptx_isa.validate_ptx_version("8.9", "sm_90", "9.0")


@pytest.mark.parametrize(
    "value, expected",
    [
        (13000, (13, 0)),
        (12080, (12, 8)),
        (12060, (12, 6)),
        ("13.0", (13, 0)),
        ((12, 6), (12, 6)),
    ],
)
def test_driver_version(value, expected):
    assert driver_version(value) == expected


@pytest.mark.parametrize("bad", ["x", "", "12", "12.6.3", True, (12,), None])
def test_versions_are_major_dot_minor_only(bad):
    with pytest.raises(ValueError):
        driver_version(bad)
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        parse_version(bad)


def test_standard_library_only():
    """The plugin imports gpu_spec inside Pants (CPython 3.9): no third-party import anywhere."""
    stdlib = {
        "__future__",
        "argparse",
        "contextlib",
        "dataclasses",
        "hashlib",
        "json",
        "os",
        "pkgutil",
        "re",
        "stat",
        "typing",
    }
    for path in sorted(pathlib.Path(__file__).parent.rglob("*.py")):
        if path.name.endswith("_test.py") or path.name == "conftest.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top == "gpu_spec" or top in stdlib, f"{path.name} imports {name}"


def test_max_registers_is_a_thread_s_register_count():
    from gpu_spec.capabilities import check_max_registers
    from gpu_spec.errors import SpecError

    assert check_max_registers(255) == 255 and check_max_registers(1) == 1
    for bad in (0, -1, 256, 100000, True, 32.0, "32", None):
        with pytest.raises(SpecError, match="max_registers"):
            check_max_registers(bad)
