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
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

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


@dataclass(frozen=True)
class Entry:
    key: str
    path: str
    info: Dict[str, Any]  # entry.json
    metadata: Dict[str, Any]  # metadata.json, verified
    size: int
    last_use: float


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class JitStore:
    def __init__(self, root: Optional[str] = None) -> None:
        self.root = os.path.join(root or default_root(), f"v{STORE_SCHEMA}")

    def _dir(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    # -- reading ----------------------------------------------------------------------------
    def load(self, key: str) -> Optional[Entry]:
        """The verified entry, or None if absent; a corrupt one is discarded (and None)."""
        path = self._dir(key)
        if not os.path.isdir(path):
            return None
        try:
            return self._verified(key, path)
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning(
                "gpu_runtime: JIT cache entry %s is corrupt (%s): compiling it again", path, e
            )
            self._discard(path)
            return None

    def _verified(self, key: str, path: str) -> Entry:
        with open(os.path.join(path, ENTRY_FILE), "rb") as f:
            info = json.loads(f.read().decode("utf-8"))
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
        with open(os.path.join(path, "metadata.json"), "rb") as f:
            metadata = json.loads(f.read().decode("utf-8"))
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
        found = [e for e in (self.load(k) for k in sorted(keys)) if e is not None]
        return sorted(found, key=lambda e: (e.last_use, e.key))

    # -- writing ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Exclusive among the processes that write `key` (readers need no lock)."""
        os.makedirs(self._dir(".locks"), exist_ok=True)
        with open(self._dir(".locks", key + ".lock"), "a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

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
        with open(os.path.join(staged, ENTRY_FILE), "w") as f:
            json.dump(sealed, f, indent=1, sort_keys=True)
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
        os.makedirs(self._dir(".trash"), exist_ok=True)
        trash = self._dir(".trash", f"{os.path.basename(path)}.{uuid.uuid4().hex}")
        try:
            os.rename(path, trash)
        except OSError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def remove(self, key: str) -> None:
        self._discard(self._dir(key))

    def _sizes(self) -> List[Tuple[float, str, int]]:
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

    def prune(self, max_bytes: int, keep: Optional[str] = None) -> List[Tuple[str, int]]:
        """Evicts least recently used entries until the rest fit in `max_bytes`; returns the
        (key, bytes) evicted."""
        sizes = self._sizes()
        total = sum(size for _, _, size in sizes)
        evicted = []
        for _, key, size in sizes:
            if total <= max_bytes:
                break
            if key == keep:
                continue
            self._discard(self._dir(key))
            total -= size
            evicted.append((key, size))
        for stale in (".tmp", ".trash"):
            self._sweep(self._dir(stale))
        return evicted

    def _sweep(self, path: str, older_than_s: float = 3600.0) -> None:
        """Leftovers of crashed writers (a live writer's staging dir is younger than this)."""
        with contextlib.suppress(OSError):
            for name in os.listdir(path):
                full = os.path.join(path, name)
                if time.time() - os.stat(full).st_mtime > older_than_s:
                    shutil.rmtree(full, ignore_errors=True)

    def clear(self) -> int:
        entries = self.entries()
        for e in entries:
            self._discard(e.path)
        return len(entries)


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from "1G", "500M", "64KiB" or a plain number (binary units)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 500M or 2G)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
