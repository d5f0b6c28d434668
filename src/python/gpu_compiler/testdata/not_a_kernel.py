"""Fixture: AOT_SIGNATURES names a device function and a plain function."""

from numba import cuda


@cuda.jit(device=True)
def helper(x):
    return x * 2


def plain(x):
    return x


@cuda.jit
def real_kernel(out):
    out[0] = helper(1.0)


AOT_SIGNATURES = {"helper": ["float32(float32)"], "real_kernel": ["void(float32[::1])"]}
