"""JIT mode's index of kernel sources: where the plugin writes an entry and what it holds.

The plugin (`gpu_build.util_rules.jit_index`) generates, for each `gpu_kernel` a Python target
depends on,
`<source root>/__gpu_kernels__/<address>.json` plus the files its compile reads under
`<source root>/__gpu_kernels__/<address>/`; the runtime (`gpu_runtime.jit.sources`) finds them
on sys.path. Schema 2 entry:

    {"schema": 2, "library": "saxpy", "target": "src/python/imaging/kernels:saxpy",
     "toolchain": "cuda13", "capabilities": ["sm_87", "sm_90"],
     "source": "src/python/imaging/kernels/saxpy.py", "source_root": "src/python",
     "flags": ["--sys-path", "src/python", ...],      # `gpu_compiler compile` flags
     "files": {"src/python/imaging/kernels/saxpy.py": "<sha256>", ...}}

Paths are relative to the files directory, which is the compile's working directory, exactly
as in the build step's sandbox, i.e. relative to the build root. `source_root` (schema 2) is
the source's root there: it lets the runtime find the live copy of each file in a checkout
(`gpu_runtime.jit.sources`) and refuse an index that `export-codegen` wrote before the files
changed. An entry of schema 1 predates it and is refused: regenerate it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from gpu_spec.errors import SpecError
from gpu_spec.manifest.checker import NAME_RE, SHA256_RE
from gpu_spec.manifest.paths import check_relpath

JIT_DIR = "__gpu_kernels__"
JIT_INDEX_SCHEMA = 2
INDEX_SUFFIX = ".json"


def entry_paths(source_root: str, slug: str) -> Tuple[str, str]:
    """(index file, files directory) of one target, relative to the build root."""
    base = f"{source_root}/{JIT_DIR}" if source_root not in ("", ".") else JIT_DIR
    return f"{base}/{slug}{INDEX_SUFFIX}", f"{base}/{slug}"


def parse_jit_entry(data: Any, origin: str) -> Dict[str, Any]:
    """The entry, checked; SpecError naming `origin` and every problem otherwise."""
    problems: List[str] = []
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: a JIT index entry must be a JSON object")
    if data.get("schema") != JIT_INDEX_SCHEMA:
        problems.append(f"schema {data.get('schema')!r} is not {JIT_INDEX_SCHEMA}")
    if not isinstance(data.get("library"), str) or not NAME_RE.match(data["library"]):
        problems.append(f"library {data.get('library')!r} is not a valid name")
    for key in ("target", "toolchain", "source"):
        if not isinstance(data.get(key), str) or not data[key]:
            problems.append(f"{key!r} must be a non-empty string")
    root = data.get("source_root")
    if not isinstance(root, str):
        problems.append("'source_root' must be a string ('' for the build root)")
    elif root and check_relpath(root):
        problems.append(f"source_root {root!r}: {check_relpath(root)}")
    flags = data.get("flags")
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        problems.append("'flags' must be a list of strings")
    files = data.get("files")
    if not isinstance(files, dict) or not files:
        problems.append("'files' must be a non-empty object")
    else:
        for path, digest in files.items():
            why = check_relpath(path)
            if why:
                problems.append(f"file {path!r}: {why}")
            if not isinstance(digest, str) or not SHA256_RE.match(digest):
                problems.append(f"file {path!r}: sha256 {digest!r} is not 64 hex digits")
        if isinstance(data.get("source"), str) and data["source"] not in files:
            problems.append(f"the source {data['source']!r} is not among 'files'")
    if problems:
        raise SpecError(f"{origin}: invalid JIT index entry: " + "; ".join(problems))
    return data
