"""numba-cuda's documentation kernels, launched from a bundle as the docs launch them, each with
its numpy reference.

Each case takes the `KernelCache` and returns a `Result` (max abs error, tolerance): the
inputs, grids and expected values are the docs' own (tests/doc_examples/ in NVIDIA/numba-cuda), with
`gpu_runtime.DeviceArray` for `cuda.to_device` and gpu_runtime's `forall` and
`create_xoroshiro128p_states` where the docs use numba's.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, NamedTuple

import numpy as np

import gpu_runtime
from gpu_runtime import DeviceArray, create_xoroshiro128p_states
from gpu_runtime.numba_compat.xoroshiro import xoroshiro128p_states


class Result(NamedTuple):
    error: float  # max abs error against the numpy reference
    tolerance: float
    note: str = ""
    docs_ok: bool = True  # the docs' own assertion, where it is not the max error

    @property
    def ok(self) -> bool:
        return self.docs_ok and self.error <= self.tolerance


def _err(got: Any, want: Any) -> float:
    diff = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    return float(diff.max()) if diff.size else 0.0


def vecadd(cache: gpu_runtime.KernelCache) -> Result:
    rng = np.random.default_rng(0)
    a_h, b_h = rng.random(100000), rng.random(100000)
    a, b = DeviceArray.from_numpy(a_h), DeviceArray.from_numpy(b_h)
    c = DeviceArray.empty(a_h.shape, np.float64)
    f = cache.kernel("f", library="vecadd")
    f.forall(len(a))(a, b, c)
    err = _err(c.to_numpy(), a_h + b_h)
    nthreads = 256
    f[(len(a) // nthreads) + 1, nthreads](a, b, DeviceArray.zeros(a_h.shape, np.float64))
    return Result(err, 0.0)


def matmul(cache: gpu_runtime.KernelCache) -> Result:
    errs = []
    for name, (n, k, m) in (("matmul", (4, 4, 4)), ("fast_matmul", (5, 23, 7))):
        x_h = np.arange(n * k).reshape([n, k])
        y_h = np.ones([k, m])
        z = DeviceArray.zeros((n, m), np.float64)
        tpb = 16
        grid_y = math.ceil(max(n, k) / tpb)
        grid_x = math.ceil(max(k, m) / tpb)
        kernel = cache.kernel(name, library="matmul")
        kernel[(grid_x, grid_y), (tpb, tpb)](
            DeviceArray.from_numpy(x_h), DeviceArray.from_numpy(y_h), z
        )
        errs.append(_err(z.to_numpy(), x_h @ y_h))
    return Result(max(errs), 0.0)


def reduction(cache: gpu_runtime.KernelCache) -> Result:
    a = DeviceArray.from_numpy(np.arange(1024))
    cache.kernel("array_sum", library="reduction")[1, len(a)](a)
    return Result(abs(int(a.to_numpy()[0]) - 523776), 0.0)


def globals_(cache: gpu_runtime.KernelCache) -> Result:
    quantities = DeviceArray.from_numpy(np.array([1, 2, 3, 4, 5], dtype=np.float64))
    totals = DeviceArray.zeros(5, np.float64)
    cache.kernel("compute_totals", library="globals")[1, 32](quantities, totals)
    return Result(_err(totals.to_numpy(), [10.8, 54.0, 16.2, 64.8, 162.0]), 1e-9)


def laplace(cache: gpu_runtime.KernelCache) -> Result:
    size, niter, k = 1001, 10000, 0.25
    data = np.zeros(size)
    data[500] = 10000
    buf_0 = DeviceArray.from_numpy(data)
    buf_1 = DeviceArray.zeros(size, np.float64)
    kernel = cache.kernel("solve_heat_equation", library="laplace")
    kernel.forall(len(data))(buf_0, buf_1, niter, k)  # cooperative: grid sync every step
    want = data.copy()
    for _ in range(niter):
        nxt = np.empty_like(want)
        nxt[1:-1] = want[1:-1] + k * (want[:-2] - 2 * want[1:-1] + want[2:])
        nxt[0] = want[0] + k * (want[1] - 2 * want[0])
        nxt[-1] = want[-1] + k * (want[-2] - 2 * want[-1])
        want = nxt
    got = buf_0.to_numpy()
    # fma contraction on the GPU may round differently from numpy: a tolerance, not 0
    total = float(got.sum())
    # the docs: assert_allclose(sum, 10000) (rtol 1e-7)
    return Result(_err(got, want), 1e-6, f"sum {total:.6f}", abs(total - 10000.0) <= 1e-3)


def cg(cache: gpu_runtime.KernelCache) -> Result:
    A = DeviceArray.zeros((1024, 1024), np.int32)
    blockdim = 32
    griddim = A.shape[1] // blockdim
    cache.kernel("sequential_rows", library="cg")[griddim, blockdim](A)  # cooperative
    reference = np.tile(np.arange(1024), (1024, 1)).T
    return Result(_err(A.to_numpy(), reference), 0.0)


def _mc_reference(states: np.ndarray, lower: int, upper: int) -> np.ndarray:
    """What mc_integrator_kernel computes per thread: one xoroshiro128p_uniform_float32 draw
    (numba's xoroshiro128p_next and uint64_to_unit_float32), then 1/x in float64."""
    s0, s1 = states["s0"], states["s1"]
    u = ((s0 + s1) >> np.uint64(11)) * (1.0 / (1 << 53))
    samp = u.astype(np.float32).astype(np.float64) * (upper - lower) + lower
    return (1.0 / samp).astype(np.float32)


def montecarlo(cache: gpu_runtime.KernelCache) -> Result:
    nsamps = 1000000
    kernel = cache.kernel("mc_integrator_kernel", library="montecarlo")
    errs, notes, docs_ok = [], [], True
    for lower, upper, exact in ((1, 2, 0.69315), (2, 3, 0.4055)):
        out = DeviceArray.zeros(nsamps, np.float32)
        rng_states = create_xoroshiro128p_states(nsamps, seed=42)
        kernel.forall(nsamps)(out, rng_states, lower, upper)
        got = out.to_numpy()
        integral = float(got.astype(np.float64).sum()) * (upper - lower) / (nsamps - 1)
        # every sample against the host's draw from the same states (numba's RNG, numpy)
        errs.append(_err(got, _mc_reference(xoroshiro128p_states(nsamps, 42), lower, upper)))
        notes.append(f"[{lower},{upper}] {integral:.7f}")
        docs_ok = docs_ok and abs(integral - exact) <= 0.001  # the docs' assert_allclose
    return Result(max(errs), 0.0, " ".join(notes), docs_ok)


def ffi(cache: gpu_runtime.KernelCache) -> Result:
    np.random.seed(1)
    N = 32
    x = np.random.rand(N).astype(np.float32)
    y = np.random.rand(N).astype(np.float32)
    r = DeviceArray.zeros(N, np.float32)
    cache.kernel("multiply_vectors", library="ffi")[1, 32](
        r, DeviceArray.from_numpy(x), DeviceArray.from_numpy(y)
    )
    return Result(_err(r.to_numpy(), x * y), 0.0)


def cpointer(cache: gpu_runtime.KernelCache) -> Result:
    x = DeviceArray.from_numpy(np.arange(10, dtype=np.uint8))
    x_ptr = x.__cuda_array_interface__["data"][0]
    cache.kernel("add_one", library="cpointer")[1, 32](x_ptr, len(x))
    return Result(_err(x.to_numpy(), np.arange(10, dtype=np.uint8) + 1), 0.0)


# library (gpu_kernel target name) -> case, in the order
CASES: Dict[str, Callable[[gpu_runtime.KernelCache], Result]] = {
    "vecadd": vecadd,
    "matmul": matmul,
    "reduction": reduction,
    "globals": globals_,
    "laplace": laplace,
    "cg": cg,
    "montecarlo": montecarlo,
    "ffi": ffi,
    "cpointer": cpointer,
}
