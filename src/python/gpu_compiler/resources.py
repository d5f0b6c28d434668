"""Per-kernel resource usage: the cubin's own figures, and the spills from nvJitLink's info log.

``module_resources(log, cubin)`` is what a compile records: registers, static shared, local
(stack) and user constant bytes as the cubin holds them (``gpu_spec.resources.cubin``: the ELF
records the driver reads when it loads the module), and spill stores and loads, which only the
log gives.
The log alone is not enough: CUDA 12.6's nvJitLink writes its own per-function lines (the only
ones with the shared figure of a kernel whose tiles are placed at link time, as matmul.cu's are)
to the process's stdout, not to the info log, so from the log an Orin build recorded 0 bytes of
shared memory for every kernel that uses some. A cubin this reader cannot read (a future layout)
leaves the log's figures.

The log parser below reads both block kinds; the compiler's tests check its figures against the
cubin's for every example kernel and capability.

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

(CUDA 12.6's nvJitLink writes its own lines with an ``@O@`` prefix, ``@O@info    : used ...``;
CUDA 13's without: the prefix is dropped before parsing, or every figure only nvJitLink gives,
the shared memory of a kernel whose tile ptxas does not see, would read as 0 on the Orin)
and one module line per linked (or ptxas-compiled) module, before its functions::

    ptxas info    : 0 bytes gmem, 320 bytes cmem[3]
    info    : 0 bytes gmem, 320 bytes cmem[3]

Field meanings in the result:
- ``registers``: registers per thread.
- ``shared_bytes``: static shared memory per block, what CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
  gives: the cubin's ``.nv.shared.<kernel>`` section less the 1 KiB reserved window an sm_90
  cubin lays out at its start (an 18x18 float tile: 1296 on every capability; nvJitLink's log
  says 2320 on sm_90, the section's size). Measured against the driver on an sm_90 GPU
  (tests/gpu/resources_check.py); gpu_spec.resources.cubin says how it is read and
  gpu_spec.resources.occupancy how the reservation counts per block.
- ``local_bytes``: per-thread local memory = stack frame + any other lmem.
- ``spill_stores`` / ``spill_loads``: bytes of register spill traffic.
- ``launch_bound_threads``: the threads per block the kernel's launch bounds allow
  (``__launch_bounds__``, ``.maxntid`` or ``.reqntid``; 0: none), from the cubin only: the
  driver's CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK is at most that.
- ``const_bytes``: user constant memory (``__constant__`` variables; numba's
  ``cuda.const.array_like``): the ``cmem[N]`` banks other than ``cmem[0]``, which holds the
  kernel parameters (and on sm_90 the driver's own constants) and so is no user's budget.
  ``__constant__`` variables live in one module-wide bank (``cmem[3]`` with CUDA 13.0, on
  sm_75 through sm_90), reported once per module on the ``bytes gmem`` line, not per function:
  every kernel of the module gets that module's figure, as every kernel can read every
  ``__constant__`` of its module. That is what CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES ("user-
  allocated constant memory required by this function") is documented to count. A bank other
  than 0 on a function's own line (seen in older ptxas logs) is added to its figure.
  Manifests written before this key have no ``const_bytes``: readers default it to 0.
"""

from __future__ import annotations

import re
from typing import Dict, Optional

# The keys the info log gives (the parser's), and of every resource dict the compiler records:
# those plus the cubin's launch bound. Readers of manifests must not require any of them (old
# manifests lack `const_bytes` and `launch_bound_threads`, older ones all of them).
_LOG_KEYS = (
    "registers",
    "shared_bytes",
    "local_bytes",
    "spill_stores",
    "spill_loads",
    "const_bytes",
)
RESOURCE_KEYS = _LOG_KEYS + ("launch_bound_threads",)

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
_CMEM_RE = re.compile(r"(\d+)\s+bytes cmem\[(\d+)\]")
# A module's line: `ptxas info    : 0 bytes gmem, 320 bytes cmem[3]` / `info    : 16 bytes gmem`.
_PTXAS_MODULE_RE = re.compile(r"^ptxas\s+info\s*:\s*\d+\s+bytes gmem(.*)$")
_LINK_MODULE_RE = re.compile(r"^info\s*:\s*\d+\s+bytes gmem(.*)$")
# nvJitLink's channel marker on its own lines (CUDA 12.x: `@O@` for output, `@E@` for errors).
_CHANNEL_RE = re.compile(r"^@[A-Z]@")


def _user_cmem(text: str) -> Optional[int]:
    """Bytes of the constant banks other than 0 listed in `text`; None where none is listed."""
    banks = [int(m.group(1)) for m in _CMEM_RE.finditer(text) if m.group(2) != "0"]
    return sum(banks) if banks else None


def _empty() -> Dict[str, Optional[int]]:
    return {k: None for k in _LOG_KEYS}


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
        # User constant bytes of the modules: every ptxas module's line, summed (each PTX input
        # is its own module), and nvJitLink's line for the linked whole, which wins.
        self.ptxas_const = 0
        self.link_const: Optional[int] = None

    def feed(self, line: str) -> None:
        for handler in (
            self._module_const,
            self._ptxas_header,
            self._ptxas_spills,
            self._ptxas_used,
            self._link_header,
            self._link_used,
        ):
            if handler(line):
                return

    def _module_const(self, line: str) -> bool:
        m = _PTXAS_MODULE_RE.match(line)
        if m:
            self.ptxas_const += _user_cmem(m.group(1)) or 0
            return True
        m = _LINK_MODULE_RE.match(line)
        if m:
            self.link_const = (self.link_const or 0) + (_user_cmem(m.group(1)) or 0)
            return True
        return False

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
        d["const_bytes"] = _user_cmem(m.group(2))
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
        d["const_bytes"] = _user_cmem(rest)
        return True

    def merged(self) -> Dict[str, Dict[str, int]]:
        """ptxas' functions first, in log order, then any only nvJitLink reports; each with
        its module's user constant bytes added."""
        module_const = self.link_const if self.link_const is not None else self.ptxas_const
        out: Dict[str, Dict[str, int]] = {}
        for name in list(self.ptxas) + [n for n in self.link if n not in self.ptxas]:
            merged = _empty()
            for src in (self.ptxas.get(name), self.link.get(name)):
                if src:
                    for k, v in src.items():
                        if v is not None:
                            merged[k] = v
            out[name] = {k: int(v or 0) for k, v in merged.items()}
            out[name]["const_bytes"] += module_const
        return out


def parse_info_log(log: str) -> Dict[str, Dict[str, int]]:
    """Map function name -> resource dict for every function in the log.

    The nvJitLink summary line (final, after linking) wins over ptxas' own
    per-module lines where both give a value; spills only appear in ptxas'
    lines. Missing numbers default to 0 so every dict has all keys.
    """
    parser = _InfoLogParser()
    for raw in log.splitlines():
        parser.feed(_CHANNEL_RE.sub("", raw.rstrip()))
    return parser.merged()


def module_resources(log: str, cubin: bytes) -> Dict[str, Dict[str, int]]:
    """{kernel entry: resources} of one linked module: the log's figures, with those the cubin
    holds (every key but the spills) taken from the cubin."""
    from gpu_spec.resources.cubin import CUBIN_KEYS, CubinFormatError, kernel_resources

    figures = {name: dict(f, launch_bound_threads=0) for name, f in parse_info_log(log).items()}
    try:
        in_cubin = kernel_resources(cubin)
    except CubinFormatError:
        return figures
    for entry, own in in_cubin.items():
        record = figures.setdefault(entry, {k: 0 for k in RESOURCE_KEYS})
        record.update({k: getattr(own, k) for k in CUBIN_KEYS})
    return figures


def resources_for(log: str, entry: str) -> Dict[str, int]:
    """Resources of one entry; all zeros if the log does not mention it."""
    return parse_info_log(log).get(entry, {k: 0 for k in RESOURCE_KEYS})
