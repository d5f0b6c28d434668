"""Small, dependency-free PTX text helpers.

Why parse PTX text at all: it is the one artifact both backends produce, so
reading entry names, parameter types and the ISA version from it gives one code
path for numba and CUDA C++ kernels. The runtime packs ``.cu`` kernel arguments
from the parameter types recorded here, and decides which driver can JIT the
PTX from its ``.version``.
"""

from __future__ import annotations

import os
import re
from typing import Dict, List, Optional

_VERSION_LINE_RE = re.compile(r"^(\s*)\.version\s+(\d+)\.(\d+)\s*$", re.MULTILINE)
_TARGET_LINE_RE = re.compile(r"^\s*\.target\s+([^\s/]+)", re.MULTILINE)
# ".visible .entry NAME(" or ".weak .entry NAME(" or ".entry NAME(", possibly
# with no parameter list ("NAME()" on one line).
_ENTRY_RE = re.compile(
    r"^\s*(?:\.(?:visible|weak|extern)\s+)*\.entry\s+([A-Za-z_$%][\w$%.]*)\s*(\(|$)",
    re.MULTILINE,
)
_TYPE_RE = re.compile(r"^\.(?:[usbf](?:8|16|32|64)|pred|f16x2|bf16|bf16x2|e4m3x2|e5m2x2)$")
_FILE_RE = re.compile(r'^(\s*\.file\s+\d+\s+")([^"]*)(".*)$', re.MULTILINE)


def ptx_version(ptx: str) -> str:
    """The ``.version`` of a PTX module, e.g. ``"9.0"``; ValueError if absent."""
    m = _VERSION_LINE_RE.search(ptx)
    if m is None:
        raise ValueError("PTX has no .version directive")
    return "%s.%s" % (m.group(2), m.group(3))


def ptx_target(ptx: str) -> str:
    """The first operand of ``.target``, e.g. ``"sm_90"``; ValueError if absent."""
    m = _TARGET_LINE_RE.search(ptx)
    if m is None:
        raise ValueError("PTX has no .target directive")
    return m.group(1).rstrip(",")


def set_ptx_version(ptx: str, version: str) -> str:
    """Rewrite the ``.version`` directive (for a ``ptx_version`` override).

    Only the header changes; whether the body is legal at that ISA is for
    nvJitLink/ptxas to decide when the cubin is built from the rewritten text.
    """
    if not re.match(r"^\d+\.\d+$", version):
        raise ValueError("invalid PTX version %r" % (version,))
    new, n = _VERSION_LINE_RE.subn(lambda m: "%s.version %s" % (m.group(1), version), ptx, count=1)
    if n != 1:
        raise ValueError("PTX has no .version directive")
    return new


def _param_type(line: str) -> Optional[str]:
    """``".param .u64 .ptr .global .align 4 foo_param_0,"`` -> ``"u64"``.

    Aggregates passed by value (``.param .align 8 .b8 p[16]``) are written
    ``"align 8 b8[16]"`` so the runtime has size and alignment to pack them.
    Returns None for a line that is not a ``.param`` declaration.
    """
    tokens = line.strip().rstrip(",").split()
    if len(tokens) < 3 or tokens[0] != ".param":
        return None
    typ = None
    align = None
    k = 1
    while k < len(tokens) - 1:
        tok = tokens[k]
        if tok == ".align" and k + 1 < len(tokens) - 1:
            if typ is None:
                align = tokens[k + 1]
            k += 2
            continue
        if _TYPE_RE.match(tok) and typ is None:
            typ = tok[1:]
        k += 1
    if typ is None:
        return None
    name = tokens[-1]
    m = re.match(r"^[^\[]+\[(\d+)\]$", name)
    if m is None:
        return typ
    return "align %s %s[%s]" % (align or "1", typ, m.group(1))


def parse_entries(ptx: str) -> Dict[str, List[str]]:
    """Map each ``.entry`` (kernel) name to its parameter types, in PTX order.

    Insertion order of the returned dict follows the PTX text, so callers get a
    deterministic order without sorting.
    """
    entries: Dict[str, List[str]] = {}
    lines = ptx.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _ENTRY_RE.match(line)
        if m is None:
            i += 1
            continue
        name = m.group(1)
        params: List[str] = []
        # Find the start of the parameter list, which may be on the entry line.
        rest = line[m.end(1) :]
        if "(" not in rest:
            entries[name] = params
            i += 1
            continue
        if ")" in rest:  # "NAME()" or all on one line
            inner = rest[rest.index("(") + 1 : rest.index(")")]
            for part in inner.split(","):
                t = _param_type(part.strip()) if part.strip() else None
                if t is not None:
                    params.append(t)
            entries[name] = params
            i += 1
            continue
        i += 1
        while i < len(lines):
            pl = lines[i].strip()
            if pl.startswith(")"):
                break
            t = _param_type(pl)
            if t is not None:
                params.append(t)
            elif pl and not pl.startswith("//"):
                raise ValueError("cannot parse PTX parameter of %s: %r" % (name, pl))
            i += 1
        entries[name] = params
        i += 1
    return entries


def relativize_file_directives(ptx: str, root: Optional[str] = None) -> str:
    """Make ``.file N "/abs/dir/x.cu"`` paths under ``root`` (default: cwd) relative.

    NVRTC (and numba, through the module's ``__file__``) record absolute paths
    in line-info ``.file`` directives. Inside a build sandbox that would leak
    the sandbox path into the PTX and cubin and break byte-identical outputs, so
    every path below the working directory is rewritten relative to it.
    """
    base = os.path.abspath(root if root is not None else os.getcwd())
    prefix = base.rstrip(os.sep) + os.sep

    def fix(m: "re.Match[str]") -> str:
        path = m.group(2)
        if os.path.isabs(path):
            norm = os.path.normpath(path)
            if norm.startswith(prefix):
                path = norm[len(prefix) :]
        return m.group(1) + path + m.group(3)

    return _FILE_RE.sub(fix, ptx)
