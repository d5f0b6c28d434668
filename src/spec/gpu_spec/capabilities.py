"""Compute capabilities: which exist, how they are spelled, and their order.

Only the portable `sm_XY` targets are accepted (what CUDA 13.0 NVRTC reports through
`nvrtcGetSupportedArchs`: 75 80 86 87 88 89 90 100 103 110 120 121); arch-specific `sm_90a` and
family `sm_100f` targets are not, anywhere: in BUILD files, in compile options, in manifests.
Capabilities order numerically by (major, minor): `sm_90` before `sm_100`.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Sequence, Tuple

from gpu_spec.errors import SpecError

# Capability -> the oldest PTX ISA whose `.target` accepts it (the PTX ISA "target directive"
# history; the same values LLVM's NVPTX backend uses).
CAPABILITY_MIN_PTX_ISA: Dict[str, str] = {
    "sm_75": "6.3",
    "sm_80": "7.0",
    "sm_86": "7.1",
    "sm_87": "7.4",
    "sm_88": "9.0",
    "sm_89": "7.8",
    "sm_90": "7.8",
    "sm_100": "8.6",
    "sm_103": "8.8",
    "sm_110": "9.0",
    "sm_120": "8.7",
    "sm_121": "8.8",
}

_CAPABILITY_RE = re.compile(r"^sm_(\d+)(\d)$")

Capability = Tuple[int, int]


def _split(capability: str) -> Capability:
    match = _CAPABILITY_RE.match(capability)
    assert match is not None, capability  # the table's entries are well formed
    return int(match.group(1)), int(match.group(2))


# Every valid capability, oldest first.
CAPABILITIES: Tuple[str, ...] = tuple(sorted(CAPABILITY_MIN_PTX_ISA, key=_split))


def parse_capability(capability: object) -> Capability:
    """`"sm_87"` -> `(8, 7)`, `"sm_120"` -> `(12, 0)`; an unknown one names the valid ones."""
    if not isinstance(capability, str) or capability not in CAPABILITY_MIN_PTX_ISA:
        raise SpecError(
            f"invalid GPU capability {capability!r}: expected one of {', '.join(CAPABILITIES)}"
        )
    return _split(capability)


def capability_name(cc: Sequence[int]) -> str:
    """`(9, 0)` -> `"sm_90"`, checked against the table."""
    name = f"sm_{int(cc[0])}{int(cc[1])}"
    parse_capability(name)
    return name


def sort_capabilities(capabilities: Iterable[str]) -> List[str]:
    """Unique capabilities, oldest first (each checked)."""
    return sorted(set(capabilities), key=parse_capability)


def min_ptx_isa(capability: str) -> str:
    """The oldest PTX ISA whose `.target` accepts `capability`."""
    parse_capability(capability)
    return CAPABILITY_MIN_PTX_ISA[capability]


# Registers a thread may use on every capability gpu_spec accepts (sm_75 and up: 255, the
# hardware limit; ptxas ignores a larger `-maxrregcount` without a word).
MAX_REGISTERS_PER_THREAD = 255


def check_max_registers(value: object) -> int:
    """`max_registers` as a register cap: an int in 1..MAX_REGISTERS_PER_THREAD (no bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(f"max_registers must be a positive integer, got {value!r}")
    if value > MAX_REGISTERS_PER_THREAD:
        raise SpecError(
            f"max_registers={value} is more than a thread can have on any supported GPU "
            f"({MAX_REGISTERS_PER_THREAD}); use a value from 1 to {MAX_REGISTERS_PER_THREAD}"
        )
    return value
