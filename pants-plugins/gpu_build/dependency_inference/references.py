"""What a kernel source refers to: the `#include`s of CUDA C++ and the imports of numba Python.

Pure functions of a file's text, so dependency inference can read files through the engine and
still be tested without it. Each reference carries the paths it may resolve to, in the order the
compiler searches them; the rule picks the first that exists and asks Pants for its owners.

What is and is not seen, on purpose (like Pants' own parsers, an over-approximation is safer than
a missing file in the compile's sandbox):
- `#include` lines are found after comments are removed, but `#if`/`#ifdef` are not evaluated:
  an include in a disabled branch is still a dependency when its file exists.
- Imports anywhere in a Python file count (also inside functions). Ancestor packages'
  `__init__.py` files are not added for `import a.b.c`; list them in `dependencies` when the
  kernel needs what they run.
- A reference whose line has `pants: no-infer-dep` (in a comment) is skipped, as in Pants' Python
  backend.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from typing import Iterable, Optional

NO_INFER_DEP = "pants: no-infer-dep"

_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^<>"\n]+)[>"]', re.MULTILINE)


@dataclass(frozen=True)
class Reference:
    """One `#include` or import, and the build-root-relative paths it may resolve to."""

    file: str  # the file that has the reference
    lineno: int
    text: str  # as written: `"sub/val.cuh"`, `<cuda_fp16.h>`, `imaging.kernels._stencil`
    candidates: tuple[str, ...]  # in search order; the first that exists is the one
    # True: a missing owner is a problem (a quoted include, a relative import). False: only when
    # `top_level` is first-party (an absolute import), or never (an angle include).
    expect_owner: bool
    top_level: Optional[str] = None  # the absolute import's top-level package

    def describe(self) -> str:
        return f"{self.text} ({self.file}, line {self.lineno})"


def _inside_repo(path: str) -> bool:
    return not (os.path.isabs(path) or path == ".." or path.startswith("../"))


def _dedupe(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for p in paths if _inside_repo(p)))


# -----------------------------------------------------------------------------------------------
# CUDA C++


def strip_c_comments(text: str) -> str:
    """The text with `//` and `/* */` comments blanked, newlines kept so line numbers hold.

    A scanner rather than a regex, so that `"//"` inside a string literal is not a comment and a
    commented-out `#include` is not an include.
    """
    out = []
    i, n = 0, len(text)
    while i < n:
        c, nxt = text[i], text[i + 1 : i + 2]
        if c == "/" and nxt == "/":
            end = text.find("\n", i)
            end = n if end == -1 else end
            out.append(" " * (end - i))
            i = end
        elif c == "/" and nxt == "*":
            end = text.find("*/", i + 2)
            end = n if end == -1 else end + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:end]))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] not in (c, "\n"):
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def include_candidates(
    including_file: str, name: str, *, quoted: bool, include_dirs: Iterable[str]
) -> tuple[str, ...]:
    """Where NVRTC looks for `name`: a quoted include next to the including file first, then in
    each `-I` directory (build-root relative, as `compile_options` gives them); an angle
    include in the `-I` directories only. Paths outside the repository are never candidates."""
    here = [os.path.dirname(including_file)] if quoted else []
    return _dedupe(os.path.normpath(os.path.join(d, name)) for d in (*here, *include_dirs))


def parse_includes(path: str, text: str, include_dirs: Iterable[str]) -> tuple[Reference, ...]:
    include_dirs = tuple(include_dirs)
    lines = text.splitlines()
    references = []
    for match in _INCLUDE_RE.finditer(strip_c_comments(text)):
        lineno = text.count("\n", 0, match.start()) + 1
        if NO_INFER_DEP in lines[lineno - 1]:
            continue
        quoted = match.group(1) == '"'
        name = match.group(2).strip()
        references.append(
            Reference(
                file=path,
                lineno=lineno,
                text=f'"{name}"' if quoted else f"<{name}>",
                candidates=include_candidates(path, name, quoted=quoted, include_dirs=include_dirs),
                expect_owner=quoted,
            )
        )
    return tuple(references)


# -----------------------------------------------------------------------------------------------
# numba Python


def module_files(module: str, source_root: str) -> tuple[str, str]:
    """The files that can be `module` under `source_root`: the package first, as Python's path
    finder looks for `a/b/__init__.py` before `a/b.py`."""
    base = os.path.normpath(os.path.join(source_root, *module.split(".")))
    return (f"{base}/__init__.py", f"{base}.py")


def _package_of(path: str, source_root: str) -> list[str]:
    """The dotted package a file under `source_root` is imported in, as a list of names."""
    relative = os.path.relpath(os.path.dirname(path), source_root)
    return [] if relative == "." else relative.split(os.sep)


def _imported_modules(node: ast.AST, package: list[str]) -> list[tuple[str, ...]]:
    """For each module an import statement names: the module names to try, most specific first.

    `from a.b import c` tries `a.b.c` (a submodule) then `a.b` (c is a name in it), as Pants'
    Python backend does; `import a.b` means the module `a.b`.
    """
    if isinstance(node, ast.Import):
        return [(alias.name,) for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    base = node.module.split(".") if node.module else []
    if node.level:
        if node.level > len(package):
            return []  # beyond the top-level package: Python refuses it, nothing to infer
        base = package[: len(package) - (node.level - 1)] + base
    if not base:
        return [(alias.name,) for alias in node.names if alias.name != "*"]
    module = ".".join(base)
    return [
        (module,) if alias.name == "*" else (f"{module}.{alias.name}", module)
        for alias in node.names
    ]


def parse_imports(path: str, text: str, source_root: str) -> tuple[Reference, ...]:
    """The imports of a Python file under `source_root` (the compile's only `sys.path` entry).

    A file that does not parse has no references here: the compile reports the syntax error.
    """
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError):
        return ()
    lines = text.splitlines()
    package = _package_of(path, source_root)
    references = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        end = getattr(node, "end_lineno", None) or node.lineno
        if any(NO_INFER_DEP in line for line in lines[node.lineno - 1 : end]):
            continue
        relative = isinstance(node, ast.ImportFrom) and node.level > 0
        for modules in _imported_modules(node, package):
            references.append(
                Reference(
                    file=path,
                    lineno=node.lineno,
                    text=modules[0],
                    candidates=_dedupe(f for m in modules for f in module_files(m, source_root)),
                    expect_owner=relative,
                    top_level=None if relative else modules[0].split(".")[0],
                )
            )
    return tuple(sorted(references, key=lambda r: (r.lineno, r.text)))


# -----------------------------------------------------------------------------------------------
# Files a numba source links (cuda.declare_device(..., link=...), @cuda.jit(link=[...]))

LINK_SUFFIXES = (".cu", ".ptx")


def _link_texts(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, relative path) of every string naming a `.cu`/`.ptx` file: a literal, or the
    literal tail of an `os.path.join(..., "ffi", "functions.cu")` (the numba docs' form)."""
    found: list[tuple[int, str]] = []
    joined: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "join":
            tail: list[str] = []
            for arg in reversed(node.args):
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    break
                tail.insert(0, arg.value)
                joined.add(id(arg))
            if tail and tail[-1].endswith(LINK_SUFFIXES):
                found.append((node.lineno, "/".join(tail)))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.endswith(LINK_SUFFIXES)
            and id(node) not in joined
            and "\n" not in node.value
        ):
            found.append((node.lineno, node.value))
    return found


def parse_links(path: str, text: str) -> tuple[Reference, ...]:
    """The CUDA C++ / PTX files a numba source may link, looked up as gpu_compiler does: beside
    the source first, then from the build root."""
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError):
        return ()
    lines = text.splitlines()
    references = []
    for lineno, name in _link_texts(tree):
        if NO_INFER_DEP in lines[lineno - 1]:
            continue
        here = os.path.normpath(os.path.join(os.path.dirname(path), name))
        references.append(
            Reference(
                file=path,
                lineno=lineno,
                text=f'"{name}"',
                candidates=_dedupe((here, os.path.normpath(name))),
                expect_owner=True,
            )
        )
    return tuple(sorted(set(references), key=lambda r: (r.lineno, r.text)))
