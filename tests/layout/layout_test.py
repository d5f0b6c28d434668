"""The layout of the four packages: a folder per concern, none too big, no import cycles.

Why a test: the layout is what lets a reader find a module's neighbours by its path, and it
decays one convenient import at a time. Checked here, on the sources as the BUILD files own
them (the `files` dependencies of this test):
- no package holds more than MAX_MODULES modules (tests, `__init__`, `__main__` and `conftest`
  not counted);
- no module imports, at module level, a module that imports it back, directly or through
  others (a cycle in the module-level import graph). Imports inside functions are deliberate
  (lazy, or breaking a cycle) and are not edges; neither are `if TYPE_CHECKING:` imports.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Dict, Iterator, List, Set

import pytest

MAX_MODULES = 15
# source root -> top-level packages of the project under it
TREES = {
    "src/python": ["gpu_runtime", "gpu_compiler", "gpu_runtime_testutil"],
    "src/spec": ["gpu_spec"],
    "pants-plugins": ["gpu_build", "gpu_build_testutil"],
}
NOT_COUNTED = {"__init__.py", "__main__.py", "conftest.py"}


def repo_root() -> Path:
    # pants test runs in a sandbox holding the files at their paths from the build root
    return Path(os.environ.get("LAYOUT_TEST_ROOT", "."))


def packages() -> Iterator[Path]:
    for root, tops in TREES.items():
        for top in tops:
            base = repo_root() / root / top
            if not base.is_dir():
                pytest.fail(f"{base} is missing from the sandbox: see tests/layout/BUILD")
            for init in sorted(base.rglob("__init__.py")):
                yield init.parent


def modules(package: Path) -> List[str]:
    return sorted(
        p.name
        for p in package.glob("*.py")
        if not p.name.endswith("_test.py") and p.name not in NOT_COUNTED
    )


def test_no_package_holds_more_than_fifteen_modules() -> None:
    sizes = {str(pkg): modules(pkg) for pkg in packages()}
    assert len(sizes) >= 20, sorted(sizes)  # the trees were found
    too_big = {pkg: len(mods) for pkg, mods in sizes.items() if len(mods) > MAX_MODULES}
    assert not too_big, f"packages over {MAX_MODULES} modules: {too_big}"


def module_names() -> Dict[str, Path]:
    """Dotted name -> file, for every non-test module of the trees (packages by their __init__)."""
    names: Dict[str, Path] = {}
    for root in TREES:
        for pkg in packages():
            if not str(pkg).startswith(str(repo_root() / root) + os.sep):
                continue
            dotted = ".".join(pkg.relative_to(repo_root() / root).parts)
            for path in pkg.glob("*.py"):
                if path.name.endswith("_test.py") or path.name == "conftest.py":
                    continue
                stem = path.stem
                names[dotted if stem == "__init__" else f"{dotted}.{stem}"] = path
    return names


def _module_level(body: List[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run on import: the body, into try/except and if (not TYPE_CHECKING)."""
    for node in body:
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name != "TYPE_CHECKING":
                yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _module_level(block)
            for handler in node.handlers:
                yield from _module_level(handler.body)
        else:
            yield node


def imports_of(name: str, path: Path, known: Set[str]) -> Set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: Set[str] = set()
    for node in _module_level(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return {m for m in out if m in known and m != name}


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_level_import_cycles() -> None:
    names = module_names()
    graph = {name: imports_of(name, path, set(names)) for name, path in names.items()}
    assert sum(len(edges) for edges in graph.values()) > 100  # the imports were read
    assert cycles(graph) == []


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
