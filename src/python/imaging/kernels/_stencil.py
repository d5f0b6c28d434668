"""Device helpers shared by the stencil kernels (not a kernel module itself).

Kept in its own module to show that a kernel source can import helpers from
its package: the compiler imports kernel sources with the caller's sys.path
roots, so ``from imaging.kernels._stencil import clamp`` works the same in the
build sandbox and at runtime.
"""

from numba import cuda


@cuda.jit(device=True)
def clamp(i, n):
    """Clamp index ``i`` into ``[0, n)`` (replicate-border addressing)."""
    if i < 0:
        return 0
    if i >= n:
        return n - 1
    return i
