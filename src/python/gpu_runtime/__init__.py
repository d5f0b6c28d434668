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

API
---
`open_cache(path=None, *, device=None, prefer=None, strict=None, kernels_path=None) -> KernelCache`
    Finds the cache: `path` if given, else $GPU_RUNTIME_CACHE, else `cache/` beside the running
    PEX ($PEX), else `cache/` beside sys.argv[0]. Without one: JIT mode, when the kernel index
    that `pants run` / `pants test` put on sys.path (`__gpu_kernels__/`, see
    `gpu_runtime.jit.sources`) names kernels: each is compiled on first use for this GPU and
    cached (`gpu_runtime.jit.cache`); else `CacheNotFoundError` saying where it looked.
    With a bundle and a compiler at hand ($GPU_RUNTIME_TOOLCHAIN or an importable gpu_compiler),
    kernels or capabilities the bundle lacks are compiled too, unless strict.
    `strict` (default $GPU_RUNTIME_STRICT=1): never compile; what the bundle lacks fails.
    `device`: CUDA device ordinal (default: the current device, 0).
    `prefer`: "cubin" | "ptx" | "auto" (default $GPU_RUNTIME_PREFER or "auto"): restrict
    selection to cubins or to PTX (e.g. to exercise the JIT path on purpose).
    Opening reads and validates manifest.json only; no GPU is touched until a kernel is used.

`KernelCache`
    `.kernel(name, library=None) -> Kernel`; `.kernel_names()` ("library.kernel" list);
    `.libraries()`; `.choice(library) -> Choice` (the variant picked for this GPU);
    `.preload()` (load everything now); `.verify(all_variants=False)` (sha256 of every file
    that would load, or of all files); `.loaded_modules()` ("library/module" loaded so far);
    `.describe()`; `.device` (`DeviceInfo`); `.manifest`; `.create_stream()` (a new
    non-blocking `Stream`); `.capture(stream)` (see `capture`).

`Kernel`
    `.launch(grid, block, *args, stream=None, shared_mem=0)`: asynchronous, like CUDA.
    `kernel[grid, block]`, `kernel[grid, block, stream]`, `kernel[grid, block, stream, shmem]`.
    `.signatures`; `.resolve(*args)` (which signature would run); `.pack(*args)` (the packed
    parameter buffer, for debugging); `.param_info(*args)` (the driver's (offset, size) of each
    parameter, to check `.pack` against); `.load()`.
    Arguments: device arrays through `__cuda_array_interface__` (CuPy, numba, torch,
    `DeviceArray`), numbers, numpy scalars. A kernel compiled for several signatures
    dispatches on dtype, ndim and contiguity; no match raises `DispatchError` listing them.
    Streams: a cuda.core Stream, anything with `__cuda_stream__`, a CuPy/numba stream or a raw
    handle; default the legacy default stream.
    Cost: the first launch with a new pattern of arguments (types, dtypes, ndim, contiguity)
    runs every check and builds a plan; later ones only rewrite the changing values (pointers,
    shapes, scalars) in a reused per-thread buffer, through a repack function generated for the
    pattern, and call cuLaunchKernel (`gpu_runtime.launch.plan`, `gpu_runtime.launch.repack`).

    `.forall(n, tpb=0, stream=None, sharedmem=0)(*args)`: n threads, numba style, in blocks of
    the size the driver's occupancy calculator suggests (cuOccupancyMaxPotentialBlockSize).
    Cooperative kernels (grid sync, "cooperative" in the manifest) are launched with
    cuLaunchCooperativeKernel on their own; a grid larger than can be co-resident
    (cuOccupancyMaxActiveBlocksPerMultiprocessor x SMs) raises `LaunchError` naming the kernel,
    the grid and the limit, before launching; `.max_cooperative_grid_blocks(block)`.
    More argument kinds of numba kernels: arrays of records (numpy structured dtypes, matched
    by their bytes), raw pointers (`CPointer(T)`, `voidptr`: a device array, a buffer or an
    int address) and 0-d device arrays.

`create_xoroshiro128p_states(n, seed, subsequence_start=0) -> DeviceArray`: numba-cuda's
    xoroshiro128+ states, bit for bit, made with numpy (`gpu_runtime.numba_compat.xoroshiro`), for
    kernels using `numba.cuda.random`; `xoroshiro128p_dtype`.

PTX variants whose module lists "ptx_link" files (libcudadevrt.a for grid sync, PTX of linked
CUDA C++) are linked by the driver (cuLinkCreate/cuLinkAddData/cuLinkComplete), each file
checked against its sha256 first.

`capture(stream) -> Graph` (context manager; `KernelCache.capture` too): launches on `stream`
    inside the block are recorded into a CUDA graph; afterwards `graph.launch(stream=None)` (or
    `.replay()`) replays them; `.close()`. See `gpu_runtime.driver.graphs`.

`DeviceArray` (see `gpu_runtime.driver.devarray`): `.from_numpy(a)`, `.empty(shape, dtype)`,
    `.zeros(shape, dtype)`, `.to_numpy()`, `.free()`, `__cuda_array_interface__`.

`select_variant(variants, device_cc, driver_version) -> Choice`: the pure selection rule
    (exact cubin > same-major lower-minor cubin > PTX the driver can JIT > error), see
    `gpu_runtime.bundle.selection`.

Errors (all subclasses of `GpuRuntimeError`): `CacheNotFoundError`, `ManifestError`,
`IntegrityError` (tampered/missing file, path escaping cache/), `NoCompatibleVariantError`,
`KernelNotFoundError`, `DispatchError`, `LaunchError`, `DeviceError`.

Self-test: `gpu_runtime.selftest.main.main(argv, references)` launches every kernel signature of the
bundle against a caller's `ReferenceTable` of numpy references (`gpu_runtime.selftest.inputs`);
the example app's `--self-test` is that with its own table.

Logging: logger "gpu_runtime"; INFO says which variant was chosen (cubin/ptx, capability,
why) and, once per kernel, where it came from (bundle cubin, bundle PTX via the driver's JIT,
JIT cache hit, compiled now), which file and how long it took; `describe()` shows the same.

Command line: `python -m gpu_runtime cache list|clear|prune` (JIT cache); from a bundle,
`PEX_MODULE=gpu_runtime ./app.pex cache list`.

The bundle format is documented in `gpu_spec.manifest.model`.
"""

from __future__ import annotations

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
from gpu_runtime.numba_compat.xoroshiro import create_xoroshiro128p_states, xoroshiro128p_dtype
from gpu_runtime.runtime import Kernel, KernelCache

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
