"""numba-cuda's documentation example ``ex_cpu_gpu_compat`` (tests/doc_examples/
test_cpu_gpu_compat.py in NVIDIA/numba-cuda): a ``@numba.jit`` function, ``business_logic``,
called unchanged from a CUDA kernel. The docs launch ``f.forall(3)`` on int64 X, Y, Z and a
float64 result, and assert_equal it with ``business_logic`` run on the CPU.

Changes from the original, for the AOT convention: ``business_logic`` and the kernel are at
module level instead of in the test method, and the kernel's signature (the docs'
``cuda.to_device`` of Python int and float lists: int64 and float64, C-contiguous) is listed in
AOT_SIGNATURES. The host-side print and launch are the case in numba_docs.cases.
"""

# ex_cpu_gpu_compat.import.begin
from math import pi

import numba
from numba import cuda

# ex_cpu_gpu_compat.import.end


# ex_cpu_gpu_compat.define.begin
@numba.jit
def business_logic(x, y, z):
    return 4 * z * (2 * x - (4 * y) / 2 * pi)


# ex_cpu_gpu_compat.define.end


# ex_cpu_gpu_compat.usegpu.begin
@cuda.jit
def f(res, xarr, yarr, zarr):
    tid = cuda.grid(1)
    if tid < len(xarr):
        # The function decorated with numba.jit may be directly reused
        res[tid] = business_logic(xarr[tid], yarr[tid], zarr[tid])


# ex_cpu_gpu_compat.usegpu.end

AOT_SIGNATURES = {"f": ["void(float64[::1], int64[::1], int64[::1], int64[::1])"]}
