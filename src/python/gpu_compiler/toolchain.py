"""Versions (and, on request, locations) of the toolchain pieces in use.

Why: the versions go into every ``metadata.json`` so an artifact says what
built it, and ``python -m gpu_compiler versions`` lets a bench or test check a
toolchain PEX without compiling anything. Versions come from installed
distribution metadata (exact wheel versions such as 13.0.88, cheap, no library
load): both pinned toolchains install every component as a wheel.

Library locations are reported only on request (``library_paths``): they are
absolute, machine-specific paths, which must never reach build outputs.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from typing import Dict, Optional, Sequence

# Distribution names to try per component, CUDA 13 wheels first, then the
# CUDA 12 names (``cuda-toolkit[...]==12.*`` splits them differently).
_DISTS: Dict[str, Sequence[str]] = {
    "numba-cuda": ("numba-cuda",),
    "numba": ("numba",),
    "llvmlite": ("llvmlite",),
    "nvvm": ("nvidia-nvvm", "nvidia-cuda-nvcc-cu12"),
    "nvrtc": ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12"),
    "nvjitlink": ("nvidia-nvjitlink", "nvidia-nvjitlink-cu12"),
    "cuda-core": ("cuda-core",),
    "cuda-bindings": ("cuda-bindings",),
    # CUDA's headers (gpu_compiler.cuda_cpp.toolchain_headers): a kernel compiles against them,
    # so an output records them and JIT mode's key covers them. CUDA 12's crt/ is nvcc's wheel.
    "cuda-runtime": ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12"),
    "cuda-crt": ("nvidia-cuda-crt", "nvidia-cuda-nvcc-cu12"),
    "cccl": ("nvidia-cuda-cccl", "nvidia-cuda-cccl-cu12"),
}

_cuda_version_cache: Optional[str] = None


def _dist_version(names: Sequence[str]) -> Optional[str]:
    for name in names:
        try:
            return _metadata.version(name)
        except _metadata.PackageNotFoundError:
            continue
    return None


def cuda_version() -> str:
    """CUDA version of the NVRTC in use, e.g. ``"13.0"`` (the toolchain version)."""
    global _cuda_version_cache
    if _cuda_version_cache is None:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:  # pragma: no cover
            raise RuntimeError("nvrtcVersion failed: %s" % (err,))
        _cuda_version_cache = "%d.%d" % (major, minor)
    return _cuda_version_cache


def versions() -> Dict[str, Optional[str]]:
    """The ``toolchain`` object of ``metadata.json``.

    Keys: cuda, numba-cuda, numba, llvmlite, nvvm, nvrtc, nvjitlink, cuda-core,
    cuda-bindings, cuda-runtime, cuda-crt, cccl. A component that is not installed is None.
    """
    out: Dict[str, Optional[str]] = {"cuda": cuda_version()}
    out.update(dist_versions())
    return out


def dist_versions() -> Dict[str, Optional[str]]:
    """`versions()` without "cuda": read from installed metadata only, loading no library (what
    the runtime's JIT cache keys on, on every run of an app: NVRTC's load costs ~0.1 s)."""
    return {component: _dist_version(dists) for component, dists in _DISTS.items()}


def library_paths() -> Dict[str, Dict[str, object]]:
    """Where each CUDA library was (or is now) loaded from, via cuda-pathfinder.

    ``found_via`` is ``"site-packages"`` when the NVIDIA wheels supplied it,
    which is what a hermetic toolchain requires (never a system CUDA).
    """
    from cuda.pathfinder import load_nvidia_dynamic_lib

    out: Dict[str, Dict[str, object]] = {}
    for lib in ("nvrtc", "nvvm", "nvJitLink", "cudart"):
        try:
            loaded = load_nvidia_dynamic_lib(lib)
            out[lib] = {"path": loaded.abs_path, "found_via": loaded.found_via}
        except Exception as e:  # pragma: no cover - reported, not fatal
            out[lib] = {"path": None, "found_via": None, "error": str(e)}
    return out


def mapped_cuda_libraries() -> Sequence[str]:
    """CUDA shared libraries actually mapped into this process (Linux only).

    A cross-check on ``library_paths``: whatever loaded a library (numba,
    cuda-bindings, cuda-core), /proc/self/maps shows the file in use.
    """
    names = ("libnvrtc", "libnvvm", "libnvJitLink", "libcudart", "libcuda.so")
    found = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and any(n in parts[-1] for n in names):
                    found.add(parts[-1])
    except OSError:  # pragma: no cover - not Linux
        return []
    return sorted(found)
