"""`python tar_bundle.py ROOT OUT`: the tree at ROOT as one byte-reproducible `.tar.gz` at OUT.

Run by `gpu_build.util_rules.bundle_archive` as a hermetic process (standard library only), so
that the bundle (its app PEX and wheels) is read and gzipped by a process, never inside the
Pants engine. Like Pants' `CreateArchive`, with no timestamps, owners or order of the filesystem
in the bytes: each member's mode is 0755 if executable, else 0644.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import tarfile
from typing import IO, Callable, Iterable, List, Tuple, cast

# A file of the archive: its path there, its size, executable or not.
Member = Tuple[str, int, bool]


def deterministic_tar_gz(members: Iterable[Tuple[str, bytes, bool]]) -> bytes:
    """A .tar.gz of (path, contents, executable) whose bytes depend on those only."""
    items = sorted(members, key=lambda m: m[0])
    buffer = io.BytesIO()
    _write([(p, len(c), x, _reader(c)) for p, c, x in items], buffer)
    return buffer.getvalue()


def _reader(content: bytes) -> Callable[[], IO[bytes]]:
    return lambda: io.BytesIO(content)


def _write(
    members: Iterable[Tuple[str, int, bool, Callable[[], IO[bytes]]]], out: IO[bytes]
) -> None:
    """The archive of `members` (path, size, executable, opener of its bytes), in the order
    given, to `out`."""
    # filename="": else gzip writes the output file's name into the header
    with gzip.GzipFile(filename="", fileobj=out, mode="wb", mtime=0) as gz:
        # GzipFile is a binary file object; typeshed's IO[bytes] does not say so.
        with tarfile.open(fileobj=cast(IO[bytes], gz), mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path, size, executable, opener in members:
                info = tarfile.TarInfo(path)
                info.size = size
                info.mode = 0o755 if executable else 0o644
                info.mtime = 0
                info.uname = info.gname = ""
                with opener() as data:
                    tar.addfile(info, data)


def tree_members(root: str) -> List[Member]:
    """(path under `root`, size, executable) of each file under it, sorted by path."""
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            found.append(
                (
                    os.path.relpath(path, root).replace(os.sep, "/"),
                    st.st_size,
                    bool(st.st_mode & 0o111),
                )
            )
    return sorted(found)


def _opener(path: str) -> Callable[[], IO[bytes]]:
    return lambda: open(path, "rb")


def main(argv: List[str]) -> int:
    root, out = argv
    members = [(p, size, x, _opener(os.path.join(root, p))) for p, size, x in tree_members(root)]
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "wb") as f:
        _write(members, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
