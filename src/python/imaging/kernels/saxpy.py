"""SAXPY: ``out[i] = a * x[i] + y[i]`` over float32 vectors.

The smallest useful numba-cuda kernel: one thread per element, a bounds check,
no shared memory. It is the reference kernel for the AOT pipeline (PTX, cubin,
numba argument ABI). Launch with any 1-D grid covering ``out.size``.
"""

from numba import cuda


@cuda.jit
def saxpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


# Concrete signatures compiled ahead of time (see gpu_compiler.numba.backend).
AOT_SIGNATURES = {
    "saxpy": ["void(float32[::1], float32, float32[::1], float32[::1])"],
}
