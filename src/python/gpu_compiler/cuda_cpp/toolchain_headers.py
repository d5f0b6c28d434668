"""CUDA's own headers, from the pinned toolchain: what ``nvcc`` users get from the toolkit.

Why from the toolchain and nowhere else: a kernel that includes ``<cuda_fp16.h>``,
``<cooperative_groups.h>`` or ``<cub/block/block_reduce.cuh>`` compiles against those exact
files, so they must be part of what the compile's key covers. Here they are files of NVIDIA's
wheels in the toolchain's lockfile (``nvidia-cuda-runtime`` for the runtime headers,
``nvidia-cuda-crt`` for their ``crt/`` part in CUDA 13, ``nvidia-cuda-cccl`` for CUB, Thrust and
libcu++), installed into the toolchain PEX's site-packages: a version change changes the PEX,
so every compile's key. A host CUDA (``CUDA_PATH``, ``/usr/local/cuda``, conda) is never
searched, even where cuda.pathfinder would find one.

Search order, as nvcc's: the source's directory for quoted includes, the target's
``include_dirs`` (its own headers, which may shadow the toolkit's), then these directories. A
numba-cuda kernel's C++ parts (its ``cuda.fp16``/``cuda.bf16`` shims, linked ``.cu`` files) get
numba-cuda's own list first, as numba-cuda's NVRTC call does: its ``include/<CUDA major>``
(the half-precision headers its bindings were generated from) and ``memory_management``.

Outputs never hold these directories' absolute paths (a PTX ``.file`` with ``lineinfo``, a
diagnostic): they are shown as ``<toolchain>/`` and the path inside site-packages
(``<toolchain>/nvidia/cu13/include/cuda_fp16.hpp``), the same on every machine.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple

TOOLCHAIN_LABEL = "<toolchain>"

# The header sets a kernel may include, in search order: cuda.pathfinder's names for the runtime
# headers and CCCL (header_descriptor_catalog), and "crt", the runtime headers' crt/ part
# (`<mma.h>` includes "crt/mma.h"), which cuda.pathfinder does not name.
CUDA_HEADER_SETS = ("cudart", "crt", "cccl")

# Where the crt/ headers' directory is in the wheels: CUDA 13's nvidia-cuda-crt installs into
# the runtime's include dir, CUDA 12 ships it in nvcc's wheel.
_CRT_DIRS = ("nvidia/cu13/include", "nvidia/cuda_nvcc/include")
_CRT_PROBE = "crt/mma.h"

# The wheel that provides each set, for the fix text.
_WHEELS = {
    "cudart": "nvidia-cuda-runtime (CUDA 12: nvidia-cuda-runtime-cu12)",
    "crt": "nvidia-cuda-crt (CUDA 12: nvidia-cuda-nvcc-cu12)",
    "cccl": "nvidia-cuda-cccl (CUDA 12: nvidia-cuda-cccl-cu12)",
}

_cache: Dict[str, Tuple[str, ...]] = {}


def _in_site_packages(name: str) -> Optional[str]:
    """The header directory of one set, found in the interpreter's site-packages only.

    cuda.pathfinder's public `locate_nvidia_header_directory` goes on to conda, CUDA_PATH, a
    probe subprocess and /usr/local/cuda when the wheel is missing: the host's CUDA, which the
    compile must never see. Its site-packages step alone is what we want.
    """
    if name == "crt":
        return _crt_dir()
    try:
        from cuda.pathfinder._headers.find_nvidia_headers import find_in_site_packages
        from cuda.pathfinder._headers.header_descriptor import HEADER_DESCRIPTORS

        found = find_in_site_packages(HEADER_DESCRIPTORS[name])
        return found.abs_path if found is not None else None
    except ImportError:  # pragma: no cover - a cuda-pathfinder other than the pinned one
        from cuda.pathfinder import locate_nvidia_header_directory

        located = locate_nvidia_header_directory(name)
        if located is None or located.found_via != "site-packages":
            return None
        return located.abs_path


def _crt_dir() -> Optional[str]:
    for root in _site_roots():
        for rel in _CRT_DIRS:
            d = os.path.join(root, rel)
            if os.path.isfile(os.path.join(d, _CRT_PROBE)):
                return d
    return None


def cuda_include_dirs() -> Tuple[str, ...]:
    """The toolchain's CUDA header directories (absolute, in search order), for a ``.cu``."""
    if "cuda" not in _cache:
        dirs = [_in_site_packages(name) for name in CUDA_HEADER_SETS]
        _cache["cuda"] = tuple(_unique(d for d in dirs if d))
    return _cache["cuda"]


def numba_include_dirs() -> Tuple[str, ...]:
    """numba-cuda's NVRTC search list (numba.cuda.cudadrv.nvrtc.compile), from the toolchain:
    its own ``include/<major>``, the CUDA headers, its ``memory_management``."""
    if "numba" not in _cache:
        from numba.cuda.cudadrv import nvrtc as numba_nvrtc

        here = os.path.dirname(os.path.dirname(os.path.abspath(numba_nvrtc.__file__)))
        major = _nvrtc_major()
        own = [os.path.join(here, "include", str(major))] if major else []
        dirs = own + list(cuda_include_dirs()) + [os.path.join(here, "memory_management")]
        _cache["numba"] = tuple(_unique(d for d in dirs if os.path.isdir(d)))
    return _cache["numba"]


def _nvrtc_major() -> Optional[int]:
    from cuda.bindings import nvrtc

    err, major, _minor = nvrtc.nvrtcVersion()
    return int(major) if err == nvrtc.nvrtcResult.NVRTC_SUCCESS else None


def _unique(paths) -> List[str]:
    out: List[str] = []
    for p in paths:
        p = os.path.abspath(p)
        if p not in out:
            out.append(p)
    return out


def missing_sets() -> List[str]:
    """The header sets the toolchain lacks, each with the wheel that provides it."""
    return [_WHEELS[n] for n in CUDA_HEADER_SETS if not _in_site_packages(n)]


def _site_roots() -> Tuple[str, ...]:
    """The interpreter's library directories (site-packages, stdlib), longest first; found once
    per process (`relabel` runs on every PTX and log)."""
    if "roots" not in _cache:
        import gpu_spec
        from gpu_compiler.numba.import_guard import toolchain_roots

        ours = os.path.dirname(os.path.abspath(gpu_spec.__file__))
        roots = [r for r in toolchain_roots() if r not in (ours, os.path.realpath(ours))]
        _cache["roots"] = tuple(sorted(roots, key=len, reverse=True))
    return _cache["roots"]


def shown(path: str) -> Optional[str]:
    """``<toolchain>/<path inside site-packages>`` for a file of the toolchain, else None."""
    absolute = os.path.normpath(os.path.abspath(path))
    for root in _site_roots():
        root = root.rstrip(os.sep)
        if absolute.startswith(root + os.sep):
            return TOOLCHAIN_LABEL + "/" + absolute[len(root) + 1 :]
    return None


def relabel(text: str) -> str:
    """``text`` (PTX, a log) with each absolute path into the toolchain (a header of its CUDA
    wheels, a numba-cuda module inlined with ``lineinfo``) shown as ``<toolchain>/...``."""
    for root in _site_roots():
        text = text.replace(root.rstrip(os.sep) + os.sep, TOOLCHAIN_LABEL + "/")
    return text


def escapes(name: str, dirs: Sequence[str]) -> Optional[str]:
    """Where ``#include <name>`` would lead out of a toolchain header directory (``..``), or
    None: NVRTC joins the name to each directory, and ``<../../etc/x>`` must not reach the
    host through them."""
    for d in dirs:
        joined = os.path.normpath(os.path.join(d, name))
        if not (joined + os.sep).startswith(d.rstrip(os.sep) + os.sep):
            return joined
    return None


def describe(dirs: Optional[Sequence[str]] = None) -> str:
    """Header directories (default: the CUDA ones) for messages: ``<toolchain>/nvidia/...``."""
    dirs = cuda_include_dirs() if dirs is None else dirs
    return ", ".join(shown(d) or d for d in dirs) or "none"


def reset_for_tests() -> None:
    _cache.clear()
