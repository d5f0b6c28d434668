"""A ``.cu`` source's user headers, found and read by us, handed to NVRTC in memory.

Why not let NVRTC search: NVRTC opens whatever an ``#include`` names, so
``#include "/opt/vendor/x.cuh"``, a ``../`` out of the sandbox or a symlink
pointing out of it would make it read a build-machine file that is not an input
of the compile (see ``gpu_compiler.sandbox``). Here every literal include and
``__has_include`` is resolved with NVRTC's own search order, measured with the
13.0 wheels:

* ``"name"``: the including file's directory, then each ``-I`` dir in order;
* ``<name>``: the ``-I`` dirs only (then NVRTC's built-in headers);
* an absolute name: that path.

Each candidate is checked before it is opened: one that lies outside the
sandbox, by name or after ``realpath``, fails the build (NVRTC would probe it
even when a later candidate exists). A found header is read from the sandbox
and given to NVRTC in memory (``nvrtcCreateProgram``'s headers/includeNames)
under the path NVRTC itself would have built (includer's directory or ``-I``
dir joined with the name), and the directive is rewritten to that name: NVRTC
matches in-memory headers by exact name, so it never searches the disk for
them. The name keeps the PTX ``.file`` paths, diagnostics and ``__FILE__``
what they were when NVRTC read the files itself, and one name per real file
keeps ``#pragma once`` working. Rewriting changes the name inside the quotes
only, so line numbers stay.

What is left to NVRTC: names found nowhere in the sandbox. It searches the
same in-sandbox places (every header's in-memory name is its real relative
path, so "its directory" is the same one) and finds nothing, then the
toolchain's CUDA header directories (``toolchain_headers``: ``cuda_fp16.h``,
``cub/...``), then its built-in headers. A name that would climb out of a
toolchain directory (``<../../x>``) is refused here: NVRTC joins it to each.
Computed includes (``#include MACRO``) and ``#include_next`` cannot be checked
before preprocessing and are refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from gpu_compiler.cuda_cpp.toolchain_headers import escapes
from gpu_compiler.errors import CompileError
from gpu_compiler.sandbox import FIX_HEADER, Sandbox

_DIRECTIVE_RE = re.compile(r"^[ \t]*#[ \t]*(include_next|include)\b[ \t]*(.*)$", re.MULTILINE)
_HAS_INCLUDE_RE = re.compile(r"\b(__has_include(?:_next)?)[ \t]*\([ \t]*(.*)$", re.MULTILINE)
_OPERAND_RE = re.compile(r'"([^"\n]*)"|<([^>\n]*)>')


@dataclass
class CudaProgramText:
    """The main source and its headers, ready for ``nvrtcCreateProgram``."""

    source: bytes
    headers: List[Tuple[str, bytes]] = field(default_factory=list)  # (include name, text)


@dataclass(frozen=True)
class _Directive:
    """One literal include: where it is (file shown as given, line) and what it names."""

    includer: str  # the including file's path as NVRTC names it (relative to the cwd)
    line: int
    quoted: bool
    name: str
    span: Tuple[int, int]  # of ``name`` in the includer's text

    def spelled(self, keyword: str = "#include") -> str:
        return '%s "%s"' % (keyword, self.name) if self.quoted else "%s <%s>" % (keyword, self.name)


def _decode(data: bytes) -> str:
    # surrogateescape: bytes that are not UTF-8 survive the rewrite unchanged.
    return data.decode("utf-8", "surrogateescape")


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _refusal(d: _Directive, what: str) -> CompileError:
    shown = os.path.normpath(d.includer)
    return CompileError(
        "%s:%d: error: %s; fix: %s" % (shown, d.line, what, FIX_HEADER), source=shown, line=d.line
    )


def _directives(includer: str, text: str) -> List[_Directive]:
    """Every ``#include``/``__has_include`` with a literal operand; CompileError for the rest."""
    found: List[_Directive] = []
    for regex in (_DIRECTIVE_RE, _HAS_INCLUDE_RE):
        for m in regex.finditer(text):
            keyword, rest = m.group(1), m.group(2)
            keyword = keyword if keyword.startswith("__") else "#" + keyword
            line = _line_of(text, m.start())
            op = _OPERAND_RE.match(rest)
            where = _Directive(includer, line, True, rest.strip(), (0, 0))
            if keyword.endswith("_next"):
                raise _refusal(
                    where,
                    "%s is not supported in the hermetic compile: where it searches cannot be "
                    "checked before preprocessing; include the header by its path instead"
                    % keyword,
                )
            if op is None:
                raise _refusal(
                    where,
                    "computed include %s %s: the header it names cannot be checked before "
                    "preprocessing; write the header's name in quotes" % (keyword, rest.strip()),
                )
            quoted = op.group(1) is not None
            start = m.start(2) + op.start(1 if quoted else 2)
            name = op.group(1) if quoted else op.group(2)
            found.append(_Directive(includer, line, quoted, name, (start, start + len(name))))
    found.sort(key=lambda d: d.span)
    return found


def _candidates(d: _Directive, include_dirs: Sequence[str]) -> List[str]:
    """Where NVRTC looks for ``d``, in its order (paths relative to the cwd)."""
    dirs = ([os.path.dirname(d.includer)] if d.quoted else []) + list(include_dirs)
    return [os.path.join(base, d.name) if base else d.name for base in dirs]


def _find(
    d: _Directive, include_dirs: Sequence[str], sandbox: Sandbox, system_dirs: Sequence[str]
) -> Optional[str]:
    """The first candidate that exists, or None (NVRTC then searches the toolchain's headers);
    CompileError for one outside the sandbox, or one leading out of a toolchain directory."""
    if os.path.isabs(d.name):
        raise _refusal(
            d,
            "refused %s: an absolute include names a file of the build machine (%s), not an "
            "input of the compile" % (d.spelled(), os.path.realpath(d.name)),
        )
    for cand in _candidates(d, include_dirs):
        if not sandbox.lexically_inside(cand):
            raise _refusal(
                d,
                "refused %s: it resolves to %s, outside the compile's inputs (the sandbox)"
                % (d.spelled(), os.path.normpath(os.path.abspath(cand))),
            )
        if os.path.lexists(cand) and not sandbox.really_inside(cand):
            raise _refusal(
                d,
                "refused %s: it resolves to %s, outside the compile's inputs (the sandbox)"
                % (d.spelled(), sandbox.where(cand)),
            )
        if os.path.isfile(cand):
            return cand
    climbed = escapes(d.name, system_dirs)
    if climbed is not None:
        raise _refusal(
            d,
            "refused %s: through the toolchain's header directories it resolves to %s, "
            "outside the compile's inputs and the toolchain's headers" % (d.spelled(), climbed),
        )
    return None


# The preprocessor's clock: each expands to when (or, __TIMESTAMP__, to the mtime of the file
# as) this compile ran, so a fresh build and a cached one differ. NVRTC refuses to have them
# redefined ("predefined; attempted redefinition ignored", "-D__DATE__": invalid macro
# definition): they are refused where they are used.
CLOCK_MACROS = ("__DATE__", "__TIME__", "__TIMESTAMP__")
CLOCK_RE = re.compile(r"\b(%s)\b" % "|".join(CLOCK_MACROS))
_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
# Comments and literals (blanked, newlines kept, before the macros are looked for); a raw
# string's body is not parsed (it may hold quotes): its delimiter ends it.
_NOT_CODE_RE = re.compile(
    r'//[^\n]*|/\*.*?\*/|R"(?P<delim>[^(\s]*)\(.*?\)(?P=delim)"|"(?:\\.|[^"\\\n])*"'
    r"|'(?:\\.|[^'\\\n])*'",
    re.DOTALL,
)
FIX_CLOCK = (
    "a kernel's bytes must not depend on when it was built; pass a version or date in "
    "`defines` of the gpu_kernel target (it is then part of the cache key)"
)


def _code_only(text: str) -> Tuple[str, List[int]]:
    """The text with lines spliced (a backslash-newline removed, as the preprocessor does
    first) and comments and literals blanked; and where in it each splice was."""
    pieces = text.split("\\\n")
    splices, at = [], 0
    for piece in pieces[:-1]:
        at += len(piece)
        splices.append(at)
    code = "".join(pieces)
    return _NOT_CODE_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), code), splices


def _fragments() -> Dict[str, str]:
    """Pieces ``##`` can paste into a clock macro (at least two characters, not the whole)."""
    found: Dict[str, str] = {}
    for name in CLOCK_MACROS:
        for i in range(len(name)):
            for j in range(i + 2, len(name) + 1):
                piece = name[i:j]
                if piece != name and piece.strip("_"):
                    found.setdefault(piece, name)
    return found


_FRAGMENTS = _fragments()


def refuse_clock_macros(shown: str, text: str) -> None:
    """CompileError at the first line that uses ``__DATE__``, ``__TIME__`` or ``__TIMESTAMP__``
    outside comments and literals, or, in a file that pastes tokens (``##``), a piece of one."""
    code, splices = _code_only(text)
    m = CLOCK_RE.search(code)
    what = m.group(1) if m else ""
    if m is None and "##" in code:
        for ident in _IDENTIFIER_RE.finditer(code):
            if ident.group(0) in _FRAGMENTS:
                m, what = ident, "%s (pasted with ##)" % _FRAGMENTS[ident.group(0)]
                break
    if m is None:
        return
    line = _line_of(code, m.start()) + sum(1 for at in splices if at <= m.start())
    raise CompileError(
        "%s:%d: error: refused %s: it expands to the time of this compile, so a fresh and a "
        "cached build would differ; fix: %s" % (os.path.normpath(shown), line, what, FIX_CLOCK),
        source=os.path.normpath(shown),
        line=line,
    )


def _read(path: str, shown: str) -> str:
    try:
        with open(path, "rb") as f:
            return _decode(f.read())
    except OSError as e:
        raise CompileError("%s: error: cannot read: %s" % (shown, e), source=shown) from e


def _check_roots(source_path: str, include_dirs: Sequence[str], sandbox: Sandbox) -> None:
    """The source and every ``-I`` dir must themselves be inside the sandbox."""
    if not sandbox.inside(source_path):
        raise CompileError(
            "%s: error: the kernel source resolves to %s, outside the compile's inputs "
            "(the sandbox); keep kernel sources inside the repo"
            % (source_path, sandbox.where(source_path)),
            source=source_path,
        )
    for inc in include_dirs:
        if not sandbox.inside(inc):
            raise CompileError(
                "%s: error: include directory %r resolves to %s, outside the compile's inputs "
                "(the sandbox); fix: %s" % (source_path, inc, sandbox.where(inc), FIX_HEADER),
                source=source_path,
            )


def resolve_includes(
    source_path: str,
    include_dirs: Sequence[str],
    sandbox: Sandbox,
    system_dirs: Sequence[str] = (),
) -> CudaProgramText:
    """Read the source and, recursively, every user header it includes, from the sandbox only;
    ``system_dirs``: the toolchain's header directories NVRTC searches after ``include_dirs``."""
    _check_roots(source_path, include_dirs, sandbox)
    # realpath -> the one in-memory name of that file (the source keeps its own name)
    name_of: Dict[str, str] = {os.path.realpath(source_path): source_path}
    rewritten: Dict[str, str] = {}  # in-memory name -> text with its directives rewritten
    pending = [(source_path, _read(source_path, source_path))]
    while pending:
        includer, text = pending.pop(0)
        refuse_clock_macros(includer, text)
        pieces: List[str] = []
        at = 0
        for d in _directives(includer, text):
            path = _find(d, include_dirs, sandbox, system_dirs)
            if path is None:
                continue  # NVRTC finds it nowhere either, or it is one of NVRTC's built-ins
            real = os.path.realpath(path)
            if real not in name_of:
                name_of[real] = path
                pending.append((path, _read(path, os.path.normpath(path))))
            pieces += [text[at : d.span[0]], name_of[real]]
            at = d.span[1]
        rewritten[includer] = "".join(pieces) + text[at:]
    main = rewritten.pop(source_path)
    return CudaProgramText(_encode(main), [(n, _encode(t)) for n, t in rewritten.items()])
