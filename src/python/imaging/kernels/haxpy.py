"""Half-precision AXPY: ``out[i] = a * x[i] + y[i]`` over float16 vectors, with one rounding.

numba-cuda's ``cuda.fp16`` intrinsics (``hfma``: a fused multiply-add in half precision) come
from a C++ shim that includes CUDA's ``cuda_fp16.h``: the compile gets it from the pinned
toolchain. Arrays and the scalar are float16 (``np.float16``). Launch 1-D over ``out.size``.
"""

from numba import cuda
from numba.cuda import fp16


@cuda.jit
def haxpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = fp16.hfma(a, x[i], y[i])


AOT_SIGNATURES = {
    "haxpy": ["void(float16[::1], float16, float16[::1], float16[::1])"],
}
