"""nvJitLink's failures as messages a kernel author can act on.

Why: nvJitLink says "Undefined reference to 'mul_f32_f32' in 'ffi__0.ptx'" and "ERROR 9:
finish"; the author needs the module, the kernel source, the symbols that are missing, and (when
the symbol tells) which feature brought it in and what to do. The log is cleaned of NUL and
other control bytes so it can be printed and stored.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from gpu_compiler.errors import CompileError

if TYPE_CHECKING:  # pragma: no cover
    from gpu_compiler.link.linker import LinkInput

_UNDEFINED_RE = re.compile(r"Undefined reference to '([^']+)'(?: in '([^']*)')?")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

# Symbols that say which numba-cuda feature needs what.
_FEATURE_HINTS = (
    (
        re.compile(r"^cudaCG"),
        "cooperative groups (cuda.cg.this_grid().sync()) need the device runtime library "
        "libcudadevrt.a, which gpu_compiler links for kernels numba marks cooperative; this "
        "symbol came from code numba did not mark (e.g. a linked part using grid sync): "
        "declare it with cuda.declare_device(..., use_cooperative=True)",
    ),
    (
        re.compile(r"^NRT_"),
        "numba's runtime (NRT: memory management inside kernels) is not supported by the "
        "AOT compiler: keep CUDA_ENABLE_NRT off",
    ),
)


def clean_log(text: str) -> str:
    """nvJitLink's log without control bytes or its "ERROR n: finish" trailer."""
    lines = [_CONTROL_RE.sub("?", line).rstrip() for line in text.splitlines()]
    return "\n".join(line for line in lines if line and not re.match(r"^ERROR \d+: finish$", line))


def missing_symbols(log: str) -> Dict[str, List[str]]:
    """Undefined symbol -> the objects that refer to it, in order of appearance."""
    out: Dict[str, List[str]] = {}
    for m in _UNDEFINED_RE.finditer(log):
        refs = out.setdefault(m.group(1), [])
        if m.group(2) and m.group(2) not in refs:
            refs.append(m.group(2))
    return out


def _hints(symbols: Sequence[str]) -> List[str]:
    hints: List[str] = []
    for sym in symbols:
        hint = next((h for rx, h in _FEATURE_HINTS if rx.search(sym)), None)
        if hint is None:
            hint = (
                "%s is defined nowhere the kernel links: a function declared with "
                "cuda.declare_device(%r, sig, link=...) needs link= naming the .cu or .ptx "
                "file that defines it (an input of the gpu_kernel target)" % (sym, sym)
            )
        if hint not in hints:
            hints.append(hint)
    return hints


def link_failure(
    log: str,
    capability: str,
    module_name: str,
    source: Optional[str],
    inputs: Sequence["LinkInput"],
) -> CompileError:
    """The CompileError for a failed link of ``module_name`` (compiled from ``source``)."""
    text = clean_log(log)
    missing = missing_symbols(text)
    head = "%s: error: nvJitLink failed to link module %s for %s (objects: %s)" % (
        source or "<kernel source>",
        module_name,
        capability,
        ", ".join(i.name for i in inputs),
    )
    parts = [head]
    if missing:
        parts.append(
            "  missing symbols: "
            + "; ".join("%s (used by %s)" % (s, ", ".join(r) or "?") for s, r in missing.items())
        )
        parts.extend("  fix: " + h for h in _hints(list(missing)))
    parts.append(text)
    return CompileError("\n".join(parts), source=source)
