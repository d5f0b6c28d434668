"""`open_cache`: the entry point (re-exported as `gpu_runtime.open_cache`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from gpu_runtime.bundle.locate import candidate_locations, find_cache, not_found_message
from gpu_runtime.bundle.manifest import open_bundle_manifest
from gpu_runtime.bundle.trust import trusted_keys
from gpu_runtime.driver.device import start_cuda_in_background
from gpu_runtime.errors import CacheNotFoundError, UntrustedBundleError
from gpu_runtime.jit.compiler import Compiler, find_compiler
from gpu_runtime.logs import log
from gpu_runtime.runtime import KernelCache
from gpu_spec.signature import describe_keys

if TYPE_CHECKING:  # typing only: the runtime imports no more than it uses
    from gpu_runtime.driver.backend import Backend

ENV_STRICT = "GPU_RUNTIME_STRICT"


def strict_from_env(environ: Optional[Mapping[str, str]] = None) -> bool:
    value = (os.environ if environ is None else environ).get(ENV_STRICT, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def open_cache(
    path: Optional[str] = None,
    *,
    device: Optional[int] = None,
    prefer: Optional[str] = None,
    strict: Optional[bool] = None,
    kernels_path: Optional[Sequence[str]] = None,
    backend: Optional[Backend] = None,
    compiler: Optional[Callable[[], Optional[Compiler]]] = None,
) -> "KernelCache":
    """Open the running bundle's kernel cache, or JIT mode (see the gpu_runtime docstring).

    With a bundle, opening reads and validates manifest.json only; no kernel is loaded until it
    is used. In JIT mode the driver's start begins in a thread here (unless
    $GPU_BUNDLE_INIT_CUDA=0), if the package's first GPU name had not begun it already.
    `strict` (default $GPU_RUNTIME_STRICT): never compile; what the bundle lacks fails.
    `kernels_path`: where to look for JIT mode's kernel index (default sys.path).
    `backend` replaces the CUDA backend, `compiler` the search for JIT mode's compiler
    (`find_compiler`; tests use fakes of both).
    """
    own_backend = backend is None
    if backend is None:
        from gpu_runtime.driver.device import CudaBackend

        backend = CudaBackend(device)
    find = compiler or find_compiler
    strict = strict_from_env() if strict is None else strict
    root = find_cache(path)
    if root is not None:
        return _open_bundle(root, backend, prefer, strict, kernels_path, find)
    _refuse_jit_if_keys_trusted(path)
    sources = {} if strict else _jit_sources(kernels_path)
    if sources:
        if own_backend:  # the driver's start overlaps what comes next (a no-op if begun)
            start_cuda_in_background()
        from gpu_runtime.jit.cache import JitKernelCache

        return JitKernelCache(sources, backend, prefer=prefer, compiler=find)
    raise CacheNotFoundError(not_found_message(strict=strict))


def _open_bundle(
    root: str,
    backend: Backend,
    prefer: Optional[str],
    strict: bool,
    kernels_path: Optional[Sequence[str]],
    find: Callable[[], Optional[Compiler]],
) -> KernelCache:
    """The bundle's cache at `root`, with JIT mode filling its gaps where it may."""
    manifest, trust = open_bundle_manifest(root)  # signature and completeness checked
    # A device bundle has no compiler: then nothing is ever compiled, strict or not, and
    # its start-up does not even read the kernel index.
    fallback = not strict and find() is not None
    if fallback and trust.status != "unsigned":
        # A signed bundle never falls back to JIT mode, whether its key is trusted here or
        # not checked (no key trusted on this device; a bundle built with `jit_fallback=True`
        # carries the kernels' sources): no signature covers the compiler
        # ($GPU_RUNTIME_TOOLCHAIN or the interpreter's) nor the JIT cache's entries, so a
        # compile (or a cache hit) would load bytes nothing vouches for. What it lacks is
        # refused in one line instead (`KernelCache(signed_by=...)`).
        return KernelCache(
            manifest,
            root,
            backend,
            prefer=prefer,
            signed_by=trust.key_id,
            signature_checked=trust.trusted,
        )
    sources = _jit_sources(kernels_path) if fallback else {}
    jit = None
    if sources:  # JIT mode's cache, imported only where a kernel may be compiled
        from gpu_runtime.jit.cache import JitKernelCache
        from gpu_runtime.jit.store import JitCacheError

        known = {lib.name: lib.kernel_names() for lib in manifest.libraries}
        try:
            jit = JitKernelCache(
                sources, backend, prefer=prefer, known_elsewhere=known, compiler=find
            )
        except JitCacheError as e:  # the bundle still runs; only its gaps are not filled
            log.warning("gpu_runtime: no JIT fallback for bundle %s: %s", root, e)
    return KernelCache(manifest, root, backend, prefer=prefer, jit=jit)


def _refuse_jit_if_keys_trusted(path: Optional[str]) -> None:
    """No bundle was found: refuse JIT mode where keys are pinned into the app or trusted here.

    An app with pinned keys is a signed bundle's app; with its cache/manifest.json deleted, JIT
    mode would compile (or take from the JIT cache) code that no signature covers. So where any
    key is trusted, only a signed bundle runs, and a missing manifest is refused in one line.
    """
    keys = trusted_keys()
    if not keys:
        return
    looked = "; ".join(d for _, d, _ in candidate_locations(path)) or "nowhere"
    ids = f"{describe_keys([k for k, _ in keys])} ({'; '.join(sorted({h for _, h in keys}))})"
    raise UntrustedBundleError(
        f"no cache/manifest.json found (looked in: {looked}), and this app trusts only bundles "
        f"signed by key {ids}: refusing JIT mode, which no signature covers; copy the whole bundle "
        f"directory again, or run the app with `pants run` to use JIT mode"
    )


def _jit_sources(kernels_path: Optional[Sequence[str]]) -> Mapping[str, Any]:
    """JIT mode's kernel index on `kernels_path` (imported here: a device bundle never needs it)."""
    from gpu_runtime.jit.sources import find_jit_sources

    return find_jit_sources(kernels_path)
