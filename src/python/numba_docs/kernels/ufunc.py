"""numba-cuda's documentation example ``ex_cuda_ufunc`` (tests/doc_examples/test_ufunc.py in
NVIDIA/numba-cuda): a kernel calling a NumPy ufunc, ``np.sin(x, r)``, on whole arrays from one
thread; numba compiles the ufunc's loop into the kernel (no ufunc dispatch at run time, nothing
of numba on the device). The docs launch it ``f[1, 1](r, x)`` on x = arange(10, float32) - 5
and assert_allclose(r, np.sin(x)).

Changes from the original, for the AOT convention: the kernel is at module level instead of in
the test method, and its signature (float32 vectors, as in the docs) is listed in
AOT_SIGNATURES.
"""

# ex_cuda_ufunc.begin
import numpy as np
from numba import cuda


# A kernel calling a ufunc (sin, in this case)
@cuda.jit
def f(r, x):
    # Compute sin(x) with result written to r
    np.sin(x, r)


# ex_cuda_ufunc.end

AOT_SIGNATURES = {"f": ["void(float32[::1], float32[::1])"]}
