"""GPU architecture and PTX ISA tables, plus validation of user-facing choices.

Why this module is pure: the Pants plugin (CPython 3.9, no CUDA libraries)
imports it while parsing BUILD files to reject a bad ``capability`` or
``ptx_version`` early, and the runtime imports it to decide whether a driver can
load a PTX module. So it holds static tables only and imports nothing beyond the
standard library. The tables are deliberately static rather than queried from
NVRTC at import time: a BUILD-time answer must not depend on which CUDA
libraries happen to be installed.

Sources for the tables:
- capabilities: what CUDA 13.0 NVRTC reports through ``nvrtcGetSupportedArchs``
  (75 80 86 87 88 89 90 100 103 110 120 121). Only the portable ``sm_XY``
  targets are accepted; arch-specific ``sm_90a``/``sm_100f`` variants are not.
- minimum PTX ISA per target: the PTX ISA "target directive" history (the same
  values LLVM's NVPTX backend uses).
- PTX ISA -> first CUDA release (and so the oldest driver that JIT-loads it):
  NVIDIA's PTX ISA release history (also mirrored in cuda-bindings'
  ``_ptx_utils``). PTX ISA 8.5 shipped with CUDA 12.5 and is also what 12.6
  emits; there is no ISA for 12.6 of its own.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

# Capability -> minimum PTX ISA version that can target it (".target sm_XY").
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

# Valid capability strings, oldest first.
CAPABILITIES: Tuple[str, ...] = tuple(
    sorted(CAPABILITY_MIN_PTX_ISA, key=lambda c: int(c[3:]))
)

# PTX ISA version -> first CUDA release that understands it. A driver of that
# CUDA version (or newer) is needed to JIT-load PTX declaring this ``.version``.
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
    "9.2": "13.2",
    "9.3": "13.3",
    "9.4": "13.4",
    "9.5": "13.5",
}

# Toolchain (NVVM/NVRTC) CUDA version -> the PTX ISA it writes into
# ``.version``. 12.6 has no ISA of its own: it emits 8.5 like 12.5.
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
    "13.2": "9.2",
    "13.3": "9.3",
    "13.4": "9.4",
    "13.5": "9.5",
}

_CAPABILITY_RE = re.compile(r"^sm_(\d+)$")
_VERSION_RE = re.compile(r"^(\d+)\.(\d+)$")


def _valid_list() -> str:
    return ", ".join(CAPABILITIES)


def validate_capability(capability: str) -> str:
    """Return ``capability`` unchanged if it is in the table, else ValueError."""
    parse_capability(capability)
    return capability


def parse_capability(capability: str) -> Tuple[int, int]:
    """``"sm_87" -> (8, 7)``; ``"sm_120" -> (12, 0)``.

    Raises ValueError naming the valid capabilities, because this is the
    message a user sees for a typo in a BUILD file.
    """
    if not isinstance(capability, str) or capability not in CAPABILITY_MIN_PTX_ISA:
        raise ValueError(
            "invalid GPU capability %r: expected one of %s"
            % (capability, _valid_list())
        )
    m = _CAPABILITY_RE.match(capability)
    assert m is not None  # table entries are well formed
    digits = m.group(1)
    return int(digits[:-1]), int(digits[-1])


def capability_from_tuple(cc: Tuple[int, int]) -> str:
    """``(9, 0) -> "sm_90"`` (validated against the table)."""
    cap = "sm_%d%d" % (int(cc[0]), int(cc[1]))
    parse_capability(cap)
    return cap


def parse_version(version: str) -> Tuple[int, int]:
    """Parse a ``MAJOR.MINOR`` version string (PTX ISA or CUDA)."""
    m = _VERSION_RE.match(version.strip()) if isinstance(version, str) else None
    if m is None:
        raise ValueError("invalid version %r: expected MAJOR.MINOR, e.g. 8.5" % (version,))
    return int(m.group(1)), int(m.group(2))


def format_version(version: Tuple[int, int]) -> str:
    return "%d.%d" % version


def min_ptx_isa(capability: str) -> str:
    """Oldest PTX ISA whose ``.target`` accepts ``capability``."""
    parse_capability(capability)
    return CAPABILITY_MIN_PTX_ISA[capability]


def min_driver_for_ptx(isa: str) -> str:
    """Oldest CUDA driver version (``"12.4"``) that JIT-loads PTX ``.version isa``.

    A cubin carries no such requirement beyond supporting its SM; this only
    matters for the PTX shipped as a forward-compatible fallback.
    """
    key = format_version(parse_version(isa))
    try:
        return PTX_ISA_MIN_DRIVER[key]
    except KeyError:
        raise ValueError(
            "unknown PTX ISA version %r: known versions are %s"
            % (isa, ", ".join(PTX_ISA_MIN_DRIVER))
        ) from None


def toolchain_ptx_isa(cuda_version: str) -> Optional[str]:
    """PTX ISA written by a CUDA ``cuda_version`` toolchain, or None if unknown."""
    try:
        key = format_version(parse_version(cuda_version))
    except ValueError:
        return None
    return TOOLCHAIN_PTX_ISA.get(key)


def supported_capabilities(toolchain_max_isa: str) -> List[str]:
    """Capabilities a toolchain emitting ``toolchain_max_isa`` can target."""
    top = parse_version(toolchain_max_isa)
    return [c for c in CAPABILITIES if parse_version(CAPABILITY_MIN_PTX_ISA[c]) <= top]


def validate_ptx_version(requested: str, capability: str, toolchain_max_isa: str) -> str:
    """Check a ``ptx_version`` override and return it normalized (``"8.5"``).

    Refused, with a ValueError that says why and what would be accepted:
    - newer than the toolchain emits (its PTX could use features a relabelled
      header would misrepresent, and nvJitLink of this toolchain may not know it);
    - older than the capability's first PTX ISA (``.target`` would be invalid);
    - not a PTX ISA version in the table at all.
    """
    req = parse_version(requested)
    req_s = format_version(req)
    parse_capability(capability)
    top = parse_version(toolchain_max_isa)
    floor = parse_version(CAPABILITY_MIN_PTX_ISA[capability])
    if req > top:
        raise ValueError(
            "ptx_version %s is newer than the toolchain's PTX ISA %s: "
            "choose a version between %s and %s for %s"
            % (req_s, format_version(top), format_version(floor), format_version(top), capability)
        )
    if req < floor:
        raise ValueError(
            "ptx_version %s is too old for %s, which needs PTX ISA %s or newer "
            "(up to %s with this toolchain)"
            % (req_s, capability, format_version(floor), format_version(top))
        )
    if req_s not in PTX_ISA_MIN_DRIVER:
        raise ValueError(
            "ptx_version %s is not a known PTX ISA version: known versions are %s"
            % (req_s, ", ".join(PTX_ISA_MIN_DRIVER))
        )
    return req_s
