"""Fixture: helper module with a device function (not a kernel source)."""

from numba import cuda


@cuda.jit(device=True)
def twice(v):
    return v + v
