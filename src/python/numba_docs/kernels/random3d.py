"""numba-cuda's documentation example ``ex_3d_grid`` (tests/doc_examples/test_random.py in
NVIDIA/numba-cuda): a 3-D grid of 16x16x16 blocks of 8x8x8 threads fills a (701, 900, 719)
float32 array with xoroshiro128p uniform draws, each thread drawing from its own state (its
linearized index in the grid) in a strided loop; the docs assert the mean is in (0.49, 0.51)
and every value in [0, 1].

Changes from the original, for the AOT convention: the kernel is at module level instead of in
the test method, and its signature (the docs' ``cuda.device_array((X, Y, Z), np.float32)``, a
C-contiguous 3-D array, and the states array) is listed in AOT_SIGNATURES with numba type
objects, as the record type of the states has no short string form. The host-side launch (the
array dimensions, ``create_xoroshiro128p_states``) is the case in numba_docs.cases.
"""

# magictoken.ex_3d_grid.begin
from numba import cuda
from numba.cuda.random import (  # noqa: F401  (create_... is host-side, imported by the docs)
    create_xoroshiro128p_states,
    xoroshiro128p_uniform_float32,
)
import numpy as np  # noqa: F401  (imported by the original example)


@cuda.jit
def random_3d(arr, rng_states):
    # Per-dimension thread indices and strides
    startx, starty, startz = cuda.grid(3)
    stridex, stridey, stridez = cuda.gridsize(3)

    # Linearized thread index
    tid = (startz * stridey * stridex) + (starty * stridex) + startx

    # Use strided loops over the array to assign a random value to each entry
    for i in range(startz, arr.shape[0], stridez):
        for j in range(starty, arr.shape[1], stridey):
            for k in range(startx, arr.shape[2], stridex):
                arr[i, j, k] = xoroshiro128p_uniform_float32(rng_states, tid)


# magictoken.ex_3d_grid.end

from numba.cuda import float32  # noqa: E402
from numba.cuda.random import xoroshiro128p_type  # noqa: E402

AOT_SIGNATURES = {"random_3d": [(float32[:, :, ::1], xoroshiro128p_type[::1])]}
