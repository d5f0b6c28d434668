"""KernelCache and Kernel: name lookup, variant selection, verified lazy loading, launching."""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gpu_runtime import abi
from gpu_runtime.errors import DispatchError, GpuRuntimeError, KernelNotFoundError
from gpu_runtime.integrity import read_verified, resolve_in_cache
from gpu_runtime.selection import KINDS, Choice, select_variant
from gpu_spec.manifest import KernelSpec, Library, Manifest, ModuleSpec, Variant
from gpu_spec.versions import parse_version

log = logging.getLogger("gpu_runtime")

ENV_PREFER = "GPU_RUNTIME_PREFER"


def _kinds(prefer: Optional[str]) -> Tuple[str, ...]:
    if prefer in (None, "", "auto"):
        return KINDS
    if prefer in KINDS:
        return (prefer,)
    raise ValueError(f"prefer must be 'cubin', 'ptx' or 'auto', not {prefer!r}")


class KernelCache:
    """The kernels of one bundle (or of dev-mode compiles), loaded on first use.

    Thread-safe: each library's variant is chosen once and each module loaded once per process,
    whichever threads ask first.
    """

    def __init__(self, manifest: Manifest, root: str, backend: Any = None, *,
                 prefer: Optional[str] = None, origin: str = "bundle") -> None:
        if backend is None:
            from gpu_runtime.device import CudaBackend

            backend = CudaBackend()
        self._manifest = manifest
        self._root = os.path.abspath(root)
        self._backend = backend
        self._kinds = _kinds(prefer if prefer is not None else os.environ.get(ENV_PREFER))
        self._origin = origin
        self._libraries: Dict[str, Library] = {lib.name: lib for lib in manifest.libraries}
        self._files: Dict[str, str] = dict(manifest.files)
        self._lock = threading.RLock()
        self._choices: Dict[str, Choice] = {}
        self._load_locks: Dict[Tuple[str, str], threading.Lock] = {}
        self._objects: Dict[Tuple[str, str], Any] = {}
        self._functions: Dict[Tuple[str, str, str], Any] = {}
        self._kernels: Dict[Tuple[str, str], "Kernel"] = {}

    # -- inspection -------------------------------------------------------------------------
    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def root(self) -> str:
        return self._root

    @property
    def backend(self) -> Any:
        return self._backend

    @property
    def device(self):
        """DeviceInfo of the GPU in use (queries the driver on first access)."""
        return self._backend.device_info()

    def libraries(self) -> List[str]:
        return sorted(self._libraries)

    def library(self, name: str) -> Library:
        """The manifest entry of library `name` (in dev mode: once compiled)."""
        self._discover(name, name)
        try:
            return self._libraries[name]
        except KeyError:
            raise KernelNotFoundError(f"no library {name!r} in {self._describe_origin()}; libraries: "
                                      f"{', '.join(self.libraries()) or 'none'}") from None

    def kernel_names(self) -> List[str]:
        """Every kernel as "library.kernel"."""
        return [f"{lib.name}.{k}" for lib in sorted(self._libraries.values(), key=lambda x: x.name)
                for k in lib.kernel_names()]

    def __repr__(self) -> str:
        return (f"<KernelCache {self._origin} {self._manifest.bundle!r} at {self._root}: "
                f"{len(self._libraries)} libraries>")

    # -- lookup -----------------------------------------------------------------------------
    def kernel(self, name: str, library: Optional[str] = None) -> "Kernel":
        """The kernel called `name` ("saxpy", or "library.kernel" when names collide)."""
        lib_name, kname = self._resolve(name, library)
        key = (lib_name, kname)
        with self._lock:
            k = self._kernels.get(key)
            if k is None:
                k = self._kernels[key] = Kernel(self, self._libraries[lib_name], kname)
        return k

    def _resolve(self, name: str, library: Optional[str]) -> Tuple[str, str]:
        self._discover(name, library)
        if library is not None:
            lib = self._libraries.get(library)
            if lib is None:
                raise KernelNotFoundError(
                    f"no library {library!r} in {self._describe_origin()}; libraries: "
                    f"{', '.join(self.libraries()) or 'none'}")
            if name not in lib.kernel_names():
                raise KernelNotFoundError(
                    f"library {library!r} has no kernel {name!r}; its kernels: {', '.join(lib.kernel_names())}")
            return library, name
        hits = [lib.name for lib in self._libraries.values() if name in lib.kernel_names()]
        if len(hits) == 1:
            return hits[0], name
        if len(hits) > 1:
            cands = ", ".join(f"{h}.{name}" for h in sorted(hits))
            raise KernelNotFoundError(
                f"kernel name {name!r} is ambiguous in {self._describe_origin()}: use one of {cands}")
        for i, ch in enumerate(name):
            if ch == ".":
                lib = self._libraries.get(name[:i])
                if lib is not None and name[i + 1:] in lib.kernel_names():
                    return lib.name, name[i + 1:]
        every = self.kernel_names()
        close = difflib.get_close_matches(name, every + [n.split(".", 1)[1] for n in every], n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KernelNotFoundError(
            f"no kernel {name!r} in {self._describe_origin()}{hint} Kernels: {', '.join(every) or 'none'}")

    def _discover(self, name: str, library: Optional[str]) -> None:
        """Hook for dev mode: make `name` known (compile sources) before lookup."""

    def _describe_origin(self) -> str:
        return f"bundle {self._manifest.bundle!r} ({self._root})"

    def _warn_if_driver_older(self, info: Any) -> None:
        try:
            target = parse_version(self._manifest.driver)
        except ValueError:
            return
        if target > tuple(info.driver_version) and target != (0, 0):
            log.warning("gpu_runtime: bundle %r was built for a CUDA %s driver; this device's "
                        "driver supports CUDA %d.%d: code may not load (rebuild with a matching "
                        "driver_version/toolchain)", self._manifest.bundle, self._manifest.driver,
                        *info.driver_version)

    def _fix_hint(self) -> Optional[str]:
        """Advice for NoCompatibleVariantError (None: add the capability and `pants package`)."""
        return None

    # -- selection and loading --------------------------------------------------------------
    def _on_disk(self, lib: Library) -> List[Variant]:
        """`lib`'s variants as cache/ holds them: a cubin or PTX deleted from disk is not offered.

        So a bundle whose cubins were removed still runs from its PTX, with a warning naming the
        missing files; when nothing loadable is left, selection's error says what the bundle
        lists. A file that is present but altered is still refused when read (sha256).
        """
        missing: List[str] = []

        def present(path: Optional[str]) -> Optional[str]:
            if path is None or os.path.isfile(resolve_in_cache(self._root, path)):
                return path
            missing.append(path)
            return None

        variants = [
            dataclasses.replace(
                v,
                modules=tuple(
                    dataclasses.replace(m, ptx=present(m.ptx), cubin=present(m.cubin))
                    for m in v.modules
                ),
            )
            for v in lib.variants
        ]
        if missing:
            log.warning("gpu_runtime: %s: %d file(s) listed in the manifest are missing from %s: "
                        "%s; choosing among the rest", lib.name, len(missing), self._root,
                        ", ".join(missing))
        return variants

    def choice(self, library: str) -> Choice:
        """The variant chosen for `library` on this device (chosen once, then cached)."""
        with self._lock:
            ch = self._choices.get(library)
            if ch is None:
                lib = self._libraries[library]  # known: kernel() resolved it (no compile under the lock)
                info = self._backend.device_info()
                if not self._choices:
                    self._warn_if_driver_older(info)
                ch = select_variant(self._on_disk(lib), info.capability, info.driver_version,
                                    kinds=self._kinds, device_name=info.name, library=lib.name,
                                    bundle=self._manifest.bundle, fix=self._fix_hint())
                log.info("gpu_runtime: %s: using %s %s (toolchain %s) on %s: %s", library, ch.kind,
                         ch.capability, ch.variant.toolchain, info.describe(), ch.reason)
                self._choices[library] = ch
            return ch

    def _function(self, library: str, module: ModuleSpec, kernel: KernelSpec) -> Any:
        fkey = (library, module.name, kernel.entry)
        func = self._functions.get(fkey)
        if func is not None:
            return func
        mkey = (library, module.name)
        with self._lock:
            lock = self._load_locks.setdefault(mkey, threading.Lock())
        with lock:
            func = self._functions.get(fkey)
            if func is not None:
                return func
            ch = self.choice(library)
            t0 = time.perf_counter()
            obj = self._objects.get(mkey)
            path = ch.path_of(module)
            if obj is None:
                data = read_verified(self._root, path, self._files)
                t_read = time.perf_counter()
                try:
                    obj = self._backend.load(ch.kind, data, f"{library}/{module.name}")
                except GpuRuntimeError:
                    raise
                except Exception as e:
                    raise GpuRuntimeError(f"loading {ch.kind} {path} failed: {type(e).__name__}: {e}") from e
                self._objects[mkey] = obj
            else:
                t_read = t0
            try:
                func = self._backend.get_function(obj, kernel.entry)
            except Exception as e:
                raise GpuRuntimeError(
                    f"getting kernel {kernel.name} (entry {kernel.entry}) from {ch.kind} {path} "
                    f"failed: {type(e).__name__}: {e}") from e
            t1 = time.perf_counter()
            log.info("gpu_runtime: loaded %s.%s from %s %s %s (%s) in %.1f ms (read+verify %.1f ms)",
                     library, kernel.name, ch.kind, ch.capability,
                     os.path.join(self._root, path), module.name, (t1 - t0) * 1e3, (t_read - t0) * 1e3)
            self._functions[fkey] = func
            return func

    def preload(self, names: Optional[Sequence[str]] = None) -> None:
        """Load now what would otherwise load on first launch (all kernels, or `names`)."""
        for qualified in (names or self.kernel_names()):
            self.kernel(qualified).load()

    def verify(self, all_variants: bool = False) -> List[str]:
        """Check paths and sha256 of the files that would be loaded here (or of every file).

        Returns the checked paths; raises IntegrityError on the first bad one. `all_variants`
        needs no GPU.
        """
        if all_variants:
            paths = sorted(self._files)
        else:
            paths = []
            for name in self.libraries():
                ch = self.choice(name)
                paths.extend(ch.path_of(m) for m in ch.variant.modules)
        for p in paths:
            resolve_in_cache(self._root, p)
            read_verified(self._root, p, self._files)
        return paths

    def describe(self) -> str:
        lines = [repr(self)]
        for lib in sorted(self._libraries.values(), key=lambda x: x.name):
            lines.append(f"  {lib.name} ({lib.language}, {lib.target}): "
                         + ", ".join(v.describe() for v in lib.variants))
            for k in lib.kernel_names():
                sigs = sorted({ks.describe() for v in lib.variants for m in v.modules
                               for ks in m.kernels if ks.name == k})
                lines.append(f"    {k}: " + "; ".join(sigs))
        return "\n".join(lines)


class Kernel:
    """One kernel name of one library; dispatches over its signatures.

    `kernel.launch(grid, block, *args, stream=None, shared_mem=0)` or numba style
    `kernel[grid, block](*args)` / `kernel[grid, block, stream, shared_mem](*args)`.
    """

    def __init__(self, cache: KernelCache, library: Library, name: str) -> None:
        self._cache = cache
        self._library = library
        self.name = name
        self._overloads: Optional[List[Tuple[ModuleSpec, KernelSpec]]] = None

    @property
    def library(self) -> str:
        return self._library.name

    @property
    def qualified_name(self) -> str:
        return f"{self._library.name}.{self.name}"

    def __repr__(self) -> str:
        return f"<Kernel {self.qualified_name}>"

    @property
    def signatures(self) -> List[str]:
        """The signatures known for this kernel (from the manifest; no GPU needed)."""
        seen: Dict[str, None] = {}
        for v in self._library.variants:
            for m in v.modules:
                for k in m.kernels:
                    if k.name == self.name:
                        seen.setdefault(k.describe(), None)
        return list(seen)

    def overloads(self) -> List[Tuple[ModuleSpec, KernelSpec]]:
        """(module, kernel) pairs of the variant chosen for this device."""
        if self._overloads is None:
            ch = self._cache.choice(self._library.name)
            found = [(m, k) for m in ch.variant.modules for k in m.kernels if k.name == self.name]
            if not found:
                raise KernelNotFoundError(
                    f"kernel {self.qualified_name} is missing from the chosen variant "
                    f"{ch.capability}/{ch.variant.toolchain} of library {self.library}")
            self._overloads = found
        return self._overloads

    def load(self) -> None:
        for module, spec in self.overloads():
            self._cache._function(self._library.name, module, spec)

    def resolve(self, *args: Any) -> Tuple[ModuleSpec, KernelSpec]:
        """The (module, signature) these arguments would launch; DispatchError if none fits."""
        ovl = self.overloads()
        spec = abi.select_overload([k for _, k in ovl], args, self.qualified_name)
        for m, k in ovl:
            if k is spec:
                return m, k
        raise AssertionError("unreachable")  # pragma: no cover

    def pack(self, *args: Any) -> abi.PackedArgs:
        """The packed parameters a launch with these arguments would pass (for debugging)."""
        _, spec = self.resolve(*args)
        return abi.pack_args(spec, args)

    def launch(self, grid: Any, block: Any, *args: Any, stream: Any = None, shared_mem: int = 0) -> None:
        """Launch on `stream` (default: the device's default stream); asynchronous like CUDA."""
        module, spec = self.resolve(*args)
        packed = abi.pack_args(spec, args)
        func = self._cache._function(self._library.name, module, spec)
        self._cache.backend.launch(func, grid, block, stream, shared_mem, packed.launch_args())

    def __getitem__(self, config: Any) -> "_Configured":
        if not isinstance(config, tuple) or not 2 <= len(config) <= 4:
            raise DispatchError("use kernel[grid, block], kernel[grid, block, stream] or "
                                "kernel[grid, block, stream, shared_mem]")
        grid, block = config[0], config[1]
        stream = config[2] if len(config) > 2 else None
        shared = config[3] if len(config) > 3 else 0
        return _Configured(self, grid, block, stream, shared)


class _Configured:
    __slots__ = ("_k", "_grid", "_block", "_stream", "_shared")

    def __init__(self, kernel: Kernel, grid: Any, block: Any, stream: Any, shared: int) -> None:
        self._k, self._grid, self._block, self._stream, self._shared = kernel, grid, block, stream, shared

    def __call__(self, *args: Any) -> None:
        self._k.launch(self._grid, self._block, *args, stream=self._stream, shared_mem=self._shared)
