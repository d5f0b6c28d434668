"""JIT mode's kernel sources: the index entries the plugin put on sys.path (`gpu_spec.jit_index`).

`pants run` / `pants test` of a target that depends on `gpu_kernel`s puts
`__gpu_kernels__/<address>.json` and the files each compile reads into the PEX or the test
sandbox; a checkout gets them from `pants export-codegen` (docs/jit-mode.md). Nothing here
scans source directories or searches file texts: a kernel's inputs are what Pants resolved.

Why a copy that `export-codegen` left in dist/codegen is never compiled after the checkout
changed: the entry records each file's sha256 and the source's root (`source_root`), and its
file paths are relative to the build root. Every sys.path entry that ends in that source root
names a candidate build root (a checkout, or the `pants test` sandbox); before a kernel's key
is computed, each input is compared with its live copy, the file at the same path under the
first such root that has it (where Python would import it from). A difference refuses the
entry with one line naming the file and the fix (re-run `export-codegen`): stale sources are
never compiled or served. A file no such root has (a PEX, a notebook given only the index) is
taken from the index as it is.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

from gpu_runtime.errors import GpuRuntimeError
from gpu_spec.errors import SpecError
from gpu_spec.jit_index import INDEX_SUFFIX, JIT_DIR, parse_jit_entry
from gpu_spec.safe_read import (
    MAX_INDEX_BYTES,
    MAX_SOURCE_BYTES,
    FileReadError,
    load_json_file,
    read_regular_file,
)

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
    # Build roots whose files are the live ones (from sys.path entries ending in the source
    # root), first first: each input must equal its copy under the first that has it.
    live_roots: Tuple[str, ...] = ()

    def current_files(self) -> Dict[str, str]:
        """{path: sha256} of the files as they are now (what the compile will read); a
        StaleIndexError if one differs from its live copy in a checkout."""
        out: Dict[str, str] = {}
        checkout = self._checkout()
        for path in sorted(self.files):
            full = os.path.join(self.root, *path.split("/"))
            out[path] = _sha256_of(full, self, "an input of")
            if checkout and not os.path.lexists(os.path.join(checkout, *path.split("/"))):
                raise StaleIndexError(
                    f"JIT mode: the kernel index {self.index} is stale: it lists {path}, which "
                    f"is no longer in {checkout} (deleted or moved since the index was "
                    f"generated): re-run `pants export-codegen {self.target}` (or drop its "
                    f"directory from PYTHONPATH); nothing stale is compiled"
                )
            live = self._live_copy(path)
            if live is not None and _sha256_of(live, self, "the live copy of an input of") != (
                out[path]
            ):
                raise StaleIndexError(
                    f"JIT mode: the kernel index {self.index} is stale: {path} differs from "
                    f"{live}, so it was generated before that file changed: re-run "
                    f"`pants export-codegen {self.target}` (or drop its directory from "
                    f"PYTHONPATH); nothing stale is compiled"
                )
        return out

    def may_define(self, name: str) -> bool:
        """Whether a kernel called `name` can come out of this target's compile: only if `name`
        is a word of one of its input files (a numba kernel's function, a C++ kernel's name or
        name expression). A superset of what the compile reports, so a bare-name lookup compiles
        every library that could make the name ambiguous, and only those; a file it cannot read
        counts as a match (the compile then reports the error)."""
        word = re.compile(rb"(?<![A-Za-z0-9_])" + re.escape(name.encode()) + rb"(?![A-Za-z0-9_])")
        for path in self.files:
            full = os.path.join(self.root, *path.split("/"))
            try:
                if word.search(read_regular_file(full, MAX_SOURCE_BYTES, "kernel input")):
                    return True
            except (OSError, FileReadError):
                return True
        return False

    def _checkout(self) -> Optional[str]:
        """The first live build root, other than the index's own, that holds this target's
        source: the checkout the index was generated from, where each input must still be."""
        for build_root in self.live_roots:
            source = os.path.join(build_root, *self.source.split("/"))
            if not _same_file(build_root, self.root) and os.path.isfile(source):
                return build_root
        return None

    def _live_copy(self, path: str) -> Optional[str]:
        for build_root in self.live_roots:
            live = os.path.join(build_root, *path.split("/"))
            if os.path.isfile(live):
                own = os.path.join(self.root, *path.split("/"))
                return None if _same_file(live, own) else live
        return None


class StaleIndexError(GpuRuntimeError):
    """A kernel index entry's files differ from the checkout's: `export-codegen` ran before
    they changed."""


def _sha256_of(full: str, src: JitSource, what: str) -> str:
    try:  # a regular file only: a FIFO among a kernel's inputs would hang the app
        data = read_regular_file(full, MAX_SOURCE_BYTES, "kernel input")
    except (OSError, FileReadError) as e:
        cause = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise GpuRuntimeError(
            f"JIT mode: {full}, {what} {src.target} listed by {src.index}, cannot be read "
            f"({cause}): re-run `pants export-codegen` (checkout) or `pants run`/`pants test`, "
            f"which write it"
        ) from None
    return hashlib.sha256(data).hexdigest()


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _live_roots(search_path: Sequence[str], source_root: str) -> Tuple[str, ...]:
    """The build roots of the sys.path entries that end in `source_root` ("" : every entry)."""
    roots = []
    tail = tuple(p for p in source_root.split("/") if p)
    for entry in search_path:
        parts = os.path.normpath(os.path.abspath(entry or ".")).split(os.sep)
        if tail and tuple(parts[-len(tail) :]) != tail:
            continue
        build_root = os.sep.join(parts[: len(parts) - len(tail)]) or os.sep
        if build_root not in roots:
            roots.append(build_root)
    return tuple(roots)


def _load_entry(index: str, root: str, search_path: Sequence[str]) -> JitSource:
    try:
        doc = load_json_file(index, MAX_INDEX_BYTES, "kernel index entry")
        data = parse_jit_entry(doc, origin=index)
    except (OSError, ValueError, SpecError) as e:  # FileReadError is a ValueError
        raise GpuRuntimeError(
            f"JIT mode: cannot read the kernel index entry {index}: {e}: regenerate it "
            f"(`pants export-codegen` for a checkout; `pants run`/`pants test` write their own)"
        ) from e
    return JitSource(
        library=data["library"],
        target=data["target"],
        toolchain=data["toolchain"],
        source=data["source"],
        flags=tuple(data["flags"]),
        files=dict(data["files"]),
        root=root,
        index=index,
        live_roots=_live_roots(search_path, data["source_root"]),
    )


def find_jit_sources(search_path: Optional[Sequence[str]] = None) -> Dict[str, JitSource]:
    """{library: JitSource} of every entry under `<dir>/__gpu_kernels__/` for dir in the search
    path (default sys.path); the first entry of a target wins, two targets of one name fail."""
    found: Dict[str, JitSource] = {}
    search_path = list(search_path if search_path is not None else sys.path)
    for entry_dir in search_path:
        base = os.path.join(entry_dir or ".", JIT_DIR)
        try:
            names = sorted(n for n in os.listdir(base) if n.endswith(INDEX_SUFFIX))
        except OSError:
            continue
        for name in names:
            root = os.path.join(base, name[: -len(INDEX_SUFFIX)])
            src = _load_entry(os.path.join(base, name), root, search_path)
            other = found.get(src.library)
            if other is None:
                found[src.library] = src
            elif other.target != src.target:
                raise GpuRuntimeError(
                    f"JIT mode: two gpu_kernel targets are named {src.library!r}: {other.target} "
                    f"({other.index}) and {src.target} ({src.index}); rename one of them"
                )
    return found
