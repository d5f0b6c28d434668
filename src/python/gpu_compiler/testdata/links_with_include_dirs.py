"""Links numba_docs' ffi/saxpy.cu, whose `#include <add.cuh>` and `<mul.cuh>` are found only
through the target's `include_dirs` (numba's search paths are left unset here)."""

import os

from numba import cuda

here = os.path.dirname(os.path.abspath(__file__))
saxpy_cu = os.path.join(here, "..", "..", "numba_docs", "kernels", "ffi", "saxpy.cu")
saxpy = cuda.declare_device("saxpy", sig="float32(float32, float32, float32)", link=saxpy_cu)


@cuda.jit
def k(a, x, y, res):
    i = cuda.grid(1)
    if i < len(res):
        res[i] = saxpy(a, x[i], y[i])


AOT_SIGNATURES = {"k": ["void(float32, float32[::1], float32[::1], float32[::1])"]}
