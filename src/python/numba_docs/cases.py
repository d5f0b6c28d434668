"""numba-cuda's documentation kernels, launched from a bundle as the docs launch them, each with
its numpy reference.

Each case takes the `KernelCache` and returns a `Result` (max abs error, tolerance): the
inputs, grids and expected values are the docs' own (tests/doc_examples/ in NVIDIA/numba-cuda), with
`gpu_runtime.DeviceArray` for `cuda.to_device` and gpu_runtime's `forall` and
`create_xoroshiro128p_states` where the docs use numba's.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, NamedTuple, Tuple

import numpy as np

import gpu_runtime
from gpu_runtime import DeviceArray, create_xoroshiro128p_states
from gpu_runtime.numba_compat.xoroshiro import _step, xoroshiro128p_states


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


def _random3d_reference(
    states: np.ndarray, tids: np.ndarray, shape: Tuple[int, int, int], stride: Tuple[int, int, int]
) -> Tuple[np.ndarray, np.ndarray]:
    """What random_3d writes for the threads `tids`: (flat indices into the array, values).
    Each thread walks its strided (i, j, k) loops in order, one xoroshiro128p_uniform_float32
    draw from its own state per element; numpy replays those draws for a sample of threads, so
    that the case checks values, not only the docs' mean."""
    sx, sy, sz = stride
    x0, y0, z0 = tids % sx, (tids // sx) % sy, tids // (sx * sy)
    s0, s1 = states["s0"][tids].copy(), states["s1"][tids].copy()
    idx: List[np.ndarray] = []
    val: List[np.ndarray] = []
    for a in range(-(-shape[0] // sz)):
        for b in range(-(-shape[1] // sy)):
            for c in range(-(-shape[2] // sx)):
                i, j, k = z0 + a * sz, y0 + b * sy, x0 + c * sx
                m = (i < shape[0]) & (j < shape[1]) & (k < shape[2])
                if not m.any():
                    continue
                t0, t1 = s0[m], s1[m]
                u = ((t0 + t1) >> np.uint64(11)) * (1.0 / (1 << 53))
                idx.append(np.ravel_multi_index((i[m], j[m], k[m]), shape))
                val.append(u.astype(np.float32))
                _step(t0, t1)
                s0[m], s1[m] = t0, t1
    return np.concatenate(idx), np.concatenate(val)


def random3d(cache: gpu_runtime.KernelCache) -> Result:
    X, Y, Z = 701, 900, 719
    bx, by, bz = 8, 8, 8
    gx, gy, gz = 16, 16, 16
    nthreads = bx * by * bz * gx * gy * gz
    rng_states = create_xoroshiro128p_states(nthreads, seed=1)
    arr = DeviceArray.empty((X, Y, Z), np.float32)
    cache.kernel("random_3d", library="random3d")[(gx, gy, gz), (bx, by, bz)](arr, rng_states)
    host_arr = arr.to_numpy()
    mean = float(host_arr.mean(dtype=np.float64))
    # the docs: 0.49 < mean < 0.51, every value in [0, 1]
    docs_ok = 0.49 < mean < 0.51 and bool(np.all(host_arr <= 1.0)) and bool(np.all(host_arr >= 0.0))
    # every value written by 1 thread in 997 (and the last), against numpy's draws
    tids = np.unique(np.append(np.arange(0, nthreads, 997), nthreads - 1)).astype(np.int64)
    states = xoroshiro128p_states(nthreads, 1)
    idx, want = _random3d_reference(states, tids, (X, Y, Z), (bx * gx, by * gy, bz * gz))
    err = _err(host_arr.reshape(-1)[idx], want)
    return Result(err, 0.0, f"mean {mean:.5f}; {len(idx)} values replayed", docs_ok)


# The docs' click stream: user ids, timestamps (ns) and the session labels they assert.
SESSION_IDS = [1] * 6 + [2] * 3 + [3] * 10 + [4] * 9
SESSION_SEC = [1, 2, 3, 5000, 5001, 5002, 1, 2, 3, 1, 2, 5000, 5001, 10000, 10001, 10002, 10003]
SESSION_SEC += [15000, 150001, 1, 5000, 50001, 15000, 20000, 25000, 25001, 25002, 25003]
SESSION_EXPECT = [0, 0, 0, 3, 3, 3, 6, 6, 6, 9, 9, 11, 11, 13, 13, 13, 13, 17, 18, 19, 20, 21]
SESSION_EXPECT += [21, 23, 24, 24, 24, 24]


def sessionize(cache: gpu_runtime.KernelCache) -> Result:
    ids = DeviceArray.from_numpy(np.array(SESSION_IDS))
    sec = DeviceArray.from_numpy(
        np.array(SESSION_SEC, dtype="datetime64[ns]").astype("int64")  # as the docs cast it
    )
    results = DeviceArray.from_numpy(np.zeros(len(ids)))
    cache.kernel("sessionize", library="sessionize").forall(len(ids))(ids, sec, results)
    # the docs: assert_equal(expect, results)
    return Result(_err(results.to_numpy(), SESSION_EXPECT), 0.0)


def ufunc(cache: gpu_runtime.KernelCache) -> Result:
    x = np.arange(10, dtype=np.float32) - 5
    r = DeviceArray.from_numpy(np.zeros_like(x))
    cache.kernel("f", library="ufunc")[1, 1](r, DeviceArray.from_numpy(x))
    got = r.to_numpy()
    # the docs: assert_allclose(r, np.sin(x)) (rtol 1e-7; float32 sin on the GPU may differ in
    # the last bit from numpy's, which the max error shows)
    docs_ok = bool(np.allclose(got, np.sin(x), rtol=1e-7, atol=0))
    return Result(_err(got, np.sin(x)), 1e-6, "", docs_ok)


def _business_logic(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """cpu_gpu_compat's business_logic, in numpy (int64 in, float64 out, as numba types it)."""
    return 4 * z * (2 * x - (4 * y) / 2 * math.pi)


def cpu_gpu_compat(cache: gpu_runtime.KernelCache) -> Result:
    X_h, Y_h, Z_h = np.array([1, 10, 234]), np.array([2, 2, 4014]), np.array([3, 14, 2211])
    X, Y, Z = (DeviceArray.from_numpy(a) for a in (X_h, Y_h, Z_h))
    results = DeviceArray.from_numpy(np.array([0.0, 0.0, 0.0]))
    cache.kernel("f", library="cpu_gpu_compat").forall(len(X))(results, X, Y, Z)
    got = results.to_numpy()
    # the docs: assert_equal with business_logic on the CPU (the docs' comment:
    # [-126.79644737231007, 416.28324559588634, -218912930.2987788])
    return Result(_err(got, _business_logic(X_h, Y_h, Z_h)), 0.0, f"{got.tolist()}")


def ffi_from_buffer(cache: gpu_runtime.KernelCache) -> Result:
    x = np.arange(10).astype(np.float32)
    r = DeviceArray.empty((), np.float32)  # the docs' np.ndarray((), dtype=np.float32)
    cache.kernel("reduction_caller", library="ffi_from_buffer")[1, 1](r, DeviceArray.from_numpy(x))
    # the docs: assert_allclose(np.sum(x), r[()]) (rtol 1e-7)
    actual = float(r.to_numpy()[()])
    return Result(_err(actual, np.sum(x)), 0.0, f"sum {actual}")


def ffi_extra_includes(cache: gpu_runtime.KernelCache) -> Result:
    size = 10_000
    a = 3.0
    x = np.ones((size,), dtype="float32")
    y = np.ones((size,), dtype="float32")
    r = DeviceArray.zeros(size, np.float32)
    block_size = 32
    num_blocks = (size // block_size) + 1
    cache.kernel("vector_saxpy", library="ffi_extra_includes")[num_blocks, block_size](
        np.float32(a), DeviceArray.from_numpy(x), DeviceArray.from_numpy(y), r
    )
    # the docs: np.testing.assert_equal(R, a * X + Y)
    return Result(_err(r.to_numpy(), a * x + y), 0.0)


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
    "random3d": random3d,
    "sessionize": sessionize,
    "ufunc": ufunc,
    "cpu_gpu_compat": cpu_gpu_compat,
    "ffi_from_buffer": ffi_from_buffer,
    "ffi_extra_includes": ffi_extra_includes,
}
