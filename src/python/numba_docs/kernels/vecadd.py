"""numba-cuda's documentation example ``ex_vecadd`` (tests/doc_examples/test_vecadd.py in
NVIDIA/numba-cuda), as a kernel source: ``c = a + b`` over float64 vectors.

Changes from the original, all for the AOT convention: the kernel is at module level instead
of inside the test method, and its signature (the docs' arrays come from np.random.random:
float64, C-contiguous) is listed in AOT_SIGNATURES because the docs compile it lazily.
"""

# ex_vecadd.import.begin
import numpy as np  # noqa: F401  (imported by the original example)
from numba import cuda

# ex_vecadd.import.end


# ex_vecadd.kernel.begin
@cuda.jit
def f(a, b, c):
    # like threadIdx.x + (blockIdx.x * blockDim.x)
    tid = cuda.grid(1)
    size = len(c)

    if tid < size:
        c[tid] = a[tid] + b[tid]


# ex_vecadd.kernel.end

AOT_SIGNATURES = {"f": ["void(float64[::1], float64[::1], float64[::1])"]}
