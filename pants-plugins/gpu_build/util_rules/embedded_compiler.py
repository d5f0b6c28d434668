"""The compiler the gpu-build wheel carries: gpu_compiler and gpu_spec as package data.

Why: a repo that installs the plugin from its wheel (`[GLOBAL].plugins`) has no gpu_compiler
sources of its own, yet each toolchain PEX must run them. The wheel ships them under
`gpu_build/_embedded/` (pants-plugins:embedded-compiler, see the root BUILD); this rule reads
them at rule time and hands them to the engine as a Digest. They change only when the installed
plugin does, which restarts Pants. In a source checkout (plugin on `pythonpath`) there is no
`_embedded/`: `[gpu-toolchains].compiler` must then name the compiler's target.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from pants.engine.fs import CreateDigest, Digest, FileContent
from pants.engine.rules import Get, collect_rules, rule
from pants.util.strutil import softwrap

EMBEDDED_DIR = "_embedded"
COMPILER_MAIN = "gpu_compiler/__main__.py"


class NoEmbeddedCompilerError(ValueError):
    pass


def embedded_files(root: Any, prefix: str = "") -> list[FileContent]:
    """Every `.py` file under root (a directory or an importlib Traversable), by relative path,
    in sorted order; `__pycache__` (which pip writes on install) is left out."""
    files: list[FileContent] = []
    if not root.is_dir():
        return files
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        path = f"{prefix}{entry.name}"
        if entry.is_dir() and entry.name != "__pycache__":
            files.extend(embedded_files(entry, f"{path}/"))
        elif entry.is_file() and entry.name.endswith(".py"):
            files.append(FileContent(path, entry.read_bytes()))
    return files


def embedded_root() -> Any:
    """`gpu_build/_embedded/` of the installed plugin (an importlib Traversable)."""
    return resources.files("gpu_build") / EMBEDDED_DIR


@dataclass(frozen=True)
class EmbeddedCompiler:
    """gpu_compiler/ and gpu_spec/ as the toolchain PEX takes them (no source root)."""

    digest: Digest


@rule(desc="Read the GPU kernel compiler embedded in the gpu_build plugin")
async def embedded_compiler() -> EmbeddedCompiler:
    files = embedded_files(embedded_root())
    if not any(f.path == COMPILER_MAIN for f in files):
        missing = f"gpu_build/{EMBEDDED_DIR}/{COMPILER_MAIN}"
        raise NoEmbeddedCompilerError(
            softwrap(
                f"""
                This gpu_build plugin carries no compiler ({missing} is missing): it runs
                from a source checkout, not from the gpu-build wheel. Fix: set
                `[gpu-toolchains].compiler` to the `python_sources` target of the gpu_compiler
                package, e.g.
                `compiler = "src/python/gpu_compiler:compiler"`, or install the plugin from its
                wheel through `[GLOBAL].plugins`.
                """
            )
        )
    return EmbeddedCompiler(await Get(Digest, CreateDigest(files)))


def rules():
    return collect_rules()
