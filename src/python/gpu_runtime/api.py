"""`open_cache`: the entry point (re-exported as `gpu_runtime.open_cache`)."""

from __future__ import annotations

import os
from typing import Any, Optional

from gpu_runtime.errors import CacheNotFoundError, manifest_errors
from gpu_runtime.locate import ENV_DEV_SOURCES, find_cache, not_found_message
from gpu_runtime.runtime import KernelCache
from gpu_spec.manifest import MANIFEST_NAME
from gpu_spec.manifest_parse import load_manifest


def open_cache(
    path: Optional[str] = None,
    *,
    device: Optional[int] = None,
    prefer: Optional[str] = None,
    dev_sources: Any = None,
    backend: Any = None,
) -> "KernelCache":
    """Open the kernel cache of the running bundle (see the gpu_runtime package docstring).

    Reads and validates manifest.json only; the GPU is first touched when a kernel is used.
    `backend` replaces the CUDA backend (tests use a fake one).
    """
    if backend is None:
        from gpu_runtime.device import CudaBackend

        backend = CudaBackend(device)
    root = find_cache(path)
    if root is not None:
        with manifest_errors():
            manifest = load_manifest(os.path.join(root, MANIFEST_NAME))
        return KernelCache(manifest, root, backend, prefer=prefer)
    sources = dev_sources if dev_sources is not None else os.environ.get(ENV_DEV_SOURCES)
    if sources:
        from gpu_runtime.devmode import DevKernelCache  # imports gpu_compiler lazily itself

        return DevKernelCache(sources, backend, prefer=prefer)
    raise CacheNotFoundError(not_found_message())
