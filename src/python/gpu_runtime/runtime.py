"""KernelCache: the kernels of one bundle, by name, in the variant chosen for this device.

Looking a name up (`gpu_runtime.bundle.lookup`) needs only the manifest; choosing a variant asks the
device once per library; loading (`gpu_runtime.bundle.loader`) happens on a kernel's first use.
`Kernel` (`gpu_runtime.kernel`) dispatches and launches.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from gpu_runtime.bundle.completeness import select_unless_incomplete
from gpu_runtime.bundle.integrity import read_verified, resolve_in_cache
from gpu_runtime.bundle.loader import ModuleLoader, variants_on_disk
from gpu_runtime.bundle.lookup import (
    check_name,
    no_library,
    not_found,
    qualified_names,
    resolve_name,
)
from gpu_runtime.bundle.selection import KINDS, Choice
from gpu_runtime.errors import (
    AmbiguousKernelError,
    DriverTooOldError,
    IncompleteBundleError,
    KernelNotFoundError,
    NoCompatibleVariantError,
)
from gpu_runtime.kernel import Kernel
from gpu_runtime.logs import log
from gpu_spec.manifest.model import KernelSpec, Library, Manifest, ModuleSpec
from gpu_spec.versions import parse_version

if TYPE_CHECKING:  # typing only: the runtime imports no more than it uses
    from gpu_runtime.driver.backend import Backend

__all__ = ["ENV_PREFER", "Kernel", "KernelCache"]


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

    def __init__(
        self,
        manifest: Manifest,
        root: str,
        backend: Optional[Backend] = None,
        *,
        prefer: Optional[str] = None,
        origin: str = "bundle",
        jit: Optional["KernelCache"] = None,
        signed_by: Optional[str] = None,
        signature_checked: bool = True,
    ) -> None:
        if backend is None:
            from gpu_runtime.driver.device import CudaBackend

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
        self._kernels: Dict[Tuple[str, str], Kernel] = {}
        # JIT fallback (not strict, a compiler at hand): kernels or capabilities the bundle
        # lacks are compiled instead of failing.
        self._jit = jit
        # A signed bundle opened where JIT mode could compile (the key id; its signature
        # checked against a trusted key, or not when no key is trusted here): what it lacks is
        # refused in one line that says why nothing is compiled (see api.open_cache).
        self._signed_by = signed_by
        self._signature_checked = signature_checked
        self._compiled: Dict[
            Tuple[str, Optional[str]], Kernel
        ] = {}  # names the JIT fallback serves
        self._loader = ModuleLoader(
            self._root,
            self._files,
            backend,
            self.choice,
            origin_label=self._origin_label,
            fix=self._integrity_fix(),
        )

    # -- inspection -------------------------------------------------------------------------
    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def root(self) -> str:
        return self._root

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def device(self):
        """DeviceInfo of the GPU in use (queries the driver on first access)."""
        return self._backend.device_info()

    def libraries(self) -> List[str]:
        return sorted(self._libraries)

    def library(self, name: str) -> Library:
        """The manifest entry of library `name` (in JIT mode: once compiled)."""
        check_name(name, "library")
        self._discover(name, name)
        try:
            return self._libraries[name]
        except KeyError:
            raise no_library(name, self.libraries(), self._describe_origin()) from None

    def kernel_names(self) -> List[str]:
        """Every kernel as "library.kernel"."""
        return qualified_names(self._libraries)

    def loaded_modules(self) -> List[str]:
        """ "library/module" of every module loaded so far (none until a kernel is first used)."""
        return self._loader.loaded_modules()

    def __repr__(self) -> str:
        return f"<KernelCache of {self._describe_origin()}: {len(self.libraries())} libraries>"

    # -- lookup -----------------------------------------------------------------------------
    def kernel(self, name: str, library: Optional[str] = None) -> Kernel:
        """The kernel called `name` ("saxpy", or "library.kernel" when names collide)."""
        check_name(name)
        if library is not None:
            check_name(library, "library")
        if self._jit is not None:
            return self._kernel_or_compiled(name, library)
        return self._own_kernel(name, library)

    def _own_kernel(self, name: str, library: Optional[str]) -> Kernel:
        self._discover(name, library)
        origin = self._describe_origin()
        found = resolve_name(self._libraries, name, library, origin, self.libraries())
        if found is None:
            e = not_found(name, self.kernel_names(), origin)
            if self._signed_by is not None:
                raise KernelNotFoundError(f"{e}; {self._no_jit_reason()}") from None
            raise e
        with self._lock:
            k = self._kernels.get(found)
            if k is None:
                k = self._kernels[found] = Kernel(self, self._libraries[found[0]], found[1])
        return k

    def _kernel_or_compiled(self, name: str, library: Optional[str]) -> Kernel:
        """The bundle's kernel, or JIT mode's when the bundle lacks it or has no variant for
        this GPU (each decided once per name)."""
        assert self._jit is not None
        compiled = self._compiled.get((name, library))
        if compiled is not None:
            return compiled
        try:
            k = self._own_kernel(name, library)
        except AmbiguousKernelError:
            raise  # JIT mode's libraries define it as well: never a compile
        except (KernelNotFoundError, NoCompatibleVariantError) as e:
            self._log_jit(name, e)
            compiled = self._compiled[(name, library)] = self._jit.kernel(name, library)
            return compiled
        try:
            if k.library in self._jit.libraries():
                self.choice(k.library)  # raises when no variant fits this GPU
            return k
        except NoCompatibleVariantError as e:
            self._log_jit(name, e)  # the bundle decided the library: JIT compiles that one
            compiled = self._compiled[(name, library)] = self._jit.kernel(k.name, k.library)
            return compiled

    @staticmethod
    def _log_jit(name: str, e: Exception) -> None:
        log.info("gpu_runtime: %s: %s; JIT mode compiles it", name, str(e).split("\n")[0])

    def _discover(self, name: str, library: Optional[str]) -> None:
        """Hook for JIT mode: make `name` known (compile sources) before lookup."""

    def _describe_origin(self) -> str:
        return f"bundle {self._manifest.bundle!r} ({self._root})"

    def _no_jit_reason(self) -> str:
        how = "a trusted key" if self._signature_checked else "a key (not checked here)"
        return (
            f"a bundle signed by {how} (here {self._signed_by}) is never JIT-compiled, "
            f"since no signature covers a compile"
        )

    def _refuse_jit(self, library: str, info: Any) -> NoCompatibleVariantError:
        """The one-line refusal of a trusted bundle with nothing for this GPU (no JIT fallback)."""
        caps = sorted({v.capability for v in self._libraries[library].variants})
        need = info.sm
        return NoCompatibleVariantError(
            f"{self._describe_origin()}: library {library!r} has no code for this GPU, "
            f"{info.describe()}; the bundle holds {', '.join(caps) or 'nothing'}, and "
            f"{self._no_jit_reason()}: add {need} to the deploy_bundle's `capabilities` and "
            f"re-run `pants package` (JIT mode, `pants run` of the app, compiles in development)"
        )

    def _fix_hint(self) -> Optional[str]:
        """Advice for NoCompatibleVariantError (None: add the capability and `pants package`)."""
        return None

    def _integrity_fix(self) -> Optional[str]:
        """Advice for IntegrityError (None: rebuild the bundle)."""
        return None

    def _origin_label(self, library: str, kind: str) -> str:
        """Where a loaded kernel came from, for the log line and describe()."""
        return "bundle cubin" if kind == "cubin" else "bundle PTX via the driver's JIT"

    # -- selection and loading --------------------------------------------------------------
    def _warn_if_driver_older(self, info: Any) -> None:
        try:
            target = parse_version(self._manifest.driver)
        except ValueError:
            return
        if target > tuple(info.driver_version) and target != (0, 0):
            log.warning(
                "gpu_runtime: bundle %r was built for a CUDA %s driver; this device's "
                "driver supports CUDA %d.%d: code may not load (rebuild with a matching "
                "driver_version/toolchain)",
                self._manifest.bundle,
                self._manifest.driver,
                *info.driver_version,
            )

    def choice(self, library: str) -> Choice:
        """The variant chosen for `library` on this device (chosen once, then cached)."""
        with self._lock:
            ch = self._choices.get(library)
            if ch is None:
                ch = self._choices[library] = self._choose(library)
            return ch

    def _choose(self, library: str) -> Choice:
        lib = self._libraries[library]  # known: kernel() resolved it (no compile under the lock)
        info = self._backend.device_info()
        if not self._choices:
            self._warn_if_driver_older(info)
        try:
            ch = select_unless_incomplete(  # files missing: no capability advice
                self._manifest,
                self._root,
                variants_on_disk(self._root, lib),
                info.capability,
                info.driver_version,
                kinds=self._kinds,
                device_name=info.name,
                library=lib.name,
                bundle=self._manifest.bundle,
                fix=self._fix_hint(),
            )
        except (IncompleteBundleError, DriverTooOldError):
            raise  # neither a capability the bundle lacks nor one JIT mode could add
        except NoCompatibleVariantError:
            if self._signed_by is None:
                raise
            raise self._refuse_jit(library, info) from None
        log.info(
            "gpu_runtime: %s: using %s %s (toolchain %s) on %s: %s",
            library,
            ch.kind,
            ch.capability,
            ch.variant.toolchain,
            info.describe(),
            ch.reason,
        )
        return ch

    def load_function(self, library: str, module: ModuleSpec, kernel: KernelSpec) -> Any:
        """The backend's function for one entry of `library`'s chosen variant (loads its module,
        verified, on first use)."""
        return self._loader.function(library, module, kernel)

    def create_stream(self) -> Any:
        """A new non-blocking stream on this cache's device (`gpu_runtime.Stream`)."""
        return self._backend.create_stream()

    def capture(self, stream: Any) -> Any:
        """`with cache.capture(stream) as graph:` records the launches on `stream` into a
        CUDA graph, replayed by `graph.launch()` (see `gpu_runtime.driver.graphs`)."""
        from gpu_runtime.driver.graphs import capture

        return capture(stream, self._backend)

    def preload(self, names: Optional[Sequence[str]] = None) -> None:
        """Load now what would otherwise load on first launch (all kernels, or `names`)."""
        for qualified in names or self.kernel_names():
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
                paths.extend(p for m in ch.variant.modules if (p := ch.path_of(m)) is not None)
                if ch.kind == "ptx":
                    paths.extend(p for m in ch.variant.modules for p in m.ptx_link)
        for p in paths:
            resolve_in_cache(self._root, p)
            read_verified(self._root, p, self._files, fix=self._integrity_fix())
        return paths

    def describe(self) -> str:
        lines = [repr(self)]
        for lib in sorted(self._libraries.values(), key=lambda x: x.name):
            lines.append(
                f"  {lib.name} ({lib.language}, {lib.target}): "
                + ", ".join(v.describe() for v in lib.variants)
            )
            for k in lib.kernel_names():
                sigs = sorted(
                    {
                        ks.describe()
                        for v in lib.variants
                        for m in v.modules
                        for ks in m.kernels
                        if ks.name == k
                    }
                )
                # qualified, as `kernel()` accepts it whatever other libraries define
                lines.append(f"    {lib.name}.{k}: " + "; ".join(sigs))
                loaded = self._loader.origins.get(f"{lib.name}.{k}")
                if loaded:
                    lines.append(f"      from {loaded}")
                lines.extend(f"      {line}" for line in _resource_lines(lib, k))
        if self._jit is not None:
            lines.append("  JIT fallback for what the bundle lacks: " + repr(self._jit))
        return "\n".join(lines)


def _resource_lines(lib: Library, kernel: str) -> List[str]:
    """One line per variant of `kernel` whose manifest recorded its resources (registers,
    spills, shared, local, const and the occupancy at the best block size); none for a manifest
    written before resources were (it stays readable)."""
    from gpu_spec.resources.occupancy import describe_resources

    return [
        f"{v.capability} ({v.toolchain}): {describe_resources(v.capability, ks.resources)}"
        for v in lib.variants
        for m in v.modules
        for ks in m.kernels
        if ks.name == kernel and ks.resources
    ]
