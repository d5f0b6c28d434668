"""Fixture: a kernel whose body does not type-check (float + str)."""

from numba import cuda


@cuda.jit
def broken(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + "oops"


AOT_SIGNATURES = {"broken": ["void(float32[::1], float32[::1])"]}
