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


def parse_info_log(log: str) -> Dict[str, Dict[str, int]]:
    """Map function name -> resource dict for every function in the log.

    The nvJitLink summary line (final, after linking) wins over ptxas' own
    per-module lines where both give a value; spills only appear in ptxas'
    lines. Missing numbers default to 0 so every dict has all keys.
    """
    ptxas: Dict[str, Dict[str, Optional[int]]] = {}
    link: Dict[str, Dict[str, Optional[int]]] = {}
    current_ptxas: Optional[str] = None
    current_link: Optional[str] = None

    for raw in log.splitlines():
        line = raw.rstrip()
        m = _PTXAS_COMPILING_RE.match(line)
        if m:
            current_ptxas = m.group(1)
            ptxas.setdefault(current_ptxas, _empty())
            current_link = None
            continue
        m = _PTXAS_PROPS_RE.match(line)
        if m:
            current_ptxas = m.group(1)
            ptxas.setdefault(current_ptxas, _empty())
            current_link = None
            continue
        m = _PTXAS_SPILL_RE.search(line)
        if m and current_ptxas is not None and line.startswith("ptxas"):
            d = ptxas[current_ptxas]
            d["local_bytes"] = int(m.group(1))
            d["spill_stores"] = int(m.group(2))
            d["spill_loads"] = int(m.group(3))
            continue
        m = _PTXAS_USED_RE.match(line)
        if m and current_ptxas is not None:
            d = ptxas[current_ptxas]
            d["registers"] = int(m.group(1))
            sm = _SMEM_RE.search(m.group(2))
            if sm:
                d["shared_bytes"] = int(sm.group(1))
            continue
        m = _LINK_PROPS_RE.match(line)
        if m:
            current_link = m.group(1)
            link.setdefault(current_link, _empty())
            current_ptxas = None
            continue
        m = _LINK_USED_RE.match(line)
        if m and current_link is not None:
            d = link[current_link]
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
            continue

    out: Dict[str, Dict[str, int]] = {}
    for name in list(ptxas) + [n for n in link if n not in ptxas]:
        merged = _empty()
        for src in (ptxas.get(name), link.get(name)):
            if src:
                for k, v in src.items():
                    if v is not None:
                        merged[k] = v
        out[name] = {k: int(v or 0) for k, v in merged.items()}
    return out


def resources_for(log: str, entry: str) -> Dict[str, int]:
    """Resources of one entry; all zeros if the log does not mention it."""
    return parse_info_log(log).get(entry, {k: 0 for k in RESOURCE_KEYS})
