"""Fixture: a kernel calling a device function from a helper module.

Compiling it needs no GPU even though numba-cuda compiles device functions for
"the current device": gpu_compiler supplies the target capability.
"""

from numba import cuda

from gpu_compiler.testdata.helper_mod import twice


@cuda.jit
def apply_twice(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = twice(x[i])


AOT_SIGNATURES = {
    "apply_twice": [
        "void(float32[::1], float32[::1])",
        "void(float64[::1], float64[::1])",
    ],
}
