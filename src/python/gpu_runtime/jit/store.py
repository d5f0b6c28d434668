"""The JIT cache on disk: one directory per key, published like pex's `atomic_directory`.

Layout under the root ($GPU_RUNTIME_JIT_CACHE, else $XDG_CACHE_HOME/gpu_runtime/jit, else
~/.cache/gpu_runtime/jit), versioned by STORE_SCHEMA:

    v1/<key>/entry.json     what the entry is, and the sha256 of every other file in it
    v1/<key>/metadata.json  the compile's metadata (as in a bundle), and its .ptx/.cubin files
    v1/.tmp/  v1/.trash/  v1/.locks/

Why it is safe under contention and crashes: an entry is staged in .tmp/ and renamed into place
in one step, entry.json written last; the first complete writer wins and a later one discards
its own copy. A reader checks every file against entry.json before use; a corrupt or partial
entry is logged, moved to .trash/ (one rename) and compiled again. Writers of one key take a
lock (flock), so 16 processes starting at once compile it once. Last use is the entry
directory's mtime, set on each use; `prune` evicts least recently used entries beyond the bound.

Why pruning never breaks a running process: a process that uses an entry holds a shared flock
on `.locks/<key>.use` from before it looks the entry up until it exits (`hold`); `prune` and
`clear` evict an entry only under a non-blocking exclusive flock on that file, so an entry in
use is skipped (the cache may exceed its bound by the entries in use) and an evicted entry is
one nobody holds: its next user misses and compiles it again.

Why a failed write leaves nothing behind: the store is checked writable when it opens (`open`);
a compile is staged in `create`, whose staging directory is removed on any failure, and an
OSError of the cache's filesystem (read-only, full) is one `JitCacheError` line naming the
directory, the cause and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import IO, Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from gpu_runtime.errors import GpuRuntimeError
from gpu_spec.safe_read import MAX_INDEX_BYTES, load_json_file, regular_file_sha256

log = logging.getLogger("gpu_runtime")

STORE_SCHEMA = 1
ENTRY_FILE = "entry.json"
ENV_JIT_CACHE = "GPU_RUNTIME_JIT_CACHE"


def default_root(environ: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if environ is None else environ
    if env.get(ENV_JIT_CACHE):
        return os.path.abspath(env[ENV_JIT_CACHE])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "gpu_runtime", "jit")


class JitCacheError(GpuRuntimeError):
    """The JIT cache cannot be used: its directory is not writable or full, or its size setting
    is not a size. One line: the directory or setting, the cause and the fix."""


def write_error(root: str, e: OSError, doing: str) -> JitCacheError:
    """The one-line error for an OSError of the cache's filesystem while `doing` something."""
    cause = e.strerror or str(e)
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        fix = f"free space there or set ${ENV_JIT_CACHE} to a directory with room"
    else:
        fix = f"set ${ENV_JIT_CACHE} to a writable directory or fix its permissions"
    return JitCacheError(f"JIT mode: cannot write the JIT cache {root} ({doing}: {cause}): {fix}")


@dataclass(frozen=True)
class Entry:
    key: str
    path: str
    info: Dict[str, Any]  # entry.json
    metadata: Dict[str, Any]  # metadata.json, verified
    size: int
    last_use: float


def _sha256(path: str) -> str:
    """The sha256 of the regular file `path` (FileReadError for a FIFO or device in an entry)."""
    return regular_file_sha256(path, "JIT cache file")


# A cache directory that exists but refuses writes: shared read-only (a read-only mount, another
# user's cache). Its entries still serve hits; only a miss, which must write, is refused.
_READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)


class JitStore:
    def __init__(self, root: Optional[str] = None) -> None:
        self.root = os.path.join(root or default_root(), f"v{STORE_SCHEMA}")
        # Set by `open` when the cache exists but cannot be written: the one-line error a
        # write (a miss) raises; None while the store is writable.
        self.read_only: Optional[JitCacheError] = None

    def _dir(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    # -- reading ----------------------------------------------------------------------------
    def load(self, key: str) -> Optional[Entry]:
        """The verified entry, or None if absent; a corrupt one is discarded (and None).

        Only proof of corruption discards an entry: a file it lists that is missing, not a
        regular file, or not the bytes entry.json says, or JSON that does not parse. An entry
        that merely cannot be read now (EMFILE, EACCES, EIO: this process's limits or
        permissions, not the entry) is kept, and the error is one JitCacheError line: deleting
        it would throw away another process's valid compile, and compiling it again would fail
        to publish beside it."""
        path = self._dir(key)
        if not os.path.isdir(path):
            return None
        try:
            return self._verified(key, path)
        except (FileNotFoundError, ValueError, KeyError, TypeError) as e:
            # ValueError includes FileReadError (a FIFO, a device, too big, nested too deep),
            # UnicodeDecodeError and JSONDecodeError.
            log.warning(
                "gpu_runtime: JIT cache entry %s is corrupt (%s): compiling it again", path, e
            )
            self._discard(path)
            return None
        except OSError as e:
            raise JitCacheError(
                f"JIT mode: cannot read the JIT cache entry {path} ({e.strerror or e}); it was "
                f"kept: fix the cache's permissions (or raise the open-file limit, `ulimit -n`) "
                f"or set ${ENV_JIT_CACHE} to a directory of your own"
            ) from None

    def _verified(self, key: str, path: str) -> Entry:
        info = load_json_file(os.path.join(path, ENTRY_FILE), MAX_INDEX_BYTES, "JIT cache entry")
        if info.get("schema") != STORE_SCHEMA or info.get("key") != key:
            raise ValueError(f"{ENTRY_FILE} is not this key's (schema {info.get('schema')!r})")
        files: Dict[str, str] = info["files"]
        if "metadata.json" not in files:
            raise ValueError(f"{ENTRY_FILE} lists no metadata.json")
        size = os.path.getsize(os.path.join(path, ENTRY_FILE))
        for name, digest in files.items():
            if os.path.basename(name) != name:
                raise ValueError(f"{ENTRY_FILE} names {name!r}, not a file of the entry")
            full = os.path.join(path, name)
            if _sha256(full) != digest:
                raise ValueError(f"{name} does not match its sha256 in {ENTRY_FILE}")
            size += os.path.getsize(full)
        metadata = load_json_file(
            os.path.join(path, "metadata.json"), MAX_INDEX_BYTES, "JIT cache metadata"
        )
        return Entry(key, path, info, metadata, size, os.stat(path).st_mtime)

    def touch(self, key: str) -> None:
        with contextlib.suppress(OSError):
            os.utime(self._dir(key))

    def entries(self) -> List[Entry]:
        """Every valid entry (corrupt ones are discarded), least recently used first."""
        try:
            keys = [k for k in os.listdir(self.root) if not k.startswith(".")]
        except OSError:
            return []
        found = []
        for k in sorted(keys):
            try:
                entry = self.load(k)
            except JitCacheError as e:  # unreadable now, not corrupt: kept, and not listed
                log.warning("gpu_runtime: %s", e)
                continue
            if entry is not None:
                found.append(entry)
        return sorted(found, key=lambda e: (e.last_use, e.key))

    # -- writing ----------------------------------------------------------------------------
    def open(self) -> None:
        """Checks now, when the cache opens, that entries can be written here: an unusable
        directory is one JitCacheError line, not a traceback after a compile.

        A cache that exists but is read-only (a shared cache on a read-only mount, one whose
        permissions forbid writing) opens for reading: hits are served, and `read_only` is the
        error a miss raises before anything is compiled (`check_writable`)."""
        try:
            for sub in (".tmp", ".locks"):
                os.makedirs(self._dir(sub), exist_ok=True)
            probe = self._dir(".tmp", f"probe.{uuid.uuid4().hex}")
            with open(probe, "wb"):
                pass
            os.remove(probe)
        except OSError as e:
            error = write_error(self.root, e, "a test write")
            if e.errno in _READ_ONLY_ERRNOS and os.path.isdir(self.root):
                self.read_only = error
                log.info("gpu_runtime: %s; serving its entries read-only", error)
                return
            raise error from None

    def check_writable(self) -> None:
        """Raises the one-line JitCacheError of a read-only cache (before a compile)."""
        if self.read_only is not None:
            raise JitCacheError(str(self.read_only))

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Exclusive among the processes that write `key` (readers need no lock).

        The lock file `.locks/<key>.lock` is removed by its holder once the write is done, so
        the cache does not gather one per key ever compiled; a process that waited on the
        removed file sees that by its inode and takes the lock on a new one (`_flocked`)."""
        path = self._dir(".locks", key + ".lock")
        try:
            os.makedirs(self._dir(".locks"), exist_ok=True)
            f = self._flocked(path, fcntl.LOCK_EX)
        except OSError as e:
            raise write_error(self.root, e, "creating a lock") from None
        assert f is not None  # a blocking flock
        with f:
            try:
                yield
            finally:
                with contextlib.suppress(OSError):
                    os.remove(path)  # still held: a waiter re-opens (by inode)
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _use_lock(self, key: str, how: int) -> Optional[IO[bytes]]:
        """`.locks/<key>.use`, flocked `how`; None when LOCK_NB finds it taken. Re-opened when
        an evicter unlinked the file while this process waited for it (checked by inode)."""
        return self._flocked(self._dir(".locks", key + ".use"), how)

    @staticmethod
    def _flocked(path: str, how: int) -> Optional[IO[bytes]]:
        """`path` opened and flocked `how`; None when LOCK_NB finds it taken. Re-opened when
        the file was unlinked (or replaced) while this process waited for it: a lock on an
        unlinked file would exclude nobody."""
        while True:
            f = open(path, "ab")
            try:
                fcntl.flock(f.fileno(), how)
            except BlockingIOError:
                f.close()
                return None
            try:
                same = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return f
            f.close()

    def hold(self, key: str) -> Optional[IO[bytes]]:
        """Marks `key` in use until the returned file is closed (or the process exits): prune
        and clear skip it. Take it before looking the entry up, so that it cannot be evicted
        between the look-up and its use. None in a read-only cache, where no lock file can be
        made (nor any entry pruned by this process)."""
        try:
            os.makedirs(self._dir(".locks"), exist_ok=True)
            held = self._use_lock(key, fcntl.LOCK_SH)
        except OSError as e:
            if self.read_only is not None or e.errno in _READ_ONLY_ERRNOS:
                return None
            raise write_error(self.root, e, "creating a lock") from None
        assert held is not None  # a blocking flock
        return held

    def create(self, key: str, info: Mapping[str, Any], fill: Callable[[str], None]) -> Entry:
        """Stages a new directory, has `fill(staged)` write the entry's files into it and
        publishes it. On any failure the staging directory is removed; an OSError (read-only
        or full cache) is a JitCacheError. Call it under `lock(key)`."""
        try:
            staged = self.staging(key)
        except OSError as e:
            raise write_error(self.root, e, "creating a staging directory") from None
        try:
            fill(staged)
            return self.publish(key, staged, info)
        except OSError as e:
            raise write_error(self.root, e, f"writing entry {key[:12]}") from None
        finally:
            shutil.rmtree(staged, ignore_errors=True)  # gone already once published

    def has(self, key: str) -> bool:
        """Whether an entry directory exists for `key` (stat only; `load` verifies it)."""
        return os.path.isdir(self._dir(key))

    def work_dir(self) -> str:
        """A new private directory for a compile process to write in (same filesystem as the
        entries); its owner removes it, `prune` sweeps one left by a crash."""
        try:
            return self.staging("compile")
        except OSError as e:
            raise write_error(self.root, e, "creating a working directory") from None

    def staging(self, key: str) -> str:
        """A new private directory to build an entry in (same filesystem as the entry)."""
        path = self._dir(".tmp", f"{key}.{uuid.uuid4().hex}")
        os.makedirs(path)
        return path

    def publish(self, key: str, staged: str, info: Mapping[str, Any]) -> Entry:
        """Seals `staged` (writes entry.json over its files) and renames it to the entry; if
        another writer got there first, `staged` is discarded and theirs is used."""
        files = {n: _sha256(os.path.join(staged, n)) for n in sorted(os.listdir(staged))}
        sealed = dict(info, schema=STORE_SCHEMA, key=key, files=files)
        _write_file(
            os.path.join(staged, ENTRY_FILE),
            json.dumps(sealed, indent=1, sort_keys=True).encode(),
        )
        for _ in range(3):
            try:
                os.rename(staged, self._dir(key))
                break
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            existing = self.load(key)  # discards the existing entry if it is corrupt
            if existing is not None:
                shutil.rmtree(staged, ignore_errors=True)
                return existing
        entry = self.load(key)
        if entry is None:
            raise OSError(f"JIT cache entry {self._dir(key)} vanished as it was published")
        return entry

    def _discard(self, path: str) -> None:
        """Moves `path` out of the way in one rename, then deletes it; a lost race is fine."""
        trash = self._dir(".trash", f"{os.path.basename(path)}.{uuid.uuid4().hex}")
        try:
            os.makedirs(self._dir(".trash"), exist_ok=True)
            os.rename(path, trash)
        except OSError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def remove(self, key: str) -> None:
        self._discard(self._dir(key))

    def sizes(self) -> List[Tuple[float, str, int]]:
        """(last use, key, bytes) of every entry directory, least recently used first: stat
        only, so that pruning after a compile costs no hashing of the whole cache."""
        out = []
        try:
            keys = [k for k in os.listdir(self.root) if not k.startswith(".")]
        except OSError:
            return []
        for key in keys:
            path = self._dir(key)
            with contextlib.suppress(OSError):
                size = sum(e.stat().st_size for e in os.scandir(path) if e.is_file())
                out.append((os.stat(path).st_mtime, key, size))
        return sorted(out)

    def _evict(self, key: str) -> bool:
        """Removes the entry unless a process holds it (`hold`); True if it was removed."""
        try:
            os.makedirs(self._dir(".locks"), exist_ok=True)
            taken = self._use_lock(key, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a read-only cache: nothing can be evicted
        if taken is None:
            return False
        with taken:
            self._discard(self._dir(key))
            with contextlib.suppress(OSError):
                os.remove(self._dir(".locks", key + ".use"))  # under the lock: see _use_lock
        return True

    def in_use(self) -> List[str]:
        """The keys of the entries that running processes hold."""
        busy = []
        for _, key, _ in self.sizes():
            try:
                taken = self._use_lock(key, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            if taken is None:
                busy.append(key)
            else:
                taken.close()
        return busy

    def prune(self, max_bytes: int, keep: Optional[str] = None) -> List[Tuple[str, int]]:
        """Evicts least recently used entries until the rest fit in `max_bytes`, never one a
        process holds (nor `keep`); returns the (key, bytes) evicted."""
        sizes = self.sizes()
        total = sum(size for _, _, size in sizes)
        evicted = []
        for _, key, size in sizes:
            if total <= max_bytes:
                break
            if key == keep or not self._evict(key):
                continue
            total -= size
            evicted.append((key, size))
        for stale in (".tmp", ".trash"):
            self._sweep(self._dir(stale))
        self._sweep_write_locks()
        return evicted

    def _sweep_write_locks(self) -> None:
        """Removes `.locks/*.lock` files no writer holds (left by a crash, or by a gpu_runtime
        that never removed them), each under its own lock, as `lock` removes its own."""
        with contextlib.suppress(OSError):
            for name in os.listdir(self._dir(".locks")):
                if not name.endswith(".lock"):
                    continue
                path = self._dir(".locks", name)
                with contextlib.suppress(OSError):
                    f = self._flocked(path, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    if f is not None:
                        with f:
                            os.remove(path)

    def _sweep(self, path: str, older_than_s: float = 3600.0) -> None:
        """Leftovers of crashed writers (a live writer's staging dir is younger than this)."""
        with contextlib.suppress(OSError):
            for name in os.listdir(path):
                full = os.path.join(path, name)
                if time.time() - os.stat(full).st_mtime > older_than_s:
                    shutil.rmtree(full, ignore_errors=True)

    def clear(self) -> int:
        """Removes every entry no process holds; returns how many were removed."""
        return sum(self._evict(key) for _, key, _ in self.sizes())


def _write_file(path: str, data: bytes) -> None:
    """Writes a new file whole or raises (a short write on a full disk is an OSError too)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from "1G", "500M", "64KiB" or a plain number (binary units); ValueError saying
    what is wrong otherwise (its callers name the setting and the fix)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a size")
    try:
        return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    except OverflowError:  # more digits than a float holds
        raise ValueError(f"{text[:20]!r}... is too large") from None
