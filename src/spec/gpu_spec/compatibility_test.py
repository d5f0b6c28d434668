"""What a driver loads from a toolchain: the table the plugin checks bundles against."""

from __future__ import annotations

import pytest

from gpu_spec.compatibility import cubin_runs_on, driver_problems, ptx_runs_on
from gpu_spec.versions import parse_version

CUBINS_13 = "cubins built by CUDA 13.0"


@pytest.mark.parametrize(
    "driver, toolchain_cuda, ptx_isa, expected",
    [
        # JetPack 6 (driver 12.6) and the CUDA 13.0 toolchain: neither its cubins (newer major
        # version) nor its PTX (ISA 9.0 needs a 13.0 driver) load.
        (
            "12.6",
            "13.0",
            "9.0",
            [CUBINS_13, "PTX ISA 9.0, which needs a CUDA 13.0 driver"],
        ),
        # The CUDA 12.6 toolchain emits ISA 8.5 (CUDA 12.5): fine on a 12.6 driver.
        ("12.6", "12.6", "8.5", []),
        # A 12.6 driver and PTX relabelled 8.7 (CUDA 12.8): the PTX is too new, cubins are fine.
        ("12.6", "12.6", "8.7", ["PTX ISA 8.7, which needs a CUDA 12.8 driver"]),
        # Minor-version compatibility: a 12.4 driver loads 12.6 cubins, not ISA 8.5 PTX.
        ("12.4", "12.6", "8.5", ["PTX ISA 8.5, which needs a CUDA 12.5 driver"]),
        ("12.5", "12.6", "8.5", []),
        # A CUDA 13.0 toolchain whose PTX was relabelled 8.5 still ships CUDA 13 cubins.
        ("12.6", "13.0", "8.5", [CUBINS_13]),
        # The H200's driver 580 (CUDA 13.0): everything of CUDA 13.0 and older loads.
        ("13.0", "13.0", "9.0", []),
        ("13.0", "12.6", "8.5", []),
        ("13.0", "13.0", "7.8", []),
        # ... but not PTX of a newer 13.x toolchain (ISA 9.1 needs 13.1), though its cubins load.
        ("13.0", "13.1", "9.1", ["PTX ISA 9.1, which needs a CUDA 13.1 driver"]),
        # Exactly the minimum driver.
        ("13.1", "13.1", "9.1", []),
        # A driver newer than any row loads every PTX ISA the table knows: no row needed.
        ("13.9", "13.1", "9.1", []),
        # Two majors behind.
        (
            "11.8",
            "12.6",
            "8.5",
            ["cubins built by CUDA 12.6", "PTX ISA 8.5, which needs a CUDA 12.5 driver"],
        ),
    ],
)
def test_driver_problems(driver: str, toolchain_cuda: str, ptx_isa: str, expected: list) -> None:
    assert driver_problems(parse_version(driver), toolchain_cuda, ptx_isa) == expected


def test_driver_problems_numeric_not_lexical() -> None:
    # "12.10" > "12.9" numerically; a string comparison would get this wrong.
    assert driver_problems(parse_version("12.10"), "12.9", "8.8") == []


def test_driver_problems_unknown_isa_is_an_error() -> None:
    with pytest.raises(ValueError, match="9.9"):
        driver_problems((13, 0), "13.0", "9.9")


def test_driver_problems_newer_isa_than_known_is_refused_not_guessed() -> None:
    # PTX ISA 9.2 (a CUDA 13.2 toolchain, undocumented here) is not mapped to a guessed driver.
    with pytest.raises(
        ValueError, match=r"newer than the newest gpu_spec knows \(9\.1, CUDA 13\.1\)"
    ):
        driver_problems((13, 5), "13.2", "9.2")


def test_binary_compatibility():
    assert cubin_runs_on((8, 0), (8, 6)) and not cubin_runs_on((8, 6), (8, 0))
    assert not cubin_runs_on((8, 0), (9, 0))
    assert ptx_runs_on((8, 0), (9, 0)) and not ptx_runs_on((9, 0), (8, 7))
