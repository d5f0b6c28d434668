"""bfloat16 AXPY: ``out[i] = a * x[i] + y[i]`` over bfloat16 vectors, with one rounding.

numba-cuda's ``cuda.bf16`` intrinsics (``hfma``) come from a C++ shim that includes CUDA's
``cuda_bf16.h`` (from the pinned toolchain). bfloat16 needs compute capability 8.0 or newer.
Host arrays are ``ml_dtypes.bfloat16``; the scalar a Python float or an ``ml_dtypes.bfloat16``.
Launch 1-D over ``out.size``.
"""

from numba import cuda
from numba.cuda import bf16


@cuda.jit
def bf16_axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = bf16.hfma(a, x[i], y[i])


AOT_SIGNATURES = {
    "bf16_axpy": ["void(bfloat16[::1], bfloat16, bfloat16[::1], bfloat16[::1])"],
}
