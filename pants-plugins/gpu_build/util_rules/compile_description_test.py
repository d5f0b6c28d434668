from __future__ import annotations

import pytest

from gpu_build.util_rules.compile_description import (
    CompileDescription,
    format_compile_description,
    parse_compile_description,
)

SAXPY = "src/python/imaging/kernels/saxpy.py"
ALL = ("sm_75", "sm_80", "sm_87", "sm_90")


def test_format() -> None:
    description = format_compile_description(source=SAXPY, capabilities=ALL, toolchain="cuda13")
    assert description == f"Compile {SAXPY} for sm_75, sm_80, sm_87, sm_90 (cuda13)"
    one = format_compile_description(source=SAXPY, capabilities=["sm_90"], toolchain="cuda13")
    assert one == f"Compile {SAXPY} for sm_90 (cuda13)"


def test_format_refuses_no_capability() -> None:
    with pytest.raises(ValueError, match="at least one capability"):
        format_compile_description(source=SAXPY, capabilities=(), toolchain="cuda13")


@pytest.mark.parametrize(
    "parts",
    [
        CompileDescription(SAXPY, ("sm_90",), "cuda13"),
        CompileDescription(SAXPY, ALL, "cuda13"),
        CompileDescription("src/python/imaging/kernels/sobel.cu", ("sm_87", "sm_120"), "cuda12"),
        CompileDescription("k.cu", ("sm_75",), "cuda-13.0_x"),
    ],
)
def test_parse_reads_back_what_format_writes(parts: CompileDescription) -> None:
    assert parse_compile_description(format_compile_description(**parts._asdict())) == parts


def test_pairs() -> None:
    description = CompileDescription(SAXPY, ("sm_87", "sm_90"), "cuda13")
    assert description.pairs() == ((SAXPY, "sm_87"), (SAXPY, "sm_90"))


@pytest.mark.parametrize(
    "description",
    [
        "Build the GPU kernel toolchain cuda13 (cuda13)",
        f"Compile {SAXPY} for sm_90",
        f"Compile {SAXPY} for sm_90 (cuda13) and more",
        f"[INFO] Completed: Compile {SAXPY} for sm_90 (cuda13)",
        f"Compile {SAXPY} for compute_90 (cuda13)",
        f"Compile {SAXPY} for sm_87,sm_90 (cuda13)",
        f"Compile {SAXPY} for sm_87, (cuda13)",
        f"Compile {SAXPY} for  (cuda13)",
        "",
    ],
)
def test_parse_refuses_other_descriptions(description: str) -> None:
    assert parse_compile_description(description) is None
