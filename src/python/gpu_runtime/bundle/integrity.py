"""Reading cache files safely: paths must stay inside cache/, contents must match the manifest.

`locate_file` is the one rule for which file a manifest path names: the runtime's loads
(`read_verified`), its view of what is on disk (`loader.variants_on_disk`) and `verify`
(`gpu_runtime.cli.verify`) all go through it, so what one refuses the others refuse too. The
app's files beside cache/ have theirs in gpu_spec (`gpu_spec.bundle_files.app_file_problems`),
which `check_app_files` (run when a bundle is opened) and `verify` both apply.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Mapping, Optional

from gpu_runtime.errors import IntegrityError
from gpu_spec.bundle_files import app_file_problems
from gpu_spec.manifest.paths import check_relpath
from gpu_spec.safe_read import MAX_CACHE_FILE_BYTES, FileReadError, read_regular_file


def resolve_in_cache(
    root: "str | os.PathLike[str]", relpath: str, where: str = "the cache directory"
) -> str:
    """Absolute real path of `relpath` under `root`; IntegrityError if it would leave `root`.

    Refuses absolute paths, `..`, empty components and backslashes outright, then resolves
    symlinks (of the file and of every directory on the way) and requires the result to be
    inside the resolved `root`.
    """
    why = check_relpath(relpath)
    if why:
        raise IntegrityError(f"refusing manifest path {relpath!r}: {why}")
    real_root = os.path.realpath(os.fspath(root))
    real = os.path.realpath(os.path.join(real_root, *relpath.split("/")))
    if os.path.commonpath([real_root, real]) != real_root or real == real_root:
        raise IntegrityError(
            f"refusing manifest path {relpath!r}: it resolves to {real}, outside {where} "
            f"{real_root} (symlink escape)"
        )
    return real


def locate_file(
    root: "str | os.PathLike[str]", relpath: str, where: str = "the cache directory"
) -> Optional[str]:
    """The real path of the regular file that `relpath` names under `root`, or None when
    nothing is there; IntegrityError when the path leaves `root` (`resolve_in_cache`: `..`,
    absolute, a symlinked file or directory pointing out) or names anything but a regular file
    (a directory, a FIFO that would block the read, a device).

    A hard link needs no rule: it carries no path, and its bytes are hashed like any file's.
    """
    real = resolve_in_cache(root, relpath, where)
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        raise IntegrityError(f"cannot read {relpath} ({real}): {e.strerror or e}") from e
    if not stat.S_ISREG(mode):
        raise IntegrityError(
            f"refusing manifest path {relpath!r}: {real} is not a regular file; rebuild the "
            f"bundle with `pants package`"
        )
    return real


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_verified(
    root: "str | os.PathLike[str]",
    relpath: str,
    files: Mapping[str, str],
    expected: Optional[str] = None,
    fix: Optional[str] = None,
) -> bytes:
    """Bytes of cache file `relpath` after checking its path and its sha256.

    The digest is `files[relpath]` (the manifest's "files"), or `expected` when given. The same
    bytes that were hashed are returned, so what is loaded is what was checked. `fix` replaces
    the advice to rebuild the bundle (JIT mode has no bundle).
    """
    digest = expected if expected is not None else files.get(relpath)
    if digest is None:
        raise IntegrityError(
            f'{relpath!r} is not listed in the manifest\'s "files"; refusing to load it'
        )
    path = locate_file(root, relpath)
    try:
        if path is None:
            raise FileNotFoundError(relpath)
        data = read_regular_file(path, MAX_CACHE_FILE_BYTES, "cache file")
    except FileReadError as e:  # swapped for a FIFO or a device since it was located
        raise IntegrityError(str(e)) from None
    except FileNotFoundError:
        path = path or os.path.join(os.fspath(root), *relpath.split("/"))
        raise IntegrityError(
            f"missing cache file {relpath} (looked for {path}); "
            + (
                fix
                or "the bundle is incomplete: copy the whole dist/<bundle>/ directory, or "
                "rebuild it with `pants package`"
            )
        ) from None
    except OSError as e:
        raise IntegrityError(f"cannot read cache file {path}: {e.strerror or e}") from e
    actual = sha256_bytes(data)
    if actual != digest:
        raise IntegrityError(
            f"cache file {relpath} does not match the manifest (sha256 {actual}, "
            f"expected {digest}); it was modified or corrupted after the bundle was built. "
            f"Refusing to load it; " + (fix or "rebuild the bundle with `pants package`")
        )
    return data


def check_app_files(bundle_files: Mapping[str, str], cache_root: str) -> None:
    """IntegrityError, in one line, when the app's files beside `cache_root` break
    `app_file_problems` (a symlink out of the bundle, a file the manifest does not list): the
    same line `verify` prints for it."""
    if not bundle_files:
        return
    problems = app_file_problems(os.path.dirname(os.path.abspath(cache_root)), bundle_files)
    if problems:
        first = next(iter(problems.values()))
        more = len(problems) - 1
        raise IntegrityError(
            first + (f" ({more} more: `python -m gpu_runtime verify` lists them)" if more else "")
        )
