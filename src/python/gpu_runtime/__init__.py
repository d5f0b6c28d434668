"""gpu_runtime: load and launch the GPU kernels precompiled into a device bundle.

Needs only cuda-bindings and numpy on the device (no numba, no NVRTC, no compiler; cuda.core is
not imported).

Usage::

    import numpy as np
    import gpu_runtime
    from gpu_runtime import DeviceArray

    cache = gpu_runtime.open_cache()             # finds dist/<bundle>/cache beside the PEX
    saxpy = cache.kernel("saxpy")                # or "library.kernel" when names collide
    x = DeviceArray.from_numpy(np.ones(1000, np.float32))
    out = DeviceArray.empty(1000, np.float32)
    saxpy.launch(4, 256, out, np.float32(2.0), x, x)          # grid, block, *args
    saxpy[4, 256](out, 2.0, x, x)                              # numba-style, same thing
    print(out.to_numpy())

The API, argument by argument, each exception with its message and fix, the environment variables
and the command line: docs/runtime-api.md. The bundle format is documented in
`gpu_spec.manifest.model`.

Importing this package imports nothing but the standard library: each public name below is
imported on first use (PEP 562 `__getattr__`), so `python3 -m gpu_runtime platform` runs on a
device with a bare python3 (no numpy, no cuda-bindings), and `import gpu_runtime` stays cheap.
The first of the GPU names (`open_cache`, `DeviceArray`, ...) also starts CUDA in a thread, as a
bundle's launcher does at process start ($GPU_BUNDLE_INIT_CUDA=0: not before the first kernel).

`python -m gpu_runtime` runs this file first, on whatever python3 a device has: so it keeps to
syntax every Python parses (no f-strings, no variable annotations, no `from __future__ import
annotations`, which is a SyntaxError before 3.7) up to its version check, which says in one line
which Python is needed instead of a SyntaxError or a traceback.
"""

import sys

# The oldest Python of `python -m gpu_runtime platform` (complete_platform.py's syntax and
# modules), and of the runtime itself (its interpreter constraints; a bundle's complete platform
# for an older one resolves no numpy or cuda-bindings). complete_platform.py, which also runs on
# its own, checks the same (a test holds them equal).
PLATFORM_PYTHON = (3, 7)
RUNTIME_PYTHON = (3, 10)


def _too_old_line():  # type: () -> str
    return (
        "gpu_runtime needs Python %d.%d or newer (its `platform` command; the runtime itself "
        "needs %d.%d or newer), and this is Python %s (%s): run it with a newer python3"
        % (PLATFORM_PYTHON + RUNTIME_PYTHON + (sys.version.split()[0], sys.executable or "python"))
    )


if sys.version_info < PLATFORM_PYTHON:
    if sys.argv[:1] in (["-m"], ["-c"]):  # `python -m gpu_runtime ...` (-c: Python 2's -m)
        sys.stderr.write("error: " + _too_old_line() + "\n")
        raise SystemExit(2)
    raise ImportError(_too_old_line())

import importlib  # noqa: E402  (after the version check, which must run first)
import importlib.util  # noqa: E402
from typing import TYPE_CHECKING, Any, List  # noqa: E402,F401  (Any, List: in type comments)

if TYPE_CHECKING:  # what the names are, for type checkers (and Pants' dependency inference)
    from gpu_runtime.api import open_cache
    from gpu_runtime.bundle.selection import Choice, select_variant
    from gpu_runtime.driver.devarray import DeviceArray
    from gpu_runtime.driver.device import DeviceInfo
    from gpu_runtime.driver.graphs import Graph, capture
    from gpu_runtime.driver.streams import Stream
    from gpu_runtime.errors import (
        CacheNotFoundError,
        DeviceError,
        DispatchError,
        GpuRuntimeError,
        IntegrityError,
        KernelNotFoundError,
        LaunchError,
        ManifestError,
        NoCompatibleVariantError,
    )
    from gpu_runtime.numba_compat.xoroshiro import (
        create_xoroshiro128p_states,
        xoroshiro128p_dtype,
    )
    from gpu_runtime.runtime import Kernel, KernelCache

# Public name -> the module defining it, imported on first access.
_LAZY = {
    "open_cache": "gpu_runtime.api",
    "KernelCache": "gpu_runtime.runtime",
    "Kernel": "gpu_runtime.runtime",
    "DeviceArray": "gpu_runtime.driver.devarray",
    "DeviceInfo": "gpu_runtime.driver.device",
    "Stream": "gpu_runtime.driver.streams",
    "capture": "gpu_runtime.driver.graphs",
    "Graph": "gpu_runtime.driver.graphs",
    "select_variant": "gpu_runtime.bundle.selection",
    "Choice": "gpu_runtime.bundle.selection",
    "GpuRuntimeError": "gpu_runtime.errors",
    "CacheNotFoundError": "gpu_runtime.errors",
    "ManifestError": "gpu_runtime.errors",
    "IntegrityError": "gpu_runtime.errors",
    "NoCompatibleVariantError": "gpu_runtime.errors",
    "KernelNotFoundError": "gpu_runtime.errors",
    "DispatchError": "gpu_runtime.errors",
    "LaunchError": "gpu_runtime.errors",
    "DeviceError": "gpu_runtime.errors",
    "create_xoroshiro128p_states": "gpu_runtime.numba_compat.xoroshiro",
    "xoroshiro128p_dtype": "gpu_runtime.numba_compat.xoroshiro",
}

__all__ = [
    "open_cache",
    "KernelCache",
    "Kernel",
    "DeviceArray",
    "DeviceInfo",
    "Stream",
    "capture",
    "Graph",
    "select_variant",
    "Choice",
    "GpuRuntimeError",
    "CacheNotFoundError",
    "ManifestError",
    "IntegrityError",
    "NoCompatibleVariantError",
    "KernelNotFoundError",
    "DispatchError",
    "LaunchError",
    "DeviceError",
    "create_xoroshiro128p_states",
    "xoroshiro128p_dtype",
]


# The names an app reaches for when it is about to use the GPU: the first of them starts CUDA in
# a thread (`gpu_runtime.driver.device.start_cuda_in_background`, as a bundle's launcher does
# at process start), so the driver's start overlaps the imports and lookups that follow.
_GPU_API = frozenset(
    {"open_cache", "DeviceArray", "Stream", "capture", "create_xoroshiro128p_states"}
)


def __getattr__(name):  # type: (str) -> Any
    """A public name, imported from its module on first use (then a plain global). A subpackage
    or module (`gpu_runtime.driver`) is imported on first use too, as the eager imports once
    made it an attribute of the package."""
    module = _LAZY.get(name)
    if name in _GPU_API:
        from gpu_runtime.driver.device import start_cuda_in_background

        start_cuda_in_background()
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif not name.startswith("__") and importlib.util.find_spec(__name__ + "." + name) is not None:
        value = importlib.import_module(__name__ + "." + name)
    else:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    globals()[name] = value
    return value


def __dir__():  # type: () -> List[str]
    return sorted(set(globals()) | set(__all__))
