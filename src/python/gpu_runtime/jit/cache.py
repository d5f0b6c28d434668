"""JIT mode: a KernelCache whose libraries are compiled on first use for the GPU at hand.

The libraries are the `gpu_kernel` targets found on sys.path (`gpu_runtime.jit.sources`); each is
compiled for this device's capability by the same command as the build step
(`gpu_runtime.jit.compiler`), under a key of its exact inputs (`gpu_runtime.jit.key`), into the
per-user store (`gpu_runtime.jit.store`), and then loaded like a bundle's variant.

A lookup is decided as in a bundle (`gpu_runtime.bundle.lookup.resolve_name`), over every
library that can hold the name, so compiling lazily never changes what a name means: `library=`
or a "library.kernel" name compiles that one library; a bare name compiles each library not
compiled yet whose input files have the name as a word (`JitSource.may_define`: a kernel's name
is written in its source), since a kernel of that name in any two of them makes it ambiguous,
refused with the qualified names to use. A library a bundle
already has is compiled only when the bundle lists that kernel in it.

Opening it reads $GPU_RUNTIME_JIT_CACHE_SIZE and checks that the store is writable, so a bad
setting or a read-only cache is one line at start-up, never a traceback after a compile. Each
entry this process uses is held (`JitStore.hold`) from before its look-up until the process
ends: no prune, here or in another process, removes it under a running app.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
from typing import IO, TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from gpu_runtime.bundle.lookup import readings
from gpu_runtime.errors import manifest_errors
from gpu_runtime.jit.compiler import (
    Compiler,
    CompilerNotFoundError,
    EarlyStartUnsupported,
    JitCompileError,
    PendingCompile,
    find_compiler,
    no_compiler_message,
)
from gpu_runtime.jit.key import jit_key
from gpu_runtime.jit.sources import JitSource
from gpu_runtime.jit.store import Entry, JitCacheError, JitStore, parse_size, write_error
from gpu_runtime.runtime import KernelCache
from gpu_spec.capabilities import CAPABILITY_MIN_PTX_ISA
from gpu_spec.manifest.build import build_manifest
from gpu_spec.manifest.model import Manifest
from gpu_spec.manifest.parse import parse_manifest

log = logging.getLogger("gpu_runtime")

# How a compile process's report shows that the filesystem it wrote to is full.
_FULL_DISK_MARKS = (
    (errno.ENOSPC, ("[Errno 28]", os.strerror(errno.ENOSPC))),
    (errno.EDQUOT, ("[Errno 122]", os.strerror(errno.EDQUOT))),
)

if TYPE_CHECKING:  # typing only: the runtime imports no more than it uses
    from gpu_runtime.driver.backend import Backend
_MIN_FREE_BYTES = 64 * 1024  # less free than this beside a failed compile: the disk is full

ENV_JIT_CACHE_SIZE = "GPU_RUNTIME_JIT_CACHE_SIZE"
DEFAULT_JIT_CACHE_SIZE = "1G"


def cache_bound(environ: Optional[Mapping[str, str]] = None) -> int:
    """The cache's bound in bytes from $GPU_RUNTIME_JIT_CACHE_SIZE; JitCacheError if it is set
    to something that is not a size."""
    env = os.environ if environ is None else environ
    value = env.get(ENV_JIT_CACHE_SIZE) or DEFAULT_JIT_CACHE_SIZE
    try:
        return parse_size(value)
    except ValueError as e:
        raise JitCacheError(
            f"${ENV_JIT_CACHE_SIZE}: {e}: set it to a size such as 500M or 2G (binary units), "
            f"or unset it for {DEFAULT_JIT_CACHE_SIZE}"
        ) from None


def in_background(call: Callable[[], Any], what: str) -> Callable[[], Any]:
    """Starts `call` in a thread; the function returned waits for it and gives its result (or
    raises its exception) in the caller's thread."""
    outcome: Dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as e:  # re-raised by `result`, where the caller can handle it
            outcome["error"] = e

    thread = threading.Thread(target=run, name=f"gpu_runtime: {what}", daemon=True)
    thread.start()

    def result() -> Any:
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    return result


class JitKernelCache(KernelCache):
    """Kernels compiled on demand from `sources` into `store`."""

    def __init__(
        self,
        sources: Mapping[str, JitSource],
        backend: Optional[Backend] = None,
        *,
        store: Optional[JitStore] = None,
        prefer: Optional[str] = None,
        compiler: Optional[Callable[[], Optional[Compiler]]] = None,
        known_elsewhere: Optional[Mapping[str, Sequence[str]]] = None,
    ) -> None:
        self._bound = cache_bound()  # a bad setting fails here, before any compile
        self._store = store or JitStore()
        self._store.open()  # an unusable cache fails here; a read-only one serves hits only
        # Entries this process uses, held until it ends (or this cache is collected).
        self._held: Dict[str, Optional[IO[bytes]]] = {}
        empty = Manifest(
            bundle="jit", driver="0.0", capabilities=(), toolchains={}, libraries=(), files={}
        )
        super().__init__(empty, self._store.root, backend, prefer=prefer, origin="jit")
        self._sources = dict(sources)
        self._pending = dict(sources)
        self._find_compiler = compiler or find_compiler
        self._compile_lock = threading.Lock()
        self._library_origin: Dict[str, str] = {}
        # Libraries a bundle has already, with the kernel names it lists for them.
        self._known_elsewhere = {k: frozenset(v) for k, v in (known_elsewhere or {}).items()}

    def _describe_origin(self) -> str:
        return f"JIT mode ({len(self._sources)} kernel targets, cache {self._store.root})"

    def _fix_hint(self) -> Optional[str]:
        return (
            "JIT mode compiled it for this GPU with the toolchain it found, whose code this "
            "driver cannot load: use a toolchain matching the driver's CUDA version"
        )

    def _integrity_fix(self) -> str:
        return (
            "it is compiled again on the next run; `python -m gpu_runtime cache clear` "
            "empties the cache"
        )

    def _origin_label(self, library: str, kind: str) -> str:
        return f"{self._library_origin.get(library, 'JIT')} ({kind})"

    def libraries(self) -> List[str]:
        return sorted(set(self._libraries) | set(self._pending))

    def kernel_names(self) -> List[str]:
        for name in list(self._pending):
            self._compile_library(name)
        return super().kernel_names()

    def _discover(self, name: str, library: Optional[str]) -> None:
        """Compiles every library that can decide the lookup (module docstring); no text
        search: a library's kernel names are those its compile reports."""
        if library is not None:
            self._compile_library(library)
            return
        for lib, kernel in readings(name):  # "library.kernel": that library alone
            if lib in self._pending or lib in self._libraries:
                self._compile_library(lib)
                if kernel in self._libraries[lib].kernel_names():
                    return
        for other in sorted(self._pending):
            known = self._known_elsewhere.get(other)
            if known is None or name in known:
                if self._pending[other].may_define(name):
                    self._compile_library(other)

    # -- compiling --------------------------------------------------------------------------
    def _compile_library(self, name: str) -> None:
        with self._compile_lock:
            src = self._pending.get(name)
            if src is None:
                return
            compiler = self._find_compiler()
            # The driver starts in a thread (the GIL released) while this one takes the
            # compiler's fingerprint (its code hashed) and the key's
            # inputs, and, if the library looks never compiled, starts the compile process.
            capability = in_background(lambda: self.device.sm, "driver start")
            if compiler is None:
                capability()  # the driver first: no GPU, no compile
                raise CompilerNotFoundError(no_compiler_message(src.target, src.toolchain))
            key_for, early = self._key_and_early_start(src, compiler, capability)
            try:
                sm = capability()
                t0 = time.perf_counter()
                entry, compiled = self._entry(src, key_for(sm), sm, compiler, early)
            finally:
                if early is not None:
                    early.close()  # a hit after all, or an error: the process is ended
            took = time.perf_counter() - t0
            self._library_origin[name] = (
                f"compiled now for {sm} in {took:.2f} s"
                if compiled
                else f"JIT cache hit for {sm} ({took * 1e3:.1f} ms)"
            )
            log.info("gpu_runtime: %s (%s): %s", name, src.target, self._library_origin[name])
            self._add(name, src, entry)

    def _key_and_early_start(
        self, src: JitSource, compiler: Compiler, capability: Callable[[], str]
    ) -> Tuple[Callable[[str], str], Optional["_EarlyCompile"]]:
        """The key for a capability (the fingerprint and the files' sha256 taken now, while the
        driver starts) and, if the library looks never compiled, its compile process started.
        On an error the driver's answer comes first: no GPU is said before anything else."""
        try:
            fingerprint = compiler.fingerprint()
            files = src.current_files()
            source, flags = src.source, src.flags

            def key_for(cap: str) -> str:
                return jit_key(
                    source=source,
                    files=files,
                    flags=flags,
                    capability=cap,
                    fingerprint=fingerprint,
                )

            speculate = self._store.read_only is None and not self._compiled_before(key_for)
            early = self._start(src, compiler) if speculate else None
        except BaseException:
            capability()
            raise
        return key_for, early

    def _compiled_before(self, key_for: Callable[[str], str]) -> bool:
        """Whether the store has this library, exactly, for any known capability: then it is
        most likely a hit for this GPU too, and no compile process is started on speculation."""
        return any(self._store.has(key_for(cap)) for cap in CAPABILITY_MIN_PTX_ISA)

    def _start(self, src: JitSource, compiler: Compiler) -> "_EarlyCompile":
        """The compile process, started now in a private working directory of the store; it
        waits for the capability (`PendingCompile`)."""
        work = self._store.work_dir()
        try:
            pending = compiler.start(
                ["--source", src.source, "--out-dir", os.path.join(work, "out")] + list(src.flags),
                cwd=src.root,
                what=f"compiling {src.source} (target {src.target})",
            )
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        return _EarlyCompile(pending, work)

    def _entry(
        self,
        src: JitSource,
        key: str,
        capability: str,
        compiler: Compiler,
        early: Optional["_EarlyCompile"] = None,
    ) -> Tuple[Entry, bool]:
        if key not in self._held:  # before the look-up: no prune can remove it from now on
            self._held[key] = self._store.hold(key)
        entry = self._store.load(key)
        if entry is not None:
            self._store.touch(key)
            return entry, False
        self._store.check_writable()  # a miss in a read-only cache: refused before compiling
        with self._store.lock(key):
            entry = self._store.load(key)  # another process may have compiled it meanwhile
            if entry is not None:
                return entry, False

            def fill(staged: str) -> None:
                self._compile_into(staged, src, capability, compiler, early)

            info = {"library": src.library, "target": src.target, "capability": capability}
            entry = self._store.create(key, info, fill)
        self._store.prune(self._bound, keep=key)
        return entry, True

    def _compile_into(
        self,
        staged: str,
        src: JitSource,
        capability: str,
        compiler: Compiler,
        early: Optional["_EarlyCompile"],
    ) -> None:
        """Has a compile process write `capability`'s files and moves them into `staged`: the
        one started early, if any (and its compiler knows the flag), else one run now, in a
        working directory removed here (the early one's is removed by its `close`)."""
        what = f"{compiler.description} for {src.source} ({src.target})"
        if early is not None:
            try:
                _collect(early.finish(capability), capability, staged, what)
                return
            except EarlyStartUnsupported as e:
                log.info("gpu_runtime: %s; compiling the usual way", e)
            except JitCompileError as e:
                raise self._full_disk(e, src) from None
        work = self._store.work_dir()
        try:
            out = os.path.join(work, "out")
            compiler.compile(
                ["--source", src.source, "--capability", capability, "--out-dir", out]
                + list(src.flags),
                cwd=src.root,
                what=f"compiling {src.source} (target {src.target}) for {capability}",
            )
            _collect(out, capability, staged, what)
        except JitCompileError as e:
            raise self._full_disk(e, src) from None
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _full_disk(self, e: JitCompileError, src: JitSource) -> Exception:
        """A compile that failed because the JIT cache's filesystem is full (the compiler's
        outputs go there) as the store's one-line JitCacheError; any other failure as it is.

        The compiler process reports a full disk as its own traceback (dozens of lines, the
        cause at the end); the store's free space, or the errno's text in that report, tells."""
        text = str(e)
        try:
            st = os.statvfs(self._store.root)
            # (no inodes left counts only where the filesystem counts them: btrfs says 0 of 0)
            full = st.f_bavail * st.f_frsize < _MIN_FREE_BYTES or 0 == st.f_favail < st.f_files
        except (OSError, AttributeError):
            full = False
        code = next((c for c, marks in _FULL_DISK_MARKS if any(m in text for m in marks)), None)
        if not full and code is None:
            return e
        cause = OSError(code or errno.ENOSPC, os.strerror(code or errno.ENOSPC))
        return write_error(self._store.root, cause, f"compiling {src.source} into it")

    def _add(self, name: str, src: JitSource, entry: Entry) -> None:
        with manifest_errors():
            data = build_manifest(
                "jit",
                "0.0",
                [
                    {
                        "name": name,
                        "target": src.target,
                        "outputs": [
                            {"toolchain": "jit", "metadata": entry.metadata, "dir": entry.key}
                        ],
                    }
                ],
            )
            part = parse_manifest(data, origin=os.path.join(entry.path, "metadata.json"))
        with self._lock:
            for lib in part.libraries:
                self._libraries[lib.name] = lib
            self._files.update(part.files)
            del self._pending[name]


class _EarlyCompile:
    """A `PendingCompile` and the working directory it writes in (removed by `close`)."""

    def __init__(self, pending: PendingCompile, work: str) -> None:
        self._pending = pending
        self._work = work

    def finish(self, capability: str) -> str:
        """Sends the capability and waits: the output directory holding `<capability>/`."""
        self._pending.finish(capability)
        return os.path.join(self._work, "out")

    def close(self) -> None:
        self._pending.cancel()  # a no-op once it finished
        shutil.rmtree(self._work, ignore_errors=True)


def _collect(out: str, capability: str, staged: str, what: str) -> None:
    """Moves the compile's files for `capability` into the staged entry (one filesystem: the
    store's)."""
    written = os.path.join(out, capability)
    if not os.path.isdir(written):
        raise JitCompileError(
            f"JIT mode: {what} wrote nothing under --out-dir/{capability}: is it gpu_compiler?"
        )
    for n in os.listdir(written):
        os.rename(os.path.join(written, n), os.path.join(staged, n))
