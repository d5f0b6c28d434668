"""CPU cost of one `Kernel.launch`, with a null driver: no GPU needed.

Everything of the launch path is real (`Kernel.launch`, the pattern key, `LaunchPlan.pack`,
`CudaBackend.launch_raw`, `DeviceArray` and its `__cuda_array_interface__`) except the final
`cuLaunchKernel`, which is a Python no-op returning cuda.bindings' own `CUDA_SUCCESS` (a
sentinel where cuda.bindings is not installed). Peers in the same run: the floor, a Python
call shaped like the bare `drv.cuLaunchKernel(func, 6 dims, shared, stream, void**, 0)` on the
same no-op; and `ParamBuffer`-free pieces of the path alone (the pattern key, the pack), so a
change shows where it lands. Run from the repo root:

    PYTHONPATH=src/python:src/spec python tests/bench/launch_overhead_bench.py [--calls 200000]

Prints one table of medians of --runs runs, microseconds per call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace
from typing import Any, Callable, Dict, List

import numpy as np

from gpu_runtime.driver.devarray import DeviceArray
from gpu_runtime.driver.device import CudaBackend, DeviceInfo
from gpu_runtime.launch.plan import pattern_key
from gpu_spec.conftest import MATMUL_WITH_LD, library_specs, write_bundle

try:
    from cuda.bindings import driver as _real_driver

    SUCCESS: Any = _real_driver.CUresult.CUDA_SUCCESS
except ImportError:  # the null driver needs only an object the backend compares by identity
    SUCCESS = object()
_OK = (SUCCESS,)


def null_launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    """cuLaunchKernel's shape, doing nothing."""
    return _OK


class NullBackend(CudaBackend):
    """The real `CudaBackend` launch path on a driver whose cuLaunchKernel does nothing."""

    def __init__(self) -> None:
        super().__init__(0)
        self._drv = SimpleNamespace(cuLaunchKernel=null_launch)
        self._ok = SUCCESS
        self._info = DeviceInfo(ordinal=0, name="null", capability=(9, 0), driver_version=(13, 0))

    def device(self) -> int:
        return 0

    def load(self, kind: str, data: bytes, name: str) -> Any:
        return ("module", name)

    def get_function(self, module: Any, entry: str) -> Any:
        return ("function", entry)


def device_array(shape: Any, ptr: int) -> DeviceArray:
    """A real `DeviceArray` on no memory (no cuMemAlloc): only its interface is read."""
    a = DeviceArray.__new__(DeviceArray)
    a.shape, a.dtype, a._ptr, a._device = tuple(shape), np.dtype(np.float32), ptr, 0
    a._cai, a._finalizer, a._launch = None, None, None
    return a


def timed(go: Callable[[], Any], calls: int, runs: int) -> float:
    go()
    per_call = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            go()
        per_call.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(per_call)


def cases(root: str) -> Dict[str, Callable[[], Any]]:
    import gpu_runtime

    matmul = ("src/python/imaging/kernels/matmul.cu", "cuda_cpp", MATMUL_WITH_LD)
    specs = library_specs(["saxpy", "matmul"], caps=["sm_90"], extra={"matmul": matmul})
    cache = gpu_runtime.open_cache(write_bundle(root, specs), backend=NullBackend())
    k = cache.kernel("saxpy")
    ld = cache.kernel("matmul_ld<float, 16>")
    i16 = np.int32(16)
    out_ld = device_array((256,), 0x7F0000200000)
    # runtime_bench.py's 10 arguments: a, lda, b, ldb, c, ldc, m, n, k, alpha
    ld_args: tuple = (out_ld, i16, out_ld, i16, out_ld, i16, i16, i16, i16, np.float32(1.0))
    ld.launch((1, 1), (16, 16), *ld_args)
    out, x = device_array((1024,), 0x7F0000000000), device_array((1024,), 0x7F0000100000)
    a = np.float32(2.0)
    args = (out, a, x, x)
    k.launch(4, 256, *args)  # the first launch makes the plan
    plan = k._plans[pattern_key(args)[0]]
    cais = pattern_key(args)[1]
    f, addr = ("function", "saxpy"), plan.buffer().address
    drv = SimpleNamespace(cuLaunchKernel=null_launch)
    return {
        "gpu_runtime k.launch(4, 256, out, f32, x, x)": lambda: k.launch(4, 256, out, a, x, x),
        "gpu_runtime k[4, 256](out, f32, x, x)": lambda: k[4, 256](out, a, x, x),
        "gpu_runtime matmul_ld.launch((1, 1), (16, 16), 10 args)": lambda: ld.launch(
            (1, 1), (16, 16), *ld_args
        ),
        "  pattern_key(args) alone": lambda: pattern_key(args),
        "  plan.repack(args) alone (what a repeat launch packs with)": lambda: plan.repack(args),
        "  plan.pack(args, cais) alone (after a pattern key)": lambda: plan.pack(args, cais),
        "floor: drv.cuLaunchKernel(f, 6 dims, 0, 0, void**, 0)": lambda: drv.cuLaunchKernel(
            f, 4, 1, 1, 256, 1, 1, 0, 0, addr, 0
        ),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200000)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as root:
        results: List[tuple] = [(n, timed(go, a.calls, a.runs)) for n, go in cases(root).items()]
    floor = results[-1][1]
    print(f"| null driver, us per call ({a.calls} calls, median of {a.runs}) | us | x floor |")
    print("|---|---|---|")
    for name, us in results:
        print(f"| {name} | {us:.3f} | {us / floor:.2f} |")
    print(f"python {sys.version.split()[0]}, cuda.bindings CUDA_SUCCESS: {SUCCESS is not _OK}")


if __name__ == "__main__":
    main()
