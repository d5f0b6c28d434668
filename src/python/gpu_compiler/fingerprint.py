"""The sha256 of the compiler's own code (gpu_compiler and gpu_spec), as it is installed.

Why: a change to the compiler can change the bytes it writes for the same inputs, so anything
that caches its outputs by key (the runtime's JIT cache) must key on this code too. Pants needs
no such thing: the compiler's files are inputs of its processes already.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Iterable


def _package_files(package_dir: str) -> Iterable[str]:
    """The package's modules and its subpackages' (directories with an `__init__.py`; test data
    beside them is not code), by path relative to `package_dir`, in sorted order."""
    for name in sorted(os.listdir(package_dir)):
        path = os.path.join(package_dir, name)
        if os.path.isfile(os.path.join(path, "__init__.py")):
            yield from (f"{name}/{sub}" for sub in _package_files(path))
        elif name.endswith(".py") and not name.endswith("_test.py") and name != "conftest.py":
            yield name


def code_sha256() -> str:
    """sha256 over (package, file name, bytes) of every module of gpu_compiler and gpu_spec."""
    import gpu_compiler
    import gpu_spec

    digest = hashlib.sha256()
    for package in (gpu_compiler, gpu_spec):
        package_dir = os.path.dirname(os.path.abspath(str(package.__file__)))
        for relpath in _package_files(package_dir):
            with open(os.path.join(package_dir, relpath), "rb") as f:
                content = f.read()
            name = "%s/%s" % (package.__name__, relpath)
            digest.update(b"%d:%s\0%d:" % (len(name), name.encode(), len(content)) + content)
    return digest.hexdigest()


def fingerprint() -> Dict[str, Any]:
    """What `python -m gpu_compiler fingerprint` prints: the toolchain's wheel versions (NVRTC's
    among them, so its CUDA version too) and code_sha256."""
    from gpu_compiler import toolchain

    return {"toolchain": toolchain.dist_versions(), "code": code_sha256()}
