"""From cache/ to the device: which listed files are present, and loading each module once.

A module is read, checked against the manifest's sha256 and handed to the backend the first time
one of its kernels is needed (a PTX module with "ptx_link" files goes through the driver's linker
with them, each verified the same way), by whichever thread asks first; the others wait for it
rather than loading it again. Each kernel entry's function handle is then kept, so that a launch
after the first is a dictionary lookup.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from gpu_runtime.bundle.integrity import locate_file, read_verified
from gpu_runtime.bundle.selection import Choice
from gpu_runtime.errors import GpuRuntimeError
from gpu_runtime.logs import log
from gpu_spec.manifest.model import (
    PTX_LINK_KINDS,
    KernelSpec,
    Library,
    ModuleSpec,
    Variant,
    ptx_link_kind,
)

if TYPE_CHECKING:  # typing only: the runtime imports no more than it uses
    from gpu_runtime.driver.backend import Backend


def variants_on_disk(root: str, lib: Library) -> List[Variant]:
    """`lib`'s variants as cache/ holds them: a cubin or PTX deleted from disk is not offered.

    So a bundle whose cubins were removed still runs from its PTX, with a warning naming the
    missing files; when nothing loadable is left, selection's error says what the bundle
    lists. A file that is present but altered is still refused when read (sha256).
    """
    missing: List[str] = []

    def present(path: Optional[str]) -> Optional[str]:
        if path is None or locate_file(root, path) is not None:
            return path
        missing.append(path)
        return None

    def ptx_of(m: ModuleSpec) -> Optional[str]:
        """The module's PTX, offered only with every file its link needs."""
        ptx = present(m.ptx)
        links = [present(p) for p in m.ptx_link]
        return ptx if all(links) else None

    variants = [
        dataclasses.replace(
            v,
            modules=tuple(
                dataclasses.replace(m, ptx=ptx_of(m), cubin=present(m.cubin)) for m in v.modules
            ),
        )
        for v in lib.variants
    ]
    if missing:
        log.warning(
            "gpu_runtime: %s: %d file(s) listed in the manifest are missing from %s: "
            "%s; choosing among the rest",
            lib.name,
            len(missing),
            root,
            ", ".join(missing),
        )
    return variants


class ModuleLoader:
    """Loads modules of the chosen variants, verified, once per process; thread-safe.

    `files` is the manifest's {path: sha256}, shared with the cache (JIT mode adds to it as it
    compiles); `choose` gives a library's `Choice`, asked only when something must be loaded.
    """

    def __init__(
        self,
        root: str,
        files: Mapping[str, str],
        backend: Backend,
        choose: Callable[[str], Choice],
        origin_label: Callable[[str, str], str] = lambda library, kind: f"bundle {kind}",
        fix: Optional[str] = None,
    ) -> None:
        self._root = root
        self._origin_label = origin_label
        self._fix = fix
        # "library.kernel" -> where it came from and how long loading took, for describe().
        self.origins: Dict[str, str] = {}
        self._files = files
        self._backend = backend
        self._choose = choose
        self._lock = threading.Lock()
        self._module_locks: Dict[Tuple[str, str], threading.Lock] = {}
        self._objects: Dict[Tuple[str, str], Any] = {}
        self._functions: Dict[Tuple[str, str, str], Any] = {}

    def loaded_modules(self) -> List[str]:
        """ "library/module" of every module loaded so far."""
        with self._lock:
            return sorted(f"{lib}/{mod}" for lib, mod in self._objects)

    def function(self, library: str, module: ModuleSpec, kernel: KernelSpec) -> Any:
        """The backend's function for `kernel`, loading its module on first use."""
        fkey = (library, module.name, kernel.entry)
        func = self._functions.get(fkey)
        if func is not None:
            return func
        mkey = (library, module.name)
        with self._lock:
            lock = self._module_locks.setdefault(mkey, threading.Lock())
        with lock:
            func = self._functions.get(fkey)
            if func is None:
                func = self._functions[fkey] = self._load(library, module, kernel)
            return func

    def _load(self, library: str, module: ModuleSpec, kernel: KernelSpec) -> Any:
        ch = self._choose(library)
        path = ch.path_of(module)
        assert path is not None  # selection offers a kind only when every module has it
        t0 = time.perf_counter()
        obj = self._objects.get((library, module.name))
        t_read = t0
        if obj is None:
            data = read_verified(self._root, path, self._files, fix=self._fix)
            links = self._link_inputs(module) if ch.kind == "ptx" else []
            t_read = time.perf_counter()
            obj = self._load_module(ch.kind, path, data, f"{library}/{module.name}", links)
            with self._lock:
                self._objects[(library, module.name)] = obj
        try:
            func = self._backend.get_function(obj, kernel.entry)
        except Exception as e:
            raise GpuRuntimeError(
                f"getting kernel {kernel.name} (entry {kernel.entry}) from {ch.kind} {path} "
                f"failed: {type(e).__name__}: {e}"
            ) from e
        t1 = time.perf_counter()
        origin = self._origin_label(library, ch.kind)
        self.origins[f"{library}.{kernel.name}"] = f"{origin}, loaded in {(t1 - t0) * 1e3:.1f} ms"
        log.info(
            "gpu_runtime: %s.%s: %s %s, %s (%s) loaded in %.1f ms (read+verify %.1f ms)",
            library,
            kernel.name,
            origin,
            ch.capability,
            os.path.join(self._root, path),
            module.name,
            (t1 - t0) * 1e3,
            (t_read - t0) * 1e3,
        )
        return func

    def _link_inputs(self, module: ModuleSpec) -> List[Tuple[str, bytes, str]]:
        """(CUjitInputType name, bytes, path) of each file the PTX is linked with, verified."""
        out = []
        for p in module.ptx_link:
            kind = ptx_link_kind(p)
            if kind is None:
                raise GpuRuntimeError(
                    f"module {module.name}: cannot link {p} with its PTX: unknown file kind "
                    f"(known: {', '.join(sorted(PTX_LINK_KINDS))})"
                )
            out.append((kind, read_verified(self._root, p, self._files, fix=self._fix), p))
        return out

    def _load_module(
        self,
        kind: str,
        path: Optional[str],
        data: bytes,
        name: str,
        links: Sequence[Tuple[str, bytes, str]] = (),
    ) -> Any:
        try:
            if links:  # the driver's linker: PTX + device libraries/parts, no compiler
                return self._backend.load_linked(data, list(links), name)
            return self._backend.load(kind, data, name)
        except GpuRuntimeError:
            raise
        except Exception as e:
            what = f"{kind} {path}" + (
                f" linked with {', '.join(p for _, _, p in links)}" if links else ""
            )
            raise GpuRuntimeError(f"loading {what} failed: {type(e).__name__}: {e}") from e
