"""JIT mode's kernel sources: the index entries the plugin put on sys.path (`gpu_spec.jit_index`).

`pants run` / `pants test` of a target that depends on `gpu_kernel`s puts
`__gpu_kernels__/<address>.json` and the files each compile reads into the PEX or the test
sandbox; a checkout gets them from `pants export-codegen` (README: "JIT mode"). Nothing here
scans source directories or searches file texts: a kernel's inputs are what Pants resolved.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

from gpu_runtime.errors import GpuRuntimeError
from gpu_spec.errors import SpecError
from gpu_spec.jit_index import INDEX_SUFFIX, JIT_DIR, parse_jit_entry

log = logging.getLogger("gpu_runtime")


@dataclass(frozen=True)
class JitSource:
    """One `gpu_kernel` target as JIT mode compiles it."""

    library: str
    target: str
    toolchain: str
    source: str  # relative to `root`
    flags: Tuple[str, ...]
    files: Mapping[str, str]  # {path relative to root: sha256 the plugin recorded}
    root: str  # the compile's working directory
    index: str  # the entry file, for messages

    def current_files(self) -> Dict[str, str]:
        """{path: sha256} of the files as they are now (what the compile will read)."""
        out: Dict[str, str] = {}
        for path in sorted(self.files):
            full = os.path.join(self.root, *path.split("/"))
            try:
                with open(full, "rb") as f:
                    out[path] = hashlib.sha256(f.read()).hexdigest()
            except OSError as e:
                raise GpuRuntimeError(
                    f"JIT mode: {full}, an input of {self.target} listed by {self.index}, cannot "
                    f"be read ({e.strerror or e}): re-run `pants export-codegen` (checkout) or "
                    f"`pants run`/`pants test`, which write it"
                ) from None
        return out


def _load_entry(index: str, root: str) -> JitSource:
    try:
        with open(index, "rb") as f:
            data = parse_jit_entry(json.loads(f.read().decode("utf-8")), origin=index)
    except (OSError, ValueError, SpecError) as e:
        raise GpuRuntimeError(f"JIT mode: cannot read the kernel index entry {index}: {e}") from e
    return JitSource(
        library=data["library"],
        target=data["target"],
        toolchain=data["toolchain"],
        source=data["source"],
        flags=tuple(data["flags"]),
        files=dict(data["files"]),
        root=root,
        index=index,
    )


def find_jit_sources(search_path: Optional[Sequence[str]] = None) -> Dict[str, JitSource]:
    """{library: JitSource} of every entry under `<dir>/__gpu_kernels__/` for dir in the search
    path (default sys.path); the first entry of a target wins, two targets of one name fail."""
    found: Dict[str, JitSource] = {}
    for entry_dir in search_path if search_path is not None else sys.path:
        base = os.path.join(entry_dir or ".", JIT_DIR)
        try:
            names = sorted(n for n in os.listdir(base) if n.endswith(INDEX_SUFFIX))
        except OSError:
            continue
        for name in names:
            root = os.path.join(base, name[: -len(INDEX_SUFFIX)])
            src = _load_entry(os.path.join(base, name), root)
            other = found.get(src.library)
            if other is None:
                found[src.library] = src
            elif other.target != src.target:
                raise GpuRuntimeError(
                    f"JIT mode: two gpu_kernel targets are named {src.library!r}: {other.target} "
                    f"({other.index}) and {src.target} ({src.index}); rename one of them"
                )
    return found
