"""The description of a kernel compile process, written and read back in one place.

The compile rule names each process `Compile <source> for <capability> (<toolchain>)`. Pants logs
that description (`Starting:` / `Completed:` at INFO, only when the process really runs, never on
a cache hit) and records it in the process's workunit; the tests, the harness and the benchmarks
find the compiles of a run by parsing it with `parse_compile_description`.

Standard library only: the harness imports it outside Pants, on CPython 3.9 to 3.12.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

_DESCRIPTION = re.compile(
    r"Compile (?P<source>\S+) for (?P<capability>sm_\d+) \((?P<toolchain>[^\s()]+)\)"
)


class CompileDescription(NamedTuple):
    source: str  # buildroot-relative, e.g. src/python/imaging/kernels/saxpy.py
    capability: str  # e.g. sm_90
    toolchain: str  # a name of `[gpu-toolchains].toolchains`, e.g. cuda13


def format_compile_description(*, source: str, capability: str, toolchain: str) -> str:
    return f"Compile {source} for {capability} ({toolchain})"


def parse_compile_description(description: str) -> Optional[CompileDescription]:
    """The parts of a compile process's description; None for any other description."""
    match = _DESCRIPTION.fullmatch(description)
    if match is None:
        return None
    return CompileDescription(match["source"], match["capability"], match["toolchain"])
