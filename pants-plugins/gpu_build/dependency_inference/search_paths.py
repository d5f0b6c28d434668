"""The include directories a numba source gives numba at import: `CUDA_NVRTC_EXTRA_SEARCH_PATHS`.

numba-cuda's documentation (`ex_extra_search_paths`) sets them in the kernel module, computed
from the module's own path:

    basedir = os.path.dirname(os.path.abspath(__file__))
    mul_dir = os.path.join(basedir, "ffi", "include")
    config.CUDA_NVRTC_EXTRA_SEARCH_PATHS = ":".join([mul_dir, add_dir])

The `.cu` files the module links find their `#include <...>` there, so dependency inference
looks for those headers in these directories too. The value is evaluated statically, over the
module's top-level assignments in order, for what such code is made of: string literals,
`__file__`, names bound earlier, `os.path.join/dirname/abspath/realpath/normpath`,
`"sep".join([...])` and `os.pathsep.join`, `+`, f-strings, and `pathlib.Path(...)` with
`.parent`, `/`, `.resolve()` and `str()`. `__file__` is the source's build-root-relative path,
as the compile's working directory is the build root; `abspath` and `resolve` keep paths
relative to it. Anything else (a call of the user's own, a loop, an environment variable)
evaluates to nothing: no directory is inferred from it, and the compile names a header it then
cannot find. Directories outside the repository are never returned (the compile refuses them).
"""

from __future__ import annotations

import ast
import os
from typing import Callable, Dict, List, Optional, Union

SEARCH_PATHS_ATTR = "CUDA_NVRTC_EXTRA_SEARCH_PATHS"

_Value = Union[str, List[str]]
_PATH_FUNCS: Dict[str, Callable[..., str]] = {
    "join": os.path.join,
    "dirname": os.path.dirname,
    "abspath": os.path.normpath,  # relative to the build root, the compile's cwd
    "realpath": os.path.normpath,
    "normpath": os.path.normpath,
}
_PATH_METHODS = {"resolve", "absolute"}  # pathlib: kept relative to the build root


def _is_os_path(node: ast.AST) -> bool:
    """`os.path` or `path` (from os import path)."""
    if isinstance(node, ast.Name):
        return node.id == "path"
    return isinstance(node, ast.Attribute) and node.attr == "path" and _name(node.value) == "os"


def _name(node: ast.AST) -> Optional[str]:
    return node.id if isinstance(node, ast.Name) else None


class _Evaluator:
    def __init__(self, path: str) -> None:
        self.env: Dict[str, _Value] = {"__file__": path}

    def string(self, node: ast.AST) -> Optional[str]:
        value = self.value(node)
        return value if isinstance(value, str) else None

    def value(self, node: ast.AST) -> Optional[_Value]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return self.env.get(node.id)
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.string(e) for e in node.elts]
            return None if any(i is None for i in items) else [i for i in items if i is not None]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div)):
            left, right = self.string(node.left), self.string(node.right)
            if left is None or right is None:
                return None
            return left + right if isinstance(node.op, ast.Add) else os.path.join(left, right)
        if isinstance(node, ast.JoinedStr):
            parts = [
                self.string(v.value if isinstance(v, ast.FormattedValue) else v)
                for v in node.values
            ]
            return None if any(p is None for p in parts) else "".join(p or "" for p in parts)
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            inner = self.string(node.value)
            return None if inner is None else os.path.dirname(inner)
        if isinstance(node, ast.Call) and not node.keywords:
            return self._call(node)
        return None

    def _call(self, node: ast.Call) -> Optional[_Value]:
        func, args = node.func, [self.value(a) for a in node.args]
        if any(a is None for a in args):
            return None
        strings = [a for a in args if isinstance(a, str)]
        name = func.attr if isinstance(func, ast.Attribute) else _name(func)
        if isinstance(func, ast.Attribute) and name == "join" and len(args) == 1:
            sep = ":" if _is_os_path_attr(func.value, "pathsep") else self.string(func.value)
            if sep is not None and isinstance(args[0], list):
                return sep.join(args[0])
        from_os_path = isinstance(func, ast.Name) or (
            isinstance(func, ast.Attribute) and _is_os_path(func.value)
        )
        if name in _PATH_FUNCS and from_os_path and args and len(strings) == len(args):
            return _PATH_FUNCS[name](*strings)
        if name in ("Path", "PurePath", "str") and len(strings) == len(args) == 1:
            return strings[0]
        if isinstance(func, ast.Attribute) and name in _PATH_METHODS and not args:
            return self.string(func.value)
        return None


def _is_os_path_attr(node: ast.AST, attr: str) -> bool:
    """`os.<attr>` (e.g. os.pathsep)."""
    return isinstance(node, ast.Attribute) and node.attr == attr and _name(node.value) == "os"


def _inside_repo(path: str) -> bool:
    return not (os.path.isabs(path) or path == ".." or path.startswith("../"))


def parse_search_paths(path: str, text: str) -> tuple[str, ...]:
    """The build-root-relative directories `path` assigns to numba's
    `config.CUDA_NVRTC_EXTRA_SEARCH_PATHS` at module level, in order; () when it sets none or
    the value cannot be evaluated statically."""
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError):
        return ()
    evaluator = _Evaluator(path)
    found: list[str] = []
    for statement in tree.body:
        targets: list[ast.expr]
        if isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets, value = [statement.target], statement.value
        elif isinstance(statement, ast.Assign):
            targets, value = list(statement.targets), statement.value
        else:
            continue
        result = evaluator.value(value)
        for target in targets:
            if isinstance(target, ast.Name):
                if result is None:
                    evaluator.env.pop(target.id, None)
                else:
                    evaluator.env[target.id] = result
            elif isinstance(target, ast.Attribute) and target.attr == SEARCH_PATHS_ATTR:
                if isinstance(result, str):
                    found += [os.path.normpath(d) for d in result.split(":") if d]
    return tuple(d for d in dict.fromkeys(found) if _inside_repo(d))
