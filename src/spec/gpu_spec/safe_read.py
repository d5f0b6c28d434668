"""The one safe way to read a bundle's, a signature's, a JIT index's or a key's file.

Every such file comes from outside the process (a copied bundle, a shared JIT cache, a kernel
index on sys.path), so a reader must not trust what kind of file it is, how big it is, or how
deeply its JSON nests:

- a FIFO or a device would block `open()` or `read()` forever (a hung app, a hung `verify`), and
  a directory fails late with a confusing error: the file is opened with O_NONBLOCK (which
  makes opening a FIFO return at once) and refused unless `fstat` says it is a regular file;
- a huge file would be read whole into memory: each kind of file has a size limit;
- JSON nested 100,000 deep makes `json.loads` raise RecursionError (a traceback, not an
  error of the file): the nesting is counted before parsing, and refused past `MAX_JSON_DEPTH`.

Each refusal is a `FileReadError` (a ValueError) whose message is one line naming the file.
OSErrors of opening and reading (no such file, no permission) are raised as they are, so that a
caller tells "absent" from "unreadable". Standard library only (runs on Python 3.9+).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from typing import Any, BinaryIO, Union

MiB = 1 << 20
MAX_MANIFEST_BYTES = 64 * MiB  # a manifest lists every file of a bundle: large, not this large
MAX_SIGNATURE_BYTES = 64 * 1024  # a signature file is ~200 bytes
MAX_KEY_BYTES = 64 * 1024  # a PEM or hex key file is well under 1 KiB
MAX_INDEX_BYTES = 16 * MiB  # a JIT index entry or JIT cache entry's JSON
MAX_SOURCE_BYTES = 256 * MiB  # a kernel source or header named by a JIT index
MAX_CACHE_FILE_BYTES = 4 << 30  # a cubin, PTX or fatbin the runtime loads into memory
MAX_JSON_DEPTH = 64  # no file of ours nests deeper than ~8

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# A JSON string (escapes included) or one bracket: strings are skipped, so a "[" inside one
# does not count.
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)

PathLike = Union[str, "os.PathLike[str]"]


class FileReadError(ValueError):
    """A file that is not a regular file, is over its size limit, or nests too deeply."""


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def open_regular(path: PathLike, what: str = "file") -> BinaryIO:
    """`path` opened for reading in binary, if it is a regular file (O_NONBLOCK, then fstat).

    Raises FileReadError for anything else (a FIFO, a device, a directory, a socket); OSError as
    `os.open` raises it (FileNotFoundError, PermissionError, ...)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(os.fspath(path), flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileReadError(
                f"{os.fspath(path)}: the {what} is {_kind(mode)}, not a regular file: refusing to "
                f"read it; replace it with the real file"
            )
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(path: PathLike, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them (else FileReadError).

    Raises FileReadError for a file that is not regular or is too big, OSError as opening or
    reading raises it."""
    with open_regular(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(limit + 1) if size <= limit else b""
        if size > limit or len(data) > limit:
            raise FileReadError(
                f"{os.fspath(path)}: the {what} is {max(size, len(data))} bytes, over the "
                f"limit of {limit}: refusing to read it; replace it with the real file"
            )
        return data


def sha256_of_open(f: BinaryIO) -> "tuple[str, int]":
    """(sha256 hex, size) of what is left to read of ``f``, in 1 MiB blocks: the one hash of a
    bundle's, a release's or a JIT cache's file (the manifest's ``sha256`` fields)."""
    digest, size = hashlib.sha256(), 0
    for block in iter(lambda: f.read(MiB), b""):
        digest.update(block)
        size += len(block)
    return digest.hexdigest(), size


def regular_file_sha256(path: PathLike, what: str = "file") -> str:
    """The sha256 of the regular file ``path`` (FileReadError for a FIFO, device or directory:
    one swapped in after a caller looked would block it forever)."""
    with open_regular(path, what) as f:
        return sha256_of_open(f)[0]


def check_json_depth(text: str, origin: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raises FileReadError if the JSON `text` nests arrays and objects deeper than
    `max_depth`; counted on the text (strings skipped), so nothing recursive runs on it."""
    if text.count("[") + text.count("{") <= max_depth:
        return  # too few brackets to nest that deep: the common case, no scan
    depth = 0
    for m in _JSON_TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > max_depth:
                raise FileReadError(
                    f"{origin}: JSON nested deeper than {max_depth} levels: refusing to parse "
                    f"it; replace it with the real file"
                )
        elif c in "]}":
            depth -= 1


def loads_json(raw: Union[bytes, str], origin: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads` of `raw` (UTF-8 bytes or text) once its nesting is checked.

    Raises FileReadError (too deep), UnicodeDecodeError and ValueError (not JSON) as
    `json.loads` would, never RecursionError."""
    text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
    check_json_depth(text, origin, max_depth)
    try:
        return json.loads(text)
    except RecursionError:  # a deeper stack than ours elsewhere: still one line
        raise FileReadError(
            f"{origin}: JSON nested too deeply to parse: refusing it; replace it with the real file"
        ) from None


def load_json_file(
    path: PathLike, limit: int, what: str = "file", max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """The JSON document in the regular file `path` (`read_regular_file`, then `loads_json`)."""
    return loads_json(read_regular_file(path, limit, what), os.fspath(path), max_depth)
