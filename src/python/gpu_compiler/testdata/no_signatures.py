"""Fixture: a kernel module without AOT_SIGNATURES."""

from numba import cuda


@cuda.jit
def scale(out, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] *= a
