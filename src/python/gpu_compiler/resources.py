"""Per-kernel resource usage parsed from nvJitLink's verbose info log.

Why: registers, shared and local memory decide occupancy and flag spills; the
build records them in ``metadata.json`` so a reviewer (or a test) sees a
register blow-up or a new spill without a GPU. nvJitLink has no structured API
for this, so the verbose log is the source. It has two kinds of blocks per
function, both parsed here::

    ptxas info    : Function properties for NAME
    ptxas         .     88 bytes stack frame, 88 bytes spill stores, 108 bytes spill loads
    ptxas info    : Used 24 registers, used 1 barriers
    info    : Function properties for 'NAME':
    info    : used 24 registers, used 1 barriers, 88 stack, 2320 bytes smem, 672 bytes cmem[0], 0 bytes lmem

Field meanings in the result:
- ``registers``: registers per thread.
- ``shared_bytes``: static shared memory per block as the linker reports it
  (on sm_90 this includes the 1 KiB the hardware reserves per block).
- ``local_bytes``: per-thread local memory = stack frame + any other lmem.
- ``spill_stores`` / ``spill_loads``: bytes of register spill traffic.
"""

from __future__ import annotations

import re
from typing import Dict, Optional

RESOURCE_KEYS = ("registers", "shared_bytes", "local_bytes", "spill_stores", "spill_loads")

_PTXAS_PROPS_RE = re.compile(r"^ptxas\s+info\s*:\s*Function properties for\s+'?([^'\s]+?)'?:?\s*$")
_PTXAS_SPILL_RE = re.compile(
    r"(\d+)\s+bytes stack frame,\s*(\d+)\s+bytes spill stores,\s*(\d+)\s+bytes spill loads"
)
_PTXAS_USED_RE = re.compile(r"^ptxas\s+info\s*:\s*Used\s+(\d+)\s+registers(.*)$")
_PTXAS_COMPILING_RE = re.compile(r"^ptxas\s+info\s*:\s*Compiling entry function\s+'([^']+)'")
_LINK_PROPS_RE = re.compile(r"^info\s*:\s*Function properties for\s+'([^']+)'\s*:?\s*$")
_LINK_USED_RE = re.compile(r"^info\s*:\s*used\s+(\d+)\s+registers(.*)$")
_SMEM_RE = re.compile(r"(\d+)\s+bytes smem")
_LMEM_RE = re.compile(r"(\d+)\s+bytes lmem")
_STACK_RE = re.compile(r"(\d+)\s+stack\b")


def _empty() -> Dict[str, Optional[int]]:
    return {k: None for k in RESOURCE_KEYS}


class _InfoLogParser:
    """Collects the ptxas blocks and the nvJitLink blocks of one log, per function.

    A line belongs to the function named by the last "Function properties"
    (or "Compiling entry function") header of its own kind, so each handler
    only fills in the block that is open. Handlers run in order and the first
    that takes a line wins; one that does not take it lets the next try.
    """

    def __init__(self) -> None:
        self.ptxas: Dict[str, Dict[str, Optional[int]]] = {}
        self.link: Dict[str, Dict[str, Optional[int]]] = {}
        self.current_ptxas: Optional[str] = None
        self.current_link: Optional[str] = None

    def feed(self, line: str) -> None:
        for handler in (
            self._ptxas_header,
            self._ptxas_spills,
            self._ptxas_used,
            self._link_header,
            self._link_used,
        ):
            if handler(line):
                return

    def _ptxas_header(self, line: str) -> bool:
        m = _PTXAS_COMPILING_RE.match(line) or _PTXAS_PROPS_RE.match(line)
        if not m:
            return False
        self.current_ptxas = m.group(1)
        self.ptxas.setdefault(self.current_ptxas, _empty())
        self.current_link = None
        return True

    def _ptxas_spills(self, line: str) -> bool:
        m = _PTXAS_SPILL_RE.search(line)
        if not (m and self.current_ptxas is not None and line.startswith("ptxas")):
            return False
        d = self.ptxas[self.current_ptxas]
        d["local_bytes"] = int(m.group(1))
        d["spill_stores"] = int(m.group(2))
        d["spill_loads"] = int(m.group(3))
        return True

    def _ptxas_used(self, line: str) -> bool:
        m = _PTXAS_USED_RE.match(line)
        if not (m and self.current_ptxas is not None):
            return False
        d = self.ptxas[self.current_ptxas]
        d["registers"] = int(m.group(1))
        sm = _SMEM_RE.search(m.group(2))
        if sm:
            d["shared_bytes"] = int(sm.group(1))
        return True

    def _link_header(self, line: str) -> bool:
        m = _LINK_PROPS_RE.match(line)
        if not m:
            return False
        self.current_link = m.group(1)
        self.link.setdefault(self.current_link, _empty())
        self.current_ptxas = None
        return True

    def _link_used(self, line: str) -> bool:
        m = _LINK_USED_RE.match(line)
        if not (m and self.current_link is not None):
            return False
        d = self.link[self.current_link]
        d["registers"] = int(m.group(1))
        rest = m.group(2)
        sm = _SMEM_RE.search(rest)
        if sm:
            d["shared_bytes"] = int(sm.group(1))
        stack = _STACK_RE.search(rest)
        lmem = _LMEM_RE.search(rest)
        if stack or lmem:
            d["local_bytes"] = (int(stack.group(1)) if stack else 0) + (
                int(lmem.group(1)) if lmem else 0
            )
        return True

    def merged(self) -> Dict[str, Dict[str, int]]:
        """ptxas' functions first, in log order, then any only nvJitLink reports."""
        out: Dict[str, Dict[str, int]] = {}
        for name in list(self.ptxas) + [n for n in self.link if n not in self.ptxas]:
            merged = _empty()
            for src in (self.ptxas.get(name), self.link.get(name)):
                if src:
                    for k, v in src.items():
                        if v is not None:
                            merged[k] = v
            out[name] = {k: int(v or 0) for k, v in merged.items()}
        return out


def parse_info_log(log: str) -> Dict[str, Dict[str, int]]:
    """Map function name -> resource dict for every function in the log.

    The nvJitLink summary line (final, after linking) wins over ptxas' own
    per-module lines where both give a value; spills only appear in ptxas'
    lines. Missing numbers default to 0 so every dict has all keys.
    """
    parser = _InfoLogParser()
    for raw in log.splitlines():
        parser.feed(raw.rstrip())
    return parser.merged()


def resources_for(log: str, entry: str) -> Dict[str, int]:
    """Resources of one entry; all zeros if the log does not mention it."""
    return parse_info_log(log).get(entry, {k: 0 for k in RESOURCE_KEYS})
