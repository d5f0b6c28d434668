"""The description of a kernel compile process, written and read back in one place.

The compile rule names each process `Compile <source> for <capabilities> (<toolchain>)`, e.g.
`Compile src/python/imaging/kernels/saxpy.py for sm_75, sm_80, sm_87, sm_90 (cuda13)`: one
process compiles one source for every capability of its target (`Compile ... for sm_90 (cuda13)`
with `[gpu-toolchains].batch_capabilities = false`, one process per capability). Pants logs that
description (`Starting:` / `Completed:` at INFO, only when the process really runs, never on a
cache hit) and records it in the process's workunit; the tests, the harness and the benchmarks
find the compiles of a run by parsing it with `parse_compile_description`, and count processes
(descriptions) apart from (source, capability) pairs (`CompileDescription.pairs`).

Standard library only: the harness imports it outside Pants, on CPython 3.9 to 3.12.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Sequence

_CAPABILITY = r"sm_\d+"
_SEPARATOR = ", "
_DESCRIPTION = re.compile(
    rf"Compile (?P<source>\S+) for (?P<capabilities>{_CAPABILITY}(?:{_SEPARATOR}{_CAPABILITY})*)"
    r" \((?P<toolchain>[^\s()]+)\)"
)


class CompileDescription(NamedTuple):
    source: str  # buildroot-relative, e.g. src/python/imaging/kernels/saxpy.py
    capabilities: tuple[str, ...]  # those the one process compiles, e.g. ("sm_87", "sm_90")
    toolchain: str  # a name of `[gpu-toolchains].toolchains`, e.g. cuda13

    def pairs(self) -> tuple[tuple[str, str], ...]:
        """(source, capability) of each compile the process does."""
        return tuple((self.source, capability) for capability in self.capabilities)


def format_compile_description(*, source: str, capabilities: Sequence[str], toolchain: str) -> str:
    if not capabilities:
        raise ValueError(f"A compile of {source} needs at least one capability.")
    return f"Compile {source} for {_SEPARATOR.join(capabilities)} ({toolchain})"


def parse_compile_description(description: str) -> Optional[CompileDescription]:
    """The parts of a compile process's description; None for any other description."""
    match = _DESCRIPTION.fullmatch(description)
    if match is None:
        return None
    capabilities = tuple(match["capabilities"].split(_SEPARATOR))
    return CompileDescription(match["source"], capabilities, match["toolchain"])
