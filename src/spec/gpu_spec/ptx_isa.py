"""PTX ISA versions: which a toolchain writes, which driver JIT-loads them, which a kernel may ask.

Sources: NVIDIA's PTX ISA release history (also mirrored in cuda-bindings' `_ptx_utils`). The
tables are static on purpose: a BUILD-time answer must not depend on which CUDA libraries happen
to be installed. PTX ISA 8.5 shipped with CUDA 12.5 and is also what 12.6 emits.

Only rows NVIDIA documents are here (the PTX ISA document's "PTX ISA release history", and
cuda-bindings' `_ptx_utils`, which ends at PTX ISA 9.1 = CUDA 13.1). A row nobody has seen would
make a guess look like a rule: a newer toolchain or PTX ISA is refused by name, saying to add its
row from NVIDIA's release notes, never mapped by extrapolation. (A newer *driver* needs no row:
it loads every PTX ISA the table knows.)
"""

from __future__ import annotations

from typing import Dict, List, Optional

from gpu_spec.capabilities import CAPABILITIES, CAPABILITY_MIN_PTX_ISA, parse_capability
from gpu_spec.errors import SpecError
from gpu_spec.versions import format_version, parse_version

# PTX ISA -> the first CUDA release that understands it: a driver of that CUDA version or newer
# is needed to JIT-load PTX declaring this `.version`.
PTX_ISA_MIN_DRIVER: Dict[str, str] = {
    "6.0": "9.0",
    "6.1": "9.1",
    "6.2": "9.2",
    "6.3": "10.0",
    "6.4": "10.1",
    "6.5": "10.2",
    "7.0": "11.0",
    "7.1": "11.1",
    "7.2": "11.2",
    "7.3": "11.3",
    "7.4": "11.4",
    "7.5": "11.5",
    "7.6": "11.6",
    "7.7": "11.7",
    "7.8": "11.8",
    "8.0": "12.0",
    "8.1": "12.1",
    "8.2": "12.2",
    "8.3": "12.3",
    "8.4": "12.4",
    "8.5": "12.5",
    "8.6": "12.7",
    "8.7": "12.8",
    "8.8": "12.9",
    "9.0": "13.0",
    "9.1": "13.1",
}

# Toolchain (NVVM/NVRTC) CUDA version -> the PTX ISA it writes into `.version`.
TOOLCHAIN_PTX_ISA: Dict[str, str] = {
    "11.0": "7.0",
    "11.1": "7.1",
    "11.2": "7.2",
    "11.3": "7.3",
    "11.4": "7.4",
    "11.5": "7.5",
    "11.6": "7.6",
    "11.7": "7.7",
    "11.8": "7.8",
    "12.0": "8.0",
    "12.1": "8.1",
    "12.2": "8.2",
    "12.3": "8.3",
    "12.4": "8.4",
    "12.5": "8.5",
    "12.6": "8.5",
    "12.8": "8.7",
    "12.9": "8.8",
    "13.0": "9.0",
    "13.1": "9.1",
}


NEWEST_PTX_ISA = max(PTX_ISA_MIN_DRIVER, key=parse_version)
NEWEST_TOOLCHAIN = max(TOOLCHAIN_PTX_ISA, key=parse_version)
ADD_ROW = (
    "add its row to gpu_spec/ptx_isa.py from NVIDIA's PTX ISA release notes (the PTX ISA "
    "document's release history)"
)


def min_driver_for_ptx(isa: str) -> str:
    """The oldest driver (`"12.4"`) that JIT-loads PTX `.version isa`."""
    version = parse_version(isa)
    key = format_version(version)
    if key not in PTX_ISA_MIN_DRIVER:
        if version > parse_version(NEWEST_PTX_ISA):
            raise SpecError(
                f"unknown PTX ISA version {isa!r}: newer than the newest gpu_spec knows "
                f"({NEWEST_PTX_ISA}, CUDA {PTX_ISA_MIN_DRIVER[NEWEST_PTX_ISA]}), so the driver it "
                f"needs is not known; {ADD_ROW}"
            )
        raise SpecError(
            f"unknown PTX ISA version {isa!r}: known versions are {', '.join(PTX_ISA_MIN_DRIVER)}"
        )
    return PTX_ISA_MIN_DRIVER[key]


def unknown_toolchain(cuda_version: str) -> str:
    """Why a CUDA `cuda_version` toolchain, which `toolchain_ptx_isa` does not know, cannot be
    used where its PTX ISA matters (one line, for the caller to prefix with what asked)."""
    return (
        f"the toolchain's CUDA {cuda_version} is not in gpu_spec's PTX ISA table (it knows CUDA "
        f"11.0 to {NEWEST_TOOLCHAIN}), so the PTX ISA it writes is not known; {ADD_ROW}"
    )


def toolchain_ptx_isa(cuda_version: str) -> Optional[str]:
    """The PTX ISA a CUDA `cuda_version` toolchain writes, or None if the table lacks it."""
    try:
        key = format_version(parse_version(cuda_version))
    except SpecError:
        return None
    return TOOLCHAIN_PTX_ISA.get(key)


def supported_capabilities(toolchain_isa: str) -> List[str]:
    """The capabilities a toolchain writing PTX ISA `toolchain_isa` can target."""
    top = parse_version(toolchain_isa)
    return [c for c in CAPABILITIES if parse_version(CAPABILITY_MIN_PTX_ISA[c]) <= top]


def validate_ptx_version(requested: str, capability: str, toolchain_isa: str) -> str:
    """A `ptx_version` override, normalized (`"8.5"`), or SpecError saying what would do.

    Refused: newer than the toolchain writes (the relabelled PTX could use features the header
    misrepresents), older than the capability's first ISA (`.target` would be invalid), or not
    a PTX ISA at all.
    """
    req = parse_version(requested)
    parse_capability(capability)
    top = parse_version(toolchain_isa)
    floor = parse_version(CAPABILITY_MIN_PTX_ISA[capability])
    span = f"{format_version(floor)} and {format_version(top)}"
    if req > top:
        raise SpecError(
            f"ptx_version {format_version(req)} is newer than the toolchain's PTX ISA "
            f"{format_version(top)}: choose a version between {span} for {capability}"
        )
    if req < floor:
        raise SpecError(
            f"ptx_version {format_version(req)} is too old for {capability}, which needs PTX ISA "
            f"{format_version(floor)} or newer (up to {format_version(top)} with this toolchain)"
        )
    if format_version(req) not in PTX_ISA_MIN_DRIVER:
        raise SpecError(
            f"ptx_version {format_version(req)} is not a known PTX ISA version: known versions "
            f"are {', '.join(PTX_ISA_MIN_DRIVER)}"
        )
    return format_version(req)
