import cupy  # noqa: F401  (the cuda13 toolchain does not install it)
from numba import cuda


@cuda.jit
def k(x):
    x[0] = 1


AOT_SIGNATURES = {"k": ["void(float32[::1])"]}
